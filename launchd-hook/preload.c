/* libwarmstart-preload.so: the launch hook for users without root or kernels without fanotify
 * permission events. Its constructor identifies the process's app in the hook index, starts
 * warmstart-replay and waits (bounded) for the pre-buffer. Invisible otherwise: no output, errno
 * restored, nothing left as our child (the replayer is double-forked), nothing done in secure
 * (setuid) mode or when warmstartd already hooks execs. */
#include "index.h"

#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/auxv.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define DEFAULT_INDEX "/var/lib/warmstart/hook.idx"
#define DAEMON_PIDFILE "/run/warmstart/warmstartd.pid"
#define CMDLINE_MAX 8192
#define ARGS_MAX 64

extern char **environ;

static int daemon_running(void)
{
	char buf[32];
	ssize_t n;
	int fd = open(DAEMON_PIDFILE, O_RDONLY | O_CLOEXEC);
	long pid;

	if (fd < 0)
		return 0;
	n = read(fd, buf, sizeof(buf) - 1);
	close(fd);
	if (n <= 0)
		return 0;
	buf[n] = '\0';
	pid = strtol(buf, NULL, 10);
	return pid > 0 && (kill((pid_t)pid, 0) == 0 || errno == EPERM);
}

static int read_cmdline(char *buf, size_t size, char **argv, int *argc)
{
	ssize_t n, total = 0;
	int fd = open("/proc/self/cmdline", O_RDONLY | O_CLOEXEC);

	if (fd < 0)
		return -errno;
	while ((size_t)total < size - 1 && (n = read(fd, buf + total, size - 1 - total)) > 0)
		total += n;
	close(fd);
	buf[total] = '\0';
	*argc = 0;
	for (ssize_t i = 0; i < total && *argc < ARGS_MAX; i += strlen(buf + i) + 1)
		argv[(*argc)++] = buf + i;
	argv[*argc] = NULL;
	return 0;
}

static void replayer_path(char *out, size_t size)
{
	const char *env = getenv("WARMSTART_REPLAYER");
	Dl_info info;
	const char *slash;

	if (env && *env == '/') {
		snprintf(out, size, "%s", env);
		return;
	}
	/* next to this library: build/ in a checkout, /usr/libexec/warmstart when installed */
	if (dladdr((void *)replayer_path, &info) && info.dli_fname && (slash = strrchr(info.dli_fname, '/'))) {
		snprintf(out, size, "%.*s/warmstart-replay", (int)(slash - info.dli_fname), info.dli_fname);
		return;
	}
	snprintf(out, size, "/usr/libexec/warmstart/warmstart-replay");
}

/* The replayer, opened for fexecve: a regular file owned by root or by us and writable by no one
 * else, or -1. Its path may come from the environment (WARMSTART_REPLAYER), and an environment
 * can cross users: `su` without `-` keeps it, and through /etc/ld.so.preload the shim is in the
 * root shell that su starts. Another user's program must never run as us. The checks are made
 * on the file that is then executed, so swapping the path afterwards changes nothing. No
 * O_CLOEXEC: the interpreter of a #! script reads it through /dev/fd/N. */
static int open_replayer(const char *path)
{
	struct stat st;
	int fd = open(path, O_PATH);

	if (fd < 0)
		return -1;
	if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode) || (st.st_uid != 0 && st.st_uid != getuid()) ||
	    (st.st_mode & (S_IWGRP | S_IWOTH))) {
		close(fd);
		return -1;
	}
	return fd;
}

/* The environment for the replayer: ours without LD_PRELOAD (it must not hook itself). */
static char **child_env(void)
{
	size_t n = 0, j = 0;
	char **env;

	while (environ && environ[n])
		n++;
	env = calloc(n + 1, sizeof(*env));
	if (!env)
		return NULL;
	for (size_t i = 0; i < n; i++)
		if (strncmp(environ[i], "LD_PRELOAD=", 11) != 0)
			env[j++] = environ[i];
	env[j] = NULL;
	return env;
}

/* fork twice so the replayer is never our child (the app's wait() must not see it); returns
 * the read end of the notify pipe or -errno */
static int start_replayer(const char *replayer, const char *schedule)
{
	char *const argv[] = {(char *)replayer, "--notify-fd", "3", (char *)schedule, NULL};
	char **env = child_env();
	int p[2], status, err = 0, chld_was_pending;
	sigset_t mask, pending;
	pid_t mid;

	if (!env)
		return -ENOMEM;
	if (pipe2(p, O_CLOEXEC) < 0) {
		err = -errno;
		free(env);
		return err;
	}
	sigprocmask(SIG_BLOCK, NULL, &mask);
	sigpending(&pending);
	chld_was_pending = sigismember(&pending, SIGCHLD);
	mid = fork();
	if (mid == 0) {
		int null = open("/dev/null", O_RDWR), exe;

		setsid();
		if (fork() != 0)
			_exit(0);
		if (null < 0 || dup2(null, 0) < 0 || dup2(null, 1) < 0 || dup2(null, 2) < 0)
			_exit(127); /* no output from us, ever */
		if (p[1] == 3 ? fcntl(3, F_SETFD, 0) < 0 : dup2(p[1], 3) < 0)
			_exit(127);
		if ((exe = open_replayer(replayer)) >= 0)
			fexecve(exe, argv, env);
		_exit(127);
	}
	if (mid < 0)
		err = -errno;
	else
		while (waitpid(mid, &status, 0) < 0 && errno == EINTR)
			;
	/* an app that blocks SIGCHLD must not find one pending that it did not cause */
	if (mid > 0 && sigismember(&mask, SIGCHLD) && !chld_was_pending) {
		struct timespec zero = {0, 0};
		sigset_t chld;

		sigemptyset(&chld);
		sigaddset(&chld, SIGCHLD);
		sigtimedwait(&chld, NULL, &zero);
	}
	close(p[1]);
	free(env);
	if (err) {
		close(p[0]);
		return err;
	}
	return p[0];
}

static long ms_since(const struct timespec *t0)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return (t.tv_sec - t0->tv_sec) * 1000 + (t.tv_nsec - t0->tv_nsec) / 1000000;
}

/* Wait hold_ms from the replayer's "start", at most hold_ms + WS_START_ALLOW_MS from now (the
 * daemon's rule, worker.c). */
static void wait_ready(int fd, unsigned hold_ms)
{
	struct timespec t0;
	long until = (long)hold_ms + WS_START_ALLOW_MS; /* ms since t0 */

	clock_gettime(CLOCK_MONOTONIC, &t0);
	for (;;) {
		struct pollfd p = {fd, POLLIN, 0};
		long left = until - ms_since(&t0);

		if (left <= 0)
			return;
		if (poll(&p, 1, (int)left) < 0) {
			if (errno == EINTR)
				continue;
			return;
		}
		if (!p.revents)
			continue;
		if (ws_notify_read(fd) != WS_NOTIFY_START)
			return; /* "ready", or EOF (replayer gone): start either way */
		left = ms_since(&t0) + (long)hold_ms; /* the hold from the start */
		if (left < until)
			until = left;
	}
}

static void hook(void)
{
	static char cmdline[CMDLINE_MAX];
	char *argv[ARGS_MAX + 1];
	char replayer[PATH_MAX];
	const char *index_path = getenv("WARMSTART_INDEX");
	const struct ws_index_entry *e;
	struct ws_index idx;
	struct stat st;
	int argc = 0, mismatch, fd;
	unsigned hold_ms;

	if (getauxval(AT_SECURE) || getenv("WARMSTART_PRELOAD_OFF"))
		return;
	if (!index_path || *index_path != '/')
		index_path = DEFAULT_INDEX;
	/* trust an index owned by root or by ourselves: the replayer runs as us either way */
	if (ws_index_open(&idx, index_path, getuid()) < 0)
		return;
	if (stat("/proc/self/exe", &st) < 0 || !ws_index_find(&idx, st.st_dev, st.st_ino))
		goto out;
	if (read_cmdline(cmdline, sizeof(cmdline), argv, &argc) < 0)
		goto out;
	e = ws_index_match(&idx, st.st_dev, st.st_ino, st.st_size,
			   (int64_t)st.st_mtim.tv_sec * 1000000000 + st.st_mtim.tv_nsec, argv, argc, getuid(),
			   &mismatch);
	if (!e || (e->flags & WS_ENTRY_STALE) || daemon_running())
		goto out;
	replayer_path(replayer, sizeof(replayer));
	fd = start_replayer(replayer, ws_index_str(&idx, e->sched_off));
	if (fd < 0)
		goto out;
	hold_ms = ws_entry_hold_ms(&idx, e);
	wait_ready(fd, hold_ms);
	close(fd);
out:
	ws_index_close(&idx);
}

__attribute__((constructor)) static void warmstart_preload_init(void)
{
	int saved = errno;

	hook();
	errno = saved;
}
