package cdi_test

import (
	"slices"
	"strings"
	"testing"

	"github.com/nodeprep/nodeprep/cdi"
)

// TestContainerPathsMove: a changed cdi.containerPaths moves the mounts
// nodeprep made on an already patched spec (not "already patched"), leaves
// nothing at the old paths, passes check, and a further patch changes
// nothing.
func TestContainerPathsMove(t *testing.T) {
	t.Parallel()
	root := hostTree(t, "nixos-h200")
	opts := nixosOptions("amd64")
	if _, err := cdi.PatchFile(root, opts, false); err != nil {
		t.Fatal(err)
	}
	opts.Discover.Paths = cdi.ContainerPaths{ICD: "/usr/share/vulkan/icd.d/nvidia_icd.json", LibDir: "/usr/lib64"}
	check, err := cdi.CheckFile(root, opts)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.ContainsFunc(check.Findings, func(f cdi.Finding) bool { return f.Code == cdi.CodeContainerPathChanged }) {
		t.Errorf("check with new paths: no %s warning: %v", cdi.CodeContainerPathChanged, check.Findings)
	}
	res, err := cdi.PatchFile(root, opts, false)
	if err != nil {
		t.Fatal(err)
	}
	if !res.Written || res.Findings.Errors() != 0 {
		t.Fatalf("patch with new paths: written %v, findings %v", res.Written, res.Findings)
	}
	var moves []string
	for _, c := range res.Changes {
		if c.Action == "move" {
			moves = append(moves, c.String())
		}
		if c.Action == "add" {
			t.Errorf("added instead of moved: %s", c)
		}
	}
	for _, want := range []string{
		"move vulkan-icd: /etc/vulkan/icd.d/nvidia_icd.json → /usr/share/vulkan/icd.d/nvidia_icd.json",
		"move glvnd-dispatch: /usr/lib/x86_64-linux-gnu/libEGL.so.1 → /usr/lib64/libEGL.so.1",
		"move gbm-backend: /usr/lib/x86_64-linux-gnu/gbm/nvidia-drm_gbm.so → /usr/lib64/gbm/nvidia-drm_gbm.so",
	} {
		if !slices.Contains(moves, want) {
			t.Errorf("no %q among the moves:\n%s", want, strings.Join(moves, "\n"))
		}
	}
	_, spec := loadSpec(t, root)
	for _, m := range spec.ContainerEdits.Mounts {
		if strings.HasPrefix(m.ContainerPath, "/usr/lib/x86_64-linux-gnu/") || m.ContainerPath == "/etc/vulkan/icd.d/nvidia_icd.json" {
			t.Errorf("a mount stayed at its old path: %s → %s", m.HostPath, m.ContainerPath)
		}
	}
	if check, err := cdi.CheckFile(root, opts); err != nil || check.Findings.Errors() != 0 {
		t.Errorf("check after the move: %v %v", err, check.Findings)
	}
	if again, err := cdi.PatchFile(root, opts, false); err != nil || again.Changed {
		t.Errorf("a third patch changed %v (%v)", again.Changes, err)
	}
}
