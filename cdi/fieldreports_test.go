package cdi_test

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	specs "tags.cncf.io/container-device-interface/specs-go"

	"github.com/nodeprep/nodeprep/cdi"
	"github.com/nodeprep/nodeprep/nodeprep/fault"
	"github.com/nodeprep/nodeprep/nodeprep/hostfs"
)

const nvStore = "/nix/store/4k9wq2n1x8b7z5c3v6m0p1s2d3f4g5h6-nvidia-x11-550.54.15-6.6.30"

func codes(fs cdi.Findings) []string {
	var out []string
	for _, f := range fs {
		out = append(out, f.Code)
	}
	return out
}

func hasFinding(fs cdi.Findings, code, substr string) bool {
	return slices.ContainsFunc(fs, func(f cdi.Finding) bool { return f.Code == code && strings.Contains(f.Message, substr) })
}

func mountAt(spec *specs.Spec, containerPath string) *specs.Mount {
	for _, m := range spec.ContainerEdits.Mounts {
		if m.ContainerPath == containerPath {
			return m
		}
	}
	return nil
}

func mustPath(t testing.TB, root *hostfs.Root, p string) string {
	t.Helper()
	full, err := root.Path(p)
	if err != nil {
		t.Fatal(err)
	}
	return full
}

func writeSpec(t *testing.T, root *hostfs.Root, spec *specs.Spec) {
	t.Helper()
	data, err := cdi.Encode(spec, cdi.FormatJSON)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(mustPath(t, root, specPath), data, 0o644); err != nil {
		t.Fatal(err)
	}
}

// addMounts adds mounts to root's spec, after the ones it has.
func addMounts(t *testing.T, root *hostfs.Root, mounts ...*specs.Mount) {
	t.Helper()
	_, spec := loadSpec(t, root)
	spec.ContainerEdits.Mounts = append(spec.ContainerEdits.Mounts, mounts...)
	writeSpec(t, root, spec)
}

// checkNixOS checks root's spec with the NixOS amd64 options.
func checkNixOS(t *testing.T, root *hostfs.Root) *cdi.CheckResult {
	t.Helper()
	check, err := cdi.CheckFile(root, nixosOptions("amd64"))
	if err != nil {
		t.Fatal(err)
	}
	return check
}

// patchNixOS patches root's spec in place with the NixOS amd64 options and
// returns the spec as written.
func patchNixOS(t *testing.T, root *hostfs.Root) *specs.Spec {
	t.Helper()
	if _, err := cdi.PatchFile(root, nixosOptions("amd64"), false); err != nil {
		t.Fatal(err)
	}
	_, spec := loadSpec(t, root)
	return spec
}

// F1: the NixOS spec carries the libraries but no graphics manifests.
func TestF1ManifestsMissing(t *testing.T) {
	t.Parallel()
	root := hostTree(t, "nixos-h200")
	opts := nixosOptions("amd64")
	check, err := cdi.CheckFile(root, opts)
	if err != nil {
		t.Fatal(err)
	}
	if !hasFinding(check.Findings, cdi.CodeMissingICD, "nvidia_icd.x86_64.json") {
		t.Errorf("check does not name the missing ICD manifest: %v", codes(check.Findings))
	}
	if !hasFinding(check.Findings, cdi.CodeMissingEGLVendor, "10_nvidia.json") {
		t.Errorf("check does not name the missing EGL vendor manifest: %v", codes(check.Findings))
	}

	_, orig := loadSpec(t, root)
	if _, err := cdi.PatchFile(root, opts, false); err != nil {
		t.Fatal(err)
	}
	_, patched := loadSpec(t, root)
	if m := mountAt(patched, "/etc/vulkan/icd.d/nvidia_icd.json"); m == nil || m.HostPath != "/run/opengl-driver/share/vulkan/icd.d/nvidia_icd.x86_64.json" {
		t.Errorf("ICD mount = %+v", m)
	}
	if m := mountAt(patched, "/usr/share/glvnd/egl_vendor.d/10_nvidia.json"); m == nil || !slices.Equal(m.Options, cdi.MountOptions) || m.Type != "" {
		t.Errorf("EGL vendor mount = %+v", m)
	}
	// Nothing else touched: devices, env, device nodes, hooks, and the
	// original mounts in order.
	if !equalJSON(t, orig.Devices, patched.Devices) || !equalJSON(t, orig.ContainerEdits.Hooks, patched.ContainerEdits.Hooks) ||
		!equalJSON(t, orig.ContainerEdits.DeviceNodes, patched.ContainerEdits.DeviceNodes) || !slices.Equal(orig.ContainerEdits.Env, patched.ContainerEdits.Env) {
		t.Errorf("patch changed something besides mounts")
	}
	if !equalJSON(t, orig.ContainerEdits.Mounts, patched.ContainerEdits.Mounts[:len(orig.ContainerEdits.Mounts)]) {
		t.Errorf("patch changed existing mounts")
	}
}

// F2: an ICD naming a library by absolute store path that no mount covers.
func TestF2AbsoluteLibraryPath(t *testing.T) {
	t.Parallel()
	root := hostTree(t, "nixos-h200")
	lib := nvStore + "/lib/libGLX_nvidia.so.0"
	// The spec mounts the ICD (by hand, as some users do) but not the
	// .so.0 link the manifest names.
	addMounts(t, root, &specs.Mount{
		HostPath: "/run/opengl-driver/share/vulkan/icd.d/nvidia_icd.x86_64.json", ContainerPath: "/etc/vulkan/icd.d/nvidia_icd.json", Options: cdi.MountOptions,
	})
	check := checkNixOS(t, root)
	if !hasFinding(check.Findings, cdi.CodeUnresolvedLibrary, lib) {
		t.Errorf("check does not report %s as unresolved: %v", lib, check.Findings)
	}
	if hasFinding(check.Findings, cdi.CodeMissingICD, "") {
		t.Errorf("check reports the ICD missing although it is mounted")
	}
	if hasFinding(check.Findings, cdi.CodeUnresolvedLibrary, "libEGL_nvidia.so.0") {
		t.Errorf("libEGL_nvidia.so.0 resolves through the ldcache hook folder but was reported")
	}
	patched := patchNixOS(t, root)
	// At the path the manifest names, from the stable driver-root path
	// that resolves to the same file (it survives a driver switch).
	if m := mountAt(patched, lib); m == nil || m.HostPath != "/run/opengl-driver/lib/libGLX_nvidia.so.0" {
		t.Errorf("patch did not mount %s at its own path from the driver root: %+v", lib, m)
	}
	if n := len(slices.DeleteFunc(slices.Clone(patched.ContainerEdits.Mounts), func(m *specs.Mount) bool { return !strings.HasPrefix(m.ContainerPath, "/etc/vulkan/icd.d/") })); n != 1 {
		t.Errorf("%d ICD mounts, want exactly 1", n)
	}
}

// F3: manifest names and places vary by architecture and driver.
func TestF3Discovery(t *testing.T) {
	t.Parallel()
	tests := []struct {
		scenario, arch, wantICD string
		wantRoles               map[cdi.Role]int
	}{
		{"nixos-h200", "amd64", "nvidia_icd.x86_64.json", map[cdi.Role]int{cdi.RoleICD: 1, cdi.RoleLayer: 1, cdi.RoleEGLVendor: 1, cdi.RoleEGLPlatform: 2, cdi.RoleGBM: 1, cdi.RoleGlvnd: 4}},
		{"nixos-gh200", "arm64", "nvidia_icd.aarch64.json", map[cdi.Role]int{cdi.RoleICD: 1, cdi.RoleLayer: 1, cdi.RoleEGLVendor: 1, cdi.RoleEGLPlatform: 2, cdi.RoleGBM: 1, cdi.RoleGlvnd: 4}},
		{"nixos-gh200", "amd64", "", map[cdi.Role]int{cdi.RoleLayer: 1, cdi.RoleEGLVendor: 1, cdi.RoleEGLPlatform: 2, cdi.RoleGBM: 1, cdi.RoleGlvnd: 4}},
	}
	for _, tt := range tests {
		t.Run(tt.scenario+"/"+tt.arch, func(t *testing.T) {
			t.Parallel()
			root := hostTree(t, tt.scenario)
			g, err := cdi.Discover(root, cdi.DiscoverOptions{DriverRoot: "/run/opengl-driver", Arch: tt.arch})
			if err != nil {
				t.Fatal(err)
			}
			got := map[cdi.Role]int{}
			for _, f := range g.Files {
				got[f.Role]++
				if f.Role == cdi.RoleICD && filepath.Base(f.HostPath) != tt.wantICD {
					t.Errorf("ICD = %s, want %s", f.HostPath, tt.wantICD)
				}
				if !strings.HasPrefix(f.HostPath, "/run/opengl-driver/") {
					t.Errorf("hostPath %s is not the stable path under the driver root", f.HostPath)
				}
			}
			if !equalJSON(t, got, tt.wantRoles) {
				t.Errorf("roles = %v, want %v", got, tt.wantRoles)
			}
			if (tt.wantICD == "") != hasFinding(g.Findings, cdi.CodeNoICDOnHost, "") {
				t.Errorf("no-icd-on-host finding mismatch: %v", g.Findings)
			}
		})
	}
	// Both the machine-specific and the plain ICD: exactly one is taken.
	t.Run("one-icd", func(t *testing.T) {
		t.Parallel()
		root := hostTree(t, "nixos-h200")
		dir := mustPath(t, root, "/run/opengl-driver/share/vulkan/icd.d")
		data, _ := os.ReadFile(filepath.Join(dir, "nvidia_icd.x86_64.json"))
		if err := os.WriteFile(filepath.Join(dir, "nvidia_icd.json"), data, 0o644); err != nil {
			t.Fatal(err)
		}
		g, err := cdi.Discover(root, cdi.DiscoverOptions{DriverRoot: "/run/opengl-driver", Arch: "amd64"})
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for _, f := range g.Files {
			if f.Role == cdi.RoleICD {
				n++
			}
		}
		if n != 1 {
			t.Errorf("%d ICDs discovered, want 1", n)
		}
	})
	// The implicit layer names libnvidia-present.so.<ver> by soname. The
	// field report's spec did not mount it; the real generator (nvidia-ctk
	// 1.20, nixos-h200) does, in the driver's folder its update-ldcache
	// hook covers, so the linker finds it there and patch adds nothing;
	// without that mount patch mounts it where the linker looks.
	t.Run("layer-library", func(t *testing.T) {
		t.Parallel()
		const present = "/nix/store/4k9wq2n1x8b7z5c3v6m0p1s2d3f4g5h6-nvidia-x11-550.54.15-6.6.30/lib/libnvidia-present.so.550.54.15"
		root := hostTree(t, "nixos-h200")
		spec := patchNixOS(t, root)
		if mountAt(spec, present) == nil || mountAt(spec, "/usr/lib/x86_64-linux-gnu/libnvidia-present.so.550.54.15") != nil {
			t.Errorf("the generator's mount of libnvidia-present is not the only one")
		}

		root = hostTree(t, "nixos-h200")
		dropMount(t, root, present)
		spec = patchNixOS(t, root)
		if mountAt(spec, "/usr/lib/x86_64-linux-gnu/libnvidia-present.so.550.54.15") == nil {
			t.Errorf("libnvidia-present not mounted where the linker looks once the generator's mount is gone")
		}
	})
}

// F4: the EGL vendor manifest is reachable only at its store path.
func TestF4VendorManifestAtStorePath(t *testing.T) {
	t.Parallel()
	root := hostTree(t, "nixos-h200")
	addMounts(t, root, &specs.Mount{HostPath: nvStore + "/share", ContainerPath: nvStore + "/share", Options: cdi.MountOptions})
	check := checkNixOS(t, root)
	if !hasFinding(check.Findings, cdi.CodeMissingEGLVendor, "") {
		t.Errorf("a vendor manifest only under the store path was not reported: %v", codes(check.Findings))
	}
	patched := patchNixOS(t, root)
	if mountAt(patched, "/usr/share/glvnd/egl_vendor.d/10_nvidia.json") == nil {
		t.Errorf("vendor manifest not added at the FHS path")
	}
}

// F5: the glvnd dispatch libraries go in as one set, never a subset.
func TestF5GlvndSet(t *testing.T) {
	t.Parallel()
	t.Run("host-partial", func(t *testing.T) {
		t.Parallel()
		root := hostTree(t, "nixos-h200")
		if err := os.Remove(mustPath(t, root, "/run/opengl-driver/lib") + "/libOpenGL.so.0"); err != nil {
			t.Fatal(err)
		}
		spec := patchNixOS(t, root)
		for _, lib := range cdi.GlvndLibraries {
			if mountAt(spec, "/usr/lib/x86_64-linux-gnu/"+lib) != nil {
				t.Errorf("%s injected from a partial set", lib)
			}
		}
		g, _ := cdi.Discover(root, cdi.DiscoverOptions{DriverRoot: "/run/opengl-driver", Arch: "amd64"})
		if !hasFinding(g.Findings, cdi.CodePartialGlvnd, "libOpenGL.so.0") {
			t.Errorf("no partial-glvnd warning naming libOpenGL.so.0: %v", g.Findings)
		}
	})
	t.Run("spec-partial", func(t *testing.T) {
		t.Parallel()
		root := hostTree(t, "nixos-h200")
		addMounts(t, root, &specs.Mount{HostPath: "/run/opengl-driver/lib/libEGL.so.1", ContainerPath: "/usr/lib/x86_64-linux-gnu/libEGL.so.1", Options: cdi.MountOptions})
		check := checkNixOS(t, root)
		if !hasFinding(check.Findings, cdi.CodePartialGlvnd, "1 of the 4") {
			t.Errorf("check does not flag the partial set: %v", codes(check.Findings))
		}
	})
	t.Run("mixed-builds", func(t *testing.T) {
		t.Parallel()
		root := hostTree(t, "nixos-h200")
		lib := mustPath(t, root, "/run/opengl-driver/lib")
		other := mustPath(t, root, "/nix/store/0000000000000000000000000000000-libglvnd-1.6.0/lib")
		if err := os.MkdirAll(other, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(other, "libGLX.so.0"), nil, 0o644); err != nil {
			t.Fatal(err)
		}
		os.Remove(filepath.Join(lib, "libGLX.so.0"))
		if err := os.Symlink("/nix/store/0000000000000000000000000000000-libglvnd-1.6.0/lib/libGLX.so.0", filepath.Join(lib, "libGLX.so.0")); err != nil {
			t.Fatal(err)
		}
		g, _ := cdi.Discover(root, cdi.DiscoverOptions{DriverRoot: "/run/opengl-driver", Arch: "amd64"})
		if !hasFinding(g.Findings, cdi.CodePartialGlvnd, "different builds") {
			t.Errorf("libraries from two builds accepted: %v", g.Findings)
		}
	})
}

// TestMissingDeviceFix: a missing-device finding says how to make the
// spec serve the name: generate it with the device-name strategy that
// makes such names (uuid for GPU-/MIG-<uuid>, index for 0 and 0:1), on
// NixOS and with nvidia-ctk, or ask for the names the spec has.
func TestMissingDeviceFix(t *testing.T) {
	t.Parallel()
	spec := &specs.Spec{Version: "0.5.0", Kind: "nvidia.com/gpu", Devices: []specs.Device{{Name: "all"}}}
	for name, strategy := range map[string]string{
		"GPU-00000000-0000-0000-0000-000000000001": "uuid",
		"MIG-00000000-0000-0000-0000-000000000002": "uuid",
		"0":   "index",
		"0:1": "index",
	} {
		fs := cdi.CheckDevices(spec, []cdi.ExpectedDevice{{Name: name}})
		if len(fs) != 1 || fs[0].Code != cdi.CodeMissingDevice {
			t.Fatalf("%s: findings %v, want one %s", name, fs, cdi.CodeMissingDevice)
		}
		for _, want := range []string{
			"nvidia.com/gpu=" + name + " is not in the spec",
			`hardware.nvidia-container-toolkit.device-name-strategy = "` + strategy + `"`,
			"nvidia-ctk cdi generate --device-name-strategy=" + strategy,
			"cdi.deviceNames",
		} {
			if !strings.Contains(fs[0].Message, want) {
				t.Errorf("%s: %q lacks %q", name, fs[0].Message, want)
			}
		}
	}
}

// F6: the consumer asks for devices by UUID; the spec names them by index.
func TestF6DeviceNames(t *testing.T) {
	t.Parallel()
	root := hostTree(t, "nixos-h200")
	expect := []cdi.ExpectedDevice{
		{Name: "GPU-00000000-0000-0000-0000-000000000001", DeviceNodes: []string{"/dev/nvidia0"}},
		{Name: "GPU-00000000-0000-0000-0000-000000000002", DeviceNodes: []string{"/dev/nvidia1"}},
		{Name: "1", DeviceNodes: []string{"/dev/nvidia1"}},
		{Name: "2", DeviceNodes: []string{"/dev/nvidia7"}},
	}
	opts := nixosOptions("amd64")
	opts.Expect = expect
	check, err := cdi.CheckFile(root, opts)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"nvidia.com/gpu=GPU-00000000-0000-0000-0000-000000000001", "nvidia.com/gpu=GPU-00000000-0000-0000-0000-000000000002"} {
		if !hasFinding(check.Findings, cdi.CodeMissingDevice, want) {
			t.Errorf("missing device %s not reported: %v", want, check.Findings)
		}
	}
	if hasFinding(check.Findings, cdi.CodeMissingDevice, "nvidia.com/gpu=1 ") {
		t.Errorf("device 1 exists but was reported")
	}
	if !hasFinding(check.Findings, cdi.CodeMissingDeviceNode, "nvidia.com/gpu=2 does not carry /dev/nvidia7") {
		t.Errorf("wrong device node not reported: %v", check.Findings)
	}
	_, before := loadSpec(t, root)
	after := patchNixOS(t, root)
	if !equalJSON(t, before.Devices, after.Devices) {
		t.Errorf("patch changed the devices")
	}
}

// F7: cdiVersion lower than the fields need.
func TestF7Version(t *testing.T) {
	t.Parallel()
	tests := []struct{ declared, want string }{
		{"0.4.0", "0.5.0"}, // hostPath on a device node needs 0.5.0
		{"0.5.0", "0.5.0"},
		{"0.8.0", "0.8.0"}, // never lowered
		{"1.0.0", "1.0.0"},
	}
	for _, tt := range tests {
		t.Run(tt.declared, func(t *testing.T) {
			t.Parallel()
			root := hostTree(t, "broken-low-version")
			_, spec := loadSpec(t, root)
			spec.Version = tt.declared
			writeSpec(t, root, spec)
			check := checkNixOS(t, root)
			if got := hasFinding(check.Findings, cdi.CodeVersionTooLow, ""); got != (tt.declared != tt.want) {
				t.Errorf("version-too-low finding = %v for %s", got, tt.declared)
			}
			patched := patchNixOS(t, root)
			if patched.Version != tt.want {
				t.Errorf("cdiVersion = %s, want %s", patched.Version, tt.want)
			}
		})
	}
	// An edit whose result the CDI library refuses is never written.
	t.Run("invalid-result", func(t *testing.T) {
		t.Parallel()
		root := hostTree(t, "nixos-h200")
		_, spec := loadSpec(t, root)
		spec.Kind = "nvidia.com/Not A Class!"
		writeSpec(t, root, spec)
		before := readFile(t, root, specPath)
		_, err := cdi.PatchFile(root, nixosOptions("amd64"), false)
		if !errors.Is(err, fault.ErrMalformed) || !strings.Contains(err.Error(), "invalid") {
			t.Fatalf("err = %v, want a malformed-input error from validation", err)
		}
		if !bytes.Equal(before, readFile(t, root, specPath)) {
			t.Errorf("an invalid result was written")
		}
	})
}

// F8: a device with no container edits.
func TestF8EmptyDevice(t *testing.T) {
	t.Parallel()
	root := hostTree(t, "broken-empty-device")
	check := checkNixOS(t, root)
	if !hasFinding(check.Findings, cdi.CodeDeviceNoEdits, "device demo1 has no container edits") {
		t.Errorf("check: %v", check.Findings)
	}
	before := readFile(t, root, specPath)
	_, err := cdi.PatchFile(root, nixosOptions("amd64"), false)
	if !errors.Is(err, fault.ErrMalformed) || !strings.Contains(err.Error(), "demo1") {
		t.Fatalf("err = %v", err)
	}
	if !bytes.Equal(before, readFile(t, root, specPath)) {
		t.Errorf("spec changed")
	}
}

// dropMount removes the spec's top-level mount of hostPath, which the
// test needs to exist.
func dropMount(t *testing.T, root *hostfs.Root, hostPath string) {
	t.Helper()
	_, spec := loadSpec(t, root)
	n := len(spec.ContainerEdits.Mounts)
	spec.ContainerEdits.Mounts = slices.DeleteFunc(spec.ContainerEdits.Mounts, func(m *specs.Mount) bool { return m.HostPath == hostPath })
	if len(spec.ContainerEdits.Mounts) == n {
		t.Fatalf("the spec does not mount %s", hostPath)
	}
	writeSpec(t, root, spec)
}
