/* Unit tests of the disk models (no FUSE, no I/O): the numbers docs/emulated-disk.md promises. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "model.h"

static int passed, failed;

#define CHECK(cond, ...)                                                        \
	do {                                                                    \
		if (cond) {                                                     \
			passed++;                                               \
		} else {                                                        \
			failed++;                                               \
			printf("FAIL %s:%d: ", __FILE__, __LINE__);             \
			printf(__VA_ARGS__);                                    \
			printf("\n");                                           \
		}                                                               \
	} while (0)

static double rel(double got, double want) { return fabs(got - want) / want; }

static struct hdd_model make_hdd(uint64_t stroke)
{
	struct hdd_params p;
	struct hdd_model m;

	hdd_default_params(&p);
	p.stroke_bytes = stroke;
	if (hdd_init(&m, &p) != 0) {
		printf("FAIL hdd_init with defaults\n");
		exit(1);
	}
	return m;
}

static void test_seek_curve(void)
{
	struct hdd_model m = make_hdd(1000000000000ull);
	double prev = 0;

	CHECK(hdd_seek_ns(&m, 0) == 0, "no move, no seek");
	CHECK(rel(hdd_seek_ns(&m, 1e-9), 1.0e6) < 0.01, "shortest seek is the settle time");
	CHECK(rel(hdd_seek_ns(&m, 1), 16e6) < 1e-9, "full stroke %.0f", hdd_seek_ns(&m, 1));
	CHECK(rel(hdd_mean_seek_ns(&m, 1), 8.5e6) < 0.001, "mean random seek %.0f", hdd_mean_seek_ns(&m, 1));
	for (int i = 1; i <= 1000; i++) {
		double s = hdd_seek_ns(&m, i / 1000.0);
		CHECK(s > prev, "seek curve increases at %d/1000", i);
		prev = s;
	}
	CHECK(hdd_mean_seek_ns(&m, 0.1) < 5e6, "a 10%% partition seeks short: %.0f", hdd_mean_seek_ns(&m, 0.1));
}

static void test_bad_params(void)
{
	struct hdd_params p;
	struct hdd_model m;
	struct ssd_params sp;
	struct ssd_model s;

	hdd_default_params(&p);
	p.stroke_bytes = 1 << 30;
	p.avg_seek_ns = 20e6;                       /* above full stroke */
	CHECK(hdd_init(&m, &p) == -EINVAL, "avg > full is refused");
	hdd_default_params(&p);
	CHECK(hdd_init(&m, &p) == -EINVAL, "a zero stroke is refused");
	ssd_default_params(&sp);
	sp.channels = 0;
	CHECK(ssd_init(&s, &sp) == -EINVAL, "zero channels are refused");
}

/* QD1 random 4 KiB reads over the whole stroke: seek + half a revolution on average. */
static void test_random_reads(void)
{
	const uint64_t stroke = 512ull << 20;
	struct hdd_model m = make_hdd(stroke);
	struct io_result r;
	uint64_t t = 1000000000ull, t0 = t;
	const int n = 20000;
	int seeks = 0;

	srand(42);
	for (int i = 0; i < n; i++) {
		uint64_t off = ((uint64_t)rand() % (stroke / 4096)) * 4096;
		hdd_submit(&m, t, off, 4096, 0, &r);
		seeks += r.seeked;
		t = r.done_ns + 30000 + (uint64_t)(rand() % 100000);   /* host think time */
	}
	double per = (double)(t - t0) / n;
	double want = hdd_mean_seek_ns(&m, 1) + m.rev_ns / 2 + 4096 / 130e6 * 1e9 + 80000;
	CHECK(rel(per, want) < 0.03, "random read %.0f ns, model says %.0f", per, want);
	CHECK(seeks > n * 99 / 100, "random reads seek (%d of %d)", seeks, n);
}

/* Back-to-back 1 MiB reads with host gaps stream at the media rate thanks to read-ahead. */
static void test_sequential(void)
{
	struct hdd_model m = make_hdd(1ull << 30);
	struct io_result r;
	uint64_t t = 5000000ull, t0 = t;
	int seeks = 0;

	for (uint64_t off = 0; off < (64u << 20); off += 1 << 20) {
		hdd_submit(&m, t, off, 1 << 20, 0, &r);
		seeks += r.seeked;
		t = r.done_ns + 50000;
	}
	double want = (64u << 20) / 130e6 * 1e9;
	CHECK(rel((double)(r.done_ns - t0), want) < 0.05, "64 MiB in %.0f ns, want %.0f",
	      (double)(r.done_ns - t0), want);
	CHECK(seeks == 0, "sequential reads do not seek (%d)", seeks);
}

static void test_readahead_buffer(void)
{
	struct hdd_model m = make_hdd(1ull << 30);
	struct io_result r;

	hdd_submit(&m, 1000000, 100 << 20, 65536, 0, &r);
	uint64_t idle = r.done_ns + 20000000;       /* 20 ms idle: drive reads ahead ~2.6 MB */
	hdd_submit(&m, idle, (100 << 20) + 65536, 65536, 0, &r);
	CHECK(r.cache_hit && r.done_ns - idle < 200000, "follow-on read from the buffer (%llu ns)",
	      (unsigned long long)(r.done_ns - idle));
	/* Far beyond what was read ahead: a real access. */
	hdd_submit(&m, r.done_ns + 1000, (100 << 20) + (64 << 20), 4096, 0, &r);
	CHECK(!r.cache_hit && r.seeked, "a far read seeks");
	/* Out of order: the later block first, then the earlier one comes from the buffer. */
	hdd_submit(&m, r.done_ns + 1000, 300 << 20, 4096, 0, &r);
	hdd_submit(&m, r.done_ns + 1000, (300 << 20) + 8192, 4096, 0, &r);
	hdd_submit(&m, r.done_ns + 1000, (300 << 20) + 4096, 4096, 0, &r);
	CHECK(r.cache_hit, "a block behind the head is in the buffer");
	/* A write invalidates the buffer. */
	hdd_submit(&m, r.done_ns + 1000, 300 << 20, 4096, 1, &r);
	hdd_submit(&m, r.done_ns + 5000000, (300 << 20) + 4096, 4096, 0, &r);
	CHECK(!r.cache_hit, "no read-ahead after a write");
}

static void test_ssd(void)
{
	struct ssd_params p;
	struct ssd_model m;
	struct io_result r[5];

	ssd_default_params(&p);
	CHECK(ssd_init(&m, &p) == 0, "ssd defaults");
	for (int i = 0; i < 5; i++)
		ssd_submit(&m, 1000000, (uint64_t)i * 4096, 4096, 0, &r[i]);
	double one = 90e3 + 4096 / 500e6 * 1e9;
	CHECK(rel((double)(r[0].done_ns - 1000000), one) < 0.01, "one 4 KiB read %.0f ns",
	      (double)(r[0].done_ns - 1000000));
	CHECK(r[3].done_ns - 1000000 < 2 * one, "4 channels in parallel (%llu ns)",
	      (unsigned long long)(r[3].done_ns - 1000000));
	CHECK(r[4].done_ns - 1000000 > 2 * 90e3, "the 5th waits for a channel");
	ssd_init(&m, &p);
	uint64_t t = 0;
	for (int i = 0; i < 64; i++)
		ssd_submit(&m, 0, (uint64_t)i << 20, 1 << 20, 0, &r[0]);
	t = r[0].done_ns;
	CHECK(rel((double)t, 64 * (1 << 20) / 500e6 * 1e9) < 0.02, "bandwidth bound %.0f ns", (double)t);
}

int main(void)
{
	test_seek_curve();
	test_bad_params();
	test_random_reads();
	test_sequential();
	test_readahead_buffer();
	test_ssd();
	printf("test_hddsim_model: %d passed, %d failed\n", passed, failed);
	return failed ? 1 : 0;
}
