/* The faults every fake driver can act out, chosen by FAKE_FAULT at the
 * point the fake calls np_fault(). */
#include <signal.h>
#include <stdlib.h>
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
}
