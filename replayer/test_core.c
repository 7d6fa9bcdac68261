/* C tests of plan ordering, the pressure parsers, residency on a real file, and opening a path
 * without following symlinks in any component (openat2 and the fallback walk). */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <errno.h>
#include <sys/stat.h>
#include <unistd.h>

#include "appwatch.h"
#include "fsmeta.h"
#include "pathopen.h"
#include "pressure.h"
#include "replay.h"
#include "residency.h"

static int passed, failed;
#define CHECK(cond, what) do { if (cond) passed++; else { failed++; fprintf(stderr, "FAIL %s:%d %s\n", __FILE__, __LINE__, what); } } while (0)

static void test_plan(void)
{
	/* Two segments; LBAs (sectors) and original positions chosen to differ in every mode. */
	struct wsr_file f[1] = { { .kind = WSR_KIND_FILE } };
	struct wsr_segment g[2] = { { 1, 0, 2, 0, 0 }, { 2, 2, 2, 0, 0 } };
	struct wsr_range r[4] = {
		{ .sector = 50, .orig_pos = 2, .segment = 0, .length = 1 },
		{ .sector = 90, .orig_pos = 1, .segment = 0, .length = 1 },
		{ .sector = 10, .orig_pos = 4, .segment = 1, .length = 1 },
		{ .sector = 70, .orig_pos = 3, .segment = 1, .length = 1 },
	};
	struct wsr_schedule s = { .nfiles = 1, .nsegments = 2, .nranges = 4, .files = f, .segments = g, .ranges = r };
	uint32_t o[4];

	uint32_t rel = replay_plan(&s, MODE_SEGMENTED, o);
	CHECK(rel == 2 && o[0] == 0 && o[1] == 1 && o[2] == 2 && o[3] == 3, "segmented keeps export order, releases after segment 1");
	rel = replay_plan(&s, MODE_REORDER, o);
	CHECK(rel == 4 && o[0] == 2 && o[1] == 0 && o[2] == 3 && o[3] == 1, "reorder sorts all by LBA, releases at the end");
	rel = replay_plan(&s, MODE_INTERLEAVE, o);
	CHECK(rel == 0 && o[0] == 1 && o[1] == 0 && o[2] == 3 && o[3] == 2, "interleave follows first-access order, releases at once");
	/* 64-bit LBAs beyond 2^32 must sort correctly (no a - b comparator). */
	r[0].sector = 1ull << 40;
	r[1].sector = 1;
	replay_plan(&s, MODE_REORDER, o);
	CHECK(o[0] == 1 && o[3] == 0, "large LBAs sort correctly");
}

static uint32_t opened[8], nopened;

static int record_open(void *ctx, uint32_t no)
{
	(void)ctx;
	if (nopened < 8)
		opened[nopened++] = no;
	return -1;   /* as a file that changed: nothing more to do with it */
}

/* The metadata step warms each entry just before the segment its FILE.step_segment names, in
 * disk order within a segment: a file first read in segment 2 is not opened with segment 1's,
 * though its inode comes first on the disk. */
static void test_fsmeta_by_segment(void)
{
	struct wsr_file f[3] = {
		{ .path = "/", .path_len = 1, .kind = WSR_KIND_FILE, .flags = WSR_FILE_WARM_META, .ino = 50, .step_segment = 0 },
		{ .path = "/", .path_len = 1, .kind = WSR_KIND_FILE, .flags = WSR_FILE_WARM_META, .ino = 10, .step_segment = 1 },
		{ .path = "/", .path_len = 1, .kind = WSR_KIND_FILE, .flags = WSR_FILE_WARM_META, .ino = 30, .step_segment = 0 },
	};
	struct wsr_segment g[2] = { { 1, 0, 2, 0, 0 }, { 2, 2, 1, 0, 0 } };
	struct wsr_range r[3] = {
		{ .file_no = 0, .segment = 0, .length = 1 },
		{ .file_no = 2, .segment = 0, .length = 1 },
		{ .file_no = 1, .segment = 1, .length = 1 },
	};
	struct wsr_schedule s = { .nfiles = 3, .nsegments = 2, .nranges = 3, .files = f, .segments = g, .ranges = r };
	struct fsmeta_pass p;
	struct fsmeta_stats st = { 0 };

	CHECK(fsmeta_plan(&s, &p) == 0 && p.n == 3, "three entries in the pass");
	nopened = 0;
	CHECK(fsmeta_warm(&p, 0, record_open, NULL, &st) == 2 && nopened == 2 && opened[0] == 2 && opened[1] == 0,
	      "segment 1's entries, in inode order, and only those");
	CHECK(!fsmeta_pending(&p, 0) && fsmeta_pending(&p, 1), "segment 2's entry left for segment 2");
	CHECK(fsmeta_warm(&p, 1, record_open, NULL, &st) == 1 && nopened == 3 && opened[2] == 1, "then segment 2's");
	CHECK(!fsmeta_pending(&p, UINT32_MAX), "nothing left");
	fsmeta_free(&p);
}

/* Within a share the step goes up the places, sweep after sweep: an entry whose directory is in
 * the pass and not warmed yet waits for the next sweep (its lookup would read that directory
 * first, wherever it lies); one whose directory comes only in a later share is not held up. */
static void test_fsmeta_sweeps(void)
{
#define D(p, pos) { .path = p, .path_len = sizeof(p) - 1, .kind = WSR_KIND_DIR, .flags = WSR_FILE_AFTER_DIR, .meta_pos = pos }
#define F(p, pos, seg) { .path = p, .path_len = sizeof(p) - 1, .kind = WSR_KIND_FILE, \
			 .flags = WSR_FILE_WARM_META | WSR_FILE_AFTER_DIR, .meta_pos = pos, .step_segment = seg }
	struct wsr_file f[] = {
		D("/a/b", 10), D("/", 20), F("/c/g", 30, 0), D("/a", 50), D("/c", 60), F("/a/b/f", 70, 0),
		F("/d/e", 5, 0), { .path = "/d", .path_len = 2, .kind = WSR_KIND_DIR, .meta_pos = 1, .step_segment = 1 },
	};
#undef D
#undef F
	struct wsr_segment g[2] = { { 1, 0, 0, 0, 0 }, { 2, 0, 0, 0, 0 } };
	struct wsr_schedule s = { .nfiles = 8, .nsegments = 2, .files = f, .segments = g };
	struct fsmeta_pass p;
	uint32_t out[8], n;
	const char *want[] = { "/d/e", "/", "/a", "/c", "/a/b", "/c/g", "/a/b/f" };

	CHECK(fsmeta_plan(&s, &p) == 0 && p.n == 8, "eight entries in the pass");
	n = fsmeta_order(&p, 0, out);
	bool same = n == 7;
	for (uint32_t k = 0; same && k < n; k++) {
		const struct wsr_file *e = &f[out[k]];
		same = e->path_len == strlen(want[k]) && !memcmp(e->path, want[k], e->path_len);
	}
	CHECK(same, "segment 1's share: each directory before what is looked up in it, in place order sweep after sweep");
	CHECK(fsmeta_order(&p, 1, out) == 1 && out[0] == 7, "then segment 2's");
	fsmeta_free(&p);

	for (uint32_t i = 0; i < 8; i++)
		f[i].flags &= ~(uint32_t)WSR_FILE_AFTER_DIR;
	const uint32_t by_place[] = { 6, 0, 1, 2, 3, 4, 5 };
	CHECK(fsmeta_plan(&s, &p) == 0 && fsmeta_order(&p, 0, out) == 7 && !memcmp(out, by_place, sizeof(by_place)),
	      "without WSR_FILE_AFTER_DIR: place order, each lookup reading its directories where it needs them");
	fsmeta_free(&p);
}

static void test_pressure(void)
{
	struct pressure p;
	CHECK(pressure_parse_meminfo("MemTotal:  2000 kB\nMemFree: 10 kB\nMemAvailable:  1234 kB\n", &p) == 0 &&
	      p.mem_available_kb == 1234 && p.mem_total_kb == 2000, "meminfo parsed");
	CHECK(pressure_parse_meminfo("MemTotal: 5 kB\n", &p) != 0, "meminfo without MemAvailable rejected");
	CHECK(pressure_parse_psi("some avg10=12.50 avg60=1.00 avg300=0.00 total=5\nfull avg10=3.25 avg60=0 avg300=0 total=1\n", &p) == 0 &&
	      p.psi_some_avg10 > 12.49 && p.psi_some_avg10 < 12.51 && p.psi_full_avg10 > 3.2, "psi parsed");
	CHECK(pressure_sample(&p) == 0 && p.mem_available_kb > 0, "live sample");
}

static void test_residency(void)
{
	char path[] = "/tmp/warmstart-test-residency-XXXXXX";
	int fd = mkstemp(path);
	static char buf[256 << 10];
	uint64_t cached = 0;

	if (fd < 0) {
		CHECK(0, "mkstemp");
		return;
	}
	memset(buf, 'x', sizeof(buf));
	CHECK(write(fd, buf, sizeof(buf)) == (ssize_t)sizeof(buf), "write");
	fdatasync(fd);
	posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
	CHECK(residency(fd, 0, sizeof(buf), &cached) == 0 && cached == 0, "evicted file has nothing cached");
	CHECK(residency_wait(fd, 4096, 8192) == 0, "wait reads what was missing");
	CHECK(residency(fd, 4096, 8192, &cached) == 0 && cached == 8192, "those pages are resident now");
	CHECK(residency(fd, 65536, 4096, &cached) == 0 && cached == 0, "others are not");

	/* A file's scheduled ranges, overlapping and not page-aligned (pages 1-2), and a range of
	 * another file: inside counts each cached page of the ranges once, outside the cached pages
	 * elsewhere (two at 200 KiB), each over its own pages (not outside = all - inside) */
	struct wsr_file f[2] = { { .kind = WSR_KIND_FILE, .size = sizeof(buf) }, { .kind = WSR_KIND_FILE, .size = sizeof(buf) } };
	struct wsr_range r[3] = { { .offset = 6000, .length = 6000 }, { .offset = 0, .length = 8192, .file_no = 1 },
				  { .offset = 4096, .length = 4096 } };
	struct wsr_schedule s = { .nfiles = 2, .nranges = 3, .files = f, .ranges = r };
	uint64_t inside = 0, outside = 0;
	CHECK(residency_wait(fd, 200 << 10, 8192) == 0, "two pages outside the ranges read");
	CHECK(residency_of_file(fd, &s, 0, &inside, &outside, NULL, NULL) == 0 && inside == 8192 && outside == 8192,
	      "inside and outside of overlapping ranges");
	close(fd);
	unlink(path);
}

/* dir/real/f, dir/link -> real, dir/real/lf -> f: only dir/real/f opens, by either way */
static void test_path_open(void)
{
	char dir[] = "/tmp/warmstart-test-pathopen-XXXXXX", p[4200];
	int (*opens[2])(const char *, int) = { path_open, path_open_walk };
	const char *name[2] = { "openat2", "walk" };

	if (!mkdtemp(dir)) {
		CHECK(0, "mkdtemp");
		return;
	}
	snprintf(p, sizeof(p), "%s/real", dir);
	mkdir(p, 0755);
	snprintf(p, sizeof(p), "%s/real/f", dir);
	close(open(p, O_WRONLY | O_CREAT, 0644));
	snprintf(p, sizeof(p), "%s/link", dir);
	CHECK(symlink("real", p) == 0, "symlink to the directory");
	snprintf(p, sizeof(p), "%s/real/lf", dir);
	CHECK(symlink("f", p) == 0, "symlink to the file");
	for (int i = 0; i < 2; i++) {
		int fd;
		snprintf(p, sizeof(p), "%s/real/f", dir);
		fd = opens[i](p, O_RDONLY | O_CLOEXEC);
		CHECK(fd >= 0, name[i]);  /* the real path opens */
		close(fd);
		snprintf(p, sizeof(p), "%s/link/f", dir);
		errno = 0;
		fd = opens[i](p, O_RDONLY | O_CLOEXEC);
		if (fd >= 0)
			close(fd);
		CHECK(fd < 0 && errno == ELOOP, name[i]);  /* a directory symlink: ELOOP, not followed */
		snprintf(p, sizeof(p), "%s/real/lf", dir);
		errno = 0;
		fd = opens[i](p, O_RDONLY | O_CLOEXEC);
		if (fd >= 0)
			close(fd);
		CHECK(fd < 0 && errno == ELOOP, name[i]);  /* the last component a symlink: ELOOP */
		snprintf(p, sizeof(p), "%s/real/missing/f", dir);
		errno = 0;
		fd = opens[i](p, O_RDONLY | O_CLOEXEC);
		CHECK(fd < 0 && errno == ENOENT, name[i]);
	}
	snprintf(p, sizeof(p), "rm -rf '%s'", dir);
	CHECK(system(p) == 0, "cleanup");
}

/* The task state is the field after the last ')': a comm may hold ") R (" itself. */
static void test_appwatch_state(void)
{
	CHECK(appwatch_state("123 (python3) D 1 123 123 0") == 'D', "a task in D");
	CHECK(appwatch_state("77 (a) R (b) S 1 77") == 'S', "a comm with ') R (' in it");
	CHECK(appwatch_state("9 (x) R 1") == 'R', "running");
	CHECK(appwatch_state("9 (x)") == 0 && appwatch_state("") == 0 && appwatch_state(NULL) == 0,
	      "no state: 0");
}

int main(void)
{
	test_plan();
	test_appwatch_state();
	test_fsmeta_by_segment();
	test_fsmeta_sweeps();
	test_pressure();
	test_residency();
	test_path_open();
	printf("test-replay-core: %d passed, %d failed\n", passed, failed);
	return failed ? 1 : 0;
}
