/* The faults every fake driver can act out, chosen by FAKE_FAULT at the
 * point the fake calls np_fault(). */
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <string.h>
#include <unistd.h>
#include <sys/wait.h>

static int np_fault_is(const char *what) {
	const char *f = getenv("FAKE_FAULT");
	return f != NULL && strcmp(f, what) == 0;
}

/* np_fault acts out FAKE_FAULT and returns for the faults that let the
 * call go on (flood, daemon, message): hang never returns, abort and segv
 * kill the process. */
static void np_fault(const char *who) {
	const char *f = getenv("FAKE_FAULT");
	if (f == NULL || *f == 0)
		return;
	if (strcmp(f, "hang") == 0) {
		for (;;)
			pause();
	}
	if (strcmp(f, "abort") == 0) {
		fprintf(stderr, "%s: assertion `device != NULL' failed\n", who);
		abort();
	}
	if (strcmp(f, "segv") == 0) {
		volatile int *p = (volatile int *)16;
		*p = 1;
	}
	if (strcmp(f, "flood") == 0) {
		long mb = 1024;
		const char *m = getenv("FAKE_FLOOD_MB");
		if (m != NULL)
			mb = atol(m);
		static char buf[1 << 20];
		memset(buf, 'x', sizeof buf);
		buf[sizeof buf - 1] = '\n';
		for (long i = 0; i < mb; i++)
			if (write(2, buf, sizeof buf) < 0)
				break;
		fprintf(stderr, "%s: flooded %ld MiB\n", who, mb);
	}
	if (strcmp(f, "daemon") == 0) {
		pid_t pid = fork();
		if (pid == 0) {
			setsid();
			if (fork() == 0) {
				for (;;)
					pause();
			}
			_exit(0);
		}
		/* As daemon(3) users do: the intermediate has made the
		 * session and forked the daemon when it exits. */
		waitpid(pid, NULL, 0);
		fprintf(stderr, "%s: started a helper daemon\n", who);
	}
	if (strcmp(f, "message") == 0)
		fprintf(stderr, "%s: unable to open libnvidia-glvkspirv.so.999: No such file or directory\n", who);
	if (strcmp(f, "sigbus") == 0) {
		/* As Mesa's disk cache does: a file in the shader cache grown
		 * with ftruncate and written through a shared mapping. On a
		 * full file system the page cannot be allocated: SIGBUS. */
		const char *dir = getenv("MESA_SHADER_CACHE_DIR");
		char p[4096];
		snprintf(p, sizeof p, "%s/fake_cache", dir != NULL ? dir : "/tmp");
		int fd = open(p, O_RDWR | O_CREAT, 0600);
		if (fd >= 0 && ftruncate(fd, 1 << 20) == 0) {
			char *m = mmap(NULL, 1 << 20, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
			if (m != MAP_FAILED)
				memset(m, 'x', 1 << 20);
		}
		fprintf(stderr, "%s: wrote the shader cache file %s\n", who, p);
	}
}
