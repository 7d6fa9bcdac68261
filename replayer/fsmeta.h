/* The metadata step: before the pre-buffer, warm through the file system the metadata of the
 * files marked WSR_FILE_WARM_META and of the directories on their paths (WSR_KIND_DIR entries)
 * (XFS, btrfs, ...: file systems whose metadata a read of the block device does not reach;
 * warmstart/fs/metadata.py decides which). */
#ifndef FSMETA_H
#define FSMETA_H

#include <stdbool.h>
#include <stdint.h>

#include "wsr_format.h"

struct fsmeta_stats {
	uint32_t files_looked_up;   /* marked files whose lookup (O_PATH open) succeeded */
	uint32_t dirs_listed;       /* directories read to the end (WSR_FILE_LIST_DIR) */
	uint32_t dirs_looked_up;    /* other directories, looked up */
	uint32_t errors;            /* files or directories that could not be opened or read */
	uint32_t files_opened;      /* marked files with ranges, opened through open_file (also looked up) */
	uint32_t ranges_sought;     /* their ranges' starts sought (SEEK_DATA) */
	uint64_t dirents_bytes;
	uint64_t pass_ns;           /* the pass: lookups, listings, opens and seeks */
	uint64_t ns;                /* the whole step (set by the caller) */
};

/* Opens (and checks) scheduled file `no`; returns an fd the caller keeps, or < 0. */
typedef int (*fsmeta_open_fn)(void *ctx, uint32_t no);

/* One pass over the export's directories and its marked files in (st_dev, inode) order: a
 * directory flagged WSR_FILE_LIST_DIR read to its end (getdents), every other one looked up
 * (O_PATH); a marked file with ranges opened through open_file (the fd kept for the data) and
 * each range's start sought with SEEK_DATA, one without ranges looked up. Returns 0 or -ENOMEM. */
int fsmeta_warm(const struct wsr_schedule *s, fsmeta_open_fn open_file, void *ctx, struct fsmeta_stats *st);

#endif
