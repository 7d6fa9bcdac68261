/* The SSD model: fixed latency per request on one of a few channels, a shared transfer bus. */
#include <errno.h>
#include <string.h>

#include "model.h"

void ssd_default_params(struct ssd_params *p)
{
	p->latency_ns = 90e3;
	p->rate_bps = 500e6;
	p->channels = 4;
}

int ssd_init(struct ssd_model *m, const struct ssd_params *p)
{
	memset(m, 0, sizeof(*m));
	if (p->latency_ns < 0 || p->rate_bps <= 0 || p->channels < 1 || p->channels > SSD_MAX_CHANNELS)
		return -EINVAL;
	m->p = *p;
	return 0;
}

void ssd_submit(struct ssd_model *m, uint64_t now_ns, uint64_t off, uint64_t len, int is_write,
		struct io_result *r)
{
	int c = 0;
	double start, t;

	(void)off;
	(void)is_write;
	for (int i = 1; i < m->p.channels; i++)     /* the channel free first */
		if (m->chan_free[i] < m->chan_free[c])
			c = i;
	start = (double)(now_ns > m->chan_free[c] ? now_ns : m->chan_free[c]);
	t = start + m->p.latency_ns;                 /* flash access, in parallel per channel */
	if (t < (double)m->bus_free)
		t = (double)m->bus_free;
	t += (double)len / m->p.rate_bps * 1e9;     /* transfer, one at a time on the bus */
	memset(r, 0, sizeof(*r));
	r->start_ns = (uint64_t)start;
	r->done_ns = (uint64_t)t;
	m->bus_free = r->done_ns;
	m->chan_free[c] = r->done_ns;
}
