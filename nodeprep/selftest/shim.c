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

struct np_vk {
	void *lib;
	PFN_vkGetInstanceProcAddr gipa;
	VkInstance instance;
	uint32_t api_version; // of the instance we asked for
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

int32_t np_vk_create_instance(np_vk *vk, uint32_t *loader_version, char *err, size_t errlen)
{
	*loader_version = VK_API_VERSION_1_0;
	PFN_vkEnumerateInstanceVersion eiv = VK_FN(vk, vkEnumerateInstanceVersion);
	if (eiv != NULL && eiv(loader_version) != VK_SUCCESS)
		*loader_version = VK_API_VERSION_1_0;
	PFN_vkCreateInstance create = VK_FN(vk, vkCreateInstance);
	if (create == NULL) {
		copy_str(err, errlen, "vkGetInstanceProcAddr gave no vkCreateInstance");
		return VK_ERROR_INITIALIZATION_FAILED;
	}
	VkApplicationInfo app = {
		.sType = VK_STRUCTURE_TYPE_APPLICATION_INFO,
		.pApplicationName = "nodeprep selftest",
		.pEngineName = "nodeprep",
		.apiVersion = VK_API_VERSION_1_1,
	};
	VkInstanceCreateInfo ci = {
		.sType = VK_STRUCTURE_TYPE_INSTANCE_CREATE_INFO,
		.pApplicationInfo = &app,
	};
	vk->api_version = VK_API_VERSION_1_1;
	return create(&ci, NULL, &vk->instance);
}

static int has_ext(const VkExtensionProperties *exts, uint32_t n, const char *name)
{
	for (uint32_t i = 0; i < n; i++)
		if (strcmp(exts[i].extensionName, name) == 0)
			return 1;
	return 0;
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
	PFN_vkGetPhysicalDeviceProperties2 props2 = VK_FN(vk, vkGetPhysicalDeviceProperties2);
	PFN_vkEnumerateDeviceExtensionProperties edep = VK_FN(vk, vkEnumerateDeviceExtensionProperties);
	PFN_vkGetPhysicalDeviceQueueFamilyProperties qfp = VK_FN(vk, vkGetPhysicalDeviceQueueFamilyProperties);
	if (props1 == NULL || edep == NULL || qfp == NULL)
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
			if (exts != NULL && edep(pds[i], NULL, &next, exts) != VK_SUCCESS && next == 0) {
				free(exts);
				exts = NULL;
			}
		}
		// Core 1.1 queries need a 1.1 device (Vulkan spec, "Extending
		// Physical Device Core Functionality"); driver properties need
		// 1.2 or VK_KHR_driver_properties; PCI bus info needs
		// VK_EXT_pci_bus_info.
		int v11 = p.apiVersion >= VK_API_VERSION_1_1 && props2 != NULL;
		int drv = v11 && (p.apiVersion >= VK_API_VERSION_1_2 ||
				  has_ext(exts, exts ? next : 0, VK_KHR_DRIVER_PROPERTIES_EXTENSION_NAME));
		int pci = v11 && has_ext(exts, exts ? next : 0, VK_EXT_PCI_BUS_INFO_EXTENSION_NAME);
		free(exts);

		if (v11) {
			VkPhysicalDevicePCIBusInfoPropertiesEXT pp = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_PCI_BUS_INFO_PROPERTIES_EXT};
			VkPhysicalDeviceDriverProperties dp = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_DRIVER_PROPERTIES};
			VkPhysicalDeviceIDProperties idp = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_ID_PROPERTIES};
			VkPhysicalDeviceProperties2 p2 = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_PROPERTIES_2, .pNext = &idp};
			void **tail = &idp.pNext;
			if (drv) {
				*tail = &dp;
				tail = &dp.pNext;
			}
			if (pci) {
				*tail = &pp;
				tail = &pp.pNext;
			}
			props2(pds[i], &p2);
			p = p2.properties;
			a->has_id = 1;
			memcpy(a->device_uuid, idp.deviceUUID, VK_UUID_SIZE);
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
		}
		copy_str(a->name, sizeof a->name, p.deviceName);
		a->vendor_id = p.vendorID;
		a->device_id = p.deviceID;
		a->device_type = p.deviceType;
		a->api_version = p.apiVersion;
		a->driver_version = p.driverVersion;

		uint32_t nq = 0;
		qfp(pds[i], &nq, NULL);
		VkQueueFamilyProperties *qs = calloc(nq ? nq : 1, sizeof *qs);
		if (qs != NULL) {
			qfp(pds[i], &nq, qs);
			for (uint32_t q = 0; q < nq; q++)
				if (qs[q].queueFlags & VK_QUEUE_COMPUTE_BIT)
					a->has_compute_queue = 1;
			free(qs);
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

int32_t np_vk_dispatch(np_vk *vk, uint32_t index, const uint32_t *spirv, size_t spirv_bytes,
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
	uint32_t nq = 0;
	f.qfp(pd, &nq, NULL);
	VkQueueFamilyProperties qs[64];
	if (nq > 64)
		nq = 64;
	f.qfp(pd, &nq, qs);
	uint32_t family = UINT32_MAX;
	for (uint32_t q = 0; q < nq; q++)
		if (qs[q].queueFlags & VK_QUEUE_COMPUTE_BIT) {
			family = q;
			break;
		}
	if (family == UINT32_MAX) {
		res->failed_step = "no compute queue family";
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
	VkDeviceCreateInfo dci = {
		.sType = VK_STRUCTURE_TYPE_DEVICE_CREATE_INFO,
		.queueCreateInfoCount = 1,
		.pQueueCreateInfos = &qci,
	};
	STEP(f.create_device(pd, &dci, NULL, &dev), "vkCreateDevice");
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
	// Desktop GL first, then GLES (EGL 1.4 eglBindAPI).
	EGLint gles_attrs[] = {EGL_CONTEXT_CLIENT_VERSION, 2, EGL_NONE};
	const EGLint *attrs = NULL;
	EGLint renderable = EGL_OPENGL_BIT;
	if (has_word(d->client_apis, "OpenGL") && e->bind_api(EGL_OPENGL_API)) {
		d->api = "OpenGL";
	} else if (e->bind_api(EGL_OPENGL_ES_API)) {
		d->api = "OpenGL ES";
		attrs = gles_attrs;
		renderable = EGL_OPENGL_ES2_BIT;
	} else {
		EGL_FAIL("eglBindAPI");
	}
	EGLConfig cfg = EGL_NO_CONFIG_KHR;
	if (!has_word(dexts, "EGL_KHR_no_config_context") && !has_word(dexts, "EGL_MESA_configless_context")) {
		EGLint cattrs[] = {EGL_SURFACE_TYPE, EGL_PBUFFER_BIT, EGL_RENDERABLE_TYPE, renderable, EGL_NONE};
		EGLint ncfg = 0;
		if (!e->choose_config(dpy, cattrs, &cfg, 1, &ncfg) || ncfg < 1)
			EGL_FAIL("eglChooseConfig");
	}
	ctx = e->create_context(dpy, cfg, EGL_NO_CONTEXT, attrs);
	if (ctx == EGL_NO_CONTEXT)
		EGL_FAIL("eglCreateContext");
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
