package cdi_test

import (
	"os"
	"path"
	"strings"
	"testing"

	"github.com/nodeprep/nodeprep/cdi"
)

// TestGraphicsCoreLibraries: a spec that mounts the NVIDIA EGL and GLX
// vendor libraries but not the driver's OpenGL/EGL core libraries
// (nvidia-container-toolkit#1908: EGL falls back to Mesa without an error)
// is an error naming each missing library, the issue and the file cdi patch
// mounts, although no DT_NEEDED of this tree's libraries names them; patch
// mounts each next to the vendor library, in the folder the ldcache hook
// covers, and the patched spec checks clean. A core library the driver does
// not ship is not required.
func TestGraphicsCoreLibraries(t *testing.T) {
	t.Parallel()
	const ver = "550.54.15"
	tests := []struct {
		name    string
		drop    []string // core libraries the spec does not mount
		noHost  []string // core libraries removed from the host's driver
		missing []string // what check must name
	}{
		{name: "all four missing (#1908)", drop: []string{"libnvidia-eglcore", "libnvidia-glcore", "libnvidia-glsi", "libnvidia-tls"},
			missing: []string{"libnvidia-eglcore", "libnvidia-glcore", "libnvidia-glsi", "libnvidia-tls"}},
		{name: "one missing", drop: []string{"libnvidia-glsi"}, missing: []string{"libnvidia-glsi"}},
		{name: "a driver without libnvidia-tls", drop: []string{"libnvidia-eglcore", "libnvidia-tls"}, noHost: []string{"libnvidia-tls"}, missing: []string{"libnvidia-eglcore"}},
		{name: "none missing"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			root := hostTree(t, "nixos-h200")
			for _, l := range tt.drop {
				dropMount(t, root, nvStore+"/lib/"+l+".so."+ver)
			}
			for _, l := range tt.noHost {
				if err := os.Remove(mustPath(t, root, nvStore+"/lib/"+l+".so."+ver)); err != nil {
					t.Fatal(err)
				}
				if err := os.Remove(mustPath(t, root, "/run/opengl-driver/lib") + "/" + l + ".so." + ver); err != nil {
					t.Fatal(err)
				}
			}
			check := checkNixOS(t, root)
			n := 0
			for _, f := range check.Findings {
				if f.Code == cdi.CodeMissingDriverLibrary && strings.Contains(f.Message, "OpenGL/EGL core") {
					n++
				}
			}
			if n != len(tt.missing) {
				t.Errorf("%d core library findings, want %d: %v", n, len(tt.missing), check.Findings)
			}
			for _, l := range tt.missing {
				want := nvStore + "/lib/libEGL_nvidia.so." + ver + " needs " + l + ".so." + ver + ", one of the driver's OpenGL/EGL core libraries, which no mount puts where the dynamic linker looks in the container: EGL then falls back to Mesa without an error (nvidia-container-toolkit#1908); nodeprep cdi patch mounts /run/opengl-driver/lib/" + l + ".so." + ver
				if !hasFinding(check.Findings, cdi.CodeMissingDriverLibrary, want) {
					t.Errorf("no finding %q: %v", want, check.Findings)
				}
			}
			spec := patchNixOS(t, root)
			for _, l := range tt.missing {
				cp := path.Join(nvStore, "lib", l+".so."+ver)
				if m := mountAt(spec, cp); m == nil || m.HostPath != "/run/opengl-driver/lib/"+l+".so."+ver {
					t.Errorf("patch did not mount %s at %s: %+v", l, cp, m)
				}
			}
			for _, l := range tt.noHost {
				if mountAt(spec, path.Join(nvStore, "lib", l+".so."+ver)) != nil {
					t.Errorf("patch mounted %s, which the driver does not ship", l)
				}
			}
			if after := checkNixOS(t, root); after.Findings.Errors() != 0 {
				t.Errorf("check after patch: %v", after.Findings)
			}
		})
	}
}

// TestGraphicsCoreNeedsVendorLibrary: the core libraries are required only
// of a spec that mounts one of the vendor libraries (a CUDA-only spec needs
// none of them).
func TestGraphicsCoreNeedsVendorLibrary(t *testing.T) {
	t.Parallel()
	root := hostTree(t, "nixos-h200")
	for _, l := range []string{"libEGL_nvidia", "libGLX_nvidia", "libGLESv2_nvidia", "libnvidia-eglcore", "libnvidia-glcore", "libnvidia-glsi", "libnvidia-tls"} {
		dropMount(t, root, nvStore+"/lib/"+l+".so.550.54.15")
	}
	g, err := cdi.Discover(root, cdi.DiscoverOptions{DriverRoot: "/run/opengl-driver", Arch: "amd64"})
	if err != nil {
		t.Fatal(err)
	}
	_, spec := loadSpec(t, root)
	// Without the graphics files the spec is CUDA only: nothing of
	// nodeprep's mounts brings a vendor library either.
	g.Files = nil
	for _, f := range cdi.Check(spec, g, root, nil) {
		if strings.Contains(f.Message, "OpenGL/EGL core") {
			t.Errorf("a spec without a vendor library: %v", f)
		}
	}
}
