/* Buffered pread(2) from worker threads: each completed read has put its pages in the page
 * cache; the queue depth on the device equals the number of threads. Memory: one
 * ENGINE_CHUNK buffer per thread plus a fixed-size job ring. */
#include "engine.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <unistd.h>

#define RING 256

struct job { int fd; uint64_t off, len; };

struct pool {
	pthread_mutex_t mu;
	pthread_cond_t more, room, idle;
	struct job ring[RING];
	unsigned head, count, busy, nthreads, started;
	bool stop;
	uint64_t errors, calls;
	pthread_t threads[64];
};

static void *worker(void *arg)
{
	struct pool *p = arg;
	char *buf = malloc(ENGINE_CHUNK);

	pthread_mutex_lock(&p->mu);
	for (;;) {
		while (!p->count && !p->stop)
			pthread_cond_wait(&p->more, &p->mu);
		if (!p->count && p->stop)
			break;
		struct job j = p->ring[p->head];
		p->head = (p->head + 1) % RING;
		p->count--;
		p->busy++;
		pthread_cond_signal(&p->room);
		pthread_mutex_unlock(&p->mu);

		uint64_t errors = 0, calls = 0;
		while (j.len && buf) {
			size_t n = j.len < ENGINE_CHUNK ? j.len : ENGINE_CHUNK;
			ssize_t got = pread(j.fd, buf, n, (off_t)j.off);
			calls++;
			if (got < 0 && errno == EINTR)
				continue;
			if (got <= 0) {  /* error, or EOF of a file that shrank: stop this job */
				errors += got < 0;
				break;
			}
			j.off += got;
			j.len -= got;
		}
		errors += !buf;

		pthread_mutex_lock(&p->mu);
		p->errors += errors;
		p->calls += calls;
		p->busy--;
		if (!p->busy && !p->count)
			pthread_cond_broadcast(&p->idle);
	}
	pthread_mutex_unlock(&p->mu);
	free(buf);
	return NULL;
}

static int pr_submit(struct engine *e, int fd, uint64_t off, uint64_t len)
{
	struct pool *p = e->priv;
	/* Split into chunks so the threads work on neighbouring pieces in order. */
	while (len) {
		uint64_t n = len < ENGINE_CHUNK ? len : ENGINE_CHUNK;
		pthread_mutex_lock(&p->mu);
		while (p->count == RING)
			pthread_cond_wait(&p->room, &p->mu);
		p->ring[(p->head + p->count) % RING] = (struct job){ fd, off, n };
		p->count++;
		pthread_cond_signal(&p->more);
		pthread_mutex_unlock(&p->mu);
		off += n;
		len -= n;
	}
	return 0;
}

static int pr_drain(struct engine *e)
{
	struct pool *p = e->priv;
	pthread_mutex_lock(&p->mu);
	while (p->busy || p->count)
		pthread_cond_wait(&p->idle, &p->mu);
	e->io_errors = p->errors;
	e->calls = p->calls;
	pthread_mutex_unlock(&p->mu);
	return 0;
}

static void pr_fini(struct engine *e)
{
	struct pool *p = e->priv;
	if (!p)
		return;
	pthread_mutex_lock(&p->mu);
	p->stop = true;
	pthread_cond_broadcast(&p->more);
	pthread_mutex_unlock(&p->mu);
	for (unsigned i = 0; i < p->started; i++)
		pthread_join(p->threads[i], NULL);
	e->io_errors = p->errors;
	e->calls = p->calls;
	pthread_mutex_destroy(&p->mu);
	pthread_cond_destroy(&p->more);
	pthread_cond_destroy(&p->room);
	pthread_cond_destroy(&p->idle);
	free(p);
	e->priv = NULL;
}

int engine_pread_init(struct engine *e, unsigned threads)
{
	struct pool *p = calloc(1, sizeof(*p));
	pthread_attr_t attr;
	int rc = 0;

	if (!p)
		return -ENOMEM;
	if (threads > 64)
		threads = 64;
	pthread_mutex_init(&p->mu, NULL);
	pthread_cond_init(&p->more, NULL);
	pthread_cond_init(&p->room, NULL);
	pthread_cond_init(&p->idle, NULL);
	e->name = "pread";
	e->async_completion = false;
	e->submit = pr_submit;
	e->drain = pr_drain;
	e->fini = pr_fini;
	e->depth = threads;
	e->priv = p;
	/* Small stacks: the workers only loop over pread. Keeps RSS and VSZ small. */
	pthread_attr_init(&attr);
	pthread_attr_setstacksize(&attr, 64 << 10);
	for (unsigned i = 0; i < threads; i++) {
		rc = -pthread_create(&p->threads[i], &attr, worker, p);
		if (rc)
			break;
		p->started++;
	}
	pthread_attr_destroy(&attr);
	if (rc)
		pr_fini(e);
	return rc;
}
