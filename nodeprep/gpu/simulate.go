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

// Simulated returns the simulated server name (one of SimulatedNames): an
// nvml.Interface built from go-nvml's mock package (pkg/nvml/mock/dgx*,
// eight GPUs each) with deterministic UUIDs (SimulatedUUID), distinct PCI
// bus ids, the real product names (the A100 mock's "Mock " prefix dropped),
// and the device queries the mocks leave unset filled in as a
// healthy DGX reports them: persistence mode on, ECC on with no errors, no
// remapped rows, MIG off, 30-37 °C. The concrete type is
// *server.Server from go-nvml's mock/server package, whose Devices and
// …Func fields tests override to inject faults.
//
// An unknown name gives an error marked fault.ErrUsage that wraps
// ErrUnknownServer and lists the valid names.
func Simulated(name string) (nvml.Interface, error) {
	spec, ok := simulatedServers[name]
	if !ok {
		return nil, fault.Usage(fmt.Errorf("%w %q: want one of %s", ErrUnknownServer, name, strings.Join(SimulatedNames(), ", ")))
	}
	s := spec.build()
	for i, d := range s.Devices {
		fillDevice(d.(*server.Device), name, i, spec.buses[i%len(spec.buses)])
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
