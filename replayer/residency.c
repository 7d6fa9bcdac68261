#include "residency.h"

#include <errno.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#ifndef __NR_cachestat
#define __NR_cachestat 451
#endif

/* The uapi structs (linux/mman.h of 6.5+); spelled out because older headers lack them. */
struct ws_cachestat_range { uint64_t off, len; };
struct ws_cachestat { uint64_t nr_cache, nr_dirty, nr_writeback, nr_evicted, nr_recently_evicted; };

static int have_cachestat = -1;   /* -1 unknown, 0 no (ENOSYS), 1 yes */
static const char *last_method = "none";

static int by_cachestat(int fd, uint64_t off, uint64_t len, uint64_t *pages)
{
	struct ws_cachestat_range r = { off, len };
	struct ws_cachestat cs;
	if (syscall(__NR_cachestat, fd, &r, &cs, 0) < 0)
		return -errno;
	*pages = cs.nr_cache;
	return 0;
}

int residency_evicted(int fd, uint64_t off, uint64_t len, uint64_t *pages)
{
	struct ws_cachestat_range r = { off, len };
	struct ws_cachestat cs;
	if (have_cachestat == 0)
		return -ENOSYS;
	if (syscall(__NR_cachestat, fd, &r, &cs, 0) < 0)
		return -errno;
	*pages = cs.nr_recently_evicted;
	return 0;
}

static int by_mincore(int fd, uint64_t off, uint64_t len, uint64_t *pages)
{
	long psz = sysconf(_SC_PAGESIZE);
	uint64_t start = off & ~(uint64_t)(psz - 1);
	size_t maplen = (size_t)(off + len - start);
	size_t npages = (maplen + psz - 1) / psz;
	unsigned char vec[256];
	uint64_t count = 0;

	/* In pieces so the vector stays on the stack and a huge range maps nothing big. */
	for (size_t done = 0; done < npages;) {
		size_t n = npages - done < sizeof(vec) ? npages - done : sizeof(vec);
		void *m = mmap(NULL, n * psz, PROT_READ, MAP_SHARED, fd, (off_t)(start + done * psz));
		if (m == MAP_FAILED)
			return -errno;
		int rc = mincore(m, n * psz, vec) < 0 ? -errno : 0;
		munmap(m, n * psz);
		if (rc)
			return rc;
		for (size_t i = 0; i < n; i++)
			count += vec[i] & 1;
		done += n;
	}
	*pages = count;
	return 0;
}

int residency(int fd, uint64_t off, uint64_t len, uint64_t *cached_bytes)
{
	long psz = sysconf(_SC_PAGESIZE);
	uint64_t first = off / psz, last = (off + len + psz - 1) / psz;
	uint64_t pages = 0;
	int rc = -ENOSYS;

	if (!len) {
		*cached_bytes = 0;
		return 0;
	}
	if (have_cachestat != 0) {
		rc = by_cachestat(fd, first * psz, (last - first) * psz, &pages);
		if (rc == -ENOSYS) {
			have_cachestat = 0;
		} else {
			have_cachestat = 1;
			if (!rc)
				last_method = "cachestat";
		}
	}
	if (rc == -ENOSYS) {
		rc = by_mincore(fd, off, len, &pages);
		if (!rc)
			last_method = "mincore";
	}
	if (rc)
		return rc;
	uint64_t bytes = pages * psz;
	*cached_bytes = bytes > len ? len : bytes;
	return 0;
}

const char *residency_method(void)
{
	return last_method;
}

int residency_wait(int fd, uint64_t off, uint64_t len)
{
	static char buf[64 << 10];
	while (len) {
		size_t n = len < sizeof(buf) ? len : sizeof(buf);
		ssize_t got = pread(fd, buf, n, (off_t)off);
		if (got < 0 && errno == EINTR)
			continue;
		if (got < 0)
			return -errno;
		if (got == 0)
			break;  /* EOF: the file is shorter than the range */
		off += got;
		len -= got;
	}
	return 0;
}

struct pages { uint64_t first, last; };   /* [first, last) in pages */

static int by_first(const void *a, const void *b)
{
	const struct pages *x = a, *y = b;
	return x->first < y->first ? -1 : x->first > y->first;
}

/* Cached bytes of pages [first, last) of a file of `size` bytes (its last page partly). */
static int pages_cached(int fd, uint64_t first, uint64_t last, uint64_t size, uint64_t psz, uint64_t *bytes)
{
	uint64_t end = last * psz < size ? last * psz : size;
	*bytes = 0;
	return first * psz < end ? residency(fd, first * psz, end - first * psz, bytes) : 0;
}

int residency_of_file(int fd, const struct wsr_schedule *s, uint32_t file_no, uint64_t *inside,
		      uint64_t *outside, uint64_t *evicted, bool *evicted_known)
{
	/* Inside and outside are each measured over their own pages (the file's ranges merged into
	 * page intervals, and the gaps between them), not outside as all minus inside: pages that
	 * land in the ranges between two measurements (the replayer's own reads still completing)
	 * must not be taken away from what was cached outside them. */
	uint64_t psz = (uint64_t)sysconf(_SC_PAGESIZE), size = s->files[file_no].size;
	uint64_t in = 0, out = 0, cached, ev = 0, pos = 0;
	struct pages *iv = malloc((s->nranges ? s->nranges : 1) * sizeof(*iv));
	uint32_t n = 0;
	int rc = 0;

	if (!iv)
		return -ENOMEM;
	for (uint32_t k = 0; k < s->nranges; k++) {
		const struct wsr_range *rg = &s->ranges[k];
		if (rg->file_no != file_no || !rg->length)
			continue;
		iv[n++] = (struct pages){ rg->offset / psz, (rg->offset + rg->length + psz - 1) / psz };
		if (evicted) {
			if (residency_evicted(fd, rg->offset, rg->length, &ev) == 0)
				*evicted += ev;
			else
				*evicted_known = false;
		}
	}
	qsort(iv, n, sizeof(*iv), by_first);
	for (uint32_t k = 0; k < n && !rc;) {
		uint64_t first = iv[k].first, last = iv[k].last;
		for (k++; k < n && iv[k].first <= last; k++)   /* overlapping or touching: one interval */
			last = iv[k].last > last ? iv[k].last : last;
		if (!(rc = pages_cached(fd, pos, first, size, psz, &cached)))
			out += cached;
		if (!rc && !(rc = pages_cached(fd, first, last, size, psz, &cached)))
			in += cached;
		pos = last > pos ? last : pos;
	}
	if (!rc && !(rc = pages_cached(fd, pos, (size + psz - 1) / psz, size, psz, &cached)))
		out += cached;
	free(iv);
	if (rc)
		return rc;
	*inside = in;
	*outside = out;
	return 0;
}
