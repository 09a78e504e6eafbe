package cdi_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	specs "tags.cncf.io/container-device-interface/specs-go"

	"github.com/nodeprep/nodeprep/cdi"
)

// TestMIGCaps: a MIG device must carry its /dev/nvidia-caps nodes; the
// finding says whether the host has them.
func TestMIGCaps(t *testing.T) {
	t.Parallel()
	expect := []cdi.ExpectedDevice{{Name: "MIG-1", MIG: true, For: "MIG device 0 of GPU 0"}, {Name: "GPU-1"}}
	spec := func(nodes ...string) *specs.Spec {
		var dn []*specs.DeviceNode
		for _, n := range nodes {
			dn = append(dn, &specs.DeviceNode{Path: n})
		}
		return &specs.Spec{Version: "0.5.0", Kind: "nvidia.com/gpu", Devices: []specs.Device{
			{Name: "MIG-1", ContainerEdits: specs.ContainerEdits{DeviceNodes: dn}},
			{Name: "GPU-1", ContainerEdits: specs.ContainerEdits{DeviceNodes: []*specs.DeviceNode{{Path: "/dev/nvidia0"}}}},
		}}
	}
	bare := hostTree(t, "nixos-h200")
	withCaps := hostTree(t, "nixos-h200")
	if err := os.MkdirAll(filepath.Join(withCaps.Dir(), "dev/nvidia-caps"), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, n := range []string{"nvidia-cap1", "nvidia-cap2", "nvidia-cap21"} {
		if err := os.WriteFile(filepath.Join(withCaps.Dir(), "dev/nvidia-caps", n), nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	tests := []struct {
		name string
		fs   cdi.Findings
		want string // "" for none
	}{
		{"carries its caps", cdi.CheckMIGCaps(spec("/dev/nvidia0", "/dev/nvidia-caps/nvidia-cap21"), withCaps, expect), ""},
		{"host has caps", cdi.CheckMIGCaps(spec("/dev/nvidia0"), withCaps, expect), "nvidia.com/gpu=MIG-1 carries no /dev/nvidia-caps node although the host has 3"},
		{"neither", cdi.CheckMIGCaps(spec("/dev/nvidia0"), bare, expect), "nvidia.com/gpu=MIG-1 carries no /dev/nvidia-caps node and the host has none"},
	}
	for _, tt := range tests {
		switch {
		case tt.want == "" && len(tt.fs) != 0:
			t.Errorf("%s: %v", tt.name, tt.fs)
		case tt.want != "" && (len(tt.fs) != 1 || tt.fs[0].Code != cdi.CodeMissingDeviceNode || !strings.Contains(tt.fs[0].Message, tt.want)):
			t.Errorf("%s: %v, want one %s naming %q", tt.name, tt.fs, cdi.CodeMissingDeviceNode, tt.want)
		}
	}
}
