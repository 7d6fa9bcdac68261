/* The metadata step (see fsmeta.h; docs/replayer.md has the measurements). What a cold launch
 * on XFS or btrfs waits for besides data: path lookups, directory listings and stats read
 * directory blocks and inodes into the file system's own caches (XFS's buffer cache, btrfs's tree
 * blocks), which the pre-buffer's block-device reads never fill. Before any data:
 *  - directories: every directory on the marked paths, level by level from "/", each level in
 *    inode order, read to the end with getdents64. That loads all of a directory's blocks, which
 *    a lookup does only partly and the app's own listing (Python's import system lists each
 *    sys.path directory), failed lookups and stats of siblings would otherwise read later.
 *  - files: the marked files the pre-buffer does not open itself, in (st_dev, inode) order,
 *    through the replayer's own open, which checks their identity and keeps the fd for the data
 *    fetch (nothing is opened twice). The pre-buffer's files are opened by its LBA-sorted sweep,
 *    which passes their inodes on the way; opening them here too cost one more sweep.
 * Inode order is disk order where it matters: an XFS inode number encodes its allocation group,
 * block and slot, and a directory's blocks are allocated near its inode; btrfs keys every item
 * of an inode (inode item, directory items, extent items) by the inode number in the subvolume's
 * tree, so inode order walks that tree's leaves in key order, neighbours sharing a leaf. */
#include "fsmeta.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "pathopen.h"

#define MAX_DIR_BYTES (1 << 20)   /* of entries read per directory (~20,000 names) */

struct dir {
	const char *path;   /* a prefix of a marked file's path (not NUL-terminated) */
	uint32_t len;
	uint32_t depth;     /* "/" 0, "/usr" 1, "/usr/lib" 2 */
	uint64_t ino;       /* from its parent's entry (d_ino) once that is read; 0 before */
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

static const struct dir *sort_dirs;

static int dir_by_inode(const void *pa, const void *pb)
{
	const struct dir *a = &sort_dirs[*(const uint32_t *)pa], *b = &sort_dirs[*(const uint32_t *)pb];
	int c = cmp_u64(a->ino, b->ino);
	return c ? c : cmp_u64(*(const uint32_t *)pa, *(const uint32_t *)pb);
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
		uint32_t depth = 0;
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
			d[n++] = (struct dir){ f->path, j ? j : 1, depth++, 0 };   /* "/" for the first */
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
	return path_open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC | O_NONBLOCK | O_NOFOLLOW);
}

struct dirent64_k {      /* what getdents64 returns */
	uint64_t d_ino;
	int64_t d_off;
	unsigned short d_reclen;
	unsigned char d_type;
	char d_name[];
};

/* The inode number the entry `name` of directory d gives its child directory, if that is one
 * of ours (dirs[] sorted by path). */
static void note_child(struct dir *dirs, size_t n, const struct dir *d, const char *name, uint64_t ino)
{
	char path[WSR_MAX_PATH + 1];
	size_t nl = strlen(name), at = d->len > 1 ? d->len : 0;
	if (at + 1 + nl > WSR_MAX_PATH)
		return;
	memcpy(path, d->path, at);
	path[at] = '/';
	memcpy(path + at + 1, name, nl);
	struct dir key = { path, (uint32_t)(at + 1 + nl), 0, 0 };
	struct dir *child = bsearch(&key, dirs, n, sizeof(*dirs), by_path);
	if (child)
		child->ino = ino;
}

/* Reads directory d to its end, noting its children's inode numbers; returns the bytes of
 * entries, or -errno. */
static int64_t read_dir(int fd, struct dir *dirs, size_t n, const struct dir *d)
{
	static char buf[32768] __attribute__((aligned(8)));
	int64_t total = 0;
	for (;;) {
		long got = syscall(SYS_getdents64, fd, buf, sizeof(buf));
		if (got < 0 && errno == EINTR)
			continue;
		if (got < 0)
			return -errno;
		if (got == 0)
			return total;
		total += got;
		for (long at = 0; at < got;) {
			const struct dirent64_k *e = (const void *)(buf + at);
			if ((e->d_type == DT_DIR || e->d_type == DT_UNKNOWN) && strcmp(e->d_name, ".") && strcmp(e->d_name, ".."))
				note_child(dirs, n, d, e->d_name, e->d_ino);
			at += e->d_reclen;
		}
		if (total > MAX_DIR_BYTES)
			return total;   /* enough: a huge directory is not worth a whole sweep */
	}
}

/* Level by level from "/" down: each level's directories opened and read in the order of the
 * inode numbers their parents' entries gave (a lookup needs its parent's blocks, so a level
 * cannot start before the one above it is read; within a level the order is free). Opening
 * them in path order instead jumped between XFS allocation groups at every step (new
 * directories are spread over the groups): 83 directories took 0.28 s instead of 0.25 s. */
static void warm_dirs(struct dir *dirs, size_t n, struct fsmeta_stats *st)
{
	uint32_t *ord = malloc((n ? n : 1) * sizeof(*ord));
	uint32_t maxdepth = 0;
	if (!ord) {
		st->dir_errors += n;
		return;
	}
	for (size_t i = 0; i < n; i++)
		maxdepth = dirs[i].depth > maxdepth ? dirs[i].depth : maxdepth;
	sort_dirs = dirs;
	for (uint32_t depth = 0; depth <= maxdepth; depth++) {
		size_t m = 0;
		for (size_t i = 0; i < n; i++)
			if (dirs[i].depth == depth)
				ord[m++] = (uint32_t)i;
		qsort(ord, m, sizeof(*ord), dir_by_inode);
		for (size_t k = 0; k < m; k++) {
			const struct dir *d = &dirs[ord[k]];
			int fd = open_dir(d);
			int64_t got = fd >= 0 ? read_dir(fd, dirs, n, d) : -1;
			if (got < 0) {
				st->dir_errors++;
			} else {
				st->dirs++;
				st->dirents_bytes += (uint64_t)got;
			}
			if (fd >= 0)
				close(fd);
		}
	}
	free(ord);
}

int fsmeta_warm(const struct wsr_schedule *s, const bool *in_prebuffer, fsmeta_open_fn open_file, void *ctx,
		struct fsmeta_stats *st)
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
		if (marked(&s->files[i]) && !(in_prebuffer && in_prebuffer[i]))
			files[n++] = (struct file_ref){ i, s->files[i].dev, s->files[i].ino };
	qsort(files, n, sizeof(*files), file_by_inode);
	for (uint32_t i = 0; i < n; i++) {
		open_file(ctx, files[i].no);   /* a file that changed is skipped and counted there */
		st->files++;
	}
	free(files);
	return 0;
}
