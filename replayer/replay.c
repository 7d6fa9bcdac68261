#include "replay.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include "pathopen.h"
#include "pressure.h"
#include "residency.h"

#define FD_UNOPENED (-2)
#define FD_SKIPPED (-1)
#define PRESSURE_EVERY (16ull << 20)

/* ---- plan ---- */

static const struct wsr_schedule *sort_s;

static int cmp_u64(uint64_t a, uint64_t b)
{
	return a < b ? -1 : a > b;   /* never a - b: 64-bit values */
}

/* Metadata (block-device ranges) first, then file data, each in LBA order: opening a file and
 * mapping its blocks needs its inode and extent blocks, so data fetched before them stalls on
 * synchronous metadata reads, one seek each (the analyzer orders each segment the same way). */
static int by_lba(const void *pa, const void *pb)
{
	const struct wsr_range *a = &sort_s->ranges[*(const uint32_t *)pa];
	const struct wsr_range *b = &sort_s->ranges[*(const uint32_t *)pb];
	const struct wsr_file *fa = &sort_s->files[a->file_no], *fb = &sort_s->files[b->file_no];
	int c = cmp_u64(fa->kind != WSR_KIND_BLOCKDEV, fb->kind != WSR_KIND_BLOCKDEV);
	if (!c)
		c = cmp_u64(fa->kind == WSR_KIND_BLOCKDEV ? fa->dev : 0, fb->kind == WSR_KIND_BLOCKDEV ? fb->dev : 0);
	if (!c)
		c = cmp_u64(a->sector, b->sector);
	return c ? c : cmp_u64(*(const uint32_t *)pa, *(const uint32_t *)pb);
}

static int by_orig(const void *pa, const void *pb)
{
	const struct wsr_range *a = &sort_s->ranges[*(const uint32_t *)pa];
	const struct wsr_range *b = &sort_s->ranges[*(const uint32_t *)pb];
	int c = cmp_u64(a->orig_pos, b->orig_pos);
	return c ? c : cmp_u64(*(const uint32_t *)pa, *(const uint32_t *)pb);
}

uint32_t replay_plan(const struct wsr_schedule *s, enum replay_mode mode, uint32_t *order)
{
	for (uint32_t i = 0; i < s->nranges; i++)
		order[i] = i;
	sort_s = s;
	switch (mode) {
	case MODE_SEGMENTED:   /* as exported: segment by segment, each LBA-sorted */
		return s->nsegments ? s->segments[0].nranges : 0;
	case MODE_REORDER:     /* everything LBA-sorted, then release */
		qsort(order, s->nranges, sizeof(*order), by_lba);
		return s->nranges;
	case MODE_INTERLEAVE:  /* original first-access order, release at once */
		qsort(order, s->nranges, sizeof(*order), by_orig);
		return 0;
	}
	return 0;
}

/* ---- files ---- */

struct ctx {
	const struct wsr_schedule *s;
	struct engine *e;
	const struct replay_opts *o;
	struct replay_stats *st;
	int *fds;
	bool *ever_opened;
	bool *submitted;      /* per range: handed to the engine (what the release waits for) */
	uint64_t budget;      /* bytes still allowed by the memory-pressure policy */
	struct fsmeta_pass meta;   /* the metadata step, warmed segment by segment */
};

static void close_all(struct ctx *c)
{
	c->e->drain(c->e);
	for (uint32_t i = 0; i < c->s->nfiles; i++) {
		if (c->fds[i] >= 0) {
			close(c->fds[i]);
			c->fds[i] = FD_UNOPENED;
		}
	}
}

static int open_checked(struct ctx *c, uint32_t no)
{
	const struct wsr_file *f = &c->s->files[no];
	char path[4096];
	struct stat st;
	/* NONBLOCK: a FIFO put there must not hang us. No symlink in any component (path_open): the
	 * analyzer's paths name the file itself through real directories (found by walking them,
	 * recorder/resolve.py), so a symlink in its place or in a directory's was put there since:
	 * never follow it, not even to look (an open alone acts on some devices). */
	int fd, flags = O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK | O_NOFOLLOW;

	memcpy(path, f->path, f->path_len);
	path[f->path_len] = 0;
	if (f->kind == WSR_KIND_FILE)
		flags |= O_NOATIME;
	for (;;) {
		fd = path_open(path, flags);
		if (fd >= 0)
			break;
		if (errno == EPERM && (flags & O_NOATIME)) {  /* not the owner: O_NOATIME not allowed */
			flags &= ~O_NOATIME;
			c->st->noatime_fallbacks++;
			continue;
		}
		if (errno == EMFILE || errno == ENFILE) {
			close_all(c);
			fd = path_open(path, flags);
			if (fd >= 0)
				break;
		}
		if (errno == ENOENT || errno == ENOTDIR)
			c->st->files_missing++;
		else if (errno == ELOOP)     /* a symlink now (the file or a directory): not the file analyzed */
			c->st->files_changed++;
		else if (errno == EACCES || errno == EPERM)
			c->st->files_denied++;
		else
			c->st->files_other++;
		return FD_SKIPPED;
	}
	bool same = fstat(fd, &st) == 0;
	if (same && f->kind == WSR_KIND_BLOCKDEV) {
		same = S_ISBLK(st.st_mode) && st.st_rdev == f->dev;
	} else if (same) {
		int64_t mtime = (int64_t)st.st_mtim.tv_sec * 1000000000ll + st.st_mtim.tv_nsec;
		same = S_ISREG(st.st_mode) && st.st_dev == f->dev && st.st_ino == f->ino &&
		       (uint64_t)st.st_size == f->size && mtime == f->mtime_ns;
	}
	if (!same) {
		c->st->files_changed++;
		close(fd);
		return FD_SKIPPED;
	}
	fcntl(fd, F_SETFL, flags & ~O_NONBLOCK & ~O_NOCTTY & ~O_CLOEXEC & ~O_RDONLY);   /* back to blocking; keeps O_NOATIME */
	/* The schedule says exactly what to read: no kernel readahead around our reads. */
	posix_fadvise(fd, 0, 0, POSIX_FADV_RANDOM);
	if (!c->ever_opened[no]) {
		uint64_t inside;
		c->ever_opened[no] = true;
		c->st->files_opened++;
		/* once the app runs, what is cached outside the ranges may be its own reads: misses */
		if (c->o->measure_at_open && !c->st->released && f->kind == WSR_KIND_FILE &&
		    residency_of_file(fd, c->s, no, &inside, &c->st->outside_at_open[no], NULL, NULL) < 0)
			c->st->outside_at_open[no] = UNMEASURED;
	}
	return fd;
}

static int file_fd(struct ctx *c, uint32_t no)
{
	if (c->fds[no] == FD_UNOPENED)
		c->fds[no] = open_checked(c, no);
	return c->fds[no];
}

static int meta_open(void *c, uint32_t no)
{
	return file_fd(c, no);
}

/* ---- memory pressure ---- */

static void check_pressure(struct ctx *c, uint32_t at, uint64_t remaining)
{
	struct pressure p;
	const char *action = "ok";
	if (pressure_sample(&p) || c->st->ndecisions >= MAX_DECISIONS)
		return;
	int64_t avail = p.mem_available_kb * 1024ll;
	int64_t spare = avail - (int64_t)c->o->reserve_bytes;
	if (spare <= 0 || (c->o->psi_limit > 0 && p.psi_some_avg10 >= c->o->psi_limit)) {
		c->budget = 0;
		action = "skip";
	} else if ((uint64_t)spare < remaining) {
		c->budget = (uint64_t)spare;
		action = "shrink";
	} else {
		c->budget = UINT64_MAX;
	}
	/* Record every decision that changes something, and the first one. */
	if (strcmp(action, "ok") || !c->st->ndecisions) {
		struct decision *d = &c->st->decisions[c->st->ndecisions++];
		*d = (struct decision){ mono_ns() - c->st->start_mono_ns, at, p.mem_available_kb,
					p.psi_some_avg10, action, c->budget == UINT64_MAX ? remaining : c->budget };
	}
}

/* ---- the loop ---- */

static void release(struct ctx *c, const uint32_t *order, uint32_t n)
{
	struct replay_stats *st = c->st;
	if (st->released)
		return;
	c->e->drain(c->e);
	if (c->o->wait_resident && c->e->async_completion) {
		uint64_t t0 = mono_ns();
		for (uint32_t i = 0; i < n; i++) {
			const struct wsr_range *r = &c->s->ranges[order[i]];
			int fd = c->fds[r->file_no];
			if (fd >= 0 && c->submitted[order[i]])   /* not one skipped under pressure */
				residency_wait(fd, r->offset, r->length);
		}
		st->prebuffer_wait_ns = mono_ns() - t0;
	}
	st->release_mono_ns = mono_ns();
	st->released = true;
	appwatch_released(c->o->watch, st->release_mono_ns);
	if (c->o->notify_fd >= 0) {
		ssize_t w = write(c->o->notify_fd, "ready\n", 6);
		(void)w;   /* the runner may be gone; nothing to do about it */
		close(c->o->notify_fd);
	}
}

uint32_t replay_nsegs(const struct wsr_schedule *s, enum replay_mode mode)
{
	return mode == MODE_SEGMENTED ? s->nsegments : 1;
}

/* The per-file state (fds, first-open flags, what was cached at first open) and the per-segment
 * stats. Returns 0 or -ENOMEM. */
static int alloc_state(struct ctx *c, uint32_t **order)
{
	const struct wsr_schedule *s = c->s;
	struct replay_stats *st = c->st;
	*order = malloc((s->nranges ? s->nranges : 1) * sizeof(**order));
	c->fds = malloc((s->nfiles ? s->nfiles : 1) * sizeof(int));
	c->ever_opened = calloc(s->nfiles ? s->nfiles : 1, 1);
	c->submitted = calloc(s->nranges ? s->nranges : 1, 1);
	st->nsegs = replay_nsegs(s, c->o->mode);
	st->segs = calloc(st->nsegs ? st->nsegs : 1, sizeof(*st->segs));
	st->outside_at_open = malloc((s->nfiles ? s->nfiles : 1) * sizeof(*st->outside_at_open));
	/* each filled in as soon as it exists: on -ENOMEM replay_run still closes c->fds, and the
	 * exit check still reads outside_at_open */
	for (uint32_t i = 0; c->fds && i < s->nfiles; i++)
		c->fds[i] = FD_UNOPENED;
	for (uint32_t i = 0; st->outside_at_open && i < s->nfiles; i++)
		st->outside_at_open[i] = UNMEASURED;
	return *order && c->fds && c->ever_opened && c->submitted && st->segs && st->outside_at_open ? 0 : -ENOMEM;
}

/* Many files stay open at once; use the hard limit (falls back to closing on EMFILE). */
static void raise_fd_limit(void)
{
	struct rlimit rl;
	if (!getrlimit(RLIMIT_NOFILE, &rl) && rl.rlim_cur < rl.rlim_max) {
		rl.rlim_cur = rl.rlim_max;
		setrlimit(RLIMIT_NOFILE, &rl);
	}
}

/* What the plan holds: bytes in all and before the release point, and each segment's share
 * (one segment spanning the whole plan unless the mode is segmented). */
static void count_plan(struct ctx *c, const uint32_t *order, uint32_t release_at)
{
	const struct wsr_schedule *s = c->s;
	struct replay_stats *st = c->st;
	bool segmented = c->o->mode == MODE_SEGMENTED;
	for (uint32_t i = 0; i < s->nranges; i++) {
		st->bytes_scheduled += s->ranges[i].length;
		if (i < release_at)
			st->prebuffer_bytes += s->ranges[order[i]].length;
	}
	for (uint32_t k = 0; k < st->nsegs; k++) {
		st->segs[k].idx = segmented ? s->segments[k].idx : 1;
		st->segs[k].ranges = segmented ? s->segments[k].nranges : s->nranges;
		st->segs[k].bytes = segmented ? s->segments[k].bytes : st->bytes_scheduled;
	}
}

/* One range of the plan: skipped under memory pressure or when its file cannot be used,
 * counted when already resident, otherwise submitted to the engine. */
static void fetch_range(struct ctx *c, const struct wsr_range *r, struct seg_stat *sg)
{
	struct replay_stats *st = c->st;
	if (c->s->files[r->file_no].kind == WSR_KIND_BLOCKDEV)
		st->device_ranges++;
	/* Memory pressure: past the budget, pages we read would evict more useful ones. */
	if (c->budget < r->length) {
		st->ranges_skipped_pressure++;
		st->bytes_skipped_pressure += r->length;
		c->budget = 0;
		return;
	}
	int fd = file_fd(c, r->file_no);
	if (fd < 0) {
		st->ranges_skipped_file++;
		return;
	}
	uint64_t cached = 0;
	if (!residency(fd, r->offset, r->length, &cached) && cached >= r->length) {
		st->ranges_resident++;   /* already in memory (the app got there first, or warm) */
		st->bytes_resident += r->length;
		return;
	}
	if (!st->first_io_done) {
		st->first_io_mono_ns = mono_ns();
		st->first_io_done = true;
	}
	if (c->e->submit(c->e, fd, r->offset, r->length) == 0) {
		c->submitted[r - c->s->ranges] = true;
		st->ranges_fetched++;
		st->bytes_fetched += r->length;
		sg->ranges_fetched++;
		sg->bytes_fetched += r->length;
		if (c->budget != UINT64_MAX)
			c->budget -= r->length;
	}
}

/* The metadata step (fsmeta.c): the marked files and the directories on their paths whose step
 * segment is <= seg, before that segment's data; counted in the stats of segment `at`. */
static void metadata_step(struct ctx *c, uint32_t seg, uint32_t at)
{
	if (!fsmeta_pending(&c->meta, seg))
		return;
	uint64_t t0 = mono_ns();
	uint32_t n = fsmeta_warm(&c->meta, seg, meta_open, c, &c->st->meta);
	uint64_t t = mono_ns() - t0;
	c->st->meta.ns += t;
	if (!c->st->released)
		c->st->meta.prebuffer_ns += t;
	if (at < c->st->nsegs) {
		c->st->segs[at].meta_entries += n;
		c->st->segs[at].t_meta_ns += t;
	}
}

/* The plan in order: release the app at the release point, time each segment, look at memory
 * pressure at each later segment and every PRESSURE_EVERY bytes. */
static void fetch_plan(struct ctx *c, const uint32_t *order, uint32_t release_at)
{
	const struct wsr_schedule *s = c->s;
	struct replay_stats *st = c->st;
	uint64_t fetched_plan = 0, since_check = 0;
	int cur_seg = -1;
	for (uint32_t i = 0; i < s->nranges; i++) {
		if (i == release_at && i > 0)
			release(c, order, release_at);
		const struct wsr_range *r = &s->ranges[order[i]];
		uint32_t k = c->o->mode == MODE_SEGMENTED ? r->segment : 0;
		if ((int)k != cur_seg) {
			if (cur_seg >= 0)
				st->segs[cur_seg].t_end_ns = mono_ns() - st->start_mono_ns;
			st->segs[k].t_start_ns = mono_ns() - st->start_mono_ns;
			if (k > 0 && i > 0) {  /* each later segment: look at memory again */
				check_pressure(c, i, st->bytes_scheduled - fetched_plan);
				since_check = 0;
			}
			cur_seg = (int)k;
			appwatch_segment(c->o->watch, cur_seg);
			metadata_step(c, k, k);   /* what this segment's data needs first (segmented mode) */
		}
		if (since_check >= PRESSURE_EVERY) {
			check_pressure(c, i, st->bytes_scheduled - fetched_plan);
			since_check = 0;
		}
		fetched_plan += r->length;
		since_check += r->length;
		fetch_range(c, r, &st->segs[k]);
	}
	if (cur_seg >= 0)
		st->segs[cur_seg].t_end_ns = mono_ns() - st->start_mono_ns;
}

int replay_run(const struct wsr_schedule *s, struct engine *e, const struct replay_opts *o,
	       struct replay_stats *st)
{
	struct ctx c = { .s = s, .e = e, .o = o, .st = st, .budget = UINT64_MAX };
	uint32_t *order = NULL;

	signal(SIGPIPE, SIG_IGN);
	st->ranges_total = s->nranges;
	for (uint32_t i = 0; i < s->nfiles; i++)
		st->files_total += s->files[i].kind != WSR_KIND_DIR;   /* the directories are the metadata step's */
	int rc = alloc_state(&c, &order);
	if (rc) {
		release(&c, order, 0);
	} else {
		raise_fd_limit();
		uint32_t release_at = replay_plan(s, o->mode, order);
		bool segmented = o->mode == MODE_SEGMENTED;
		count_plan(&c, order, release_at);
		/* the metadata the block-device ranges cannot warm: segmented, each segment's share before
		 * its data (segment 1's before the release, even with no range in it); otherwise all of it
		 * before any data */
		rc = fsmeta_plan(s, &c.meta);
		if (segmented)
			metadata_step(&c, 0, 0);
		if (release_at == 0)
			release(&c, order, 0);   /* interleave (or an empty pre-buffer): the app runs alongside */
		check_pressure(&c, 0, st->bytes_scheduled);
		if (!segmented)
			metadata_step(&c, UINT32_MAX, 0);
		fetch_plan(&c, order, release_at);
		metadata_step(&c, UINT32_MAX, st->nsegs - 1);    /* entries of segments with no range left */
		release(&c, order, release_at);   /* no-op unless everything was before the release point */
		e->drain(e);
	}
	if (c.fds) {
		for (uint32_t i = 0; i < s->nfiles; i++)
			if (c.fds[i] >= 0)
				close(c.fds[i]);
	}
	free(c.fds);
	free(c.ever_opened);
	free(c.submitted);
	fsmeta_free(&c.meta);
	free(order);
	st->end_mono_ns = mono_ns();
	return rc;
}
