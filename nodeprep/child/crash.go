package child

/*
#cgo LDFLAGS: -ldl
#define _GNU_SOURCE
#include <dlfcn.h>
#include <execinfo.h>
#include <signal.h>
#include <stdint.h>
#include <string.h>
#include <unistd.h>
#include <ucontext.h>
#include <stdlib.h>

static int np_crash_fd = -1;
static void *np_libc_base, *np_self_base;

static const char *np_signame(int sig) {
	switch (sig) {
	case SIGSEGV: return "SIGSEGV";
	case SIGBUS:  return "SIGBUS";
	case SIGILL:  return "SIGILL";
	case SIGFPE:  return "SIGFPE";
	case SIGABRT: return "SIGABRT";
	case SIGTRAP: return "SIGTRAP";
	case SIGSYS:  return "SIGSYS";
	}
	return "signal";
}

static void *np_pc(void *uc) {
	ucontext_t *u = uc;
#if defined(__x86_64__)
	return (void *)u->uc_mcontext.gregs[REG_RIP];
#elif defined(__aarch64__)
	return (void *)u->uc_mcontext.pc;
#else
	(void)u;
	return 0;
#endif
}

static void np_put(const char *s) {
	size_t n = strlen(s);
	while (n > 0) {
		ssize_t w = write(np_crash_fd, s, n);
		if (w <= 0)
			return;
		s += w;
		n -= w;
	}
}

// np_object names the shared object holding pc when it is neither libc
// nor nodeprep itself; 0 otherwise.
static const char *np_object(void *pc, int any) {
	Dl_info info;
	if (pc == 0 || dladdr(pc, &info) == 0 || info.dli_fname == 0 || info.dli_fname[0] == 0)
		return 0;
	if (!any && (info.dli_fbase == np_libc_base || info.dli_fbase == np_self_base))
		return 0;
	return info.dli_fname;
}

// np_crash_handler writes "crash <SIGNAME> <library>\n" to the report
// fd, then lets the signal kill the process as it would have without the
// handler (SA_RESETHAND), so the parent also sees the signal in the wait
// status. The library is the first frame's object that is neither libc
// (abort, raise) nor nodeprep: the faulting PC for SIGSEGV and friends,
// the caller of abort() for SIGABRT.
static void np_crash_handler(int sig, siginfo_t *si, void *uc) {
	(void)si;
	void *pcs[32];
	int n = 0;
	pcs[n++] = np_pc(uc);
	n += backtrace(pcs + 1, 31);
	const char *lib = 0;
	for (int i = 0; i < n && lib == 0; i++)
		lib = np_object(pcs[i], 0);
	if (lib == 0)
		lib = np_object(pcs[0], 1);
	np_put("crash ");
	np_put(np_signame(sig));
	np_put(" ");
	np_put(lib ? lib : "?");
	np_put("\n");
	raise(sig);
}

static int np_install_crash_report(int fd) {
	Dl_info info;
	np_crash_fd = fd;
	if (dladdr((void *)&abort, &info))
		np_libc_base = info.dli_fbase;
	if (dladdr((void *)&np_crash_handler, &info))
		np_self_base = info.dli_fbase;
	// backtrace loads libgcc_s on its first call: do it now, not in the
	// handler, which may run inside dlopen with the loader's lock held.
	void *warm[2];
	backtrace(warm, 2);
	struct sigaction sa;
	memset(&sa, 0, sizeof sa);
	sa.sa_sigaction = np_crash_handler;
	sa.sa_flags = SA_SIGINFO | SA_ONSTACK | SA_RESETHAND | SA_NODEFER;
	sigemptyset(&sa.sa_mask);
	int sigs[] = {SIGSEGV, SIGBUS, SIGILL, SIGFPE, SIGABRT, SIGTRAP, SIGSYS};
	for (unsigned i = 0; i < sizeof sigs / sizeof sigs[0]; i++)
		if (sigaction(sigs[i], &sa, 0) != 0)
			return -1;
	return 0;
}
*/
import "C"

import (
	"errors"
	"os"
	"syscall"
)

// InstallCrashReport makes this process (a child about to call into a
// driver) report a fatal signal on report, its report pipe (ReportFD), as
// one line "crash <SIGNAME> <library>", and then die of that signal.
//
// Why: Go's runtime handles SIGSEGV, SIGBUS, SIGFPE and SIGABRT itself,
// also while C code runs; a fault in a driver then ends the process with
// exit status 2 and a register dump, so the parent could only say
// "exited with status 2". The handler installed here replaces Go's for
// these signals (process-wide, so call it only in a child that exists to
// call the driver): the parent sees the real signal in the wait status
// and the library it happened in (dladdr of the faulting frame, skipping
// libc's abort/raise). A nil pointer in Go code of this process is then a
// crash too, reported "in" nodeprep.
func InstallCrashReport(report *os.File) error {
	if C.np_install_crash_report(C.int(report.Fd())) != 0 {
		return errors.New("installing the crash report handler: sigaction failed")
	}
	return nil
}

// ChildReport returns the report pipe of a child started by Run (file
// descriptor ReportFD), marked close-on-exec so that nothing the driver
// executes inherits it. Call it only in such a child.
func ChildReport() *os.File {
	syscall.CloseOnExec(ReportFD)
	return os.NewFile(ReportFD, "nodeprep-report")
}
