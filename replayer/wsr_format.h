/* The schedule export the replayer reads (".wsr"): magic, version, checksums, fixed records.
 *
 * The layout (WSR_MAGIC, WSR_VERSION, WSR_KIND_*, the limits, and every record's size and
 * field offsets) is defined once in warmstart/formats/wsr.py and generated into
 * build/gen/wsr_layout.h; warmstart/replay/export.py writes it. The structs below are the
 * decoded, in-memory form the replayer works on, not the file's layout.
 */
#ifndef WSR_FORMAT_H
#define WSR_FORMAT_H

#include <stddef.h>
#include <stdint.h>

#include "wsr_layout.h"

struct wsr_file {
	uint64_t dev;        /* st_dev of a regular file; st_rdev of a block device */
	uint64_t ino;        /* 0 for a block device */
	uint64_t size;       /* bytes; 0 for a block device (not checked) */
	int64_t mtime_ns;    /* 0 for a block device (not checked) */
	const char *path;    /* points into the loaded image; NOT NUL-terminated */
	uint32_t path_len;
	uint32_t kind;       /* WSR_KIND_* */
	uint32_t flags;      /* WSR_FILE_* bits */
	uint64_t meta_pos;   /* the metadata step's order within a device (0: by inode) */
	uint32_t step_segment;   /* the metadata step warms it just before this segment's ranges */
};

struct wsr_segment {
	uint32_t idx;          /* 1 = the pre-buffer */
	uint32_t first_range;  /* index into ranges[] */
	uint32_t nranges;
	uint64_t bytes;
	uint64_t cpu_ns;       /* the app's CPU time within the segment (unused since pacing went) */
};

struct wsr_range {
	uint64_t offset;     /* bytes into the file / device */
	uint64_t length;     /* bytes */
	uint64_t sector;     /* LBA (512-byte sectors) on the device, for LBA sorting */
	uint32_t file_no;    /* index into files[] */
	uint32_t orig_pos;   /* position of the first access in the launch sequence P (1-based) */
	uint32_t segment;    /* index into segments[] */
};

struct wsr_schedule {
	uint64_t schedule_id;
	uint32_t nfiles, nsegments, nranges;
	struct wsr_file *files;
	struct wsr_segment *segments;
	struct wsr_range *ranges;
	void *image;         /* the file's bytes; paths point into it */
	size_t image_len;
};

uint32_t wsr_crc32(uint32_t crc, const void *buf, size_t len);

/* Parse and verify an in-memory image. Takes ownership of `image` (malloc'd) on success.
 * Returns 0, or -EINVAL/-ENOMEM; on -EINVAL *why names the failed check. */
int wsr_parse(void *image, size_t len, struct wsr_schedule *out, const char **why);

/* Read and verify a .wsr file. Returns 0 or -errno (-EINVAL: corrupt, see *why). */
int wsr_load(const char *path, struct wsr_schedule *out, const char **why);

void wsr_free(struct wsr_schedule *s);

#endif
