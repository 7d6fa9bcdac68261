/* Seeded mutation fuzzing of the binary readers that take files from outside the process:
 * the schedule export (.wsr, wsr_parse, read by the replayer as root) and the hook index
 * (hook.idx, ws_index_parse, read by warmstartd and by the preload shim in every process).
 *
 * Built with ASan and UBSan (no recovery): an out-of-bounds read, an overflow or any undefined
 * behaviour aborts the run. Structure-aware: after mutating a seed, the checksums are recomputed
 * most of the time, so a mutation reaches the checks behind them instead of stopping at the
 * checksum. When the sanitizer kills the run, the input is saved (crash-<format>-<n>) for a
 * regression test.
 *
 *   fuzz-formats [--seconds S] [--seed N] [--crash-dir DIR] FILE|DIR...   fuzz for S seconds
 *   fuzz-formats --replay FILE...                                         run inputs once
 *
 * With --replay, a file named refused-* must be refused by its reader and one named parses-*
 * accepted (tests/fuzz/regressions: past findings; make_corpus.py --regressions writes them).
 *
 * Files are told apart by their magic. Prints "N executions, N accepted" per format. */
#include <dirent.h>
#include <errno.h>
#include <stddef.h>
#include <fcntl.h>
#include <sanitizer/common_interface_defs.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "../../launchd-hook/index.h"
#include "../../replayer/wsr_format.h"

enum fmt { FMT_WSR, FMT_IDX, NFMT };
static const char *fmt_name[NFMT] = {"wsr", "idx"};

struct seed {
	enum fmt fmt;
	unsigned char *data;
	size_t len;
	const char *name; /* the file's base name */
};

static struct seed *seeds;
static size_t nseeds;
static unsigned char *cur;          /* the input under test, saved if the sanitizer fires */
static size_t cur_len;
static enum fmt cur_fmt;
static const char *crash_dir = ".";
static unsigned long long execs[NFMT], accepted[NFMT];
static volatile unsigned long long sink; /* keeps the readers' results alive */

static void save_crash(void)
{
	char path[4096];
	static int n;

	snprintf(path, sizeof(path), "%s/crash-%s-%d-%d", crash_dir, fmt_name[cur_fmt], (int)getpid(), n++);
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	if (fd >= 0) {
		if (write(fd, cur, cur_len) == (ssize_t)cur_len)
			fprintf(stderr, "fuzz-formats: input saved to %s\n", path);
		close(fd);
	}
}

/* ---- the readers, driven the way their callers use them -------------------------------- */

static void run_wsr(unsigned char *buf, size_t len)
{
	struct wsr_schedule s;
	const char *why;
	void *image = malloc(len ? len : 1);

	if (!image)
		abort();
	memcpy(image, buf, len);
	if (wsr_parse(image, len, &s, &why) != 0) {
		free(image);
		return;
	}
	accepted[FMT_WSR]++;
	unsigned long long h = s.schedule_id;
	for (uint32_t i = 0; i < s.nfiles; i++)
		for (uint32_t k = 0; k < s.files[i].path_len; k++)
			h = h * 31 + (unsigned char)s.files[i].path[k];
	for (uint32_t i = 0; i < s.nsegments; i++)
		for (uint32_t r = s.segments[i].first_range; r < s.segments[i].first_range + s.segments[i].nranges; r++)
			h += s.ranges[r].offset + s.ranges[r].length + s.files[s.ranges[r].file_no].size;
	sink += h;
	wsr_free(&s);
}

static void run_idx(unsigned char *buf, size_t len)
{
	struct ws_index idx;
	/* the daemon maps the file: page-aligned, so the header and entries are aligned */
	void *copy = aligned_alloc(4096, (len + 4095) / 4096 * 4096 + 4096);

	if (!copy)
		abort();
	memcpy(copy, buf, len);
	memset(&idx, 0, sizeof(idx));
	if (ws_index_parse(&idx, copy, len) == 0) {
		char a0[] = "prog", a1[] = "-c", a2[] = "x";
		char *argv[] = {a0, a1, a2, NULL};
		int mismatch;

		accepted[FMT_IDX]++;
		for (uint32_t i = 0; i < idx.hdr->n_entries; i++) {
			const struct ws_index_entry *e = &idx.entries[i];
			sink += strlen(ws_index_str(&idx, e->exe_off)) + strlen(ws_index_str(&idx, e->sched_off)) +
				strlen(ws_index_str(&idx, e->name_off));
			sink += (uintptr_t)ws_index_find(&idx, e->dev, e->ino) + ws_entry_hold_ms(&idx, e);
			sink += (uintptr_t)ws_index_match(&idx, e->dev, e->ino, e->size, e->mtime_ns, argv, 3, 1000, &mismatch);
			sink += (uintptr_t)ws_index_match(&idx, e->dev, e->ino, e->size, e->mtime_ns, NULL, 0, 0, &mismatch);
		}
		sink += (uintptr_t)ws_index_find(&idx, 1, 1);
	}
	free(copy);
}

static void run_one(enum fmt f, unsigned char *buf, size_t len)
{
	cur = buf;
	cur_len = len;
	cur_fmt = f;
	execs[f]++;
	if (f == FMT_WSR)
		run_wsr(buf, len);
	else
		run_idx(buf, len);
}

/* ---- mutation ------------------------------------------------------------------------------ */

static uint64_t rng_state;

static uint64_t rnd(void)
{
	rng_state ^= rng_state << 13;
	rng_state ^= rng_state >> 7;
	rng_state ^= rng_state << 17;
	return rng_state;
}

static const uint64_t interesting[] = {0, 1, 2, 0x7f, 0x80, 0xff, 0x100, 0x7fff, 0x8000, 0xffff, 0x10000,
				       0x7fffffff, 0x80000000u, 0xffffffffu, 0x100000000ull,
				       0x7fffffffffffffffull, 0x8000000000000000ull, ~0ull, 4096, 4095, 88, 64};

static void put(unsigned char *p, uint64_t v, int bytes)
{
	for (int i = 0; i < bytes; i++)
		p[i] = (unsigned char)(v >> (8 * i));
}

static uint64_t get(const unsigned char *p, int bytes)
{
	uint64_t v = 0;
	for (int i = 0; i < bytes; i++)
		v |= (uint64_t)p[i] << (8 * i);
	return v;
}

static size_t mutate(unsigned char *b, size_t len, size_t cap)
{
	int rounds = 1 + (int)(rnd() % 4);

	while (rounds--) {
		size_t at = len ? rnd() % len : 0;
		switch (rnd() % 8) {
		case 0: /* flip a bit */
			if (len)
				b[at] ^= (unsigned char)(1u << (rnd() % 8));
			break;
		case 1: /* a random byte */
			if (len)
				b[at] = (unsigned char)rnd();
			break;
		case 2: /* an interesting 32-bit value on a field boundary */
		case 3:
			at &= ~(size_t)3;
			if (at + 4 <= len)
				put(b + at, interesting[rnd() % (sizeof(interesting) / sizeof(*interesting))], 4);
			break;
		case 4: /* an interesting 64-bit value */
			at &= ~(size_t)7;
			if (at + 8 <= len)
				put(b + at, interesting[rnd() % (sizeof(interesting) / sizeof(*interesting))], 8);
			break;
		case 5: /* add or subtract a little from a 32-bit field (counts, offsets, lengths) */
			at &= ~(size_t)3;
			if (at + 4 <= len)
				put(b + at, get(b + at, 4) + (rnd() % 17) - 8, 4);
			break;
		case 6: /* truncate */
			if (len)
				len = rnd() % len;
			break;
		case 7: /* grow: repeat a tail block (more entries than the header says) */
			if (len && len < cap) {
				size_t n = 1 + rnd() % (len < 128 ? len : 128);
				if (len + n > cap)
					n = cap - len;
				memmove(b + len, b + len - n, n);
				len += n;
			}
			break;
		}
	}
	return len;
}

/* Recompute the checksums the mutation broke, as a writer that meant it would. */
static void fix_checksums(enum fmt f, unsigned char *b, size_t len)
{
	if (f == FMT_WSR && len >= WSR_HEADER_SIZE) {
		uint64_t payload = len - WSR_HEADER_SIZE;
		if (rnd() % 4)
			put(b + WSR_HEADER_PAYLOAD_LEN_OFF, payload, WSR_HEADER_PAYLOAD_LEN_LEN); /* usually also make the size agree */
		put(b + WSR_HEADER_PAYLOAD_CRC32_OFF, wsr_crc32(0, b + WSR_HEADER_SIZE, payload), WSR_HEADER_PAYLOAD_CRC32_LEN);
		unsigned char hdr[WSR_HEADER_SIZE];
		memcpy(hdr, b, sizeof(hdr));
		memset(hdr + WSR_HEADER_HEADER_CRC32_OFF, 0, WSR_HEADER_HEADER_CRC32_LEN);
		put(b + WSR_HEADER_HEADER_CRC32_OFF, wsr_crc32(0, hdr, sizeof(hdr)), WSR_HEADER_HEADER_CRC32_LEN);
	} else if (f == FMT_IDX && len >= sizeof(struct ws_index_header)) {
		size_t h = sizeof(struct ws_index_header);
		put(b + offsetof(struct ws_index_header, checksum), ws_fnv1a64(b + h, len - h), 8);
	}
}

/* ---- inputs -------------------------------------------------------------------------------- */

static int read_file(const char *path, unsigned char **data, size_t *len)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	struct stat st;

	if (fd < 0 || fstat(fd, &st) < 0 || !S_ISREG(st.st_mode)) {
		if (fd >= 0)
			close(fd);
		return -1;
	}
	*data = malloc(st.st_size ? st.st_size : 1);
	if (!*data || read(fd, *data, st.st_size) != st.st_size) {
		close(fd);
		return -1;
	}
	close(fd);
	*len = st.st_size;
	return 0;
}

static int fmt_of(const unsigned char *d, size_t len)
{
	if (len >= 8 && !memcmp(d, WSR_MAGIC, 8))
		return FMT_WSR;
	if (len >= 8 && !memcmp(d, WS_INDEX_MAGIC, 8))
		return FMT_IDX;
	return -1;
}

static void add_seed(const char *path)
{
	unsigned char *d;
	size_t len;
	int f;

	if (read_file(path, &d, &len) < 0) {
		fprintf(stderr, "fuzz-formats: cannot read %s: skipped\n", path);
		return;
	}
	if ((f = fmt_of(d, len)) < 0) {
		fprintf(stderr, "fuzz-formats: %s is neither a .wsr nor a hook index (magic): skipped\n", path);
		free(d);
		return;
	}
	seeds = realloc(seeds, (nseeds + 1) * sizeof(*seeds));
	const char *base = strrchr(path, '/');
	seeds[nseeds++] = (struct seed){f, d, len, strdup(base ? base + 1 : path)};
}

static void add_path(const char *path)
{
	DIR *dir = opendir(path);
	struct dirent *de;

	if (!dir) {
		add_seed(path);
		return;
	}
	while ((de = readdir(dir))) {
		char full[4096];
		if (de->d_name[0] == '.')
			continue;
		snprintf(full, sizeof(full), "%s/%s", path, de->d_name);
		add_seed(full);
	}
	closedir(dir);
}

static double now_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

int main(int argc, char **argv)
{
	double seconds = 10;
	int replay = 0, i;

	rng_state = 0x9e3779b97f4a7c15ull;
	for (i = 1; i < argc && argv[i][0] == '-'; i++) {
		if (!strcmp(argv[i], "--seconds") && i + 1 < argc)
			seconds = atof(argv[++i]);
		else if (!strcmp(argv[i], "--seed") && i + 1 < argc)
			rng_state = strtoull(argv[++i], NULL, 0) | 1;
		else if (!strcmp(argv[i], "--crash-dir") && i + 1 < argc)
			crash_dir = argv[++i];
		else if (!strcmp(argv[i], "--replay"))
			replay = 1;
		else {
			fprintf(stderr, "usage: fuzz-formats [--seconds S] [--seed N] [--crash-dir DIR] [--replay] FILE|DIR...\n");
			return 2;
		}
	}
	for (; i < argc; i++)
		add_path(argv[i]);
	if (!nseeds) {
		fprintf(stderr, "fuzz-formats: no inputs: name corpus files or directories (tests/fuzz/corpus)\n");
		return 2;
	}
	__sanitizer_set_death_callback(save_crash);

	size_t cap = 0;
	for (size_t s = 0; s < nseeds; s++)
		cap = seeds[s].len > cap ? seeds[s].len : cap;
	cap = cap * 2 + 256;
	unsigned char *buf = malloc(cap);
	if (!buf)
		return 1;
	/* every input as it is first: seeds must parse (a seed the reader refuses tests nothing) */
	for (size_t s = 0; s < nseeds; s++) {
		memcpy(buf, seeds[s].data, seeds[s].len);
		unsigned long long before = accepted[seeds[s].fmt];
		run_one(seeds[s].fmt, buf, seeds[s].len);
		int took = accepted[seeds[s].fmt] != before;
		if (!replay && !took) {
			fprintf(stderr, "fuzz-formats: seed %zu (%s) is refused by its reader: regenerate the corpus\n",
				s, fmt_name[seeds[s].fmt]);
			return 1;
		}
		int must_refuse = !strncmp(seeds[s].name, "refused-", 8), must_parse = !strncmp(seeds[s].name, "parses-", 7);
		if (replay && ((must_refuse && took) || (must_parse && !took))) {
			fprintf(stderr, "fuzz-formats: %s was %s by its reader (a past finding is back)\n",
				seeds[s].name, took ? "accepted" : "refused");
			return 1;
		}
	}
	if (!replay) {
		double end = now_s() + seconds;
		unsigned long long n = 0;
		while ((n++ & 255) || now_s() < end) {
			struct seed *sd = &seeds[rnd() % nseeds];
			memcpy(buf, sd->data, sd->len);
			size_t len = mutate(buf, sd->len, cap);
			if (rnd() % 8)
				fix_checksums(sd->fmt, buf, len);
			run_one(sd->fmt, buf, len);
		}
	}
	for (int f = 0; f < NFMT; f++)
		printf("%s: %llu executions, %llu accepted\n", fmt_name[f], execs[f], accepted[f]);
	printf("fuzz-formats: no finding (%zu inputs, %.0f s)\n", nseeds, replay ? 0.0 : seconds);
	free(buf);
	return 0;
}
