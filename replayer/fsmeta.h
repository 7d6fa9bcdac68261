/* The metadata step: before the pre-buffer, warm through the file system the metadata of the
 * files marked WSR_FILE_WARM_META (XFS, btrfs, ...: file systems whose metadata a read of the
 * block device does not reach; warmstart/fs/metadata.py decides which). */
#ifndef FSMETA_H
#define FSMETA_H

#include <stdbool.h>
#include <stdint.h>

#include "wsr_format.h"

struct fsmeta_stats {
	uint32_t files;       /* marked files handed to open_file */
	uint32_t dirs;        /* directories read to the end */
	uint32_t dir_errors;  /* directories that could not be opened or read */
	uint64_t dirents_bytes;
	uint64_t ns;          /* the step's duration (set by the caller) */
};

/* Opens (and checks) scheduled file `no`; returns an fd the caller keeps, or < 0. */
typedef int (*fsmeta_open_fn)(void *ctx, uint32_t no);

/* Reads every directory on the marked files' paths to its end (getdents), level by level in
 * inode order, then opens through open_file, in inode order, the marked files the pre-buffer
 * does not read (in_prebuffer[file_no]; NULL: none): the pre-buffer's sweep opens its own files
 * in disk order on its way. Returns 0 or -ENOMEM. */
int fsmeta_warm(const struct wsr_schedule *s, const bool *in_prebuffer, fsmeta_open_fn open_file, void *ctx,
		struct fsmeta_stats *st);

#endif
