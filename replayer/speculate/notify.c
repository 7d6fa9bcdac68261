/* The supervisor: receives the copy's opens (seccomp user notification), lets each open go on
 * at once, and hands the file to prefetch workers that readahead(2) it (whole file up to a cap).
 * One line per prefetched file on stdout:  O <dev> <ino> <size> <bytes> <path as hex>  */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/seccomp.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "spec.h"

#define RA_CHUNK (128 * 1024)  /* readahead(2) is capped per call by the device's ra limit */
#define QLEN 4096
#define SEEN_SLOTS 65536

struct job { int fd; char path[PATH_MAX]; };

static struct {
	pthread_mutex_t mu;
	pthread_cond_t cv;
	struct job *q;
	unsigned head, tail;
	int closing;
	uint64_t budget_left, ra_max;
	uint64_t seen[SEEN_SLOTS];  /* (dev,ino) hashes already prefetched; 0 = free */
	unsigned long opens, prefetched_files, dropped;
	uint64_t prefetched_bytes;
} S = { .mu = PTHREAD_MUTEX_INITIALIZER, .cv = PTHREAD_COND_INITIALIZER };

static int seen_before(uint64_t key)
{
	key |= 1;  /* never 0 */
	for (unsigned i = 0, h = (unsigned)(key * 0x9E3779B97F4A7C15ULL >> 48); i < SEEN_SLOTS; i++) {
		uint64_t *slot = &S.seen[(h + i) % SEEN_SLOTS];
		if (*slot == key)
			return 1;
		if (*slot == 0) {
			*slot = key;
			return 0;
		}
	}
	return 1;  /* table full: stop prefetching new files */
}

static void hexpath(const char *p, char *out, size_t n)
{
	size_t j = 0;
	for (; *p && j + 3 < n; p++, j += 2)
		snprintf(out + j, 3, "%02x", (unsigned char)*p);
	out[j] = 0;
}

static void prefetch(struct job *j)
{
	struct stat st;
	/* Only files on block devices: tmpfs, procfs and sysfs (major 0) have nothing to fetch. */
	if (fstat(j->fd, &st) < 0 || !S_ISREG(st.st_mode) || major(st.st_dev) == 0)
		return;
	uint64_t want = (uint64_t)st.st_size < S.ra_max ? (uint64_t)st.st_size : S.ra_max;
	pthread_mutex_lock(&S.mu);
	int dup = seen_before(((uint64_t)st.st_dev << 40) ^ (uint64_t)st.st_ino);
	if (!dup) {
		if (want > S.budget_left)
			want = S.budget_left;
		S.budget_left -= want;
	}
	pthread_mutex_unlock(&S.mu);
	if (dup || want == 0)
		return;
	uint64_t done = 0;
	for (; done < want; done += RA_CHUNK) {
		size_t n = want - done < RA_CHUNK ? want - done : RA_CHUNK;
		if (readahead(j->fd, (off64_t)done, n) < 0)
			break;
	}
	if (done > want)
		done = want;
	char hex[2 * PATH_MAX + 1];
	hexpath(j->path, hex, sizeof(hex));
	pthread_mutex_lock(&S.mu);
	S.prefetched_files++;
	S.prefetched_bytes += done;
	printf("O %llu %llu %lld %llu %s\n", (unsigned long long)st.st_dev,
	       (unsigned long long)st.st_ino, (long long)st.st_size, (unsigned long long)done, hex);
	fflush(stdout);
	pthread_mutex_unlock(&S.mu);
}

static void *worker(void *arg)
{
	(void)arg;
	for (;;) {
		pthread_mutex_lock(&S.mu);
		while (S.head == S.tail && !S.closing)
			pthread_cond_wait(&S.cv, &S.mu);
		if (S.head == S.tail) {
			pthread_mutex_unlock(&S.mu);
			return NULL;
		}
		struct job *j = &S.q[S.tail % QLEN];
		struct job mine = *j;
		S.tail++;
		pthread_mutex_unlock(&S.mu);
		prefetch(&mine);
		close(mine.fd);
	}
}

static void enqueue(int fd, const char *path)
{
	pthread_mutex_lock(&S.mu);
	if (S.head - S.tail >= QLEN) {
		S.dropped++;
		close(fd);
	} else {
		struct job *j = &S.q[S.head % QLEN];
		j->fd = fd;
		snprintf(j->path, sizeof(j->path), "%s", path);
		S.head++;
		pthread_cond_signal(&S.cv);
	}
	pthread_mutex_unlock(&S.mu);
}

/* Read a NUL-terminated string from the copy's memory, page by page (the string may end just
 * before an unmapped page). */
static int read_string(int memfd, uint64_t addr, char *out, size_t n)
{
	size_t got = 0;
	while (got < n - 1) {
		size_t room = 4096 - ((addr + got) & 4095);
		if (room > n - 1 - got)
			room = n - 1 - got;
		ssize_t r = pread(memfd, out + got, room, (off_t)(addr + got));
		if (r <= 0)
			return r < 0 ? -errno : -EFAULT;
		char *nul = memchr(out + got, 0, (size_t)r);
		if (nul)
			return 0;
		got += (size_t)r;
	}
	return -ENAMETOOLONG;
}

/* Open (O_PATH, so no device or FIFO is ever really opened) what the copy is about to open, as
 * the copy sees it, and reopen it for reading if it is a regular file. Returns fd or -errno. */
static int open_as_copy(pid_t pid, int dirfd, const char *path)
{
	char full[PATH_MAX + 64];
	int r;
	if (path[0] == '/')
		r = snprintf(full, sizeof(full), "/proc/%d/root%s", pid, path);
	else if (dirfd == AT_FDCWD)
		r = snprintf(full, sizeof(full), "/proc/%d/cwd/%s", pid, path);
	else
		r = snprintf(full, sizeof(full), "/proc/%d/fd/%d/%s", pid, dirfd, path);
	if (r < 0 || (size_t)r >= sizeof(full))
		return -ENAMETOOLONG;
	int pfd = open(full, O_PATH | O_CLOEXEC);
	if (pfd < 0)
		return -errno;
	struct stat st;
	if (fstat(pfd, &st) < 0 || !S_ISREG(st.st_mode)) {
		close(pfd);
		return -EINVAL;
	}
	char self[64];
	snprintf(self, sizeof(self), "/proc/self/fd/%d", pfd);
	int fd = open(self, O_RDONLY | O_CLOEXEC | O_NOATIME);
	if (fd < 0)
		fd = open(self, O_RDONLY | O_CLOEXEC);
	r = fd < 0 ? -errno : fd;
	close(pfd);
	return r;
}

static void handle(int listener, struct seccomp_notif *req, struct seccomp_notif_resp *resp)
{
	int is_openat = req->data.nr == __NR_openat;
	int dirfd = is_openat ? (int)req->data.args[0] : AT_FDCWD;
	uint64_t addr = is_openat ? req->data.args[1] : req->data.args[0];
	int flags = (int)(is_openat ? req->data.args[2] : req->data.args[1]);
	char path[PATH_MAX];
	int fd = -1;

	S.opens++;
	/* Only plain reads are prefetched: a create, truncate or write-open is the copy's own business. */
	int readonly = (flags & O_ACCMODE) == O_RDONLY && !(flags & (O_CREAT | O_TRUNC | O_DIRECTORY | O_PATH));
	if (readonly) {
		char memp[64];
		snprintf(memp, sizeof(memp), "/proc/%d/mem", req->pid);
		int memfd = open(memp, O_RDONLY | O_CLOEXEC);
		if (memfd >= 0) {
			/* The id check after reading makes sure the pid and memory were still this call's. */
			if (read_string(memfd, addr, path, sizeof(path)) == 0 &&
			    ioctl(listener, SECCOMP_IOCTL_NOTIF_ID_VALID, &req->id) == 0)
				fd = open_as_copy(req->pid, dirfd, path);
			close(memfd);
		}
	}
	/* Let the copy's own open proceed unchanged, then prefetch in the background. */
	memset(resp, 0, sizeof(*resp));
	resp->id = req->id;
	resp->flags = SECCOMP_USER_NOTIF_FLAG_CONTINUE;
	ioctl(listener, SECCOMP_IOCTL_NOTIF_SEND, resp);
	if (fd >= 0)
		enqueue(fd, path);
}

int notify_serve(int listener, pid_t init_pid, const struct spec_opts *o)
{
	S.q = calloc(QLEN, sizeof(struct job));
	if (!S.q)
		return -ENOMEM;
	S.budget_left = o->budget;
	S.ra_max = o->ra_max;
	int nw = o->workers > 0 ? o->workers : 1;
	pthread_t th[64];
	if (nw > 64)
		nw = 64;
	for (int i = 0; i < nw; i++)
		if (pthread_create(&th[i], NULL, worker, NULL)) {
			nw = i;
			break;
		}
	int pidfd = (int)syscall(SYS_pidfd_open, init_pid, 0);
	struct seccomp_notif *req = calloc(1, sizeof(*req) + 256);
	struct seccomp_notif_resp *resp = calloc(1, sizeof(*resp) + 256);
	int rc = 0;
	for (;;) {
		struct pollfd p[2] = { { .fd = listener, .events = POLLIN }, { .fd = pidfd, .events = POLLIN } };
		int n = poll(p, pidfd >= 0 ? 2 : 1, -1);
		if (n < 0) {
			if (errno == EINTR)
				continue;
			rc = -errno;
			break;
		}
		if ((pidfd >= 0 && p[1].revents) || (p[0].revents & (POLLHUP | POLLERR)))
			break;  /* the copy is gone */
		if (p[0].revents & POLLIN) {
			memset(req, 0, sizeof(*req));
			if (ioctl(listener, SECCOMP_IOCTL_NOTIF_RECV, req) < 0) {
				if (errno == EINTR || errno == ENOENT)
					continue;
				rc = -errno;
				break;
			}
			handle(listener, req, resp);
		}
	}
	pthread_mutex_lock(&S.mu);
	S.closing = 1;
	pthread_cond_broadcast(&S.cv);
	pthread_mutex_unlock(&S.mu);
	for (int i = 0; i < nw; i++)
		pthread_join(th[i], NULL);
	printf("T opens=%lu files=%lu bytes=%llu dropped=%lu\n", S.opens, S.prefetched_files,
	       (unsigned long long)S.prefetched_bytes, S.dropped);
	fflush(stdout);
	free(req);
	free(resp);
	free(S.q);
	if (pidfd >= 0)
		close(pidfd);
	return rc;
}
