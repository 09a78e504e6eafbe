/* The CUDA probe's C side (probe.c): libcuda.so.1 dlopened, its driver
 * API called through dlsym. */
#ifndef NP_CUDAPROBE_H
#define NP_CUDAPROBE_H

#define NP_CU_MAX_DEVICES 64

/* One failed call: its name, its CUresult, the library's name and text
 * for it (cuGetErrorName / cuGetErrorString) and, for the JIT, its log. */
struct np_cu_fail {
	const char *step; /* NULL: nothing failed */
	int result;
	char name[64];
	char text[256];
	char log[512];
};

struct np_cu_device {
	int ordinal;
	char name[256];
	unsigned char uuid[16];
	int has_uuid;
	int cc_major, cc_minor;
	struct np_cu_fail fail;
	int memory_verified; /* the host-to-device-to-host copy came back whole */
	int launched;        /* the kernel ran to cuCtxSynchronize */
	int wrong;           /* elements the kernel got wrong */
	unsigned first_index, first_got, first_want;
	double uuid_ms, context_ms, memory_ms, module_ms, launch_ms, verify_ms, total_ms;
};

struct np_cu_report {
	char dlerr[1024];
	struct np_cu_fail fail; /* dlopen, dlsym, cuInit, cuDeviceGetCount */
	int driver_version;     /* cuDriverGetVersion: 12040 is CUDA 12.4; 0 unknown */
	int count;              /* cuDeviceGetCount */
	int probed;             /* devices probed (count, at most NP_CU_MAX_DEVICES) */
	double load_ms, init_ms, count_ms, devices_ms;
	struct np_cu_device dev[NP_CU_MAX_DEVICES];
};

int np_cu_probe(const char *lib, const char *ptx, unsigned seed, unsigned elements, struct np_cu_report *r);

#endif
