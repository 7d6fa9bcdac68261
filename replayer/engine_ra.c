/* readahead(2) and posix_fadvise(WILLNEED): the kernel allocates the pages and queues the reads
 * itself; no copies, no buffers. Both are capped per call by the device's readahead limit, so
 * ranges are issued in ENGINE_CHUNK pieces. Completion is asynchronous: callers that need the
 * data resident (the pre-buffer) check residency afterwards. */
#include "engine.h"

#include <errno.h>
#include <fcntl.h>
#include <stddef.h>

static int ra_submit(struct engine *e, int fd, uint64_t off, uint64_t len)
{
	bool fadv = e->priv != NULL;
	while (len) {
		uint64_t n = len < ENGINE_CHUNK ? len : ENGINE_CHUNK;
		int rc;
		e->calls++;
		if (fadv) {
			rc = -posix_fadvise(fd, (off_t)off, (off_t)n, POSIX_FADV_WILLNEED);
		} else {
			rc = readahead(fd, (off64_t)off, n) < 0 ? -errno : 0;
		}
		if (rc) {
			e->io_errors++;
			return rc;
		}
		off += n;
		len -= n;
	}
	return 0;
}

static int ra_drain(struct engine *e)
{
	(void)e;
	return 0;
}

static void ra_fini(struct engine *e)
{
	(void)e;
}

int engine_ra_init(struct engine *e, bool fadvise)
{
	e->name = fadvise ? "fadvise" : "readahead";
	e->async_completion = true;
	e->submit = ra_submit;
	e->drain = ra_drain;
	e->fini = ra_fini;
	e->depth = 0;
	e->priv = fadvise ? (void *)1 : NULL;
	return 0;
}
