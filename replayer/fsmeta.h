/* The metadata step: before the ranges of the segment that first needs each (FILE.step_segment),
 * warm through the file system the metadata of the files marked WSR_FILE_WARM_META and of the
 * directories on their paths (WSR_KIND_DIR entries)
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
	uint64_t pass_ns;           /* the pass: lookups, listings, opens and seeks, every segment's */
	uint64_t ns;                /* the whole step, every segment's (set by the caller) */
	uint64_t prebuffer_ns;      /* of ns, before the pre-buffer's ranges (set by the caller) */
};

/* Opens (and checks) scheduled file `no`; returns an fd the caller keeps, or < 0. */
typedef int (*fsmeta_open_fn)(void *ctx, uint32_t no);

/* The pass over the export's directories and marked files, in order: by FILE.step_segment, then
 * by disk place (fsmeta.c). */
struct fsmeta_pass {
	const struct wsr_schedule *s;
	struct fsmeta_item *items;
	uint32_t *order;         /* a share's entries (file numbers) in the order warmed (fsmeta_order) */
	uint32_t n, next;        /* entries; the first of the next share */
	uint32_t *first;         /* file no -> its range offsets: offsets[first[no] .. first[no + 1]) */
	uint64_t *offsets;
};

/* Orders the pass; nothing to do (n = 0) if no file is marked. Returns 0 or -ENOMEM. */
int fsmeta_plan(const struct wsr_schedule *s, struct fsmeta_pass *p);

/* Whether entries of step segment <= seg are left to warm. */
bool fsmeta_pending(const struct fsmeta_pass *p, uint32_t seg);

/* The order in which the share of step segment <= seg is warmed: its entries' file numbers
 * (indices into files[]) written to out (room for n), the entries taken from the pass; returns
 * how many. The share in place order, sweep after sweep: an entry marked WSR_FILE_AFTER_DIR whose
 * place is known waits for the next sweep while its directory, an entry of the share, is not
 * warmed yet. */
uint32_t fsmeta_order(struct fsmeta_pass *p, uint32_t seg, uint32_t *out);

/* Warms, in fsmeta_order's order, every entry left whose step segment is <= seg: a directory
 * flagged WSR_FILE_LIST_DIR read to its end (getdents), every other one looked up (O_PATH); a marked file
 * with ranges opened through open_file (the fd kept for the data) and each range's start sought
 * with SEEK_DATA, one without ranges looked up. Adds its time to st->pass_ns; returns how many
 * entries it warmed. */
uint32_t fsmeta_warm(struct fsmeta_pass *p, uint32_t seg, fsmeta_open_fn open_file, void *ctx,
		     struct fsmeta_stats *st);

void fsmeta_free(struct fsmeta_pass *p);

#endif
