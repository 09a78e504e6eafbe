// shim.c: see shim.h. The code follows the Vulkan 1.1 specification
// (instance and device creation, vkGetPhysicalDeviceProperties2 chains,
// compute pipelines, fences) and the EGL extension specifications named at
// each use. Libraries are never dlclose'd: drivers are not reliably
// unloadable, and the probe runs in a child process that exits soon after.
#include "shim.h"

#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

static void copy_str(char *dst, size_t n, const char *src)
{
	if (n == 0)
		return;
	if (src == NULL)
		src = "";
	snprintf(dst, n, "%s", src);
}

static void copy_dlerror(char *err, size_t errlen, const char *fallback)
{
	const char *e = dlerror();
	copy_str(err, errlen, e != NULL ? e : fallback);
}

// open_lib dlopens path with its symbols kept local (the Vulkan loader and
// libEGL both); on failure err holds dlerror()'s text.
static void *open_lib(const char *path, char *err, size_t errlen)
{
	dlerror();
	void *lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
	if (lib == NULL)
		copy_dlerror(err, errlen, "dlopen failed");
	return lib;
}

// ---------------------------------------------------------------- Vulkan

static int has_ext_list(const VkExtensionProperties *exts, uint32_t n, const char *name)
{
	for (uint32_t i = 0; exts != NULL && i < n; i++)
		if (strcmp(exts[i].extensionName, name) == 0)
			return 1;
	return 0;
}

struct np_vk {
	void *lib;
	PFN_vkGetInstanceProcAddr gipa;
	VkInstance instance;
	uint32_t api_version; // of the instance we asked for
	int has_props2_ext;   // VK_KHR_get_physical_device_properties2 enabled
};

np_vk *np_vk_open(const char *path, char *err, size_t errlen)
{
	void *lib = open_lib(path, err, errlen);
	if (lib == NULL)
		return NULL;
	PFN_vkGetInstanceProcAddr gipa = (PFN_vkGetInstanceProcAddr)dlsym(lib, "vkGetInstanceProcAddr");
	if (gipa == NULL) {
		copy_dlerror(err, errlen, "vkGetInstanceProcAddr not found");
		return NULL;
	}
	np_vk *vk = calloc(1, sizeof *vk);
	if (vk == NULL) {
		copy_str(err, errlen, "out of memory");
		return NULL;
	}
	vk->lib = lib;
	vk->gipa = gipa;
	return vk;
}

#define VK_FN(vk, name) ((PFN_##name)(vk)->gipa((vk)->instance, #name))

// wgpu_instance_exts are the instance extensions wgpu-hal asks for on
// Linux (wgpu-hal/src/vulkan/instance.rs, desired_extensions; without
// InstanceFlags::DEBUG, so no VK_EXT_debug_utils), each enabled only when
// the loader offers it.
static const char *const wgpu_instance_exts[] = {
	"VK_KHR_surface",
	"VK_KHR_xlib_surface",
	"VK_KHR_xcb_surface",
	"VK_KHR_wayland_surface",
	"VK_EXT_swapchain_colorspace",
	"VK_KHR_get_physical_device_properties2",
};
#define N_WGPU_INSTANCE_EXTS (sizeof wgpu_instance_exts / sizeof wgpu_instance_exts[0])

int32_t np_vk_create_instance(np_vk *vk, uint32_t *loader_version, uint32_t *api_version,
			      char *exts_out, size_t extslen, char *err, size_t errlen)
{
	*loader_version = VK_API_VERSION_1_0;
	copy_str(exts_out, extslen, "");
	PFN_vkEnumerateInstanceVersion eiv = VK_FN(vk, vkEnumerateInstanceVersion);
	if (eiv != NULL && eiv(loader_version) != VK_SUCCESS)
		*loader_version = VK_API_VERSION_1_0;
	PFN_vkCreateInstance create = VK_FN(vk, vkCreateInstance);
	if (create == NULL) {
		copy_str(err, errlen, "vkGetInstanceProcAddr gave no vkCreateInstance");
		return VK_ERROR_INITIALIZATION_FAILED;
	}
	PFN_vkEnumerateInstanceExtensionProperties eiep = VK_FN(vk, vkEnumerateInstanceExtensionProperties);
	const char *enabled[N_WGPU_INSTANCE_EXTS];
	uint32_t nenabled = 0;
	if (eiep != NULL) {
		// One call into a buffer large enough for any loader (each call
		// makes the loader scan and open every ICD again): VK_INCOMPLETE
		// still fills it.
		uint32_t n = 512;
		VkExtensionProperties *avail = calloc(n, sizeof *avail);
		{
			if (avail != NULL && eiep(NULL, &n, avail) >= 0) {
				size_t used = 0;
				for (size_t i = 0; i < N_WGPU_INSTANCE_EXTS; i++) {
					if (!has_ext_list(avail, n, wgpu_instance_exts[i]))
						continue;
					enabled[nenabled++] = wgpu_instance_exts[i];
					int w = snprintf(exts_out + used, extslen - used, "%s%s", used ? " " : "", wgpu_instance_exts[i]);
					if (w > 0 && used + (size_t)w < extslen)
						used += (size_t)w;
				}
			}
		}
		free(avail);
	}
	// wgpu-hal asks for 1.3 (its highest) unless the loader is 1.0.
	uint32_t want = *loader_version < VK_API_VERSION_1_1 ? VK_API_VERSION_1_0 : VK_API_VERSION_1_3;
	VkApplicationInfo app = {
		.sType = VK_STRUCTURE_TYPE_APPLICATION_INFO,
		.pApplicationName = "nodeprep selftest",
		.applicationVersion = 1,
		.pEngineName = "wgpu-hal",
		.engineVersion = 2,
		.apiVersion = want,
	};
	VkInstanceCreateInfo ci = {
		.sType = VK_STRUCTURE_TYPE_INSTANCE_CREATE_INFO,
		.pApplicationInfo = &app,
		.enabledExtensionCount = nenabled,
		.ppEnabledExtensionNames = enabled,
	};
	vk->api_version = want;
	*api_version = want;
	vk->has_props2_ext = 0;
	for (uint32_t i = 0; i < nenabled; i++)
		if (strcmp(enabled[i], "VK_KHR_get_physical_device_properties2") == 0)
			vk->has_props2_ext = 1;
	return create(&ci, NULL, &vk->instance);
}

static int32_t physical_devices(np_vk *vk, VkPhysicalDevice *out, uint32_t *count)
{
	PFN_vkEnumeratePhysicalDevices epd = VK_FN(vk, vkEnumeratePhysicalDevices);
	if (epd == NULL)
		return VK_ERROR_INITIALIZATION_FAILED;
	uint32_t n = NP_MAX_ADAPTERS;
	VkResult r = epd(vk->instance, &n, out);
	*count = n;
	return r == VK_INCOMPLETE ? VK_SUCCESS : r;
}

// np_formats are the formats whose optimal-tiling features wgpu reads for
// its features and downlevel flags (wgpu-hal/src/vulkan/adapter.rs,
// PhysicalDeviceFeatures::to_wgpu); Go reads format_flags in this order.
static const VkFormat np_formats[NP_FORMATS] = {
	VK_FORMAT_S8_UINT,
	VK_FORMAT_D32_SFLOAT,
	VK_FORMAT_D24_UNORM_S8_UINT,
	VK_FORMAT_D32_SFLOAT_S8_UINT,
	VK_FORMAT_B10G11R11_UFLOAT_PACK32,
	VK_FORMAT_B8G8R8A8_UNORM,
	VK_FORMAT_R32_SFLOAT,
	VK_FORMAT_R32G32_SFLOAT,
	VK_FORMAT_R32G32B32A32_SFLOAT,
};

// props2_fns resolves vkGetPhysicalDeviceProperties2/Features2: the KHR
// entry points when the instance enabled the extension (as wgpu-hal does,
// even on 1.1+), else none: wgpu then reads only the 1.0 properties.
static void props2_fns(np_vk *vk, PFN_vkGetPhysicalDeviceProperties2 *p2, PFN_vkGetPhysicalDeviceFeatures2 *f2)
{
	*p2 = NULL;
	*f2 = NULL;
	if (!vk->has_props2_ext)
		return;
	*p2 = (PFN_vkGetPhysicalDeviceProperties2)vk->gipa(vk->instance, "vkGetPhysicalDeviceProperties2KHR");
	*f2 = (PFN_vkGetPhysicalDeviceFeatures2)vk->gipa(vk->instance, "vkGetPhysicalDeviceFeatures2KHR");
}

int32_t np_vk_adapters(np_vk *vk, np_vk_adapter *out, uint32_t max, uint32_t *count)
{
	VkPhysicalDevice pds[NP_MAX_ADAPTERS];
	uint32_t n = 0;
	*count = 0;
	int32_t r = physical_devices(vk, pds, &n);
	if (r != VK_SUCCESS)
		return r;
	if (n > max)
		n = max;
	PFN_vkGetPhysicalDeviceProperties props1 = VK_FN(vk, vkGetPhysicalDeviceProperties);
	PFN_vkGetPhysicalDeviceFeatures feats1 = VK_FN(vk, vkGetPhysicalDeviceFeatures);
	PFN_vkGetPhysicalDeviceProperties2 props2;
	PFN_vkGetPhysicalDeviceFeatures2 feats2;
	props2_fns(vk, &props2, &feats2);
	PFN_vkEnumerateDeviceExtensionProperties edep = VK_FN(vk, vkEnumerateDeviceExtensionProperties);
	PFN_vkGetPhysicalDeviceQueueFamilyProperties qfp = VK_FN(vk, vkGetPhysicalDeviceQueueFamilyProperties);
	PFN_vkGetPhysicalDeviceFormatProperties fmtp = VK_FN(vk, vkGetPhysicalDeviceFormatProperties);
	if (props1 == NULL || feats1 == NULL || edep == NULL || qfp == NULL || fmtp == NULL)
		return VK_ERROR_INITIALIZATION_FAILED;
	for (uint32_t i = 0; i < n; i++) {
		np_vk_adapter *a = &out[i];
		memset(a, 0, sizeof *a);
		VkPhysicalDeviceProperties p;
		props1(pds[i], &p);

		uint32_t next = 0;
		VkExtensionProperties *exts = NULL;
		if (edep(pds[i], NULL, &next, NULL) == VK_SUCCESS && next > 0) {
			exts = calloc(next, sizeof *exts);
			if (exts != NULL && edep(pds[i], NULL, &next, exts) < 0) {
				free(exts);
				exts = NULL;
			}
		}
		uint32_t ne = exts ? next : 0;
#define EXT(name) has_ext_list(exts, ne, name)
		uint32_t v = p.apiVersion; // wgpu's device_api_version
		a->ext_storage_buffer_storage_class = EXT("VK_KHR_storage_buffer_storage_class");
		a->ext_maintenance1 = EXT("VK_KHR_maintenance1");
		a->ext_swapchain_mutable_format = EXT("VK_KHR_swapchain_mutable_format");
		// Which chains wgpu-hal's InstanceShared::inspect queries: each
		// when the device's version or extension provides it, and all
		// only through the properties2 instance extension.
		int p2 = props2 != NULL && feats2 != NULL;
		int v11 = v >= VK_API_VERSION_1_1, v12 = v >= VK_API_VERSION_1_2, v13 = v >= VK_API_VERSION_1_3;
		int drv = p2 && (v12 || EXT(VK_KHR_DRIVER_PROPERTIES_EXTENSION_NAME));
		int pci = p2 && EXT(VK_EXT_PCI_BUS_INFO_EXTENSION_NAME);
		// The device UUID is nodeprep's, for the match with NVML.
		int idp_ok = p2 && (v11 || EXT("VK_KHR_external_memory_capabilities") || EXT("VK_KHR_external_fence_capabilities"));
		int m3 = p2 && (v11 || EXT("VK_KHR_maintenance3"));
		int m4 = p2 && (v13 || EXT("VK_KHR_maintenance4"));
		int mv = p2 && (v11 || EXT("VK_KHR_multiview"));
		int sg = p2 && v11;
		int sgc = p2 && (v13 || EXT("VK_EXT_subgroup_size_control"));
		free(exts);
#undef EXT
		a->props2 = p2;

		if (p2) {
			VkPhysicalDevicePCIBusInfoPropertiesEXT pp = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_PCI_BUS_INFO_PROPERTIES_EXT};
			VkPhysicalDeviceDriverProperties dp = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_DRIVER_PROPERTIES};
			VkPhysicalDeviceIDProperties idp = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_ID_PROPERTIES};
			VkPhysicalDeviceMaintenance3Properties m3p = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_MAINTENANCE_3_PROPERTIES};
			VkPhysicalDeviceMaintenance4Properties m4p = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_MAINTENANCE_4_PROPERTIES};
			VkPhysicalDeviceMultiviewProperties mvp = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_MULTIVIEW_PROPERTIES};
			VkPhysicalDeviceSubgroupProperties sgp = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SUBGROUP_PROPERTIES};
			VkPhysicalDeviceSubgroupSizeControlProperties sgcp = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SUBGROUP_SIZE_CONTROL_PROPERTIES};
			VkPhysicalDeviceProperties2 pr2 = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_PROPERTIES_2};
			void **tail = &pr2.pNext;
#define CHAIN(cond, s)                                  \
	do {                                            \
		if (cond) {                             \
			*tail = &(s);                   \
			tail = &(s).pNext;              \
		}                                       \
	} while (0)
			CHAIN(idp_ok, idp);
			CHAIN(drv, dp);
			CHAIN(pci, pp);
			CHAIN(m3, m3p);
			CHAIN(m4, m4p);
			CHAIN(mv, mvp);
			CHAIN(sg, sgp);
			CHAIN(sgc, sgcp);
			props2(pds[i], &pr2);
			p = pr2.properties;
			if (idp_ok) {
				a->has_id = 1;
				memcpy(a->device_uuid, idp.deviceUUID, VK_UUID_SIZE);
			}
			if (drv) {
				a->has_driver = 1;
				a->driver_id = dp.driverID;
				copy_str(a->driver_name, sizeof a->driver_name, dp.driverName);
				copy_str(a->driver_info, sizeof a->driver_info, dp.driverInfo);
				a->conformance[0] = dp.conformanceVersion.major;
				a->conformance[1] = dp.conformanceVersion.minor;
				a->conformance[2] = dp.conformanceVersion.subminor;
				a->conformance[3] = dp.conformanceVersion.patch;
			}
			if (pci) {
				a->has_pci = 1;
				a->pci_domain = pp.pciDomain;
				a->pci_bus = pp.pciBus;
				a->pci_device = pp.pciDevice;
				a->pci_function = pp.pciFunction;
			}
			a->has_maint3 = m3;
			a->max_per_set_descriptors = m3p.maxPerSetDescriptors;
			a->max_memory_allocation_size = m3p.maxMemoryAllocationSize;
			a->has_maint4 = m4;
			a->max_buffer_size = m4p.maxBufferSize;
			a->has_multiview = mv;
			a->max_multiview_view_count = mvp.maxMultiviewViewCount;
			a->has_subgroup = sg;
			a->subgroup_size = sgp.subgroupSize;
			a->subgroup_stages = sgp.supportedStages;
			a->subgroup_ops = sgp.supportedOperations;
			a->has_subgroup_size_control = sgc;
			a->min_subgroup_size = sgcp.minSubgroupSize;
			a->max_subgroup_size = sgcp.maxSubgroupSize;

			// Features: core, and what the default device enables.
			VkPhysicalDeviceTimelineSemaphoreFeatures tl = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_TIMELINE_SEMAPHORE_FEATURES};
			VkPhysicalDeviceImageRobustnessFeatures ir = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_IMAGE_ROBUSTNESS_FEATURES};
			VkPhysicalDeviceZeroInitializeWorkgroupMemoryFeatures zi = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_ZERO_INITIALIZE_WORKGROUP_MEMORY_FEATURES};
			VkPhysicalDeviceShaderIntegerDotProductFeatures dot = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SHADER_INTEGER_DOT_PRODUCT_FEATURES};
			VkPhysicalDeviceShaderFloat16Int8Features f16 = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SHADER_FLOAT16_INT8_FEATURES};
			VkPhysicalDevice16BitStorageFeatures s16 = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_16BIT_STORAGE_FEATURES};
			VkPhysicalDeviceFeatures2 fe2 = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_FEATURES_2};
			tail = &fe2.pNext;
			CHAIN(v12, tl);
			CHAIN(v13, ir);
			CHAIN(v13, zi);
			CHAIN(v13, dot);
			CHAIN(v12, f16);
			CHAIN(v11, s16);
#undef CHAIN
			feats2(pds[i], &fe2);
			a->features = fe2.features;
			a->feat_timeline = tl.timelineSemaphore;
			a->feat_robust_image = ir.robustImageAccess;
			a->feat_zero_init = zi.shaderZeroInitializeWorkgroupMemory;
			a->feat_int_dot = dot.shaderIntegerDotProduct;
			a->feat_int8 = f16.shaderInt8;
			a->shader_f16 = f16.shaderFloat16 && s16.storageBuffer16BitAccess && s16.uniformAndStorageBuffer16BitAccess;
		} else {
			feats1(pds[i], &a->features);
		}
		copy_str(a->name, sizeof a->name, p.deviceName);
		a->vendor_id = p.vendorID;
		a->device_id = p.deviceID;
		a->device_type = p.deviceType;
		a->api_version = p.apiVersion;
		a->driver_version = p.driverVersion;
		a->limits = p.limits;

		uint32_t nq = 0;
		qfp(pds[i], &nq, NULL);
		VkQueueFamilyProperties *qs = calloc(nq ? nq : 1, sizeof *qs);
		if (qs != NULL) {
			qfp(pds[i], &nq, qs);
			a->queue_families = nq;
			if (nq > 0) {
				a->q0_flags = qs[0].queueFlags;
				a->q0_timestamp_bits = qs[0].timestampValidBits;
			}
			free(qs);
		}
		for (int f = 0; f < NP_FORMATS; f++) {
			VkFormatProperties fp = {0};
			fmtp(pds[i], np_formats[f], &fp);
			a->format_flags[f] = fp.optimalTilingFeatures;
		}
	}
	*count = n;
	return VK_SUCCESS;
}

// dispatch_fns are the device-level entry points of the dispatch, all
// resolved through vkGetInstanceProcAddr (the loader's trampolines).
typedef struct {
	PFN_vkGetPhysicalDeviceQueueFamilyProperties qfp;
	PFN_vkGetPhysicalDeviceMemoryProperties mem_props;
	PFN_vkCreateDevice create_device;
	PFN_vkDestroyDevice destroy_device;
	PFN_vkGetDeviceQueue get_queue;
	PFN_vkCreateBuffer create_buffer;
	PFN_vkDestroyBuffer destroy_buffer;
	PFN_vkGetBufferMemoryRequirements buffer_reqs;
	PFN_vkAllocateMemory alloc_memory;
	PFN_vkFreeMemory free_memory;
	PFN_vkBindBufferMemory bind_memory;
	PFN_vkMapMemory map_memory;
	PFN_vkCreateShaderModule create_shader;
	PFN_vkDestroyShaderModule destroy_shader;
	PFN_vkCreateDescriptorSetLayout create_dsl;
	PFN_vkDestroyDescriptorSetLayout destroy_dsl;
	PFN_vkCreatePipelineLayout create_layout;
	PFN_vkDestroyPipelineLayout destroy_layout;
	PFN_vkCreateComputePipelines create_pipelines;
	PFN_vkDestroyPipeline destroy_pipeline;
	PFN_vkCreateDescriptorPool create_pool;
	PFN_vkDestroyDescriptorPool destroy_pool;
	PFN_vkAllocateDescriptorSets alloc_sets;
	PFN_vkUpdateDescriptorSets update_sets;
	PFN_vkCreateCommandPool create_cmd_pool;
	PFN_vkDestroyCommandPool destroy_cmd_pool;
	PFN_vkAllocateCommandBuffers alloc_cmd;
	PFN_vkBeginCommandBuffer begin_cmd;
	PFN_vkEndCommandBuffer end_cmd;
	PFN_vkCmdBindPipeline bind_pipeline;
	PFN_vkCmdBindDescriptorSets bind_sets;
	PFN_vkCmdPushConstants push_constants;
	PFN_vkCmdDispatch cmd_dispatch;
	PFN_vkCmdPipelineBarrier barrier;
	PFN_vkCreateFence create_fence;
	PFN_vkDestroyFence destroy_fence;
	PFN_vkQueueSubmit submit;
	PFN_vkWaitForFences wait_fences;
} dispatch_fns;

static int load_dispatch_fns(np_vk *vk, dispatch_fns *f)
{
#define L(field, name)                                 \
	do {                                           \
		f->field = VK_FN(vk, name);            \
		if (f->field == NULL)                  \
			return 0;                      \
	} while (0)
	L(qfp, vkGetPhysicalDeviceQueueFamilyProperties);
	L(mem_props, vkGetPhysicalDeviceMemoryProperties);
	L(create_device, vkCreateDevice);
	L(destroy_device, vkDestroyDevice);
	L(get_queue, vkGetDeviceQueue);
	L(create_buffer, vkCreateBuffer);
	L(destroy_buffer, vkDestroyBuffer);
	L(buffer_reqs, vkGetBufferMemoryRequirements);
	L(alloc_memory, vkAllocateMemory);
	L(free_memory, vkFreeMemory);
	L(bind_memory, vkBindBufferMemory);
	L(map_memory, vkMapMemory);
	L(create_shader, vkCreateShaderModule);
	L(destroy_shader, vkDestroyShaderModule);
	L(create_dsl, vkCreateDescriptorSetLayout);
	L(destroy_dsl, vkDestroyDescriptorSetLayout);
	L(create_layout, vkCreatePipelineLayout);
	L(destroy_layout, vkDestroyPipelineLayout);
	L(create_pipelines, vkCreateComputePipelines);
	L(destroy_pipeline, vkDestroyPipeline);
	L(create_pool, vkCreateDescriptorPool);
	L(destroy_pool, vkDestroyDescriptorPool);
	L(alloc_sets, vkAllocateDescriptorSets);
	L(update_sets, vkUpdateDescriptorSets);
	L(create_cmd_pool, vkCreateCommandPool);
	L(destroy_cmd_pool, vkDestroyCommandPool);
	L(alloc_cmd, vkAllocateCommandBuffers);
	L(begin_cmd, vkBeginCommandBuffer);
	L(end_cmd, vkEndCommandBuffer);
	L(bind_pipeline, vkCmdBindPipeline);
	L(bind_sets, vkCmdBindDescriptorSets);
	L(push_constants, vkCmdPushConstants);
	L(cmd_dispatch, vkCmdDispatch);
	L(barrier, vkCmdPipelineBarrier);
	L(create_fence, vkCreateFence);
	L(destroy_fence, vkDestroyFence);
	L(submit, vkQueueSubmit);
	L(wait_fences, vkWaitForFences);
#undef L
	return 1;
}

#define STEP(call, name)                          \
	do {                                      \
		VkResult r_ = (call);             \
		if (r_ != VK_SUCCESS) {           \
			res->failed_step = (name); \
			res->result = r_;         \
			goto out;                 \
		}                                 \
	} while (0)

int32_t np_vk_dispatch(np_vk *vk, uint32_t index, const np_vk_adapter *a, const uint32_t *spirv, size_t spirv_bytes,
		       uint32_t seed, uint32_t count, uint32_t fill, uint64_t timeout_ns,
		       uint32_t *out, np_vk_dispatch_result *res)
{
	memset(res, 0, sizeof *res);
	dispatch_fns f;
	if (!load_dispatch_fns(vk, &f)) {
		res->failed_step = "vkGetInstanceProcAddr";
		res->result = VK_ERROR_INITIALIZATION_FAILED;
		return res->result;
	}
	VkPhysicalDevice pds[NP_MAX_ADAPTERS];
	uint32_t n = 0;
	int32_t er = physical_devices(vk, pds, &n);
	if (er != VK_SUCCESS || index >= n) {
		res->failed_step = "vkEnumeratePhysicalDevices";
		res->result = er != VK_SUCCESS ? er : VK_ERROR_DEVICE_LOST;
		return res->result;
	}
	VkPhysicalDevice pd = pds[index];
	VkDevice dev = VK_NULL_HANDLE;
	VkBuffer buf = VK_NULL_HANDLE;
	VkDeviceMemory mem = VK_NULL_HANDLE;
	VkShaderModule shader = VK_NULL_HANDLE;
	VkDescriptorSetLayout dsl = VK_NULL_HANDLE;
	VkPipelineLayout layout = VK_NULL_HANDLE;
	VkPipeline pipeline = VK_NULL_HANDLE;
	VkDescriptorPool pool = VK_NULL_HANDLE;
	VkCommandPool cmd_pool = VK_NULL_HANDLE;
	VkFence fence = VK_NULL_HANDLE;
	int leak = 0;
	VkDeviceSize size = (VkDeviceSize)count * sizeof(uint32_t);

	// Device with one compute queue.
	double t = now_ms();
	// wgpu-hal opens its one queue on family 0 (expose_adapter hides an
	// adapter whose family 0 lacks GRAPHICS; Adapter::open uses family 0).
	uint32_t family = 0;
	if (a->queue_families == 0 || !(a->q0_flags & VK_QUEUE_COMPUTE_BIT)) {
		res->failed_step = "queue family 0 cannot compute";
		res->result = VK_ERROR_FEATURE_NOT_PRESENT;
		return res->result;
	}
	float prio = 1.0f;
	VkDeviceQueueCreateInfo qci = {
		.sType = VK_STRUCTURE_TYPE_DEVICE_QUEUE_CREATE_INFO,
		.queueFamilyIndex = family,
		.queueCount = 1,
		.pQueuePriorities = &prio,
	};
	// The features a default wgpu device enables (wgpu-hal/src/vulkan/
	// adapter.rs, PhysicalDeviceFeatures::from_extensions_and_requested_features
	// with no requested features): the core ones its downlevel flags and
	// private capabilities take from the adapter, and, by the device's
	// version, the promoted feature structs with what the adapter supports.
	const VkPhysicalDeviceFeatures *sup = &a->features;
	VkPhysicalDeviceFeatures core = {
		.robustBufferAccess = sup->robustBufferAccess,
		.independentBlend = sup->independentBlend,
		.sampleRateShading = sup->sampleRateShading,
		.imageCubeArray = sup->imageCubeArray,
		.multiDrawIndirect = sup->multiDrawIndirect,
		.samplerAnisotropy = sup->samplerAnisotropy,
		.fragmentStoresAndAtomics = sup->fragmentStoresAndAtomics,
	};
	uint32_t v = a->api_version;
	int v11 = v >= VK_API_VERSION_1_1, v12 = v >= VK_API_VERSION_1_2, v13 = v >= VK_API_VERSION_1_3;
	VkPhysicalDeviceMultiviewFeatures mv = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_MULTIVIEW_FEATURES};
	VkPhysicalDeviceSamplerYcbcrConversionFeatures ycbcr = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SAMPLER_YCBCR_CONVERSION_FEATURES};
	VkPhysicalDeviceShaderDrawParametersFeatures sdp = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SHADER_DRAW_PARAMETERS_FEATURES};
	VkPhysicalDeviceTimelineSemaphoreFeatures tl = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_TIMELINE_SEMAPHORE_FEATURES, .timelineSemaphore = a->feat_timeline};
	VkPhysicalDeviceShaderAtomicInt64Features ai64 = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SHADER_ATOMIC_INT64_FEATURES};
	VkPhysicalDeviceVulkanMemoryModelFeatures vmm = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_MEMORY_MODEL_FEATURES};
	VkPhysicalDeviceShaderFloat16Int8Features f16 = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SHADER_FLOAT16_INT8_FEATURES, .shaderInt8 = a->feat_int8};
	VkPhysicalDeviceImageRobustnessFeatures ir = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_IMAGE_ROBUSTNESS_FEATURES, .robustImageAccess = a->feat_robust_image};
	VkPhysicalDeviceZeroInitializeWorkgroupMemoryFeatures zi = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_ZERO_INITIALIZE_WORKGROUP_MEMORY_FEATURES, .shaderZeroInitializeWorkgroupMemory = a->feat_zero_init};
	VkPhysicalDeviceSubgroupSizeControlFeatures sgc = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SUBGROUP_SIZE_CONTROL_FEATURES, .subgroupSizeControl = VK_TRUE};
	VkPhysicalDeviceMaintenance4Features m4 = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_MAINTENANCE_4_FEATURES};
	VkPhysicalDeviceShaderIntegerDotProductFeatures dot = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SHADER_INTEGER_DOT_PRODUCT_FEATURES, .shaderIntegerDotProduct = a->feat_int_dot};
	// The device extensions a default wgpu device enables: those of
	// PhysicalDeviceProperties::get_required_extensions (adapter.rs) for
	// no requested features that the device offers (Adapter::
	// required_device_extensions drops the others).
	static const struct {
		const char *name;
		uint32_t below; // only for devices below this version; 0: always
	} wanted[] = {
		{"VK_KHR_swapchain", 0},
		{"VK_KHR_maintenance1", VK_API_VERSION_1_1},
		{"VK_KHR_maintenance2", VK_API_VERSION_1_1},
		{"VK_KHR_maintenance3", VK_API_VERSION_1_1},
		{"VK_KHR_storage_buffer_storage_class", VK_API_VERSION_1_1},
		{"VK_KHR_image_format_list", VK_API_VERSION_1_2},
		{"VK_KHR_driver_properties", VK_API_VERSION_1_2},
		{"VK_KHR_timeline_semaphore", VK_API_VERSION_1_2},
		{"VK_KHR_shader_float16_int8", VK_API_VERSION_1_2},
		{"VK_KHR_maintenance4", VK_API_VERSION_1_3},
		{"VK_EXT_image_robustness", VK_API_VERSION_1_3},
		{"VK_KHR_shader_integer_dot_product", VK_API_VERSION_1_3},
		{"VK_KHR_swapchain_mutable_format", 0},
		{"VK_EXT_robustness2", 0},
		{"VK_KHR_external_memory_fd", 0},
		{"VK_EXT_external_memory_dma_buf", 0},
		{"VK_EXT_memory_budget", 0},
	};
	const char *dev_exts[sizeof wanted / sizeof wanted[0]];
	uint32_t ndev_exts = 0;
	PFN_vkEnumerateDeviceExtensionProperties edep = VK_FN(vk, vkEnumerateDeviceExtensionProperties);
	uint32_t navail = 0;
	VkExtensionProperties *avail = NULL;
	if (edep != NULL && edep(pd, NULL, &navail, NULL) == VK_SUCCESS && navail > 0) {
		avail = calloc(navail, sizeof *avail);
		if (avail != NULL && edep(pd, NULL, &navail, avail) < 0)
			navail = 0;
	}
	for (size_t w = 0; w < sizeof wanted / sizeof wanted[0]; w++)
		if ((wanted[w].below == 0 || v < wanted[w].below) && has_ext_list(avail, avail ? navail : 0, wanted[w].name))
			dev_exts[ndev_exts++] = wanted[w].name;
	VkDeviceCreateInfo dci = {
		.sType = VK_STRUCTURE_TYPE_DEVICE_CREATE_INFO,
		.queueCreateInfoCount = 1,
		.pQueueCreateInfos = &qci,
		.pEnabledFeatures = &core,
		.enabledExtensionCount = ndev_exts,
		.ppEnabledExtensionNames = dev_exts,
	};
	const void **tail = &dci.pNext;
#define CHAIN(cond, s)                                  \
	do {                                            \
		if (cond) {                             \
			*tail = &(s);                   \
			tail = (const void **)&(s).pNext; \
		}                                       \
	} while (0)
	CHAIN(a->props2 && v12, tl);
	CHAIN(a->props2 && v13, ir);
	CHAIN(a->props2 && v11, mv);
	CHAIN(a->props2 && v11, ycbcr);
	CHAIN(a->props2 && a->feat_int8, f16);
	CHAIN(a->props2 && v13, zi);
	CHAIN(a->props2 && v12, ai64);
	CHAIN(a->props2 && v13, sgc);
	CHAIN(a->props2 && v13, m4);
	CHAIN(a->props2 && v13, dot);
	CHAIN(a->props2 && v12, vmm);
	CHAIN(a->props2 && v11, sdp);
#undef CHAIN
	VkResult cr = f.create_device(pd, &dci, NULL, &dev);
	free(avail);
	STEP(cr, "vkCreateDevice");
	// wgpu-hal's device uses timeline semaphores for its fences when the
	// device has them (Vulkan 1.2's, loaded with vkGetDeviceProcAddr).
	// The loader withholds device functions above the api_version of the
	// ICD's manifest: a device that says 1.2+ behind a 1.0 manifest then
	// gives wgpu no vkWaitSemaphores, and its device creation fails.
	if (a->props2 && v12 && a->feat_timeline) {
		PFN_vkGetDeviceProcAddr gdpa = VK_FN(vk, vkGetDeviceProcAddr);
		static const char *const timeline_fns[] = {"vkWaitSemaphores", "vkSignalSemaphore", "vkGetSemaphoreCounterValue"};
		for (size_t k = 0; gdpa != NULL && k < sizeof timeline_fns / sizeof timeline_fns[0]; k++)
			if (gdpa(dev, timeline_fns[k]) == NULL) {
				res->failed_step = k == 0   ? "vkGetDeviceProcAddr(vkWaitSemaphores) returned NULL"
						   : k == 1 ? "vkGetDeviceProcAddr(vkSignalSemaphore) returned NULL"
							    : "vkGetDeviceProcAddr(vkGetSemaphoreCounterValue) returned NULL";
				res->result = VK_ERROR_INITIALIZATION_FAILED;
				goto out;
			}
	}
	VkQueue queue;
	f.get_queue(dev, family, 0, &queue);
	res->device_ms = now_ms() - t;

	// Host-visible, coherent storage buffer, prefilled.
	t = now_ms();
	VkBufferCreateInfo bci = {
		.sType = VK_STRUCTURE_TYPE_BUFFER_CREATE_INFO,
		.size = size,
		.usage = VK_BUFFER_USAGE_STORAGE_BUFFER_BIT,
		.sharingMode = VK_SHARING_MODE_EXCLUSIVE,
	};
	STEP(f.create_buffer(dev, &bci, NULL, &buf), "vkCreateBuffer");
	VkMemoryRequirements req;
	f.buffer_reqs(dev, buf, &req);
	VkPhysicalDeviceMemoryProperties mp;
	f.mem_props(pd, &mp);
	const VkMemoryPropertyFlags want = VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT | VK_MEMORY_PROPERTY_HOST_COHERENT_BIT;
	uint32_t type = UINT32_MAX;
	for (uint32_t i = 0; i < mp.memoryTypeCount; i++)
		if ((req.memoryTypeBits & (1u << i)) && (mp.memoryTypes[i].propertyFlags & want) == want) {
			type = i;
			break;
		}
	if (type == UINT32_MAX) {
		res->failed_step = "no host-visible coherent memory type";
		res->result = VK_ERROR_FEATURE_NOT_PRESENT;
		goto out;
	}
	VkMemoryAllocateInfo mai = {
		.sType = VK_STRUCTURE_TYPE_MEMORY_ALLOCATE_INFO,
		.allocationSize = req.size,
		.memoryTypeIndex = type,
	};
	STEP(f.alloc_memory(dev, &mai, NULL, &mem), "vkAllocateMemory");
	STEP(f.bind_memory(dev, buf, mem, 0), "vkBindBufferMemory");
	void *mapped = NULL;
	STEP(f.map_memory(dev, mem, 0, size, 0, &mapped), "vkMapMemory");
	uint32_t *words = mapped;
	for (uint32_t i = 0; i < count; i++)
		words[i] = fill;
	res->resources_ms = now_ms() - t;

	// Compute pipeline: one storage buffer at set 0 binding 0, two push
	// constants (seed, count).
	t = now_ms();
	VkShaderModuleCreateInfo smci = {
		.sType = VK_STRUCTURE_TYPE_SHADER_MODULE_CREATE_INFO,
		.codeSize = spirv_bytes,
		.pCode = spirv,
	};
	STEP(f.create_shader(dev, &smci, NULL, &shader), "vkCreateShaderModule");
	VkDescriptorSetLayoutBinding binding = {
		.binding = 0,
		.descriptorType = VK_DESCRIPTOR_TYPE_STORAGE_BUFFER,
		.descriptorCount = 1,
		.stageFlags = VK_SHADER_STAGE_COMPUTE_BIT,
	};
	VkDescriptorSetLayoutCreateInfo dslci = {
		.sType = VK_STRUCTURE_TYPE_DESCRIPTOR_SET_LAYOUT_CREATE_INFO,
		.bindingCount = 1,
		.pBindings = &binding,
	};
	STEP(f.create_dsl(dev, &dslci, NULL, &dsl), "vkCreateDescriptorSetLayout");
	VkPushConstantRange pcr = {.stageFlags = VK_SHADER_STAGE_COMPUTE_BIT, .offset = 0, .size = 8};
	VkPipelineLayoutCreateInfo plci = {
		.sType = VK_STRUCTURE_TYPE_PIPELINE_LAYOUT_CREATE_INFO,
		.setLayoutCount = 1,
		.pSetLayouts = &dsl,
		.pushConstantRangeCount = 1,
		.pPushConstantRanges = &pcr,
	};
	STEP(f.create_layout(dev, &plci, NULL, &layout), "vkCreatePipelineLayout");
	VkComputePipelineCreateInfo cpci = {
		.sType = VK_STRUCTURE_TYPE_COMPUTE_PIPELINE_CREATE_INFO,
		.stage = {
			.sType = VK_STRUCTURE_TYPE_PIPELINE_SHADER_STAGE_CREATE_INFO,
			.stage = VK_SHADER_STAGE_COMPUTE_BIT,
			.module = shader,
			.pName = "main",
		},
		.layout = layout,
	};
	STEP(f.create_pipelines(dev, VK_NULL_HANDLE, 1, &cpci, NULL, &pipeline), "vkCreateComputePipelines");
	VkDescriptorPoolSize ps = {.type = VK_DESCRIPTOR_TYPE_STORAGE_BUFFER, .descriptorCount = 1};
	VkDescriptorPoolCreateInfo dpci = {
		.sType = VK_STRUCTURE_TYPE_DESCRIPTOR_POOL_CREATE_INFO,
		.maxSets = 1,
		.poolSizeCount = 1,
		.pPoolSizes = &ps,
	};
	STEP(f.create_pool(dev, &dpci, NULL, &pool), "vkCreateDescriptorPool");
	VkDescriptorSetAllocateInfo dsai = {
		.sType = VK_STRUCTURE_TYPE_DESCRIPTOR_SET_ALLOCATE_INFO,
		.descriptorPool = pool,
		.descriptorSetCount = 1,
		.pSetLayouts = &dsl,
	};
	VkDescriptorSet set;
	STEP(f.alloc_sets(dev, &dsai, &set), "vkAllocateDescriptorSets");
	VkDescriptorBufferInfo dbi = {.buffer = buf, .offset = 0, .range = size};
	VkWriteDescriptorSet wds = {
		.sType = VK_STRUCTURE_TYPE_WRITE_DESCRIPTOR_SET,
		.dstSet = set,
		.dstBinding = 0,
		.descriptorCount = 1,
		.descriptorType = VK_DESCRIPTOR_TYPE_STORAGE_BUFFER,
		.pBufferInfo = &dbi,
	};
	f.update_sets(dev, 1, &wds, 0, NULL);
	res->pipeline_ms = now_ms() - t;

	// Record, submit with a fence.
	t = now_ms();
	VkCommandPoolCreateInfo cpoolci = {
		.sType = VK_STRUCTURE_TYPE_COMMAND_POOL_CREATE_INFO,
		.queueFamilyIndex = family,
	};
	STEP(f.create_cmd_pool(dev, &cpoolci, NULL, &cmd_pool), "vkCreateCommandPool");
	VkCommandBufferAllocateInfo cbai = {
		.sType = VK_STRUCTURE_TYPE_COMMAND_BUFFER_ALLOCATE_INFO,
		.commandPool = cmd_pool,
		.level = VK_COMMAND_BUFFER_LEVEL_PRIMARY,
		.commandBufferCount = 1,
	};
	VkCommandBuffer cb;
	STEP(f.alloc_cmd(dev, &cbai, &cb), "vkAllocateCommandBuffers");
	VkCommandBufferBeginInfo cbbi = {
		.sType = VK_STRUCTURE_TYPE_COMMAND_BUFFER_BEGIN_INFO,
		.flags = VK_COMMAND_BUFFER_USAGE_ONE_TIME_SUBMIT_BIT,
	};
	STEP(f.begin_cmd(cb, &cbbi), "vkBeginCommandBuffer");
	f.bind_pipeline(cb, VK_PIPELINE_BIND_POINT_COMPUTE, pipeline);
	f.bind_sets(cb, VK_PIPELINE_BIND_POINT_COMPUTE, layout, 0, 1, &set, 0, NULL);
	uint32_t pc[2] = {seed, count};
	f.push_constants(cb, layout, VK_SHADER_STAGE_COMPUTE_BIT, 0, sizeof pc, pc);
	f.cmd_dispatch(cb, (count + 63) / 64, 1, 1);
	// Make the shader's writes visible to host reads after the fence
	// (Vulkan spec, "Host Write Ordering Guarantees" / memory dependencies).
	VkMemoryBarrier mb = {
		.sType = VK_STRUCTURE_TYPE_MEMORY_BARRIER,
		.srcAccessMask = VK_ACCESS_SHADER_WRITE_BIT,
		.dstAccessMask = VK_ACCESS_HOST_READ_BIT,
	};
	f.barrier(cb, VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT, VK_PIPELINE_STAGE_HOST_BIT, 0, 1, &mb, 0, NULL, 0, NULL);
	STEP(f.end_cmd(cb), "vkEndCommandBuffer");
	VkFenceCreateInfo fci = {.sType = VK_STRUCTURE_TYPE_FENCE_CREATE_INFO};
	STEP(f.create_fence(dev, &fci, NULL, &fence), "vkCreateFence");
	VkSubmitInfo si = {
		.sType = VK_STRUCTURE_TYPE_SUBMIT_INFO,
		.commandBufferCount = 1,
		.pCommandBuffers = &cb,
	};
	STEP(f.submit(queue, 1, &si, fence), "vkQueueSubmit");
	res->submit_ms = now_ms() - t;

	t = now_ms();
	VkResult wr = f.wait_fences(dev, 1, &fence, VK_TRUE, timeout_ns);
	res->wait_ms = now_ms() - t;
	if (wr != VK_SUCCESS) {
		// The device may still be writing the buffer: leave everything
		// allocated rather than free memory in use.
		leak = 1;
		res->failed_step = "vkWaitForFences";
		res->result = wr;
		goto out;
	}

	t = now_ms();
	memcpy(out, mapped, size);
	res->readback_ms = now_ms() - t;

out:
	if (!leak && dev != VK_NULL_HANDLE) {
#define DESTROY(fn, handle)                          \
	do {                                         \
		if (handle)                          \
			f.fn(dev, handle, NULL);     \
	} while (0)
		DESTROY(destroy_fence, fence);
		DESTROY(destroy_cmd_pool, cmd_pool);
		DESTROY(destroy_pool, pool);
		DESTROY(destroy_pipeline, pipeline);
		DESTROY(destroy_layout, layout);
		DESTROY(destroy_dsl, dsl);
		DESTROY(destroy_shader, shader);
		DESTROY(destroy_buffer, buf);
		DESTROY(free_memory, mem);
#undef DESTROY
		f.destroy_device(dev, NULL);
	}
	return res->failed_step == NULL ? VK_SUCCESS : res->result;
}

// ---------------------------------------------------------------- EGL

struct np_egl {
	void *lib;
	PFNEGLGETPROCADDRESSPROC get_proc;
	PFNEGLGETERRORPROC get_error;
	PFNEGLQUERYSTRINGPROC query_string;
	PFNEGLINITIALIZEPROC initialize;
	PFNEGLTERMINATEPROC terminate;
	PFNEGLBINDAPIPROC bind_api;
	PFNEGLCHOOSECONFIGPROC choose_config;
	PFNEGLCREATECONTEXTPROC create_context;
	PFNEGLDESTROYCONTEXTPROC destroy_context;
	PFNEGLMAKECURRENTPROC make_current;
	PFNEGLRELEASETHREADPROC release_thread;
	// Extension functions, from eglGetProcAddress.
	PFNEGLQUERYDEVICESEXTPROC query_devices;
	PFNEGLQUERYDEVICESTRINGEXTPROC query_device_string;
	PFNEGLQUERYDEVICEBINARYEXTPROC query_device_binary;
	PFNEGLGETPLATFORMDISPLAYEXTPROC get_platform_display;
	EGLDeviceEXT devices[NP_MAX_EGL_DEVICES];
	int ndevices;
};

np_egl *np_egl_open(const char *path, char *err, size_t errlen)
{
	void *lib = open_lib(path, err, errlen);
	if (lib == NULL)
		return NULL;
	np_egl *e = calloc(1, sizeof *e);
	if (e == NULL) {
		copy_str(err, errlen, "out of memory");
		return NULL;
	}
	e->lib = lib;
#define S(field, name)                                                         \
	do {                                                                   \
		e->field = (void *)dlsym(lib, #name);                          \
		if (e->field == NULL) {                                        \
			snprintf(err, errlen, "%s: no symbol %s", path, #name); \
			free(e);                                               \
			return NULL;                                           \
		}                                                              \
	} while (0)
	S(get_proc, eglGetProcAddress);
	S(get_error, eglGetError);
	S(query_string, eglQueryString);
	S(initialize, eglInitialize);
	S(terminate, eglTerminate);
	S(bind_api, eglBindAPI);
	S(choose_config, eglChooseConfig);
	S(create_context, eglCreateContext);
	S(destroy_context, eglDestroyContext);
	S(make_current, eglMakeCurrent);
	S(release_thread, eglReleaseThread);
#undef S
	return e;
}

void np_egl_client_extensions(np_egl *e, char *out, size_t outlen)
{
	// EGL_EXT_client_extensions: EGL_NO_DISPLAY gives the client extensions.
	copy_str(out, outlen, e->query_string(EGL_NO_DISPLAY, EGL_EXTENSIONS));
}

int np_egl_devices(np_egl *e, int max, int *count, char *err, size_t errlen)
{
	*count = 0;
	e->query_devices = (PFNEGLQUERYDEVICESEXTPROC)e->get_proc("eglQueryDevicesEXT");
	e->query_device_string = (PFNEGLQUERYDEVICESTRINGEXTPROC)e->get_proc("eglQueryDeviceStringEXT");
	e->get_platform_display = (PFNEGLGETPLATFORMDISPLAYEXTPROC)e->get_proc("eglGetPlatformDisplayEXT");
	e->query_device_binary = (PFNEGLQUERYDEVICEBINARYEXTPROC)e->get_proc("eglQueryDeviceBinaryEXT");
	// eglQueryDeviceBinaryEXT is optional: only the UUID needs it.
	const char *missing = e->query_devices == NULL          ? "eglQueryDevicesEXT"
			      : e->query_device_string == NULL  ? "eglQueryDeviceStringEXT"
			      : e->get_platform_display == NULL ? "eglGetPlatformDisplayEXT"
								: NULL;
	if (missing != NULL) {
		snprintf(err, errlen, "eglGetProcAddress gave no %s", missing);
		return -1;
	}
	if (max > NP_MAX_EGL_DEVICES)
		max = NP_MAX_EGL_DEVICES;
	EGLint n = 0;
	if (!e->query_devices(max, e->devices, &n)) {
		snprintf(err, errlen, "eglQueryDevicesEXT failed (EGL error 0x%04x)", (unsigned)e->get_error());
		return -1;
	}
	e->ndevices = n;
	*count = n;
	return 0;
}

static int has_word(const char *list, const char *word)
{
	size_t n = strlen(word);
	for (const char *p = list; p != NULL && (p = strstr(p, word)) != NULL; p += n)
		if ((p == list || p[-1] == ' ') && (p[n] == '\0' || p[n] == ' '))
			return 1;
	return 0;
}

typedef const unsigned char *(*gl_get_string_fn)(unsigned int);

#define EGL_FAIL(step)                               \
	do {                                         \
		d->failed_step = (step);             \
		d->egl_error = e->get_error();       \
		goto out;                            \
	} while (0)

void np_egl_probe_device(np_egl *e, int index, np_egl_device *d)
{
	memset(d, 0, sizeof *d);
	if (index < 0 || index >= e->ndevices) {
		d->failed_step = "device index";
		return;
	}
	EGLDeviceEXT dev = e->devices[index];
	EGLDisplay dpy = EGL_NO_DISPLAY;
	EGLContext ctx = EGL_NO_CONTEXT;
	int initialized = 0, current = 0;

	const char *exts = e->query_device_string(dev, EGL_EXTENSIONS);
	copy_str(d->extensions, sizeof d->extensions, exts);
	if (has_word(exts, "EGL_EXT_device_drm"))
		copy_str(d->drm_file, sizeof d->drm_file, e->query_device_string(dev, EGL_DRM_DEVICE_FILE_EXT));
	if (has_word(exts, "EGL_EXT_device_query_name")) {
		copy_str(d->device_vendor, sizeof d->device_vendor, e->query_device_string(dev, EGL_VENDOR));
		copy_str(d->device_renderer, sizeof d->device_renderer, e->query_device_string(dev, EGL_RENDERER_EXT));
	}
	if (has_word(exts, "EGL_EXT_device_persistent_id") && e->query_device_binary != NULL) {
		EGLint size = 0;
		if (e->query_device_binary(dev, EGL_DEVICE_UUID_EXT, 16, d->uuid, &size) && size == 16)
			d->has_uuid = 1;
		copy_str(d->driver_name, sizeof d->driver_name, e->query_device_string(dev, EGL_DRIVER_NAME_EXT));
	}

	double t = now_ms();
	dpy = e->get_platform_display(EGL_PLATFORM_DEVICE_EXT, dev, NULL);
	if (dpy == EGL_NO_DISPLAY)
		EGL_FAIL("eglGetPlatformDisplayEXT(EGL_PLATFORM_DEVICE_EXT)");
	if (!e->initialize(dpy, &d->major, &d->minor))
		EGL_FAIL("eglInitialize");
	initialized = 1;
	copy_str(d->vendor, sizeof d->vendor, e->query_string(dpy, EGL_VENDOR));
	copy_str(d->version, sizeof d->version, e->query_string(dpy, EGL_VERSION));
	copy_str(d->client_apis, sizeof d->client_apis, e->query_string(dpy, EGL_CLIENT_APIS));
	const char *dexts = e->query_string(dpy, EGL_EXTENSIONS);
	d->init_ms = now_ms() - t;

	t = now_ms();
	if (!has_word(dexts, "EGL_KHR_surfaceless_context")) {
		d->failed_step = "EGL_KHR_surfaceless_context not supported";
		goto out;
	}
	// The context wgpu-hal's GL backend makes (wgpu-hal/src/gles/egl.rs,
	// Inner::create): desktop OpenGL 3.3 when the display is EGL 1.4 or
	// newer and EGL_CLIENT_APIS lists "OpenGL", else (or when that context
	// cannot be made) OpenGL ES with version 3 requested
	// (EGL_CONTEXT_MAJOR_VERSION, the same attribute as EGL 1.4's
	// EGL_CONTEXT_CLIENT_VERSION).
	int configless = has_word(dexts, "EGL_KHR_no_config_context") || has_word(dexts, "EGL_MESA_configless_context");
	EGLConfig cfg = EGL_NO_CONFIG_KHR;
	if ((d->major > 1 || (d->major == 1 && d->minor >= 4)) && has_word(d->client_apis, "OpenGL") && e->bind_api(EGL_OPENGL_API)) {
		EGLint gl_attrs[] = {EGL_CONTEXT_MAJOR_VERSION, 3, EGL_CONTEXT_MINOR_VERSION, 3, EGL_NONE};
		EGLint cattrs[] = {EGL_SURFACE_TYPE, EGL_PBUFFER_BIT, EGL_RENDERABLE_TYPE, EGL_OPENGL_BIT, EGL_NONE};
		EGLint ncfg = 0;
		if (configless || (e->choose_config(dpy, cattrs, &cfg, 1, &ncfg) && ncfg > 0))
			ctx = e->create_context(dpy, cfg, EGL_NO_CONTEXT, gl_attrs);
		if (ctx != EGL_NO_CONTEXT)
			d->api = "OpenGL";
		else
			e->get_error(); // wgpu falls back to OpenGL ES: so does the probe
	}
	if (ctx == EGL_NO_CONTEXT) {
		EGLint gles_attrs[] = {EGL_CONTEXT_MAJOR_VERSION, 3, EGL_NONE};
		if (!e->bind_api(EGL_OPENGL_ES_API))
			EGL_FAIL("eglBindAPI(EGL_OPENGL_ES_API)");
		d->api = "OpenGL ES";
		cfg = EGL_NO_CONFIG_KHR;
		if (!configless) {
			EGLint cattrs[] = {EGL_SURFACE_TYPE, EGL_PBUFFER_BIT, EGL_RENDERABLE_TYPE, EGL_OPENGL_ES2_BIT, EGL_NONE};
			EGLint ncfg = 0;
			if (!e->choose_config(dpy, cattrs, &cfg, 1, &ncfg) || ncfg < 1)
				EGL_FAIL("eglChooseConfig");
		}
		ctx = e->create_context(dpy, cfg, EGL_NO_CONTEXT, gles_attrs);
		if (ctx == EGL_NO_CONTEXT)
			EGL_FAIL("eglCreateContext(OpenGL ES 3.0)");
	}
	if (!e->make_current(dpy, EGL_NO_SURFACE, EGL_NO_SURFACE, ctx))
		EGL_FAIL("eglMakeCurrent(EGL_NO_SURFACE)");
	current = 1;
	gl_get_string_fn gl_get_string = (gl_get_string_fn)e->get_proc("glGetString");
	if (gl_get_string == NULL) {
		d->failed_step = "eglGetProcAddress(glGetString)";
		goto out;
	}
	copy_str(d->gl_vendor, sizeof d->gl_vendor, (const char *)gl_get_string(0x1F00));   // GL_VENDOR
	copy_str(d->gl_renderer, sizeof d->gl_renderer, (const char *)gl_get_string(0x1F01)); // GL_RENDERER
	copy_str(d->gl_version, sizeof d->gl_version, (const char *)gl_get_string(0x1F02));  // GL_VERSION
	if (d->gl_renderer[0] == '\0')
		d->failed_step = "glGetString(GL_RENDERER) returned nothing";
	// "OpenGL ES 3.2 Mesa 22.3.6" (OpenGL ES 3.2 spec, GetString),
	// "4.5 (Core Profile) Mesa 22.3.6" (OpenGL 4.6 spec, GetString).
	int desktop = strcmp(d->api, "OpenGL") == 0;
	if (sscanf(d->gl_version, desktop ? "%d.%d" : "OpenGL ES %d.%d", &d->gles_major, &d->gles_minor) != 2)
		d->gles_major = d->gles_minor = 0;
	if (d->failed_step == NULL && !desktop && d->gles_major < 3)
		d->failed_step = "the context is below OpenGL ES 3.0";
	if (d->failed_step == NULL && desktop && (d->gles_major < 3 || (d->gles_major == 3 && d->gles_minor < 3)))
		d->failed_step = "the context is below OpenGL 3.3";
	d->context_ms = now_ms() - t;

out:
	if (current)
		e->make_current(dpy, EGL_NO_SURFACE, EGL_NO_SURFACE, EGL_NO_CONTEXT);
	if (ctx != EGL_NO_CONTEXT)
		e->destroy_context(dpy, ctx);
	if (initialized)
		e->terminate(dpy);
	e->release_thread();
}
