/* How much of a file range is in the page cache: cachestat(2) where the kernel has it,
 * mincore(2) on a temporary mapping otherwise. */
#ifndef RESIDENCY_H
#define RESIDENCY_H

#include <stdbool.h>
#include <stdint.h>

#include "wsr_format.h"

/* Sets *cached_bytes (page-granular, clipped to len). Returns 0, or -errno
 * (-EPERM: the kernel will not tell this caller; residency is unknown). */
int residency(int fd, uint64_t off, uint64_t len, uint64_t *cached_bytes);

/* Pages of [off, off+len) evicted recently (reclaimed, their refault still remembered): needs
 * cachestat(2). Returns 0, or -errno (-ENOSYS: the kernel cannot tell). */
int residency_evicted(int fd, uint64_t off, uint64_t len, uint64_t *pages);

/* Scheduled file file_no of s, open as fd: its cached bytes inside its scheduled ranges and
 * outside them. evicted (if not NULL): pages of its ranges recently evicted are added, and
 * *evicted_known cleared where cachestat cannot tell. Returns 0, or -errno. */
int residency_of_file(int fd, const struct wsr_schedule *s, uint32_t file_no, uint64_t *inside,
		      uint64_t *outside, uint64_t *evicted, bool *evicted_known);

/* A file's outside bytes not measured (see replay_stats.outside_at_open) */
#define UNMEASURED UINT64_MAX

/* Which method the last successful call used: "cachestat" or "mincore". */
const char *residency_method(void);

/* Make [off, off+len) resident AND uptodate, waiting for reads already in flight: reads it
 * through a small buffer (a buffered read sleeps on pages whose read is in flight and reads any
 * the async engine did not queue). cachestat alone is not enough: it counts pages that are in
 * the cache but still being read. Returns 0 or -errno. */
int residency_wait(int fd, uint64_t off, uint64_t len);

#endif
