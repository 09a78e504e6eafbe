package selftest

import (
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nodeprep/nodeprep/nodeprep/testenv/fakedriver"
	"github.com/nodeprep/nodeprep/nodeprep/testenv/testkit"
)

// TestExposeRule: wgpu-hal's expose_adapter, rule by rule, in its order.
func TestExposeRule(t *testing.T) {
	ok := vkCaps{APIVersion: vkAPI13, HasDriver: true, Conformance: [4]uint8{1, 3, 1, 1}, QueueFamilies: 1, Q0Flags: qGraphics | qCompute}
	with := func(f func(c *vkCaps)) vkCaps { c := ok; f(&c); return c }
	tests := []struct {
		name string
		caps vkCaps
		want HiddenRule
	}{
		{"conformant 1.3", ok, ""},
		{"conformance 0", with(func(c *vkCaps) { c.Conformance = [4]uint8{} }), RuleConformance},
		{"conformance 0 on MoltenVK", with(func(c *vkCaps) { c.Conformance = [4]uint8{}; c.DriverID = driverIDMoltenVK }), ""},
		{"conformance unknown without driver properties", with(func(c *vkCaps) { c.HasDriver = false; c.Conformance = [4]uint8{} }), ""},
		{"1.0 without either extension", with(func(c *vkCaps) { c.APIVersion = vkAPI10 }), RuleStorageBufferClass},
		{"1.0 without maintenance1", with(func(c *vkCaps) { c.APIVersion = vkAPI10; c.ExtStorageBufferStorageClass = true }), RuleMaintenance1},
		{"1.0 with both extensions", with(func(c *vkCaps) {
			c.APIVersion = vkAPI10
			c.ExtStorageBufferStorageClass, c.ExtMaintenance1 = true, true
		}), ""},
		// 1.0.5 is not == 1.0.0: the storage-class rule does not apply,
		// the maintenance1 rule (< 1.1) does.
		{"1.0.5 without either extension", with(func(c *vkCaps) { c.APIVersion = vkAPI10 + 5 }), RuleMaintenance1},
		{"1.1 without either extension", with(func(c *vkCaps) { c.APIVersion = vkAPI11 }), ""},
		{"no queue family", with(func(c *vkCaps) { c.QueueFamilies, c.Q0Flags = 0, 0 }), RuleNoQueueFamily},
		{"family 0 compute only", with(func(c *vkCaps) { c.QueueFamilies, c.Q0Flags = 2, qCompute }), RuleQueueFamily0Graphics},
		{"family 0 graphics only", with(func(c *vkCaps) { c.Q0Flags = qGraphics }), ""},
		// The first rule that applies is the one reported.
		{"conformance 0 and compute-only family 0", with(func(c *vkCaps) { c.Conformance = [4]uint8{}; c.Q0Flags = qCompute }), RuleConformance},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := tc.caps
			if got := exposeRule(&c); got != tc.want {
				t.Fatalf("exposeRule = %q, want %q", got, tc.want)
			}
			if tc.want != "" && !strings.Contains(hiddenReason(tc.want, &c), "wgpu-hal/src/vulkan/adapter.rs") {
				t.Errorf("reason %q does not cite wgpu's source", hiddenReason(tc.want, &c))
			}
		})
	}
}

// TestCapSum: wgpu-hal's cap_limits_to_be_under_the_sum_limit, on the
// cases its own unit test states.
func TestCapSum(t *testing.T) {
	for _, tc := range []struct {
		in   []uint32
		sum  uint32
		want []uint32
	}{
		{[]uint32{3, 3, 3}, 3, []uint32{1, 1, 1}},
		{[]uint32{3, 2, 1}, 3, []uint32{1, 1, 1}},
		{[]uint32{1, 2, 3}, 6, []uint32{1, 2, 3}},
		{[]uint32{1, 2, 3}, 3, []uint32{1, 1, 1}},
		{[]uint32{1, 8, 100}, 6, []uint32{1, 2, 3}},
		{[]uint32{2, 80, 80}, 6, []uint32{2, 2, 2}},
		{[]uint32{2, 80, 80}, 12, []uint32{2, 5, 5}},
	} {
		got := slices.Clone(tc.in)
		ptrs := make([]*uint32, len(got))
		for i := range got {
			ptrs[i] = &got[i]
		}
		capSum(tc.sum, ptrs...)
		if !slices.Equal(got, tc.want) {
			t.Errorf("capSum(%v, %d) = %v, want %v", tc.in, tc.sum, got, tc.want)
		}
	}
}

// h100Caps are an NVIDIA H100's Vulkan limits as its driver (550) reports
// them (vulkan.gpuinfo.org), for the derivation below.
func h100Caps() vkCaps {
	return vkCaps{
		APIVersion: vkAPI13, Vendor: VendorNVIDIA, HasDriver: true, Conformance: [4]uint8{1, 3, 7, 2},
		QueueFamilies: 3, Q0Flags: qGraphics | qCompute, Q0TimestampBits: 64,
		HasMaint3: true, MaxPerSetDescriptors: 4294967295, MaxMemoryAllocationSize: 4292870144,
		HasMaint4: true, MaxBufferSize: 1 << 40,
		Limits: vkLimits{
			MaxImageDimension1D: 32768, MaxImageDimension2D: 32768, MaxImageDimension3D: 16384, MaxImageDimensionCube: 32768,
			MaxImageArrayLayers: 2048, MaxUniformBufferRange: 65536, MaxStorageBufferRange: 4294967295, MaxPushConstantsSize: 256,
			MaxBoundDescriptorSets: 32, MaxPerStageDescriptorSamplers: 1048576, MaxPerStageDescriptorUniformBuffers: 1048576,
			MaxPerStageDescriptorStorageBuffers: 1048576, MaxPerStageDescriptorSampledImages: 1048576,
			MaxPerStageDescriptorStorageImages: 1048576, MaxPerStageResources: 4294967295,
			MaxDescriptorSetSamplers: 1048576, MaxDescriptorSetUniformBuffers: 1048576, MaxDescriptorSetUniformBuffersDynamic: 15,
			MaxDescriptorSetStorageBuffers: 1048576, MaxDescriptorSetStorageBuffersDynamic: 16,
			MaxDescriptorSetSampledImages: 1048576, MaxDescriptorSetStorageImages: 1048576,
			MaxVertexInputAttributes: 32, MaxVertexInputBindings: 32, MaxVertexInputBindingStride: 2048,
			MaxVertexOutputComponents: 128, MaxFragmentInputComponents: 128, MaxFragmentOutputAttachments: 8,
			MaxFragmentCombinedOutputResources: 4294967295, MaxComputeSharedMemorySize: 49152,
			MaxComputeWorkGroupCount: [3]uint32{2147483647, 65535, 65535}, MaxComputeWorkGroupInvocations: 1024,
			MaxComputeWorkGroupSize: [3]uint32{1024, 1024, 64}, MinUniformBufferOffsetAlignment: 64,
			MinStorageBufferOffsetAlignment: 16, MaxFramebufferWidth: 32768, MaxFramebufferHeight: 32768, MaxColorAttachments: 8,
		},
	}
}

// TestWGPULimits derives an H100's wgpu limits by wgpu-hal's rules, each
// expected value worked out by hand from to_wgpu_limits and
// adjust_raw_limits.
func TestWGPULimits(t *testing.T) {
	c := h100Caps()
	l := wgpuLimits(&c)
	// maxPerSetDescriptors 2^32-1: the per-stage sum cap is (2^32-1)/2
	// shared by 6 limits, then maxBindingsPerBindGroup (2^32-1)/2 again;
	// neither binds. So each per-stage limit is min(perStage, perSet/2).
	want := Limits{
		MaxTextureDimension1D: 32768, MaxTextureDimension2D: 32768, MaxTextureDimension3D: 16384, MaxTextureArrayLayers: 2048,
		MaxBindGroups: 8, MaxBindingsPerBindGroup: 4294967295,
		MaxDynamicUniformBuffersPerPipelineLayout: 15, MaxDynamicStorageBuffersPerPipelineLayout: 16,
		MaxSampledTexturesPerShaderStage: 524288, MaxSamplersPerShaderStage: 524288, MaxStorageBuffersPerShaderStage: 524288,
		MaxStorageTexturesPerShaderStage: 524288, MaxUniformBuffersPerShaderStage: 524288,
		MaxUniformBufferBindingSize: 65536, MaxStorageBufferBindingSize: 2147483644, // i32 max, 4-aligned
		MinUniformBufferOffsetAlignment: 64, MinStorageBufferOffsetAlignment: 32,
		MaxVertexBuffers: 16, MaxBufferSize: 4292870144, MaxVertexAttributes: 32, MaxVertexBufferArrayStride: 2048,
		MaxInterStageShaderVariables: 31, MaxColorAttachments: 8, MaxColorAttachmentBytesPerSample: 128,
		MaxComputeWorkgroupStorageSize: 49152, MaxComputeInvocationsPerWorkgroup: 1024,
		MaxComputeWorkgroupSizeX: 1024, MaxComputeWorkgroupSizeY: 1024, MaxComputeWorkgroupSizeZ: 64,
		MaxComputeWorkgroupsPerDimension: 65535, MaxImmediateSize: 256,
	}
	if l != want {
		t.Errorf("limits\n got %+v\nwant %+v", l, want)
	}
	// A non-NVIDIA driver on Linux: maxBufferSize is capped at i32::MAX,
	// and maxFragmentCombinedOutputResources binds.
	c.Vendor = VendorMesa
	c.Limits.MaxFragmentCombinedOutputResources = 12
	l = wgpuLimits(&c)
	if l.MaxBufferSize != 2147483647 {
		t.Errorf("non-NVIDIA maxBufferSize %d, want 2147483647", l.MaxBufferSize)
	}
	if got := l.MaxStorageTexturesPerShaderStage + l.MaxStorageBuffersPerShaderStage + l.MaxColorAttachments; got > 12 {
		t.Errorf("storage textures + storage buffers + color attachments = %d, want at most 12", got)
	}
}

func TestLimitsUnmet(t *testing.T) {
	c := h100Caps()
	l := wgpuLimits(&c)
	got := l.Unmet(map[string]uint64{
		"maxBufferSize":                   1 << 33, // above the adapter's
		"maxComputeWorkgroupStorageSize":  32768,   // met
		"minStorageBufferOffsetAlignment": 16,      // below the adapter's 32
		"minUniformBufferOffsetAlignment": 256,     // met: a larger power of two
		"maxBindGroups":                   8,       // met exactly
		"maxWhatever":                     1,       // unknown
	})
	want := []string{
		"minStorageBufferOffsetAlignment: required 16, adapter 32 (an alignment must be a power of two and at least the adapter's)",
		"maxBufferSize: required 8589934592, adapter 4292870144",
		"maxWhatever: not a limit wgpu reports",
	}
	if !slices.Equal(got, want) {
		t.Errorf("Unmet =\n%q\nwant\n%q", got, want)
	}
}

// TestWGPUFeatures: the WebGPU features and downlevel flags of to_wgpu.
func TestWGPUFeatures(t *testing.T) {
	c := h100Caps()
	c.Features = vkFeatures{DepthClamp: true, TextureCompressionBC: true, DrawIndirectFirstInstance: true, ImageCubeArray: true}
	c.ShaderF16 = true
	c.FormatFlags[fmtD32S8] = ffSampledImage | ffDepthStencil
	c.FormatFlags[fmtD32] = ffSampledImage | ffDepthStencil
	c.FormatFlags[fmtD24S8] = ffSampledImage | ffDepthStencil
	got := wgpuFeatures(&c)
	want := []string{"depth-clip-control", "depth32float-stencil8", "indirect-first-instance", "shader-f16",
		"texture-compression-bc", "texture-compression-bc-sliced-3d", "timestamp-query"}
	if !slices.Equal(got, want) {
		t.Errorf("features %q, want %q", got, want)
	}
	dl := wgpuDownlevelFlags(&c, got)
	for _, f := range []string{"CUBE_ARRAY_TEXTURES", "WEBGPU_TEXTURE_FORMAT_SUPPORT", "SHADER_F16_IN_F32", "COMPUTE_SHADERS"} {
		if !slices.Contains(dl, f) {
			t.Errorf("downlevel flags %q lack %s", dl, f)
		}
	}
	if slices.Contains(dl, "INDEPENDENT_BLEND") {
		t.Errorf("downlevel flags %q: INDEPENDENT_BLEND without the feature", dl)
	}
	// llvmpipe: SHADER_F16_IN_F32 only with shader-f16.
	c.DriverName, c.ShaderF16 = "llvmpipe", false
	if dl := wgpuDownlevelFlags(&c, wgpuFeatures(&c)); slices.Contains(dl, "SHADER_F16_IN_F32") {
		t.Errorf("llvmpipe without shader-f16 has SHADER_F16_IN_F32")
	}
	// timestamp-query needs 36 valid bits on queue family 0.
	c.Q0TimestampBits = 32
	if slices.Contains(wgpuFeatures(&c), "timestamp-query") {
		t.Errorf("timestamp-query with 32 valid bits")
	}
}

// wrappedLavapipe returns the environment that makes the fake ICD act as
// lavapipe with the wgpu-rule faults named (fakedriver.WrapICD, the fault
// library the differential test against wgpu uses too), and the fake's
// library path.
func wrappedLavapipe(t *testing.T, faults ...string) (env []string, lib string) {
	t.Helper()
	fakeICD, _ := testkit.FakeDrivers(t)
	data, err := os.ReadFile(lavapipeICD)
	if err != nil {
		t.Fatal(err)
	}
	real, err := parseICDManifest(data)
	if err != nil {
		t.Fatal(err)
	}
	return driverEnv(append([]string{"VK_DRIVER_FILES=" + fakeICD.Manifest, "__EGL_VENDOR_LIBRARY_FILENAMES=" + mesaEGL},
		fakedriver.WrapICD(real, faults...)...)...), fakeICD.Lib
}

// TestWGPURulesOnLavapipe runs the real probe on lavapipe, changed by the
// fake ICD the way a driver would break each of wgpu's rules, with
// lavapipe standing in for simulated GPUs: an adapter wgpu hides cannot
// stand in, and the reason names the rule. The old probe accepted every
// one of these (it read only the conformance version, through core 1.1
// entry points, and used any queue family that computes).
func TestWGPURulesOnLavapipe(t *testing.T) {
	requireMesa(t)
	t.Parallel()
	tests := []struct {
		faults    []string
		rule      HiddenRule
		pass      bool
		fragments []string
	}{
		{nil, "", true, nil},
		{[]string{"queue-family-0-compute"}, RuleQueueFamily0Graphics, false, []string{"queue family 0 has no graphics", "COMPUTE|TRANSFER", "expose_adapter"}},
		{[]string{"api-1.0", "hide:VK_KHR_storage_buffer_storage_class", "hide:VK_KHR_maintenance1"}, RuleStorageBufferClass, false, []string{"Vulkan 1.0", "VK_KHR_storage_buffer_storage_class"}},
		{[]string{"api-1.0", "hide:VK_KHR_maintenance1"}, RuleMaintenance1, false, []string{"VK_KHR_maintenance1"}},
		{[]string{"api-1.0"}, "", true, nil},
		{[]string{"conformance-0"}, RuleConformance, false, []string{"conformance version 0.0.0.0"}},
	}
	for _, tc := range tests {
		t.Run("fault="+strings.Join(tc.faults, ","), func(t *testing.T) {
			t.Parallel()
			env, _ := wrappedLavapipe(t, tc.faults...)
			r := runProbe(t, simulatedInventory(), WithEnv(env), WithAllowCPUAdapter(true))
			if len(r.Vulkan.Adapters) != 1 {
				t.Fatalf("stage %q error %q, %d adapters; want the wrapped lavapipe", r.Vulkan.Stage, r.Vulkan.Error, len(r.Vulkan.Adapters))
			}
			a := r.Vulkan.Adapters[0]
			if a.HiddenRule != tc.rule || a.Hidden != (tc.rule != "") {
				t.Fatalf("adapter hidden %v by %q, want %q", a.Hidden, a.HiddenRule, tc.rule)
			}
			if r.Passed != tc.pass {
				t.Fatalf("passed %v, want %v; reasons %+v", r.Passed, tc.pass, r.Reasons)
			}
			if tc.pass {
				if a.WGPU == nil || a.WGPU.Limits.MaxComputeInvocationsPerWorkgroup == 0 || len(a.WGPU.Features) == 0 {
					t.Errorf("exposed adapter without wgpu's limits and features: %+v", a.WGPU)
				}
				return
			}
			if a.Dispatch != nil || a.WGPU != nil {
				t.Errorf("hidden adapter has a dispatch %+v or wgpu view %+v", a.Dispatch, a.WGPU)
			}
			wantReason(t, r, ReasonMissingAdapter, append(tc.fragments, "cannot stand in")...)
		})
	}
}

// TestWGPUInstanceCrash: a driver that dies on the instance wgpu creates
// (Vulkan 1.3, wgpu's instance extensions) kills the probe too, and the
// reason names the driver's library. The old probe's 1.1 instance with no
// extension passed.
func TestWGPUInstanceCrash(t *testing.T) {
	requireMesa(t)
	t.Parallel()
	env, lib := wrappedLavapipe(t, "crash-on-wgpu-instance")
	r := runProbe(t, simulatedInventory(), WithEnv(env), WithAllowCPUAdapter(true), WithTimeout(time.Minute))
	wantReason(t, r, ReasonCrashed, "SIGSEGV in "+lib)
}

// TestWGPUDeviceFunctionsWithheld: lavapipe behind a manifest that says
// api_version 1.0: wgpu lists the adapter (its rules read the device's
// 1.3), and its device creation fails, since the loader gives no Vulkan
// 1.2 device function. The old probe hid it as non-conformant (its core
// 1.1 query read a zeroed conformance version): the right verdict for the
// wrong reason.
func TestWGPUDeviceFunctionsWithheld(t *testing.T) {
	requireMesa(t)
	t.Parallel()
	data, err := os.ReadFile(lavapipeICD)
	if err != nil {
		t.Fatal(err)
	}
	lib, err := parseICDManifest(data)
	if err != nil {
		t.Fatal(err)
	}
	manifest := t.TempDir() + "/lvp_1_0.json"
	if err := os.WriteFile(manifest, []byte(`{"file_format_version":"1.0.0","ICD":{"library_path":"`+lib+`","api_version":"1.0.0"}}`), 0o644); err != nil {
		t.Fatal(err)
	}
	r := runProbe(t, simulatedInventory(), WithEnv(driverEnv("VK_DRIVER_FILES="+manifest, "__EGL_VENDOR_LIBRARY_FILENAMES="+mesaEGL)), WithAllowCPUAdapter(true))
	if len(r.Vulkan.Adapters) != 1 || r.Vulkan.Adapters[0].Hidden {
		t.Fatalf("adapters %+v: want lavapipe listed, as wgpu lists it", r.Vulkan.Adapters)
	}
	wantReason(t, r, ReasonDispatchFailed, "listed by wgpu", "vkWaitSemaphores", "api_version")
	if strings.Contains(r.Reasons[0].Message, "conformance") {
		t.Errorf("reason %q blames conformance", r.Reasons[0].Message)
	}
}

// TestEGLContextAsWGPU: the EGL probe makes the context wgpu's GL backend
// makes (wgpu-hal/src/gles/egl.rs): desktop OpenGL 3.3 where EGL offers
// OpenGL, else OpenGL ES 3.0 or newer, and reports its version. Mesa with
// OpenGL ES limited to 2.0 still offers desktop OpenGL, which wgpu takes:
// it passes (the probe of OpenGL ES alone failed it, where wgpu ran). A
// driver offering OpenGL ES 2.0 alone (Mesa through the fake EGL vendor,
// fakedriver.WrapEGL) fails when EGL is required and is a warning when
// not (the first probe made a desktop GL context of any version and
// passed it).
func TestEGLContextAsWGPU(t *testing.T) {
	requireMesa(t)
	t.Parallel()
	_, fakeEGL := testkit.FakeDrivers(t)
	data, err := os.ReadFile(mesaEGL)
	if err != nil {
		t.Fatal(err)
	}
	mesaLib, err := parseICDManifest(data)
	if err != nil {
		t.Fatal(err)
	}
	gles2 := append([]string{"__EGL_VENDOR_LIBRARY_FILENAMES=" + fakeEGL.Manifest}, fakedriver.WrapEGL(mesaLib, "gles-2-only")...)
	for _, tc := range []struct {
		name    string
		env     []string
		require bool
		pass    bool
		api     string
	}{
		{"Mesa", nil, true, true, "OpenGL"},
		{"Mesa, GLES override 2.0", []string{"MESA_GLES_VERSION_OVERRIDE=2.0"}, true, true, "OpenGL"},
		{"Mesa, fake EGL vendor without faults", []string{"__EGL_VENDOR_LIBRARY_FILENAMES=" + fakeEGL.Manifest, "FAKE_EGL_WRAP=" + mesaLib}, true, true, "OpenGL"},
		{"GLES 2 only, required", gles2, true, false, "OpenGL ES"},
		{"GLES 2 only, not required", gles2, false, true, "OpenGL ES"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			env := driverEnv(append([]string{"VK_DRIVER_FILES=" + lavapipeICD, "__EGL_VENDOR_LIBRARY_FILENAMES=" + mesaEGL}, tc.env...)...)
			r := runProbe(t, simulatedInventory(), WithEnv(env), WithAllowCPUAdapter(true), WithRequireEGL(tc.require))
			if r.Passed != tc.pass {
				t.Fatalf("passed %v, want %v: %+v", r.Passed, tc.pass, r.Reasons)
			}
			if len(r.EGL.Devices) == 0 {
				t.Fatalf("no EGL device: %+v", r.EGL)
			}
			d := r.EGL.Devices[0]
			if d.API != tc.api {
				t.Errorf("context API %q, want %q", d.API, tc.api)
			}
			if tc.api == "OpenGL" {
				var major, minor int
				if _, err := fmt.Sscanf(d.GLVersion, "%d.%d", &major, &minor); err != nil || major*10+minor < 33 || d.Error != "" || d.GLESVersion != "" {
					t.Errorf("GL version %q (GLES %q) error %q, want desktop OpenGL 3.3 or newer", d.GLVersion, d.GLESVersion, d.Error)
				}
				return
			}
			if tc.require {
				wantReason(t, r, ReasonEGLMissingDevice, "OpenGL ES 3.0", "wgpu-hal/src/gles")
				return
			}
			if !slices.ContainsFunc(r.Warnings, func(s string) bool { return strings.Contains(s, "OpenGL ES 3.0") }) {
				t.Errorf("warnings %q, want one naming OpenGL ES 3.0", r.Warnings)
			}
		})
	}
}

// TestRequirementsOnLavapipe: selftest.requiredLimits/requiredFeatures
// judge the adapter that satisfies each GPU by wgpu's numbers: lavapipe
// (a non-NVIDIA driver on Linux, so wgpu caps maxBufferSize at i32::MAX)
// cannot give 4 GiB buffers, and the reason names the limit; what it
// offers passes.
func TestRequirementsOnLavapipe(t *testing.T) {
	requireMesa(t)
	t.Parallel()
	for _, tc := range []struct {
		name      string
		q         Requirements
		pass      bool
		fragments []string
	}{
		{"met", Requirements{Limits: map[string]uint64{"maxBufferSize": 1 << 30, "maxComputeInvocationsPerWorkgroup": 256}, Features: []string{"depth32float-stencil8"}}, true, nil},
		{"maxBufferSize", Requirements{Limits: map[string]uint64{"maxBufferSize": 1 << 32}}, false, []string{"maxBufferSize: required 4294967296, adapter 2147483647", "llvmpipe"}},
		{"feature", Requirements{Features: []string{"texture-compression-astc"}}, false, []string{"feature texture-compression-astc: not supported"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			r := runProbe(t, simulatedInventory(), WithAllowCPUAdapter(true), WithRequirements(tc.q))
			if r.Passed != tc.pass {
				t.Fatalf("passed %v, want %v: %+v", r.Passed, tc.pass, r.Reasons)
			}
			if !tc.pass {
				wantReason(t, r, ReasonRequirements, tc.fragments...)
			}
		})
	}
}

func TestRequirementsCheck(t *testing.T) {
	if err := (Requirements{Limits: map[string]uint64{"maxBufferSize": 1, "minUniformBufferOffsetAlignment": 256}, Features: []string{"subgroups"}}).Check(); err != nil {
		t.Errorf("valid requirements refused: %v", err)
	}
	err := (Requirements{Limits: map[string]uint64{"maxBuffer": 1, "minStorageBufferOffsetAlignment": 0}, Features: []string{"bogus"}}).Check()
	for _, want := range []string{"requiredLimits.maxBuffer: not a limit", "minStorageBufferOffsetAlignment: 0 is not a power of two", `"bogus" is not a feature`} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Check() = %v, want it to say %q", err, want)
		}
	}
}

// BenchmarkWGPUView: what deriving wgpu's view of one adapter (rules,
// limits, features, downlevel flags) adds to the probe, per adapter.
func BenchmarkWGPUView(b *testing.B) {
	c := h100Caps()
	for b.Loop() {
		if exposeRule(&c) != "" {
			b.Fatal("hidden")
		}
		if w := wgpuView(&c); w.Limits.MaxBindGroups != 8 {
			b.Fatal(w.Limits)
		}
	}
}
