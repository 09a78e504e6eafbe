package gpu

import (
	"errors"
	"fmt"
	"os"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/server"

	"github.com/nodeprep/nodeprep/nodeprep/fault"
)

// simulated returns the mock behind a simulated server, for fault injection.
func simulated(t *testing.T, name string) *server.Server {
	t.Helper()
	lib, err := Simulated(name)
	if err != nil {
		t.Fatalf("Simulated(%q): %v", name, err)
	}
	return lib.(*server.Server)
}

func device(s *server.Server, i int) *server.Device { return s.Devices[i].(*server.Device) }

var uuidRE = regexp.MustCompile(`^GPU-[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$`)

func TestBuildSimulatedServers(t *testing.T) {
	t.Parallel()
	tests := []struct {
		server, name, arch, cuda, driver string
		memoryMiB                        uint64
		major                            int
	}{
		{"dgx-a100", "NVIDIA A100-SXM4-40GB", "ampere", "12.4", "550.54.15", 40960, 8},
		{"dgx-h100", "NVIDIA H100 80GB HBM3", "hopper", "12.4", "550.54.15", 81920, 9},
		{"dgx-h200", "NVIDIA H200 141GB HBM3e", "hopper", "12.4", "550.54.15", 144384, 9},
		{"dgx-b200", "NVIDIA B200 180GB HBM3e", "blackwell", "12.6", "560.28.03", 0, 10},
	}
	if got, want := len(tests), len(SimulatedNames()); got != want {
		t.Fatalf("%d servers tested, %d simulated", got, want)
	}
	for _, tt := range tests {
		t.Run(tt.server, func(t *testing.T) {
			t.Parallel()
			inv, err := Simulate(tt.server)
			if err != nil {
				t.Fatalf("Simulate: %v", err)
			}
			if !inv.Simulated || inv.Server != tt.server {
				t.Errorf("Simulated, Server = %v, %q; want true, %q", inv.Simulated, inv.Server, tt.server)
			}
			if inv.DriverVersion != tt.driver || inv.CUDADriverVersion != tt.cuda || inv.NVMLVersion != "12."+tt.driver {
				t.Errorf("versions = %q, %q, %q", inv.DriverVersion, inv.NVMLVersion, inv.CUDADriverVersion)
			}
			if len(inv.GPUs) != 8 {
				t.Fatalf("%d GPUs, want 8", len(inv.GPUs))
			}
			uuids, buses := map[string]bool{}, map[string]bool{}
			for i, g := range inv.GPUs {
				if g.Index != i || g.Minor != i {
					t.Errorf("GPU %d: index, minor = %d, %d", i, g.Index, g.Minor)
				}
				if !uuidRE.MatchString(g.UUID) {
					t.Errorf("GPU %d: UUID %q is not GPU-8-4-4-4-12", i, g.UUID)
				}
				if g.UUID != SimulatedUUID(tt.server, i) {
					t.Errorf("GPU %d: UUID %q, want SimulatedUUID %q", i, g.UUID, SimulatedUUID(tt.server, i))
				}
				uuids[g.UUID], buses[g.PCIBusID] = true, true
				if _, err := NormalizeBusID(g.PCIBusID); err != nil || !strings.HasPrefix(g.PCIBusID, "0000:") {
					t.Errorf("GPU %d: bus id %q: %v", i, g.PCIBusID, err)
				}
				if g.Name != tt.name || g.Brand != "NVIDIA" || g.Architecture != tt.arch || g.ComputeMajor != tt.major {
					t.Errorf("GPU %d: name, brand, arch, major = %q, %q, %q, %d", i, g.Name, g.Brand, g.Architecture, g.ComputeMajor)
				}
				if tt.memoryMiB != 0 && g.MemoryMiB != tt.memoryMiB {
					t.Errorf("GPU %d: memory %d MiB, want %d", i, g.MemoryMiB, tt.memoryMiB)
				}
				if g.MemoryMiB == 0 {
					t.Errorf("GPU %d: no memory", i)
				}
				if g.PersistenceMode == nil || !*g.PersistenceMode || g.ECC == nil || !g.ECC.Enabled ||
					g.RemappedRows == nil || g.TemperatureC == nil || g.MIG == nil || g.MIG.Current || g.MIG.Pending {
					t.Errorf("GPU %d: optional fields %+v", i, g)
				}
				if !g.Health.Healthy || len(g.Health.Reasons) != 0 {
					t.Errorf("GPU %d: health %+v, want healthy", i, g.Health)
				}
			}
			if len(uuids) != 8 || len(buses) != 8 {
				t.Errorf("%d distinct UUIDs, %d distinct bus ids; want 8 each", len(uuids), len(buses))
			}
			again, err := Simulate(tt.server)
			if err != nil || !reflect.DeepEqual(inv, again) {
				t.Errorf("a second Simulate differs (%v)", err)
			}
		})
	}
}

// initOnly is an NVML whose every method but Init panics (a nil embedded
// interface): it proves Build calls nothing after a failed Init.
type initOnly struct {
	nvml.Interface
	ret   nvml.Return
	calls int
}

func (l *initOnly) Init() nvml.Return { l.calls++; return l.ret }

func TestBuildInitErrors(t *testing.T) {
	t.Parallel()
	tests := []struct {
		ret      nvml.Return
		path     string
		sentinel error
		want     []string
	}{
		{nvml.ERROR_LIBRARY_NOT_FOUND, "", ErrLibraryNotFound, []string{"libnvidia-ml.so.1", "dynamic linker", "/run/opengl-driver/lib/libnvidia-ml.so.1"}},
		{nvml.ERROR_LIBRARY_NOT_FOUND, "/opt/nv/libnvidia-ml.so.1", ErrLibraryNotFound, []string{"/opt/nv/libnvidia-ml.so.1", "/run/opengl-driver/lib/libnvidia-ml.so.1"}},
		{nvml.ERROR_DRIVER_NOT_LOADED, "", ErrDriverNotLoaded, []string{"ERROR_DRIVER_NOT_LOADED", "kernel module"}},
		{nvml.ERROR_LIB_RM_VERSION_MISMATCH, "", ErrVersionMismatch, []string{"ERROR_LIB_RM_VERSION_MISMATCH", "reboot"}},
		{nvml.ERROR_NO_PERMISSION, "", ErrInit, []string{"ERROR_NO_PERMISSION"}},
	}
	for _, tt := range tests {
		t.Run(tt.ret.String()+tt.path, func(t *testing.T) {
			t.Parallel()
			lib := &initOnly{ret: tt.ret}
			inv, err := Build(lib, WithLibraryPath(tt.path))
			if inv != nil || lib.calls != 1 {
				t.Errorf("inventory %v after %d Init calls", inv, lib.calls)
			}
			for _, target := range []error{tt.sentinel, fault.ErrUnavailable, tt.ret} {
				if !errors.Is(err, target) {
					t.Errorf("error %v is not %v", err, target)
				}
			}
			for _, s := range tt.want {
				if err == nil || !strings.Contains(err.Error(), s) {
					t.Errorf("error %v does not say %q", err, s)
				}
			}
		})
	}
}

func TestBuildShutdown(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		inject  func(s *server.Server)
		wantErr string
	}{
		{"success", func(*server.Server) {}, ""},
		{"driver version fails", func(s *server.Server) {
			s.SystemGetDriverVersionFunc = func() (string, nvml.Return) { return "", nvml.ERROR_UNKNOWN }
		}, "reading driver version"},
		{"count fails", func(s *server.Server) {
			s.DeviceGetCountFunc = func() (int, nvml.Return) { return 0, nvml.ERROR_UNKNOWN }
		}, "counting GPUs"},
		{"shutdown fails", func(s *server.Server) {
			s.ShutdownFunc = func() nvml.Return { return nvml.ERROR_UNKNOWN }
		}, "shutting down NVML"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			s := simulated(t, "dgx-h100")
			tt.inject(s)
			inv, err := Build(s)
			if n := len(s.Interface.ShutdownCalls()); n != 1 {
				t.Errorf("Shutdown called %d times, want 1", n)
			}
			if tt.wantErr == "" {
				if err != nil || inv == nil {
					t.Fatalf("Build: %v", err)
				}
				return
			}
			if inv != nil || !errors.Is(err, fault.ErrUnavailable) || !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("Build = %v, %v; want nil and an unavailable error saying %q", inv, err, tt.wantErr)
			}
		})
	}
}

func TestBuildGPUFaults(t *testing.T) {
	t.Parallel()
	lost := func() nvml.Return { return nvml.ERROR_GPU_IS_LOST }
	tests := []struct {
		name    string
		gpu     int
		inject  func(s *server.Server, d *server.Device)
		reasons []string
		check   func(t *testing.T, g GPU)
	}{
		{"handle lost", 2, func(s *server.Server, _ *server.Device) {
			s.DeviceGetHandleByIndexFunc = func(i int) (nvml.Device, nvml.Return) {
				if i == 2 {
					return nil, lost()
				}
				return s.Devices[i], nvml.SUCCESS
			}
		}, []string{ReasonLost}, func(t *testing.T, g GPU) {
			if g.UUID != "" || g.Index != 2 {
				t.Errorf("lost GPU has %+v", g)
			}
		}},
		{"UUID lost", 5, func(_ *server.Server, d *server.Device) {
			d.GetUUIDFunc = func() (string, nvml.Return) { return "", lost() }
			d.GetNameFunc = func() (string, nvml.Return) { panic("queried a lost GPU") }
		}, []string{ReasonLost}, nil},
		{"temperature lost", 7, func(_ *server.Server, d *server.Device) {
			d.GetTemperatureFunc = func(nvml.TemperatureSensors) (uint32, nvml.Return) { return 0, lost() }
		}, []string{ReasonLost}, func(t *testing.T, g GPU) {
			if g.UUID == "" || g.TemperatureC != nil {
				t.Errorf("fields before the loss missing or after it present: %+v", g)
			}
		}},
		{"uncorrected ECC errors", 0, func(_ *server.Server, d *server.Device) {
			d.GetTotalEccErrorsFunc = func(typ nvml.MemoryErrorType, ctr nvml.EccCounterType) (uint64, nvml.Return) {
				if typ != nvml.MEMORY_ERROR_TYPE_UNCORRECTED || ctr != nvml.VOLATILE_ECC {
					return 0, nvml.ERROR_INVALID_ARGUMENT
				}
				return 3, nvml.SUCCESS
			}
		}, []string{"3 uncorrected ECC errors since the driver loaded"}, nil},
		{"row remap failure", 1, func(_ *server.Server, d *server.Device) {
			d.GetRemappedRowsFunc = func() (int, int, bool, bool, nvml.Return) { return 2, 1, false, true, nvml.SUCCESS }
		}, []string{ReasonRowRemapFailure}, func(t *testing.T, g GPU) {
			if want := (RemappedRows{Correctable: 2, Uncorrectable: 1, Failure: true}); *g.RemappedRows != want {
				t.Errorf("remapped rows %+v, want %+v", *g.RemappedRows, want)
			}
		}},
		{"MIG pending", 4, func(_ *server.Server, d *server.Device) {
			d.GetMigModeFunc = func() (int, int, nvml.Return) { return nvml.DEVICE_MIG_DISABLE, nvml.DEVICE_MIG_ENABLE, nvml.SUCCESS }
		}, []string{"MIG mode change pending (now off, after reset on): reset the GPU"}, nil},
		{"other error", 3, func(_ *server.Server, d *server.Device) {
			d.GetPciInfoFunc = func() (nvml.PciInfo, nvml.Return) { return nvml.PciInfo{}, nvml.ERROR_UNKNOWN }
		}, []string{"reading PCI info: ERROR_UNKNOWN"}, func(t *testing.T, g GPU) {
			if g.TemperatureC == nil {
				t.Errorf("reading stopped after a non-fatal error")
			}
		}},
		{"UUID with control bytes", 6, func(_ *server.Server, d *server.Device) {
			d.GetUUIDFunc = func() (string, nvml.Return) { return "GPU-\x1b[2J\x07", nvml.SUCCESS }
		}, []string{`NVML reported a malformed UUID "GPU-\x1b[2J\a"`}, func(t *testing.T, g GPU) {
			if g.UUID != `GPU-\x1b[2J\a` {
				t.Errorf("UUID %q: want the control bytes escaped", g.UUID)
			}
		}},
		{"UUID without GPU- prefix", 6, func(_ *server.Server, d *server.Device) {
			d.GetUUIDFunc = func() (string, nvml.Return) { return "00000000-0000-0000-0000-000000000006", nvml.SUCCESS }
		}, []string{`NVML reported a malformed UUID "00000000-0000-0000-0000-000000000006"`}, nil},
		{"UUID in another form", 6, func(_ *server.Server, d *server.Device) {
			d.GetUUIDFunc = func() (string, nvml.Return) { return "GPU-{00000000-0000-0000-0000-000000000006}", nvml.SUCCESS }
		}, []string{`NVML reported a malformed UUID "GPU-{00000000-0000-0000-0000-000000000006}"`}, nil},
		// issue 22: an empty UUID with success showed as "-" with health ok.
		{"empty UUID with success", 2, func(_ *server.Server, d *server.Device) {
			d.GetUUIDFunc = func() (string, nvml.Return) { return "", nvml.SUCCESS }
		}, []string{"NVML reported no UUID (an empty string): want GPU- and an RFC 9562 UUID"}, nil},
		{"UUID not supported", 2, func(_ *server.Server, d *server.Device) {
			d.GetUUIDFunc = func() (string, nvml.Return) { return "", nvml.ERROR_NOT_SUPPORTED }
		}, []string{"NVML reported no UUID (an empty string): want GPU- and an RFC 9562 UUID"}, nil},
		{"UUID query fails", 2, func(_ *server.Server, d *server.Device) {
			d.GetUUIDFunc = func() (string, nvml.Return) { return "", nvml.ERROR_UNKNOWN }
		}, []string{"reading UUID: ERROR_UNKNOWN"}, nil},
		{"malformed bus id", 3, func(_ *server.Server, d *server.Device) {
			d.GetPciInfoFunc = func() (nvml.PciInfo, nvml.Return) { return nvml.PciInfo{}, nvml.SUCCESS }
		}, []string{`reading PCI info: malformed PCI bus id "": no function`}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			s := simulated(t, "dgx-a100")
			tt.inject(s, device(s, tt.gpu))
			inv, err := Build(s)
			if err != nil {
				t.Fatalf("Build: %v", err)
			}
			if len(inv.GPUs) != 8 {
				t.Fatalf("%d GPUs reported, want 8", len(inv.GPUs))
			}
			for i, g := range inv.GPUs {
				if i == tt.gpu {
					if g.Health.Healthy || !slices.Equal(g.Health.Reasons, tt.reasons) {
						t.Errorf("GPU %d: health %+v, want reasons %q", i, g.Health, tt.reasons)
					}
					if tt.check != nil {
						tt.check(t, g)
					}
				} else if !g.Health.Healthy || g.UUID == "" {
					t.Errorf("GPU %d (not faulted): %+v", i, g)
				}
			}
		})
	}
}

// TestBuildDuplicateUUIDs: two GPUs that report the same UUID are both
// unhealthy (a consumer asking for that UUID could get either), each
// naming the other; the rest stay healthy.
func TestBuildDuplicateUUIDs(t *testing.T) {
	t.Parallel()
	s := simulated(t, "dgx-a100")
	same := device(s, 1).UUID
	device(s, 5).GetUUIDFunc = func() (string, nvml.Return) { return same, nvml.SUCCESS }
	inv, err := Build(s)
	if err != nil {
		t.Fatal(err)
	}
	for i, g := range inv.GPUs {
		switch i {
		case 1, 5:
			other := 6 - i
			want := []string{fmt.Sprintf("NVML reported UUID %s for GPU %d too", same, other)}
			if g.Health.Healthy || !slices.Equal(g.Health.Reasons, want) {
				t.Errorf("GPU %d: %+v, want unhealthy with %q", i, g.Health, want)
			}
		default:
			if !g.Health.Healthy {
				t.Errorf("GPU %d: %+v", i, g.Health)
			}
		}
	}
	if n := len(inv.Healthy()); n != 6 {
		t.Errorf("%d healthy GPUs, want 6", n)
	}
}

// TestBuildAllUUIDsEmpty: every GPU reporting an empty UUID with success
// leaves no healthy GPU (issue 22: inspect showed 8 healthy GPUs with
// UUID "-").
func TestBuildAllUUIDsEmpty(t *testing.T) {
	t.Parallel()
	s := simulated(t, "dgx-a100")
	for i := range 8 {
		device(s, i).GetUUIDFunc = func() (string, nvml.Return) { return "", nvml.SUCCESS }
	}
	inv, err := Build(s)
	if err != nil {
		t.Fatal(err)
	}
	if n := len(inv.Healthy()); n != 0 {
		t.Errorf("%d healthy GPUs with empty UUIDs, want 0", n)
	}
}

func TestBuildNotSupported(t *testing.T) {
	t.Parallel()
	ns := nvml.ERROR_NOT_SUPPORTED
	tests := []struct {
		name   string
		inject func(d *server.Device)
		absent func(g GPU) bool
	}{
		{"persistence", func(d *server.Device) {
			d.GetPersistenceModeFunc = func() (nvml.EnableState, nvml.Return) { return 0, ns }
		}, func(g GPU) bool { return g.PersistenceMode == nil }},
		{"MIG", func(d *server.Device) {
			d.GetMigModeFunc = func() (int, int, nvml.Return) { return 0, 0, ns }
		}, func(g GPU) bool { return g.MIG == nil }},
		{"ECC", func(d *server.Device) {
			d.GetEccModeFunc = func() (nvml.EnableState, nvml.EnableState, nvml.Return) { return 0, 0, ns }
		}, func(g GPU) bool { return g.ECC == nil }},
		{"ECC counters", func(d *server.Device) {
			d.GetTotalEccErrorsFunc = func(nvml.MemoryErrorType, nvml.EccCounterType) (uint64, nvml.Return) { return 9, ns }
		}, func(g GPU) bool { return g.ECC != nil && g.ECC.VolatileUncorrected == 0 }},
		{"remapped rows", func(d *server.Device) {
			d.GetRemappedRowsFunc = func() (int, int, bool, bool, nvml.Return) { return 0, 0, false, false, ns }
		}, func(g GPU) bool { return g.RemappedRows == nil }},
		{"temperature", func(d *server.Device) {
			d.GetTemperatureFunc = func(nvml.TemperatureSensors) (uint32, nvml.Return) { return 0, ns }
		}, func(g GPU) bool { return g.TemperatureC == nil }},
		{"brand (old driver)", func(d *server.Device) {
			d.GetBrandFunc = func() (nvml.BrandType, nvml.Return) { return 0, nvml.ERROR_FUNCTION_NOT_FOUND }
		}, func(g GPU) bool { return g.Brand == "" }},
		{"ECC disabled", func(d *server.Device) {
			d.GetEccModeFunc = func() (nvml.EnableState, nvml.EnableState, nvml.Return) {
				return nvml.FEATURE_DISABLED, nvml.FEATURE_DISABLED, nvml.SUCCESS
			}
			d.GetTotalEccErrorsFunc = nil // must not be called
		}, func(g GPU) bool { return g.ECC != nil && !g.ECC.Enabled }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			s := simulated(t, "dgx-h200")
			tt.inject(device(s, 0))
			inv, err := Build(s)
			if err != nil {
				t.Fatalf("Build: %v", err)
			}
			g := inv.GPUs[0]
			if !tt.absent(g) || !g.Health.Healthy {
				t.Errorf("GPU 0 = %+v; want the field absent and the GPU healthy", g)
			}
		})
	}
	s := simulated(t, "dgx-h200")
	s.SystemGetCudaDriverVersionFunc = func() (int, nvml.Return) { return 0, ns }
	if inv, err := Build(s); err != nil || inv.CUDADriverVersion != "" {
		t.Errorf("CUDA version not supported: %v, %v", inv, err)
	}
}

func TestBuildMIGDevices(t *testing.T) {
	t.Parallel()
	s := simulated(t, "dgx-a100")
	d := device(s, 6)
	d.GetMigModeFunc = func() (int, int, nvml.Return) { return nvml.DEVICE_MIG_ENABLE, nvml.DEVICE_MIG_ENABLE, nvml.SUCCESS }
	// A100-SXM4-40GB: 40960 MiB; 1g.5gb has 4864 MiB, 3g.20gb 19968 MiB.
	migs := map[int]*mock.Device{
		0: {
			GetUUIDFunc: func() (string, nvml.Return) { return "MIG-11111111-2222-3333-4444-555555555555", nvml.SUCCESS },
			GetAttributesFunc: func() (nvml.DeviceAttributes, nvml.Return) {
				return nvml.DeviceAttributes{GpuInstanceSliceCount: 3, ComputeInstanceSliceCount: 3, MemorySizeMB: 19968, MultiprocessorCount: 42, SharedCopyEngineCount: 3, SharedDecoderCount: 2, SharedJpegCount: 0, SharedOfaCount: 0}, nvml.SUCCESS
			},
		},
		4: {
			GetUUIDFunc: func() (string, nvml.Return) { return "MIG-66666666-7777-8888-9999-000000000000", nvml.SUCCESS },
			GetAttributesFunc: func() (nvml.DeviceAttributes, nvml.Return) {
				return nvml.DeviceAttributes{GpuInstanceSliceCount: 1, ComputeInstanceSliceCount: 1, MemorySizeMB: 4864}, nvml.SUCCESS
			},
		},
	}
	d.GetMigDeviceHandleByIndexFunc = func(i int) (nvml.Device, nvml.Return) {
		if m, ok := migs[i]; ok {
			return m, nvml.SUCCESS
		}
		return nil, nvml.ERROR_NOT_FOUND
	}
	inv, err := Build(s)
	if err != nil {
		t.Fatalf("Build: %v", err)
	}
	want := &MIG{Current: true, Pending: true, Devices: []MIGDevice{
		{Index: 0, UUID: "MIG-11111111-2222-3333-4444-555555555555", Profile: "3g.20gb", MemoryMiB: 19968,
			Attributes: &MIGAttributes{GISlices: 3, CISlices: 3, Multiprocessors: 42, CopyEngines: 3, Decoders: 2}},
		{Index: 4, UUID: "MIG-66666666-7777-8888-9999-000000000000", Profile: "1g.5gb", MemoryMiB: 4864,
			Attributes: &MIGAttributes{GISlices: 1, CISlices: 1}},
	}}
	if got := inv.GPUs[6].MIG; !reflect.DeepEqual(got, want) {
		t.Errorf("MIG = %+v, want %+v", got, want)
	}
	if !inv.GPUs[6].Health.Healthy {
		t.Errorf("health %+v", inv.GPUs[6].Health)
	}
}

func TestCUDAVersion(t *testing.T) {
	t.Parallel()
	for v, want := range map[int]string{12040: "12.4", 12060: "12.6", 11080: "11.8", 13000: "13.0", 12090: "12.9"} {
		if got := CUDAVersion(v); got != want {
			t.Errorf("CUDAVersion(%d) = %q, want %q", v, got, want)
		}
	}
}

func TestFamily(t *testing.T) {
	t.Parallel()
	tests := []struct {
		major, minor int
		want         string
	}{
		{7, 0, "volta"}, {7, 5, "turing"}, {8, 0, "ampere"}, {8, 6, "ampere"}, {8, 9, "ada-lovelace"},
		{9, 0, "hopper"}, {10, 0, "blackwell"}, {12, 0, "blackwell"}, {4, 0, ""}, {0, 0, ""},
	}
	for _, tt := range tests {
		if got := Family(tt.major, tt.minor); got != tt.want {
			t.Errorf("Family(%d, %d) = %q, want %q", tt.major, tt.minor, got, tt.want)
		}
	}
}

func TestMIGProfile(t *testing.T) {
	t.Parallel()
	// Memory sizes as real drivers report them (nvidia-smi mig -lgip).
	tests := []struct {
		gi, ci            uint32
		migMiB, parentMiB uint64
		want              string
	}{
		{1, 1, 4864, 40960, "1g.5gb"},
		{2, 2, 9856, 40960, "2g.10gb"},
		{7, 7, 40192, 40960, "7g.40gb"},
		{3, 1, 19968, 40960, "1c.3g.20gb"},
		{1, 1, 9984, 81559, "1g.10gb"},
		{7, 7, 80896, 81559, "7g.80gb"},
		{2, 2, 4096, 0, "2g.4gb"},
	}
	for _, tt := range tests {
		if got := MIGProfile(tt.gi, tt.ci, tt.migMiB, tt.parentMiB); got != tt.want {
			t.Errorf("MIGProfile(%d, %d, %d, %d) = %q, want %q", tt.gi, tt.ci, tt.migMiB, tt.parentMiB, got, tt.want)
		}
	}
}

func TestBrandName(t *testing.T) {
	t.Parallel()
	for b, want := range map[nvml.BrandType]string{nvml.BRAND_NVIDIA: "NVIDIA", nvml.BRAND_TESLA: "Tesla", nvml.BRAND_UNKNOWN: "", 99: ""} {
		if got := BrandName(b); got != want {
			t.Errorf("BrandName(%d) = %q, want %q", b, got, want)
		}
	}
}

// A library that loads but is not NVML must not reach go-nvml's lazily
// bound nvmlInit_v2 (the dynamic linker would end the process).
func TestFromNVMLNotNVML(t *testing.T) {
	t.Parallel()
	libc := "/lib/x86_64-linux-gnu/libc.so.6"
	if _, err := os.Stat(libc); err != nil {
		libc = "/lib/aarch64-linux-gnu/libc.so.6"
	}
	_, err := FromNVML(libc)
	if !errors.Is(err, fault.ErrUnavailable) || !strings.Contains(err.Error(), "it is not NVML") {
		t.Fatalf("err = %v", err)
	}
}

// TestMIGWithoutDevices: MIG mode on with no MIG device is a warning in
// the inventory (inspect and cdi check print it); with devices it is not.
func TestMIGWithoutDevices(t *testing.T) {
	t.Parallel()
	s := simulated(t, "dgx-a100")
	d := device(s, 3)
	d.GetMigModeFunc = func() (int, int, nvml.Return) { return nvml.DEVICE_MIG_ENABLE, nvml.DEVICE_MIG_ENABLE, nvml.SUCCESS }
	d.GetMigDeviceHandleByIndexFunc = func(int) (nvml.Device, nvml.Return) { return nil, nvml.ERROR_NOT_FOUND }
	inv, err := Build(s)
	if err != nil {
		t.Fatal(err)
	}
	w := inv.Warnings()
	if len(w) != 1 || !strings.Contains(w[0], "GPU 3 ("+inv.GPUs[3].UUID+") has MIG mode on but no MIG device") {
		t.Fatalf("warnings %q", w)
	}
	var b strings.Builder
	if err := inv.WriteText(&b); err != nil || !strings.Contains(b.String(), "warning: GPU 3") {
		t.Errorf("inspect text lacks the warning (%v):\n%s", err, b.String())
	}
	clean, err := Build(simulated(t, "dgx-a100"))
	if err != nil || len(clean.Warnings()) != 0 {
		t.Errorf("MIG off: warnings %q (%v)", clean.Warnings(), err)
	}
}
