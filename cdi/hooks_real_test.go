package cdi_test

import (
	"encoding/json"
	"fmt"
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

// TestRealCreateSymlinksHook runs the real create-symlinks hooks of the spec
// nvidia-ctk 1.20.2 wrote for nixos-h200-hooks, with the nvidia-cdi-hook of
// both pinned toolkits, on a container root that has the patched spec's mounts
// bind-mounted in a private mount namespace, as the runtime leaves it
// before the createContainer hooks. With the mount nodeprep used to make at
// <nvidia-x11>/lib/libGLX_nvidia.so.0 the hook fails ("device or resource
// busy"); with the patch as it is now it succeeds, and the link leads to
// the library the spec mounts.
func TestRealCreateSymlinksHook(t *testing.T) {
	upstream.NeedPrivateMounts(t, "binding mounts")
	root := hostTree(t, "nixos-h200-hooks")
	_, spec := loadSpec(t, root)
	g, err := cdi.Discover(root, cdi.DiscoverOptions{DriverRoot: "/run/opengl-driver", Arch: "amd64"})
	if err != nil {
		t.Fatal(err)
	}
	patched := cloneSpec(t, spec)
	if _, fs := cdi.Patch(patched, g, root); fs.Errors() > 0 {
		t.Fatal(fs)
	}
	old := cloneSpec(t, patched)
	old.ContainerEdits.Mounts = append(old.ContainerEdits.Mounts, &specs.Mount{HostPath: "/run/opengl-driver/lib/libGLX_nvidia.so.0", ContainerPath: glxSo0, Options: cdi.MountOptions})

	for _, tk := range upstream.Toolkits {
		hook := upstream.Tool(t, tk, "nvidia-cdi-hook")
		t.Run(tk, func(t *testing.T) {
			if out, err := runHooks(t, root, patched, hook); err != nil {
				t.Errorf("the real hook on the patched spec: %v\n%s", err, out)
			}
			out, err := runHooks(t, root, old, hook)
			if err == nil || !strings.Contains(out, "device or resource busy") {
				t.Errorf("the real hook with a mount on its link = %v, want it to fail with \"device or resource busy\"\n%s", err, out)
			}
		})
	}
}

// runHooks lays the spec's top-level mounts over an empty container root in
// a new mount namespace and runs every create-symlinks hook of the spec
// with the real hook program, then checks that each link resolves in the
// root. It returns the combined output.
func runHooks(t *testing.T, root *hostfs.Root, spec *specs.Spec, hook string) (string, error) {
	t.Helper()
	bundle := t.TempDir()
	rootfs := filepath.Join(bundle, "rootfs")
	if err := os.Mkdir(rootfs, 0o755); err != nil {
		t.Fatal(err)
	}
	writeHookBundle(t, bundle)
	var sh strings.Builder
	sh.WriteString("set -e\n")
	for _, m := range spec.ContainerEdits.Mounts {
		src, err := root.Path(m.HostPath)
		if err != nil {
			t.Fatal(err)
		}
		dst := filepath.Join(rootfs, m.ContainerPath)
		st, err := os.Stat(src)
		if err != nil {
			continue // the runtime fails on it too; not this test's subject
		}
		if st.IsDir() {
			fmt.Fprintf(&sh, "mkdir -p '%s'\n", dst)
		} else {
			fmt.Fprintf(&sh, "mkdir -p '%s' && touch '%s'\n", filepath.Dir(dst), dst)
		}
		fmt.Fprintf(&sh, "mount --bind '%s' '%s'\n", src, dst)
	}
	links := cdi.SpecHooks(spec, true).Links
	args := []string{"create-symlinks"}
	for _, l := range links {
		args = append(args, "--link", l.Target+"::"+l.Link)
	}
	fmt.Fprintf(&sh, "'%s' %s < '%s'\n", hook, shellQuote(args), filepath.Join(bundle, "state.json"))
	for _, l := range links {
		if !strings.HasPrefix(l.Link, nvStore+"/") {
			continue // the /dev/dri/by-path links lead to device nodes this root lacks
		}
		// The link must lead to a file in the container (test -e follows it,
		// relative to the link's folder inside rootfs).
		fmt.Fprintf(&sh, "test -L '%[1]s' && test -e '%[1]s' || { echo \"link %[1]s does not resolve\"; exit 1; }\n", filepath.Join(rootfs, l.Link))
	}
	cmd := exec.Command("unshare", "-m", "--propagation", "private", "sh", "-c", sh.String())
	out, err := cmd.CombinedOutput()
	return string(out), err
}

func shellQuote(args []string) string {
	var b strings.Builder
	for i, a := range args {
		if i > 0 {
			b.WriteByte(' ')
		}
		b.WriteString("'" + strings.ReplaceAll(a, "'", `'\''`) + "'")
	}
	return b.String()
}

// writeHookBundle writes bundle's config.json (its root: rootfs) and the
// container state a createContainer hook reads on its stdin (state.json:
// status creating, this process as the container's pid), as a runtime
// hands them to the hook.
func writeHookBundle(t *testing.T, bundle string) {
	t.Helper()
	cfg, _ := json.Marshal(map[string]any{"ociVersion": "1.0.2", "root": map[string]string{"path": "rootfs"}})
	if err := os.WriteFile(filepath.Join(bundle, "config.json"), cfg, 0o644); err != nil {
		t.Fatal(err)
	}
	state, _ := json.Marshal(map[string]any{"ociVersion": "1.0.2", "id": "t", "status": "creating", "pid": os.Getpid(), "bundle": bundle})
	if err := os.WriteFile(filepath.Join(bundle, "state.json"), state, 0o644); err != nil {
		t.Fatal(err)
	}
}
