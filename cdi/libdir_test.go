package cdi_test

import (
	"slices"
	"testing"

	"github.com/nodeprep/nodeprep/cdi"
)

// TestSonameWithoutGlvnd: a library a manifest names by bare soname goes
// to the configured container libDir even when no glvnd set was found.
func TestSonameWithoutGlvnd(t *testing.T) {
	t.Parallel()
	root := hostTree(t, "nixos-h200")
	// The generator mounts the platform library in the driver's folder;
	// without that mount it must come from the patch.
	dropMount(t, root, "/nix/store/4k9wq2n1x8b7z5c3v6m0p1s2d3f4g5h6-nvidia-x11-550.54.15-6.6.30/lib/libnvidia-egl-wayland.so.1.1.13")
	opts := nixosOptions("amd64")
	opts.Discover.GlvndDirs = []string{"/nonexistent"}
	opts.Discover.Paths.LibDir = "/usr/lib64"
	res, err := cdi.PatchFile(root, opts, true)
	if err != nil {
		t.Fatal(err)
	}
	if slices.ContainsFunc(res.Graphics.Files, func(f cdi.GraphicsFile) bool { return f.Role == cdi.RoleGlvnd }) {
		t.Fatal("a glvnd set was found in /nonexistent")
	}
	var got []string
	for _, c := range res.Changes {
		if c.Role == "library" {
			got = append(got, c.ContainerPath)
		}
	}
	if !slices.Contains(got, "/usr/lib64/libEGL_nvidia.so.0") && !slices.Contains(got, "/usr/lib64/libnvidia-egl-wayland.so.1") {
		t.Errorf("no soname library mounted in the configured libDir: %v (findings %v)", got, res.Findings)
	}
	if n := res.Findings.Errors(); n != 0 {
		t.Errorf("%d errors: %v", n, res.Findings)
	}
}
