/* The metadata step (see fsmeta.h; docs/replayer.md has the measurements). What a cold launch
 * on XFS or btrfs waits for besides data: path lookups, directory listings and stats read
 * directory blocks and inodes into the file system's own caches (XFS's buffer cache, btrfs's tree
 * blocks), which the pre-buffer's block-device reads never fill. Before any data, in one pass:
 *  - every directory on the marked files' paths (the export's WSR_KIND_DIR entries) and every
 *    marked file, all in (st_dev, inode) order: a directory marked WSR_FILE_LIST_DIR is read to
 *    its end with getdents64 (XFS: what the app's own listings, failed lookups and stats of
 *    siblings would read later, and cheaper than the lookups alone), any other directory and
 *    every file looked up (an O_PATH open: the lookup reads the inode, nothing of the file);
 *  - then the marked files that later ranges read and the pre-buffer does not open itself are
 *    opened through the replayer's own open, which checks their identity and keeps the fd for the
 *    data fetch (a file with no range, the inode of a file the launch only stat'ed, is only
 *    looked up).
 * Inode order is disk order where it matters: an XFS inode number encodes its allocation group,
 * block and slot, and a directory's blocks are allocated near its inode; btrfs keys every item
 * of an inode by the inode number in the subvolume's tree, so inode order walks that tree's
 * leaves in key order, neighbours sharing a leaf. One pass in that order, not level by level
 * from "/" (each level a sweep of its own): XFS vim 179 ms instead of 262, python 320 instead of
 * 410. One request at a time: the reads a lookup makes are synchronous, and many threads issuing
 * them at once reached the disk in no useful order (32 threads: vim's launch 0.70 s, one: 0.62 s
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

struct item {
	uint32_t no;   /* index into files[] */
	uint64_t dev, ino;
};

static int cmp_u64(uint64_t a, uint64_t b)
{
	return a < b ? -1 : a > b;
}

static int by_inode(const void *pa, const void *pb)
{
	const struct item *a = pa, *b = pb;
	int c = cmp_u64(a->dev, b->dev);
	if (!c)
		c = cmp_u64(a->ino, b->ino);
	return c ? c : cmp_u64(a->no, b->no);
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

/* One directory or file of the pass: read whole, or looked up. */
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

int fsmeta_warm(const struct wsr_schedule *s, const bool *not_opened, fsmeta_open_fn open_file, void *ctx,
		struct fsmeta_stats *st)
{
	uint32_t n = 0, nmarked = 0;
	for (uint32_t i = 0; i < s->nfiles; i++)
		nmarked += marked(&s->files[i]);
	if (!nmarked)
		return 0;
	struct item *items = malloc(s->nfiles * sizeof(*items));
	if (!items)
		return -ENOMEM;
	for (uint32_t i = 0; i < s->nfiles; i++)
		if (in_pass(&s->files[i]))
			items[n++] = (struct item){ i, s->files[i].dev, s->files[i].ino };
	qsort(items, n, sizeof(*items), by_inode);
	uint64_t t0 = mono_ns();
	for (uint32_t k = 0; k < n; k++)
		warm_one(&s->files[items[k].no], st);
	st->pass_ns = mono_ns() - t0;
	/* the files later ranges read that the pre-buffer does not open: opened and checked now, the fd kept */
	for (uint32_t k = 0; k < n; k++) {
		uint32_t no = items[k].no;
		if (!marked(&s->files[no]) || (not_opened && not_opened[no]))
			continue;
		open_file(ctx, no);   /* a file that changed is skipped and counted there */
		st->files_opened++;
	}
	free(items);
	return 0;
}
