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

// firstLibc lays the spec's top-level mounts over a container root whose
// image has libc (as /lib/x86_64-linux-gnu/libc.so.6), in a new mount
// namespace, runs the spec's update-ldcache hook with the real hook
// program, and returns where the first libc.so.6 of the linker cache it
// wrote points, and the combined output.
func firstLibc(t *testing.T, root *hostfs.Root, spec *specs.Spec, hook, ldconfig, libc string) (string, string) {
	t.Helper()
	bundle := t.TempDir()
	rootfs := filepath.Join(bundle, "rootfs")
	copyFile(t, libc, filepath.Join(rootfs, "lib/x86_64-linux-gnu/libc.so.6"))
	if err := os.MkdirAll(filepath.Join(rootfs, "etc"), 0o755); err != nil {
		t.Fatal(err)
	}
	writeHookBundle(t, bundle)
	var sh strings.Builder
	sh.WriteString("set -e\n")
	// The image's linker configuration as Debian's has it, and its own
	// cache (toolkit 1.17 updates only a cache the image has); its root a
	// mount point, as a runtime's is (the hook's pivot_root needs it).
	fmt.Fprintf(&sh, "mkdir -p '%[1]s/etc/ld.so.conf.d'\nprintf 'include /etc/ld.so.conf.d/*.conf\\n' > '%[1]s/etc/ld.so.conf'\n", rootfs)
	fmt.Fprintf(&sh, "printf '/usr/local/lib/x86_64-linux-gnu\\n/lib/x86_64-linux-gnu\\n/usr/lib/x86_64-linux-gnu\\n' > '%[1]s/etc/ld.so.conf.d/x86_64-linux-gnu.conf'\n'%[2]s' -r '%[1]s'\n", rootfs, ldconfig)
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
	for _, line := range strings.Split(string(out), "\n") {
		if name, target, ok := strings.Cut(strings.TrimSpace(line), " => "); ok && strings.HasPrefix(name, "libc.so.6 ") {
			return target, string(out)
		}
	}
	return "", string(out)
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
