package gpu

import (
	"fmt"
	"slices"
	"strings"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/dgxa100"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/dgxb200"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/dgxh100"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/dgxh200"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/server"
	"github.com/google/uuid"

	"github.com/nodeprep/nodeprep/nodeprep/fault"
)

// simulatedServer is one built-in server: go-nvml's mock and the PCI bus
// numbers of its eight GPUs (the slots NVIDIA's DGX user guides list).
type simulatedServer struct {
	build func() *server.Server
	buses []uint32
}

var simulatedServers = map[string]simulatedServer{
	"dgx-a100": {dgxa100.New, []uint32{0x07, 0x0f, 0x47, 0x4e, 0x87, 0x90, 0xb7, 0xbd}},
	"dgx-h100": {dgxh100.New, []uint32{0x18, 0x2a, 0x3a, 0x5d, 0x9a, 0xab, 0xba, 0xdb}},
	"dgx-h200": {dgxh200.New, []uint32{0x18, 0x2a, 0x3a, 0x5d, 0x9a, 0xab, 0xba, 0xdb}},
	"dgx-b200": {dgxb200.New, []uint32{0x1b, 0x43, 0x52, 0x61, 0x9d, 0xc3, 0xd1, 0xdf}},
}

// simulatedNamespace is the UUID namespace of simulated GPU UUIDs
// (a version 5 UUID of the URL below in the URL namespace).
var simulatedNamespace = uuid.NewSHA1(uuid.NameSpaceURL, []byte("https://github.com/nodeprep/nodeprep/simulated"))

// SimulatedNames returns the names of the built-in simulated servers,
// sorted: "dgx-a100", "dgx-b200", "dgx-h100", "dgx-h200".
func SimulatedNames() []string {
	names := make([]string, 0, len(simulatedServers))
	for n := range simulatedServers {
		names = append(names, n)
	}
	slices.Sort(names)
	return names
}

// SimulatedUUID returns the UUID of GPU index of the simulated server name:
// "GPU-" and a version 5 (SHA-1, RFC 9562) UUID of "<name>/<index>", the
// same on every run.
func SimulatedUUID(name string, index int) string {
	return "GPU-" + uuid.NewSHA1(simulatedNamespace, fmt.Appendf(nil, "%s/%d", name, index)).String()
}

// Simulated returns the simulated server name (one of SimulatedNames,
// optionally followed by "+" and one of SimulatedFaults): an
// nvml.Interface built from go-nvml's mock package (pkg/nvml/mock/dgx*,
// eight GPUs each) with deterministic UUIDs (SimulatedUUID), distinct PCI
// bus ids, the real product names (the A100 mock's "Mock " prefix dropped),
// and the device queries the mocks leave unset filled in as a
// healthy DGX reports them: persistence mode on, ECC on with no errors, no
// remapped rows, MIG off, 30-37 °C, the NVLink fabric registered
// (completed, success, SimulatedFabricHealthMask) unless a fault says
// otherwise. The concrete type is
// *server.Server from go-nvml's mock/server package, whose Devices and
// …Func fields tests override to inject faults.
//
// An unknown name or fault gives an error marked fault.ErrUsage that
// wraps ErrUnknownServer and lists the valid names.
func Simulated(name string) (nvml.Interface, error) {
	base, faultName, err := parseSimulated(name)
	if err != nil {
		return nil, err
	}
	spec := simulatedServers[base]
	s := spec.build()
	for i, d := range s.Devices {
		dev := d.(*server.Device)
		fillDevice(dev, base, i, spec.buses[i%len(spec.buses)])
		if faultName != "" {
			fabric := simulatedFaults[faultName]
			dev.GetGpuFabricInfo_v4Func = func() (nvml.GpuFabricInfo_v4, nvml.Return) { return fabric, nvml.SUCCESS }
		}
	}
	return s, nil
}

// fillDevice makes a mock device deterministic and answers the queries
// Build makes that the mock leaves nil.
func fillDevice(d *server.Device, name string, index int, bus uint32) {
	d.UUID = SimulatedUUID(name, index)
	// go-nvml's A100 mock calls itself "Mock NVIDIA A100-SXM4-40GB"; a
	// simulated inventory shows what the real GPU reports.
	product := strings.TrimPrefix(d.Config.Name, "Mock ")
	d.GetNameFunc = func() (string, nvml.Return) { return product, nvml.SUCCESS }
	d.PciBusID = fmt.Sprintf("0000:%02x:00.0", bus)
	pci := nvml.PciInfo{Bus: bus, PciDeviceId: d.Config.PciDeviceId}
	copy(pci.BusId[:], cChars(fmt.Sprintf("00000000:%02x:00.0", bus)))
	copy(pci.BusIdLegacy[:], cChars(d.PciBusID))
	d.GetPciInfoFunc = func() (nvml.PciInfo, nvml.Return) { return pci, nvml.SUCCESS }
	d.GetPersistenceModeFunc = func() (nvml.EnableState, nvml.Return) { return nvml.FEATURE_ENABLED, nvml.SUCCESS }
	d.GetEccModeFunc = func() (nvml.EnableState, nvml.EnableState, nvml.Return) {
		return nvml.FEATURE_ENABLED, nvml.FEATURE_ENABLED, nvml.SUCCESS
	}
	d.GetTotalEccErrorsFunc = func(nvml.MemoryErrorType, nvml.EccCounterType) (uint64, nvml.Return) { return 0, nvml.SUCCESS }
	d.GetRemappedRowsFunc = func() (int, int, bool, bool, nvml.Return) { return 0, 0, false, false, nvml.SUCCESS }
	temp := uint32(30 + index)
	d.GetTemperatureFunc = func(nvml.TemperatureSensors) (uint32, nvml.Return) { return temp, nvml.SUCCESS }
	d.GetMaxMigDeviceCountFunc = func() (int, nvml.Return) { return 7, nvml.SUCCESS }
	d.GetMigDeviceHandleByIndexFunc = func(int) (nvml.Device, nvml.Return) { return nil, nvml.ERROR_NOT_FOUND }
	// Every simulated server is an NVSwitch system whose fabric manager
	// has registered the GPUs: completed, success, no health problem.
	fabric := nvml.GpuFabricInfo_v4{State: nvml.GPU_FABRIC_STATE_COMPLETED, Status: uint32(nvml.SUCCESS), HealthMask: SimulatedFabricHealthMask}
	d.GetGpuFabricInfo_v4Func = func() (nvml.GpuFabricInfo_v4, nvml.Return) { return fabric, nvml.SUCCESS }
}

// SimulatedFabricHealthMask is the fabric health mask of every simulated
// GPU: each field nvml.h defines as "not degraded, no recovery, route
// healthy, no access-timeout recovery" (DEGRADED_BW_FALSE,
// ROUTE_RECOVERY_FALSE, ROUTE_UNHEALTHY_FALSE,
// ACCESS_TIMEOUT_RECOVERY_FALSE: 2 in each of the four lowest 2-bit
// fields, 0xaa).
const SimulatedFabricHealthMask = nvml.GPU_FABRIC_HEALTH_MASK_DEGRADED_BW_FALSE<<nvml.GPU_FABRIC_HEALTH_MASK_SHIFT_DEGRADED_BW |
	nvml.GPU_FABRIC_HEALTH_MASK_ROUTE_RECOVERY_FALSE<<nvml.GPU_FABRIC_HEALTH_MASK_SHIFT_ROUTE_RECOVERY |
	nvml.GPU_FABRIC_HEALTH_MASK_ROUTE_UNHEALTHY_FALSE<<nvml.GPU_FABRIC_HEALTH_MASK_SHIFT_ROUTE_UNHEALTHY |
	nvml.GPU_FABRIC_HEALTH_MASK_ACCESS_TIMEOUT_RECOVERY_FALSE<<nvml.GPU_FABRIC_HEALTH_MASK_SHIFT_ACCESS_TIMEOUT_RECOVERY

// The simulated faults: a server name followed by "+" and one of these
// ("dgx-h200+fabric-not-started") simulates that server with every GPU's
// fabric registration in that condition, as a node whose fabric manager
// is not running (or failed) reports it. The GPUs, their UUIDs and bus ids
// are the server's.
const (
	FaultFabricNotStarted   = "fabric-not-started"   // state NOT_STARTED
	FaultFabricInProgress   = "fabric-in-progress"   // state IN_PROGRESS
	FaultFabricError        = "fabric-error"         // COMPLETED with status NVML_ERROR_UNKNOWN
	FaultFabricDegraded     = "fabric-degraded"      // COMPLETED, success, bandwidth degraded and a route unhealthy
	FaultFabricNotSupported = "fabric-not-supported" // no fabric (as PCIe cards report): healthy
)

// simulatedFaults are the fabric each fault gives every GPU.
var simulatedFaults = map[string]nvml.GpuFabricInfo_v4{
	FaultFabricNotStarted:   {State: nvml.GPU_FABRIC_STATE_NOT_STARTED},
	FaultFabricInProgress:   {State: nvml.GPU_FABRIC_STATE_IN_PROGRESS},
	FaultFabricError:        {State: nvml.GPU_FABRIC_STATE_COMPLETED, Status: uint32(nvml.ERROR_UNKNOWN), HealthMask: SimulatedFabricHealthMask},
	FaultFabricDegraded:     {State: nvml.GPU_FABRIC_STATE_COMPLETED, HealthMask: SimulatedFabricHealthMask&^(3|3<<4) | nvml.GPU_FABRIC_HEALTH_MASK_DEGRADED_BW_TRUE | nvml.GPU_FABRIC_HEALTH_MASK_ROUTE_UNHEALTHY_TRUE<<nvml.GPU_FABRIC_HEALTH_MASK_SHIFT_ROUTE_UNHEALTHY},
	FaultFabricNotSupported: {State: nvml.GPU_FABRIC_STATE_NOT_SUPPORTED},
}

// SimulatedFaults returns the simulated faults, sorted.
func SimulatedFaults() []string {
	out := make([]string, 0, len(simulatedFaults))
	for f := range simulatedFaults {
		out = append(out, f)
	}
	slices.Sort(out)
	return out
}

// parseSimulated splits "server[+fault]" and checks both parts. Errors
// are marked fault.ErrUsage and wrap ErrUnknownServer.
func parseSimulated(name string) (server, faultName string, err error) {
	server, faultName, hasFault := strings.Cut(name, "+")
	if _, ok := simulatedServers[server]; !ok {
		return "", "", fault.Usage(fmt.Errorf("%w %q: want one of %s, optionally followed by +FAULT (%s)", ErrUnknownServer, name, strings.Join(SimulatedNames(), ", "), strings.Join(SimulatedFaults(), ", ")))
	}
	if _, ok := simulatedFaults[faultName]; hasFault && !ok {
		return "", "", fault.Usage(fmt.Errorf("%w %q: unknown fault %q, want one of %s", ErrUnknownServer, name, faultName, strings.Join(SimulatedFaults(), ", ")))
	}
	return server, faultName, nil
}

func cChars(s string) []int8 {
	out := make([]int8, len(s))
	for i := range len(s) {
		out[i] = int8(s[i])
	}
	return out
}

// Simulate builds the inventory of the simulated server name with Build
// and marks it Simulated with Server set to name. Errors are Simulated's
// and Build's.
func Simulate(name string) (*Inventory, error) {
	lib, err := Simulated(name)
	if err != nil {
		return nil, err
	}
	inv, err := Build(lib)
	if err != nil {
		return nil, fmt.Errorf("simulating %s: %w", name, err)
	}
	inv.Simulated = true
	inv.Server = name
	return inv, nil
}
