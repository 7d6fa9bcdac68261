/* The hook index: the compact, root-owned file that maps an executable identity (+ argv
 * signature) to the schedule to replay. Written by warmstart/hook/index.py, read here by
 * warmstartd and the preload shim. No SQLite on the exec path.
 *
 * The layout (WS_INDEX_MAGIC, WS_INDEX_VERSION, WS_HOLD_CAP_MS, WS_ENTRY_* and the structs
 * ws_index_header and ws_index_entry the file is mapped onto) is defined once in
 * warmstart/formats/hook_index.py and generated into build/gen/hook_index_layout.h: a header,
 * entries sorted by dev, ino, then argv-signature entries before exe-only ones, a string table
 * (each string NUL-terminated); checksum = FNV-1a 64 over everything after the header. */
#ifndef WS_INDEX_H
#define WS_INDEX_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "hook_index_layout.h"

#define WS_INDEX_MAX_BYTES (64u << 20)
#define WS_LEARN_HOLD_MS 1000u /* an exec held while the learner sets up its recorder */
/* A hold counts from its replayer's "start" (set up, about to read), not from the exec: a
 * replayer slowed in its start by a busy CPU must not use up a short hold before its first read.
 * Until "start", the exec waits at most this much longer than its hold (docs/hook.md). */
#define WS_START_ALLOW_MS 200u

struct ws_index {
	void *map;
	size_t map_len;
	const struct ws_index_header *hdr;
	const struct ws_index_entry *entries;
	const char *strtab;
};

uint64_t ws_fnv1a64(const void *data, size_t len);

/* Open and verify an index file: refuses a file owned by anyone but root and `owner` (pass 0
 * to trust root only) or writable by group/others, checked on the file opened, and never
 * follows a symlink. Returns 0 or -errno (-EPERM ownership, -EBADMSG bad magic/checksum/layout,
 * -EPROTO unknown version). */
int ws_index_open(struct ws_index *idx, const char *path, uid_t owner);
/* Verify an index already in memory (used by ws_index_open and the C tests). */
int ws_index_parse(struct ws_index *idx, const void *buf, size_t len);
void ws_index_close(struct ws_index *idx);

static inline const char *ws_index_str(const struct ws_index *idx, uint32_t off)
{
	return idx->strtab + off;
}

/* How long an exec of this entry may be held: its hold_ms, within the index's max_hold_ms and
 * WS_HOLD_CAP_MS (one rule for the daemon and the shim). */
uint32_t ws_entry_hold_ms(const struct ws_index *idx, const struct ws_index_entry *e);

/* What a readable replayer notify fd says (docs/replayer.md): started (the hold counts from
 * now), ready (the app may start), or gone (EOF or an error: the app starts anyway). */
enum ws_notify { WS_NOTIFY_START, WS_NOTIFY_READY, WS_NOTIFY_GONE };
enum ws_notify ws_notify_read(int fd);

/* First entry with this (dev, ino), or NULL: the daemon's per-exec fast path. */
const struct ws_index_entry *ws_index_find(const struct ws_index *idx, uint64_t dev, uint64_t ino);

/* The entry for a launch by `uid`: same dev/ino/size/mtime, argv signature matched, and usable
 * by that user (ws_entry_usable_by). argv may be NULL when it could not be read (then only
 * exe-only entries match). Returns NULL if none; *identity_mismatch is set when an entry had the
 * inode but a different size/mtime. */
const struct ws_index_entry *ws_index_match(const struct ws_index *idx, uint64_t dev, uint64_t ino,
					    uint64_t size, int64_t mtime_ns, char *const *argv, int argc,
					    uid_t uid, int *identity_mismatch);

/* Whether a launch by `uid` may use the entry: owner 0 (recorded by root) serves everyone; an
 * entry learned from a user's launch serves that user's launches only (docs/security.md). */
static inline int ws_entry_usable_by(const struct ws_index_entry *e, uid_t uid)
{
	return e->owner_uid == 0 || e->owner_uid == (uint32_t)uid;
}

/* argv[0..argc-1] contains the NUL-separated needles (total length len) as a subsequence. */
int ws_argv_matches(const char *needles, uint32_t len, char *const *argv, int argc);

#endif
