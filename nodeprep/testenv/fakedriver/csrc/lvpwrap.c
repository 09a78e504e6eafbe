/* A Vulkan ICD that is Mesa's lavapipe with one property changed: it
 * loads the real lavapipe library (NP_LVPWRAP_LIB, its path) and hands
 * the loader lavapipe's own functions, except the few it wraps to act out
 * the adapter shapes of NP_LVPWRAP (a comma-separated list):
 *
 *   qf0-compute-only        queue family 0 reported without GRAPHICS
 *   api-1.0                 the device reports apiVersion 1.0.0
 *   hide:<extension>        the device does not list that extension
 *   conformance-0           VkPhysicalDeviceDriverProperties' (and
 *                           Vulkan12Properties') conformanceVersion 0.0.0.0
 *   crash-instance-1.2      vkCreateInstance aborts when the application
 *                           asks for Vulkan 1.2 or newer (as wgpu does;
 *                           an instance of 1.1 is created)
 *
 * These are the adapter properties wgpu-hal's Vulkan backend judges
 * (wgpu-hal/src/vulkan/adapter.rs, expose_adapter and the instance it
 * creates), on a real Vulkan implementation: the differential test's
 * conditions. Everything else is lavapipe's. */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <vulkan/vulkan.h>

typedef PFN_vkVoidFunction (*np_gipa_t)(VkInstance, const char *);
typedef VkResult (*np_negotiate_t)(uint32_t *);

static void *np_lib;
static np_gipa_t np_gipa, np_gpdpa;
static np_negotiate_t np_negotiate;

static PFN_vkCreateInstance real_create_instance;
static PFN_vkGetPhysicalDeviceProperties real_props;
static PFN_vkGetPhysicalDeviceProperties2 real_props2;
static PFN_vkGetPhysicalDeviceQueueFamilyProperties real_qfp;
static PFN_vkGetPhysicalDeviceQueueFamilyProperties2 real_qfp2;
static PFN_vkEnumerateDeviceExtensionProperties real_ext;

static int np_has(const char *fault) {
	const char *v = getenv("NP_LVPWRAP");
	size_t n = strlen(fault);
	while (v && *v) {
		const char *end = strchr(v, ',');
		size_t len = end ? (size_t)(end - v) : strlen(v);
		if (len == n && strncmp(v, fault, n) == 0)
			return 1;
		v = end ? end + 1 : NULL;
	}
	return 0;
}

static int np_hidden(const char *ext) {
	char want[VK_MAX_EXTENSION_NAME_SIZE + 8];
	snprintf(want, sizeof want, "hide:%s", ext);
	return np_has(want);
}

static int np_load(void) {
	if (np_lib)
		return 1;
	const char *path = getenv("NP_LVPWRAP_LIB");
	if (!path || !(np_lib = dlopen(path, RTLD_NOW | RTLD_LOCAL))) {
		fprintf(stderr, "lvpwrap: cannot load lavapipe (NP_LVPWRAP_LIB=%s): %s\n", path ? path : "", dlerror());
		return 0;
	}
	np_gipa = (np_gipa_t)dlsym(np_lib, "vk_icdGetInstanceProcAddr");
	np_gpdpa = (np_gipa_t)dlsym(np_lib, "vk_icdGetPhysicalDeviceProcAddr");
	np_negotiate = (np_negotiate_t)dlsym(np_lib, "vk_icdNegotiateLoaderICDInterfaceVersion");
	return np_gipa != NULL && np_negotiate != NULL;
}

VKAPI_ATTR VkResult VKAPI_CALL vk_icdNegotiateLoaderICDInterfaceVersion(uint32_t *version) {
	if (!np_load())
		return VK_ERROR_INCOMPATIBLE_DRIVER;
	return np_negotiate(version);
}

static VKAPI_ATTR VkResult VKAPI_CALL np_create_instance(const VkInstanceCreateInfo *ci, const VkAllocationCallbacks *a, VkInstance *out) {
	if (np_has("crash-instance-1.2") && ci->pApplicationInfo && ci->pApplicationInfo->apiVersion >= VK_API_VERSION_1_2) {
		fprintf(stderr, "lvpwrap: crash-instance-1.2: aborting in vkCreateInstance\n");
		abort();
	}
	return real_create_instance(ci, a, out);
}

static void np_fix_props(VkPhysicalDeviceProperties *p) {
	if (np_has("api-1.0"))
		p->apiVersion = VK_API_VERSION_1_0;
}

static VKAPI_ATTR void VKAPI_CALL np_props(VkPhysicalDevice pd, VkPhysicalDeviceProperties *p) {
	real_props(pd, p);
	np_fix_props(p);
}

static VKAPI_ATTR void VKAPI_CALL np_props2(VkPhysicalDevice pd, VkPhysicalDeviceProperties2 *p) {
	real_props2(pd, p);
	np_fix_props(&p->properties);
	if (!np_has("conformance-0"))
		return;
	for (VkBaseOutStructure *s = (VkBaseOutStructure *)p->pNext; s; s = s->pNext) {
		if (s->sType == VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_DRIVER_PROPERTIES)
			memset(&((VkPhysicalDeviceDriverProperties *)s)->conformanceVersion, 0, sizeof(VkConformanceVersion));
		if (s->sType == VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_2_PROPERTIES)
			memset(&((VkPhysicalDeviceVulkan12Properties *)s)->conformanceVersion, 0, sizeof(VkConformanceVersion));
	}
}

static VKAPI_ATTR void VKAPI_CALL np_qfp(VkPhysicalDevice pd, uint32_t *n, VkQueueFamilyProperties *q) {
	real_qfp(pd, n, q);
	if (q && *n > 0 && np_has("qf0-compute-only"))
		q[0].queueFlags &= ~VK_QUEUE_GRAPHICS_BIT;
}

static VKAPI_ATTR void VKAPI_CALL np_qfp2(VkPhysicalDevice pd, uint32_t *n, VkQueueFamilyProperties2 *q) {
	real_qfp2(pd, n, q);
	if (q && *n > 0 && np_has("qf0-compute-only"))
		q[0].queueFamilyProperties.queueFlags &= ~VK_QUEUE_GRAPHICS_BIT;
}

static VKAPI_ATTR VkResult VKAPI_CALL np_ext(VkPhysicalDevice pd, const char *layer, uint32_t *n, VkExtensionProperties *out) {
	uint32_t all = 0;
	VkResult r = real_ext(pd, layer, &all, NULL);
	if (r != VK_SUCCESS)
		return r;
	VkExtensionProperties *e = calloc(all ? all : 1, sizeof *e);
	if (!e)
		return VK_ERROR_OUT_OF_HOST_MEMORY;
	r = real_ext(pd, layer, &all, e);
	if (r < 0) {
		free(e);
		return r;
	}
	uint32_t kept = 0;
	for (uint32_t i = 0; i < all; i++)
		if (!np_hidden(e[i].extensionName))
			e[kept++] = e[i];
	if (!out) {
		*n = kept;
		free(e);
		return VK_SUCCESS;
	}
	uint32_t copy = *n < kept ? *n : kept;
	memcpy(out, e, copy * sizeof *e);
	*n = copy;
	free(e);
	return copy < kept ? VK_INCOMPLETE : VK_SUCCESS;
}

/* np_wrap returns the wrapper of name, keeping lavapipe's function as
 * the one it calls, or real itself when name is not wrapped. */
static PFN_vkVoidFunction np_wrap(const char *name, PFN_vkVoidFunction real) {
	if (!real)
		return NULL;
#define NP_WRAP(n, slot, fn)                      \
	if (strcmp(name, n) == 0) {               \
		slot = (__typeof__(slot))real;    \
		return (PFN_vkVoidFunction)fn;    \
	}
	NP_WRAP("vkCreateInstance", real_create_instance, np_create_instance);
	NP_WRAP("vkGetPhysicalDeviceProperties", real_props, np_props);
	NP_WRAP("vkGetPhysicalDeviceProperties2", real_props2, np_props2);
	NP_WRAP("vkGetPhysicalDeviceProperties2KHR", real_props2, np_props2);
	NP_WRAP("vkGetPhysicalDeviceQueueFamilyProperties", real_qfp, np_qfp);
	NP_WRAP("vkGetPhysicalDeviceQueueFamilyProperties2", real_qfp2, np_qfp2);
	NP_WRAP("vkGetPhysicalDeviceQueueFamilyProperties2KHR", real_qfp2, np_qfp2);
	NP_WRAP("vkEnumerateDeviceExtensionProperties", real_ext, np_ext);
#undef NP_WRAP
	return real;
}

VKAPI_ATTR PFN_vkVoidFunction VKAPI_CALL vk_icdGetInstanceProcAddr(VkInstance instance, const char *name) {
	if (!np_load())
		return NULL;
	return np_wrap(name, np_gipa(instance, name));
}

VKAPI_ATTR PFN_vkVoidFunction VKAPI_CALL vk_icdGetPhysicalDeviceProcAddr(VkInstance instance, const char *name) {
	if (!np_load() || !np_gpdpa)
		return NULL;
	return np_wrap(name, np_gpdpa(instance, name));
}
