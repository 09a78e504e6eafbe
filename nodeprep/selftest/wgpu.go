package selftest

// wgpu's view of a Vulkan adapter, derived in Go from what the probe child
// read: whether wgpu-hal exposes it, and the limits, features and
// downlevel flags it reports. The rules are wgpu-hal's (release 29, the
// wgpu-core/wgpu-hal of Deno 2.9.6), each cited at its use by file and
// function: wgpu-hal/src/vulkan/adapter.rs (Instance::expose_adapter,
// PhysicalDeviceFeatures::to_wgpu, PhysicalDeviceProperties::
// to_wgpu_limits) and wgpu-hal/src/auxil/mod.rs (adjust_raw_limits,
// cap_limits_to_be_under_the_sum_limit). nodeprep computes them itself
// because no Go library carries wgpu's rules; a workload's requestAdapter
// and requestDevice are decided by exactly these numbers.

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"sort"
	"strings"
)

// Vulkan constants the rules compare with (Vulkan spec).
const (
	vkAPI10                              = 1 << 22       // VK_API_VERSION_1_0
	vkAPI11                              = 1<<22 | 1<<12 // VK_API_VERSION_1_1
	vkAPI13                              = 1<<22 | 3<<12 // VK_API_VERSION_1_3
	qGraphics                            = 0x1           // VK_QUEUE_GRAPHICS_BIT
	qCompute                             = 0x2           // VK_QUEUE_COMPUTE_BIT
	driverIDMoltenVK                     = 14            // VK_DRIVER_ID_MOLTENVK
	vendorIntel, vendorAMD, vendorImgTec = 0x8086, 0x1002, 0x1010
)

// HiddenRule names the wgpu-hal rule that hides an adapter
// (Adapter.HiddenRule); each is one `return None` of
// wgpu-hal/src/vulkan/adapter.rs, Instance::expose_adapter.
type HiddenRule string

// The rules, in the order expose_adapter applies them.
const (
	// RuleConformance: driver properties report conformance version
	// major 0 and the driver is not MoltenVK.
	RuleConformance HiddenRule = "conformance-version-0"
	// RuleStorageBufferClass: the device's apiVersion is exactly 1.0 and
	// it lacks VK_KHR_storage_buffer_storage_class.
	RuleStorageBufferClass HiddenRule = "vulkan-1.0-without-VK_KHR_storage_buffer_storage_class"
	// RuleMaintenance1: the device's apiVersion is below 1.1 and it lacks
	// VK_KHR_maintenance1.
	RuleMaintenance1 HiddenRule = "below-1.1-without-VK_KHR_maintenance1"
	// RuleNoQueueFamily: the device lists no queue family.
	RuleNoQueueFamily HiddenRule = "no-queue-family"
	// RuleQueueFamily0Graphics: queue family 0 lacks VK_QUEUE_GRAPHICS_BIT.
	RuleQueueFamily0Graphics HiddenRule = "queue-family-0-without-graphics"
)

// vkCaps is what wgpu-hal's expose_adapter reads of one physical device,
// as the probe child read it (converted from the shim's np_vk_adapter).
type vkCaps struct {
	APIVersion  uint32
	Vendor      uint32
	Props2      bool // the instance enabled VK_KHR_get_physical_device_properties2
	HasDriver   bool // VkPhysicalDeviceDriverProperties was queried
	DriverID    uint32
	DriverName  string
	Conformance [4]uint8
	// Device extensions the rules name.
	ExtStorageBufferStorageClass, ExtMaintenance1, ExtSwapchainMutableFormat bool
	QueueFamilies, Q0Flags, Q0TimestampBits                                  uint32
	Limits                                                                   vkLimits
	Features                                                                 vkFeatures
	HasMaint3                                                                bool
	MaxPerSetDescriptors                                                     uint32
	MaxMemoryAllocationSize                                                  uint64
	HasMaint4                                                                bool
	MaxBufferSize                                                            uint64
	HasMultiview                                                             bool
	MaxMultiviewViewCount                                                    uint32
	HasSubgroup                                                              bool
	SubgroupStages, SubgroupOps                                              uint32
	HasSubgroupSizeControl                                                   bool
	MinSubgroupSize, MaxSubgroupSize                                         uint32
	ShaderF16                                                                bool
	// FormatFlags are the optimal-tiling format features of the formats
	// of shim.c's np_formats, in that order (fmt* indices).
	FormatFlags [9]uint32
}

// Indices into vkCaps.FormatFlags (shim.c, np_formats).
const (
	fmtS8 = iota
	fmtD32
	fmtD24S8
	fmtD32S8
	fmtRG11B10
	fmtBGRA8
	fmtR32F
	fmtRG32F
	fmtRGBA32F
)

// vkLimits are the VkPhysicalDeviceLimits members wgpu reads.
type vkLimits struct {
	MaxImageDimension1D, MaxImageDimension2D, MaxImageDimension3D, MaxImageDimensionCube uint32
	MaxImageArrayLayers                                                                  uint32
	MaxUniformBufferRange, MaxStorageBufferRange, MaxPushConstantsSize                   uint32
	MaxBoundDescriptorSets                                                               uint32
	MaxPerStageDescriptorSamplers, MaxPerStageDescriptorUniformBuffers                   uint32
	MaxPerStageDescriptorStorageBuffers, MaxPerStageDescriptorSampledImages              uint32
	MaxPerStageDescriptorStorageImages, MaxPerStageResources                             uint32
	MaxDescriptorSetSamplers, MaxDescriptorSetUniformBuffers                             uint32
	MaxDescriptorSetUniformBuffersDynamic, MaxDescriptorSetStorageBuffers                uint32
	MaxDescriptorSetStorageBuffersDynamic, MaxDescriptorSetSampledImages                 uint32
	MaxDescriptorSetStorageImages                                                        uint32
	MaxVertexInputAttributes, MaxVertexInputBindings, MaxVertexInputBindingStride        uint32
	MaxVertexOutputComponents, MaxFragmentInputComponents                                uint32
	MaxFragmentOutputAttachments, MaxFragmentCombinedOutputResources                     uint32
	MaxComputeSharedMemorySize                                                           uint32
	MaxComputeWorkGroupCount                                                             [3]uint32
	MaxComputeWorkGroupInvocations                                                       uint32
	MaxComputeWorkGroupSize                                                              [3]uint32
	MinUniformBufferOffsetAlignment, MinStorageBufferOffsetAlignment                     uint64
	MaxFramebufferWidth, MaxFramebufferHeight, MaxColorAttachments                       uint32
}

// vkFeatures are the VkPhysicalDeviceFeatures members wgpu reads.
type vkFeatures struct {
	RobustBufferAccess, FullDrawIndexUint32, ImageCubeArray, IndependentBlend  bool
	GeometryShader, SampleRateShading, DualSrcBlend, MultiDrawIndirect         bool
	DrawIndirectFirstInstance, DepthClamp, DepthBiasClamp, FillModeNonSolid    bool
	SamplerAnisotropy, TextureCompressionETC2, TextureCompressionASTC          bool
	TextureCompressionBC, PipelineStatisticsQuery, VertexPipelineStoresAtomics bool
	FragmentStoresAndAtomics, ShaderClipDistance, ShaderFloat64, ShaderInt64   bool
	ShaderInt16                                                                bool
}

// exposeRule applies wgpu-hal's Instance::expose_adapter
// (wgpu-hal/src/vulkan/adapter.rs) and returns the rule that hides the
// adapter, or "" when wgpu exposes it. The checks run in wgpu's order:
//
//  1. conformance: only when driver properties were read (Vulkan 1.2 or
//     VK_KHR_driver_properties, through the properties2 instance
//     extension), a conformanceVersion.major of 0 hides the adapter unless
//     the driver is MoltenVK; nodeprep, like Deno, does not set
//     InstanceFlags::ALLOW_UNDERLYING_NONCOMPLIANT_ADAPTER;
//  2. device apiVersion == 1.0 without VK_KHR_storage_buffer_storage_class;
//  3. device apiVersion < 1.1 without VK_KHR_maintenance1;
//  4. no queue family at all (`queue_families.first()?`);
//  5. queue family 0 without VK_QUEUE_GRAPHICS_BIT.
//
// The apiVersion compared is the physical device's own
// (VkPhysicalDeviceProperties.apiVersion, wgpu's device_api_version),
// with its patch number: 1.0.x for x > 0 is not equal to 1.0.0, so rule 2
// does not apply there but rule 3 does.
func exposeRule(c *vkCaps) HiddenRule {
	if c.HasDriver && c.Conformance[0] == 0 && c.DriverID != driverIDMoltenVK {
		return RuleConformance
	}
	if c.APIVersion == vkAPI10 && !c.ExtStorageBufferStorageClass {
		return RuleStorageBufferClass
	}
	if !c.ExtMaintenance1 && c.APIVersion < vkAPI11 {
		return RuleMaintenance1
	}
	if c.QueueFamilies == 0 {
		return RuleNoQueueFamily
	}
	if c.Q0Flags&qGraphics == 0 {
		return RuleQueueFamily0Graphics
	}
	return ""
}

// hiddenReason says in words why rule hides an adapter, naming wgpu's
// source.
func hiddenReason(rule HiddenRule, c *vkCaps) string {
	const src = "wgpu hides the adapter (wgpu-hal/src/vulkan/adapter.rs, Instance::expose_adapter)"
	switch rule {
	case RuleConformance:
		return fmt.Sprintf("the driver reports conformance version %d.%d.%d.%d (not a conformant Vulkan implementation): %s", c.Conformance[0], c.Conformance[1], c.Conformance[2], c.Conformance[3], src)
	case RuleStorageBufferClass:
		return "the device is Vulkan 1.0 and lacks VK_KHR_storage_buffer_storage_class, which wgpu's SPIR-V needs: " + src
	case RuleMaintenance1:
		return fmt.Sprintf("the device is Vulkan %s (below 1.1) and lacks VK_KHR_maintenance1: %s", vkVersion(c.APIVersion), src)
	case RuleNoQueueFamily:
		return "the device lists no queue family: " + src
	case RuleQueueFamily0Graphics:
		return fmt.Sprintf("queue family 0 has no graphics (flags %s; wgpu opens its one queue on family 0 and requires graphics there, whatever the other families offer): %s", queueFlagNames(c.Q0Flags), src)
	}
	return ""
}

func queueFlagNames(f uint32) string {
	names := []string{"GRAPHICS", "COMPUTE", "TRANSFER", "SPARSE_BINDING", "PROTECTED"}
	var out []string
	for i, n := range names {
		if f&(1<<i) != 0 {
			out = append(out, n)
		}
	}
	if len(out) == 0 {
		return "none"
	}
	s := out[0]
	for _, n := range out[1:] {
		s += "|" + n
	}
	return s
}

// Limits are the WebGPU limits wgpu reports for an adapter
// (GPUSupportedLimits, the names a workload's requestDevice uses), derived
// as wgpu-hal's PhysicalDeviceProperties::to_wgpu_limits and
// auxil::adjust_raw_limits derive them. MaxImmediateSize is wgpu's
// native limit for push constants.
type Limits struct {
	MaxTextureDimension1D                     uint32 `json:"maxTextureDimension1D" yaml:"maxTextureDimension1D"`
	MaxTextureDimension2D                     uint32 `json:"maxTextureDimension2D" yaml:"maxTextureDimension2D"`
	MaxTextureDimension3D                     uint32 `json:"maxTextureDimension3D" yaml:"maxTextureDimension3D"`
	MaxTextureArrayLayers                     uint32 `json:"maxTextureArrayLayers" yaml:"maxTextureArrayLayers"`
	MaxBindGroups                             uint32 `json:"maxBindGroups" yaml:"maxBindGroups"`
	MaxBindingsPerBindGroup                   uint32 `json:"maxBindingsPerBindGroup" yaml:"maxBindingsPerBindGroup"`
	MaxDynamicUniformBuffersPerPipelineLayout uint32 `json:"maxDynamicUniformBuffersPerPipelineLayout" yaml:"maxDynamicUniformBuffersPerPipelineLayout"`
	MaxDynamicStorageBuffersPerPipelineLayout uint32 `json:"maxDynamicStorageBuffersPerPipelineLayout" yaml:"maxDynamicStorageBuffersPerPipelineLayout"`
	MaxSampledTexturesPerShaderStage          uint32 `json:"maxSampledTexturesPerShaderStage" yaml:"maxSampledTexturesPerShaderStage"`
	MaxSamplersPerShaderStage                 uint32 `json:"maxSamplersPerShaderStage" yaml:"maxSamplersPerShaderStage"`
	MaxStorageBuffersPerShaderStage           uint32 `json:"maxStorageBuffersPerShaderStage" yaml:"maxStorageBuffersPerShaderStage"`
	MaxStorageTexturesPerShaderStage          uint32 `json:"maxStorageTexturesPerShaderStage" yaml:"maxStorageTexturesPerShaderStage"`
	MaxUniformBuffersPerShaderStage           uint32 `json:"maxUniformBuffersPerShaderStage" yaml:"maxUniformBuffersPerShaderStage"`
	MaxUniformBufferBindingSize               uint64 `json:"maxUniformBufferBindingSize" yaml:"maxUniformBufferBindingSize"`
	MaxStorageBufferBindingSize               uint64 `json:"maxStorageBufferBindingSize" yaml:"maxStorageBufferBindingSize"`
	MinUniformBufferOffsetAlignment           uint32 `json:"minUniformBufferOffsetAlignment" yaml:"minUniformBufferOffsetAlignment"`
	MinStorageBufferOffsetAlignment           uint32 `json:"minStorageBufferOffsetAlignment" yaml:"minStorageBufferOffsetAlignment"`
	MaxVertexBuffers                          uint32 `json:"maxVertexBuffers" yaml:"maxVertexBuffers"`
	MaxBufferSize                             uint64 `json:"maxBufferSize" yaml:"maxBufferSize"`
	MaxVertexAttributes                       uint32 `json:"maxVertexAttributes" yaml:"maxVertexAttributes"`
	MaxVertexBufferArrayStride                uint32 `json:"maxVertexBufferArrayStride" yaml:"maxVertexBufferArrayStride"`
	MaxInterStageShaderVariables              uint32 `json:"maxInterStageShaderVariables" yaml:"maxInterStageShaderVariables"`
	MaxColorAttachments                       uint32 `json:"maxColorAttachments" yaml:"maxColorAttachments"`
	MaxColorAttachmentBytesPerSample          uint32 `json:"maxColorAttachmentBytesPerSample" yaml:"maxColorAttachmentBytesPerSample"`
	MaxComputeWorkgroupStorageSize            uint32 `json:"maxComputeWorkgroupStorageSize" yaml:"maxComputeWorkgroupStorageSize"`
	MaxComputeInvocationsPerWorkgroup         uint32 `json:"maxComputeInvocationsPerWorkgroup" yaml:"maxComputeInvocationsPerWorkgroup"`
	MaxComputeWorkgroupSizeX                  uint32 `json:"maxComputeWorkgroupSizeX" yaml:"maxComputeWorkgroupSizeX"`
	MaxComputeWorkgroupSizeY                  uint32 `json:"maxComputeWorkgroupSizeY" yaml:"maxComputeWorkgroupSizeY"`
	MaxComputeWorkgroupSizeZ                  uint32 `json:"maxComputeWorkgroupSizeZ" yaml:"maxComputeWorkgroupSizeZ"`
	MaxComputeWorkgroupsPerDimension          uint32 `json:"maxComputeWorkgroupsPerDimension" yaml:"maxComputeWorkgroupsPerDimension"`
	MaxImmediateSize                          uint32 `json:"maxImmediateSize" yaml:"maxImmediateSize"`
}

// LimitNames are the names Limits reports and selftest.requiredLimits
// accepts, in report order.
var LimitNames = func() []string {
	var l Limits
	var names []string
	for _, f := range l.fields() {
		names = append(names, f.name)
	}
	return names
}()

type limitField struct {
	name  string
	value uint64
	// alignment limits are better when lower (WebGPU "alignment" class);
	// every other is a maximum, better when higher.
	alignment bool
}

func (l *Limits) fields() []limitField {
	return []limitField{
		{"maxTextureDimension1D", uint64(l.MaxTextureDimension1D), false},
		{"maxTextureDimension2D", uint64(l.MaxTextureDimension2D), false},
		{"maxTextureDimension3D", uint64(l.MaxTextureDimension3D), false},
		{"maxTextureArrayLayers", uint64(l.MaxTextureArrayLayers), false},
		{"maxBindGroups", uint64(l.MaxBindGroups), false},
		{"maxBindingsPerBindGroup", uint64(l.MaxBindingsPerBindGroup), false},
		{"maxDynamicUniformBuffersPerPipelineLayout", uint64(l.MaxDynamicUniformBuffersPerPipelineLayout), false},
		{"maxDynamicStorageBuffersPerPipelineLayout", uint64(l.MaxDynamicStorageBuffersPerPipelineLayout), false},
		{"maxSampledTexturesPerShaderStage", uint64(l.MaxSampledTexturesPerShaderStage), false},
		{"maxSamplersPerShaderStage", uint64(l.MaxSamplersPerShaderStage), false},
		{"maxStorageBuffersPerShaderStage", uint64(l.MaxStorageBuffersPerShaderStage), false},
		{"maxStorageTexturesPerShaderStage", uint64(l.MaxStorageTexturesPerShaderStage), false},
		{"maxUniformBuffersPerShaderStage", uint64(l.MaxUniformBuffersPerShaderStage), false},
		{"maxUniformBufferBindingSize", l.MaxUniformBufferBindingSize, false},
		{"maxStorageBufferBindingSize", l.MaxStorageBufferBindingSize, false},
		{"minUniformBufferOffsetAlignment", uint64(l.MinUniformBufferOffsetAlignment), true},
		{"minStorageBufferOffsetAlignment", uint64(l.MinStorageBufferOffsetAlignment), true},
		{"maxVertexBuffers", uint64(l.MaxVertexBuffers), false},
		{"maxBufferSize", l.MaxBufferSize, false},
		{"maxVertexAttributes", uint64(l.MaxVertexAttributes), false},
		{"maxVertexBufferArrayStride", uint64(l.MaxVertexBufferArrayStride), false},
		{"maxInterStageShaderVariables", uint64(l.MaxInterStageShaderVariables), false},
		{"maxColorAttachments", uint64(l.MaxColorAttachments), false},
		{"maxColorAttachmentBytesPerSample", uint64(l.MaxColorAttachmentBytesPerSample), false},
		{"maxComputeWorkgroupStorageSize", uint64(l.MaxComputeWorkgroupStorageSize), false},
		{"maxComputeInvocationsPerWorkgroup", uint64(l.MaxComputeInvocationsPerWorkgroup), false},
		{"maxComputeWorkgroupSizeX", uint64(l.MaxComputeWorkgroupSizeX), false},
		{"maxComputeWorkgroupSizeY", uint64(l.MaxComputeWorkgroupSizeY), false},
		{"maxComputeWorkgroupSizeZ", uint64(l.MaxComputeWorkgroupSizeZ), false},
		{"maxComputeWorkgroupsPerDimension", uint64(l.MaxComputeWorkgroupsPerDimension), false},
		{"maxImmediateSize", uint64(l.MaxImmediateSize), false},
	}
}

// IsAlignmentLimit reports whether name is a WebGPU alignment limit
// (min*Alignment): a request is met when it is at least the adapter's
// value and a power of two; every other limit is met when the request is
// at most the adapter's value (WebGPU spec, "Limits").
func IsAlignmentLimit(name string) bool {
	var l Limits
	for _, f := range l.fields() {
		if f.name == name {
			return f.alignment
		}
	}
	return false
}

// Unmet says which of the required limits l does not meet, one line per
// limit ("maxBufferSize: required 4294967296, adapter 2147483647"), in
// report order; names not in LimitNames are reported too (config parsing
// refuses them first).
func (l *Limits) Unmet(required map[string]uint64) []string {
	var out []string
	seen := map[string]bool{}
	for _, f := range l.fields() {
		want, ok := required[f.name]
		seen[f.name] = true
		if !ok {
			continue
		}
		if f.alignment {
			if want < f.value || want&(want-1) != 0 {
				out = append(out, fmt.Sprintf("%s: required %d, adapter %d (an alignment must be a power of two and at least the adapter's)", f.name, want, f.value))
			}
			continue
		}
		if want > f.value {
			out = append(out, fmt.Sprintf("%s: required %d, adapter %d", f.name, want, f.value))
		}
	}
	var unknown []string
	for name := range required {
		if !seen[name] {
			unknown = append(unknown, name)
		}
	}
	sort.Strings(unknown)
	for _, n := range unknown {
		out = append(out, n+": not a limit wgpu reports")
	}
	return out
}

// capSum lowers the limits so that their sum is at most sum, sharing it
// evenly from the smallest up (wgpu-hal/src/auxil/mod.rs,
// cap_limits_to_be_under_the_sum_limit).
func capSum(sum uint32, limits ...*uint32) {
	sort.SliceStable(limits, func(i, j int) bool { return *limits[i] < *limits[j] })
	rem, div := sum, uint32(len(limits))
	for _, l := range limits {
		share := rem / div
		*l = min(*l, share)
		rem -= *l
		div--
	}
}

// wgpu-hal's fixed maxima (wgpu-hal/src/lib.rs: MAX_BIND_GROUPS,
// MAX_VERTEX_BUFFERS, MAX_COLOR_ATTACHMENTS) and wgpu-types'
// TextureFormat::MAX_TARGET_PIXEL_BYTE_COST.
const (
	halMaxBindGroups        = 8
	halMaxVertexBuffers     = 16
	halMaxColorAttachments  = 8
	maxTargetPixelByteCost  = 16
	maxI32BindingSize       = 1<<31 - 1 // auxil::MAX_I32_BINDING_SIZE
	storageBindingAlignment = 4         // wgt::STORAGE_BINDING_SIZE_ALIGNMENT
	vertexAlignment         = 4         // wgt::VERTEX_ALIGNMENT
)

// wgpuLimits derives wgpu's limits from the device's
// (PhysicalDeviceProperties::to_wgpu_limits, then adjust_raw_limits), on
// Linux (the maxBufferSize cap for non-NVIDIA drivers is i32::MAX there).
func wgpuLimits(c *vkCaps) Limits {
	v := &c.Limits
	const stages = 2 // MAX_SHADER_STAGES_PER_PIPELINE
	maxAlloc := uint64(math.MaxUint64)
	if c.HasMaint3 {
		maxAlloc = c.MaxMemoryAllocationSize
	}
	maxBuf := uint64(math.MaxUint64)
	if c.HasMaint4 {
		maxBuf = c.MaxBufferSize
	}
	maxBuf = min(maxBuf, maxAlloc)
	if c.Vendor == VendorNVIDIA {
		maxBuf = min(maxBuf, 1<<52)
	} else {
		maxBuf = min(maxBuf, math.MaxInt32)
	}

	storageTex := min(v.MaxPerStageDescriptorStorageImages, v.MaxDescriptorSetStorageImages/stages)
	storageBuf := min(v.MaxPerStageDescriptorStorageBuffers, v.MaxDescriptorSetStorageBuffers/stages)
	colorAtt := min(v.MaxColorAttachments, v.MaxFragmentOutputAttachments)
	if !slices.Contains([]uint32{vendorIntel, VendorNVIDIA, vendorAMD, vendorImgTec}, c.Vendor) {
		capSum(v.MaxFragmentCombinedOutputResources, &storageTex, &storageBuf, &colorAtt)
	}
	sampledTex := min(v.MaxPerStageDescriptorSampledImages, v.MaxDescriptorSetSampledImages/stages)
	uniformBuf := min(v.MaxPerStageDescriptorUniformBuffers, v.MaxDescriptorSetUniformBuffers/stages)
	capSum(v.MaxPerStageResources, &sampledTex, &uniformBuf, &storageTex, &storageBuf, &colorAtt)

	perSet := uint32(256) // wgpu's default without maintenance3
	if c.HasMaint3 {
		perSet = c.MaxPerSetDescriptors
	}
	samplers := min(v.MaxPerStageDescriptorSamplers, v.MaxDescriptorSetSamplers/stages)
	var accel uint32 // acceleration structures: not read, 0 as without the extension
	capSum(perSet/stages, &sampledTex, &uniformBuf, &storageTex, &storageBuf, &samplers, &accel)
	bindings := max(1000, perSet)

	l := Limits{
		MaxTextureDimension1D:                     v.MaxImageDimension1D,
		MaxTextureDimension2D:                     min(v.MaxImageDimension2D, v.MaxImageDimensionCube, v.MaxFramebufferWidth, v.MaxFramebufferHeight),
		MaxTextureDimension3D:                     v.MaxImageDimension3D,
		MaxTextureArrayLayers:                     v.MaxImageArrayLayers,
		MaxBindGroups:                             v.MaxBoundDescriptorSets,
		MaxBindingsPerBindGroup:                   bindings,
		MaxDynamicUniformBuffersPerPipelineLayout: v.MaxDescriptorSetUniformBuffersDynamic,
		MaxDynamicStorageBuffersPerPipelineLayout: v.MaxDescriptorSetStorageBuffersDynamic,
		MaxSamplersPerShaderStage:                 samplers,
		MaxSampledTexturesPerShaderStage:          sampledTex,
		MaxStorageTexturesPerShaderStage:          storageTex,
		MaxStorageBuffersPerShaderStage:           storageBuf,
		MaxUniformBuffersPerShaderStage:           uniformBuf,
		MaxVertexBuffers:                          v.MaxVertexInputBindings,
		MaxBufferSize:                             maxBuf,
		MaxUniformBufferBindingSize:               uint64(min(v.MaxUniformBufferRange, maxI32BindingSize)),
		MaxStorageBufferBindingSize:               uint64(min(v.MaxStorageBufferRange, maxI32BindingSize)),
		MinUniformBufferOffsetAlignment:           uint32(v.MinUniformBufferOffsetAlignment),
		MinStorageBufferOffsetAlignment:           uint32(v.MinStorageBufferOffsetAlignment),
		MaxVertexAttributes:                       v.MaxVertexInputAttributes,
		MaxVertexBufferArrayStride:                v.MaxVertexInputBindingStride,
		MaxColorAttachments:                       colorAtt,
		MaxColorAttachmentBytesPerSample:          colorAtt * maxTargetPixelByteCost,
		MaxComputeWorkgroupStorageSize:            v.MaxComputeSharedMemorySize,
		MaxComputeInvocationsPerWorkgroup:         v.MaxComputeWorkGroupInvocations,
		MaxComputeWorkgroupSizeX:                  v.MaxComputeWorkGroupSize[0],
		MaxComputeWorkgroupSizeY:                  v.MaxComputeWorkGroupSize[1],
		MaxComputeWorkgroupSizeZ:                  v.MaxComputeWorkGroupSize[2],
		MaxComputeWorkgroupsPerDimension:          min(v.MaxComputeWorkGroupCount[0], v.MaxComputeWorkGroupCount[1], v.MaxComputeWorkGroupCount[2]),
		MaxImmediateSize:                          v.MaxPushConstantsSize,
	}
	if m := min(v.MaxVertexOutputComponents, v.MaxFragmentInputComponents) / 4; m >= 1 {
		l.MaxInterStageShaderVariables = m - 1 // -1 for the position
	}
	adjustRawLimits(&l, accel)
	return l
}

// adjustRawLimits is wgpu-hal/src/auxil/mod.rs, adjust_raw_limits: hal
// maxima, then WebGPU's adapter capability guarantees.
func adjustRawLimits(l *Limits, accel uint32) {
	l.MaxBindGroups = min(l.MaxBindGroups, halMaxBindGroups)
	l.MaxVertexBuffers = min(l.MaxVertexBuffers, halMaxVertexBuffers)
	l.MaxColorAttachments = min(l.MaxColorAttachments, halMaxColorAttachments)
	capSum(l.MaxBindingsPerBindGroup/2, &l.MaxSampledTexturesPerShaderStage, &l.MaxUniformBuffersPerShaderStage,
		&l.MaxStorageTexturesPerShaderStage, &l.MaxStorageBuffersPerShaderStage, &l.MaxSamplersPerShaderStage, &accel)
	l.MaxDynamicUniformBuffersPerPipelineLayout = min(l.MaxDynamicUniformBuffersPerPipelineLayout, l.MaxUniformBuffersPerShaderStage)
	l.MaxDynamicStorageBuffersPerPipelineLayout = min(l.MaxDynamicStorageBuffersPerPipelineLayout, l.MaxStorageBuffersPerShaderStage)
	l.MinUniformBufferOffsetAlignment = max(l.MinUniformBufferOffsetAlignment, 32)
	l.MinStorageBufferOffsetAlignment = max(l.MinStorageBufferOffsetAlignment, 32)
	l.MaxUniformBufferBindingSize = min(l.MaxUniformBufferBindingSize, l.MaxBufferSize)
	l.MaxStorageBufferBindingSize = min(l.MaxStorageBufferBindingSize, l.MaxBufferSize)
	l.MaxStorageBufferBindingSize &^= storageBindingAlignment - 1
	l.MaxVertexBufferArrayStride &^= vertexAlignment - 1
	x, y, z, m := l.MaxComputeWorkgroupSizeX, l.MaxComputeWorkgroupSizeY, l.MaxComputeWorkgroupSizeZ, l.MaxComputeInvocationsPerWorkgroup
	l.MaxComputeWorkgroupSizeX, l.MaxComputeWorkgroupSizeY, l.MaxComputeWorkgroupSizeZ = min(x, m), min(y, m), min(z, m)
	l.MaxComputeInvocationsPerWorkgroup = min(m, satMul(satMul(x, y), z))
}

func satMul(a, b uint32) uint32 {
	p := uint64(a) * uint64(b)
	if p > math.MaxUint32 {
		return math.MaxUint32
	}
	return uint32(p)
}

// Format feature bits (VkFormatFeatureFlagBits).
const (
	ffSampledImage        = 0x1
	ffStorageImage        = 0x2
	ffColorAttachment     = 0x80
	ffColorBlend          = 0x100
	ffDepthStencil        = 0x200
	ffSampledFilterLinear = 0x1000
)

// Subgroup bits (VkSubgroupFeatureFlagBits, VkShaderStageFlagBits).
const (
	sgOpsWanted   = 0x1 | 0x2 | 0x4 | 0x8 | 0x10 | 0x20 | 0x80 // basic, vote, arithmetic, ballot, shuffle, shuffle-relative, quad
	stageVertex   = 0x1
	stageFragment = 0x10
	stageCompute  = 0x20
)

// wgpuFeatures returns the WebGPU features (GPUFeatureName, as a
// workload's requestDevice names them) that wgpu-hal's
// PhysicalDeviceFeatures::to_wgpu grants the adapter, sorted. Native-only
// wgpu features are not listed.
func wgpuFeatures(c *vkCaps) []string {
	f := &c.Features
	fl := c.FormatFlags
	has := func(i int, bits uint32) bool { return fl[i]&bits == bits }
	var out []string
	add := func(ok bool, name string) {
		if ok {
			out = append(out, name)
		}
	}
	add(f.DepthClamp, "depth-clip-control")
	add(has(fmtD32S8, ffSampledImage|ffDepthStencil), "depth32float-stencil8")
	add(f.TextureCompressionBC, "texture-compression-bc")
	add(f.TextureCompressionBC, "texture-compression-bc-sliced-3d")
	add(f.TextureCompressionETC2, "texture-compression-etc2")
	add(f.TextureCompressionASTC, "texture-compression-astc")
	add(c.Q0TimestampBits >= 36, "timestamp-query")
	add(f.DrawIndirectFirstInstance, "indirect-first-instance")
	add(c.ShaderF16, "shader-f16")
	add(has(fmtRG11B10, ffColorAttachment|ffColorBlend), "rg11b10ufloat-renderable")
	add(has(fmtBGRA8, ffStorageImage), "bgra8unorm-storage")
	add(has(fmtR32F, ffSampledFilterLinear) && has(fmtRG32F, ffSampledFilterLinear) && has(fmtRGBA32F, ffSampledFilterLinear), "float32-filterable")
	add(has(fmtR32F, ffColorBlend) && has(fmtRG32F, ffColorBlend) && has(fmtRGBA32F, ffColorBlend), "float32-blendable")
	add(f.ShaderClipDistance, "clip-distances")
	add(f.DualSrcBlend, "dual-source-blending")
	add(c.HasSubgroup && (c.APIVersion >= vkAPI13 || c.HasSubgroupSizeControl) && c.SubgroupOps&sgOpsWanted == sgOpsWanted &&
		c.SubgroupStages&(stageCompute|stageFragment) == stageCompute|stageFragment, "subgroups")
	add(f.GeometryShader, "primitive-index")
	sort.Strings(out)
	return out
}

// wgpuDownlevelFlags returns the wgpu DownlevelFlags names
// PhysicalDeviceFeatures::to_wgpu and expose_adapter set, sorted.
func wgpuDownlevelFlags(c *vkCaps, features []string) []string {
	f := &c.Features
	out := []string{
		"COMPUTE_SHADERS", "BASE_VERTEX", "READ_ONLY_DEPTH_STENCIL", "NON_POWER_OF_TWO_MIPMAPPED_TEXTURES",
		"COMPARISON_SAMPLERS", "VERTEX_STORAGE", "FRAGMENT_STORAGE", "DEPTH_TEXTURE_AND_BUFFER_COPIES",
		"BUFFER_BINDINGS_NOT_16_BYTE_ALIGNED", "UNRESTRICTED_INDEX_BUFFER", "INDIRECT_EXECUTION", "VIEW_FORMATS",
		"UNRESTRICTED_EXTERNAL_TEXTURE_COPIES", "NONBLOCKING_QUERY_RESOLVE",
	}
	add := func(ok bool, name string) {
		if ok {
			out = append(out, name)
		}
	}
	// SHADER_F16_IN_F32 is always set, except on llvmpipe, where
	// expose_adapter sets it only with SHADER_F16.
	add(c.DriverName != "llvmpipe" || slices.Contains(features, "shader-f16"), "SHADER_F16_IN_F32")
	add(c.ExtSwapchainMutableFormat, "SURFACE_VIEW_FORMATS")
	add(f.ImageCubeArray, "CUBE_ARRAY_TEXTURES")
	add(f.SamplerAnisotropy, "ANISOTROPIC_FILTERING")
	add(f.FragmentStoresAndAtomics, "FRAGMENT_WRITABLE_STORAGE")
	add(f.SampleRateShading, "MULTISAMPLED_SHADING")
	add(f.IndependentBlend, "INDEPENDENT_BLEND")
	add(f.FullDrawIndexUint32, "FULL_DRAW_INDEX_UINT32")
	add(f.DepthBiasClamp, "DEPTH_BIAS_CLAMP")
	fl := c.FormatFlags
	ds := func(i int) bool { return fl[i]&(ffSampledImage|ffDepthStencil) == ffSampledImage|ffDepthStencil }
	stencil8 := ds(fmtS8) || ds(fmtD24S8)
	d24s8 := ds(fmtD24S8) || ds(fmtD32S8)
	add(stencil8 && d24s8 && ds(fmtD32), "WEBGPU_TEXTURE_FORMAT_SUPPORT")
	sort.Strings(out)
	return out
}

// WGPU is what wgpu reports for an exposed adapter: its limits, WebGPU
// features, downlevel flags and subgroup sizes (wgt::AdapterInfo's
// subgroup_min_size/subgroup_max_size: the device's
// VkPhysicalDeviceSubgroupSizeControlProperties, else wgpu's defaults 4
// and 128).
type WGPU struct {
	Limits          Limits   `json:"limits" yaml:"limits"`
	Features        []string `json:"features" yaml:"features"`
	DownlevelFlags  []string `json:"downlevelFlags" yaml:"downlevelFlags"`
	SubgroupMinSize uint32   `json:"subgroupMinSize" yaml:"subgroupMinSize"`
	SubgroupMaxSize uint32   `json:"subgroupMaxSize" yaml:"subgroupMaxSize"`
}

// wgpuView derives WGPU for an adapter wgpu exposes.
func wgpuView(c *vkCaps) *WGPU {
	feats := wgpuFeatures(c)
	w := &WGPU{
		Limits:          wgpuLimits(c),
		Features:        feats,
		DownlevelFlags:  wgpuDownlevelFlags(c, feats),
		SubgroupMinSize: 4,   // wgt::MINIMUM_SUBGROUP_MIN_SIZE
		SubgroupMaxSize: 128, // wgt::MAXIMUM_SUBGROUP_MAX_SIZE
	}
	if c.HasSubgroupSizeControl {
		w.SubgroupMinSize, w.SubgroupMaxSize = c.MinSubgroupSize, c.MaxSubgroupSize
	}
	return w
}

// FeatureNames are the WebGPU features (GPUFeatureName) nodeprep derives
// as wgpu does (wgpuFeatures), the names selftest.requiredFeatures
// accepts.
var FeatureNames = []string{
	"bgra8unorm-storage", "clip-distances", "depth-clip-control", "depth32float-stencil8",
	"dual-source-blending", "float32-blendable", "float32-filterable", "indirect-first-instance",
	"primitive-index", "rg11b10ufloat-renderable", "shader-f16", "subgroups",
	"texture-compression-astc", "texture-compression-bc", "texture-compression-bc-sliced-3d",
	"texture-compression-etc2", "timestamp-query",
}

// Requirements are what a workload's requestDevice asks of an adapter:
// WebGPU limits (by LimitNames) and features (by FeatureNames). The zero
// value asks nothing.
type Requirements struct {
	Limits   map[string]uint64
	Features []string
}

// Check returns one error per unknown limit or feature name, and per
// alignment limit that is not a power of two (WebGPU spec, "Limits":
// requestDevice rejects it), joined; nil when every entry can be judged.
func (q Requirements) Check() error {
	var errs []error
	names := slices.Clone(LimitNames)
	keys := make([]string, 0, len(q.Limits))
	for k := range q.Limits {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		v := q.Limits[k]
		switch {
		case !slices.Contains(names, k):
			errs = append(errs, fmt.Errorf("requiredLimits.%s: not a limit wgpu reports (want one of %s)", k, strings.Join(names, ", ")))
		case IsAlignmentLimit(k) && (v == 0 || v&(v-1) != 0):
			errs = append(errs, fmt.Errorf("requiredLimits.%s: %d is not a power of two", k, v))
		}
	}
	for _, f := range q.Features {
		if !slices.Contains(FeatureNames, f) {
			errs = append(errs, fmt.Errorf("requiredFeatures: %q is not a feature nodeprep judges (want one of %s)", f, strings.Join(FeatureNames, ", ")))
		}
	}
	return errors.Join(errs...)
}

// unmet says what of q an exposed adapter's WGPU view lacks, one line per
// limit or feature; nil when it meets all.
func (q Requirements) unmet(w *WGPU) []string {
	if w == nil {
		return nil
	}
	out := w.Limits.Unmet(q.Limits)
	for _, f := range q.Features {
		if !slices.Contains(w.Features, f) {
			out = append(out, "feature "+f+": not supported")
		}
	}
	return out
}
