/* What warmstartd's watchdog (warmstartd.c) and its worker (worker.c) both use: the clock, the
 * log, the signals they handle, how they open the files they write. Here, so that neither file depends on the other for them. */
#include "daemon.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

uint64_t ws_now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + ts.tv_nsec;
}

void ws_log(const char *fmt, ...)
{
	char msg[1024];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	fprintf(stderr, "warmstartd[%d]: %s\n", (int)getpid(), msg);
}

void ws_handled_signals(sigset_t *set)
{
	sigemptyset(set);
	sigaddset(set, SIGTERM);
	sigaddset(set, SIGINT);
	sigaddset(set, SIGHUP);
	sigaddset(set, SIGUSR1);
	sigaddset(set, SIGCHLD);
}

FILE *ws_open_write(const char *path, int flags, mode_t mode)
{
	struct stat st;
	int e, fd = open(path, O_WRONLY | O_CREAT | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK | flags, mode);

	if (fd < 0)
		return NULL;
	if (fstat(fd, &st) < 0)
		goto fail;
	if (!S_ISREG(st.st_mode)) {
		errno = EINVAL;
		goto fail;
	}
	if (fchmod(fd, mode) < 0 || fcntl(fd, F_SETFL, flags & O_APPEND) < 0)   /* blocking again */
		goto fail;
	FILE *f = fdopen(fd, flags & O_APPEND ? "ae" : "we");
	if (f)
		return f;
fail:
	e = errno;
	close(fd);
	errno = e;
	return NULL;
}
