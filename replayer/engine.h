/* Fetch engines: the one small interface behind which readahead(2), posix_fadvise(WILLNEED),
 * buffered pread from worker threads and io_uring buffered reads are swappable. */
#ifndef ENGINE_H
#define ENGINE_H

#include <stdbool.h>
#include <stdint.h>

#define ENGINE_CHUNK (128u << 10)   /* <= the kernel's usual readahead cap per call */

struct engine {
	const char *name;
	/* true: submit() only queues I/O, data may not be resident after drain(). */
	bool async_completion;
	/* Queue [off, off+len) of fd for reading into the page cache. May block. Returns 0/-errno.
	 * The fd must stay open until drain() returns. */
	int (*submit)(struct engine *e, int fd, uint64_t off, uint64_t len);
	/* Wait until every submitted read has completed (no-op for async engines). */
	int (*drain)(struct engine *e);
	void (*fini)(struct engine *e);
	uint64_t io_errors;
	uint64_t calls;        /* syscalls / SQEs issued */
	unsigned depth;        /* threads (pread) or ring entries (uring) */
	void *priv;
};

/* Fill *e for engine `name` (readahead|fadvise|pread|uring) with `depth` workers/entries.
 * Returns 0, -EINVAL for an unknown name, or -errno from setting it up. */
int engine_init(struct engine *e, const char *name, unsigned depth);

int engine_ra_init(struct engine *e, bool fadvise);
int engine_pread_init(struct engine *e, unsigned threads);
int engine_uring_init(struct engine *e, unsigned depth);

#endif
