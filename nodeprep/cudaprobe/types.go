package cudaprobe

// API is the ProbeRequest's api, beside selftest's "vulkan" and "egl".
const API = "cuda"

// The CUDA driver library.
const (
	// DefaultLibrary is libcuda's soname, found by the dynamic linker.
	DefaultLibrary = "libcuda.so.1"
	// NixOSLibrary is where NixOS links the driver's libcuda
	// (hardware.graphics / addDriverRunpath's /run/opengl-driver).
	NixOSLibrary = "/run/opengl-driver/lib/libcuda.so.1"
)

// Elements is the length, in uint32 values, of the buffer the kernel
// writes (16 KiB, 16 blocks of 256 threads).
const Elements = 4096

// Pattern is what the kernel (pattern.ptx) writes into element i for a
// seed: i*2654435761 ^ seed modulo 2^32, the Vulkan dispatch's pattern.
func Pattern(i, seed uint32) uint32 { return i*2654435761 ^ seed }

// Stages name where the probe stopped before any device was probed
// (Report.Stage), or the call that failed on a device (Device.Step).
const (
	StageLoad  = "dlopen"           // the library could not be opened
	StageSym   = "dlsym"            // the library lacks a driver API entry point
	StageInit  = "cuInit"           // the driver did not initialise
	StageCount = "cuDeviceGetCount" // the driver could not count its devices
)

// Request is the CUDA probe child's request, as JSON: the library to open.
type Request struct {
	// API is always API ("cuda").
	API string `json:"api"`
	// Library is the CUDA driver library to dlopen: a path or a bare name.
	Library string `json:"library"`
	// Seed seeds the kernel's pattern (0: derived from the clock).
	Seed uint32 `json:"seed,omitempty"`
}

// Report is what the CUDA probe child saw. When Stage is set the probe
// stopped there (Result and Error say why) and Devices is empty.
type Report struct {
	// Library is the library that was dlopen'ed, as given.
	Library string `json:"library" yaml:"library"`
	// DriverVersion is cuDriverGetVersion's CUDA version ("12.4"); empty
	// when the library did not say.
	DriverVersion string `json:"driverVersion,omitempty" yaml:"driverVersion,omitempty"`
	// Stage is where the probe stopped (StageLoad, StageSym, StageInit,
	// StageCount); empty when the devices were probed.
	Stage string `json:"stage,omitempty" yaml:"stage,omitempty"`
	// Code and Result are the failing call's CUresult and its name
	// ("CUDA_ERROR_SYSTEM_NOT_READY"); Error is its text (dlerror()'s for
	// StageLoad and StageSym).
	Code   int    `json:"code,omitempty" yaml:"code,omitempty"`
	Result string `json:"result,omitempty" yaml:"result,omitempty"` // the CUresult's name
	Error  string `json:"error,omitempty" yaml:"error,omitempty"`   // the failure's text
	// UVM and UVMTools say whether /dev/nvidia-uvm and /dev/nvidia-uvm-tools
	// exist where the probe ran (the host, or the container): CUDA needs
	// both, Vulkan and EGL neither.
	UVM      bool `json:"uvm" yaml:"uvm"`
	UVMTools bool `json:"uvmTools" yaml:"uvmTools"` // /dev/nvidia-uvm-tools exists
	// Count is cuDeviceGetCount's answer.
	Count int `json:"count" yaml:"count"`
	// Devices are the devices probed, by ordinal.
	Devices []Device `json:"devices" yaml:"devices"`
	// Elements and Seed are the kernel's buffer length and pattern seed.
	Elements int    `json:"elements" yaml:"elements"`
	Seed     uint32 `json:"seed" yaml:"seed"` // the pattern's seed
	// Stage timings in milliseconds: LoadMS the dlopen and dlsym, InitMS
	// cuInit (seconds on a real 8-GPU server), CountMS cuDeviceGetCount,
	// DevicesMS every device's probe (run at the same time), TotalMS the
	// whole probe.
	LoadMS    float64 `json:"loadMs" yaml:"loadMs"`
	InitMS    float64 `json:"initMs" yaml:"initMs"`       // cuInit, ms
	CountMS   float64 `json:"countMs" yaml:"countMs"`     // cuDeviceGetCount, ms
	DevicesMS float64 `json:"devicesMs" yaml:"devicesMs"` // all devices, in parallel, ms
	TotalMS   float64 `json:"totalMs" yaml:"totalMs"`     // the whole probe, ms
}

// Device is one CUDA device's probe.
type Device struct {
	// Ordinal is the device's CUDA ordinal (cuDeviceGet).
	Ordinal int `json:"ordinal" yaml:"ordinal"`
	// Name is cuDeviceGetName's answer.
	Name string `json:"name,omitempty" yaml:"name,omitempty"`
	// UUID is cuDeviceGetUuid_v2's (else cuDeviceGetUuid's) answer in
	// NVML's form, "GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx".
	UUID string `json:"uuid,omitempty" yaml:"uuid,omitempty"`
	// ComputeCapability is "9.0" for an H100/H200; empty when unknown.
	ComputeCapability string `json:"computeCapability,omitempty" yaml:"computeCapability,omitempty"`
	// Memory is true when a buffer copied to the device and back came
	// back whole (cuMemAlloc, cuMemcpyHtoD, cuMemcpyDtoH).
	Memory bool `json:"memory" yaml:"memory"`
	// Kernel is true when the PTX kernel was loaded, launched and wrote
	// every element right.
	Kernel bool `json:"kernel" yaml:"kernel"`
	// Wrong counts the elements the kernel got wrong; FirstWrong
	// describes the first ("element 3: got 0x…, want 0x…").
	Wrong      int    `json:"wrong,omitempty" yaml:"wrong,omitempty"`
	FirstWrong string `json:"firstWrong,omitempty" yaml:"firstWrong,omitempty"` // the first wrong element
	// Step, Code, Result and Error name the call that failed, its CUresult,
	// the result's name and text; JITLog is the JIT compiler's error log
	// when cuModuleLoadData failed.
	Step   string `json:"step,omitempty" yaml:"step,omitempty"`
	Code   int    `json:"code,omitempty" yaml:"code,omitempty"`     // the failing call's CUresult
	Result string `json:"result,omitempty" yaml:"result,omitempty"` // its name
	Error  string `json:"error,omitempty" yaml:"error,omitempty"`   // its text
	JITLog string `json:"jitLog,omitempty" yaml:"jitLog,omitempty"` // the JIT's error log
	// Timings of each step, in milliseconds.
	Timings DeviceTimings `json:"timings" yaml:"timings"`
}

// OK is true when the device passed every step: memory and kernel.
func (d *Device) OK() bool { return d.Step == "" && d.Memory && d.Kernel }

// DeviceTimings are a device's steps in milliseconds.
type DeviceTimings struct {
	UUIDMS    float64 `json:"uuidMs" yaml:"uuidMs"`       // cuDeviceGet, name, UUID, attributes
	ContextMS float64 `json:"contextMs" yaml:"contextMs"` // cuCtxCreate
	MemoryMS  float64 `json:"memoryMs" yaml:"memoryMs"`   // allocation and the verified round trip
	ModuleMS  float64 `json:"moduleMs" yaml:"moduleMs"`   // cuModuleLoadData (the JIT) and cuModuleGetFunction
	LaunchMS  float64 `json:"launchMs" yaml:"launchMs"`   // cuLaunchKernel, cuCtxSynchronize, read back
	VerifyMS  float64 `json:"verifyMs" yaml:"verifyMs"`   // comparing with the pattern
	TotalMS   float64 `json:"totalMs" yaml:"totalMs"`     // the device's whole probe, teardown included
}
