/* A fake libnvidia-ptxjitcompiler.so.1: the fake libcuda (cuda.c) loads it
 * by name, as the driver's libcuda loads its JIT compiler to turn PTX into
 * machine code, and it "compiles" the small subset of PTX the CUDA probe's
 * kernel uses (nodeprep/cudaprobe/pattern.ptx) into an np_program
 * (ptxjit.h). PTX outside the subset is refused with a log, as a JIT
 * refuses PTX it cannot compile. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ptxjit.h"

/* A register of the entry and what it holds. */
struct np_reg {
	char name[16];
	int param; /* the parameter it was loaded from, else -1 */
	int tid;   /* it holds the global thread id */
};

static struct np_reg regs[64];
static int nregs;

static struct np_reg *reg(const char *name, int create) {
	for (int i = 0; i < nregs; i++)
		if (strcmp(regs[i].name, name) == 0)
			return &regs[i];
	if (!create || nregs == 64)
		return NULL;
	struct np_reg *r = &regs[nregs++];
	snprintf(r->name, sizeof r->name, "%s", name);
	r->param = -1;
	r->tid = 0;
	return r;
}

/* operands splits "a, b, c" (after the opcode, before ';') into up to 4. */
static int operands(const char *s, char out[4][64]) {
	int n = 0;
	while (*s && n < 4) {
		while (*s == ' ' || *s == '\t' || *s == ',')
			s++;
		if (!*s || *s == ';')
			break;
		int k = 0;
		while (*s && *s != ',' && *s != ';' && k < 63)
			out[n][k++] = *s++;
		while (k > 0 && (out[n][k - 1] == ' ' || out[n][k - 1] == '\t'))
			k--;
		out[n][k] = 0;
		n++;
	}
	return n;
}

int np_ptx_compile(const char *ptx, struct np_program *p, char *log, unsigned loglen) {
	memset(p, 0, sizeof *p);
	p->out_param = p->bound_param = p->xor_param = -1;
	p->mul = 1;
	nregs = 0;
	const char *e = strstr(ptx, ".entry ");
	if (e == NULL) {
		snprintf(log, loglen, "ptxas fatal: no .entry in the PTX");
		return -1;
	}
	e += 7;
	int k = 0;
	while (*e && *e != '(' && *e != ' ' && k < (int)sizeof p->entry - 1)
		p->entry[k++] = *e++;
	p->entry[k] = 0;
	int stored = 0, bounded = 0;
	char line[256];
	const char *s = e;
	while (*s) {
		const char *nl = strchr(s, '\n');
		size_t len = nl ? (size_t)(nl - s) : strlen(s);
		if (len >= sizeof line)
			len = sizeof line - 1;
		memcpy(line, s, len);
		line[len] = 0;
		s = nl ? nl + 1 : s + len;
		char *l = line;
		while (*l == ' ' || *l == '\t')
			l++;
		char op[4][64];
		if (strncmp(l, ".param ", 7) == 0) {
			if (p->nparams == NP_MAX_PARAMS) {
				snprintf(log, loglen, "ptxas: too many parameters");
				return -1;
			}
			p->param_size[p->nparams++] = strstr(l, ".u64") || strstr(l, ".b64") ? 8 : 4;
		} else if (strncmp(l, "ld.param.", 9) == 0) {
			operands(strchr(l, ' '), op);
			const char *u = strstr(op[1], "_param_");
			struct np_reg *r = reg(op[0], 1);
			if (u == NULL || r == NULL) {
				snprintf(log, loglen, "ptxas: cannot parse %s", l);
				return -1;
			}
			r->param = atoi(u + 7);
		} else if (strncmp(l, "mad.lo.", 7) == 0) {
			operands(strchr(l, ' '), op);
			/* id = ctaid * ntid + tid, each moved from its special register */
			reg(op[0], 1)->tid = 1;
		} else if (strncmp(l, "setp.ge.", 8) == 0) {
			operands(strchr(l, ' '), op);
			struct np_reg *a = reg(op[1], 0), *b = reg(op[2], 0);
			if (a != NULL && a->tid && b != NULL && b->param >= 0)
				p->bound_param = b->param;
		} else if (strstr(l, "bra") != NULL && l[0] == '@') {
			bounded = 1;
		} else if (strncmp(l, "cvta.to.global.", 15) == 0) {
			operands(strchr(l, ' '), op);
			struct np_reg *src = reg(op[1], 0);
			if (src != NULL)
				reg(op[0], 1)->param = src->param;
		} else if (strncmp(l, "mul.lo.", 7) == 0) {
			operands(strchr(l, ' '), op);
			struct np_reg *a = reg(op[1], 0);
			if (a == NULL || !a->tid) {
				snprintf(log, loglen, "ptxas: unsupported multiply %s", l);
				return -1;
			}
			p->mul = (unsigned)strtol(op[2], NULL, 0);
			reg(op[0], 1)->tid = 2; /* id * mul */
		} else if (strncmp(l, "xor.b32", 7) == 0) {
			operands(strchr(l, ' '), op);
			struct np_reg *b = reg(op[2], 0);
			if (b == NULL || b->param < 0) {
				snprintf(log, loglen, "ptxas: unsupported xor %s", l);
				return -1;
			}
			p->xor_param = b->param;
			reg(op[0], 1)->tid = 3;
		} else if (strncmp(l, "add.s64", 7) == 0) {
			operands(strchr(l, ' '), op);
			struct np_reg *a = reg(op[1], 0);
			if (a != NULL && a->param >= 0)
				reg(op[0], 1)->param = a->param;
		} else if (strncmp(l, "st.global.u32", 13) == 0) {
			operands(strchr(l, ' '), op);
			char base[64];
			snprintf(base, sizeof base, "%s", op[0][0] == '[' ? op[0] + 1 : op[0]);
			char *b = strchr(base, ']');
			if (b)
				*b = 0;
			struct np_reg *r = reg(base, 0);
			if (r == NULL || r->param < 0) {
				snprintf(log, loglen, "ptxas: unsupported store %s", l);
				return -1;
			}
			p->out_param = r->param;
			stored = 1;
		}
	}
	if (!stored || p->out_param < 0 || p->param_size[p->out_param] != 8) {
		snprintf(log, loglen, "ptxas: the entry %s stores nothing this JIT can run", p->entry);
		return -1;
	}
	if (!bounded)
		p->bound_param = -1;
	return 0;
}
