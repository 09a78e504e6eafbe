package selftest

import "github.com/nodeprep/nodeprep/nodeprep/cudaprobe"

// VendorNVIDIA is NVIDIA's PCI vendor id, the only vendor whose adapters can
// satisfy a GPU (FIELD-REPORTS F12).
const VendorNVIDIA = 0x10de

// VendorMesa is the Khronos vendor id VK_VENDOR_ID_MESA (0x10005) that
// Mesa's software drivers (lavapipe) report (Vulkan spec, VkVendorId).
const VendorMesa = 0x10005

// BackendVulkan is the Backend of every adapter this package reports
// (wgpu's wgt::Backend::Vulkan, lower case).
const BackendVulkan = "vulkan"

// DeviceType is an adapter's type with wgpu's names (wgt::DeviceType),
// mapped from VkPhysicalDeviceType as wgpu-hal's vulkan adapter does.
type DeviceType string

// The device types, in wgpu's words.
const (
	DeviceOther      DeviceType = "Other"         // VK_PHYSICAL_DEVICE_TYPE_OTHER or unknown
	DeviceIntegrated DeviceType = "IntegratedGpu" // VK_PHYSICAL_DEVICE_TYPE_INTEGRATED_GPU
	DeviceDiscrete   DeviceType = "DiscreteGpu"   // VK_PHYSICAL_DEVICE_TYPE_DISCRETE_GPU
	DeviceVirtual    DeviceType = "VirtualGpu"    // VK_PHYSICAL_DEVICE_TYPE_VIRTUAL_GPU
	DeviceCPU        DeviceType = "Cpu"           // VK_PHYSICAL_DEVICE_TYPE_CPU
)

// deviceTypeOf maps a VkPhysicalDeviceType value (Vulkan spec) to wgpu's
// DeviceType; values the spec may add later are Other, as in wgpu-hal.
func deviceTypeOf(vk uint32) DeviceType {
	switch vk {
	case 1:
		return DeviceIntegrated
	case 2:
		return DeviceDiscrete
	case 3:
		return DeviceVirtual
	case 4:
		return DeviceCPU
	}
	return DeviceOther
}

// Rank orders device types for a high-performance request: discrete 0,
// integrated 1, other 2, virtual 3, CPU 4 (lower is preferred; wgpu's
// PowerPreference::HighPerformance order).
func (t DeviceType) Rank() int {
	switch t {
	case DeviceDiscrete:
		return 0
	case DeviceIntegrated:
		return 1
	case DeviceVirtual:
		return 3
	case DeviceCPU:
		return 4
	}
	return 2
}

// IsGPU reports whether an adapter of this type can satisfy a GPU:
// discrete or integrated only (FIELD-REPORTS F12).
func (t DeviceType) IsGPU() bool { return t == DeviceDiscrete || t == DeviceIntegrated }

// Stages name where a probe stopped when it could not list adapters or
// devices (VulkanReport.Stage, EGLReport.Stage).
const (
	StageLoad      = "dlopen"                     // the library could not be opened
	StageInstance  = "vkCreateInstance"           // the loader found no usable driver
	StageEnumerate = "vkEnumeratePhysicalDevices" // the drivers failed to list devices
	StageDevices   = "eglQueryDevicesEXT"         // EGL device enumeration is missing or failed
)

// VulkanReport is what the Vulkan probe child saw. When Stage is set the
// probe stopped there and Error says why; Adapters is then empty.
type VulkanReport struct {
	// Loader is the loader path that was dlopen'ed (as given: a bare name
	// goes through the dynamic linker's search).
	Loader string `json:"loader" yaml:"loader"`
	// LoaderVersion is vkEnumerateInstanceVersion's answer ("1.3.239").
	LoaderVersion string `json:"loaderVersion,omitempty" yaml:"loaderVersion,omitempty"`
	// InstanceVersion is the apiVersion the instance was created with, as
	// wgpu-hal creates it: "1.3.0" when the loader is 1.1 or newer, else
	// "1.0.0".
	InstanceVersion string `json:"instanceVersion,omitempty" yaml:"instanceVersion,omitempty"`
	// InstanceExtensions are the instance extensions enabled: those of
	// wgpu-hal's desired_extensions the loader offers.
	InstanceExtensions []string `json:"instanceExtensions,omitempty" yaml:"instanceExtensions,omitempty"`
	// Stage is where the probe stopped (StageLoad, StageInstance,
	// StageEnumerate); empty when adapters were listed.
	Stage string `json:"stage,omitempty" yaml:"stage,omitempty"`
	// Result is the failing call's VkResult name ("VK_ERROR_INCOMPATIBLE_DRIVER").
	Result string `json:"result,omitempty" yaml:"result,omitempty"`
	// Error is the failure's text; for StageLoad, dlerror()'s.
	Error string `json:"error,omitempty" yaml:"error,omitempty"`
	// ICDs are the driver manifests checked when no driver could be used
	// (instance creation failed or no adapter was listed).
	ICDs []ICDCheck `json:"icds,omitempty" yaml:"icds,omitempty"`
	// Adapters are the physical devices, best first (Rank, then
	// enumeration order), hidden ones included and marked.
	Adapters []Adapter `json:"adapters" yaml:"adapters"`
	// LoadMS, InstanceMS and EnumerateMS time the dlopen, the instance
	// creation and the enumeration with property queries; TotalMS is the
	// whole probe including dispatches. All in milliseconds.
	LoadMS      float64 `json:"loadMs" yaml:"loadMs"`
	InstanceMS  float64 `json:"instanceMs" yaml:"instanceMs"`   // vkCreateInstance, ms
	EnumerateMS float64 `json:"enumerateMs" yaml:"enumerateMs"` // vkEnumeratePhysicalDevices and properties, ms
	TotalMS     float64 `json:"totalMs" yaml:"totalMs"`         // the whole probe, ms
}

// ICDCheck is one Vulkan driver (ICD) manifest and whether its library can
// be opened (Vulkan loader docs, "Driver Manifest File Format").
type ICDCheck struct {
	// Manifest is the manifest's path.
	Manifest string `json:"manifest" yaml:"manifest"`
	// Library is its ICD.library_path ("" when the manifest is unreadable).
	Library string `json:"library,omitempty" yaml:"library,omitempty"`
	// Error is why the manifest or its library failed; empty when the
	// library opened.
	Error string `json:"error,omitempty" yaml:"error,omitempty"`
}

// Adapter is one Vulkan physical device in wgpu's AdapterInfo shape (name,
// vendor, device, device_type, driver, driver_info, backend) plus what the
// matching needs (device UUID, PCI bus id) and the dispatch result.
type Adapter struct {
	// Index is the physical device's position in vkEnumeratePhysicalDevices.
	Index int `json:"index" yaml:"index"`
	// Name is VkPhysicalDeviceProperties.deviceName.
	Name string `json:"name" yaml:"name"`
	// Vendor and Device are the PCI (or Khronos) vendor and device ids.
	Vendor uint32 `json:"vendor" yaml:"vendor"`
	Device uint32 `json:"device" yaml:"device"` // PCI device id
	// DeviceType is wgpu's device type.
	DeviceType DeviceType `json:"deviceType" yaml:"deviceType"`
	// Driver and DriverInfo are VkPhysicalDeviceDriverProperties'
	// driverName and driverInfo, "?" when not available (as wgpu does).
	Driver     string `json:"driver" yaml:"driver"`
	DriverInfo string `json:"driverInfo" yaml:"driverInfo"` // driver version text (VkPhysicalDeviceDriverProperties.driverInfo)
	// Backend is always BackendVulkan.
	Backend string `json:"backend" yaml:"backend"`
	// DeviceUUID is VkPhysicalDeviceIDProperties.deviceUUID formatted as
	// NVML formats GPU UUIDs ("GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx");
	// empty for a Vulkan 1.0 device.
	DeviceUUID string `json:"deviceUUID,omitempty" yaml:"deviceUUID,omitempty"`
	// PCIBusID is "dddd:bb:dd.f" from VK_EXT_pci_bus_info; empty when the
	// device lacks the extension.
	PCIBusID string `json:"pciBusId,omitempty" yaml:"pciBusId,omitempty"`
	// APIVersion is the device's Vulkan version ("1.3.277").
	APIVersion string `json:"apiVersion" yaml:"apiVersion"`
	// ConformanceVersion is the CTS version the driver passed ("1.3.1.1");
	// empty when driver properties are unavailable.
	ConformanceVersion string `json:"conformanceVersion,omitempty" yaml:"conformanceVersion,omitempty"`
	// Hidden is true when wgpu would not expose the adapter; HiddenRule
	// names the rule of wgpu-hal's expose_adapter that hides it and
	// HiddenReason says it in words.
	Hidden       bool       `json:"hidden,omitempty" yaml:"hidden,omitempty"`
	HiddenRule   HiddenRule `json:"hiddenRule,omitempty" yaml:"hiddenRule,omitempty"`     // the wgpu rule that hides it
	HiddenReason string     `json:"hiddenReason,omitempty" yaml:"hiddenReason,omitempty"` // why wgpu would hide it
	// QueueFamily0 are queue family 0's flags ("GRAPHICS|COMPUTE|TRANSFER"),
	// the family wgpu uses.
	QueueFamily0 string `json:"queueFamily0,omitempty" yaml:"queueFamily0,omitempty"`
	// WGPU is what wgpu reports for the adapter (limits, features,
	// downlevel flags, subgroup sizes); nil for a hidden adapter.
	WGPU *WGPU `json:"wgpu,omitempty" yaml:"wgpu,omitempty"`
	// Dispatch is the compute dispatch's result; nil when none was run
	// (hidden adapter, no compute queue).
	Dispatch *Dispatch `json:"dispatch,omitempty" yaml:"dispatch,omitempty"`
}

// Label names the adapter in reasons: `"NVIDIA H200" (#0, DiscreteGpu,
// vendor 0x10de)`.
func (a *Adapter) Label() string {
	return quote(a.Name) + " (#" + itoa(a.Index) + ", " + string(a.DeviceType) + ", vendor " + hex4(a.Vendor) + ")"
}

// Dispatch is one compute dispatch of the embedded shader: it writes
// Pattern(i, Seed) into element i of a buffer of Elements uint32 values,
// prefilled with a sentinel, and the probe reads every element back.
type Dispatch struct {
	// Verified is true when the dispatch ran and every element was right.
	Verified bool `json:"verified" yaml:"verified"`
	// Elements is the buffer's length in uint32 values; Seed the pattern's seed.
	Elements int    `json:"elements" yaml:"elements"`
	Seed     uint32 `json:"seed" yaml:"seed"` // seed of the pattern the shader writes
	// Wrong counts the elements that differ from the pattern; FirstWrong
	// describes the first ("element 0: got 0xdeadbeef, want 0x1234abcd").
	Wrong      int    `json:"wrong" yaml:"wrong"`
	FirstWrong string `json:"firstWrong,omitempty" yaml:"firstWrong,omitempty"` // the first wrong element, "index: got want"
	// Step and Result name the Vulkan call that failed and its VkResult
	// (VK_TIMEOUT when the fence did not signal in time).
	Step   string `json:"step,omitempty" yaml:"step,omitempty"`
	Result string `json:"result,omitempty" yaml:"result,omitempty"` // the VkResult of the failed step
	// Timings of each step, in milliseconds.
	Timings DispatchTimings `json:"timings" yaml:"timings"`
}

// DispatchTimings are the dispatch's steps in milliseconds.
type DispatchTimings struct {
	DeviceMS    float64 `json:"deviceMs" yaml:"deviceMs"`       // vkCreateDevice with a compute queue
	ResourcesMS float64 `json:"resourcesMs" yaml:"resourcesMs"` // buffer, memory, map, prefill
	PipelineMS  float64 `json:"pipelineMs" yaml:"pipelineMs"`   // shader module, layouts, pipeline, descriptors
	SubmitMS    float64 `json:"submitMs" yaml:"submitMs"`       // record and vkQueueSubmit
	WaitMS      float64 `json:"waitMs" yaml:"waitMs"`           // vkWaitForFences
	ReadbackMS  float64 `json:"readbackMs" yaml:"readbackMs"`   // copy out of mapped memory
	VerifyMS    float64 `json:"verifyMs" yaml:"verifyMs"`       // compare with the pattern
	TotalMS     float64 `json:"totalMs" yaml:"totalMs"`         // all of the above and teardown
}

// EGLReport is what the EGL probe child saw. When Stage is set the probe
// stopped there and Error says why; Devices is then empty.
type EGLReport struct {
	// Library is the EGL library path that was dlopen'ed.
	Library string `json:"library" yaml:"library"`
	// Stage is where the probe stopped (StageLoad, StageDevices).
	Stage string `json:"stage,omitempty" yaml:"stage,omitempty"`
	// Error is the failure's text; for StageLoad, dlerror()'s.
	Error string `json:"error,omitempty" yaml:"error,omitempty"`
	// ClientExtensions are the client extensions (EGL_EXT_client_extensions).
	ClientExtensions []string `json:"clientExtensions,omitempty" yaml:"clientExtensions,omitempty"`
	// Devices are the EGL devices (EGL_EXT_device_enumeration), in order.
	Devices []EGLDevice `json:"devices" yaml:"devices"`
	// TotalMS is the whole probe in milliseconds.
	TotalMS float64 `json:"totalMs" yaml:"totalMs"`
}

// EGLDevice is one EGL device opened on EGL_PLATFORM_DEVICE_EXT
// (EGL_EXT_platform_device) with a surfaceless, configless context, the
// one wgpu's GL backend makes (wgpu-hal/src/gles/egl.rs): desktop OpenGL
// 3.3 where EGL_CLIENT_APIS lists OpenGL, else OpenGL ES 3
// (EGL_KHR_surfaceless_context, EGL_KHR_no_config_context).
type EGLDevice struct {
	Index int `json:"index" yaml:"index"` // position in eglQueryDevicesEXT's list
	// UUID is EGL_DEVICE_UUID_EXT (EGL_EXT_device_persistent_id) in the
	// "GPU-..." form; empty when the device lacks the extension.
	UUID string `json:"uuid,omitempty" yaml:"uuid,omitempty"`
	// DRMDevice is EGL_DRM_DEVICE_FILE_EXT (EGL_EXT_device_drm).
	DRMDevice string `json:"drmDevice,omitempty" yaml:"drmDevice,omitempty"`
	// DriverName is EGL_DRIVER_NAME_EXT (EGL_EXT_device_persistent_id).
	DriverName string `json:"driverName,omitempty" yaml:"driverName,omitempty"`
	// Software is true for Mesa's software device (EGL_MESA_device_software).
	Software bool `json:"software,omitempty" yaml:"software,omitempty"`
	// Vendor and Version are the display's EGL_VENDOR and EGL_VERSION.
	Vendor  string `json:"vendor,omitempty" yaml:"vendor,omitempty"`
	Version string `json:"version,omitempty" yaml:"version,omitempty"` // EGL_VERSION of the display
	// API is the client API the context was made for, as wgpu's GL
	// backend chooses it (wgpu-hal/src/gles/egl.rs): "OpenGL" (a 3.3
	// context) where EGL_CLIENT_APIS lists it, else "OpenGL ES".
	API string `json:"api,omitempty" yaml:"api,omitempty"`
	// GLVendor, GLRenderer and GLVersion are glGetString's answers.
	GLVendor   string `json:"glVendor,omitempty" yaml:"glVendor,omitempty"`
	GLRenderer string `json:"glRenderer,omitempty" yaml:"glRenderer,omitempty"` // GL_RENDERER of the context
	GLVersion  string `json:"glVersion,omitempty" yaml:"glVersion,omitempty"`   // GL_VERSION of the context
	// GLESVersion is the OpenGL ES version of an OpenGL ES context
	// ("3.2"), parsed from GL_VERSION; wgpu's GL backend needs 3.0 or newer
	// (wgpu-hal/src/gles/adapter.rs), and a device below it fails. Empty
	// for a desktop OpenGL context (GLVersion says its version).
	GLESVersion string `json:"glesVersion,omitempty" yaml:"glesVersion,omitempty"`
	// Error names the step that failed and the EGL error; empty when a
	// context was made current and GL answered.
	Error string `json:"error,omitempty" yaml:"error,omitempty"`
	// InitMS times eglGetPlatformDisplayEXT and eglInitialize; ContextMS
	// the context, make-current and GL queries. Milliseconds.
	InitMS    float64 `json:"initMs" yaml:"initMs"`
	ContextMS float64 `json:"contextMs" yaml:"contextMs"` // context creation and make-current, ms
}

// Label names the device in reasons: `EGL device 0 ("Mesa Project", llvmpipe ...)`.
func (d *EGLDevice) Label() string {
	s := "EGL device " + itoa(d.Index)
	switch {
	case d.Vendor != "" && d.GLRenderer != "":
		s += " (" + quote(d.Vendor) + ", " + quote(d.GLRenderer) + ")"
	case d.Vendor != "":
		s += " (" + quote(d.Vendor) + ")"
	case d.DRMDevice != "":
		s += " (" + d.DRMDevice + ")"
	}
	return s
}

// Report is the self-test's result: what each probe saw, how each GPU was
// matched, and the verdict. `nodeprep selftest -o json` prints it.
type Report struct {
	// Passed is the verdict: true when Reasons is empty.
	Passed bool `json:"passed" yaml:"passed"`
	// Reasons are the failures, one per failure, each with a kind.
	Reasons []Reason `json:"reasons" yaml:"reasons"`
	// Warnings are findings that do not fail the self-test (extra NVIDIA
	// adapters, EGL failures when EGL is not required, hidden adapters).
	Warnings []string `json:"warnings" yaml:"warnings"`
	// Simulated is true when the inventory was simulated (--simulate).
	Simulated bool `json:"simulated" yaml:"simulated"`
	// StandIn is true when a CPU adapter or a Mesa EGL device stood in for
	// simulated GPUs (AllowCPUAdapter): the run proves the path, not a GPU.
	StandIn bool `json:"standIn" yaml:"standIn"`
	// RequireEGL says whether EGL failures fail the self-test.
	RequireEGL bool `json:"requireEGL" yaml:"requireEGL"`
	// Vulkan and EGL are the two probes' reports.
	Vulkan VulkanReport `json:"vulkan" yaml:"vulkan"`
	EGL    EGLReport    `json:"egl" yaml:"egl"` // the EGL probe's report
	// RequireCUDA says whether a CUDA library that cannot be opened fails
	// the self-test (WithCUDA); CUDA is nil when the CUDA probe did not
	// run (it runs only with WithCUDA) or its child printed no report.
	RequireCUDA bool              `json:"requireCUDA" yaml:"requireCUDA"`
	CUDA        *cudaprobe.Report `json:"cuda,omitempty" yaml:"cuda,omitempty"` // the CUDA probe's report
	// Matches has one entry per inventory GPU, in inventory order.
	Matches []Match `json:"matches" yaml:"matches"`
	// DurationMS is the whole self-test in milliseconds: the children,
	// from their start until both had ended, and the evaluation (Wait).
	DurationMS float64 `json:"durationMs" yaml:"durationMs"`
	// ProbeChild is the executable that served the probe children
	// (WithCommand's path): nodeprep-probe, the lean child, when it sits
	// beside nodeprep, else nodeprep itself.
	ProbeChild string `json:"probeChild" yaml:"probeChild"`
}

// Match is how one inventory GPU fared.
type Match struct {
	// GPU, UUID and Name identify the inventory GPU (gpu.GPU's Index,
	// UUID, Name).
	GPU  int    `json:"gpu" yaml:"gpu"`
	UUID string `json:"uuid" yaml:"uuid"` // the GPU's NVML UUID
	Name string `json:"name" yaml:"name"` // the GPU's product name
	// Adapter is the Index of the Vulkan adapter that satisfies the GPU;
	// nil when none does.
	Adapter *int `json:"adapter,omitempty" yaml:"adapter,omitempty"`
	// AdapterName is that adapter's name.
	AdapterName string `json:"adapterName,omitempty" yaml:"adapterName,omitempty"`
	// Vulkan is true when the adapter matched and its dispatch verified.
	Vulkan bool `json:"vulkan" yaml:"vulkan"`
	// EGLDevice is the Index of the EGL device that serves the GPU; nil
	// when none does.
	EGLDevice *int `json:"eglDevice,omitempty" yaml:"eglDevice,omitempty"`
	// EGL is true when an EGL device serves the GPU.
	EGL bool `json:"egl" yaml:"egl"`
	// StandIn is true when a CPU adapter / Mesa EGL device stood in.
	StandIn bool `json:"standIn,omitempty" yaml:"standIn,omitempty"`
	// CUDADevice is the ordinal of the CUDA device with the GPU's UUID;
	// nil when none has it or the CUDA probe did not run.
	CUDADevice *int `json:"cudaDevice,omitempty" yaml:"cudaDevice,omitempty"`
	// CUDA is true when that device's memory round trip and kernel
	// verified (cudaprobe.Device.OK).
	CUDA bool `json:"cuda" yaml:"cuda"`
}

// ReasonKind classifies a failure so that callers can branch on it.
type ReasonKind string

// The kinds of failure. Each Reason's Message says what to do.
const (
	ReasonLoaderNotFound     ReasonKind = "loader-not-found"    // dlopen of the Vulkan loader failed
	ReasonIncompatibleDriver ReasonKind = "incompatible-driver" // VK_ERROR_INCOMPATIBLE_DRIVER: no usable ICD
	ReasonNoAdapters         ReasonKind = "no-adapters"         // the instance listed no physical device
	ReasonVulkanFailed       ReasonKind = "vulkan-failed"       // another instance or enumeration failure
	ReasonMissingAdapter     ReasonKind = "missing-adapter"     // no NVIDIA GPU adapter for a GPU
	ReasonUUIDMismatch       ReasonKind = "uuid-mismatch"       // NVIDIA adapters present, none with the GPU's UUID
	ReasonDuplicateAdapter   ReasonKind = "duplicate-adapter"   // more than one adapter has the GPU's UUID
	ReasonDispatchFailed     ReasonKind = "dispatch-failed"     // the compute dispatch failed or gave wrong data
	ReasonTimeout            ReasonKind = "timeout"             // a probe child ran past the timeout
	ReasonCancelled          ReasonKind = "cancelled"           // nodeprep was stopped (SIGTERM) during the probe
	ReasonCrashed            ReasonKind = "crashed"             // a probe child was killed by a signal
	ReasonBadOutput          ReasonKind = "bad-output"          // a probe child failed or printed no report
	ReasonEGLNotFound        ReasonKind = "egl-not-found"       // dlopen of libEGL failed
	ReasonEGLNoDevices       ReasonKind = "egl-no-devices"      // no device enumeration, or no device
	ReasonEGLMissingDevice   ReasonKind = "egl-missing-device"  // no NVIDIA EGL device for a GPU
	ReasonNoGPUs             ReasonKind = "no-gpus"             // the inventory has no GPU to test
	ReasonRequirements       ReasonKind = "requirements"        // an adapter lacks a required wgpu limit or feature
	// The CUDA probe's kinds (cudaprobe.Kind*).
	ReasonCUDANotFound      ReasonKind = cudaprobe.KindNotFound      // libcuda could not be opened
	ReasonCUDAInitFailed    ReasonKind = cudaprobe.KindInitFailed    // cuInit or cuDeviceGetCount failed
	ReasonCUDAMissingDevice ReasonKind = cudaprobe.KindMissingDevice // no CUDA device with a GPU's UUID
	ReasonCUDAFailed        ReasonKind = cudaprobe.KindFailed        // a device's context, memory or kernel failed
)

// Reason is one failure.
type Reason struct {
	Kind    ReasonKind `json:"kind" yaml:"kind"`       // one of the Reason* kinds
	Message string     `json:"message" yaml:"message"` // what failed and what to do
}

// String is "kind: message".
func (r Reason) String() string { return string(r.Kind) + ": " + r.Message }
