package cdi_test

import (
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	specs "tags.cncf.io/container-device-interface/specs-go"

	"github.com/nodeprep/nodeprep/cdi"
	"github.com/nodeprep/nodeprep/nodeprep/hostfs"
	"github.com/nodeprep/nodeprep/nodeprep/testenv/upstream"
)

// TestRealLdcacheGlibc runs the real update-ldcache hook of both pinned
// toolkits, with this machine's ldconfig, on a container root that has the
// spec's mounts bind-mounted over an image carrying its own libc.so.6, and
// reads the linker cache it wrote: with a glibc in a folder the hook adds
// (ldcache-glibc-folder, ldcache-glibc-libc) the first libc.so.6 of the
// cache — the one the image's dynamic loader takes — is the host's Nix one
// (NVIDIA/k8s-device-plugin#1182), and nodeprep says ldcache-glibc; with
// glibc mounted outside the hook's folders (nixos-h200) it is the image's,
// and nodeprep says nothing. The hosts' libc.so.6 is this machine's, so that
// ldconfig takes it for a libc6 library.
func TestRealLdcacheGlibc(t *testing.T) {
	upstream.NeedPrivateMounts(t, "binding mounts")
	ldconfig, err := exec.LookPath("ldconfig")
	if err != nil {
		upstream.Unavailable(t, fmt.Errorf("this machine's ldconfig: %w", err))
	}
	libc, err := filepath.EvalSymlinks("/lib/x86_64-linux-gnu/libc.so.6")
	if err != nil {
		upstream.Unavailable(t, fmt.Errorf("this machine's libc.so.6: %w", err))
	}
	for _, tk := range upstream.Toolkits {
		hook := upstream.Tool(t, tk, "nvidia-cdi-hook")
		for _, tt := range []struct {
			scenario string
			shadowed bool
		}{{"ldcache-glibc-folder", true}, {"ldcache-glibc-libc", true}, {"nixos-h200", false}} {
			t.Run(tk+"/"+tt.scenario, func(t *testing.T) {
				root := hostTree(t, tt.scenario)
				copyFile(t, libc, mustPath(t, root, glibcStore+"/lib/libc.so.6"))
				_, spec := loadSpec(t, root)
				g, err := cdi.Discover(root, cdi.DiscoverOptions{DriverRoot: "/run/opengl-driver", Arch: "amd64"})
				if err != nil {
					t.Fatal(err)
				}
				said := hasFinding(cdi.Check(spec, g, root, nil), cdi.CodeLdcacheGlibc, "")
				first, out := firstLibc(t, root, spec, hook, ldconfig, libc)
				host := strings.HasPrefix(first, glibcStore+"/")
				if host != tt.shadowed || said != tt.shadowed {
					t.Errorf("the cache's first libc.so.6 is %q (the host's: %v), nodeprep says ldcache-glibc: %v; want both %v\n%s", first, host, said, tt.shadowed, out)
				}
			})
		}
	}
}

// TestRealLdcacheSoname runs the real update-ldcache hook of both pinned
// toolkits on the 1.17.8 generator's spec of nixos-h200-ctk117, which mounts
// libcuda.so.<version> (its SONAME libcuda.so.1) into the driver's store
// folder and leaves the soname to the hook, with this machine's ldconfig,
// and reads whether the cache it wrote resolves libcuda.so.1 to that
// folder. In an image with /etc/ld.so.conf (every Debian and Ubuntu image)
// both do. In one without it (distroless images) 1.17.8's hook writes the
// folder into /etc/ld.so.conf.d/ and runs ldconfig -f /etc/ld.so.conf,
// which reads no drop-in: no libcuda.so.1. 1.20.2's hook creates the file
// first (NVIDIA/nvidia-container-toolkit#1459).
func TestRealLdcacheSoname(t *testing.T) {
	upstream.NeedPrivateMounts(t, "binding mounts")
	ldconfig, err := exec.LookPath("ldconfig")
	if err != nil {
		upstream.Unavailable(t, fmt.Errorf("this machine's ldconfig: %w", err))
	}
	const want = nvStore + "/lib/libcuda.so.1"
	for _, tt := range []struct {
		toolkit  string
		ldsoConf bool
		resolves bool
	}{
		{upstream.Toolkit117, true, true},
		{upstream.Toolkit117, false, false},
		{upstream.Toolkit120, true, true},
		{upstream.Toolkit120, false, true},
	} {
		t.Run(fmt.Sprintf("%s/ld.so.conf=%v", tt.toolkit, tt.ldsoConf), func(t *testing.T) {
			hook := upstream.Tool(t, tt.toolkit, "nvidia-cdi-hook")
			root := hostTree(t, "nixos-h200-ctk117")
			_, spec := loadSpec(t, root)
			out := runLdcacheHook(t, root, spec, hook, ldconfig, tt.ldsoConf, func(string) {})
			got := cacheEntry(out, "libcuda.so.1")
			if (got == want) != tt.resolves {
				t.Errorf("libcuda.so.1 in the cache: %q; want resolved to %s: %v\n%s", got, want, tt.resolves, out)
			}
		})
	}
}

// firstLibc lays the spec's top-level mounts over a container root whose
// image has libc (as /lib/x86_64-linux-gnu/libc.so.6) and Debian's linker
// configuration, runs the spec's update-ldcache hook with the real hook
// program, and returns where the first libc.so.6 of the linker cache it
// wrote points, and the combined output.
func firstLibc(t *testing.T, root *hostfs.Root, spec *specs.Spec, hook, ldconfig, libc string) (string, string) {
	t.Helper()
	out := runLdcacheHook(t, root, spec, hook, ldconfig, true, func(rootfs string) {
		copyFile(t, libc, filepath.Join(rootfs, "lib/x86_64-linux-gnu/libc.so.6"))
	})
	return cacheEntry(out, "libc.so.6"), out
}

// cacheEntry returns where the first entry for soname in ldconfig -p's
// output points, or "" when there is none.
func cacheEntry(out, soname string) string {
	for _, line := range strings.Split(out, "\n") {
		if name, target, ok := strings.Cut(strings.TrimSpace(line), " => "); ok && strings.HasPrefix(name, soname+" ") {
			return target
		}
	}
	return ""
}

// runLdcacheHook lays the spec's top-level /nix/store mounts over a
// container root in a new mount namespace, runs the spec's update-ldcache
// hook with the real hook program and returns the combined output, ending
// with ldconfig -p of the linker cache the hook wrote. The image has
// Debian's ld.so.conf.d/ and its own cache (toolkit 1.17 updates only a
// cache the image has), and Debian's top-level /etc/ld.so.conf when
// ldsoConf is set (a distroless image has none); image adds its files.
func runLdcacheHook(t *testing.T, root *hostfs.Root, spec *specs.Spec, hook, ldconfig string, ldsoConf bool, image func(rootfs string)) string {
	t.Helper()
	bundle := t.TempDir()
	rootfs := filepath.Join(bundle, "rootfs")
	if err := os.MkdirAll(filepath.Join(rootfs, "etc"), 0o755); err != nil {
		t.Fatal(err)
	}
	image(rootfs)
	writeHookBundle(t, bundle)
	var sh strings.Builder
	sh.WriteString("set -e\n")
	// The image's linker configuration as Debian's has it; its root a
	// mount point, as a runtime's is (the hook's pivot_root needs it).
	fmt.Fprintf(&sh, "mkdir -p '%[1]s/etc/ld.so.conf.d'\n", rootfs)
	if ldsoConf {
		fmt.Fprintf(&sh, "printf 'include /etc/ld.so.conf.d/*.conf\\n' > '%[1]s/etc/ld.so.conf'\n", rootfs)
	}
	fmt.Fprintf(&sh, "printf '/usr/local/lib/x86_64-linux-gnu\\n/lib/x86_64-linux-gnu\\n/usr/lib/x86_64-linux-gnu\\n' > '%[1]s/etc/ld.so.conf.d/x86_64-linux-gnu.conf'\n'%[2]s' -r '%[1]s' 2>/dev/null\n", rootfs, ldconfig)
	fmt.Fprintf(&sh, "mount --bind '%[1]s' '%[1]s'\n", rootfs)
	for _, m := range spec.ContainerEdits.Mounts {
		if !strings.HasPrefix(m.ContainerPath, "/nix/store/") {
			continue // the driver's executables and /usr/local/nvidia: not this test's subject
		}
		src, err := root.Path(m.HostPath)
		if err != nil {
			t.Fatal(err)
		}
		st, err := os.Stat(src)
		if err != nil {
			continue
		}
		dst := filepath.Join(rootfs, m.ContainerPath)
		if st.IsDir() {
			fmt.Fprintf(&sh, "mkdir -p '%s'\n", dst)
		} else {
			fmt.Fprintf(&sh, "mkdir -p '%s' && touch '%s'\n", filepath.Dir(dst), dst)
		}
		fmt.Fprintf(&sh, "mount --bind '%s' '%s'\n", src, dst)
	}
	args := []string{"update-ldcache", "--ldconfig-path", ldconfig}
	for _, f := range cdi.SpecHooks(spec, true).Folders {
		args = append(args, "--folder", f)
	}
	fmt.Fprintf(&sh, "'%s' %s < '%s'\n", hook, shellQuote(args), filepath.Join(bundle, "state.json"))
	fmt.Fprintf(&sh, "'%s' -p -C '%s'\n", ldconfig, filepath.Join(rootfs, "etc/ld.so.cache"))
	out, err := exec.Command("unshare", "-m", "--propagation", "private", "sh", "-c", sh.String()).CombinedOutput()
	if err != nil {
		t.Fatalf("the real update-ldcache hook: %v\n%s", err, out)
	}
	return string(out)
}

// copyFile copies src to dst (made with its folders), replacing dst.
func copyFile(t *testing.T, src, dst string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		t.Fatal(err)
	}
	os.Remove(dst)
	in, err := os.Open(src)
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o755)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(out, in); err != nil {
		t.Fatal(err)
	}
	if err := out.Close(); err != nil {
		t.Fatal(err)
	}
}
