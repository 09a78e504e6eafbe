package selftest

/*
#cgo CFLAGS: -O2 -Wall -Wno-unused-function
#cgo LDFLAGS: -ldl
#include <stdio.h>
#include <stdlib.h>
#include <dlfcn.h>
#include "shim.h"

// np_dlopen_check opens path the way the Vulkan loader opens an ICD and
// returns dlerror()'s text in err on failure (0 on success).
static int np_dlopen_check(const char *path, char *err, size_t errlen) {
	dlerror();
	if (dlopen(path, RTLD_LAZY | RTLD_LOCAL) != NULL)
		return 0;
	const char *e = dlerror();
	snprintf(err, errlen, "%s", e ? e : "dlopen failed");
	return -1;
}
*/
import "C"

import (
	"github.com/nodeprep/nodeprep/nodeprep/bounded"
	"github.com/nodeprep/nodeprep/nodeprep/manifest"

	_ "embed"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"time"
	"unsafe"

	"github.com/nodeprep/nodeprep/nodeprep/child"
)

//go:embed shaders/pattern.spv
var patternSPIRV []byte

// DispatchElements is the length, in uint32 values, of the buffer the
// compute dispatch writes (16 KiB: 64 workgroups of 64 invocations).
const DispatchElements = 4096

// dispatchFill is the sentinel the buffer holds before the dispatch.
const dispatchFill = 0xdeadbeef

// Pattern is the value the embedded compute shader (shaders/pattern.comp)
// writes into element i for a seed: i*2654435761 ^ seed, modulo 2^32.
// Because the multiplier is odd, distinct i give distinct values.
func Pattern(i, seed uint32) uint32 { return i*2654435761 ^ seed }

// API names a probe: which library a child opens.
type API string

// The probes.
const (
	APIVulkan API = "vulkan" // probe the Vulkan loader
	APIEGL    API = "egl"    // probe libEGL
)

// ProbeRequest is the probe child's only argument, as JSON: what to open
// and, for Vulkan, where the driver manifests are looked for (the parent
// reads those from the environment it passes to the child; the child only
// uses them to explain a failure).
type ProbeRequest struct {
	// API is the probe to run.
	API API `json:"api"`
	// Library is the library to dlopen (the Vulkan loader or libEGL).
	Library string `json:"library"`
	// FenceTimeoutMS bounds each dispatch's fence wait, in milliseconds
	// (0: 5000).
	FenceTimeoutMS int64 `json:"fenceTimeoutMs,omitempty"`
	// ICDPaths are the manifest files or directories the loader reads
	// (VK_DRIVER_FILES' entries, or the default search path).
	ICDPaths []string `json:"icdPaths,omitempty"`
	// ICDDefaultSearch says ICDPaths are the loader's default search
	// directories (VK_DRIVER_FILES unset): one that does not exist is
	// not a finding.
	ICDDefaultSearch bool `json:"icdDefaultSearch,omitempty"`
	// Seed seeds the dispatch pattern (0: derived from the clock).
	Seed uint32 `json:"seed,omitempty"`
}

// ReportPrefix starts the probe child's report line on stdout, so that
// whatever a driver prints to stdout is never taken for the report, and so
// that the parent can act on the report as soon as the line is complete,
// without waiting for the child's exit (tearing down a driver takes ms).
const ReportPrefix = "nodeprep-probe-report: "

// ErrBadRequest is returned by ServeProbe for a request it cannot decode.
var ErrBadRequest = errors.New("bad probe request")

// ServeProbe is the probe child's body when its report goes to stdout (in
// a container, where only stdout is read): it decodes request (a
// ProbeRequest as JSON), runs that probe in this process and writes its
// report (VulkanReport or EGLReport) to w as one line: ReportPrefix, then
// JSON. Failures of the probe are in the report; the error is for a bad
// request or a failed write. The caller should exit soon after: drivers
// stay loaded.
func ServeProbe(request string, w io.Writer) error {
	return serveProbe(request, w, ReportPrefix)
}

// ServeProbeOnPipe is the probe child's body under Run: it runs the probe
// of each request (ProbeRequests as JSON) in turn, on one thread (two
// drivers initialising on two threads of one process can deadlock), and
// writes each report to report, the private pipe nodeprep/child gives the
// child (child.ChildReport), as one line "report <api> <JSON>" as soon as
// that probe is done, so nothing a driver prints on stdout can pass for
// it. Before any driver is loaded a fatal signal is set to be reported
// with the library it happened in (child.InstallCrashReport). nodeprep
// sends one request a child (selftest.Run). Errors are ServeProbe's.
func ServeProbeOnPipe(requests []string, report *os.File) error {
	reqs := make([]ProbeRequest, len(requests))
	for i, r := range requests {
		if err := decodeRequest(r, &reqs[i]); err != nil {
			return err
		}
	}
	if err := child.InstallCrashReport(report); err != nil {
		return err
	}
	for _, req := range reqs {
		data, err := json.Marshal(probe(req))
		if err != nil {
			return fmt.Errorf("encoding probe report: %w", err)
		}
		line := append([]byte("report "+string(req.API)+" "), data...)
		if _, err := report.Write(append(line, '\n')); err != nil {
			return fmt.Errorf("writing probe report: %w", err)
		}
	}
	return nil
}

func decodeRequest(request string, req *ProbeRequest) error {
	dec := json.NewDecoder(strings.NewReader(request))
	dec.DisallowUnknownFields()
	if err := dec.Decode(req); err != nil {
		return fmt.Errorf("%w: %w", ErrBadRequest, err)
	}
	if dec.More() {
		return fmt.Errorf("%w: data after the request", ErrBadRequest)
	}
	if req.API != APIVulkan && req.API != APIEGL {
		return fmt.Errorf("%w: api %q: want vulkan or egl", ErrBadRequest, req.API)
	}
	if req.Library == "" { // dlopen("") would return the program itself
		return fmt.Errorf("%w: no library to load", ErrBadRequest)
	}
	if req.FenceTimeoutMS < 0 {
		return fmt.Errorf("%w: fenceTimeoutMs %d: want 0 (the default) or more", ErrBadRequest, req.FenceTimeoutMS)
	}
	return nil
}

// probe runs req's probe in this process.
func probe(req ProbeRequest) any {
	if req.API == APIEGL {
		return ProbeEGL(req.Library)
	}
	return ProbeVulkan(req)
}

func serveProbe(request string, w io.Writer, prefix string) error {
	var req ProbeRequest
	if err := decodeRequest(request, &req); err != nil {
		return err
	}
	data, err := json.Marshal(probe(req))
	if err != nil {
		return fmt.Errorf("encoding probe report: %w", err)
	}
	line := append([]byte(prefix), data...)
	if _, err := w.Write(append(line, '\n')); err != nil {
		return fmt.Errorf("writing probe report: %w", err)
	}
	return nil
}

// ms converts a duration to milliseconds with microsecond precision.
func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// round3 rounds milliseconds to microsecond precision.
func round3(x float64) float64 { return math.Round(x*1000) / 1000 }

const errLen = 1024

// ProbeVulkan runs the Vulkan probe in this process: dlopen the loader,
// create a Vulkan 1.1 instance, list the physical devices with their ID,
// driver and PCI bus properties, apply wgpu's exposure rule, and run the
// compute dispatch on every exposed adapter with a compute queue. Call it
// only in a child process (ServeProbe): a broken driver can hang or crash
// it.
func ProbeVulkan(req ProbeRequest) *VulkanReport {
	start := time.Now()
	rep := &VulkanReport{Loader: req.Library, Adapters: []Adapter{}}
	defer func() { rep.TotalMS = ms(time.Since(start)) }()

	var errbuf [errLen]C.char
	lib := C.CString(req.Library)
	defer C.free(unsafe.Pointer(lib))
	t := time.Now()
	vk := C.np_vk_open(lib, &errbuf[0], errLen)
	rep.LoadMS = ms(time.Since(t))
	if vk == nil {
		rep.Stage, rep.Error = StageLoad, C.GoString(&errbuf[0])
		return rep
	}

	t = time.Now()
	var loaderVersion, instanceVersion C.uint32_t
	var exts [errLen]C.char
	r := C.np_vk_create_instance(vk, &loaderVersion, &instanceVersion, &exts[0], errLen, &errbuf[0], errLen)
	rep.InstanceMS = ms(time.Since(t))
	rep.LoaderVersion = vkVersion(uint32(loaderVersion))
	rep.InstanceVersion = vkVersion(uint32(instanceVersion))
	rep.InstanceExtensions = strings.Fields(C.GoString(&exts[0]))
	if r != 0 {
		rep.Stage, rep.Result = StageInstance, vkResultName(int32(r))
		rep.Error = C.GoString(&errbuf[0])
		if rep.Error == "" {
			rep.Error = "vkCreateInstance returned " + rep.Result
		}
		rep.ICDs = checkICDs(req.ICDPaths, req.ICDDefaultSearch)
		return rep
	}

	t = time.Now()
	raw := make([]C.np_vk_adapter, C.NP_MAX_ADAPTERS)
	var n C.uint32_t
	r = C.np_vk_adapters(vk, &raw[0], C.NP_MAX_ADAPTERS, &n)
	rep.EnumerateMS = ms(time.Since(t))
	if r != 0 {
		rep.Stage, rep.Result = StageEnumerate, vkResultName(int32(r))
		rep.Error = "vkEnumeratePhysicalDevices returned " + rep.Result
		return rep
	}
	if n == 0 {
		rep.ICDs = checkICDs(req.ICDPaths, req.ICDDefaultSearch)
	}
	for i := range int(n) {
		rep.Adapters = append(rep.Adapters, adapterOf(i, &raw[i]))
	}
	sortAdapters(rep.Adapters)

	seed := req.Seed
	if seed == 0 {
		seed = uint32(time.Now().UnixNano()) | 1
	}
	fence := time.Duration(req.FenceTimeoutMS) * time.Millisecond
	if fence <= 0 {
		fence = 5 * time.Second
	}
	for i := range rep.Adapters {
		a := &rep.Adapters[i]
		if a.Hidden || raw[a.Index].q0_flags&qCompute == 0 {
			continue
		}
		a.Dispatch = dispatch(vk, a.Index, &raw[a.Index], seed, fence)
	}
	return rep
}

// adapterOf converts the shim's adapter and applies wgpu-hal's exposure
// rules (exposeRule); an exposed adapter gets wgpu's limits, features and
// downlevel flags (wgpuView).
func adapterOf(index int, c *C.np_vk_adapter) Adapter {
	a := Adapter{
		Index:      index,
		Name:       C.GoString(&c.name[0]),
		Vendor:     uint32(c.vendor_id),
		Device:     uint32(c.device_id),
		DeviceType: deviceTypeOf(uint32(c.device_type)),
		Driver:     "?",
		DriverInfo: "?",
		Backend:    BackendVulkan,
		APIVersion: vkVersion(uint32(c.api_version)),
	}
	if c.has_id != 0 {
		var u [16]byte
		for i := range u {
			u[i] = byte(c.device_uuid[i])
		}
		a.DeviceUUID = FormatUUID(u)
	}
	if c.has_driver != 0 {
		a.Driver = C.GoString(&c.driver_name[0])
		a.DriverInfo = C.GoString(&c.driver_info[0])
		cv := c.conformance
		a.ConformanceVersion = fmt.Sprintf("%d.%d.%d.%d", cv[0], cv[1], cv[2], cv[3])
	}
	if c.has_pci != 0 {
		a.PCIBusID = fmt.Sprintf("%04x:%02x:%02x.%x", uint32(c.pci_domain), uint32(c.pci_bus), uint32(c.pci_device), uint32(c.pci_function))
	}
	caps := capsOf(c)
	if c.queue_families > 0 {
		a.QueueFamily0 = queueFlagNames(uint32(c.q0_flags))
	}
	if rule := exposeRule(&caps); rule != "" {
		a.Hidden, a.HiddenRule, a.HiddenReason = true, rule, hiddenReason(rule, &caps)
		return a
	}
	a.WGPU = wgpuView(&caps)
	return a
}

func b(v C.VkBool32) bool { return v != 0 }

// capsOf converts what the shim read into the rules' input.
func capsOf(c *C.np_vk_adapter) vkCaps {
	l, f := &c.limits, &c.features
	caps := vkCaps{
		APIVersion:                   uint32(c.api_version),
		Vendor:                       uint32(c.vendor_id),
		Props2:                       c.props2 != 0,
		HasDriver:                    c.has_driver != 0,
		DriverID:                     uint32(c.driver_id),
		DriverName:                   C.GoString(&c.driver_name[0]),
		ExtStorageBufferStorageClass: c.ext_storage_buffer_storage_class != 0,
		ExtMaintenance1:              c.ext_maintenance1 != 0,
		ExtSwapchainMutableFormat:    c.ext_swapchain_mutable_format != 0,
		QueueFamilies:                uint32(c.queue_families),
		Q0Flags:                      uint32(c.q0_flags),
		Q0TimestampBits:              uint32(c.q0_timestamp_bits),
		HasMaint3:                    c.has_maint3 != 0,
		MaxPerSetDescriptors:         uint32(c.max_per_set_descriptors),
		MaxMemoryAllocationSize:      uint64(c.max_memory_allocation_size),
		HasMaint4:                    c.has_maint4 != 0,
		MaxBufferSize:                uint64(c.max_buffer_size),
		HasMultiview:                 c.has_multiview != 0,
		MaxMultiviewViewCount:        uint32(c.max_multiview_view_count),
		HasSubgroup:                  c.has_subgroup != 0,
		SubgroupStages:               uint32(c.subgroup_stages),
		SubgroupOps:                  uint32(c.subgroup_ops),
		HasSubgroupSizeControl:       c.has_subgroup_size_control != 0,
		MinSubgroupSize:              uint32(c.min_subgroup_size),
		MaxSubgroupSize:              uint32(c.max_subgroup_size),
		ShaderF16:                    c.shader_f16 != 0,
		Limits: vkLimits{
			MaxImageDimension1D:                   uint32(l.maxImageDimension1D),
			MaxImageDimension2D:                   uint32(l.maxImageDimension2D),
			MaxImageDimension3D:                   uint32(l.maxImageDimension3D),
			MaxImageDimensionCube:                 uint32(l.maxImageDimensionCube),
			MaxImageArrayLayers:                   uint32(l.maxImageArrayLayers),
			MaxUniformBufferRange:                 uint32(l.maxUniformBufferRange),
			MaxStorageBufferRange:                 uint32(l.maxStorageBufferRange),
			MaxPushConstantsSize:                  uint32(l.maxPushConstantsSize),
			MaxBoundDescriptorSets:                uint32(l.maxBoundDescriptorSets),
			MaxPerStageDescriptorSamplers:         uint32(l.maxPerStageDescriptorSamplers),
			MaxPerStageDescriptorUniformBuffers:   uint32(l.maxPerStageDescriptorUniformBuffers),
			MaxPerStageDescriptorStorageBuffers:   uint32(l.maxPerStageDescriptorStorageBuffers),
			MaxPerStageDescriptorSampledImages:    uint32(l.maxPerStageDescriptorSampledImages),
			MaxPerStageDescriptorStorageImages:    uint32(l.maxPerStageDescriptorStorageImages),
			MaxPerStageResources:                  uint32(l.maxPerStageResources),
			MaxDescriptorSetSamplers:              uint32(l.maxDescriptorSetSamplers),
			MaxDescriptorSetUniformBuffers:        uint32(l.maxDescriptorSetUniformBuffers),
			MaxDescriptorSetUniformBuffersDynamic: uint32(l.maxDescriptorSetUniformBuffersDynamic),
			MaxDescriptorSetStorageBuffers:        uint32(l.maxDescriptorSetStorageBuffers),
			MaxDescriptorSetStorageBuffersDynamic: uint32(l.maxDescriptorSetStorageBuffersDynamic),
			MaxDescriptorSetSampledImages:         uint32(l.maxDescriptorSetSampledImages),
			MaxDescriptorSetStorageImages:         uint32(l.maxDescriptorSetStorageImages),
			MaxVertexInputAttributes:              uint32(l.maxVertexInputAttributes),
			MaxVertexInputBindings:                uint32(l.maxVertexInputBindings),
			MaxVertexInputBindingStride:           uint32(l.maxVertexInputBindingStride),
			MaxVertexOutputComponents:             uint32(l.maxVertexOutputComponents),
			MaxFragmentInputComponents:            uint32(l.maxFragmentInputComponents),
			MaxFragmentOutputAttachments:          uint32(l.maxFragmentOutputAttachments),
			MaxFragmentCombinedOutputResources:    uint32(l.maxFragmentCombinedOutputResources),
			MaxComputeSharedMemorySize:            uint32(l.maxComputeSharedMemorySize),
			MaxComputeWorkGroupCount:              [3]uint32{uint32(l.maxComputeWorkGroupCount[0]), uint32(l.maxComputeWorkGroupCount[1]), uint32(l.maxComputeWorkGroupCount[2])},
			MaxComputeWorkGroupInvocations:        uint32(l.maxComputeWorkGroupInvocations),
			MaxComputeWorkGroupSize:               [3]uint32{uint32(l.maxComputeWorkGroupSize[0]), uint32(l.maxComputeWorkGroupSize[1]), uint32(l.maxComputeWorkGroupSize[2])},
			MinUniformBufferOffsetAlignment:       uint64(l.minUniformBufferOffsetAlignment),
			MinStorageBufferOffsetAlignment:       uint64(l.minStorageBufferOffsetAlignment),
			MaxFramebufferWidth:                   uint32(l.maxFramebufferWidth),
			MaxFramebufferHeight:                  uint32(l.maxFramebufferHeight),
			MaxColorAttachments:                   uint32(l.maxColorAttachments),
		},
		Features: vkFeatures{
			RobustBufferAccess:          b(f.robustBufferAccess),
			FullDrawIndexUint32:         b(f.fullDrawIndexUint32),
			ImageCubeArray:              b(f.imageCubeArray),
			IndependentBlend:            b(f.independentBlend),
			GeometryShader:              b(f.geometryShader),
			SampleRateShading:           b(f.sampleRateShading),
			DualSrcBlend:                b(f.dualSrcBlend),
			MultiDrawIndirect:           b(f.multiDrawIndirect),
			DrawIndirectFirstInstance:   b(f.drawIndirectFirstInstance),
			DepthClamp:                  b(f.depthClamp),
			DepthBiasClamp:              b(f.depthBiasClamp),
			FillModeNonSolid:            b(f.fillModeNonSolid),
			SamplerAnisotropy:           b(f.samplerAnisotropy),
			TextureCompressionETC2:      b(f.textureCompressionETC2),
			TextureCompressionASTC:      b(f.textureCompressionASTC_LDR),
			TextureCompressionBC:        b(f.textureCompressionBC),
			PipelineStatisticsQuery:     b(f.pipelineStatisticsQuery),
			VertexPipelineStoresAtomics: b(f.vertexPipelineStoresAndAtomics),
			FragmentStoresAndAtomics:    b(f.fragmentStoresAndAtomics),
			ShaderClipDistance:          b(f.shaderClipDistance),
			ShaderFloat64:               b(f.shaderFloat64),
			ShaderInt64:                 b(f.shaderInt64),
			ShaderInt16:                 b(f.shaderInt16),
		},
	}
	caps.Conformance = [4]uint8{uint8(c.conformance[0]), uint8(c.conformance[1]), uint8(c.conformance[2]), uint8(c.conformance[3])}
	for i := range caps.FormatFlags {
		caps.FormatFlags[i] = uint32(c.format_flags[i])
	}
	return caps
}

// sortAdapters orders adapters best first: by DeviceType.Rank, then by
// enumeration order.
func sortAdapters(as []Adapter) {
	sort.SliceStable(as, func(i, j int) bool {
		ri, rj := as[i].DeviceType.Rank(), as[j].DeviceType.Rank()
		if ri != rj {
			return ri < rj
		}
		return as[i].Index < as[j].Index
	})
}

// dispatch runs the embedded shader on physical device index and verifies
// every element of the buffer.
func dispatch(vk *C.np_vk, index int, raw *C.np_vk_adapter, seed uint32, fence time.Duration) *Dispatch {
	start := time.Now()
	d := &Dispatch{Elements: DispatchElements, Seed: seed}
	code := make([]uint32, len(patternSPIRV)/4)
	for i := range code {
		code[i] = binary.LittleEndian.Uint32(patternSPIRV[4*i:])
	}
	out := make([]uint32, DispatchElements)
	var res C.np_vk_dispatch_result
	r := C.np_vk_dispatch(vk, C.uint32_t(index), raw, (*C.uint32_t)(unsafe.Pointer(&code[0])), C.size_t(4*len(code)),
		C.uint32_t(seed), DispatchElements, dispatchFill, C.uint64_t(fence.Nanoseconds()),
		(*C.uint32_t)(unsafe.Pointer(&out[0])), &res)
	d.Timings = DispatchTimings{
		DeviceMS:    round3(float64(res.device_ms)),
		ResourcesMS: round3(float64(res.resources_ms)),
		PipelineMS:  round3(float64(res.pipeline_ms)),
		SubmitMS:    round3(float64(res.submit_ms)),
		WaitMS:      round3(float64(res.wait_ms)),
		ReadbackMS:  round3(float64(res.readback_ms)),
	}
	if r != 0 {
		d.Step = C.GoString(res.failed_step)
		d.Result = vkResultName(int32(r))
		d.Timings.TotalMS = ms(time.Since(start))
		return d
	}
	t := time.Now()
	d.Wrong, d.FirstWrong = verifyPattern(out, seed)
	d.Verified = d.Wrong == 0
	d.Timings.VerifyMS = ms(time.Since(t))
	d.Timings.TotalMS = ms(time.Since(start))
	return d
}

// verifyPattern counts the elements of got that differ from Pattern and
// describes the first.
func verifyPattern(got []uint32, seed uint32) (wrong int, first string) {
	for i, v := range got {
		if want := Pattern(uint32(i), seed); v != want {
			if wrong == 0 {
				first = fmt.Sprintf("element %d: got %#08x, want %#08x", i, v, want)
			}
			wrong++
		}
	}
	return wrong, first
}

// parseICDManifest returns a driver manifest's ICD.library_path, parsed
// by the one manifest parser (package manifest).
func parseICDManifest(data []byte) (string, error) {
	info, err := manifest.Parse(manifest.KindICD, data)
	if err != nil {
		return "", fmt.Errorf("decoding driver manifest: %w", err)
	}
	return info.Libraries[0], nil
}

// checkICDs reads each manifest (directories: their *.json files) and
// tries to dlopen its library, resolving a relative library_path with a
// slash against the manifest's directory as the loader does.
func checkICDs(paths []string, defaultSearch bool) []ICDCheck {
	var files []string
	for _, p := range paths {
		fi, err := os.Stat(p)
		if defaultSearch && err != nil {
			continue // an absent search directory holds no manifest
		}
		if err == nil && fi.IsDir() {
			m, _ := filepath.Glob(filepath.Join(p, "*.json"))
			files = append(files, m...)
			continue
		}
		files = append(files, p)
	}
	var out []ICDCheck
	for _, f := range files {
		c := ICDCheck{Manifest: f}
		data, err := bounded.ReadFile(f, bounded.MaxManifest)
		if err == nil {
			c.Library, err = parseICDManifest(data)
		}
		if err != nil {
			c.Error = err.Error()
			out = append(out, c)
			continue
		}
		lib := c.Library
		if strings.Contains(lib, "/") && !filepath.IsAbs(lib) {
			lib = filepath.Join(filepath.Dir(f), lib)
		}
		var errbuf [errLen]C.char
		cs := C.CString(lib)
		if C.np_dlopen_check(cs, &errbuf[0], errLen) != 0 {
			c.Error = C.GoString(&errbuf[0])
		}
		C.free(unsafe.Pointer(cs))
		out = append(out, c)
	}
	return out
}

// ProbeEGL runs the EGL probe in this process: dlopen libEGL, resolve the
// device functions with eglGetProcAddress (EGL_EXT_device_enumeration,
// EGL_EXT_device_query, EGL_EXT_platform_device), and open every device
// with a surfaceless context. Call it only in a child process (ServeProbe).
func ProbeEGL(library string) *EGLReport {
	// A context is current on one thread (EGL 1.5, eglMakeCurrent).
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	start := time.Now()
	rep := &EGLReport{Library: library, Devices: []EGLDevice{}}
	defer func() { rep.TotalMS = ms(time.Since(start)) }()

	var errbuf [errLen]C.char
	lib := C.CString(library)
	defer C.free(unsafe.Pointer(lib))
	egl := C.np_egl_open(lib, &errbuf[0], errLen)
	if egl == nil {
		rep.Stage, rep.Error = StageLoad, C.GoString(&errbuf[0])
		return rep
	}
	exts := make([]C.char, C.NP_EXTS)
	C.np_egl_client_extensions(egl, &exts[0], C.NP_EXTS)
	rep.ClientExtensions = strings.Fields(C.GoString(&exts[0]))

	var n C.int
	if C.np_egl_devices(egl, C.NP_MAX_EGL_DEVICES, &n, &errbuf[0], errLen) != 0 {
		rep.Stage, rep.Error = StageDevices, C.GoString(&errbuf[0])
		return rep
	}
	for i := range int(n) {
		var d C.np_egl_device
		C.np_egl_probe_device(egl, C.int(i), &d)
		rep.Devices = append(rep.Devices, eglDeviceOf(i, &d))
	}
	return rep
}

func eglDeviceOf(i int, d *C.np_egl_device) EGLDevice {
	dev := EGLDevice{
		Index:      i,
		DRMDevice:  C.GoString(&d.drm_file[0]),
		DriverName: C.GoString(&d.driver_name[0]),
		Vendor:     C.GoString(&d.vendor[0]),
		Version:    C.GoString(&d.version[0]),
		GLVendor:   C.GoString(&d.gl_vendor[0]),
		GLRenderer: C.GoString(&d.gl_renderer[0]),
		GLVersion:  C.GoString(&d.gl_version[0]),
		InitMS:     round3(float64(d.init_ms)),
		ContextMS:  round3(float64(d.context_ms)),
	}
	if d.api != nil {
		dev.API = C.GoString(d.api)
	}
	if d.has_uuid != 0 {
		var u [16]byte
		for k := range u {
			u[k] = byte(d.uuid[k])
		}
		dev.UUID = FormatUUID(u)
	}
	for _, e := range strings.Fields(C.GoString(&d.extensions[0])) {
		if e == "EGL_MESA_device_software" {
			dev.Software = true
		}
	}
	if dev.Vendor == "" {
		dev.Vendor = C.GoString(&d.device_vendor[0])
	}
	version := ""
	if d.gles_major > 0 {
		version = fmt.Sprintf("%d.%d", int(d.gles_major), int(d.gles_minor))
	}
	if dev.API == "OpenGL ES" {
		dev.GLESVersion = version
	}
	if d.failed_step != nil {
		dev.Error = C.GoString(d.failed_step)
		switch {
		case dev.GLESVersion != "" && d.gles_major < 3:
			dev.Error = fmt.Sprintf("the context is OpenGL ES %s, below the 3.0 wgpu's GL backend needs (wgpu-hal/src/gles/adapter.rs; %q)", dev.GLESVersion, dev.GLVersion)
		case dev.API == "OpenGL" && version != "":
			dev.Error = fmt.Sprintf("the context is OpenGL %s, below the 3.3 wgpu's GL backend asks for (wgpu-hal/src/gles/egl.rs; %q)", version, dev.GLVersion)
		}
		if d.egl_error != 0 {
			dev.Error += fmt.Sprintf(" failed (EGL error %#04x)", int32(d.egl_error))
		}
		// EGL_BAD_MATCH or EGL_BAD_ATTRIBUTE for the version-3 request:
		// the driver has no OpenGL ES 3 context, and wgpu's GL backend
		// asks for nothing less.
		if strings.HasPrefix(dev.Error, "eglCreateContext(OpenGL ES 3.0)") && (d.egl_error == 0x3009 || d.egl_error == 0x3004) {
			dev.Error += ": the driver offers no OpenGL ES 3.0 context (nor desktop OpenGL 3.3), which wgpu's GL backend needs (wgpu-hal/src/gles/egl.rs requests version 3)"
		}
	}
	return dev
}

// vkResultName names a VkResult (Vulkan spec, "Return Codes").
func vkResultName(r int32) string {
	names := map[int32]string{
		0: "VK_SUCCESS", 1: "VK_NOT_READY", 2: "VK_TIMEOUT", 5: "VK_INCOMPLETE",
		-1: "VK_ERROR_OUT_OF_HOST_MEMORY", -2: "VK_ERROR_OUT_OF_DEVICE_MEMORY",
		-3: "VK_ERROR_INITIALIZATION_FAILED", -4: "VK_ERROR_DEVICE_LOST",
		-5: "VK_ERROR_MEMORY_MAP_FAILED", -6: "VK_ERROR_LAYER_NOT_PRESENT",
		-7: "VK_ERROR_EXTENSION_NOT_PRESENT", -8: "VK_ERROR_FEATURE_NOT_PRESENT",
		-9: "VK_ERROR_INCOMPATIBLE_DRIVER", -10: "VK_ERROR_TOO_MANY_OBJECTS",
		-11: "VK_ERROR_FORMAT_NOT_SUPPORTED", -12: "VK_ERROR_FRAGMENTED_POOL",
		-13: "VK_ERROR_UNKNOWN",
	}
	if s, ok := names[r]; ok {
		return s
	}
	return fmt.Sprintf("VkResult(%d)", r)
}
