/* Wait for the app's exit and measure its scheduled files' residency there (see exitcheck.h). */
#include "exitcheck.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "clock.h"
#include "pathopen.h"
#include "residency.h"

#ifndef __NR_pidfd_open
#define __NR_pidfd_open 434
#endif

int exit_check_open(pid_t pid)
{
	if (pid <= 0)
		return -1;
	int fd = (int)syscall(__NR_pidfd_open, pid, 0);
	if (fd >= 0)
		fcntl(fd, F_SETFD, FD_CLOEXEC);
	return fd;
}

/* The file as the analyzer saw it (same identity), or -1: a changed file says nothing. */
static int open_same(const struct wsr_file *f)
{
	char path[4096];
	struct stat st;

	if (f->kind != WSR_KIND_FILE || f->path_len >= sizeof(path))
		return -1;
	memcpy(path, f->path, f->path_len);
	path[f->path_len] = '\0';
	int fd = path_open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
	if (fd < 0)
		return -1;
	if (fstat(fd, &st) < 0 || (uint64_t)st.st_dev != f->dev || (uint64_t)st.st_ino != f->ino ||
	    (uint64_t)st.st_size != f->size ||
	    (int64_t)st.st_mtim.tv_sec * 1000000000 + st.st_mtim.tv_nsec != f->mtime_ns) {
		close(fd);
		return -1;
	}
	return fd;
}

void exit_check_run(int pidfd, const struct wsr_schedule *s, const uint64_t *outside_at_open, unsigned wait_s,
		    struct exit_check *x)
{
	memset(x, 0, sizeof(*x));
	if (pidfd < 0)
		return;
	x->asked = true;
	struct pollfd p = { pidfd, POLLIN, 0 };
	int r;
	do
		r = poll(&p, 1, (int)(wait_s * 1000));
	while (r < 0 && errno == EINTR);
	close(pidfd);
	/* still running after the wait (a long-lived app): measured now, said so */
	x->exited = r > 0;
	x->t_exit_s = mono_ns() / 1e9;
	x->evicted_known = true;
	for (uint32_t i = 0; i < s->nfiles; i++) {
		int fd = open_same(&s->files[i]);
		uint64_t inside, outside;
		if (fd < 0)
			continue;
		int rc = residency_of_file(fd, s, i, &inside, &outside, &x->recently_evicted, &x->evicted_known);
		close(fd);
		if (rc < 0)
			continue;
		/* cached outside the ranges before the replay touched the file: not this launch's miss
		 * (a shared library's pages that running processes keep mapped survive a cache drop) */
		uint64_t before = outside_at_open && outside_at_open[i] != UNMEASURED ? outside_at_open[i] : 0;
		x->scheduled_resident += inside;
		x->missed += outside > before ? outside - before : 0;
		x->outside_at_open += before < outside ? before : outside;
		x->files_checked++;
	}
}

void exit_check_write(FILE *f, const struct exit_check *x)
{
	fprintf(f, "\"exit\": {\"asked\": %s, \"exited\": %s", x->asked ? "true" : "false",
		x->exited ? "true" : "false");
	if (x->asked) {
		fprintf(f, ", \"t_measured\": %.6f, \"scheduled_resident_bytes\": %llu, \"missed_bytes\": %llu, "
			"\"outside_at_open_bytes\": %llu, \"files_checked\": %u, \"recently_evicted_pages\": ",
			x->t_exit_s, (unsigned long long)x->scheduled_resident, (unsigned long long)x->missed,
			(unsigned long long)x->outside_at_open, x->files_checked);
		if (x->evicted_known)
			fprintf(f, "%llu", (unsigned long long)x->recently_evicted);
		else
			fprintf(f, "null");
	}
	fprintf(f, "}");
}
