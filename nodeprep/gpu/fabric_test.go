package gpu

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/nodeprep/nodeprep/nodeprep/fault"
	"github.com/nodeprep/nodeprep/nodeprep/testenv/fakedriver"
)

// TestFabricThroughChild reads the fabric registration through the NVML
// child from the fake NVMLs (csrc/fabric.h): the states NVML reports, the
// structure versions a driver may know (v3, v2 for a 550 driver, only the
// unversioned call), and the verdict each gives. issue 28: nothing read the
// fabric, so a DGX whose fabric manager had not registered the GPUs was
// healthy while CUDA failed with 802 on every GPU.
func TestFabricThroughChild(t *testing.T) {
	t.Parallel()
	one := fakeNVML(t, fakedriver.NVML)
	dgx := fakeNVML(t, fakedriver.NVMLDGXH200)
	mask := uint32(SimulatedFabricHealthMask)
	tests := []struct {
		name, lib string
		env       []string
		state     string
		mask      *uint32
		status    *int32
		reason    string // "" = healthy
	}{
		{"no fabric (PCIe)", one, nil, FabricNotSupported, nil, nil, ""},
		{"call not supported", one, []string{"FAKE_NVML_FABRIC=unsupported-call"}, FabricNotSupported, nil, nil, ""},
		{"not started", one, []string{"FAKE_NVML_FABRIC=not-started"}, FabricNotStarted, nil, nil, "registration not started"},
		{"in progress", one, []string{"FAKE_NVML_FABRIC=in-progress"}, FabricInProgress, nil, nil, "registration in progress"},
		{"completed v3", one, []string{"FAKE_NVML_FABRIC=completed"}, FabricCompleted, &mask, ptr(int32(0)), ""},
		{"completed v2 driver", one, []string{"FAKE_NVML_FABRIC=completed", "FAKE_NVML_FABRIC_VERSION=2"}, FabricCompleted, &mask, ptr(int32(0)), ""},
		{"completed, only the unversioned call", one, []string{"FAKE_NVML_FABRIC=completed", "FAKE_NVML_FABRIC_VERSION=1"}, FabricCompleted, nil, ptr(int32(0)), ""},
		{"not started, only the unversioned call", one, []string{"FAKE_NVML_FABRIC=not-started", "FAKE_NVML_FABRIC_VERSION=1"}, FabricNotStarted, nil, nil, "registration not started"},
		{"completed with an error", one, []string{"FAKE_NVML_FABRIC=error"}, FabricCompleted, &mask, ptr(int32(nvml.ERROR_UNKNOWN)), "completed with error"},
		{"degraded", one, []string{"FAKE_NVML_FABRIC=degraded"}, FabricCompleted, ptr(uint32(0x99)), ptr(int32(0)), "NVLink bandwidth degraded, route unhealthy"},
		{"dgx-h200 registered", dgx, nil, FabricCompleted, &mask, ptr(int32(0)), ""},
		{"dgx-h200 not started", dgx, []string{"FAKE_NVML_FABRIC=not-started"}, FabricNotStarted, nil, nil, "registration not started"},
		{"dgx-h200 in progress", dgx, []string{"FAKE_NVML_FABRIC=in-progress"}, FabricInProgress, nil, nil, "registration in progress"},
		{"dgx-h200 error", dgx, []string{"FAKE_NVML_FABRIC=error"}, FabricCompleted, &mask, ptr(int32(nvml.ERROR_UNKNOWN)), "completed with error"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			inv, err := FromNVMLChild(context.Background(), testChild(t, tc.env...), tc.lib, 10*time.Second)
			if err != nil {
				t.Fatalf("FromNVMLChild: %v", err)
			}
			for _, g := range inv.GPUs {
				f := g.Fabric
				if f == nil || f.State != tc.state || !eqPtr(f.HealthMask, tc.mask) || !eqPtr(f.Status, tc.status) {
					t.Fatalf("GPU %d fabric %+v, want state %s, mask %v, status %v", g.Index, f, tc.state, deref(tc.mask), deref(tc.status))
				}
				if tc.reason == "" {
					if !g.Health.Healthy {
						t.Errorf("GPU %d unhealthy (%v), want healthy", g.Index, g.Health.Reasons)
					}
					continue
				}
				if g.Health.Healthy || !slices.ContainsFunc(g.Health.Reasons, func(r string) bool {
					return strings.Contains(r, tc.reason) && strings.Contains(r, "nvidia-smi -q | grep -A2 Fabric") && strings.Contains(r, "hardware.nvidia.datacenter.enable")
				}) {
					t.Errorf("GPU %d health %+v, want a reason with %q, the NixOS fix and the nvidia-smi check", g.Index, g.Health, tc.reason)
				}
			}
		})
	}
}

func ptr[T any](v T) *T { return &v }

func eqPtr[T comparable](a, b *T) bool { return (a == nil) == (b == nil) && (a == nil || *a == *b) }

func deref[T any](p *T) any {
	if p == nil {
		return nil
	}
	return *p
}

// TestSimulatedFabric: every simulated server reports its fabric
// registered and healthy, and each simulated fault gives every GPU of the
// server its fabric state, with the server's own UUIDs.
func TestSimulatedFabric(t *testing.T) {
	t.Parallel()
	for _, name := range SimulatedNames() {
		inv, err := Simulate(name)
		if err != nil {
			t.Fatal(err)
		}
		for _, g := range inv.GPUs {
			if g.Fabric == nil || g.Fabric.State != FabricCompleted || *g.Fabric.Status != 0 || *g.Fabric.HealthMask != SimulatedFabricHealthMask || !g.Health.Healthy {
				t.Errorf("%s GPU %d: fabric %+v, health %+v; want completed, success, healthy", name, g.Index, g.Fabric, g.Health)
			}
		}
	}
	tests := []struct {
		fault, state, text, reason string
	}{
		{FaultFabricNotStarted, FabricNotStarted, "not-started", "registration not started"},
		{FaultFabricInProgress, FabricInProgress, "in-progress", "registration in progress"},
		{FaultFabricError, FabricCompleted, "error", "completed with error"},
		{FaultFabricDegraded, FabricCompleted, "degraded", "NVLink fabric degraded (NVLink bandwidth degraded, route unhealthy)"},
		{FaultFabricNotSupported, FabricNotSupported, "none", ""},
	}
	if len(tests) != len(SimulatedFaults()) {
		t.Fatalf("%d faults tested, %d simulated", len(tests), len(SimulatedFaults()))
	}
	for _, tc := range tests {
		name := "dgx-h200+" + tc.fault
		inv, err := Simulate(name)
		if err != nil {
			t.Fatalf("Simulate(%s): %v", name, err)
		}
		if inv.Server != name || len(inv.GPUs) != 8 {
			t.Fatalf("%s: server %q, %d GPUs", name, inv.Server, len(inv.GPUs))
		}
		for _, g := range inv.GPUs {
			if g.UUID != SimulatedUUID("dgx-h200", g.Index) {
				t.Errorf("%s GPU %d: UUID %s, want dgx-h200's", name, g.Index, g.UUID)
			}
			if g.Fabric == nil || g.Fabric.State != tc.state || FabricText(g.Fabric) != tc.text {
				t.Errorf("%s GPU %d: fabric %+v (%s), want %s (%s)", name, g.Index, g.Fabric, FabricText(g.Fabric), tc.state, tc.text)
			}
			healthyWanted := tc.reason == ""
			if g.Health.Healthy != healthyWanted || (!healthyWanted && !strings.Contains(strings.Join(g.Health.Reasons, "; "), tc.reason)) {
				t.Errorf("%s GPU %d: health %+v, want healthy=%v with %q", name, g.Index, g.Health, healthyWanted, tc.reason)
			}
		}
	}
	for _, bad := range []string{"dgx-h200+", "dgx-h200+fabric", "dgx-x+fabric-error", "+fabric-error", "dgx-h200+fabric-error+fabric-error"} {
		if _, err := Simulated(bad); !errors.Is(err, ErrUnknownServer) || !errors.Is(err, fault.ErrUsage) {
			t.Errorf("Simulated(%q) = %v, want ErrUnknownServer marked usage", bad, err)
		}
	}
}

// TestFabricDriverWithoutTheCall: a library without either fabric
// function (a driver before the call existed) gives "not supported", a
// healthy GPU, and no call into the missing function (go-nvml binds
// lazily: the call would end the process).
func TestFabricDriverWithoutTheCall(t *testing.T) {
	t.Parallel()
	s := simulated(t, "dgx-h200")
	s.LookupSymbolFunc = func(sym string) error {
		if strings.Contains(sym, "Fabric") {
			return errors.New("undefined symbol " + sym)
		}
		return nil
	}
	for i := range s.Devices {
		device(s, i).GetGpuFabricInfo_v4Func = nil // panics if called
		device(s, i).GetGpuFabricInfoVFunc = nil
		device(s, i).GetGpuFabricInfoFunc = nil
	}
	inv, err := Build(s, WithSymbolCheck())
	if err != nil {
		t.Fatal(err)
	}
	for _, g := range inv.GPUs {
		if g.Fabric == nil || g.Fabric.State != FabricNotSupported || !g.Health.Healthy {
			t.Errorf("GPU %d: fabric %+v, health %+v; want not supported, healthy", g.Index, g.Fabric, g.Health)
		}
	}
}

// TestFabricQueryFails: a fabric query that fails (not NOT_SUPPORTED) is
// a health reason naming it, as every other query's failure is.
func TestFabricQueryFails(t *testing.T) {
	t.Parallel()
	s := simulated(t, "dgx-h200")
	device(s, 2).GetGpuFabricInfo_v4Func = func() (nvml.GpuFabricInfo_v4, nvml.Return) {
		return nvml.GpuFabricInfo_v4{}, nvml.ERROR_UNKNOWN
	}
	inv, err := Build(s)
	if err != nil {
		t.Fatal(err)
	}
	g := inv.GPUs[2]
	if g.Health.Healthy || g.Fabric != nil || !strings.Contains(strings.Join(g.Health.Reasons, ";"), "reading fabric info") {
		t.Errorf("GPU 2: fabric %+v, health %+v; want unhealthy, reading fabric info", g.Fabric, g.Health)
	}
	if !inv.GPUs[1].Health.Healthy {
		t.Errorf("GPU 1 unhealthy: %v", inv.GPUs[1].Health)
	}
}

// TestFabricProblems decodes health masks field by field (nvml.h's
// NVML_GPU_FABRIC_HEALTH_MASK_* shifts and widths).
func TestFabricProblems(t *testing.T) {
	t.Parallel()
	tests := []struct {
		mask uint32
		want []string
	}{
		{0, nil},
		{SimulatedFabricHealthMask, nil},
		{1, []string{"NVLink bandwidth degraded"}},
		{1 << 2, []string{"route recovery in progress"}},
		{1 << 4, []string{"route unhealthy"}},
		{1 << 6, []string{"access timeout recovery in progress"}},
		{1 << 8, nil}, // INCORRECT_CONFIGURATION_NONE
		{5 << 8, []string{"incorrect configuration: insufficient NVLinks"}},
		{15 << 8, []string{"incorrect configuration (15)"}},
		{2 << 12, nil}, // partition not assigned: not judged
		{0x99, []string{"NVLink bandwidth degraded", "route unhealthy"}},
	}
	for _, tc := range tests {
		if got := FabricProblems(tc.mask); !slices.Equal(got, tc.want) {
			t.Errorf("FabricProblems(%#x) = %q, want %q", tc.mask, got, tc.want)
		}
	}
	for _, s := range []string{"unhealthy", "limited-capacity"} {
		f := &Fabric{State: FabricCompleted, Status: ptr(int32(0)), HealthSummary: s}
		if r := fabricVerdict(f); !strings.Contains(r, "health summary "+s) {
			t.Errorf("summary %s: verdict %q", s, r)
		}
	}
	if r := fabricVerdict(&Fabric{State: FabricCompleted, Status: ptr(int32(0)), HealthSummary: "healthy"}); r != "" {
		t.Errorf("healthy summary: verdict %q", r)
	}
}

// FuzzSimulatedName: Simulated accepts exactly "server" and
// "server+fault" for the known servers and faults, and refuses anything
// else with a usage error.
func FuzzSimulatedName(f *testing.F) {
	for _, s := range []string{"dgx-h200", "dgx-h200+fabric-error", "dgx-b200+", "+", "dgx-a100+fabric-not-started+x", ""} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, name string) {
		base, faultName, err := parseSimulated(name)
		if err != nil {
			if !errors.Is(err, ErrUnknownServer) || !errors.Is(err, fault.ErrUsage) {
				t.Fatalf("parseSimulated(%q): %v, want a usage error", name, err)
			}
			return
		}
		want := base
		if faultName != "" {
			want += "+" + faultName
		}
		if want != name || !slices.Contains(SimulatedNames(), base) || (faultName != "" && !slices.Contains(SimulatedFaults(), faultName)) {
			t.Fatalf("parseSimulated(%q) accepted %q + %q", name, base, faultName)
		}
	})
}
