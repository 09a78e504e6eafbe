/* The interface between the fake libcuda.so.1 (cuda.c) and the fake
 * libnvidia-ptxjitcompiler.so.1 (ptxjit.c): the fake JIT "compiles" PTX
 * into an np_program that the fake libcuda's cuLaunchKernel runs on the
 * host. Not NVIDIA's interface: only the two fakes speak it. */
#ifndef NP_FAKE_PTXJIT_H
#define NP_FAKE_PTXJIT_H

#define NP_MAX_PARAMS 8

struct np_program {
	char entry[128];              /* the .entry's name */
	int nparams;                  /* its .param count */
	int param_size[NP_MAX_PARAMS]; /* each .param's size in bytes (.u64 8, .u32 4) */
	/* What the entry computes, from its instructions: a global thread id
	 * (mad.lo of %ctaid.x, %ntid.x, %tid.x), a bound check against a
	 * parameter (setp.ge + bra), a multiply by an immediate (mul.lo), an
	 * xor with a parameter (xor.b32) and a 32-bit store at param[0] +
	 * 4*id (st.global.u32). */
	int out_param;   /* the parameter the store's base comes from */
	int bound_param; /* the parameter the id is checked against (-1: none) */
	int xor_param;   /* the parameter xor'ed in (-1: none) */
	unsigned mul;    /* the multiplier (1: none) */
};

/* np_ptx_compile parses ptx into p; it returns 0, or -1 with a message in
 * log (the JIT's error log). */
typedef int (*np_ptx_compile_fn)(const char *ptx, struct np_program *p, char *log, unsigned loglen);

#endif
