/* The metadata step (see fsmeta.h). What a cold launch on XFS or btrfs waits for besides data:
 * each path lookup reads directory blocks and inodes into the file system's own caches (XFS's
 * buffer cache, btrfs's tree blocks), which the pre-buffer's block-device reads never fill.
 * Doing it for all files up front, in one pass ordered by inode, turns those scattered
 * synchronous reads into a sweep:
 *  - directories: every directory on the marked paths, opened once (parents before children),
 *    then read to the end with getdents64 in (st_dev, inode) order. That loads all of a
 *    directory's blocks, which a lookup does only partly and the app's own listdir (Python's
 *    import system lists each sys.path directory) would otherwise read later.
 *  - files: opened in (st_dev, inode) order through the replayer's own open, which checks their
 *    identity and keeps the fd for the data fetch, so nothing is opened twice.
 * Inode order is disk order where it matters: an XFS inode number encodes its allocation group,
 * block and slot, and a directory's blocks are allocated near its inode; btrfs keys every item
 * of an inode (inode item, directory items, extent items) by the inode number in the subvolume's
 * tree, so inode order walks that tree's leaves in key order, neighbours sharing a leaf. */
#include "fsmeta.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "openpath.h"

struct dir {
	const char *path;   /* a prefix of a marked file's path (not NUL-terminated) */
	uint32_t len;
	int fd;
	uint64_t dev, ino;
};

struct file_ref {
	uint32_t no;
	uint64_t dev, ino;
};

static int cmp_u64(uint64_t a, uint64_t b)
{
	return a < b ? -1 : a > b;
}

static int by_path(const void *pa, const void *pb)
{
	const struct dir *a = pa, *b = pb;
	int c = memcmp(a->path, b->path, a->len < b->len ? a->len : b->len);
	return c ? c : cmp_u64(a->len, b->len);
}

static int dir_by_inode(const void *pa, const void *pb)
{
	const struct dir *a = pa, *b = pb;
	int c = cmp_u64(a->dev, b->dev);
	return c ? c : cmp_u64(a->ino, b->ino);
}

static int file_by_inode(const void *pa, const void *pb)
{
	const struct file_ref *a = pa, *b = pb;
	int c = cmp_u64(a->dev, b->dev);
	if (!c)
		c = cmp_u64(a->ino, b->ino);
	return c ? c : cmp_u64(a->no, b->no);
}

static int marked(const struct wsr_file *f)
{
	return f->kind == WSR_KIND_FILE && (f->flags & WSR_FILE_WARM_META);
}

/* Every directory on the marked paths ("/", "/usr", "/usr/lib" for "/usr/lib/x"), once each,
 * sorted by path. Returns how many, or -ENOMEM. */
static int64_t collect_dirs(const struct wsr_schedule *s, struct dir **out)
{
	size_t n = 0, cap = 0;
	struct dir *d = NULL;
	for (uint32_t i = 0; i < s->nfiles; i++) {
		const struct wsr_file *f = &s->files[i];
		if (!marked(f))
			continue;
		for (uint32_t j = 0; j < f->path_len; j++) {
			if (f->path[j] != '/')
				continue;
			if (n == cap) {
				cap = cap ? 2 * cap : 64;
				struct dir *nd = realloc(d, cap * sizeof(*d));
				if (!nd) {
					free(d);
					return -ENOMEM;
				}
				d = nd;
			}
			d[n++] = (struct dir){ f->path, j ? j : 1, -1, 0, 0 };   /* "/" for the first */
		}
	}
	if (n)
		qsort(d, n, sizeof(*d), by_path);
	size_t u = 0;
	for (size_t i = 0; i < n; i++)
		if (!u || by_path(&d[u - 1], &d[i]))
			d[u++] = d[i];
	*out = d;
	return (int64_t)u;
}

static int open_dir(const struct dir *d)
{
	char path[WSR_MAX_PATH + 1];
	memcpy(path, d->path, d->len);
	path[d->len] = 0;
	return replay_open_path(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC | O_NONBLOCK | O_NOFOLLOW);
}

/* Reads the directory to its end; returns the bytes of entries, or -errno. */
static int64_t read_dir(int fd)
{
	static char buf[32768];
	int64_t total = 0;
	for (;;) {
		long n = syscall(SYS_getdents64, fd, buf, sizeof(buf));
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			return -errno;
		if (n == 0)
			return total;
		total += n;
	}
}

static void warm_dirs(struct dir *d, size_t n, struct fsmeta_stats *st)
{
	for (size_t i = 0; i < n; i++) {   /* path order: each lookup finds its parent cached */
		struct stat sb;
		d[i].fd = open_dir(&d[i]);
		if (d[i].fd >= 0 && fstat(d[i].fd, &sb) == 0) {
			d[i].dev = sb.st_dev;
			d[i].ino = sb.st_ino;
		}
	}
	qsort(d, n, sizeof(*d), dir_by_inode);
	for (size_t i = 0; i < n; i++) {
		int64_t got = d[i].fd >= 0 ? read_dir(d[i].fd) : -1;
		if (got < 0) {
			st->dir_errors++;
		} else {
			st->dirs++;
			st->dirents_bytes += (uint64_t)got;
		}
		if (d[i].fd >= 0)
			close(d[i].fd);
	}
}

int fsmeta_warm(const struct wsr_schedule *s, fsmeta_open_fn open_file, void *ctx, struct fsmeta_stats *st)
{
	uint32_t n = 0;
	for (uint32_t i = 0; i < s->nfiles; i++)
		n += marked(&s->files[i]);
	if (!n)
		return 0;
	struct dir *dirs = NULL;
	int64_t ndirs = collect_dirs(s, &dirs);
	struct file_ref *files = malloc(n * sizeof(*files));
	if (ndirs < 0 || !files) {
		free(dirs);
		free(files);
		return -ENOMEM;
	}
	warm_dirs(dirs, (size_t)ndirs, st);
	free(dirs);
	n = 0;
	for (uint32_t i = 0; i < s->nfiles; i++)
		if (marked(&s->files[i]))
			files[n++] = (struct file_ref){ i, s->files[i].dev, s->files[i].ino };
	qsort(files, n, sizeof(*files), file_by_inode);
	for (uint32_t i = 0; i < n; i++) {
		open_file(ctx, files[i].no);   /* a file that changed is skipped and counted there */
		st->files++;
	}
	free(files);
	return 0;
}
