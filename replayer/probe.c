/* warmstart-probe: time reads of a list of byte ranges from a block device or file, with
 * O_DIRECT + libaio, in the given order, at a given queue depth.
 *
 *   warmstart-probe [-q QD] [-f RANGES] [-r REPEAT] [-n] DEVICE
 *
 * RANGES (default stdin): one "OFFSET LENGTH" pair per line, in bytes. Each range is widened to
 * the device's logical block size (O_DIRECT needs it). With -n the ranges are only checked and
 * the device opened (O_DIRECT support test), nothing is read.
 * Output (stdout, one JSON object): elapsed_ns of the whole list, per-request service times
 * (submit to completion) and bytes read; with -r the list is run REPEAT times and every run's
 * elapsed_ns is reported. Errors: a message on stderr naming the path and errno, exit 1
 * (2 for bad usage, 3 when the device cannot be opened with O_DIRECT).
 *
 * Why O_DIRECT: the analyzer must time the disk, not the page cache.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <libaio.h>
#include <linux/fs.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define MAX_CHUNK (4u << 20) /* a longer range is read as several requests of this size */

struct req {
	uint64_t off;
	uint64_t len;
};

struct reqlist {
	struct req *v;
	size_t n, cap;
};

static uint64_t now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static int push(struct reqlist *l, uint64_t off, uint64_t len)
{
	if (l->n == l->cap) {
		size_t cap = l->cap ? l->cap * 2 : 256;
		struct req *v = realloc(l->v, cap * sizeof(*v));
		if (!v)
			return -ENOMEM;
		l->v = v;
		l->cap = cap;
	}
	l->v[l->n].off = off;
	l->v[l->n].len = len;
	l->n++;
	return 0;
}

/* Parse "OFFSET LENGTH" lines, widen to `align`, split at MAX_CHUNK. */
static int read_ranges(FILE *in, uint64_t align, uint64_t limit, struct reqlist *out)
{
	char line[256];
	unsigned lineno = 0;
	while (fgets(line, sizeof(line), in)) {
		unsigned long long off, len;
		char *p = line;
		lineno++;
		while (*p == ' ' || *p == '\t')
			p++;
		if (*p == '\n' || *p == '#' || *p == '\0')
			continue;
		if (sscanf(p, "%llu %llu", &off, &len) != 2 || len == 0) {
			fprintf(stderr, "warmstart-probe: line %u: expected 'OFFSET LENGTH' in bytes\n", lineno);
			return -EINVAL;
		}
		uint64_t start = off / align * align;
		uint64_t end = (off + len + align - 1) / align * align;
		if (limit && end > limit) {
			fprintf(stderr, "warmstart-probe: line %u: range %llu+%llu ends beyond the device (%" PRIu64 " bytes)\n",
				lineno, off, len, limit);
			return -EINVAL;
		}
		for (uint64_t o = start; o < end; o += MAX_CHUNK) {
			uint64_t l = end - o < MAX_CHUNK ? end - o : MAX_CHUNK;
			int rc = push(out, o, l);
			if (rc)
				return rc;
		}
	}
	return ferror(in) ? -EIO : 0;
}

struct slot {
	struct iocb cb;
	void *buf;
	size_t idx;
	uint64_t submit_ns;
};

/* Run the list once at queue depth qd; fill times[] and *elapsed. */
static int run_once(io_context_t ctx, int fd, const struct reqlist *l, struct slot *slots, unsigned qd,
		    uint64_t *times, uint64_t *elapsed)
{
	struct io_event ev[64];
	struct slot *free_slots[qd];
	unsigned nfree = qd;
	size_t next = 0, done = 0;
	uint64_t t0 = now_ns();

	for (unsigned i = 0; i < qd; i++)
		free_slots[i] = &slots[i];
	while (done < l->n) {
		while (nfree && next < l->n) {
			struct slot *s = free_slots[--nfree];
			struct iocb *cbp = &s->cb;
			io_prep_pread(&s->cb, fd, s->buf, l->v[next].len, (long long)l->v[next].off);
			s->cb.data = s;
			s->idx = next;
			s->submit_ns = now_ns();
			int rc = io_submit(ctx, 1, &cbp);
			if (rc != 1)
				return rc < 0 ? rc : -EIO;
			next++;
		}
		int got = io_getevents(ctx, 1, 64, ev, NULL);
		if (got == -EINTR)
			continue;
		if (got < 0)
			return got;
		uint64_t t = now_ns();
		for (int i = 0; i < got; i++) {
			struct slot *s = ev[i].data;
			long res = (long)ev[i].res;
			if (res < 0)
				return (int)res;
			/* A short read at the end of a file is fine; of a device it is not. */
			times[s->idx] = t - s->submit_ns;
			free_slots[nfree++] = s;
			done++;
		}
	}
	*elapsed = now_ns() - t0;
	return 0;
}

static void usage(FILE *f)
{
	fprintf(f, "usage: warmstart-probe [-q QD] [-f RANGES] [-r REPEAT] [-n] DEVICE_OR_FILE\n"
		   "  reads 'OFFSET LENGTH' byte ranges (stdin or -f) with O_DIRECT+libaio in the given order\n"
		   "  and prints {\"elapsed_ns\":..,\"requests\":[ns..],\"bytes\":..} as JSON\n"
		   "  -q QD      queue depth (default 1)\n"
		   "  -r REPEAT  run the list REPEAT times (default 1); runs[] holds each elapsed_ns\n"
		   "  -n         open with O_DIRECT and check the ranges, read nothing\n");
}

/* One probe: the options, the target and the list, and what the reads need. */
struct probe {
	unsigned qd, repeat;
	int dry;
	const char *list_path, *path;
	int fd;
	uint64_t size, align;    /* size: of a device (bounds the ranges); 0 for a file */
	FILE *in;
	struct reqlist l;
	struct slot *slots;      /* qd of them, each with a buffer of the longest request */
	uint64_t *times, *runs;  /* per request, per run */
	io_context_t ctx;
	int have_ctx;
};

/* Returns -1 to go on, or the exit code (help, bad usage). */
static int parse_args(int argc, char **argv, struct probe *p)
{
	int opt;
	while ((opt = getopt(argc, argv, "q:f:r:nh")) != -1) {
		switch (opt) {
		case 'q': p->qd = (unsigned)strtoul(optarg, NULL, 10); break;
		case 'f': p->list_path = optarg; break;
		case 'r': p->repeat = (unsigned)strtoul(optarg, NULL, 10); break;
		case 'n': p->dry = 1; break;
		case 'h': usage(stdout); return 0;
		default: usage(stderr); return 2;
		}
	}
	if (optind != argc - 1 || p->qd < 1 || p->qd > 256 || p->repeat < 1) {
		usage(stderr);
		return 2;
	}
	p->path = argv[optind];
	return -1;
}

/* Open the target with O_DIRECT; of a device, learn its size and logical block size. Returns 0
 * or the exit code (3: no O_DIRECT). */
static int open_target(struct probe *p)
{
	struct stat st;
	p->fd = open(p->path, O_RDONLY | O_DIRECT | O_CLOEXEC);
	if (p->fd < 0) {
		int e = errno;
		fprintf(stderr, "warmstart-probe: cannot open %s with O_DIRECT: %s\n", p->path, strerror(e));
		return e == EINVAL ? 3 : 1;
	}
	if (fstat(p->fd, &st) < 0) {
		fprintf(stderr, "warmstart-probe: stat %s: %s\n", p->path, strerror(errno));
		return 1;
	}
	if (S_ISBLK(st.st_mode)) {
		int lbs = 0;
		if (ioctl(p->fd, BLKGETSIZE64, &p->size) < 0) {
			fprintf(stderr, "warmstart-probe: BLKGETSIZE64 %s: %s\n", p->path, strerror(errno));
			return 1;
		}
		if (ioctl(p->fd, BLKSSZGET, &lbs) == 0 && lbs > 0 && (uint64_t)lbs > p->align)
			p->align = (uint64_t)lbs;
	} else {
		p->size = 0; /* a file may be read up to its end; a short read is accepted */
	}
	return 0;
}

/* Read the list (-f or stdin). Returns 0 or -1 (said on stderr). */
static int load_ranges(struct probe *p)
{
	if (p->list_path) {
		p->in = fopen(p->list_path, "re");
		if (!p->in) {
			fprintf(stderr, "warmstart-probe: cannot open %s: %s\n", p->list_path, strerror(errno));
			return -1;
		}
	}
	int rc = read_ranges(p->in, p->align, p->size, &p->l);
	if (rc) {
		if (rc != -EINVAL)
			fprintf(stderr, "warmstart-probe: reading ranges: %s\n", strerror(-rc));
		return -1;
	}
	return 0;
}

/* Slots with aligned buffers, result arrays and the aio context. Returns 0 or -1 (said). */
static int setup_io(struct probe *p)
{
	int rc;
	if (p->qd > p->l.n && p->l.n)
		p->qd = (unsigned)p->l.n;
	p->slots = calloc(p->qd, sizeof(*p->slots));
	p->times = calloc(p->l.n ? p->l.n : 1, sizeof(*p->times));
	p->runs = calloc(p->repeat, sizeof(*p->runs));
	if (!p->slots || !p->times || !p->runs) {
		fprintf(stderr, "warmstart-probe: out of memory\n");
		return -1;
	}
	uint64_t maxlen = p->align;
	for (size_t i = 0; i < p->l.n; i++)
		if (p->l.v[i].len > maxlen)
			maxlen = p->l.v[i].len;
	for (unsigned i = 0; i < p->qd; i++) {
		if ((rc = posix_memalign(&p->slots[i].buf, p->align, maxlen)) != 0) {
			p->slots[i].buf = NULL;
			fprintf(stderr, "warmstart-probe: buffer: %s\n", strerror(rc));
			return -1;
		}
	}
	if ((rc = io_setup((int)p->qd, &p->ctx)) < 0) {
		fprintf(stderr, "warmstart-probe: io_setup: %s\n", strerror(-rc));
		return -1;
	}
	p->have_ctx = 1;
	return 0;
}

static void print_result(const struct probe *p)
{
	uint64_t bytes = 0;
	for (size_t i = 0; i < p->l.n; i++)
		bytes += p->l.v[i].len;
	printf("{\"elapsed_ns\":%" PRIu64 ",\"bytes\":%" PRIu64 ",\"qd\":%u,\"align\":%" PRIu64 ",\"runs\":[",
	       p->runs[p->repeat - 1], bytes, p->qd, p->align);
	for (unsigned r = 0; r < p->repeat; r++)
		printf("%s%" PRIu64, r ? "," : "", p->runs[r]);
	printf("],\"requests\":[");
	for (size_t i = 0; i < p->l.n; i++)
		printf("%s%" PRIu64, i ? "," : "", p->times[i]);
	printf("]}\n");
}

/* Returns the exit code. */
static int probe_run(struct probe *p)
{
	int ex = open_target(p);
	if (ex)
		return ex;
	if (load_ranges(p))
		return 1;
	if (p->dry) {
		printf("{\"o_direct\":true,\"requests\":%zu,\"align\":%" PRIu64 ",\"size\":%" PRIu64 "}\n",
		       p->l.n, p->align, p->size);
		return 0;
	}
	if (setup_io(p))
		return 1;
	for (unsigned r = 0; r < p->repeat; r++) {
		int rc = run_once(p->ctx, p->fd, &p->l, p->slots, p->qd, p->times, &p->runs[r]);
		if (rc) {
			fprintf(stderr, "warmstart-probe: read from %s: %s\n", p->path, strerror(-rc));
			return 1;
		}
	}
	print_result(p);
	return fflush(stdout) == 0 ? 0 : 1;
}

static void probe_free(struct probe *p)
{
	if (p->have_ctx)
		io_destroy(p->ctx);
	if (p->slots)
		for (unsigned i = 0; i < p->qd; i++)
			free(p->slots[i].buf);
	free(p->slots);
	free(p->times);
	free(p->runs);
	free(p->l.v);
	if (p->in && p->in != stdin)
		fclose(p->in);
	if (p->fd >= 0)
		close(p->fd);
}

int main(int argc, char **argv)
{
	struct probe p = { .qd = 1, .repeat = 1, .fd = -1, .align = 4096, .in = stdin };
	int ex = parse_args(argc, argv, &p);
	if (ex >= 0)
		return ex;
	ex = probe_run(&p);
	probe_free(&p);
	return ex;
}
