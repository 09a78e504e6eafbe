/* A fake CUDA driver library (libcuda.so.1) that reports the simulated DGX
 * H200 of `nodeprep --simulate dgx-h200` (the UUIDs of nvml-dgx-h200.c) and
 * acts out the driver's failures. It implements the driver API calls the
 * CUDA probe makes (nodeprep/cudaprobe), with cuda.h's ABI (CUresult an
 * int, 0 success; CUdeviceptr 64-bit): device memory is host memory, and
 * cuModuleLoadDataEx loads libnvidia-ptxjitcompiler.so.1 by name, as the
 * driver's libcuda does (found through this library's RUNPATH, $ORIGIN,
 * or the linker's search), to "compile" the PTX that cuLaunchKernel then
 * runs on the host, thread by thread.
 *
 * As the driver does, it looks at its device nodes: no nvidiactl is
 * CUDA_ERROR_NO_DEVICE, no nvidia-uvm is CUDA_ERROR_UNKNOWN at cuInit, and
 * the devices are the GPUs whose /dev/nvidia<minor> exists (minor =
 * index), in that order. FAKE_CUDA_DEV_DIR replaces /dev (on a machine
 * without NVIDIA device nodes).
 *
 * FAKE_CUDA_FAULT picks a fault: a number (802, 100, 999, 803, 804...) is
 * cuInit's result; "hang" never finishes cuCtxSynchronize (a stuck
 * kernel); "crash" segfaults in cuInit; "wrong-uuid" and "wrong-kernel"
 * give device FAKE_CUDA_DEVICE (an ordinal, default 0) another UUID, or a
 * kernel that writes one element wrong; "no-jit" loads a JIT library
 * name that does not exist. FAKE_FAULT's common faults (fault.h) happen
 * in cuInit too. */
#include <dlfcn.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "fault.h"
#include "ptxjit.h"

typedef int CUresult;
typedef int CUdevice;
typedef unsigned long long CUdeviceptr;
typedef struct { char bytes[16]; } CUuuid;

enum {
	CUDA_SUCCESS = 0,
	CUDA_ERROR_INVALID_VALUE = 1,
	CUDA_ERROR_OUT_OF_MEMORY = 2,
	CUDA_ERROR_NOT_INITIALIZED = 3,
	CUDA_ERROR_NO_DEVICE = 100,
	CUDA_ERROR_INVALID_DEVICE = 101,
	CUDA_ERROR_INVALID_CONTEXT = 201,
	CUDA_ERROR_INVALID_PTX = 218,
	CUDA_ERROR_JIT_COMPILER_NOT_FOUND = 221,
	CUDA_ERROR_NOT_FOUND = 500,
	CUDA_ERROR_INVALID_HANDLE = 400,
	CUDA_ERROR_UNKNOWN = 999,
};

static const char *np_uuids[8] = {
	"GPU-228ca55b-c816-53ac-b2f8-4d631ef053c9",
	"GPU-93f01ee3-a0ff-5c5b-beb8-c9b1f0442b87",
	"GPU-947a0c76-18c5-5065-ba69-a701645a2ff2",
	"GPU-66f687d7-8698-5b78-a4ee-cd7c51720fb2",
	"GPU-f5233a6e-3517-5784-9085-2b373f37b41d",
	"GPU-f971f047-1667-583b-9b75-704925fd9923",
	"GPU-4e1df4c3-8cce-515a-b4dd-04ed51455871",
	"GPU-9c67b49d-6d94-57fb-b26a-7f763c3063cb",
};

static int np_inited;
static int np_ndev;
static int np_dev[8]; /* ordinal -> GPU index */

static const char *np_cuda_fault(void) {
	const char *f = getenv("FAKE_CUDA_FAULT");
	return f != NULL ? f : "";
}

static int np_fault_device(void) {
	const char *d = getenv("FAKE_CUDA_DEVICE");
	return d != NULL ? atoi(d) : 0;
}

static int np_node(const char *name) {
	const char *dir = getenv("FAKE_CUDA_DEV_DIR");
	char p[4096];
	snprintf(p, sizeof p, "%s/%s", dir != NULL && *dir ? dir : "/dev", name);
	return access(p, F_OK) == 0;
}

CUresult cuInit(unsigned flags) {
	(void)flags;
	np_fault("libcuda.so.1");
	const char *f = np_cuda_fault();
	if (strcmp(f, "crash") == 0) {
		volatile int *p = (volatile int *)16;
		*p = 1;
	}
	if (f[0] >= '1' && f[0] <= '9')
		return atoi(f);
	if (!np_node("nvidiactl"))
		return CUDA_ERROR_NO_DEVICE;
	if (!np_node("nvidia-uvm"))
		return CUDA_ERROR_UNKNOWN;
	np_ndev = 0;
	for (int i = 0; i < 8; i++) {
		char n[32];
		snprintf(n, sizeof n, "nvidia%d", i);
		if (np_node(n))
			np_dev[np_ndev++] = i;
	}
	np_inited = 1;
	return CUDA_SUCCESS;
}

CUresult cuDriverGetVersion(int *v) {
	if (v == NULL)
		return CUDA_ERROR_INVALID_VALUE;
	*v = 12040; /* driver 550.54.15's CUDA 12.4 */
	return CUDA_SUCCESS;
}

CUresult cuDeviceGetCount(int *n) {
	if (!np_inited)
		return CUDA_ERROR_NOT_INITIALIZED;
	*n = np_ndev;
	return CUDA_SUCCESS;
}

CUresult cuDeviceGet(CUdevice *d, int ordinal) {
	if (!np_inited)
		return CUDA_ERROR_NOT_INITIALIZED;
	if (ordinal < 0 || ordinal >= np_ndev)
		return CUDA_ERROR_INVALID_DEVICE;
	*d = ordinal;
	return CUDA_SUCCESS;
}

CUresult cuDeviceGetName(char *name, int len, CUdevice d) {
	if (d < 0 || d >= np_ndev)
		return CUDA_ERROR_INVALID_DEVICE;
	snprintf(name, len, "NVIDIA H200");
	return CUDA_SUCCESS;
}

static int np_hex(char c) {
	return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : c - 'A' + 10;
}

CUresult cuDeviceGetUuid_v2(CUuuid *u, CUdevice d) {
	if (d < 0 || d >= np_ndev)
		return CUDA_ERROR_INVALID_DEVICE;
	const char *s = np_uuids[np_dev[d]] + 4;
	int k = 0;
	for (; *s && k < 16; s++) {
		if (*s == '-')
			continue;
		u->bytes[k++] = (char)(np_hex(s[0]) << 4 | np_hex(s[1]));
		s++;
	}
	if (strcmp(np_cuda_fault(), "wrong-uuid") == 0 && d == np_fault_device())
		u->bytes[15] ^= 0x5a;
	return CUDA_SUCCESS;
}

CUresult cuDeviceGetUuid(CUuuid *u, CUdevice d) { return cuDeviceGetUuid_v2(u, d); }

CUresult cuDeviceGetAttribute(int *v, int attr, CUdevice d) {
	if (d < 0 || d >= np_ndev)
		return CUDA_ERROR_INVALID_DEVICE;
	*v = attr == 75 ? 9 : 0; /* compute capability 9.0 (Hopper) */
	return CUDA_SUCCESS;
}

struct np_ctx {
	int device;
};
static __thread struct np_ctx *np_current;

CUresult cuCtxCreate_v2(void **ctx, unsigned flags, CUdevice d) {
	(void)flags;
	if (d < 0 || d >= np_ndev)
		return CUDA_ERROR_INVALID_DEVICE;
	struct np_ctx *c = calloc(1, sizeof *c);
	if (c == NULL)
		return CUDA_ERROR_OUT_OF_MEMORY;
	c->device = d;
	np_current = c;
	*ctx = c;
	return CUDA_SUCCESS;
}

CUresult cuCtxDestroy_v2(void *ctx) {
	if (ctx == NULL)
		return CUDA_ERROR_INVALID_CONTEXT;
	if (np_current == ctx)
		np_current = NULL;
	free(ctx);
	return CUDA_SUCCESS;
}

CUresult cuCtxSynchronize(void) {
	if (np_current == NULL)
		return CUDA_ERROR_INVALID_CONTEXT;
	if (strcmp(np_cuda_fault(), "hang") == 0)
		for (;;)
			pause();
	return CUDA_SUCCESS;
}

CUresult cuMemAlloc_v2(CUdeviceptr *p, size_t size) {
	if (np_current == NULL)
		return CUDA_ERROR_INVALID_CONTEXT;
	void *m = malloc(size ? size : 1);
	if (m == NULL)
		return CUDA_ERROR_OUT_OF_MEMORY;
	*p = (CUdeviceptr)(uintptr_t)m;
	return CUDA_SUCCESS;
}

CUresult cuMemFree_v2(CUdeviceptr p) {
	free((void *)(uintptr_t)p);
	return CUDA_SUCCESS;
}

CUresult cuMemcpyHtoD_v2(CUdeviceptr dst, const void *src, size_t n) {
	if (np_current == NULL)
		return CUDA_ERROR_INVALID_CONTEXT;
	memcpy((void *)(uintptr_t)dst, src, n);
	return CUDA_SUCCESS;
}

CUresult cuMemcpyDtoH_v2(void *dst, CUdeviceptr src, size_t n) {
	if (np_current == NULL)
		return CUDA_ERROR_INVALID_CONTEXT;
	memcpy(dst, (const void *)(uintptr_t)src, n);
	return CUDA_SUCCESS;
}

struct np_module {
	struct np_program prog;
};

CUresult cuModuleLoadDataEx(void **mod, const void *image, unsigned nopts, int *opts, void **vals) {
	if (np_current == NULL)
		return CUDA_ERROR_INVALID_CONTEXT;
	char *log = NULL;
	unsigned loglen = 0;
	for (unsigned i = 0; i < nopts; i++) {
		if (opts[i] == 5) /* CU_JIT_ERROR_LOG_BUFFER */
			log = vals[i];
		if (opts[i] == 6) /* CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES */
			loglen = (unsigned)(uintptr_t)vals[i];
	}
	char scratch[512];
	if (log == NULL || loglen == 0) {
		log = scratch;
		loglen = sizeof scratch;
	}
	const char *jit = strcmp(np_cuda_fault(), "no-jit") == 0 ? "libnvidia-ptxjitcompiler.so.999" : "libnvidia-ptxjitcompiler.so.1";
	void *h = dlopen(jit, RTLD_NOW | RTLD_LOCAL);
	if (h == NULL) {
		snprintf(log, loglen, "%s", dlerror());
		return CUDA_ERROR_JIT_COMPILER_NOT_FOUND;
	}
	np_ptx_compile_fn compile = (np_ptx_compile_fn)dlsym(h, "np_ptx_compile");
	if (compile == NULL) {
		snprintf(log, loglen, "%s is not a PTX JIT compiler this driver can use", jit);
		return CUDA_ERROR_JIT_COMPILER_NOT_FOUND;
	}
	struct np_module *m = calloc(1, sizeof *m);
	if (m == NULL)
		return CUDA_ERROR_OUT_OF_MEMORY;
	static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER; /* the fake JIT is not reentrant */
	pthread_mutex_lock(&mu);
	int rc = compile((const char *)image, &m->prog, log, loglen);
	pthread_mutex_unlock(&mu);
	if (rc != 0) {
		free(m);
		return CUDA_ERROR_INVALID_PTX;
	}
	*mod = m;
	return CUDA_SUCCESS;
}

CUresult cuModuleGetFunction(void **fn, void *mod, const char *name) {
	struct np_module *m = mod;
	if (m == NULL)
		return CUDA_ERROR_INVALID_HANDLE;
	if (strcmp(m->prog.entry, name) != 0)
		return CUDA_ERROR_NOT_FOUND;
	*fn = &m->prog;
	return CUDA_SUCCESS;
}

CUresult cuModuleUnload(void *mod) {
	free(mod);
	return CUDA_SUCCESS;
}

/* cuLaunchKernel runs the compiled entry for every thread of the grid. */
CUresult cuLaunchKernel(void *fn, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz,
                        unsigned shared, void *stream, void **params, void **extra) {
	(void)shared;
	(void)stream;
	(void)extra;
	if (np_current == NULL)
		return CUDA_ERROR_INVALID_CONTEXT;
	struct np_program *p = fn;
	if (p == NULL || params == NULL || gy != 1 || gz != 1 || by != 1 || bz != 1)
		return CUDA_ERROR_INVALID_VALUE;
	uint32_t *out = (uint32_t *)(uintptr_t) * (CUdeviceptr *)params[p->out_param];
	uint32_t bound = p->bound_param >= 0 ? *(uint32_t *)params[p->bound_param] : UINT32_MAX;
	uint32_t x = p->xor_param >= 0 ? *(uint32_t *)params[p->xor_param] : 0;
	int wrong = strcmp(np_cuda_fault(), "wrong-kernel") == 0 && np_current->device == np_fault_device();
	for (uint32_t id = 0; id < gx * bx; id++) {
		if (id >= bound)
			continue;
		out[id] = id * p->mul ^ x;
		if (wrong && id == 7)
			out[id] ^= 0x100;
	}
	return CUDA_SUCCESS;
}

static const struct {
	int code;
	const char *name, *text;
} np_errors[] = {
	{0, "CUDA_SUCCESS", "no error"},
	{1, "CUDA_ERROR_INVALID_VALUE", "invalid argument"},
	{3, "CUDA_ERROR_NOT_INITIALIZED", "initialization error"},
	{100, "CUDA_ERROR_NO_DEVICE", "no CUDA-capable device is detected"},
	{101, "CUDA_ERROR_INVALID_DEVICE", "invalid device ordinal"},
	{201, "CUDA_ERROR_INVALID_CONTEXT", "invalid device context"},
	{218, "CUDA_ERROR_INVALID_PTX", "a PTX JIT compilation failed"},
	{221, "CUDA_ERROR_JIT_COMPILER_NOT_FOUND", "PTX JIT compiler library not found"},
	{500, "CUDA_ERROR_NOT_FOUND", "named symbol not found"},
	{802, "CUDA_ERROR_SYSTEM_NOT_READY", "system not yet initialized"},
	{803, "CUDA_ERROR_SYSTEM_DRIVER_MISMATCH", "system has unsupported display driver / cuda driver combination"},
	{804, "CUDA_ERROR_COMPAT_NOT_SUPPORTED_ON_DEVICE", "forward compatibility was attempted on non supported HW"},
	{999, "CUDA_ERROR_UNKNOWN", "unknown error"},
};

CUresult cuGetErrorName(CUresult r, const char **s) {
	for (size_t i = 0; i < sizeof np_errors / sizeof np_errors[0]; i++)
		if (np_errors[i].code == r) {
			*s = np_errors[i].name;
			return CUDA_SUCCESS;
		}
	*s = NULL;
	return CUDA_ERROR_INVALID_VALUE;
}

CUresult cuGetErrorString(CUresult r, const char **s) {
	for (size_t i = 0; i < sizeof np_errors / sizeof np_errors[0]; i++)
		if (np_errors[i].code == r) {
			*s = np_errors[i].text;
			return CUDA_SUCCESS;
		}
	*s = NULL;
	return CUDA_ERROR_INVALID_VALUE;
}
