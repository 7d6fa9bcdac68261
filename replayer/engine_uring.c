/* io_uring buffered reads: up to `depth` ENGINE_CHUNK reads in flight from one thread; the
 * kernel completes buffered reads asynchronously via page-lock wakeups (no helper threads). */
#include "engine.h"

#include <errno.h>
#include <liburing.h>
#include <stdlib.h>

struct uring {
	struct io_uring ring;
	char *bufs;
	unsigned *free_slots;
	unsigned nfree, inflight;
};

static int reap_one(struct engine *e, bool wait)
{
	struct uring *u = e->priv;
	struct io_uring_cqe *cqe;
	int rc = wait ? io_uring_wait_cqe(&u->ring, &cqe) : io_uring_peek_cqe(&u->ring, &cqe);
	if (rc)
		return rc;
	if (cqe->res < 0)
		e->io_errors++;
	u->free_slots[u->nfree++] = (unsigned)io_uring_cqe_get_data64(cqe);
	u->inflight--;
	io_uring_cqe_seen(&u->ring, cqe);
	return 0;
}

static int ur_submit(struct engine *e, int fd, uint64_t off, uint64_t len)
{
	struct uring *u = e->priv;
	while (len) {
		uint64_t n = len < ENGINE_CHUNK ? len : ENGINE_CHUNK;
		while (!reap_one(e, false))
			;
		while (!u->nfree) {
			int rc = reap_one(e, true);
			if (rc)
				return rc;
		}
		struct io_uring_sqe *sqe = io_uring_get_sqe(&u->ring);
		if (!sqe)
			return -EBUSY;
		unsigned slot = u->free_slots[--u->nfree];
		io_uring_prep_read(sqe, fd, u->bufs + (size_t)slot * ENGINE_CHUNK, (unsigned)n, off);
		io_uring_sqe_set_data64(sqe, slot);
		int rc = io_uring_submit(&u->ring);
		if (rc < 0) {
			u->free_slots[u->nfree++] = slot;
			return rc;
		}
		u->inflight++;
		e->calls++;
		off += n;
		len -= n;
	}
	return 0;
}

static int ur_drain(struct engine *e)
{
	struct uring *u = e->priv;
	while (u->inflight) {
		int rc = reap_one(e, true);
		if (rc)
			return rc;
	}
	return 0;
}

static void ur_fini(struct engine *e)
{
	struct uring *u = e->priv;
	if (!u)
		return;
	ur_drain(e);
	io_uring_queue_exit(&u->ring);
	free(u->bufs);
	free(u->free_slots);
	free(u);
	e->priv = NULL;
}

int engine_uring_init(struct engine *e, unsigned depth)
{
	struct uring *u = calloc(1, sizeof(*u));
	int rc;

	if (!u)
		return -ENOMEM;
	if (depth > 256)
		depth = 256;
	u->bufs = malloc((size_t)depth * ENGINE_CHUNK);
	u->free_slots = malloc(depth * sizeof(unsigned));
	if (!u->bufs || !u->free_slots) {
		rc = -ENOMEM;
		goto fail;
	}
	rc = io_uring_queue_init(depth, &u->ring, 0);
	if (rc)
		goto fail;
	for (unsigned i = 0; i < depth; i++)
		u->free_slots[u->nfree++] = i;
	e->name = "uring";
	e->async_completion = false;
	e->submit = ur_submit;
	e->drain = ur_drain;
	e->fini = ur_fini;
	e->depth = depth;
	e->priv = u;
	return 0;
fail:
	free(u->bufs);
	free(u->free_slots);
	free(u);
	return rc;
}
