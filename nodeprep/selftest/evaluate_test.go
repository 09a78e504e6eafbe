package selftest

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/nodeprep/nodeprep/nodeprep/gpu"
)

const (
	uuidA = "GPU-aaaaaaaa-1111-2222-3333-444444444444"
	uuidB = "GPU-bbbbbbbb-1111-2222-3333-444444444444"
	uuidC = "GPU-cccccccc-1111-2222-3333-444444444444"
)

func gpus(uuids ...string) []gpu.GPU {
	var out []gpu.GPU
	for i, u := range uuids {
		out = append(out, gpu.GPU{Index: i, UUID: u, Name: "NVIDIA H200", PCIBusID: fmt.Sprintf("0000:%02x:00.0", i+7)})
	}
	return out
}

var verified = &Dispatch{Verified: true, Elements: DispatchElements}

func nv(index int, uuid string) Adapter {
	return Adapter{Index: index, Name: "NVIDIA H200", Vendor: VendorNVIDIA, Device: 0x2335, DeviceType: DeviceDiscrete, Backend: BackendVulkan, DeviceUUID: uuid, Dispatch: verified}
}

func lavapipe(index int) Adapter {
	return Adapter{Index: index, Name: "llvmpipe (LLVM 15.0.6, 256 bits)", Vendor: VendorMesa, DeviceType: DeviceCPU, Backend: BackendVulkan, DeviceUUID: "GPU-6d657361-3232-2e33-2e36-000000000000", Dispatch: verified}
}

func nvEGL(index int, uuid string) EGLDevice {
	return EGLDevice{Index: index, UUID: uuid, Vendor: "NVIDIA", GLVendor: "NVIDIA Corporation", GLRenderer: "NVIDIA H200/PCIe/SSE2"}
}

var mesaDevice = EGLDevice{Index: 0, Software: true, Vendor: "Mesa Project", GLVendor: "Mesa/X.org", GLRenderer: "llvmpipe (LLVM 15.0.6, 256 bits)"}

func vkOK(as ...Adapter) ProbeResult[VulkanReport] {
	return ProbeResult[VulkanReport]{Report: &VulkanReport{Loader: DefaultVulkanLoader, Adapters: as}}
}

func eglOK(ds ...EGLDevice) ProbeResult[EGLReport] {
	return ProbeResult[EGLReport]{Report: &EGLReport{Library: DefaultEGLLibrary, Devices: ds}}
}

func TestEvaluateVulkan(t *testing.T) {
	t.Parallel()
	wrong := nv(0, uuidA)
	wrong.Dispatch = &Dispatch{Elements: DispatchElements, Wrong: 4096, FirstWrong: "element 0: got 0xdeadbeef, want 0x00000001"}
	timedOut := nv(0, uuidA)
	timedOut.Dispatch = &Dispatch{Elements: DispatchElements, Step: "vkWaitForFences", Result: "VK_TIMEOUT"}
	virtual := nv(0, uuidA)
	virtual.DeviceType = DeviceVirtual
	hidden := nv(0, uuidA)
	hidden.Hidden, hidden.HiddenReason = true, "conformance version 0"
	tests := []struct {
		name      string
		gpus      []gpu.GPU
		adapters  []Adapter
		kinds     []ReasonKind
		fragments []string
		matched   []bool
		warnings  int
	}{
		{name: "one GPU one adapter", gpus: gpus(uuidA), adapters: []Adapter{nv(0, uuidA)}, matched: []bool{true}},
		{name: "swapped enumeration order", gpus: gpus(uuidA, uuidB), adapters: []Adapter{nv(0, uuidB), nv(1, uuidA)}, matched: []bool{true, true}},
		{name: "UUID case and form differ", gpus: gpus(uuidA), adapters: []Adapter{nv(0, strings.ToUpper(strings.TrimPrefix(uuidA, "GPU-")))}, matched: []bool{true}},
		{
			name: "two GPUs one adapter", gpus: gpus(uuidA, uuidB), adapters: []Adapter{nv(0, uuidA)},
			kinds: []ReasonKind{ReasonMissingAdapter}, fragments: []string{"GPU 1", uuidB, `"NVIDIA H200" (#0`}, matched: []bool{true, false},
		},
		{
			name: "UUID mismatch", gpus: gpus(uuidA), adapters: []Adapter{nv(0, uuidC)},
			kinds: []ReasonKind{ReasonUUIDMismatch}, fragments: []string{uuidA, uuidC, `"NVIDIA H200" (#0`}, matched: []bool{false}, warnings: 1,
		},
		{
			name: "adapters with unknown UUIDs", gpus: gpus(uuidA, uuidB), adapters: []Adapter{nv(0, uuidC), nv(1, uuidC)},
			kinds: []ReasonKind{ReasonUUIDMismatch, ReasonUUIDMismatch}, matched: []bool{false, false}, warnings: 2,
		},
		{
			name: "duplicate adapters", gpus: gpus(uuidA), adapters: []Adapter{nv(0, uuidA), nv(1, uuidA)},
			kinds: []ReasonKind{ReasonDuplicateAdapter}, fragments: []string{"2 Vulkan adapters", "#0", "#1"}, matched: []bool{false},
		},
		{
			name: "CPU adapter alone", gpus: gpus(uuidA), adapters: []Adapter{lavapipe(0)},
			kinds: []ReasonKind{ReasonMissingAdapter}, fragments: []string{"no NVIDIA Vulkan adapter", "llvmpipe", "Cpu", "0x10005"}, matched: []bool{false},
		},
		{
			name: "CPU adapter carrying the GPU's UUID", gpus: gpus(uuidA), adapters: []Adapter{nv(0, uuidB), func() Adapter { a := lavapipe(1); a.DeviceUUID = uuidA; return a }()},
			kinds: []ReasonKind{ReasonMissingAdapter}, fragments: []string{"cannot satisfy", "Cpu"}, matched: []bool{false}, warnings: 1,
		},
		{
			name: "virtual adapter", gpus: gpus(uuidA), adapters: []Adapter{virtual},
			kinds: []ReasonKind{ReasonMissingAdapter}, matched: []bool{false},
		},
		{
			name: "hidden adapter", gpus: gpus(uuidA), adapters: []Adapter{hidden},
			kinds: []ReasonKind{ReasonMissingAdapter}, matched: []bool{false}, warnings: 1,
		},
		{
			name: "wrong data", gpus: gpus(uuidA), adapters: []Adapter{wrong},
			kinds: []ReasonKind{ReasonDispatchFailed}, fragments: []string{"wrong data", "4096 of 4096", "0xdeadbeef"}, matched: []bool{false},
		},
		{
			name: "fence timeout", gpus: gpus(uuidA), adapters: []Adapter{timedOut},
			kinds: []ReasonKind{ReasonDispatchFailed}, fragments: []string{"fence did not signal"}, matched: []bool{false},
		},
		{
			name: "extra NVIDIA adapter is a warning", gpus: gpus(uuidA), adapters: []Adapter{nv(0, uuidA), nv(1, uuidC), lavapipe(2)},
			matched: []bool{true}, warnings: 1,
		},
		{name: "no GPUs", kinds: []ReasonKind{ReasonNoGPUs}},
		{
			name: "no adapters", gpus: gpus(uuidA), adapters: []Adapter{},
			kinds: []ReasonKind{ReasonNoAdapters}, matched: []bool{false},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var egl []EGLDevice
			for i, g := range tc.gpus {
				egl = append(egl, nvEGL(i, g.UUID))
			}
			r := Evaluate(&gpu.Inventory{GPUs: tc.gpus}, vkOK(tc.adapters...), eglOK(egl...), Policy{RequireEGL: true})
			if got := reasonKinds(r); !slices.Equal(got, tc.kinds) {
				t.Fatalf("reasons %v, want %v: %+v", got, tc.kinds, r.Reasons)
			}
			if r.Passed != (len(tc.kinds) == 0) {
				t.Errorf("Passed = %v with reasons %v", r.Passed, tc.kinds)
			}
			for _, f := range tc.fragments {
				if !strings.Contains(r.Reasons[0].Message, f) {
					t.Errorf("reason %q does not contain %q", r.Reasons[0].Message, f)
				}
			}
			for i, want := range tc.matched {
				if r.Matches[i].Vulkan != want {
					t.Errorf("GPU %d Vulkan = %v, want %v", i, r.Matches[i].Vulkan, want)
				}
			}
			if len(r.Warnings) != tc.warnings {
				t.Errorf("warnings %q, want %d", r.Warnings, tc.warnings)
			}
			if r.StandIn {
				t.Error("StandIn on a real inventory")
			}
		})
	}
}

func TestEvaluateStandIn(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name      string
		simulated bool
		allow     bool
		adapters  []Adapter
		egl       []EGLDevice
		kinds     []ReasonKind
		standIn   bool
		// says: every reason contains each; never: no reason contains it
		says  []string
		never string
	}{
		{name: "simulated and allowed: lavapipe stands in for all", simulated: true, allow: true, adapters: []Adapter{lavapipe(0)}, egl: []EGLDevice{mesaDevice}, standIn: true},
		{name: "simulated, not allowed: the reasons name the flag", simulated: true, adapters: []Adapter{lavapipe(0)}, egl: []EGLDevice{mesaDevice}, kinds: []ReasonKind{ReasonMissingAdapter, ReasonEGLMissingDevice},
			says: []string{"simulated GPUs", "pass --allow-cpu-adapter"}, never: "manifest"},
		{name: "real inventory: allowance ignored, the flag never offered", allow: true, adapters: []Adapter{lavapipe(0)}, egl: []EGLDevice{mesaDevice}, kinds: []ReasonKind{ReasonMissingAdapter, ReasonEGLMissingDevice},
			says: []string{"is the NVIDIA"}, never: "--allow-cpu-adapter"},
		{name: "no CPU adapter to stand in", simulated: true, allow: true, adapters: []Adapter{}, egl: []EGLDevice{mesaDevice}, kinds: []ReasonKind{ReasonNoAdapters}, standIn: true},
		{
			name: "stand-in dispatch failed: one reason", simulated: true, allow: true,
			adapters: []Adapter{func() Adapter {
				a := lavapipe(0)
				a.Dispatch = &Dispatch{Step: "vkCreateDevice", Result: "VK_ERROR_INITIALIZATION_FAILED"}
				return a
			}()},
			egl: []EGLDevice{mesaDevice}, kinds: []ReasonKind{ReasonDispatchFailed}, standIn: true,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			inv := &gpu.Inventory{Simulated: tc.simulated, GPUs: gpus(uuidA, uuidB, uuidC)}
			r := Evaluate(inv, vkOK(tc.adapters...), eglOK(tc.egl...), Policy{RequireEGL: true, AllowCPUAdapter: tc.allow})
			if got := reasonKinds(r); !slices.Equal(got, tc.kinds) {
				t.Fatalf("reasons %v, want %v: %+v", got, tc.kinds, r.Reasons)
			}
			if r.StandIn != tc.standIn {
				t.Errorf("StandIn = %v, want %v", r.StandIn, tc.standIn)
			}
			for _, reason := range r.Reasons {
				for _, s := range tc.says {
					if !strings.Contains(reason.Message, s) {
						t.Errorf("reason %q does not say %q", reason.Message, s)
					}
				}
				if tc.never != "" && strings.Contains(reason.Message, tc.never) {
					t.Errorf("reason %q says %q", reason.Message, tc.never)
				}
			}
			if tc.kinds == nil {
				for _, m := range r.Matches {
					if !m.StandIn || !m.Vulkan || !m.EGL || *m.Adapter != 0 {
						t.Errorf("match %+v: want the one CPU adapter standing in", m)
					}
				}
			}
		})
	}
}

func TestEvaluateEGL(t *testing.T) {
	t.Parallel()
	broken := nvEGL(0, uuidA)
	broken.Error = "eglMakeCurrent(EGL_NO_SURFACE) failed (EGL error 0x3009)"
	tests := []struct {
		name      string
		gpus      []gpu.GPU
		egl       ProbeResult[EGLReport]
		require   bool
		kinds     []ReasonKind
		fragments []string
		warnings  int
	}{
		{name: "by UUID", gpus: gpus(uuidA, uuidB), egl: eglOK(nvEGL(0, uuidB), nvEGL(1, uuidA)), require: true},
		{name: "by count without persistent ids", gpus: gpus(uuidA, uuidB), egl: eglOK(nvEGL(0, ""), nvEGL(1, "")), require: true},
		{
			name: "too few without persistent ids", gpus: gpus(uuidA, uuidB), egl: eglOK(nvEGL(0, "")), require: true,
			kinds: []ReasonKind{ReasonEGLMissingDevice}, fragments: []string{"GPU 1", "only 1"},
		},
		{
			name: "UUID not among devices", gpus: gpus(uuidA), egl: eglOK(nvEGL(0, uuidC)), require: true,
			kinds: []ReasonKind{ReasonEGLMissingDevice}, fragments: []string{uuidA},
		},
		{
			name: "Mesa initialises but is not NVIDIA (F4)", gpus: gpus(uuidA), egl: eglOK(mesaDevice), require: true,
			kinds: []ReasonKind{ReasonEGLMissingDevice}, fragments: []string{"Mesa Project", "llvmpipe", "10_nvidia.json"},
		},
		{
			name: "NVIDIA device without a context", gpus: gpus(uuidA), egl: eglOK(broken), require: true,
			kinds: []ReasonKind{ReasonEGLMissingDevice}, fragments: []string{"eglMakeCurrent"},
		},
		{
			name: "library missing", gpus: gpus(uuidA), require: true,
			egl:   ProbeResult[EGLReport]{Report: &EGLReport{Library: "/x/libEGL.so.1", Stage: StageLoad, Error: "/x/libEGL.so.1: cannot open shared object file"}},
			kinds: []ReasonKind{ReasonEGLNotFound}, fragments: []string{"/x/libEGL.so.1", "cannot open"},
		},
		{
			name: "not required: a warning", gpus: gpus(uuidA), egl: eglOK(mesaDevice), warnings: 1,
		},
		{
			name: "child crashed", gpus: gpus(uuidA), require: true,
			egl:   ProbeResult[EGLReport]{Failure: &Reason{Kind: ReasonCrashed, Message: "egl probe: crashed: killed by signal SIGSEGV"}},
			kinds: []ReasonKind{ReasonCrashed}, fragments: []string{"SIGSEGV"},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var as []Adapter
			for i, g := range tc.gpus {
				as = append(as, nv(i, g.UUID))
			}
			r := Evaluate(&gpu.Inventory{GPUs: tc.gpus}, vkOK(as...), tc.egl, Policy{RequireEGL: tc.require})
			if got := reasonKinds(r); !slices.Equal(got, tc.kinds) {
				t.Fatalf("reasons %v, want %v: %+v", got, tc.kinds, r.Reasons)
			}
			for _, f := range tc.fragments {
				if !strings.Contains(r.Reasons[0].Message, f) {
					t.Errorf("reason %q does not contain %q", r.Reasons[0].Message, f)
				}
			}
			if len(r.Warnings) != tc.warnings {
				t.Errorf("warnings %q, want %d", r.Warnings, tc.warnings)
			}
		})
	}
}

func TestEvaluateVulkanStages(t *testing.T) {
	t.Parallel()
	hints := Hints{ICDVar: "VK_DRIVER_FILES", ICDPaths: []string{"/etc/x.json"}}
	tests := []struct {
		name      string
		rep       VulkanReport
		kind      ReasonKind
		fragments []string
	}{
		{"loader", VulkanReport{Loader: "/nix/store/x/lib/libvulkan.so.1", Stage: StageLoad, Error: "libvulkan.so.1: cannot open shared object file: No such file or directory"}, ReasonLoaderNotFound, []string{"/nix/store/x/lib/libvulkan.so.1", "cannot open shared object file"}},
		{"incompatible", VulkanReport{Loader: "l", Stage: StageInstance, Result: "VK_ERROR_INCOMPATIBLE_DRIVER", ICDs: []ICDCheck{{Manifest: "/etc/x.json", Library: "libGLX_nvidia.so.0", Error: "libGLX_nvidia.so.0: cannot open"}}}, ReasonIncompatibleDriver, []string{"VK_DRIVER_FILES=/etc/x.json", "libGLX_nvidia.so.0: cannot open"}},
		{"other instance error", VulkanReport{Loader: "l", Stage: StageInstance, Result: "VK_ERROR_OUT_OF_HOST_MEMORY"}, ReasonVulkanFailed, []string{"VK_ERROR_OUT_OF_HOST_MEMORY"}},
		{"enumeration", VulkanReport{Loader: "l", Stage: StageEnumerate, Error: "vkEnumeratePhysicalDevices returned VK_ERROR_INITIALIZATION_FAILED"}, ReasonVulkanFailed, []string{"VK_ERROR_INITIALIZATION_FAILED"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			r := Evaluate(&gpu.Inventory{GPUs: gpus(uuidA, uuidB)}, ProbeResult[VulkanReport]{Report: &tc.rep}, eglOK(nvEGL(0, uuidA), nvEGL(1, uuidB)), Policy{RequireEGL: true, Hints: hints})
			wantReason(t, r, tc.kind, tc.fragments...)
		})
	}
}

func TestICDSearch(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name  string
		env   []string
		var_  string
		paths []string
	}{
		{"VK_DRIVER_FILES wins", []string{"VK_ICD_FILENAMES=/b.json", "VK_DRIVER_FILES=/a.json:/c.json"}, "VK_DRIVER_FILES", []string{"/a.json", "/c.json"}},
		{"VK_ICD_FILENAMES", []string{"VK_ICD_FILENAMES=/b.json"}, "VK_ICD_FILENAMES", []string{"/b.json"}},
		// Set but empty: the loader searches nothing and loads no driver.
		{"VK_DRIVER_FILES empty", []string{"HOME=/root", "VK_DRIVER_FILES="}, "VK_DRIVER_FILES", nil},
		{"VK_ICD_FILENAMES empty", []string{"VK_ICD_FILENAMES="}, "VK_ICD_FILENAMES", nil},
		{"defaults", []string{"HOME=/root"}, "", []string{"/root/.config/vulkan/icd.d", "/etc/xdg/vulkan/icd.d", "/etc/vulkan/icd.d", "/root/.local/share/vulkan/icd.d", "/usr/local/share/vulkan/icd.d", "/usr/share/vulkan/icd.d"}},
		{"NixOS data dirs", []string{"XDG_DATA_DIRS=/run/opengl-driver/share", "XDG_CONFIG_DIRS=/etc/xdg"}, "", []string{"/etc/xdg/vulkan/icd.d", "/etc/vulkan/icd.d", "/run/opengl-driver/share/vulkan/icd.d"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			v, p := ICDSearch(tc.env)
			if v != tc.var_ || !slices.Equal(p, tc.paths) {
				t.Errorf("ICDSearch = %q %q, want %q %q", v, p, tc.var_, tc.paths)
			}
		})
	}
}

func TestRankAndUUID(t *testing.T) {
	t.Parallel()
	as := []Adapter{lavapipe(0), {Index: 1, DeviceType: DeviceVirtual}, {Index: 2, DeviceType: DeviceOther}, {Index: 3, DeviceType: DeviceIntegrated}, nv(4, uuidA), nv(5, uuidB)}
	sortAdapters(as)
	var order []int
	for _, a := range as {
		order = append(order, a.Index)
	}
	if want := []int{4, 5, 3, 2, 1, 0}; !slices.Equal(order, want) {
		t.Errorf("rank order %v, want %v (discrete > integrated > other > virtual > CPU)", order, want)
	}
	for _, tc := range []struct {
		in   string
		want string
		ok   bool
	}{
		{uuidA, uuidA, true},
		{"MIG-" + uuidA[4:], uuidA, true},
		{strings.ReplaceAll(uuidA[4:], "-", ""), uuidA, true},
		{"GPU-aaaaaaaa-1111-2222-3333-44444444444", "", false},
		{"GPU-aaaaaaaa_1111-2222-3333-444444444444", "", false},
		{"GPU-zzzzzzzz-1111-2222-3333-444444444444", "", false},
	} {
		u, err := ParseUUID(tc.in)
		if (err == nil) != tc.ok {
			t.Errorf("ParseUUID(%q) error %v, want ok %v", tc.in, err, tc.ok)
			continue
		}
		if tc.ok && FormatUUID(u) != tc.want {
			t.Errorf("FormatUUID(ParseUUID(%q)) = %q, want %q", tc.in, FormatUUID(u), tc.want)
		}
	}
}

func TestVerifyPattern(t *testing.T) {
	t.Parallel()
	buf := make([]uint32, 64)
	for i := range buf {
		buf[i] = Pattern(uint32(i), 7)
	}
	if n, _ := verifyPattern(buf, 7); n != 0 {
		t.Fatalf("%d wrong in a correct buffer", n)
	}
	buf[5] = dispatchFill
	if n, first := verifyPattern(buf, 7); n != 1 || !strings.HasPrefix(first, "element 5: got 0xdeadbeef") {
		t.Errorf("verifyPattern = %d %q, want 1 at element 5", n, first)
	}
}

// BenchmarkEvaluate matches a DGX's eight GPUs against eight NVIDIA
// adapters and lavapipe, with eight EGL devices.
func BenchmarkEvaluate(b *testing.B) {
	var uuids []string
	for i := range 8 {
		uuids = append(uuids, fmt.Sprintf("GPU-%08x-1111-2222-3333-444444444444", i))
	}
	inv := &gpu.Inventory{GPUs: gpus(uuids...)}
	var as []Adapter
	var ds []EGLDevice
	for i, u := range uuids {
		as = append(as, nv(7-i, u))
		ds = append(ds, nvEGL(i, u))
	}
	as = append(as, lavapipe(8))
	vk, egl := vkOK(as...), eglOK(ds...)
	b.ReportAllocs()
	for b.Loop() {
		if r := Evaluate(inv, vk, egl, Policy{RequireEGL: true}); !r.Passed {
			b.Fatal(r.Reasons)
		}
	}
}
