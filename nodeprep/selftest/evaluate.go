package selftest

import (
	"fmt"
	"strings"

	"github.com/nodeprep/nodeprep/nodeprep/gpu"
)

// Policy is what Evaluate needs besides the probes: the two switches of the
// self-test and where the drivers were looked for, so that a reason can
// say what to check.
type Policy struct {
	// RequireEGL makes EGL failures fail the self-test; otherwise they are
	// warnings.
	RequireEGL bool
	// AllowCPUAdapter lets the best CPU adapter (lavapipe) stand in for
	// every GPU, and a Mesa software EGL device for every EGL device, when
	// the inventory is simulated. It has no effect on a real inventory.
	AllowCPUAdapter bool
	// Hints name the driver search paths in reasons.
	Hints Hints
	// Require are the WebGPU limits and features the adapter that
	// satisfies each GPU (a stand-in included) must offer as wgpu reports
	// them; each unmet one fails the self-test (ReasonRequirements).
	Require Requirements
}

// Hints describe where the Vulkan loader and glvnd look for drivers, as
// the environment given to the probe sets them (see ICDSearch and
// EGLVendorSearch).
type Hints struct {
	// ICDVar is "VK_DRIVER_FILES" or "VK_ICD_FILENAMES" when that variable
	// replaced the loader's search, else "".
	ICDVar string
	// ICDPaths are the manifest files or directories the loader reads.
	ICDPaths []string
	// EGLVar is "__EGL_VENDOR_LIBRARY_FILENAMES" or
	// "__EGL_VENDOR_LIBRARY_DIRS" when set, else "".
	EGLVar string
	// EGLPaths are the vendor manifest files or directories glvnd reads.
	EGLPaths []string
}

// ProbeResult is one probe child's outcome: the report it printed, or the
// reason it printed none (timeout, crash, bad output).
type ProbeResult[T any] struct {
	Report  *T      // the child's report, or nil
	Failure *Reason // why there is no report (timeout, crash, bad output)
	// Output is what the child, its loader and its drivers printed
	// (stdout and stderr, the last 2 KiB on one line; with
	// VK_LOADER_DEBUG=error,warn the Vulkan loader's own errors). A reason
	// about this probe quotes it.
	Output string
	// Escaped counts the child's descendants that outlived it and were
	// killed (a driver's daemon); a report with one gets a warning. When
	// both probes share a child, the count is on the Vulkan result.
	Escaped int
}

// Evaluate decides the self-test from the inventory and the two probes
// (FIELD-REPORTS F4, F12):
//
//   - every GPU must have exactly one exposed Vulkan adapter with vendor
//     0x10de, type DiscreteGpu or IntegratedGpu and a device UUID equal to
//     its NVML UUID, and the dispatch on that adapter must verify; CPU,
//     virtual and other adapters never satisfy a GPU;
//   - every GPU must have an NVIDIA EGL device (EGL_VENDOR or GL_VENDOR
//     contains "NVIDIA") that made a context current, matched by
//     EGL_DEVICE_UUID_EXT when the devices report one, else by count; a
//     Mesa device that merely initialises does not count. EGL failures
//     are warnings unless p.RequireEGL;
//   - with a simulated inventory and p.AllowCPUAdapter, the best CPU
//     adapter with a verified dispatch stands in for each GPU, and a Mesa
//     software EGL device likewise, and the report says StandIn.
//
// Each failure gives one Reason; a probe that could not list adapters
// gives one reason, not one per GPU. Evaluate does not set DurationMS.
func Evaluate(inv *gpu.Inventory, vk ProbeResult[VulkanReport], egl ProbeResult[EGLReport], p Policy) *Report {
	r := &Report{RequireEGL: p.RequireEGL, Matches: []Match{}}
	var gpus []gpu.GPU
	if inv != nil {
		r.Simulated = inv.Simulated
		gpus = inv.GPUs
	}
	if vk.Report != nil {
		r.Vulkan = *vk.Report
	}
	if egl.Report != nil {
		r.EGL = *egl.Report
	}
	// Empty lists, not null, when a probe printed no report (a timeout).
	if r.Vulkan.Adapters == nil {
		r.Vulkan.Adapters = []Adapter{}
	}
	if r.EGL.Devices == nil {
		r.EGL.Devices = []EGLDevice{}
	}
	for _, g := range gpus {
		r.Matches = append(r.Matches, Match{GPU: g.Index, UUID: g.UUID, Name: g.Name})
	}
	standIn := r.Simulated && p.AllowCPUAdapter
	if len(gpus) == 0 {
		r.fail(ReasonNoGPUs, "the inventory has no GPU: nothing to test")
		return r
	}
	nr, nw := len(r.Reasons), len(r.Warnings)
	r.evalVulkan(gpus, vk, standIn, p.Hints)
	r.evalRequirements(p.Require)
	r.quote(nr, nw, vk.Failure, "the Vulkan loader and driver said", vk.Output)
	nr, nw = len(r.Reasons), len(r.Warnings)
	r.evalEGL(gpus, egl, standIn, p)
	r.quote(nr, nw, egl.Failure, "libEGL and the vendor library said", egl.Output)
	if n := vk.Escaped + egl.Escaped; n > 0 {
		r.warn("the drivers left %d process(es) running after the probe (a daemon in its own session); nodeprep killed them", n)
	}
	r.Passed = len(r.Reasons) == 0
	return r
}

// quote appends what a probe's child printed to the reasons and warnings
// added since nr and nw, so that the loader's or the driver's own line
// ("unable to open libnvidia-glvkspirv…") is in the reason. A child
// failure already carries its output.
func (r *Report) quote(nr, nw int, failure *Reason, who, output string) {
	if output == "" || failure != nil {
		return
	}
	for i := nr; i < len(r.Reasons); i++ {
		r.Reasons[i].Message += "; " + who + ": " + output
	}
	for i := nw; i < len(r.Warnings); i++ {
		r.Warnings[i] += "; " + who + ": " + output
	}
}

func (r *Report) fail(kind ReasonKind, format string, args ...any) {
	r.Reasons = append(r.Reasons, Reason{Kind: kind, Message: fmt.Sprintf(format, args...)})
}

func (r *Report) warn(format string, args ...any) {
	r.Warnings = append(r.Warnings, fmt.Sprintf(format, args...))
}

func gpuLabel(g gpu.GPU) string {
	return fmt.Sprintf("GPU %d (%s, %s)", g.Index, g.Name, g.UUID)
}

func (h Hints) icd() string {
	if h.ICDVar != "" && len(h.ICDPaths) == 0 {
		return fmt.Sprintf("%s is set but empty, which replaces the manifest search with nothing: the loader loads no driver (unset it, or name the manifests)", h.ICDVar)
	}
	if h.ICDVar != "" {
		return fmt.Sprintf("%s=%s replaces the manifest search", h.ICDVar, strings.Join(h.ICDPaths, ":"))
	}
	if len(h.ICDPaths) == 0 {
		return "the loader searched its default manifest paths (VK_DRIVER_FILES unset)"
	}
	return "manifests searched (VK_DRIVER_FILES unset): " + strings.Join(h.ICDPaths, ", ")
}

func (h Hints) egl() string {
	if h.EGLVar != "" {
		return fmt.Sprintf("%s=%s", h.EGLVar, strings.Join(h.EGLPaths, ":"))
	}
	if len(h.EGLPaths) == 0 {
		return "glvnd's default vendor manifest directories"
	}
	return "vendor manifests searched (__EGL_VENDOR_LIBRARY_FILENAMES unset): " + strings.Join(h.EGLPaths, ", ")
}

// icdFindings lists every driver manifest the probe found and what
// happened to it (its library opens, or why the manifest or the library
// failed), for the incompatible-driver and no-adapter reasons.
func icdFindings(checks []ICDCheck) string {
	if len(checks) == 0 {
		return "no driver manifest was found"
	}
	var found []string
	ok := 0
	for _, c := range checks {
		switch {
		case c.Error == "":
			ok++
			found = append(found, fmt.Sprintf("manifest %s: library %q opens", c.Manifest, c.Library))
		case c.Library == "":
			found = append(found, fmt.Sprintf("manifest %s: %s", c.Manifest, c.Error))
		default:
			found = append(found, fmt.Sprintf("manifest %s names library %q, which failed to load: %s", c.Manifest, c.Library, c.Error))
		}
	}
	msg := fmt.Sprintf("%d driver manifest(s) found: %s", len(checks), strings.Join(found, "; "))
	if ok == len(checks) {
		msg += "; every manifest's library opens, but no driver accepted the instance"
	}
	return msg
}

func (r *Report) evalVulkan(gpus []gpu.GPU, res ProbeResult[VulkanReport], standIn bool, h Hints) {
	if res.Failure != nil {
		r.Reasons = append(r.Reasons, *res.Failure)
		return
	}
	vk := &r.Vulkan
	switch vk.Stage {
	case StageLoad:
		r.fail(ReasonLoaderNotFound, "Vulkan loader %q could not be opened: %s (install the Vulkan loader, on NixOS pkgs.vulkan-loader, or pass --vulkan-loader with its path)", vk.Loader, vk.Error)
		return
	case StageInstance:
		if vk.Result == "VK_ERROR_INCOMPATIBLE_DRIVER" {
			r.fail(ReasonIncompatibleDriver, "vkCreateInstance: VK_ERROR_INCOMPATIBLE_DRIVER: no Vulkan driver (ICD) could be used: %s; %s", icdFindings(vk.ICDs), h.icd())
		} else {
			r.fail(ReasonVulkanFailed, "vkCreateInstance: %s: %s", vk.Result, vk.Error)
		}
		return
	case StageEnumerate:
		r.fail(ReasonVulkanFailed, "%s: %s", StageEnumerate, vk.Error)
		return
	}
	if len(vk.Adapters) == 0 {
		r.fail(ReasonNoAdapters, "the Vulkan loader listed no adapter: %s; %s", icdFindings(vk.ICDs), h.icd())
		return
	}
	gpuUUIDs := map[[16]byte]bool{}
	for _, g := range gpus {
		if u, err := ParseUUID(g.UUID); err == nil {
			gpuUUIDs[u] = true
		}
	}
	var (
		seen      []string
		nvidia    []*Adapter // exposed NVIDIA GPU-type adapters
		unmatched []*Adapter // ... whose UUID is no GPU's
		cpu       *Adapter   // the best exposed CPU adapter
		hiddenCPU *Adapter   // the best CPU adapter wgpu hides
	)
	for i := range vk.Adapters {
		a := &vk.Adapters[i]
		seen = append(seen, a.Label())
		if a.Hidden {
			r.warn("adapter %s hidden: %s", a.Label(), a.HiddenReason)
			if a.DeviceType == DeviceCPU && hiddenCPU == nil {
				hiddenCPU = a
			}
			continue
		}
		if a.Vendor == VendorNVIDIA && a.DeviceType.IsGPU() {
			nvidia = append(nvidia, a)
			if u, err := ParseUUID(a.DeviceUUID); err != nil || !gpuUUIDs[u] {
				unmatched = append(unmatched, a)
			}
		}
		if a.DeviceType == DeviceCPU && cpu == nil {
			cpu = a
		}
	}
	for _, a := range unmatched {
		r.warn("extra NVIDIA adapter %s with UUID %s matches no GPU in the inventory", a.Label(), orDash(a.DeviceUUID))
	}
	if len(nvidia) == 0 && !standIn && len(gpus) > 0 && r.Simulated {
		// No driver serves a simulated GPU: the way out is the flag, not
		// the ICD search path.
		r.fail(ReasonMissingAdapter, "simulated GPUs have no Vulkan adapter of their own: pass --allow-cpu-adapter to let a CPU adapter (lavapipe) stand in; the loader listed: %s", strings.Join(seen, ", "))
		return
	}
	if len(nvidia) == 0 && !standIn && len(gpus) > 0 {
		r.fail(ReasonMissingAdapter, "no NVIDIA Vulkan adapter (vendor 0x10de, DiscreteGpu or IntegratedGpu) for %d GPU(s); the loader listed: %s; CPU, virtual and other adapters never count; is the NVIDIA ICD manifest (nvidia_icd.json) in the search path? %s",
			len(gpus), strings.Join(seen, ", "), h.icd())
		return
	}
	standInFailed := false
	for i, g := range gpus {
		m := &r.Matches[i]
		var cands, qualified []*Adapter
		for k := range vk.Adapters {
			a := &vk.Adapters[k]
			if a.DeviceUUID != "" && sameUUID(a.DeviceUUID, g.UUID) {
				cands = append(cands, a)
				if !a.Hidden && a.Vendor == VendorNVIDIA && a.DeviceType.IsGPU() {
					qualified = append(qualified, a)
				}
			}
		}
		switch {
		case len(qualified) == 1:
			a := qualified[0]
			m.Adapter, m.AdapterName = ptr(a.Index), a.Name
			if a.PCIBusID != "" && g.PCIBusID != "" && normPCI(a.PCIBusID) != normPCI(g.PCIBusID) {
				r.warn("%s: adapter %s has its UUID but PCI bus id %s (NVML: %s)", gpuLabel(g), a.Label(), a.PCIBusID, g.PCIBusID)
			}
			if msg := dispatchProblem(a); msg != "" {
				r.fail(ReasonDispatchFailed, "%s: %s", gpuLabel(g), msg)
				continue
			}
			m.Vulkan = true
		case len(qualified) > 1:
			var names []string
			for _, a := range qualified {
				names = append(names, a.Label())
			}
			r.fail(ReasonDuplicateAdapter, "%s: %d Vulkan adapters have its UUID, want exactly one: %s (two ICD manifests loading NVIDIA drivers?)", gpuLabel(g), len(qualified), strings.Join(names, ", "))
		case standIn:
			if cpu == nil {
				switch {
				case standInFailed:
				case hiddenCPU != nil:
					r.fail(ReasonMissingAdapter, "simulated GPUs with --allow-cpu-adapter: the CPU adapter %s cannot stand in: %s", hiddenCPU.Label(), hiddenCPU.HiddenReason)
				default:
					r.fail(ReasonMissingAdapter, "simulated GPUs with --allow-cpu-adapter: no CPU Vulkan adapter to stand in (install Mesa's lavapipe, Debian's mesa-vulkan-drivers, or name its manifest with VK_DRIVER_FILES); the loader listed: %s", strings.Join(seen, ", "))
				}
				standInFailed = true
				continue
			}
			m.Adapter, m.AdapterName, m.StandIn = ptr(cpu.Index), cpu.Name, true
			if msg := dispatchProblem(cpu); msg != "" {
				if !standInFailed {
					r.fail(ReasonDispatchFailed, "stand-in CPU adapter: %s", msg)
				}
				standInFailed = true
				continue
			}
			m.Vulkan = true
			r.StandIn = true
		case len(cands) > 0:
			a := cands[0]
			why := fmt.Sprintf("vendor %s, type %s", hex4(a.Vendor), a.DeviceType)
			if a.Hidden {
				why = "hidden: " + a.HiddenReason
			}
			r.fail(ReasonMissingAdapter, "%s: adapter %s has its UUID but cannot satisfy it (%s); only exposed NVIDIA DiscreteGpu or IntegratedGpu adapters count", gpuLabel(g), a.Label(), why)
		case len(unmatched) > 0:
			var names []string
			for _, a := range unmatched {
				names = append(names, a.Label()+" "+orDash(a.DeviceUUID))
			}
			r.fail(ReasonUUIDMismatch, "%s: no Vulkan adapter has its UUID; NVIDIA adapters with other UUIDs: %s", gpuLabel(g), strings.Join(names, ", "))
		default:
			r.fail(ReasonMissingAdapter, "%s: no Vulkan adapter has its UUID; the loader listed: %s", gpuLabel(g), strings.Join(seen, ", "))
		}
	}
}

// evalRequirements fails each adapter that satisfies a GPU but lacks a
// required limit or feature, once per adapter, naming each.
func (r *Report) evalRequirements(q Requirements) {
	if len(q.Limits) == 0 && len(q.Features) == 0 {
		return
	}
	done := map[int]bool{}
	for _, m := range r.Matches {
		if !m.Vulkan || m.Adapter == nil || done[*m.Adapter] {
			continue
		}
		done[*m.Adapter] = true
		for i := range r.Vulkan.Adapters {
			a := &r.Vulkan.Adapters[i]
			if a.Index != *m.Adapter {
				continue
			}
			if miss := q.unmet(a.WGPU); len(miss) > 0 {
				r.fail(ReasonRequirements, "adapter %s does not meet selftest.requiredLimits/requiredFeatures as wgpu reports it (a workload's requestDevice with them would fail): %s", a.Label(), strings.Join(miss, "; "))
			}
		}
	}
}

// dispatchProblem says what went wrong with an adapter's dispatch, or ""
// when it verified.
func dispatchProblem(a *Adapter) string {
	d := a.Dispatch
	switch {
	case d == nil:
		return fmt.Sprintf("no compute dispatch ran on adapter %s (no compute queue)", a.Label())
	case d.Verified:
		return ""
	case d.Result == "VK_TIMEOUT":
		return fmt.Sprintf("compute dispatch on adapter %s: the fence did not signal in time (%s)", a.Label(), d.Step)
	case strings.HasPrefix(d.Step, "vkGetDeviceProcAddr("):
		return fmt.Sprintf("adapter %s is listed by wgpu, but wgpu's device creation on it fails: %s, a Vulkan 1.2 device function wgpu-hal loads for its timeline-semaphore fences; the Vulkan loader withholds device functions above the api_version its ICD manifest declares, and the device says Vulkan %s (raise the manifest's api_version to the driver's)", a.Label(), d.Step, a.APIVersion)
	case d.Step != "":
		return fmt.Sprintf("compute dispatch on adapter %s failed at %s: %s", a.Label(), d.Step, d.Result)
	}
	return fmt.Sprintf("compute dispatch on adapter %s gave wrong data: %d of %d elements wrong, first %s", a.Label(), d.Wrong, d.Elements, d.FirstWrong)
}

func (r *Report) evalEGL(gpus []gpu.GPU, res ProbeResult[EGLReport], standIn bool, p Policy) {
	add := func(kind ReasonKind, format string, args ...any) {
		if p.RequireEGL {
			r.fail(kind, format, args...)
			return
		}
		r.warn("EGL (not required): "+format, args...)
	}
	if res.Failure != nil {
		add(res.Failure.Kind, "%s", res.Failure.Message)
		return
	}
	e := &r.EGL
	switch e.Stage {
	case StageLoad:
		add(ReasonEGLNotFound, "EGL library %q could not be opened: %s (install libglvnd, on NixOS via hardware.graphics, or pass --egl-lib with its path)", e.Library, e.Error)
		return
	case StageDevices:
		add(ReasonEGLNoDevices, "EGL device enumeration is unavailable: %s (no EGL vendor library with EGL_EXT_device_enumeration was loaded; %s)", e.Error, p.Hints.egl())
		return
	}
	if len(e.Devices) == 0 {
		add(ReasonEGLNoDevices, "libEGL listed no EGL device; is the NVIDIA vendor manifest (10_nvidia.json) reachable? %s", p.Hints.egl())
		return
	}
	var (
		seen   []string
		nvidia []*EGLDevice
		mesa   *EGLDevice
		// brokenMesa is Mesa's software device when it failed.
		brokenMesa *EGLDevice
		anyUUID    bool
	)
	for i := range e.Devices {
		d := &e.Devices[i]
		label := d.Label()
		if d.Error != "" {
			label += ": " + d.Error
		}
		seen = append(seen, label)
		if d.Error != "" {
			if brokenMesa == nil && d.Software && strings.Contains(d.Vendor, "Mesa") {
				brokenMesa = d
			}
			continue
		}
		if isNVIDIA(d) {
			nvidia = append(nvidia, d)
			anyUUID = anyUUID || d.UUID != ""
		} else if mesa == nil && isMesaSoftware(d) {
			mesa = d
		}
	}
	if len(nvidia) == 0 && !(standIn && mesa != nil) {
		switch {
		case len(gpus) > 0 && r.Simulated && !standIn:
			add(ReasonEGLMissingDevice, "simulated GPUs have no EGL device of their own: pass --allow-cpu-adapter to let Mesa's EGL device stand in; devices: %s", strings.Join(seen, ", "))
		case len(gpus) > 0 && r.Simulated && brokenMesa != nil:
			add(ReasonEGLMissingDevice, "simulated GPUs with --allow-cpu-adapter: the Mesa %s cannot stand in: %s", brokenMesa.Label(), brokenMesa.Error)
		case len(gpus) > 0 && r.Simulated:
			add(ReasonEGLMissingDevice, "simulated GPUs with --allow-cpu-adapter: no Mesa EGL device to stand in (install Debian's libegl-mesa0, or name 50_mesa.json with __EGL_VENDOR_LIBRARY_FILENAMES); devices: %s", strings.Join(seen, ", "))
		case len(gpus) > 0:
			add(ReasonEGLMissingDevice, "no NVIDIA EGL device could make a context current (a Mesa device that initialises does not count); devices: %s; is the NVIDIA vendor manifest (10_nvidia.json) reachable? %s", strings.Join(seen, ", "), p.Hints.egl())
		}
		return
	}
	next := 0
	for i, g := range gpus {
		m := &r.Matches[i]
		var found *EGLDevice
		if anyUUID {
			for _, d := range nvidia {
				if sameUUID(d.UUID, g.UUID) {
					found = d
					break
				}
			}
		} else if next < len(nvidia) {
			found = nvidia[next]
			next++
		}
		switch {
		case found != nil:
			m.EGLDevice, m.EGL = ptr(found.Index), true
		case standIn && mesa != nil:
			m.EGLDevice, m.EGL, m.StandIn = ptr(mesa.Index), true, true
			r.StandIn = true
		case anyUUID:
			add(ReasonEGLMissingDevice, "%s: no NVIDIA EGL device has its UUID; devices: %s", gpuLabel(g), strings.Join(seen, ", "))
		default:
			add(ReasonEGLMissingDevice, "%s: only %d working NVIDIA EGL device(s) for %d GPUs; devices: %s", gpuLabel(g), len(nvidia), len(gpus), strings.Join(seen, ", "))
		}
	}
}

// isNVIDIA reports whether an EGL device is driven by NVIDIA's EGL vendor
// library (FIELD-REPORTS F4).
func isNVIDIA(d *EGLDevice) bool {
	return strings.Contains(strings.ToUpper(d.Vendor), "NVIDIA") || strings.Contains(strings.ToUpper(d.GLVendor), "NVIDIA")
}

// isMesaSoftware reports whether an EGL device is Mesa's software
// rasteriser (EGL_MESA_device_software, llvmpipe or softpipe).
func isMesaSoftware(d *EGLDevice) bool {
	if !strings.Contains(d.Vendor, "Mesa") && !strings.Contains(d.GLVendor, "Mesa") {
		return false
	}
	return d.Software || strings.Contains(d.GLRenderer, "llvmpipe") || strings.Contains(d.GLRenderer, "softpipe")
}

// normPCI normalises a PCI bus id to a 4-digit domain in lower case:
// NVML prints an 8-digit domain ("00000000:07:00.0").
func normPCI(s string) string {
	s = strings.ToLower(s)
	if i := strings.IndexByte(s, ':'); i > 4 {
		s = s[i-4:]
	}
	return s
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func ptr[T any](v T) *T { return &v }
