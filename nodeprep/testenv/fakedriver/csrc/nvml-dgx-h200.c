/* A fake NVML (libnvidia-ml.so.1) that reports the simulated DGX H200 of
 * `nodeprep --simulate dgx-h200` (nodeprep/gpu: Simulated): eight
 * "NVIDIA H200 141GB HBM3e", driver 550.54.15, CUDA 12.4, the same UUIDs,
 * minor numbers (= index) and PCI bus ids, MIG off, healthy. It lets the
 * real NVIDIA container toolkit (nvidia-ctk cdi generate, the runtime's
 * jit-cdi mode) run on a machine with no GPU: it implements what
 * nvidia-ctk 1.17 and 1.20 call through go-nvml and go-nvlib, and the
 * queries nodeprep's inventory makes. The types follow nvml.h's ABI
 * (go-nvml's pkg/nvml/nvml.h): a handle is an opaque pointer, strings are
 * NUL-terminated into the caller's buffer, 0 is NVML_SUCCESS. Its GPUs'
 * NVLink fabric is registered (completed, success, a healthy mask), as
 * the simulated servers' is; as a 550 driver it knows the fabric
 * structures up to v2; FAKE_NVML_FABRIC sets another state (fabric.h).
 * The cluster UUID is zero, so go-nvlib's IsFabricAttached (the device
 * plugin's IMEX cliques) stays false. */
#include <stdio.h>
#include <string.h>

#define NP_FABRIC_DEFAULT "completed"
#define NP_FABRIC_MAX_VERSION 2
#include "fabric.h"

typedef int nvmlReturn_t;
enum {
	NVML_SUCCESS = 0,
	NVML_ERROR_INVALID_ARGUMENT = 2,
	NVML_ERROR_NOT_SUPPORTED = 3,
	NVML_ERROR_INSUFFICIENT_SIZE = 7,
	NVML_ERROR_NOT_FOUND = 6,
};

typedef struct {
	char busIdLegacy[16];
	unsigned domain, bus, device, pciDeviceId, pciSubSystemId;
	char busId[32];
} nvmlPciInfo_t;

typedef struct {
	unsigned long long total, free, used;
} nvmlMemory_t;

struct np_gpu {
	const char *uuid;
	unsigned bus;
};

/* gpu.SimulatedUUID("dgx-h200", i) and the bus of each index. */
static const struct np_gpu np_gpus[] = {
	{"GPU-228ca55b-c816-53ac-b2f8-4d631ef053c9", 0x18},
	{"GPU-93f01ee3-a0ff-5c5b-beb8-c9b1f0442b87", 0x2a},
	{"GPU-947a0c76-18c5-5065-ba69-a701645a2ff2", 0x3a},
	{"GPU-66f687d7-8698-5b78-a4ee-cd7c51720fb2", 0x5d},
	{"GPU-f5233a6e-3517-5784-9085-2b373f37b41d", 0x9a},
	{"GPU-f971f047-1667-583b-9b75-704925fd9923", 0xab},
	{"GPU-4e1df4c3-8cce-515a-b4dd-04ed51455871", 0xba},
	{"GPU-9c67b49d-6d94-57fb-b26a-7f763c3063cb", 0xdb},
};
/* -DNP_COUNT=n reports only the first n GPUs (a one-GPU host, nixos-gh200). */
#ifndef NP_COUNT
#define NP_COUNT 8
#endif
#define NP_N (NP_COUNT < 8 ? NP_COUNT : 8)
#define NP_H200_DEVICE_ID 0x233510de /* H200 SXM: device 0x2335, vendor 0x10de */

typedef const struct np_gpu *nvmlDevice_t;

static int np_index(nvmlDevice_t d) {
	if (d < np_gpus || d >= np_gpus + NP_N)
		return -1;
	return (int)(d - np_gpus);
}

static nvmlReturn_t np_str(char *buf, unsigned n, const char *s) {
	if (buf == NULL)
		return NVML_ERROR_INVALID_ARGUMENT;
	if (strlen(s) + 1 > n)
		return NVML_ERROR_INSUFFICIENT_SIZE;
	memcpy(buf, s, strlen(s) + 1);
	return NVML_SUCCESS;
}

#define NP_DEV(d)                                  \
	int i = np_index(d);                       \
	if (i < 0)                                 \
		return NVML_ERROR_INVALID_ARGUMENT

nvmlReturn_t nvmlInit_v2(void) { return NVML_SUCCESS; }
nvmlReturn_t nvmlInit(void) { return NVML_SUCCESS; }
nvmlReturn_t nvmlInitWithFlags(unsigned flags) { (void)flags; return NVML_SUCCESS; }
nvmlReturn_t nvmlShutdown(void) { return NVML_SUCCESS; }

const char *nvmlErrorString(nvmlReturn_t r) {
	switch (r) {
	case NVML_SUCCESS: return "Success";
	case NVML_ERROR_INVALID_ARGUMENT: return "Invalid Argument";
	case NVML_ERROR_NOT_SUPPORTED: return "Not Supported";
	case NVML_ERROR_NOT_FOUND: return "Not Found";
	case NVML_ERROR_INSUFFICIENT_SIZE: return "Insufficient Size";
	}
	return "Unknown Error";
}

nvmlReturn_t nvmlSystemGetDriverVersion(char *v, unsigned n) { return np_str(v, n, "550.54.15"); }
nvmlReturn_t nvmlSystemGetNVMLVersion(char *v, unsigned n) { return np_str(v, n, "12.550.54.15"); }
nvmlReturn_t nvmlSystemGetCudaDriverVersion(int *v) { if (!v) return NVML_ERROR_INVALID_ARGUMENT; *v = 12040; return NVML_SUCCESS; }
nvmlReturn_t nvmlSystemGetCudaDriverVersion_v2(int *v) { return nvmlSystemGetCudaDriverVersion(v); }

nvmlReturn_t nvmlDeviceGetCount_v2(unsigned *c) { if (!c) return NVML_ERROR_INVALID_ARGUMENT; *c = NP_N; return NVML_SUCCESS; }
nvmlReturn_t nvmlDeviceGetCount(unsigned *c) { return nvmlDeviceGetCount_v2(c); }

nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned i, nvmlDevice_t *d) {
	if (d == NULL || i >= (unsigned)NP_N)
		return NVML_ERROR_INVALID_ARGUMENT;
	*d = &np_gpus[i];
	return NVML_SUCCESS;
}
nvmlReturn_t nvmlDeviceGetHandleByIndex(unsigned i, nvmlDevice_t *d) { return nvmlDeviceGetHandleByIndex_v2(i, d); }

nvmlReturn_t nvmlDeviceGetHandleByUUID(const char *uuid, nvmlDevice_t *d) {
	if (uuid == NULL || d == NULL)
		return NVML_ERROR_INVALID_ARGUMENT;
	for (int i = 0; i < NP_N; i++)
		if (strcmp(uuid, np_gpus[i].uuid) == 0) {
			*d = &np_gpus[i];
			return NVML_SUCCESS;
		}
	return NVML_ERROR_NOT_FOUND;
}

static void np_busid(int i, char *legacy, char *full) {
	if (legacy)
		snprintf(legacy, 16, "0000:%02x:00.0", np_gpus[i].bus);
	if (full)
		snprintf(full, 32, "00000000:%02x:00.0", np_gpus[i].bus);
}

nvmlReturn_t nvmlDeviceGetHandleByPciBusId_v2(const char *id, nvmlDevice_t *d) {
	if (id == NULL || d == NULL)
		return NVML_ERROR_INVALID_ARGUMENT;
	for (int i = 0; i < NP_N; i++) {
		char legacy[16], full[32];
		np_busid(i, legacy, full);
		if (strcasecmp(id, legacy) == 0 || strcasecmp(id, full) == 0) {
			*d = &np_gpus[i];
			return NVML_SUCCESS;
		}
	}
	return NVML_ERROR_NOT_FOUND;
}
nvmlReturn_t nvmlDeviceGetHandleByPciBusId(const char *id, nvmlDevice_t *d) { return nvmlDeviceGetHandleByPciBusId_v2(id, d); }

nvmlReturn_t nvmlDeviceGetUUID(nvmlDevice_t d, char *v, unsigned n) { NP_DEV(d); return np_str(v, n, np_gpus[i].uuid); }
nvmlReturn_t nvmlDeviceGetName(nvmlDevice_t d, char *v, unsigned n) { NP_DEV(d); return np_str(v, n, "NVIDIA H200 141GB HBM3e"); }
nvmlReturn_t nvmlDeviceGetIndex(nvmlDevice_t d, unsigned *v) { NP_DEV(d); if (!v) return NVML_ERROR_INVALID_ARGUMENT; *v = (unsigned)i; return NVML_SUCCESS; }
nvmlReturn_t nvmlDeviceGetMinorNumber(nvmlDevice_t d, unsigned *v) { NP_DEV(d); if (!v) return NVML_ERROR_INVALID_ARGUMENT; *v = (unsigned)i; return NVML_SUCCESS; }

nvmlReturn_t nvmlDeviceGetPciInfo_v3(nvmlDevice_t d, nvmlPciInfo_t *p) {
	NP_DEV(d);
	if (p == NULL)
		return NVML_ERROR_INVALID_ARGUMENT;
	memset(p, 0, sizeof *p);
	np_busid(i, p->busIdLegacy, p->busId);
	p->bus = np_gpus[i].bus;
	p->pciDeviceId = NP_H200_DEVICE_ID;
	return NVML_SUCCESS;
}
nvmlReturn_t nvmlDeviceGetPciInfo_v2(nvmlDevice_t d, nvmlPciInfo_t *p) { return nvmlDeviceGetPciInfo_v3(d, p); }
nvmlReturn_t nvmlDeviceGetPciInfo(nvmlDevice_t d, nvmlPciInfo_t *p) { return nvmlDeviceGetPciInfo_v3(d, p); }

/* MIG is off on every GPU (current and pending modes 0, NVML_DEVICE_MIG_DISABLE). */
nvmlReturn_t nvmlDeviceGetMigMode(nvmlDevice_t d, unsigned *cur, unsigned *pend) {
	NP_DEV(d);
	(void)i;
	if (!cur || !pend)
		return NVML_ERROR_INVALID_ARGUMENT;
	*cur = *pend = 0;
	return NVML_SUCCESS;
}
nvmlReturn_t nvmlDeviceGetMaxMigDeviceCount(nvmlDevice_t d, unsigned *c) { NP_DEV(d); (void)i; if (!c) return NVML_ERROR_INVALID_ARGUMENT; *c = 7; return NVML_SUCCESS; }
nvmlReturn_t nvmlDeviceGetMigDeviceHandleByIndex(nvmlDevice_t d, unsigned idx, nvmlDevice_t *m) { (void)d; (void)idx; (void)m; return NVML_ERROR_NOT_FOUND; }
nvmlReturn_t nvmlDeviceIsMigDeviceHandle(nvmlDevice_t d, unsigned *is) { NP_DEV(d); (void)i; if (!is) return NVML_ERROR_INVALID_ARGUMENT; *is = 0; return NVML_SUCCESS; }

/* What nodeprep's inventory reads besides, as a healthy DGX H200 reports it. */
nvmlReturn_t nvmlDeviceGetBrand(nvmlDevice_t d, int *b) { NP_DEV(d); (void)i; if (!b) return NVML_ERROR_INVALID_ARGUMENT; *b = 14; /* NVML_BRAND_NVIDIA */ return NVML_SUCCESS; }
nvmlReturn_t nvmlDeviceGetArchitecture(nvmlDevice_t d, unsigned *a) { NP_DEV(d); (void)i; if (!a) return NVML_ERROR_INVALID_ARGUMENT; *a = 9; /* NVML_DEVICE_ARCH_HOPPER */ return NVML_SUCCESS; }
nvmlReturn_t nvmlDeviceGetCudaComputeCapability(nvmlDevice_t d, int *maj, int *min) { NP_DEV(d); (void)i; if (!maj || !min) return NVML_ERROR_INVALID_ARGUMENT; *maj = 9; *min = 0; return NVML_SUCCESS; }
nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t d, nvmlMemory_t *m) {
	NP_DEV(d);
	(void)i;
	if (!m)
		return NVML_ERROR_INVALID_ARGUMENT;
	m->total = 144384ULL << 20;
	m->used = 0;
	m->free = m->total;
	return NVML_SUCCESS;
}
nvmlReturn_t nvmlDeviceGetPersistenceMode(nvmlDevice_t d, int *m) { NP_DEV(d); (void)i; if (!m) return NVML_ERROR_INVALID_ARGUMENT; *m = 1; return NVML_SUCCESS; }
nvmlReturn_t nvmlDeviceGetEccMode(nvmlDevice_t d, int *cur, int *pend) { NP_DEV(d); (void)i; if (!cur || !pend) return NVML_ERROR_INVALID_ARGUMENT; *cur = *pend = 1; return NVML_SUCCESS; }
nvmlReturn_t nvmlDeviceGetTotalEccErrors(nvmlDevice_t d, int type, int counter, unsigned long long *n) { NP_DEV(d); (void)i; (void)type; (void)counter; if (!n) return NVML_ERROR_INVALID_ARGUMENT; *n = 0; return NVML_SUCCESS; }
nvmlReturn_t nvmlDeviceGetRemappedRows(nvmlDevice_t d, unsigned *corr, unsigned *unc, unsigned *pend, unsigned *fail) {
	NP_DEV(d);
	(void)i;
	if (!corr || !unc || !pend || !fail)
		return NVML_ERROR_INVALID_ARGUMENT;
	*corr = *unc = *pend = *fail = 0;
	return NVML_SUCCESS;
}
nvmlReturn_t nvmlDeviceGetTemperature(nvmlDevice_t d, int sensor, unsigned *t) { NP_DEV(d); (void)sensor; if (!t) return NVML_ERROR_INVALID_ARGUMENT; *t = 30 + (unsigned)i; return NVML_SUCCESS; }

/* The topology the device plugin's preferred allocation reads
 * (go-gpuallocator internal/links: GetP2PLink, getAllNvLinkRemotePciInfo):
 * GPUs 0-3 and 4-7 share a CPU (NVML_TOPOLOGY_NODE), the halves meet
 * across CPUs (NVML_TOPOLOGY_SYSTEM); NVLink is not reported, which the
 * allocator skips. */
enum { NVML_TOPOLOGY_INTERNAL = 0, NVML_TOPOLOGY_NODE = 40, NVML_TOPOLOGY_SYSTEM = 50 };
nvmlReturn_t nvmlDeviceGetTopologyCommonAncestor(nvmlDevice_t a, nvmlDevice_t b, int *level) {
	int i = np_index(a), j = np_index(b);
	if (i < 0 || j < 0 || level == NULL)
		return NVML_ERROR_INVALID_ARGUMENT;
	*level = i == j ? NVML_TOPOLOGY_INTERNAL : i / 4 == j / 4 ? NVML_TOPOLOGY_NODE : NVML_TOPOLOGY_SYSTEM;
	return NVML_SUCCESS;
}
nvmlReturn_t nvmlDeviceGetNvLinkState(nvmlDevice_t d, unsigned link, int *active) { NP_DEV(d); (void)i; (void)link; (void)active; return NVML_ERROR_NOT_SUPPORTED; }
nvmlReturn_t nvmlDeviceGetNvLinkRemotePciInfo_v2(nvmlDevice_t d, unsigned link, nvmlPciInfo_t *p) { NP_DEV(d); (void)i; (void)link; (void)p; return NVML_ERROR_NOT_SUPPORTED; }
