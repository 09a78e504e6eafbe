// shim.h: the C side of the adapter probe. Nothing here is linked against
// libvulkan or libEGL: both are dlopen'ed at run time and every entry point
// is looked up (Vulkan through vkGetInstanceProcAddr, EGL through dlsym and
// eglGetProcAddress), so a host without them still runs nodeprep and the
// probe can say which library it could not open and why.
#ifndef NODEPREP_SELFTEST_SHIM_H
#define NODEPREP_SELFTEST_SHIM_H

#define VK_NO_PROTOTYPES
#define EGL_EGL_PROTOTYPES 0
#include <stddef.h>
#include <stdint.h>
#include <vulkan/vulkan.h>
#include <EGL/egl.h>
#include <EGL/eglext.h>

#define NP_MAX_ADAPTERS 64
#define NP_MAX_EGL_DEVICES 32
#define NP_STR 256
#define NP_EXTS 4096
#define NP_FORMATS 9

// ---- Vulkan ----

typedef struct np_vk np_vk;

// np_vk_adapter is what the probe reads of one physical device.
typedef struct {
	char name[VK_MAX_PHYSICAL_DEVICE_NAME_SIZE];
	uint32_t vendor_id, device_id, device_type, api_version, driver_version;
	int has_id;
	uint8_t device_uuid[VK_UUID_SIZE];
	int has_driver;
	uint32_t driver_id;
	char driver_name[VK_MAX_DRIVER_NAME_SIZE];
	char driver_info[VK_MAX_DRIVER_INFO_SIZE];
	uint8_t conformance[4]; // major, minor, subminor, patch
	int has_pci;
	uint32_t pci_domain, pci_bus, pci_device, pci_function;
	// What wgpu-hal's expose_adapter reads (wgpu-hal/src/vulkan/adapter.rs):
	// whether the instance let the probe query properties2 (driver
	// properties and the chains below exist only then), the device
	// extensions its rules name, and queue family 0.
	int props2;
	int ext_storage_buffer_storage_class, ext_maintenance1, ext_swapchain_mutable_format;
	uint32_t queue_families, q0_flags, q0_timestamp_bits;
	// Limits and features wgpu derives its own from.
	VkPhysicalDeviceLimits limits;
	VkPhysicalDeviceFeatures features;
	int has_maint3;
	uint32_t max_per_set_descriptors;
	uint64_t max_memory_allocation_size;
	int has_maint4;
	uint64_t max_buffer_size;
	int has_multiview;
	uint32_t max_multiview_view_count;
	int has_subgroup;
	uint32_t subgroup_size, subgroup_stages, subgroup_ops;
	int has_subgroup_size_control;
	uint32_t min_subgroup_size, max_subgroup_size;
	int shader_f16; // shaderFloat16 with 16-bit storage buffer access
	// Supported feature bits the device creation enables as wgpu does.
	int feat_timeline, feat_robust_image, feat_zero_init, feat_int_dot, feat_int8;
	// optimalTilingFeatures of np_formats[i].
	uint32_t format_flags[NP_FORMATS];
} np_vk_adapter;

// np_vk_dispatch_result is one compute dispatch: the step that failed
// (NULL when none), its VkResult, and each step's time in ms.
typedef struct {
	const char *failed_step;
	int32_t result;
	double device_ms, resources_ms, pipeline_ms, submit_ms, wait_ms, readback_ms;
} np_vk_dispatch_result;

// np_vk_open dlopens the loader at path and resolves vkGetInstanceProcAddr.
// On failure it returns NULL and copies dlerror()'s text into err.
np_vk *np_vk_open(const char *path, char *err, size_t errlen);

// np_vk_create_instance creates the instance wgpu-hal creates
// (wgpu-hal/src/vulkan/instance.rs, Instance::init and desired_extensions):
// API version 1.3 when the loader is 1.1 or newer, else 1.0; engine
// "wgpu-hal"; every instance extension of wgpu's list the loader offers,
// named into exts (space-separated). It returns the VkResult of
// vkCreateInstance (or VK_ERROR_INITIALIZATION_FAILED when an entry point
// is missing, with its name in err).
int32_t np_vk_create_instance(np_vk *vk, uint32_t *loader_version, uint32_t *api_version,
			      char *exts, size_t extslen, char *err, size_t errlen);

// np_vk_adapters enumerates the physical devices into out (at most max) and
// sets *count. It returns the VkResult of vkEnumeratePhysicalDevices.
int32_t np_vk_adapters(np_vk *vk, np_vk_adapter *out, uint32_t max, uint32_t *count);

// np_vk_dispatch runs the compute shader on physical device index (whose
// adapter a says which features to enable, as wgpu does by default), on
// queue family 0 as wgpu does, over a
// buffer of count uint32 values prefilled with fill, waits on a fence for
// at most timeout_ns and copies the buffer into out. It returns
// VK_SUCCESS or the failing call's VkResult (VK_TIMEOUT when the fence did
// not signal; resources are then left alone, since the device still owns
// them).
int32_t np_vk_dispatch(np_vk *vk, uint32_t index, const np_vk_adapter *a, const uint32_t *spirv, size_t spirv_bytes,
		       uint32_t seed, uint32_t count, uint32_t fill, uint64_t timeout_ns,
		       uint32_t *out, np_vk_dispatch_result *res);

// ---- EGL ----

typedef struct np_egl np_egl;

// np_egl_device is what the probe reads of one EGL device.
typedef struct {
	char extensions[NP_EXTS];     // device extensions
	char drm_file[NP_STR];        // EGL_DRM_DEVICE_FILE_EXT
	char driver_name[NP_STR];     // EGL_DRIVER_NAME_EXT
	char device_vendor[NP_STR];   // EGL_VENDOR on the device (EGL_EXT_device_query_name)
	char device_renderer[NP_STR]; // EGL_RENDERER_EXT
	int has_uuid;
	uint8_t uuid[16]; // EGL_DEVICE_UUID_EXT
	const char *failed_step; // NULL when every step worked
	int32_t egl_error;
	int major, minor;
	char vendor[NP_STR];  // EGL_VENDOR of the display
	char version[NP_STR]; // EGL_VERSION
	char client_apis[NP_STR];
	const char *api; // "OpenGL" or "OpenGL ES"
	char gl_vendor[NP_STR], gl_renderer[NP_STR], gl_version[NP_STR];
	int gles_major, gles_minor; // the context's version (of api) from GL_VERSION; 0.0 when unparsable
	double init_ms, context_ms;
} np_egl_device;

// np_egl_open dlopens the EGL library at path and resolves the core entry
// points with dlsym. On failure it returns NULL with dlerror()'s text (or
// the missing symbol) in err.
np_egl *np_egl_open(const char *path, char *err, size_t errlen);

// np_egl_client_extensions copies eglQueryString(EGL_NO_DISPLAY,
// EGL_EXTENSIONS) into out ("" when the query fails).
void np_egl_client_extensions(np_egl *egl, char *out, size_t outlen);

// np_egl_devices resolves the device functions with eglGetProcAddress and
// queries the devices. It returns 0 on success; otherwise the name of the
// function that is missing or failed is copied into err.
int np_egl_devices(np_egl *egl, int max, int *count, char *err, size_t errlen);

// np_egl_probe_device opens device index on the device platform, reads its
// strings, makes a surfaceless, configless context current as wgpu's GL
// backend does (desktop OpenGL 3.3 where EGL offers OpenGL, else OpenGL ES
// 3) and reads the GL strings and the context's version. A context below
// OpenGL ES 3.0 (or OpenGL 3.3) is a failure. Failures are recorded in dev.
void np_egl_probe_device(np_egl *egl, int index, np_egl_device *dev);

#endif
