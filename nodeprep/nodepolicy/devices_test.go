package nodepolicy

import (
	"slices"
	"testing"

	"github.com/nodeprep/nodeprep/nodeprep/gpu"
)

// TestExpectedCDIDeviceNames pins the exact device names each strategy
// asks the spec for: a name off by one (index 1 for GPU 0) or a UUID
// mangled would send the consumer to the wrong GPU or to none.
func TestExpectedCDIDeviceNames(t *testing.T) {
	t.Parallel()
	inv := &gpu.Inventory{GPUs: []gpu.GPU{
		{Index: 0, Minor: 0, UUID: "GPU-00000000-0000-0000-0000-00000000000a", Health: gpu.Health{Healthy: true}},
		{Index: 1, Minor: 3, UUID: "GPU-00000000-0000-0000-0000-00000000000b", Health: gpu.Health{Healthy: true}},
		{Index: 2, Minor: 2, UUID: "GPU-00000000-0000-0000-0000-00000000000c", Health: gpu.Health{Healthy: false, Reasons: []string{gpu.ReasonLost}}},
		{Index: 3, Minor: 1, UUID: "GPU-00000000-0000-0000-0000-00000000000d", Health: gpu.Health{Healthy: true}, MIG: &gpu.MIG{Current: true, Devices: []gpu.MIGDevice{
			{Index: 0, UUID: "MIG-00000000-0000-0000-0000-0000000000d0"},
			{Index: 2, UUID: "MIG-00000000-0000-0000-0000-0000000000d2"},
		}}},
	}}
	tests := []struct {
		strategies []string
		names      []string
		nodes      []string // per name, "" for none
	}{
		{[]string{DeviceNameIndex}, []string{"0", "1", "3", "3:0", "3:2"}, []string{"/dev/nvidia0", "/dev/nvidia3", "/dev/nvidia1", "", ""}},
		{[]string{DeviceNameUUID}, []string{
			"GPU-00000000-0000-0000-0000-00000000000a", "GPU-00000000-0000-0000-0000-00000000000b", "GPU-00000000-0000-0000-0000-00000000000d",
			"MIG-00000000-0000-0000-0000-0000000000d0", "MIG-00000000-0000-0000-0000-0000000000d2",
		}, []string{"/dev/nvidia0", "/dev/nvidia3", "/dev/nvidia1", "", ""}},
		{[]string{DeviceNameUUID, DeviceNameIndex}, []string{
			"GPU-00000000-0000-0000-0000-00000000000a", "0", "GPU-00000000-0000-0000-0000-00000000000b", "1",
			"GPU-00000000-0000-0000-0000-00000000000d", "3", "MIG-00000000-0000-0000-0000-0000000000d0", "3:0", "MIG-00000000-0000-0000-0000-0000000000d2", "3:2",
		}, []string{"/dev/nvidia0", "/dev/nvidia0", "/dev/nvidia3", "/dev/nvidia3", "/dev/nvidia1", "/dev/nvidia1", "", "", "", ""}},
	}
	for _, tt := range tests {
		got, err := ExpectedCDIDevices(inv, tt.strategies)
		if err != nil {
			t.Fatal(err)
		}
		var names, nodes []string
		for _, d := range got {
			names = append(names, d.Name)
			node := ""
			if len(d.DeviceNodes) > 0 {
				node = d.DeviceNodes[0]
			}
			nodes = append(nodes, node)
		}
		if !slices.Equal(names, tt.names) || !slices.Equal(nodes, tt.nodes) {
			t.Errorf("%v: names %q nodes %q\nwant names %q nodes %q", tt.strategies, names, nodes, tt.names, tt.nodes)
		}
	}
	for _, bad := range [][]string{nil, {}, {"idx"}} {
		if _, err := ExpectedCDIDevices(inv, bad); err == nil {
			t.Errorf("strategies %q accepted", bad)
		}
	}
}
