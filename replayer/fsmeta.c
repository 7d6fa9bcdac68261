/* The metadata step (see fsmeta.h; docs/replayer.md has the measurements). What a cold launch
 * on XFS or btrfs waits for besides data: path lookups, directory listings and stats read
 * directory blocks and inodes into the file system's own caches (XFS's buffer cache, btrfs's tree
 * blocks), which the pre-buffer's block-device reads never fill. In one pass, split by segment:
 * each entry just before the ranges of the segment that first needs it (FILE.step_segment: the
 * first segment reading the file, or under the directory; before the pre-buffer for a file only
 * looked up and a directory the launch looked names up in), so that what later segments need is
 * warmed after the release, while the app runs, as their data is:
 *  - every directory on the marked files' paths (the export's WSR_KIND_DIR entries) and every
 *    marked file, all in (st_dev, inode) order: a directory marked WSR_FILE_LIST_DIR is read to
 *    its end with getdents64 (XFS: what the app's own listings, failed lookups and stats of
 *    siblings would read later, and cheaper than the lookups alone), any other directory looked
 *    up (an O_PATH open);
 *  - a marked file with ranges opened through the replayer's own open, which checks its identity
 *    and keeps the fd for the data fetch, then each range's start sought (SEEK_DATA): btrfs maps
 *    data from the file extent items of its tree, which an inode kept in memory (warmstartd's
 *    inotify watch keeps every file a schedule reads) no longer brings with it once the leaves
 *    were evicted; without the seeks the data sweep stopped for one leaf read per file (a
 *    python launch 5.07 s instead of 3.53 s, docs/replayer.md);
 *  - a marked file with no range (the inode of a file the launch only stat'ed) looked up only.
 * The order is disk order. Where the analysis placed an entry's inode (FILE.meta_pos: XFS, whose
 * inode number is its place; btrfs, whose copy-on-write moves the leaf of an inode whenever it
 * changes, as relatime's atime update after a launch does), all of them in one pass by that
 * place: btrfs python on the emulated HDD's random layout, its step 1.10 s in inode order, 0.24
 * s so; XFS, against the files looked up only in a group of their own first, 8 of 12 launches
 * (6 apps, both layouts of the emulated HDD) 2-12 % shorter, the rest within 3.3 %
 * (docs/replayer.md); btrfs's analysis raises the files' places above the directories' where looking
 * every directory up first is predicted to seek less (Btrfs.step_order: a git repository's many
 * small directories). Otherwise in (dev, inode) order, the files looked up only first, then the
 * directories and the files with ranges (btrfs without places: 152 such names cost the step 0.35
 * s in front against 0.80 s mixed into the one inode order). An XFS directory's blocks are
 * allocated near its inode. One pass, not level by level from "/" (each level a sweep of its
 * own): XFS vim 179 ms instead of 262, python 320 instead of 410. But one pass in place order
 * visits an entry before its directory wherever the directory's place is higher, and the lookup
 * then reads every directory on its path first, wherever it lies: on XFS, whose rotor puts each
 * directory (inode and blocks) in another allocation group, the step jumped between the groups
 * for each path's ancestors. An entry marked WSR_FILE_AFTER_DIR (XFS: FileSystem.step_sweeps)
 * whose directory is in the share and not warmed yet waits for the next sweep up the places
 * (fsmeta_order): on the emulated hdd7200 the bench apps' steps 0-125 ms shorter (packaged
 * perl 329 -> 219 ms, random python 663 -> 539), but node's 6-30 ms longer; on btrfs, whose
 * places already model a lookup's reads (Btrfs.step_order), vim's step grew 199 -> 231 ms so,
 * and it keeps the one pass (docs/replayer.md, "Sweeps"). One request at a time: the
 * reads a lookup makes are synchronous, and many threads issuing them at once reached the disk
 * in no useful order (32 threads: vim's launch 0.70 s, one: 0.62 s
 * on the emulated hdd7200, which serves requests in arrival order).
 * A directory the export does not name (an export from before WSR_KIND_DIR, or one that was
 * gone when it was written) is reached by the lookups of the paths under it. */
#include "fsmeta.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "clock.h"
#include "pathopen.h"

#define MAX_DIR_BYTES (1 << 20)   /* of entries read per directory (~20,000 names) */

struct fsmeta_item {
	uint32_t no;      /* index into files[] */
	uint32_t seg;     /* FILE.step_segment: warmed just before this segment's ranges */
	uint32_t later;   /* 0: a file looked up only; 1: a directory, or a file with ranges */
	uint64_t dev, pos, ino;   /* pos: where its lookup reads its inode (FILE.meta_pos), 0: not known */
	uint32_t parent;  /* index into items[] of the directory it is looked up in; NO_PARENT: none there */
	bool after_dir;   /* WSR_FILE_AFTER_DIR: warmed only after that directory */
	bool done;
};

#define NO_PARENT UINT32_MAX

static int cmp_u64(uint64_t a, uint64_t b)
{
	return a < b ? -1 : a > b;
}

/* By step segment; within one, the entries whose inode's place is not known: the files looked up
 * only, then the rest, each in (dev, inode) order; after them, those whose place is known, in
 * (dev, place, inode) order. */
static int by_place(const void *pa, const void *pb)
{
	const struct fsmeta_item *a = pa, *b = pb;
	int c = cmp_u64(a->seg, b->seg);
	if (!c)
		c = cmp_u64(a->pos != 0, b->pos != 0);
	if (!c && !a->pos)
		c = cmp_u64(a->later, b->later);
	if (!c)
		c = cmp_u64(a->dev, b->dev);
	if (!c && a->pos)
		c = cmp_u64(a->pos, b->pos);
	if (!c)
		c = cmp_u64(a->ino, b->ino);   /* the entries of one leaf in key order */
	return c ? c : cmp_u64(a->no, b->no);
}

static int by_u64(const void *pa, const void *pb)
{
	return cmp_u64(*(const uint64_t *)pa, *(const uint64_t *)pb);
}

static int marked(const struct wsr_file *f)
{
	return f->kind == WSR_KIND_FILE && (f->flags & WSR_FILE_WARM_META);
}

static int in_pass(const struct wsr_file *f)
{
	return marked(f) || f->kind == WSR_KIND_DIR;
}

/* Reads the directory open at fd to its end; returns the bytes of entries, or -errno. */
static int64_t read_dir(int fd)
{
	static char buf[32768] __attribute__((aligned(8)));
	int64_t total = 0;
	for (;;) {
		long got = syscall(SYS_getdents64, fd, buf, sizeof(buf));
		if (got < 0 && errno == EINTR)
			continue;
		if (got < 0)
			return -errno;
		if (got == 0 || (total += got) > MAX_DIR_BYTES)
			return total;   /* the end, or enough: a huge directory is not worth a whole sweep */
	}
}

/* One directory or file of the pass without ranges: read whole, or looked up. */
static void warm_one(const struct wsr_file *f, struct fsmeta_stats *st)
{
	char path[WSR_MAX_PATH + 1];
	memcpy(path, f->path, f->path_len);
	path[f->path_len] = 0;
	bool list = f->kind == WSR_KIND_DIR && (f->flags & WSR_FILE_LIST_DIR);
	int fd = path_open(path, list ? O_RDONLY | O_DIRECTORY | O_CLOEXEC | O_NONBLOCK | O_NOFOLLOW
				      : O_PATH | O_NOFOLLOW | O_CLOEXEC);
	int64_t got = fd >= 0 && list ? read_dir(fd) : 0;
	if (fd < 0 || got < 0) {
		st->errors++;
	} else if (list) {
		st->dirs_listed++;
		st->dirents_bytes += (uint64_t)got;
	} else if (f->kind == WSR_KIND_DIR) {
		st->dirs_looked_up++;
	} else {
		st->files_looked_up++;
	}
	if (fd >= 0)
		close(fd);
}

/* A marked file with ranges: opened (and checked) through open_file, the fd kept for the data,
 * then each range's start sought with SEEK_DATA, in offset order. */
static void warm_ranged(uint32_t no, const uint64_t *offsets, uint32_t n, fsmeta_open_fn open_file, void *ctx,
			struct fsmeta_stats *st)
{
	int fd = open_file(ctx, no);   /* a file that changed or is denied is skipped and counted there */
	if (fd < 0)
		return;
	st->files_looked_up++;
	st->files_opened++;
	for (uint32_t k = 0; k < n; k++) {
		if (k && offsets[k] == offsets[k - 1])
			continue;
		if (lseek(fd, (off_t)offsets[k], SEEK_DATA) >= 0 || errno == ENXIO)
			st->ranges_sought++;   /* ENXIO: nothing but a hole from there: mapped all the same */
		else
			st->errors++;
	}
}

static const struct fsmeta_pass *sort_pass;

static int path_cmp(const char *a, uint32_t na, const char *b, uint32_t nb)
{
	int c = memcmp(a, b, na < nb ? na : nb);
	return c ? c : (na > nb) - (na < nb);
}

/* The pass's directories, by path. */
static int by_path(const void *pa, const void *pb)
{
	const struct wsr_file *a = &sort_pass->s->files[sort_pass->items[*(const uint32_t *)pa].no];
	const struct wsr_file *b = &sort_pass->s->files[sort_pass->items[*(const uint32_t *)pb].no];
	return path_cmp(a->path, a->path_len, b->path, b->path_len);
}

/* Each item's parent: the directory entry of the pass whose path is its own up to the last "/"
 * ("/" for a name in the root), found by binary search among the directories sorted by path. */
static int find_parents(struct fsmeta_pass *p)
{
	const struct wsr_file *files = p->s->files;
	uint32_t *dirs = malloc((p->n ? p->n : 1) * sizeof(*dirs)), nd = 0;
	if (!dirs)
		return -ENOMEM;
	for (uint32_t i = 0; i < p->n; i++)
		if (files[p->items[i].no].kind == WSR_KIND_DIR)
			dirs[nd++] = i;
	sort_pass = p;
	qsort(dirs, nd, sizeof(*dirs), by_path);
	for (uint32_t i = 0; i < p->n; i++) {
		const struct wsr_file *f = &files[p->items[i].no];
		uint32_t len = f->path_len;
		while (len > 0 && f->path[len - 1] == '/')
			len--;                       /* a trailing "/" names the directory itself */
		while (len > 0 && f->path[len - 1] != '/')
			len--;                       /* its last component */
		uint32_t plen = len > 1 ? len - 1 : len;   /* "/a/b" -> "/a"; "/a" -> "/" */
		p->items[i].parent = NO_PARENT;
		if (plen == 0 || plen >= f->path_len)
			continue;                    /* "/" itself, or not an absolute path */
		uint32_t lo = 0, hi = nd;
		while (lo < hi) {
			uint32_t mid = (lo + hi) / 2;
			const struct wsr_file *d = &files[p->items[dirs[mid]].no];
			int c = path_cmp(d->path, d->path_len, f->path, plen);
			if (c == 0) {
				p->items[i].parent = dirs[mid];
				break;
			}
			if (c < 0)
				lo = mid + 1;
			else
				hi = mid;
		}
	}
	free(dirs);
	return 0;
}

int fsmeta_plan(const struct wsr_schedule *s, struct fsmeta_pass *p)
{
	*p = (struct fsmeta_pass){ .s = s };
	uint32_t nmarked = 0;
	for (uint32_t i = 0; i < s->nfiles; i++)
		nmarked += marked(&s->files[i]);
	if (!nmarked)
		return 0;
	p->items = malloc(s->nfiles * sizeof(*p->items));
	p->order = malloc(s->nfiles * sizeof(*p->order));
	/* each file's range offsets, grouped by file (first[no] .. first[no + 1]) */
	p->first = calloc((size_t)s->nfiles + 1, sizeof(*p->first));
	p->offsets = malloc((s->nranges ? s->nranges : 1) * sizeof(*p->offsets));
	if (!p->items || !p->order || !p->first || !p->offsets) {
		fsmeta_free(p);
		return -ENOMEM;
	}
	uint32_t *first = p->first;
	for (uint32_t r = 0; r < s->nranges; r++)
		first[s->ranges[r].file_no + 1]++;
	for (uint32_t i = 0; i < s->nfiles; i++)
		first[i + 1] += first[i];
	for (uint32_t r = 0; r < s->nranges; r++) {
		uint32_t no = s->ranges[r].file_no;
		p->offsets[first[no]++] = s->ranges[r].offset;   /* first[no] now runs to the end of no's */
	}
	for (uint32_t i = s->nfiles; i > 0; i--)
		first[i] = first[i - 1];
	first[0] = 0;
	for (uint32_t i = 0; i < s->nfiles; i++)
		if (in_pass(&s->files[i]))
			p->items[p->n++] = (struct fsmeta_item){ i, s->files[i].step_segment,
								 !(marked(&s->files[i]) && first[i + 1] == first[i]),
								 s->files[i].dev, s->files[i].meta_pos, s->files[i].ino,
								 NO_PARENT, (s->files[i].flags & WSR_FILE_AFTER_DIR) != 0, false };
	qsort(p->items, p->n, sizeof(*p->items), by_place);
	int rc = find_parents(p);
	if (rc) {
		fsmeta_free(p);
		return rc;
	}
	for (uint32_t i = 0; i < s->nfiles; i++)
		if (first[i + 1] > first[i])
			qsort(p->offsets + first[i], first[i + 1] - first[i], sizeof(*p->offsets), by_u64);
	return 0;
}

bool fsmeta_pending(const struct fsmeta_pass *p, uint32_t seg)
{
	return p->next < p->n && p->items[p->next].seg <= seg;
}

/* Whether an entry waits for its directory: it is marked WSR_FILE_AFTER_DIR, its place is known
 * and its directory, an entry of this share (items[.. end)), is not warmed yet. */
static bool waits(const struct fsmeta_pass *p, const struct fsmeta_item *it, uint32_t end)
{
	return it->after_dir && it->pos && it->parent < end && !p->items[it->parent].done;
}

uint32_t fsmeta_order(struct fsmeta_pass *p, uint32_t seg, uint32_t *out)
{
	uint32_t from = p->next, end = from, n = 0;
	while (end < p->n && p->items[end].seg <= seg)
		end++;
	/* Sweeps up the share's order (its places): each entry is taken once its directory has
	 * been, else left to a later sweep; a sweep that takes nothing ends the waiting (it cannot
	 * happen with the export's paths, but a reader must not loop on a bad file). */
	for (bool left = true, progress = true; left;) {
		bool last = !progress;
		left = progress = false;
		for (uint32_t i = from; i < end; i++) {
			struct fsmeta_item *it = &p->items[i];
			if (it->done)
				continue;
			if (!last && waits(p, it, end)) {
				left = true;
				continue;
			}
			it->done = true;
			out[n++] = it->no;
			progress = true;
		}
	}
	p->next = end;
	return n;
}

uint32_t fsmeta_warm(struct fsmeta_pass *p, uint32_t seg, fsmeta_open_fn open_file, void *ctx,
		     struct fsmeta_stats *st)
{
	const struct wsr_schedule *s = p->s;
	uint64_t t0 = mono_ns();
	uint32_t n = fsmeta_order(p, seg, p->order);
	for (uint32_t k = 0; k < n; k++) {
		uint32_t no = p->order[k], nr = p->first[no + 1] - p->first[no];
		if (marked(&s->files[no]) && nr)
			warm_ranged(no, p->offsets + p->first[no], nr, open_file, ctx, st);
		else
			warm_one(&s->files[no], st);
	}
	st->pass_ns += mono_ns() - t0;
	return n;
}

void fsmeta_free(struct fsmeta_pass *p)
{
	free(p->items);
	free(p->order);
	free(p->first);
	free(p->offsets);
	p->items = NULL;
	p->order = NULL;
	p->first = NULL;
	p->offsets = NULL;
	p->n = p->next = 0;
}
