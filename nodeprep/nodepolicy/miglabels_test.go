package nodepolicy

import (
	"errors"
	"maps"
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/server"

	"github.com/nodeprep/nodeprep/nodeprep/fault"
	"github.com/nodeprep/nodeprep/nodeprep/gpu"
)

// migA100 builds the inventory of a simulated DGX A100 (go-nvml's server,
// through gpu.Build) whose GPUs listed in profiles have MIG on, each with
// MIG devices of the given GPU-instance slice counts (1 → 1g.5gb, 3 →
// 3g.20gb on the 40 GB A100). A GPU listed with no slices has MIG on and
// no MIG devices.
func migA100(t *testing.T, profiles map[int][]uint32) *gpu.Inventory {
	t.Helper()
	lib, err := gpu.Simulated("dgx-a100")
	if err != nil {
		t.Fatal(err)
	}
	s := lib.(*server.Server)
	mem := map[uint32]uint64{1: 4864, 2: 9856, 3: 19968, 7: 40192}
	for gi, slices := range profiles {
		d := s.Devices[gi].(*server.Device)
		d.GetMigModeFunc = func() (int, int, nvml.Return) { return nvml.DEVICE_MIG_ENABLE, nvml.DEVICE_MIG_ENABLE, nvml.SUCCESS }
		migs := map[int]*mock.Device{}
		for i, n := range slices {
			migs[i] = &mock.Device{
				GetUUIDFunc: func() (string, nvml.Return) {
					return "MIG-00000000-0000-0000-0000-00000000000" + string(rune('0'+i)), nvml.SUCCESS
				},
				GetAttributesFunc: func() (nvml.DeviceAttributes, nvml.Return) {
					return nvml.DeviceAttributes{
						GpuInstanceSliceCount: n, ComputeInstanceSliceCount: n, MemorySizeMB: mem[n],
						MultiprocessorCount: 14 * n, SharedCopyEngineCount: n, SharedDecoderCount: n / 2, SharedEncoderCount: 0, SharedJpegCount: n / 3, SharedOfaCount: n / 7,
					}, nvml.SUCCESS
				},
			}
		}
		d.GetMigDeviceHandleByIndexFunc = func(i int) (nvml.Device, nvml.Return) {
			if m, ok := migs[i]; ok {
				return m, nvml.SUCCESS
			}
			return nil, nvml.ERROR_NOT_FOUND
		}
	}
	inv, err := gpu.Build(s)
	if err != nil {
		t.Fatal(err)
	}
	return inv
}

func allMIG(slices ...uint32) map[int][]uint32 {
	m := map[int][]uint32{}
	for i := range 8 {
		m[i] = slices
	}
	return m
}

func TestMIGLabels(t *testing.T) {
	t.Parallel()
	const product = "NVIDIA-A100-SXM4-40GB"
	threeG := func(prefix string, count string) map[string]string {
		return map[string]string{
			prefix + "product": product + "-MIG-3g.20gb", prefix + "count": count, prefix + "replicas": "1",
			prefix + "memory": "19968", prefix + "multiprocessors": "42", prefix + "slices.gi": "3", prefix + "slices.ci": "3",
			prefix + "engines.copy": "3", prefix + "engines.decoder": "1", prefix + "engines.encoder": "0",
			prefix + "engines.jpeg": "1", prefix + "engines.ofa": "0",
		}
	}
	invalid := map[string]string{
		LabelMIGStrategy: "single", "nvidia.com/gpu.product": product + "-MIG-INVALID",
		"nvidia.com/gpu.count": "0", "nvidia.com/gpu.replicas": "0", "nvidia.com/gpu.memory": "0",
	}
	withStrategy := func(s string, ms ...map[string]string) map[string]string {
		out := map[string]string{LabelMIGStrategy: s}
		for _, m := range ms {
			maps.Copy(out, m)
		}
		return out
	}
	oneG := threeG("nvidia.com/mig-1g.5gb.", "8")
	maps.Copy(oneG, map[string]string{
		"nvidia.com/mig-1g.5gb.product": product + "-MIG-1g.5gb", "nvidia.com/mig-1g.5gb.memory": "4864",
		"nvidia.com/mig-1g.5gb.multiprocessors": "14", "nvidia.com/mig-1g.5gb.slices.gi": "1", "nvidia.com/mig-1g.5gb.slices.ci": "1",
		"nvidia.com/mig-1g.5gb.engines.copy": "1", "nvidia.com/mig-1g.5gb.engines.decoder": "0", "nvidia.com/mig-1g.5gb.engines.jpeg": "0",
	})
	tests := []struct {
		name     string
		profiles map[int][]uint32
		strategy string
		want     map[string]string
	}{
		{name: "none", profiles: allMIG(3, 3), strategy: MIGStrategyNone, want: map[string]string{}},
		{name: "default is none", profiles: allMIG(3, 3), strategy: "", want: map[string]string{}},
		{name: "single, MIG off everywhere", profiles: nil, strategy: MIGStrategySingle, want: map[string]string{LabelMIGStrategy: "single"}},
		{name: "single, one profile", profiles: allMIG(3, 3), strategy: MIGStrategySingle, want: withStrategy("single", threeG("nvidia.com/gpu.", "16"))},
		{name: "single, two profiles: invalid", profiles: allMIG(3, 1), strategy: MIGStrategySingle, want: invalid},
		{name: "single, MIG on and off: invalid", profiles: map[int][]uint32{0: {3}}, strategy: MIGStrategySingle, want: invalid},
		{name: "single, an empty MIG GPU: invalid", profiles: func() map[int][]uint32 { m := allMIG(3); m[5] = nil; return m }(), strategy: MIGStrategySingle, want: invalid},
		{name: "mixed, two profiles", profiles: allMIG(3, 1), strategy: MIGStrategyMixed, want: withStrategy("mixed", threeG("nvidia.com/mig-3g.20gb.", "8"), oneG)},
		{name: "mixed, empty and MIG-off GPUs ignored", profiles: map[int][]uint32{0: {3}, 1: nil}, strategy: MIGStrategyMixed, want: withStrategy("mixed", threeG("nvidia.com/mig-3g.20gb.", "1"))},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, err := MIGLabels(migA100(t, tt.profiles), tt.strategy)
			if err != nil {
				t.Fatal(err)
			}
			if !maps.Equal(got, tt.want) {
				t.Errorf("MIGLabels =\n%v\nwant\n%v", got, tt.want)
			}
		})
	}
}

func TestMIGLabelsInNodeLabels(t *testing.T) {
	t.Parallel()
	inv := migA100(t, allMIG(3, 3))
	ls, err := NodeLabels(inv, NodeLabelOptions{GFD: true, MIGStrategy: MIGStrategySingle})
	if err != nil {
		t.Fatal(err)
	}
	m := labelMap(ls)
	// The MIG labels replace the whole-GPU ones; the rest stay.
	if m["nvidia.com/gpu.product"] != "NVIDIA-A100-SXM4-40GB-MIG-3g.20gb" || m["nvidia.com/gpu.count"] != "16" || m["nvidia.com/gpu.family"] != "ampere" || m[LabelMIGCapable] != "true" {
		t.Errorf("labels %v", m)
	}
	// MIG labels are GFD labels: none without them.
	if ls, err := NodeLabels(inv, NodeLabelOptions{GFD: false, MIGStrategy: MIGStrategyMixed}); err != nil || len(ls) != 0 {
		t.Errorf("without GFD labels: %v, %v", ls, err)
	}
}

func TestMIGLabelsErrors(t *testing.T) {
	t.Parallel()
	if _, err := MIGLabels(migA100(t, nil), "both"); !errors.Is(err, fault.ErrMalformed) {
		t.Errorf("unknown strategy: %v", err)
	}
	inv := migA100(t, allMIG(3))
	inv.GPUs[2].MIG.Devices[0].Attributes = nil
	if _, err := MIGLabels(inv, MIGStrategyMixed); !errors.Is(err, fault.ErrUnavailable) {
		t.Errorf("missing attributes: %v", err)
	}
}
