package generate

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/nodeprep/nodeprep/cdi"
	"github.com/nodeprep/nodeprep/nodeprep/hostfs"
	"github.com/nodeprep/nodeprep/nodeprep/testenv/upstream"
)

// TestRealGeneratorBeforeUVM (issue 28): the real nvidia-ctk 1.20, run on
// nixos-h200 before nvidia-uvm is loaded (no /dev/nvidia-uvm or
// /dev/nvidia-uvm-tools), writes a spec without them (the model predicts
// it too), and cdi check fails that spec: first saying the module is not
// loaded, then, once the nodes exist, that the spec must be regenerated
// (nvidia-container-toolkit #1979/#1982, nixpkgs#286028).
func TestRealGeneratorBeforeUVM(t *testing.T) {
	if os.Geteuid() != 0 {
		upstream.Unavailable(t, errors.New("the real generator runs chrooted with mknod'd device nodes, which needs root"))
	}
	upstream.Dir(t, upstream.Toolkit120)
	dir := prepared(t, "nixos-h200")
	devices := filepath.Join(dir, ".devices")
	data, err := os.ReadFile(devices)
	if err != nil {
		t.Fatal(err)
	}
	var kept []string
	for _, l := range strings.SplitAfter(string(data), "\n") {
		if !strings.HasPrefix(l, "/dev/nvidia-uvm") {
			kept = append(kept, l)
		}
	}
	if err := os.WriteFile(devices, []byte(strings.Join(kept, "")), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, n := range cdi.UVMNodes { // the tree's stand-ins for the nodes
		if err := os.Remove(filepath.Join(dir, n)); err != nil {
			t.Fatal(err)
		}
	}
	r := real(t, dir, fingerprint(t, dir), upstream.Toolkit120, "new")
	if r.err != nil {
		t.Fatal(r.err)
	}
	if strings.Contains(string(r.spec), "nvidia-uvm") {
		t.Fatalf("the real generator put nvidia-uvm nodes in a spec generated without them:\n%s", r.spec)
	}
	root, err := hostfs.New(dir)
	if err != nil {
		t.Fatal(err)
	}
	model, err := Spec(root, treeHost(t, dir), toolkitVersions[upstream.Toolkit120], unitArgs(t, dir, "new", toolkitVersions[upstream.Toolkit120]))
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range model.ContainerEdits.DeviceNodes {
		if strings.HasPrefix(d.Path, "/dev/nvidia-uvm") {
			t.Errorf("the model put %s in the spec of a host without it", d.Path)
		}
	}
	spec := filepath.Join(dir, "run/cdi/nvidia-container-toolkit.json")
	if err := os.WriteFile(spec, r.spec, 0o644); err != nil {
		t.Fatal(err)
	}
	opts := cdi.FileOptions{Spec: "/run/cdi/nvidia-container-toolkit.json", Discover: cdi.DiscoverOptions{DriverRoot: "/run/opengl-driver", Arch: "amd64"}}
	for _, tc := range []struct {
		moduleLoaded bool
		want         string
	}{
		{false, "the nvidia-uvm module is not loaded"},
		{true, "the generator ran before nvidia-uvm was loaded"},
	} {
		if tc.moduleLoaded {
			for _, n := range cdi.UVMNodes {
				if err := os.WriteFile(filepath.Join(dir, n), nil, 0o666); err != nil {
					t.Fatal(err)
				}
			}
		}
		check, err := cdi.CheckFile(root, opts)
		if err != nil {
			t.Fatal(err)
		}
		found := false
		for _, f := range check.Findings {
			found = found || f.Code == cdi.CodeMissingUVMNode && f.Severity == cdi.SeverityError && strings.Contains(f.Message, tc.want)
		}
		if !found {
			t.Errorf("module loaded %v: cdi check %v, want a %s error saying %q", tc.moduleLoaded, check.Findings, cdi.CodeMissingUVMNode, tc.want)
		}
	}
}
