/* A fake Vulkan ICD. Alone, the loader negotiates with it, it acts out
 * FAKE_FAULT there and then refuses the interface, so the loader has no
 * driver.
 *
 * With FAKE_ICD_WRAP naming a real ICD library (Mesa's lavapipe), it is
 * that driver with the changes FAKE_VK_FAULT lists (comma-separated), each
 * at the point where wgpu-hal reads it (wgpu-hal/src/vulkan/adapter.rs,
 * Instance::expose_adapter; instance.rs, Instance::init):
 *   queue-family-0-compute  family 0 can compute but not draw; the real
 *                           families (graphics first) follow from 1
 *   api-1.0                 the device says Vulkan 1.0
 *   hide:<extension>        the device does not list that extension
 *   conformance-0           the driver properties (and Vulkan 1.2
 *                           properties) report conformance 0.0.0.0
 *   crash-on-wgpu-instance  vkCreateInstance dies (SIGSEGV) when asked for
 *                           Vulkan 1.3 or any instance extension of wgpu's
 *   poison-egl              vkCreateInstance points the process's EGL
 *                           vendor search at a file that does not exist
 *                           (__EGL_VENDOR_LIBRARY_FILENAMES), as a driver
 *                           that changes its process's environment would:
 *                           EGL then fails in that process only
 * Everything else is the real driver's. Both the self-test's own tests and
 * the differential test against wgpu (wgpuoracle) use it. */
#define VK_NO_PROTOTYPES
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <vulkan/vulkan.h>
#include "fault.h"

typedef VkResult (*negotiate_fn)(uint32_t *);
typedef PFN_vkVoidFunction (*gpa_fn)(VkInstance, const char *);

static void *real_lib;
static negotiate_fn real_negotiate;
static gpa_fn real_gipa, real_gpdpa;
static VkInstance last_instance;

static int wrapping(void)
{
	if (real_lib != NULL)
		return 1;
	const char *path = getenv("FAKE_ICD_WRAP");
	if (path == NULL || *path == 0)
		return 0;
	real_lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
	if (real_lib == NULL) {
		fprintf(stderr, "fake ICD: cannot open %s: %s\n", path, dlerror());
		return 0;
	}
	real_negotiate = (negotiate_fn)dlsym(real_lib, "vk_icdNegotiateLoaderICDInterfaceVersion");
	real_gipa = (gpa_fn)dlsym(real_lib, "vk_icdGetInstanceProcAddr");
	real_gpdpa = (gpa_fn)dlsym(real_lib, "vk_icdGetPhysicalDeviceProcAddr");
	return real_gipa != NULL;
}

/* fault_is says whether FAKE_VK_FAULT's comma-separated list holds what. */
static int fault_is(const char *what)
{
	const char *v = getenv("FAKE_VK_FAULT");
	size_t n = strlen(what);
	while (v != NULL && *v) {
		const char *end = strchr(v, ',');
		size_t len = end ? (size_t)(end - v) : strlen(v);
		if (len == n && strncmp(v, what, n) == 0)
			return 1;
		v = end ? end + 1 : NULL;
	}
	return 0;
}

static int hidden(const char *ext)
{
	char want[VK_MAX_EXTENSION_NAME_SIZE + 8];
	snprintf(want, sizeof want, "hide:%s", ext);
	return fault_is(want);
}

static PFN_vkVoidFunction real_fn(const char *name)
{
	return real_gipa(last_instance, name);
}

static VkResult VKAPI_CALL fake_CreateInstance(const VkInstanceCreateInfo *ci, const VkAllocationCallbacks *alloc, VkInstance *out)
{
	if (fault_is("crash-on-wgpu-instance")) {
		uint32_t v = ci->pApplicationInfo ? ci->pApplicationInfo->apiVersion : 0;
		int wgpu_ext = 0;
		for (uint32_t i = 0; i < ci->enabledExtensionCount; i++)
			if (strcmp(ci->ppEnabledExtensionNames[i], "VK_KHR_get_physical_device_properties2") == 0 ||
			    strcmp(ci->ppEnabledExtensionNames[i], "VK_KHR_surface") == 0)
				wgpu_ext = 1;
		if (v >= VK_API_VERSION_1_3 || wgpu_ext) {
			fprintf(stderr, "fake ICD: instance of Vulkan %u.%u with %u extension(s): crashing\n",
				VK_API_VERSION_MAJOR(v), VK_API_VERSION_MINOR(v), ci->enabledExtensionCount);
			fflush(stderr);
			/* A real fault, not raise(): a process with a SIGSEGV
			 * handler (Deno's runtime has one) returns from raise() and
			 * goes on, where a faulting access kills it. */
			volatile int *p = (volatile int *)16;
			*p = 1;
		}
	}
	if (fault_is("poison-egl"))
		setenv("__EGL_VENDOR_LIBRARY_FILENAMES", "/nonexistent/poisoned-by-the-vulkan-driver.json", 1);
	PFN_vkCreateInstance create = (PFN_vkCreateInstance)real_gipa(NULL, "vkCreateInstance");
	VkResult r = create(ci, alloc, out);
	if (r == VK_SUCCESS)
		last_instance = *out;
	return r;
}

static void patch_properties(VkPhysicalDeviceProperties *p, void *next)
{
	if (fault_is("api-1.0"))
		p->apiVersion = VK_API_VERSION_1_0;
	if (!fault_is("conformance-0"))
		return;
	for (VkBaseOutStructure *s = next; s != NULL; s = s->pNext) {
		if (s->sType == VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_DRIVER_PROPERTIES)
			memset(&((VkPhysicalDeviceDriverProperties *)s)->conformanceVersion, 0, sizeof(VkConformanceVersion));
		if (s->sType == VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_2_PROPERTIES)
			memset(&((VkPhysicalDeviceVulkan12Properties *)s)->conformanceVersion, 0, sizeof(VkConformanceVersion));
	}
}

static void VKAPI_CALL fake_GetPhysicalDeviceProperties(VkPhysicalDevice pd, VkPhysicalDeviceProperties *p)
{
	((PFN_vkGetPhysicalDeviceProperties)real_fn("vkGetPhysicalDeviceProperties"))(pd, p);
	patch_properties(p, NULL);
}

static void VKAPI_CALL fake_GetPhysicalDeviceProperties2(VkPhysicalDevice pd, VkPhysicalDeviceProperties2 *p)
{
	((PFN_vkGetPhysicalDeviceProperties2)real_fn("vkGetPhysicalDeviceProperties2"))(pd, p);
	patch_properties(&p->properties, p->pNext);
}

static VkResult VKAPI_CALL fake_EnumerateDeviceExtensionProperties(VkPhysicalDevice pd, const char *layer, uint32_t *count, VkExtensionProperties *props)
{
	PFN_vkEnumerateDeviceExtensionProperties real = (PFN_vkEnumerateDeviceExtensionProperties)real_fn("vkEnumerateDeviceExtensionProperties");
	uint32_t n = 0;
	VkResult r = real(pd, layer, &n, NULL);
	if (r != VK_SUCCESS)
		return r;
	VkExtensionProperties *all = calloc(n ? n : 1, sizeof *all);
	if (all == NULL)
		return VK_ERROR_OUT_OF_HOST_MEMORY;
	r = real(pd, layer, &n, all);
	uint32_t kept = 0;
	for (uint32_t i = 0; i < n; i++) {
		if (hidden(all[i].extensionName))
			continue;
		if (props != NULL) {
			if (kept >= *count) {
				free(all);
				return VK_INCOMPLETE;
			}
			props[kept] = all[i];
		}
		kept++;
	}
	free(all);
	*count = kept;
	return r < 0 ? r : VK_SUCCESS;
}

/* qf_families fills all (room for 16) with the driver's queue families,
 * after a compute-only family 0 under queue-family-0-compute, and
 * returns their number. */
static uint32_t qf_families(VkPhysicalDevice pd, VkQueueFamilyProperties *all)
{
	PFN_vkGetPhysicalDeviceQueueFamilyProperties real = (PFN_vkGetPhysicalDeviceQueueFamilyProperties)real_fn("vkGetPhysicalDeviceQueueFamilyProperties");
	uint32_t n = 0;
	real(pd, &n, NULL);
	if (n > 15)
		n = 15;
	real(pd, &n, all + 1);
	all[0] = all[1];
	all[0].queueFlags = VK_QUEUE_COMPUTE_BIT | VK_QUEUE_TRANSFER_BIT;
	return n + 1;
}

static void VKAPI_CALL fake_GetPhysicalDeviceQueueFamilyProperties(VkPhysicalDevice pd, uint32_t *count, VkQueueFamilyProperties *props)
{
	if (!fault_is("queue-family-0-compute")) {
		((PFN_vkGetPhysicalDeviceQueueFamilyProperties)real_fn("vkGetPhysicalDeviceQueueFamilyProperties"))(pd, count, props);
		return;
	}
	VkQueueFamilyProperties all[16];
	uint32_t n = qf_families(pd, all);
	if (props == NULL) {
		*count = n;
		return;
	}
	if (*count > n)
		*count = n;
	memcpy(props, all, *count * sizeof *props);
}

/* The same through the Vulkan 1.1 query: the families' own properties
 * (no pNext structure is filled for the added family 0). */
static void VKAPI_CALL fake_GetPhysicalDeviceQueueFamilyProperties2(VkPhysicalDevice pd, uint32_t *count, VkQueueFamilyProperties2 *props)
{
	if (!fault_is("queue-family-0-compute")) {
		((PFN_vkGetPhysicalDeviceQueueFamilyProperties2)real_fn("vkGetPhysicalDeviceQueueFamilyProperties2"))(pd, count, props);
		return;
	}
	VkQueueFamilyProperties all[16];
	uint32_t n = qf_families(pd, all);
	if (props == NULL) {
		*count = n;
		return;
	}
	if (*count > n)
		*count = n;
	for (uint32_t i = 0; i < *count; i++)
		props[i].queueFamilyProperties = all[i];
}

static PFN_vkVoidFunction intercept(const char *name)
{
	if (strcmp(name, "vkCreateInstance") == 0)
		return (PFN_vkVoidFunction)fake_CreateInstance;
	if (strcmp(name, "vkGetPhysicalDeviceProperties") == 0)
		return (PFN_vkVoidFunction)fake_GetPhysicalDeviceProperties;
	if (strcmp(name, "vkGetPhysicalDeviceProperties2") == 0 || strcmp(name, "vkGetPhysicalDeviceProperties2KHR") == 0)
		return (PFN_vkVoidFunction)fake_GetPhysicalDeviceProperties2;
	if (strcmp(name, "vkEnumerateDeviceExtensionProperties") == 0)
		return (PFN_vkVoidFunction)fake_EnumerateDeviceExtensionProperties;
	if (strcmp(name, "vkGetPhysicalDeviceQueueFamilyProperties") == 0)
		return (PFN_vkVoidFunction)fake_GetPhysicalDeviceQueueFamilyProperties;
	if (strcmp(name, "vkGetPhysicalDeviceQueueFamilyProperties2") == 0 || strcmp(name, "vkGetPhysicalDeviceQueueFamilyProperties2KHR") == 0)
		return (PFN_vkVoidFunction)fake_GetPhysicalDeviceQueueFamilyProperties2;
	return NULL;
}

int vk_icdNegotiateLoaderICDInterfaceVersion(uint32_t *version)
{
	np_fault("fake ICD");
	if (wrapping() && real_negotiate != NULL)
		return real_negotiate(version);
	(void)version;
	return -9; /* VK_ERROR_INCOMPATIBLE_DRIVER */
}

void *vk_icdGetInstanceProcAddr(void *instance, const char *name)
{
	if (!wrapping())
		return NULL;
	PFN_vkVoidFunction f = intercept(name);
	if (f != NULL)
		return (void *)f;
	return (void *)real_gipa((VkInstance)instance, name);
}

void *vk_icdGetPhysicalDeviceProcAddr(void *instance, const char *name)
{
	if (!wrapping() || real_gpdpa == NULL)
		return NULL;
	PFN_vkVoidFunction f = intercept(name);
	if (f != NULL)
		return (void *)f;
	return (void *)real_gpdpa((VkInstance)instance, name);
}
