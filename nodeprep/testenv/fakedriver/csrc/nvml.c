/* A fake NVML with one GPU (FAKE_NVML_COUNT: that many, all alike). FAKE_FAULT happens in nvmlInit_v2 when
 * FAKE_NVML_AT=init, in nvmlDeviceGetName when FAKE_NVML_AT=query. It
 * has only the functions below and fabric.h's: every other query the
 * inventory makes (brand, PCI info, memory, ...) is a symbol it lacks. Its
 * GPU has no NVLink fabric unless FAKE_NVML_FABRIC says otherwise, and it
 * knows the fabric structures up to v3 (fabric.h). */
#include <stdio.h>
#include <string.h>
#include "fault.h"

#define NP_FABRIC_DEFAULT "not-supported"
#define NP_FABRIC_MAX_VERSION 3
#include "fabric.h"

typedef int nvmlReturn_t;
typedef void *nvmlDevice_t;
static int np_dev;

static void np_at(const char *where) {
	const char *at = getenv("FAKE_NVML_AT");
	if (at != NULL && strcmp(at, where) == 0)
		np_fault("fake NVML");
}

nvmlReturn_t nvmlInit_v2(void) { np_at("init"); return 0; }
nvmlReturn_t nvmlInit(void) { return nvmlInit_v2(); }
nvmlReturn_t nvmlShutdown(void) { return 0; }
const char *nvmlErrorString(nvmlReturn_t r) { return r == 0 ? "Success" : "Unknown Error"; }
nvmlReturn_t nvmlSystemGetDriverVersion(char *v, unsigned n) { snprintf(v, n, "999.1.2"); return 0; }
nvmlReturn_t nvmlSystemGetNVMLVersion(char *v, unsigned n) { snprintf(v, n, "12.999.1.2"); return 0; }
/* FAKE_NVML_COUNT GPUs (default 1), all the same fake device. */
nvmlReturn_t nvmlDeviceGetCount_v2(unsigned *c) {
	const char *n = getenv("FAKE_NVML_COUNT");
	*c = n != NULL ? (unsigned)atoi(n) : 1;
	return 0;
}
nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned i, nvmlDevice_t *d) { (void)i; *d = &np_dev; return 0; }
nvmlReturn_t nvmlDeviceGetUUID(nvmlDevice_t d, char *v, unsigned n) {
	(void)d;
	/* FAKE_NVML_UUID, when set (even empty), is the UUID, with success. */
	const char *u = getenv("FAKE_NVML_UUID");
	snprintf(v, n, "%s", u != NULL ? u : "GPU-12345678-1234-1234-1234-123456789abc");
	return 0;
}
nvmlReturn_t nvmlDeviceGetName(nvmlDevice_t d, char *v, unsigned n) {
	(void)d;
	np_at("query");
	snprintf(v, n, "NVIDIA Fake");
	return 0;
}
