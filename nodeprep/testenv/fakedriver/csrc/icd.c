/* A fake Vulkan ICD: the loader negotiates with it, and it acts out
 * FAKE_FAULT there; it then refuses the interface, so the loader has no
 * driver. */
#include <stdint.h>
#include <stdio.h>
#include "fault.h"

int vk_icdNegotiateLoaderICDInterfaceVersion(uint32_t *version) {
	np_fault("fake ICD");
	(void)version;
	return -9; /* VK_ERROR_INCOMPATIBLE_DRIVER */
}

void *vk_icdGetInstanceProcAddr(void *instance, const char *name) {
	(void)instance;
	(void)name;
	return NULL;
}
