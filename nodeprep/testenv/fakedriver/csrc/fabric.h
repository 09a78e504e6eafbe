/* nvmlDeviceGetGpuFabricInfoV and nvmlDeviceGetGpuFabricInfo for the fake
 * NVMLs: the structures follow nvml.h (nvmlGpuFabricInfo_t, _v2_t, _v3_t;
 * go-nvml's GpuFabricInfo, GpuFabricInfo_v2, GpuFabricInfo_v3). The
 * includer defines NP_FABRIC_DEFAULT (the state when FAKE_NVML_FABRIC is
 * unset) and NP_FABRIC_MAX_VERSION (the newest structure version its
 * driver knows; a newer one gets NVML_ERROR_ARGUMENT_VERSION_MISMATCH, as
 * a real driver answers).
 *
 * FAKE_NVML_FABRIC: not-supported (NVML_GPU_FABRIC_STATE_NOT_SUPPORTED),
 * not-started, in-progress, completed (success, healthy mask), error
 * (completed with NVML_ERROR_UNKNOWN), degraded (completed, bandwidth
 * degraded and a route unhealthy), unsupported-call (the function answers
 * NVML_ERROR_NOT_SUPPORTED). FAKE_NVML_FABRIC_VERSION overrides
 * NP_FABRIC_MAX_VERSION (1: only nvmlDeviceGetGpuFabricInfo answers). */
#include <stdlib.h>
#include <string.h>

#define NP_FABRIC_ERROR_NOT_SUPPORTED 3
#define NP_FABRIC_ERROR_UNKNOWN 999
#define NP_FABRIC_ERROR_ARGUMENT_VERSION_MISMATCH 25
/* DEGRADED_BW_FALSE, ROUTE_RECOVERY_FALSE, ROUTE_UNHEALTHY_FALSE and
 * ACCESS_TIMEOUT_RECOVERY_FALSE: gpu.SimulatedFabricHealthMask. */
#define NP_FABRIC_HEALTHY_MASK 0xaau
/* DEGRADED_BW_TRUE and ROUTE_UNHEALTHY_TRUE, the rest as healthy. */
#define NP_FABRIC_DEGRADED_MASK 0x99u

typedef struct {
	unsigned char clusterUuid[16];
	int status;
	unsigned cliqueId;
	unsigned char state;
} np_fabric_v1;

typedef struct {
	unsigned version;
	unsigned char clusterUuid[16];
	int status;
	unsigned cliqueId;
	unsigned char state;
	unsigned healthMask;
	unsigned char healthSummary;
} np_fabric_v3;

typedef struct {
	unsigned version;
	unsigned char clusterUuid[16];
	int status;
	unsigned cliqueId;
	unsigned char state;
	unsigned healthMask;
} np_fabric_v2;

/* np_fabric fills the fields every version has; returns nonzero for
 * unsupported-call. */
static int np_fabric(unsigned char *state, int *status, unsigned *mask) {
	const char *f = getenv("FAKE_NVML_FABRIC");
	if (f == NULL || *f == 0)
		f = NP_FABRIC_DEFAULT;
	*status = 0;
	*mask = 0;
	if (strcmp(f, "unsupported-call") == 0)
		return 1;
	if (strcmp(f, "not-started") == 0)
		*state = 1;
	else if (strcmp(f, "in-progress") == 0)
		*state = 2;
	else if (strcmp(f, "completed") == 0 || strcmp(f, "error") == 0 || strcmp(f, "degraded") == 0) {
		*state = 3;
		*mask = strcmp(f, "degraded") == 0 ? NP_FABRIC_DEGRADED_MASK : NP_FABRIC_HEALTHY_MASK;
		if (strcmp(f, "error") == 0)
			*status = NP_FABRIC_ERROR_UNKNOWN;
	} else
		*state = 0;
	return 0;
}

static unsigned np_fabric_max_version(void) {
	const char *v = getenv("FAKE_NVML_FABRIC_VERSION");
	return v != NULL && *v != 0 ? (unsigned)atoi(v) : NP_FABRIC_MAX_VERSION;
}

int nvmlDeviceGetGpuFabricInfo(void *d, np_fabric_v1 *info) {
	(void)d;
	if (info == NULL)
		return 2;
	memset(info, 0, sizeof *info);
	unsigned mask;
	if (np_fabric(&info->state, &info->status, &mask))
		return NP_FABRIC_ERROR_NOT_SUPPORTED;
	return 0;
}

int nvmlDeviceGetGpuFabricInfoV(void *d, np_fabric_v3 *info) {
	(void)d;
	if (info == NULL)
		return 2;
	unsigned version = info->version >> 24, size = info->version & 0xffffff;
	if (version < 2 || version > 3 || version > np_fabric_max_version() ||
	    size != (version == 3 ? sizeof(np_fabric_v3) : sizeof(np_fabric_v2)))
		return NP_FABRIC_ERROR_ARGUMENT_VERSION_MISMATCH;
	unsigned char state = 0;
	int status;
	unsigned mask;
	if (np_fabric(&state, &status, &mask))
		return NP_FABRIC_ERROR_NOT_SUPPORTED;
	memset(info->clusterUuid, 0, sizeof info->clusterUuid);
	info->status = status;
	info->cliqueId = 0;
	info->state = state;
	info->healthMask = mask;
	if (version == 3)
		info->healthSummary = 0; /* NVML_GPU_FABRIC_HEALTH_SUMMARY_NOT_SUPPORTED */
	return 0;
}
