/* Load, verify and search the hook index (see index.h). */
#include "index.h"

#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

uint64_t ws_fnv1a64(const void *data, size_t len)
{
	const unsigned char *p = data;
	uint64_t h = 0xcbf29ce484222325ull;

	for (size_t i = 0; i < len; i++) {
		h ^= p[i];
		h *= 0x100000001b3ull;
	}
	return h;
}

static int str_ok(const struct ws_index *idx, uint32_t off, uint32_t len)
{
	uint64_t end = (uint64_t)off + len;

	return end < idx->hdr->strtab_len && idx->strtab[end] == '\0';
}

static int key_cmp(uint64_t dev_a, uint64_t ino_a, uint64_t dev_b, uint64_t ino_b)
{
	/* explicit comparisons: a - b overflows on 64-bit values */
	if (dev_a != dev_b)
		return dev_a < dev_b ? -1 : 1;
	if (ino_a != ino_b)
		return ino_a < ino_b ? -1 : 1;
	return 0;
}

int ws_index_parse(struct ws_index *idx, const void *buf, size_t len)
{
	const struct ws_index_header *hdr = buf;
	uint64_t need;

	if (len < sizeof(*hdr) || memcmp(hdr->magic, WS_INDEX_MAGIC, 8) != 0)
		return -EBADMSG;
	if (hdr->version != WS_INDEX_VERSION)
		return -EPROTO;
	need = sizeof(*hdr) + (uint64_t)hdr->n_entries * sizeof(struct ws_index_entry) + hdr->strtab_len;
	if (need != len)
		return -EBADMSG;
	if (ws_fnv1a64((const char *)buf + sizeof(*hdr), len - sizeof(*hdr)) != hdr->checksum)
		return -EBADMSG;
	idx->hdr = hdr;
	idx->entries = (const struct ws_index_entry *)(hdr + 1);
	idx->strtab = (const char *)(idx->entries + hdr->n_entries);
	for (uint32_t i = 0; i < hdr->n_entries; i++) {
		const struct ws_index_entry *e = &idx->entries[i];

		if (!str_ok(idx, e->exe_off, e->exe_len) || !str_ok(idx, e->argv_off, e->argv_len) ||
		    !str_ok(idx, e->sched_off, e->sched_len) || !str_ok(idx, e->name_off, e->name_len) ||
		    !str_ok(idx, e->files_off, e->files_len))
			return -EBADMSG;
		if (i && key_cmp(idx->entries[i - 1].dev, idx->entries[i - 1].ino, e->dev, e->ino) > 0)
			return -EBADMSG; /* binary search needs the order */
	}
	return 0;
}

int ws_index_open(struct ws_index *idx, const char *path, uid_t owner)
{
	struct stat st;
	void *map;
	int fd, err;

	memset(idx, 0, sizeof(*idx));
	fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
	if (fd < 0)
		return -errno;
	if (fstat(fd, &st) < 0) {
		err = -errno;
		close(fd);
		return err;
	}
	if (!S_ISREG(st.st_mode) || st.st_size <= 0 || (uint64_t)st.st_size > WS_INDEX_MAX_BYTES) {
		close(fd);
		return -EBADMSG;
	}
	if ((st.st_uid != 0 && st.st_uid != owner) || (st.st_mode & (S_IWGRP | S_IWOTH))) {
		close(fd);
		return -EPERM;
	}
	/* MAP_PRIVATE snapshot: Python replaces the file by rename, never in place */
	map = mmap(NULL, st.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
	err = map == MAP_FAILED ? -errno : 0;
	close(fd);
	if (err)
		return err;
	err = ws_index_parse(idx, map, st.st_size);
	if (err) {
		munmap(map, st.st_size);
		memset(idx, 0, sizeof(*idx));
		return err;
	}
	idx->map = map;
	idx->map_len = st.st_size;
	return 0;
}

void ws_index_close(struct ws_index *idx)
{
	if (idx->map)
		munmap(idx->map, idx->map_len);
	memset(idx, 0, sizeof(*idx));
}

uint32_t ws_entry_hold_ms(const struct ws_index *idx, const struct ws_index_entry *e)
{
	uint32_t ms = e->hold_ms ? e->hold_ms : WS_HOLD_CAP_MS;

	if (idx->hdr->max_hold_ms && ms > idx->hdr->max_hold_ms)
		ms = idx->hdr->max_hold_ms;
	return ms < WS_HOLD_CAP_MS ? ms : WS_HOLD_CAP_MS;
}

enum ws_notify ws_notify_read(int fd)
{
	char buf[32];
	ssize_t n;

	do
		n = read(fd, buf, sizeof(buf) - 1);
	while (n < 0 && errno == EINTR);
	if (n <= 0)
		return WS_NOTIFY_GONE;
	buf[n] = '\0';
	/* each line is one write of 6 bytes (atomic on a pipe); both may come in one read */
	if (strstr(buf, "ready"))
		return WS_NOTIFY_READY;
	return strncmp(buf, "start\n", 6) == 0 ? WS_NOTIFY_START : WS_NOTIFY_GONE;
}

const struct ws_index_entry *ws_index_find(const struct ws_index *idx, uint64_t dev, uint64_t ino)
{
	uint32_t lo = 0, hi = idx->hdr ? idx->hdr->n_entries : 0;

	while (lo < hi) { /* lower bound */
		uint32_t mid = lo + (hi - lo) / 2;

		if (key_cmp(idx->entries[mid].dev, idx->entries[mid].ino, dev, ino) < 0)
			lo = mid + 1;
		else
			hi = mid;
	}
	if (idx->hdr && lo < idx->hdr->n_entries && idx->entries[lo].dev == dev && idx->entries[lo].ino == ino)
		return &idx->entries[lo];
	return NULL;
}

int ws_argv_matches(const char *needles, uint32_t len, char *const *argv, int argc)
{
	const char *n = needles, *end = needles + len;
	int i = 0; /* from argv[0]: at a #! interpreter's exec event argv[0] is the script */

	while (n < end) {
		while (i < argc && strcmp(argv[i], n) != 0)
			i++;
		if (i >= argc)
			return 0;
		i++;
		n += strlen(n) + 1;
	}
	return 1;
}

const struct ws_index_entry *ws_index_match(const struct ws_index *idx, uint64_t dev, uint64_t ino,
					    uint64_t size, int64_t mtime_ns, char *const *argv, int argc,
					    uid_t uid, int *identity_mismatch)
{
	const struct ws_index_entry *e = ws_index_find(idx, dev, ino);
	const struct ws_index_entry *end;

	*identity_mismatch = 0;
	if (!e)
		return NULL;
	end = idx->entries + idx->hdr->n_entries;
	for (; e < end && e->dev == dev && e->ino == ino; e++) {
		if (!ws_entry_usable_by(e, uid))
			continue; /* another user's learned schedule */
		if (e->size != size || e->mtime_ns != mtime_ns) {
			*identity_mismatch = 1; /* upgraded or rewritten since recording */
			continue;
		}
		if (e->argv_len == 0)
			return e;
		if (argv && ws_argv_matches(ws_index_str(idx, e->argv_off), e->argv_len, argv, argc))
			return e;
	}
	return NULL;
}
