/* The CUDA probe: libcuda.so.1 dlopened and its driver API called through
 * dlsym, with the few declarations below written from NVIDIA's public
 * documentation of the CUDA driver API (cuda.h's ABI: CUresult is an int,
 * 0 is CUDA_SUCCESS, handles are pointers, CUdeviceptr is 64-bit on a
 * 64-bit build). nodeprep does not include cuda.h: no CUDA toolkit is on
 * the machines that build it, nodeprep must build and run where no
 * NVIDIA driver is installed (the library is only dlopened), and the
 * probe needs a dozen calls. The functions are the _v2 entry points cuda.h
 * maps the plain names to since CUDA 3.2 (cuCtxCreate -> cuCtxCreate_v2). */
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "probe.h"

typedef int CUresult;
typedef int CUdevice;
typedef void *CUcontext;
typedef void *CUmodule;
typedef void *CUfunction;
typedef void *CUstream;
typedef unsigned long long CUdeviceptr;
typedef struct { char bytes[16]; } CUuuid;

enum {
	NP_CU_ATTR_CC_MAJOR = 75, /* CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR */
	NP_CU_ATTR_CC_MINOR = 76, /* CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR */
	NP_CU_JIT_ERROR_LOG_BUFFER = 5,
	NP_CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES = 6,
};

static struct {
	CUresult (*Init)(unsigned);
	CUresult (*DriverGetVersion)(int *);
	CUresult (*DeviceGetCount)(int *);
	CUresult (*DeviceGet)(CUdevice *, int);
	CUresult (*DeviceGetName)(char *, int, CUdevice);
	CUresult (*DeviceGetUuid)(CUuuid *, CUdevice);
	CUresult (*DeviceGetAttribute)(int *, int, CUdevice);
	CUresult (*CtxCreate)(CUcontext *, unsigned, CUdevice);
	CUresult (*CtxDestroy)(CUcontext);
	CUresult (*CtxSynchronize)(void);
	CUresult (*MemAlloc)(CUdeviceptr *, size_t);
	CUresult (*MemFree)(CUdeviceptr);
	CUresult (*MemcpyHtoD)(CUdeviceptr, const void *, size_t);
	CUresult (*MemcpyDtoH)(void *, CUdeviceptr, size_t);
	CUresult (*ModuleLoadDataEx)(CUmodule *, const void *, unsigned, int *, void **);
	CUresult (*ModuleGetFunction)(CUfunction *, CUmodule, const char *);
	CUresult (*ModuleUnload)(CUmodule);
	CUresult (*LaunchKernel)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, CUstream, void **, void **);
	CUresult (*GetErrorName)(CUresult, const char **);
	CUresult (*GetErrorString)(CUresult, const char **);
} cu;

static double np_now_ms(void) {
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

static void np_fail(struct np_cu_fail *f, const char *step, CUresult res) {
	f->step = step;
	f->result = res;
	const char *s = NULL;
	if (cu.GetErrorName != NULL && cu.GetErrorName(res, &s) == 0 && s != NULL)
		snprintf(f->name, sizeof f->name, "%s", s);
	s = NULL;
	if (cu.GetErrorString != NULL && cu.GetErrorString(res, &s) == 0 && s != NULL)
		snprintf(f->text, sizeof f->text, "%s", s);
}

struct np_job {
	struct np_cu_device *d;
	const char *ptx;
	unsigned seed, elements;
};

#define NP_CHECK(step, call)                       \
	do {                                       \
		CUresult np_res = (call);          \
		if (np_res != 0) {                 \
			np_fail(&d->fail, step, np_res); \
			goto out;                  \
		}                                  \
	} while (0)

/* np_device probes one device on its own thread: its UUID, a context, a
 * verified memory round trip, and the kernel from PTX with its result
 * verified. */
static void *np_device(void *arg) {
	struct np_job *j = arg;
	struct np_cu_device *d = j->d;
	double t0 = np_now_ms(), t = t0;
	CUdevice dev;
	CUcontext ctx = NULL;
	CUmodule mod = NULL;
	CUdeviceptr buf = 0;
	size_t size = (size_t)j->elements * 4;
	unsigned *host = calloc(j->elements ? j->elements : 1, 4);
	if (host == NULL) {
		d->fail.step = "malloc";
		goto out;
	}
	NP_CHECK("cuDeviceGet", cu.DeviceGet(&dev, d->ordinal));
	if (cu.DeviceGetName(d->name, sizeof d->name - 1, dev) != 0)
		d->name[0] = 0;
	CUuuid u;
	NP_CHECK("cuDeviceGetUuid", cu.DeviceGetUuid(&u, dev));
	memcpy(d->uuid, u.bytes, 16);
	d->has_uuid = 1;
	if (cu.DeviceGetAttribute != NULL) {
		cu.DeviceGetAttribute(&d->cc_major, NP_CU_ATTR_CC_MAJOR, dev);
		cu.DeviceGetAttribute(&d->cc_minor, NP_CU_ATTR_CC_MINOR, dev);
	}
	d->uuid_ms = np_now_ms() - t;
	t = np_now_ms();
	NP_CHECK("cuCtxCreate", cu.CtxCreate(&ctx, 0, dev));
	d->context_ms = np_now_ms() - t;

	/* The round trip: a pattern unlike the kernel's, written and read back. */
	t = np_now_ms();
	NP_CHECK("cuMemAlloc", cu.MemAlloc(&buf, size));
	for (unsigned i = 0; i < j->elements; i++)
		host[i] = ~(i * 2246822519u) ^ j->seed;
	NP_CHECK("cuMemcpyHtoD", cu.MemcpyHtoD(buf, host, size));
	memset(host, 0, size);
	NP_CHECK("cuMemcpyDtoH", cu.MemcpyDtoH(host, buf, size));
	d->memory_verified = 1;
	for (unsigned i = 0; i < j->elements; i++)
		if (host[i] != (~(i * 2246822519u) ^ j->seed)) {
			d->memory_verified = 0;
			d->fail.step = "cuMemcpyDtoH";
			snprintf(d->fail.text, sizeof d->fail.text, "the copy came back different: element %u: got 0x%08x, want 0x%08x", i, host[i], ~(i * 2246822519u) ^ j->seed);
			break;
		}
	d->memory_ms = np_now_ms() - t;
	if (!d->memory_verified)
		goto out;

	/* The kernel: PTX, compiled by the driver's JIT (libnvidia-ptxjitcompiler). */
	t = np_now_ms();
	int opts[2] = {NP_CU_JIT_ERROR_LOG_BUFFER, NP_CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES};
	void *vals[2] = {d->fail.log, (void *)(size_t)(sizeof d->fail.log - 1)};
	NP_CHECK("cuModuleLoadData", cu.ModuleLoadDataEx(&mod, j->ptx, 2, opts, vals));
	d->fail.log[0] = 0;
	CUfunction fn;
	NP_CHECK("cuModuleGetFunction", cu.ModuleGetFunction(&fn, mod, "np_pattern"));
	d->module_ms = np_now_ms() - t;
	t = np_now_ms();
	unsigned seed = j->seed, n = j->elements;
	void *params[3] = {&buf, &seed, &n};
	unsigned block = 256, grid = (n + block - 1) / block;
	NP_CHECK("cuLaunchKernel", cu.LaunchKernel(fn, grid, 1, 1, block, 1, 1, 0, NULL, params, NULL));
	NP_CHECK("cuCtxSynchronize", cu.CtxSynchronize());
	d->launched = 1;
	NP_CHECK("cuMemcpyDtoH", cu.MemcpyDtoH(host, buf, size));
	d->launch_ms = np_now_ms() - t;
	t = np_now_ms();
	for (unsigned i = 0; i < n; i++) {
		unsigned want = i * 2654435761u ^ seed;
		if (host[i] != want) {
			if (d->wrong++ == 0) {
				d->first_index = i;
				d->first_got = host[i];
				d->first_want = want;
			}
		}
	}
	d->verify_ms = np_now_ms() - t;
out:
	if (buf != 0)
		cu.MemFree(buf);
	if (mod != NULL)
		cu.ModuleUnload(mod);
	if (ctx != NULL)
		cu.CtxDestroy(ctx);
	free(host);
	d->total_ms = np_now_ms() - t0;
	return NULL;
}

/* np_sym finds name, or the first of its alternatives, in h. */
static void *np_sym(void *h, const char *name, const char *alt) {
	void *p = dlsym(h, name);
	if (p == NULL && alt != NULL)
		p = dlsym(h, alt);
	return p;
}

int np_cu_probe(const char *lib, const char *ptx, unsigned seed, unsigned elements, struct np_cu_report *r) {
	double t = np_now_ms();
	dlerror();
	void *h = dlopen(lib, RTLD_NOW | RTLD_LOCAL);
	if (h == NULL) {
		const char *e = dlerror();
		snprintf(r->dlerr, sizeof r->dlerr, "%s", e ? e : "dlopen failed");
		r->fail.step = "dlopen";
		return -1;
	}
	struct { void **slot; const char *name, *alt; int optional; } syms[] = {
		{(void **)&cu.Init, "cuInit", NULL, 0},
		{(void **)&cu.DriverGetVersion, "cuDriverGetVersion", NULL, 1},
		{(void **)&cu.DeviceGetCount, "cuDeviceGetCount", NULL, 0},
		{(void **)&cu.DeviceGet, "cuDeviceGet", NULL, 0},
		{(void **)&cu.DeviceGetName, "cuDeviceGetName", NULL, 0},
		/* _v2 (CUDA 11.4) gives a MIG instance's own UUID; the plain one the GPU's. */
		{(void **)&cu.DeviceGetUuid, "cuDeviceGetUuid_v2", "cuDeviceGetUuid", 0},
		{(void **)&cu.DeviceGetAttribute, "cuDeviceGetAttribute", NULL, 1},
		{(void **)&cu.CtxCreate, "cuCtxCreate_v2", NULL, 0},
		{(void **)&cu.CtxDestroy, "cuCtxDestroy_v2", NULL, 0},
		{(void **)&cu.CtxSynchronize, "cuCtxSynchronize", NULL, 0},
		{(void **)&cu.MemAlloc, "cuMemAlloc_v2", NULL, 0},
		{(void **)&cu.MemFree, "cuMemFree_v2", NULL, 0},
		{(void **)&cu.MemcpyHtoD, "cuMemcpyHtoD_v2", NULL, 0},
		{(void **)&cu.MemcpyDtoH, "cuMemcpyDtoH_v2", NULL, 0},
		{(void **)&cu.ModuleLoadDataEx, "cuModuleLoadDataEx", NULL, 0},
		{(void **)&cu.ModuleGetFunction, "cuModuleGetFunction", NULL, 0},
		{(void **)&cu.ModuleUnload, "cuModuleUnload", NULL, 0},
		{(void **)&cu.LaunchKernel, "cuLaunchKernel", NULL, 0},
		{(void **)&cu.GetErrorName, "cuGetErrorName", NULL, 1},
		{(void **)&cu.GetErrorString, "cuGetErrorString", NULL, 1},
	};
	for (size_t i = 0; i < sizeof syms / sizeof syms[0]; i++) {
		*syms[i].slot = np_sym(h, syms[i].name, syms[i].alt);
		if (*syms[i].slot == NULL && !syms[i].optional) {
			r->fail.step = "dlsym";
			snprintf(r->dlerr, sizeof r->dlerr, "%s has no %s: not a CUDA driver library", lib, syms[i].name);
			return -1;
		}
	}
	r->load_ms = np_now_ms() - t;
	t = np_now_ms();
	CUresult res = cu.Init(0);
	r->init_ms = np_now_ms() - t;
	if (cu.DriverGetVersion != NULL)
		cu.DriverGetVersion(&r->driver_version);
	if (res != 0) {
		np_fail(&r->fail, "cuInit", res);
		return -1;
	}
	t = np_now_ms();
	res = cu.DeviceGetCount(&r->count);
	r->count_ms = np_now_ms() - t;
	if (res != 0) {
		np_fail(&r->fail, "cuDeviceGetCount", res);
		return -1;
	}
	r->probed = r->count < NP_CU_MAX_DEVICES ? r->count : NP_CU_MAX_DEVICES;
	/* Every device at once, a thread each: on an 8-GPU server each
	 * context and JIT compilation costs its own time. A device that hangs
	 * holds the report back until the parent's timeout ends the child. */
	t = np_now_ms();
	struct np_job jobs[NP_CU_MAX_DEVICES];
	pthread_t threads[NP_CU_MAX_DEVICES];
	int started[NP_CU_MAX_DEVICES] = {0};
	for (int i = 0; i < r->probed; i++) {
		r->dev[i].ordinal = i;
		jobs[i] = (struct np_job){&r->dev[i], ptx, seed, elements};
		started[i] = pthread_create(&threads[i], NULL, np_device, &jobs[i]) == 0;
		if (!started[i])
			np_device(&jobs[i]);
	}
	for (int i = 0; i < r->probed; i++)
		if (started[i])
			pthread_join(threads[i], NULL);
	r->devices_ms = np_now_ms() - t;
	return 0;
}
