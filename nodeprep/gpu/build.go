package gpu

import (
	"errors"
	"fmt"
	"math"
	"strings"

	"github.com/NVIDIA/go-nvml/pkg/dl"
	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/nodeprep/nodeprep/nodeprep/fault"
)

// DefaultLibrary is the NVML library loaded when no path is given; the
// dynamic linker searches for it (LD_LIBRARY_PATH, /etc/ld.so.cache, the
// default directories).
const DefaultLibrary = "libnvidia-ml.so.1"

// NixOSLibrary is where NixOS puts the driver's NVML (hardware.graphics /
// hardware.opengl link the driver's libraries under /run/opengl-driver). It
// is not on the dynamic linker's path of a system service.
const NixOSLibrary = "/run/opengl-driver/lib/libnvidia-ml.so.1"

// Sentinel errors for what callers branch on. Build marks each with
// fault.ErrUnavailable (exit 69) as well, and wraps the nvml.Return that
// caused it, so errors.Is(err, nvml.ERROR_DRIVER_NOT_LOADED) also holds.
var (
	// ErrLibraryNotFound: libnvidia-ml.so.1 could not be loaded
	// (NVML_ERROR_LIBRARY_NOT_FOUND from nvmlInit).
	ErrLibraryNotFound = errors.New("NVML library not found")
	// ErrDriverNotLoaded: the NVIDIA kernel module is not loaded
	// (NVML_ERROR_DRIVER_NOT_LOADED from nvmlInit).
	ErrDriverNotLoaded = errors.New("NVIDIA kernel driver not loaded")
	// ErrVersionMismatch: the NVML library and the kernel module come from
	// different driver versions, typically after a driver upgrade without a
	// reboot (NVML_ERROR_LIB_RM_VERSION_MISMATCH from nvmlInit).
	ErrVersionMismatch = errors.New("NVML library and kernel driver versions differ")
	// ErrInit: nvmlInit failed for any other reason (no permission on
	// /dev/nvidia*, ...).
	ErrInit = errors.New("NVML initialisation failed")
	// ErrUnknownServer: Simulated or Simulate was given a name that is not
	// one of SimulatedNames. It is marked fault.ErrUsage (exit 2).
	ErrUnknownServer = errors.New("unknown simulated server")
)

// Health reasons that Build records; a query that fails on one GPU adds a
// reason of the form "reading <what>: <NVML return>".
const (
	// ReasonLost: NVML said NVML_ERROR_GPU_IS_LOST for this GPU (fallen off
	// the bus, Xid 79); nothing else is read from it.
	ReasonLost = "GPU is lost"
	// ReasonRowRemapFailure: a row remapping failed; NVIDIA's GPU memory
	// error management docs say the GPU needs servicing.
	ReasonRowRemapFailure = "row remapping failed"
)

// Option configures Build.
type Option func(*options)

type options struct {
	libraryPath  string
	checkSymbols bool
}

// WithSymbolCheck makes Build look each NVML function up in the loaded
// library (lib.Extensions().LookupSymbol) before calling it, and treat a
// missing one as "not supported by this driver" (the field is absent; for
// the few queries the inventory cannot do without, an error). Without it
// a call into a library that lacks the symbol ends the process: go-nvml
// binds lazily and the dynamic linker exits 127 with "symbol lookup
// error". go-nvml's mocks do not implement Extensions, so only the real
// library (FromNVML) sets it.
func WithSymbolCheck() Option { return func(o *options) { o.checkSymbols = true } }

// ErrMissingSymbol is returned when the NVML library lacks a function the inventory cannot
// do without (marked fault.ErrUnavailable).
var ErrMissingSymbol = errors.New("not supported by this driver")

// symbols is the lookup Build uses: has reports whether any of the names
// (a function's versions, newest first, as go-nvml picks them) is in
// the library.
type symbols struct {
	lib   nvml.Interface
	check bool
}

func (s symbols) has(names ...string) bool {
	if !s.check || len(names) == 0 {
		return true
	}
	for _, n := range names {
		if s.lib.Extensions().LookupSymbol(n) == nil {
			return true
		}
	}
	return false
}

// need is has for a function the inventory cannot do without.
func (s symbols) need(what string, names ...string) error {
	if s.has(names...) {
		return nil
	}
	return fault.Unavailable(fmt.Errorf("%w: reading %s: the NVML library has no %s", ErrMissingSymbol, what, strings.Join(names, " or ")))
}

// WithLibraryPath names the NVML library that lib loads ("" means
// DefaultLibrary through the dynamic linker), so that an
// ERROR_LIBRARY_NOT_FOUND names what was searched. It does not change lib.
func WithLibraryPath(path string) Option {
	return func(o *options) { o.libraryPath = path }
}

// Open returns the real NVML library at libraryPath, or DefaultLibrary
// through the dynamic linker when libraryPath is "". Nothing is loaded
// before Init (Build calls it).
func Open(libraryPath string) nvml.Interface {
	if libraryPath == "" {
		return nvml.New()
	}
	return nvml.New(nvml.WithLibraryPath(libraryPath))
}

// FromNVML builds the inventory of this host from the real NVML library at
// libraryPath ("" = DefaultLibrary). It is Build(Open(libraryPath)) with
// the dynamic loader's own message put into the *LibraryError when the
// library cannot be loaded. Errors are those of Build.
func FromNVML(libraryPath string) (*Inventory, error) {
	if err := checkNVMLSymbols(libraryPath); err != nil {
		return nil, err
	}
	inv, err := Build(Open(libraryPath), WithLibraryPath(libraryPath), WithSymbolCheck())
	if le, ok := errors.AsType[*LibraryError](err); ok {
		lib := dl.New(le.Library, dl.RTLD_LAZY|dl.RTLD_LOCAL)
		if derr := lib.Open(); derr != nil {
			le.Detail = derr.Error()
		} else {
			_ = lib.Close()
		}
	}
	return inv, err
}

// checkNVMLSymbols makes sure the library that loads is NVML before
// go-nvml calls into it: go-nvml binds lazily, so calling nvmlInit_v2 in a
// library without it (--nvml-lib naming libc, say) makes the dynamic linker
// end the process ("symbol lookup error", exit 127) instead of returning.
// A library that does not load is left to Build, which reports it.
func checkNVMLSymbols(libraryPath string) error {
	name := libraryPath
	if name == "" {
		name = DefaultLibrary
	}
	lib := dl.New(name, dl.RTLD_LAZY|dl.RTLD_LOCAL)
	if err := lib.Open(); err != nil {
		return nil
	}
	defer lib.Close()
	if err := lib.Lookup("nvmlInit_v2"); err != nil {
		return fault.Unavailable(&LibraryError{Library: name, Detail: "it is not NVML: it has no nvmlInit_v2", Return: nvml.ERROR_LIBRARY_NOT_FOUND})
	}
	return nil
}

// LibraryError is the error for NVML_ERROR_LIBRARY_NOT_FOUND from nvmlInit:
// it names the library and where it was searched, and says where NixOS
// keeps it (NixOSLibrary). errors.Is finds ErrLibraryNotFound and the
// nvml.Return in it.
type LibraryError struct {
	// Library is the name or path given to dlopen.
	Library string
	// Searched says where the dynamic linker looked.
	Searched string
	// Detail is dlerror's message when known ("...: cannot open shared
	// object file: No such file or directory").
	Detail string
	// Return is what nvmlInit returned.
	Return nvml.Return
}

// Error says what could not be loaded, where it was searched and why.
func (e *LibraryError) Error() string {
	detail := e.Detail
	if detail == "" {
		detail = e.Return.Error()
	}
	msg := fmt.Sprintf("initialising NVML: cannot load %s (%s): %s", e.Library, e.Searched, detail)
	if e.Searched == "" {
		msg = fmt.Sprintf("initialising NVML: %s: %s", e.Library, detail)
	}
	if e.Library != NixOSLibrary {
		msg += "; on NixOS the driver's NVML is " + NixOSLibrary
	}
	return msg
}

// Unwrap returns ErrLibraryNotFound and the nvml.Return.
func (e *LibraryError) Unwrap() []error { return []error{ErrLibraryNotFound, e.Return} }

// Build reads the inventory from lib. It calls lib.Init, and lib.Shutdown
// whenever Init succeeded; after a failed Init it calls nothing else.
//
// Errors: a failed Init gives an error marked fault.ErrUnavailable that
// wraps ErrLibraryNotFound (as a *LibraryError), ErrDriverNotLoaded,
// ErrVersionMismatch or ErrInit, and the nvml.Return. A failure of a system-wide query (driver
// version, device count) or of Shutdown gives an error marked
// fault.ErrUnavailable naming the query. A failure on one GPU is not an
// error: that GPU is reported with Health.Healthy false and a reason
// (ReasonLost for NVML_ERROR_GPU_IS_LOST), the other GPUs as usual; so is
// a GPU whose UUID is malformed or also reported by another GPU (both are
// then unhealthy). UUIDs with bytes that are not printable ASCII are kept
// escaped (strconv.QuoteToASCII's escapes).
// NVML_ERROR_NOT_SUPPORTED (and ERROR_FUNCTION_NOT_FOUND, from a driver too
// old for the call) leaves the field absent.
func Build(lib nvml.Interface, opts ...Option) (inv *Inventory, err error) {
	var o options
	for _, opt := range opts {
		opt(&o)
	}
	if ret := lib.Init(); ret != nvml.SUCCESS {
		return nil, fault.Unavailable(initError(ret, o.libraryPath))
	}
	sym := symbols{lib: lib, check: o.checkSymbols}
	defer func() {
		if !sym.has("nvmlShutdown") {
			return
		}
		if ret := lib.Shutdown(); ret != nvml.SUCCESS && err == nil {
			inv, err = nil, fault.Unavailable(fmt.Errorf("shutting down NVML: %w", ret))
		}
	}()

	inv = &Inventory{GPUs: []GPU{}}
	if err := sym.need("driver version", "nvmlSystemGetDriverVersion"); err != nil {
		return nil, err
	}
	if inv.DriverVersion, err = systemString("driver version", lib.SystemGetDriverVersion); err != nil {
		return nil, err
	}
	if err := sym.need("NVML version", "nvmlSystemGetNVMLVersion"); err != nil {
		return nil, err
	}
	if inv.NVMLVersion, err = systemString("NVML version", lib.SystemGetNVMLVersion); err != nil {
		return nil, err
	}
	if sym.has("nvmlSystemGetCudaDriverVersion") {
		cuda, ret := lib.SystemGetCudaDriverVersion()
		switch {
		case ret == nvml.SUCCESS:
			inv.CUDADriverVersion = CUDAVersion(cuda)
		case !absent(ret):
			return nil, fault.Unavailable(fmt.Errorf("reading CUDA driver version: %w", ret))
		}
	}
	if err := sym.need("the GPU count", "nvmlDeviceGetCount_v2", "nvmlDeviceGetCount"); err != nil {
		return nil, err
	}
	if err := sym.need("a device handle", "nvmlDeviceGetHandleByIndex_v2", "nvmlDeviceGetHandleByIndex"); err != nil {
		return nil, err
	}
	count, ret := lib.DeviceGetCount()
	if ret != nvml.SUCCESS {
		return nil, fault.Unavailable(fmt.Errorf("counting GPUs: %w", ret))
	}
	inv.GPUs = make([]GPU, 0, count)
	for i := range count {
		inv.GPUs = append(inv.GPUs, readGPU(lib, sym, i))
	}
	checkUUIDs(inv)
	return inv, nil
}

func initError(ret nvml.Return, libraryPath string) error {
	switch ret {
	case nvml.ERROR_LIBRARY_NOT_FOUND:
		e := &LibraryError{Library: libraryPath, Searched: "the path given", Return: ret}
		if libraryPath == "" {
			e.Library = DefaultLibrary
			e.Searched = "searched by the dynamic linker: LD_LIBRARY_PATH, /etc/ld.so.cache, /lib, /usr/lib"
		} else if !strings.Contains(libraryPath, "/") {
			e.Searched = "a bare name, searched by the dynamic linker"
		}
		return e
	case nvml.ERROR_DRIVER_NOT_LOADED:
		return fmt.Errorf("%w: initialising NVML: %w (is the nvidia kernel module loaded? see lsmod, dmesg)", ErrDriverNotLoaded, ret)
	case nvml.ERROR_LIB_RM_VERSION_MISMATCH:
		return fmt.Errorf("%w: initialising NVML: %w (the driver was upgraded without reloading the kernel module; reboot)", ErrVersionMismatch, ret)
	}
	return fmt.Errorf("%w: initialising NVML: %w", ErrInit, ret)
}

func systemString(what string, get func() (string, nvml.Return)) (string, error) {
	s, ret := get()
	if ret != nvml.SUCCESS {
		return "", fault.Unavailable(fmt.Errorf("reading %s: %w", what, ret))
	}
	return s, nil
}

// absent reports whether ret means "this field does not exist here" rather
// than a failure.
func absent(ret nvml.Return) bool {
	return ret == nvml.ERROR_NOT_SUPPORTED || ret == nvml.ERROR_FUNCTION_NOT_FOUND
}

// CUDAVersion formats nvmlSystemGetCudaDriverVersion's integer
// (major*1000 + minor*10, NVML docs) as "major.minor": 12040 → "12.4".
func CUDAVersion(v int) string {
	return fmt.Sprintf("%d.%d", v/1000, v%1000/10)
}

// reader reads one GPU's fields, turning NVML returns into field absence or
// health reasons. Once the GPU is lost it reads nothing more.
type reader struct {
	g    *GPU
	sym  symbols
	lost bool
}

// ok reports whether a query's value is usable. NOT_SUPPORTED is false
// without a reason; GPU_IS_LOST marks the GPU lost; any other failure adds
// a reason naming the query.
func (r *reader) ok(what string, ret nvml.Return) bool {
	switch {
	case ret == nvml.SUCCESS:
		return true
	case absent(ret):
	case ret == nvml.ERROR_GPU_IS_LOST:
		r.lost = true
		r.g.Health.Reasons = append(r.g.Health.Reasons, ReasonLost)
	default:
		r.g.Health.Reasons = append(r.g.Health.Reasons, fmt.Sprintf("reading %s: %v", what, ret))
	}
	return false
}

func readGPU(lib nvml.Interface, sym symbols, index int) GPU {
	g := GPU{Index: index}
	r := &reader{g: &g, sym: sym}
	dev, ret := lib.DeviceGetHandleByIndex(index)
	if r.ok("device handle", ret) {
		r.read(dev)
	}
	g.Health.Healthy = len(g.Health.Reasons) == 0
	return g
}

// read fills r.g from dev, stopping at the first sign that the GPU is lost.
func (r *reader) read(dev nvml.Device) {
	g := r.g
	// Each step names the NVML functions it calls (any version will do):
	// one the library lacks leaves the field absent, as NOT_SUPPORTED does.
	steps := []struct {
		syms []string
		read func()
	}{
		{[]string{"nvmlDeviceGetUUID"}, func() {
			if v, ret := dev.GetUUID(); r.ok("UUID", ret) {
				g.UUID = v
			}
		}},
		{[]string{"nvmlDeviceGetMinorNumber"}, func() {
			if v, ret := dev.GetMinorNumber(); r.ok("minor number", ret) {
				g.Minor = v
			}
		}},
		{[]string{"nvmlDeviceGetName"}, func() {
			if v, ret := dev.GetName(); r.ok("name", ret) {
				g.Name = v
			}
		}},
		{[]string{"nvmlDeviceGetBrand"}, func() {
			if v, ret := dev.GetBrand(); r.ok("brand", ret) {
				g.Brand = BrandName(v)
			}
		}},
		{[]string{"nvmlDeviceGetPciInfo_v3", "nvmlDeviceGetPciInfo_v2", "nvmlDeviceGetPciInfo"}, func() {
			p, ret := dev.GetPciInfo()
			if !r.ok("PCI info", ret) {
				return
			}
			id, err := NormalizeBusID(cString(p.BusId[:]))
			if err != nil {
				g.Health.Reasons = append(g.Health.Reasons, fmt.Sprintf("reading PCI info: %v", err))
				return
			}
			g.PCIBusID = id
		}},
		{[]string{"nvmlDeviceGetMemoryInfo"}, func() {
			if m, ret := dev.GetMemoryInfo(); r.ok("memory info", ret) {
				g.MemoryMiB = m.Total / (1 << 20)
			}
		}},
		{[]string{"nvmlDeviceGetCudaComputeCapability"}, func() {
			if major, minor, ret := dev.GetCudaComputeCapability(); r.ok("compute capability", ret) {
				g.ComputeMajor, g.ComputeMinor = major, minor
			}
		}},
		{[]string{}, func() {
			g.Architecture = Family(g.ComputeMajor, g.ComputeMinor)
			if g.Architecture != "" {
				return
			}
			if !r.sym.has("nvmlDeviceGetArchitecture") {
				return
			}
			if a, ret := dev.GetArchitecture(); r.ok("architecture", ret) {
				g.Architecture = architectureName(a)
			}
		}},
		{[]string{"nvmlDeviceGetPersistenceMode"}, func() {
			if v, ret := dev.GetPersistenceMode(); r.ok("persistence mode", ret) {
				on := v == nvml.FEATURE_ENABLED
				g.PersistenceMode = &on
			}
		}},
		{[]string{"nvmlDeviceGetMigMode"}, func() { r.readMIG(dev) }},
		{[]string{"nvmlDeviceGetEccMode"}, func() {
			current, _, ret := dev.GetEccMode()
			if !r.ok("ECC mode", ret) {
				return
			}
			g.ECC = &ECC{Enabled: current == nvml.FEATURE_ENABLED}
			if !g.ECC.Enabled {
				return
			}
			if !r.sym.has("nvmlDeviceGetTotalEccErrors") {
				return
			}
			if n, ret := dev.GetTotalEccErrors(nvml.MEMORY_ERROR_TYPE_UNCORRECTED, nvml.VOLATILE_ECC); r.ok("ECC errors", ret) {
				g.ECC.VolatileUncorrected = n
			}
		}},
		{[]string{"nvmlDeviceGetRemappedRows"}, func() {
			corr, unc, pending, failure, ret := dev.GetRemappedRows()
			if r.ok("remapped rows", ret) {
				g.RemappedRows = &RemappedRows{Correctable: corr, Uncorrectable: unc, Pending: pending, Failure: failure}
			}
		}},
		{[]string{"nvmlDeviceGetTemperature"}, func() {
			if t, ret := dev.GetTemperature(nvml.TEMPERATURE_GPU); r.ok("temperature", ret) {
				c := int(t)
				g.TemperatureC = &c
			}
		}},
		// readFabric looks up its own symbols: the versioned call, then
		// the unversioned one.
		{[]string{}, func() { r.readFabric(dev) }},
	}
	for _, step := range steps {
		if r.lost {
			return
		}
		if r.sym.has(step.syms...) {
			step.read()
		}
	}
	g.Health.Reasons = append(g.Health.Reasons, verdict(g)...)
}

func (r *reader) readMIG(dev nvml.Device) {
	g := r.g
	current, pending, ret := dev.GetMigMode()
	if !r.ok("MIG mode", ret) {
		return
	}
	g.MIG = &MIG{Current: current == nvml.DEVICE_MIG_ENABLE, Pending: pending == nvml.DEVICE_MIG_ENABLE}
	if !g.MIG.Current || !r.sym.has("nvmlDeviceGetMaxMigDeviceCount") || !r.sym.has("nvmlDeviceGetMigDeviceHandleByIndex") {
		return
	}
	n, ret := dev.GetMaxMigDeviceCount()
	if !r.ok("MIG device count", ret) {
		return
	}
	for i := range n {
		mig, ret := dev.GetMigDeviceHandleByIndex(i)
		if ret == nvml.ERROR_NOT_FOUND || ret == nvml.ERROR_INVALID_ARGUMENT {
			continue // an empty slot
		}
		what := fmt.Sprintf("MIG device %d", i)
		if !r.ok(what, ret) {
			if r.lost {
				return
			}
			continue
		}
		d := MIGDevice{Index: i}
		if !r.sym.has("nvmlDeviceGetUUID") || !r.sym.has("nvmlDeviceGetAttributes_v2", "nvmlDeviceGetAttributes") {
			continue
		}
		if v, ret := mig.GetUUID(); r.ok(what+" UUID", ret) {
			d.UUID = v
		}
		if a, ret := mig.GetAttributes(); r.ok(what+" attributes", ret) {
			d.MemoryMiB = a.MemorySizeMB
			d.Profile = MIGProfile(a.GpuInstanceSliceCount, a.ComputeInstanceSliceCount, a.MemorySizeMB, g.MemoryMiB)
			d.Attributes = &MIGAttributes{
				GISlices: a.GpuInstanceSliceCount, CISlices: a.ComputeInstanceSliceCount,
				Multiprocessors: a.MultiprocessorCount, CopyEngines: a.SharedCopyEngineCount,
				Decoders: a.SharedDecoderCount, Encoders: a.SharedEncoderCount,
				JPEGs: a.SharedJpegCount, OFAs: a.SharedOfaCount,
			}
		}
		if r.lost {
			return
		}
		g.MIG.Devices = append(g.MIG.Devices, d)
	}
}

// verdict returns the health reasons that g's own signals give.
func verdict(g *GPU) []string {
	var reasons []string
	if g.RemappedRows != nil && g.RemappedRows.Failure {
		reasons = append(reasons, ReasonRowRemapFailure)
	}
	if g.ECC != nil && g.ECC.VolatileUncorrected > 0 {
		reasons = append(reasons, fmt.Sprintf("%d uncorrected ECC errors since the driver loaded", g.ECC.VolatileUncorrected))
	}
	if r := fabricVerdict(g.Fabric); r != "" {
		reasons = append(reasons, r)
	}
	if g.MIG != nil && g.MIG.Current != g.MIG.Pending {
		reasons = append(reasons, fmt.Sprintf("MIG mode change pending (now %s, after reset %s): reset the GPU", onOff(g.MIG.Current), onOff(g.MIG.Pending)))
	}
	return reasons
}

func onOff(b bool) string {
	if b {
		return "on"
	}
	return "off"
}

// cString returns the NUL-terminated string in a C char array.
func cString(b []int8) string {
	var s strings.Builder
	for _, c := range b {
		if c == 0 {
			break
		}
		s.WriteByte(byte(c))
	}
	return s.String()
}

// Family returns the GPU family in lower case from the CUDA compute
// capability, as GPU Feature Discovery names it for the
// nvidia.com/gpu.family label (k8s-device-plugin internal/lm/resource.go,
// getArchFamily; 10.x and 12.x are "blackwell" there since v0.17). It
// returns "" for a capability GFD calls "undefined".
func Family(major, minor int) string {
	switch major {
	case 1:
		return "tesla"
	case 2:
		return "fermi"
	case 3:
		return "kepler"
	case 5:
		return "maxwell"
	case 6:
		return "pascal"
	case 7:
		if minor < 5 {
			return "volta"
		}
		return "turing"
	case 8:
		if minor < 9 {
			return "ampere"
		}
		return "ada-lovelace"
	case 9:
		return "hopper"
	case 10, 12:
		return "blackwell"
	}
	return ""
}

// architectureName names an nvmlDeviceArchitecture_t in GFD's spelling, for
// GPUs whose compute capability Family does not know.
func architectureName(a nvml.DeviceArchitecture) string {
	return architectureNames[a]
}

// architectureNames are the nvmlDeviceArchitecture_t values GFD names.
var architectureNames = map[nvml.DeviceArchitecture]string{
	nvml.DEVICE_ARCH_KEPLER:    "kepler",
	nvml.DEVICE_ARCH_MAXWELL:   "maxwell",
	nvml.DEVICE_ARCH_PASCAL:    "pascal",
	nvml.DEVICE_ARCH_VOLTA:     "volta",
	nvml.DEVICE_ARCH_TURING:    "turing",
	nvml.DEVICE_ARCH_AMPERE:    "ampere",
	nvml.DEVICE_ARCH_ADA:       "ada-lovelace",
	nvml.DEVICE_ARCH_HOPPER:    "hopper",
	nvml.DEVICE_ARCH_BLACKWELL: "blackwell",
	nvml.DEVICE_ARCH_RUBIN:     "rubin",
}

// BrandName returns nvidia-smi's "Product Brand" for an nvmlBrandType_t
// ("NVIDIA", "Tesla", "GeForce RTX", ...), "" for BRAND_UNKNOWN or a value
// this version does not know.
func BrandName(b nvml.BrandType) string {
	return brandNames[b]
}

// brandNames are the nvmlBrandType_t values nvidia-smi names.
var brandNames = map[nvml.BrandType]string{
	nvml.BRAND_QUADRO:              "Quadro",
	nvml.BRAND_TESLA:               "Tesla",
	nvml.BRAND_NVS:                 "NVS",
	nvml.BRAND_GRID:                "GRID",
	nvml.BRAND_GEFORCE:             "GeForce",
	nvml.BRAND_TITAN:               "Titan",
	nvml.BRAND_NVIDIA_VAPPS:        "NVIDIA Virtual Applications",
	nvml.BRAND_NVIDIA_VPC:          "NVIDIA Virtual PC",
	nvml.BRAND_NVIDIA_VCS:          "NVIDIA Virtual Compute Server",
	nvml.BRAND_NVIDIA_VWS:          "NVIDIA RTX Virtual Workstation",
	nvml.BRAND_NVIDIA_CLOUD_GAMING: "NVIDIA Cloud Gaming",
	nvml.BRAND_QUADRO_RTX:          "Quadro RTX",
	nvml.BRAND_NVIDIA_RTX:          "NVIDIA RTX",
	nvml.BRAND_NVIDIA:              "NVIDIA",
	nvml.BRAND_GEFORCE_RTX:         "GeForce RTX",
	nvml.BRAND_TITAN_RTX:           "Titan RTX",
}

// MIGProfile names a MIG device's profile from its attributes the way
// go-nvlib does (pkg/nvlib/device/mig_profile.go), which is the name
// nvidia-smi and the device plugin use: "<g>g.<mem>gb", or
// "<c>c.<g>g.<mem>gb" when the compute instance has fewer slices than its
// GPU instance. giSlices and ciSlices are slice counts; migMiB and
// parentMiB are the MIG device's and the whole GPU's memory in MiB. The
// memory is the MIG device's fraction of the GPU rounded up to eighths,
// times the GPU's memory in whole GiB (rounded up).
func MIGProfile(giSlices, ciSlices uint32, migMiB, parentMiB uint64) string {
	gb := migMiB / 1024
	if parentMiB > 0 {
		frac := math.Ceil(float64(migMiB)/float64(parentMiB)*8) / 8
		totalGiB := float64((parentMiB + 1023) / 1024)
		gb = uint64(math.Round(frac * totalGiB))
	}
	if ciSlices != 0 && ciSlices != giSlices {
		return fmt.Sprintf("%dc.%dg.%dgb", ciSlices, giSlices, gb)
	}
	return fmt.Sprintf("%dg.%dgb", giSlices, gb)
}
