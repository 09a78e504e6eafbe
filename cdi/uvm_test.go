package cdi_test

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	specs "tags.cncf.io/container-device-interface/specs-go"

	"github.com/nodeprep/nodeprep/cdi"
)

// TestUVMNodes (issue 28): a spec whose GPU devices get no /dev/nvidia-uvm
// and /dev/nvidia-uvm-tools (the generator ran before nvidia-uvm was
// loaded: nvidia-container-toolkit #1979/#1982, nixpkgs#286028) breaks
// every CUDA container while Vulkan and EGL work. cdi check and cdi patch
// report it as an error, saying whether the host has the nodes (regenerate)
// or not (load the module); patch does not add them.
func TestUVMNodes(t *testing.T) {
	t.Parallel()
	const regenerate, notLoaded = "the generator ran before nvidia-uvm was loaded", "the nvidia-uvm module is not loaded"
	nodes := func(paths ...string) []*specs.DeviceNode {
		var out []*specs.DeviceNode
		for _, p := range paths {
			out = append(out, &specs.DeviceNode{Path: p})
		}
		return out
	}
	// edit rewrites the tree's generated spec: top are its top-level
	// device nodes besides /dev/nvidiactl, perDevice adds nodes to every
	// device's edits (first: only the first device's).
	type edit struct {
		top, perDevice []string
		first          bool
		noGPUNodes     bool // the devices carry no /dev/nvidia<N> (a claim spec)
	}
	tests := []struct {
		name     string
		e        edit
		hostHas  bool
		want     string // "" = no finding
		wantName []string
	}{
		{"generated (top-level uvm)", edit{top: cdi.UVMNodes}, true, "", nil},
		{"per device", edit{perDevice: cdi.UVMNodes}, true, "", nil},
		{"spec without, host with", edit{}, true, regenerate, cdi.UVMNodes},
		{"spec without, host without", edit{}, false, notLoaded, cdi.UVMNodes},
		{"only uvm", edit{top: []string{"/dev/nvidia-uvm"}}, true, regenerate, []string{"/dev/nvidia-uvm-tools"}},
		{"only the first device", edit{perDevice: cdi.UVMNodes, first: true}, true, regenerate, cdi.UVMNodes},
		{"no GPU devices", edit{noGPUNodes: true}, false, "", nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			root := hostTree(t, "nixos-h200")
			_, spec := loadSpec(t, root)
			spec.ContainerEdits.DeviceNodes = slices.DeleteFunc(spec.ContainerEdits.DeviceNodes, func(d *specs.DeviceNode) bool {
				return strings.HasPrefix(d.Path, "/dev/nvidia-uvm")
			})
			spec.ContainerEdits.DeviceNodes = append(spec.ContainerEdits.DeviceNodes, nodes(tt.e.top...)...)
			for i := range spec.Devices {
				d := &spec.Devices[i]
				if tt.e.noGPUNodes {
					d.ContainerEdits.DeviceNodes = nil
					d.ContainerEdits.Env = []string{"CUDA_MPS_PIPE_DIRECTORY=/tmp/nvidia-mps"}
				}
				if !tt.e.first || i == 0 {
					d.ContainerEdits.DeviceNodes = append(d.ContainerEdits.DeviceNodes, nodes(tt.e.perDevice...)...)
				}
			}
			if !tt.hostHas {
				for _, n := range cdi.UVMNodes {
					if err := os.Remove(filepath.Join(root.Dir(), n)); err != nil && !os.IsNotExist(err) {
						t.Fatal(err)
					}
				}
			}
			g, err := cdi.Discover(root, nixosOptions("amd64").Discover)
			if err != nil {
				t.Fatal(err)
			}
			check := cdi.Check(spec, g, root, nil)
			before := len(spec.ContainerEdits.DeviceNodes)
			_, patch := cdi.Patch(spec, g, root)
			for name, fs := range map[string]cdi.Findings{"check": check, "patch": patch} {
				var uvm []cdi.Finding
				for _, f := range fs {
					if f.Code == cdi.CodeMissingUVMNode {
						uvm = append(uvm, f)
					}
				}
				if tt.want == "" {
					if len(uvm) != 0 {
						t.Errorf("%s: %v, want no %s", name, uvm, cdi.CodeMissingUVMNode)
					}
					continue
				}
				if len(uvm) != 1 || uvm[0].Severity != cdi.SeverityError || !strings.Contains(uvm[0].Message, tt.want) || fs.Errors() == 0 {
					t.Fatalf("%s: %v, want one error saying %q", name, uvm, tt.want)
				}
				if want := "the GPU devices no " + strings.Join(tt.wantName, " or ") + ":"; !strings.Contains(uvm[0].Message, want) {
					t.Errorf("%s: %q does not say %q", name, uvm[0].Message, want)
				}
			}
			for _, d := range spec.ContainerEdits.DeviceNodes[before:] {
				if strings.HasPrefix(d.Path, "/dev/nvidia-uvm") {
					t.Errorf("patch added %s: the generator's spec must be regenerated instead", d.Path)
				}
			}
		})
	}
}
