/* The 7200 rpm disk model: seek curve, rotating platter, one head, read-ahead buffer.
 * See docs/emulated-disk.md for the parameters and their sources. */
#include <errno.h>
#include <math.h>
#include <string.h>

#include "model.h"

void hdd_default_params(struct hdd_params *p)
{
	memset(p, 0, sizeof(*p));
	p->rpm = 7200;
	p->rate_bps = 130e6;
	p->iface_bps = 600e6;          /* SATA 6 Gb/s */
	p->track_seek_ns = 1.0e6;
	p->avg_seek_ns = 8.5e6;
	p->full_seek_ns = 16.0e6;
	p->knee = 0.3;
	p->overhead_ns = 0;
	p->cache_bytes = 4u << 20;
}

/* Seek curve with the knee time given: settle + sqrt below the knee, linear above. */
static double curve(const struct hdd_model *m, double knee_ns, double d)
{
	const struct hdd_params *p = &m->p;

	if (d <= 0)
		return 0;
	if (d >= 1)
		d = 1;
	if (d < p->knee)
		return p->track_seek_ns + (knee_ns - p->track_seek_ns) * sqrt(d / p->knee);
	return knee_ns + (p->full_seek_ns - knee_ns) * (d - p->knee) / (1 - p->knee);
}

/* Mean seek over random pairs in a span s of the stroke: distance density 2(s-x)/s^2. */
static double mean_curve(const struct hdd_model *m, double knee_ns, double s)
{
	const int n = 4000;
	double sum = 0;

	for (int i = 0; i < n; i++) {
		double x = (i + 0.5) / n * s;
		sum += curve(m, knee_ns, x) * 2 * (s - x) / (s * s) * (s / n);
	}
	return sum;
}

double hdd_seek_ns(const struct hdd_model *m, double frac)
{
	return curve(m, m->knee_seek_ns, frac);
}

double hdd_mean_seek_ns(const struct hdd_model *m, double span)
{
	return span > 0 ? mean_curve(m, m->knee_seek_ns, span) : 0;
}

int hdd_init(struct hdd_model *m, const struct hdd_params *p)
{
	memset(m, 0, sizeof(*m));
	m->p = *p;
	if (p->rpm <= 0 || p->rate_bps <= 0 || p->iface_bps <= 0 || p->knee <= 0 || p->knee >= 1 ||
	    p->track_seek_ns < 0 || p->avg_seek_ns <= p->track_seek_ns ||
	    p->full_seek_ns <= p->avg_seek_ns || p->stroke_bytes == 0)
		return -EINVAL;
	m->rev_ns = 60e9 / p->rpm;
	m->track_bytes = (uint64_t)(p->rate_bps * m->rev_ns / 1e9) / 512 * 512;
	if (m->track_bytes == 0)
		return -EINVAL;
	m->ntracks = p->stroke_bytes / m->track_bytes + 1;
	/* The mean is linear in the knee time: solve mean(knee) = avg_seek exactly. */
	double a = mean_curve(m, 0, 1), b = mean_curve(m, 1e6, 1) - a;
	m->knee_seek_ns = (p->avg_seek_ns - a) / b * 1e6;
	if (m->knee_seek_ns <= p->track_seek_ns || m->knee_seek_ns >= p->full_seek_ns)
		return -EINVAL;         /* no monotonic curve has that mean */
	return 0;
}

static uint64_t track_of(const struct hdd_model *m, uint64_t pos)
{
	return pos / m->track_bytes;
}

/* Wait from time t until the platter brings byte position pos under the head. */
static double rotation_wait_ns(const struct hdd_model *m, double t, uint64_t pos)
{
	double target = (double)(pos % m->track_bytes) / (double)m->track_bytes;
	double angle = fmod(t, m->rev_ns) / m->rev_ns;
	double turn = target - angle;

	if (turn < 0)
		turn += 1;
	return turn * m->rev_ns;
}

static double xfer_ns(double len, double bps)
{
	return len / bps * 1e9;
}

void hdd_submit(struct hdd_model *m, uint64_t now_ns, uint64_t off, uint64_t len, int is_write,
		struct io_result *r)
{
	const struct hdd_params *p = &m->p;
	uint64_t pos = p->offset_bytes + off, end = pos + len;
	double start = (double)(now_ns > m->ready_ns ? now_ns : m->ready_ns);
	double t0 = start + p->overhead_ns;
	uint64_t head = m->head_pos;   /* where the head is at `start` */
	double done;

	memset(r, 0, sizeof(*r));
	r->start_ns = (uint64_t)start;
	if (m->ra_valid) {
		uint64_t ra_end = m->head_pos + p->cache_bytes;     /* read-ahead stops here */
		double streamed = start > m->head_ns ? (start - m->head_ns) * p->rate_bps / 1e9 : 0;
		uint64_t hi = m->head_pos + (uint64_t)streamed;
		uint64_t lo;

		if (hi > ra_end)
			hi = ra_end;
		lo = hi > p->cache_bytes && hi - p->cache_bytes > m->ra_lo ? hi - p->cache_bytes : m->ra_lo;
		head = hi;
		if (!is_write && pos >= lo && end <= hi) {
			/* All in the buffer: only the interface transfer. The read-ahead goes on. */
			done = t0 + xfer_ns(len, p->iface_bps);
			r->cache_hit = 1;
			goto out;
		}
		if (!is_write && pos >= lo && hi < ra_end && pos <= hi + m->track_bytes) {
			/* The head is streaming just before or into the request: keep reading. */
			double media = m->head_ns + xfer_ns(end - m->head_pos, p->rate_bps);
			done = media > t0 ? media : t0;
			m->ra_lo = lo;
			m->head_pos = end;
			m->head_ns = (uint64_t)media;
			goto out;
		}
	}
	/* Seek to the track, wait for the sector, transfer from the media. */
	{
		uint64_t from = track_of(m, head), to = track_of(m, pos);
		uint64_t dist = from > to ? from - to : to - from;
		double t = t0 + hdd_seek_ns(m, (double)dist / (double)m->ntracks);

		r->seeked = dist != 0;
		t += rotation_wait_ns(m, t, pos);
		done = t + xfer_ns(len, p->rate_bps);
		m->head_pos = end;
		m->head_ns = (uint64_t)done;
		m->ra_lo = pos;
		/* Drives read ahead after reads; after a write the buffer no longer matches. */
		m->ra_valid = !is_write;
	}
out:
	r->done_ns = (uint64_t)done;
	m->ready_ns = r->done_ns;
}
