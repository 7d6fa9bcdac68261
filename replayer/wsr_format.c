/* Load and verify a schedule export: nothing is trusted until both checksums and every bound
 * have been checked, so a corrupt file is refused before any I/O. */
#include "wsr_format.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static uint32_t crc_table[256];

static void crc_init(void)
{
	for (uint32_t i = 0; i < 256; i++) {
		uint32_t c = i;
		for (int k = 0; k < 8; k++)
			c = (c & 1) ? 0xEDB88320u ^ (c >> 1) : c >> 1;
		crc_table[i] = c;
	}
}

/* zlib-compatible CRC-32, so Python's zlib.crc32 writes the same value. */
uint32_t wsr_crc32(uint32_t crc, const void *buf, size_t len)
{
	const unsigned char *p = buf;
	if (!crc_table[1])
		crc_init();
	crc = ~crc;
	while (len--)
		crc = crc_table[(crc ^ *p++) & 0xff] ^ (crc >> 8);
	return ~crc;
}

/* A little-endian field of `len` bytes. */
static uint64_t le(const unsigned char *p, unsigned len)
{
	uint64_t v = 0;

	while (len--)
		v = v << 8 | p[len];
	return v;
}

/* Field NAME of record REC (HEADER, FILE, SEGMENT, RANGE) at p, where offset and width come from
 * the generated layout: GET(p, HEADER, VERSION) reads WSR_HEADER_VERSION_LEN bytes at
 * WSR_HEADER_VERSION_OFF. */
#define GET(p, REC, NAME) le((p) + WSR_##REC##_##NAME##_OFF, WSR_##REC##_##NAME##_LEN)

/* An absolute path without ".", ".." or empty components and without a trailing slash: the
 * replayer opens exactly what the analyzer resolved, never a path that walks elsewhere. */
static int canonical_path(const char *p, uint32_t len)
{
	if (len == 0 || p[0] != '/' || (len > 1 && p[len - 1] == '/'))
		return 0;
	for (uint32_t i = 0; i < len;) {
		uint32_t j = i + 1;
		while (j < len && p[j] != '/')
			j++;
		uint32_t n = j - i - 1; /* the component between p[i] == '/' and p[j] */
		if ((n == 0 && len > 1) || (n == 1 && p[i + 1] == '.') ||
		    (n == 2 && p[i + 1] == '.' && p[i + 2] == '.'))
			return 0;
		i = j;
	}
	return 1;
}

/* The header: magic, version, size and checksum, then the counts against the limits and the
 * payload's size and checksum. Returns NULL, or the check that failed. */
static const char *check_header(const unsigned char *b, size_t len)
{
	unsigned char hdr[WSR_HEADER_SIZE];

	if (len < WSR_HEADER_SIZE)
		return "file shorter than the header";
	if (memcmp(b + WSR_HEADER_MAGIC_OFF, WSR_MAGIC, WSR_HEADER_MAGIC_LEN) != 0)
		return "bad magic (not a warmstart schedule export)";
	if (GET(b, HEADER, VERSION) != WSR_VERSION)
		return "unsupported version";
	if (GET(b, HEADER, HEADER_SIZE) != WSR_HEADER_SIZE)
		return "bad header size";
	memcpy(hdr, b, sizeof(hdr));
	memset(hdr + WSR_HEADER_HEADER_CRC32_OFF, 0, WSR_HEADER_HEADER_CRC32_LEN);
	if (wsr_crc32(0, hdr, sizeof(hdr)) != GET(b, HEADER, HEADER_CRC32))
		return "header checksum mismatch";

	uint32_t nfiles = GET(b, HEADER, NFILES), nseg = GET(b, HEADER, NSEGMENTS), nranges = GET(b, HEADER, NRANGES);
	uint32_t strtab = GET(b, HEADER, STRTAB_LEN);
	uint64_t payload = GET(b, HEADER, PAYLOAD_LEN);
	if (nfiles > WSR_MAX_FILES || nranges > WSR_MAX_RANGES || nseg > nranges + 1)
		return "counts out of bounds";
	uint64_t want = (uint64_t)nfiles * WSR_FILE_SIZE + (uint64_t)nseg * WSR_SEGMENT_SIZE +
			(uint64_t)nranges * WSR_RANGE_SIZE + strtab;
	if (payload != want || len != WSR_HEADER_SIZE + payload)
		return "size does not match the header (truncated or padded)";
	if (wsr_crc32(0, b + WSR_HEADER_SIZE, payload) != GET(b, HEADER, PAYLOAD_CRC32))
		return "payload checksum mismatch";
	return NULL;
}

/* The file records at p into out->files; their paths point into the string table. */
static const char *parse_files(const unsigned char *p, const char *strings, uint32_t strtab,
			       struct wsr_schedule *out)
{
	for (uint32_t i = 0; i < out->nfiles; i++, p += WSR_FILE_SIZE) {
		struct wsr_file *f = &out->files[i];
		uint32_t off = GET(p, FILE, PATH_OFF);
		f->dev = GET(p, FILE, DEV);
		f->ino = GET(p, FILE, INO);
		f->size = GET(p, FILE, SIZE);
		f->mtime_ns = (int64_t)GET(p, FILE, MTIME_NS);
		f->path_len = GET(p, FILE, PATH_LEN);
		f->kind = GET(p, FILE, KIND);
		f->flags = GET(p, FILE, FLAGS);
		f->meta_pos = GET(p, FILE, META_POS);
		f->step_segment = GET(p, FILE, STEP_SEGMENT);
		if (f->kind > WSR_KIND_DIR)
			return "file entry with an unknown kind";
		if (f->flags & ~(uint32_t)WSR_FILE_FLAGS)
			return "file entry with unknown flags";
		if (f->kind != WSR_KIND_FILE && (f->flags & WSR_FILE_WARM_META))
			return "warm-metadata flag on a block device or directory";
		if (f->kind != WSR_KIND_DIR && (f->flags & WSR_FILE_LIST_DIR))
			return "list-directory flag on a file or block device";
		if (f->step_segment && f->step_segment >= out->nsegments)
			return "file entry's step segment past the last segment";
		if ((uint64_t)off + f->path_len > strtab || f->path_len == 0 || f->path_len > WSR_MAX_PATH)
			return "file path outside the string table";
		if (memchr(strings + off, 0, f->path_len))
			return "file path contains a NUL byte";
		if (!canonical_path(strings + off, f->path_len))
			return "file path is not absolute and canonical";
		f->path = strings + off;
	}
	return NULL;
}

/* The segment records at p into out->segments. */
static const char *parse_segments(const unsigned char *p, struct wsr_schedule *out)
{
	uint32_t next = 0;
	for (uint32_t i = 0; i < out->nsegments; i++, p += WSR_SEGMENT_SIZE) {
		struct wsr_segment *s = &out->segments[i];
		s->idx = GET(p, SEGMENT, IDX);
		s->first_range = GET(p, SEGMENT, FIRST_RANGE);
		s->nranges = GET(p, SEGMENT, NRANGES);
		s->bytes = GET(p, SEGMENT, BYTES);
		s->cpu_ns = GET(p, SEGMENT, CPU_NS);
		/* Segments must tile ranges[] in order: the replayer relies on it. */
		if (s->first_range != next || (uint64_t)s->first_range + s->nranges > out->nranges)
			return "segments do not tile the ranges";
		next += s->nranges;
	}
	if (next != out->nranges)
		return "segments do not cover every range";
	return NULL;
}

/* The range records at p into out->ranges, checked against the files and segments parsed. */
static const char *parse_ranges(const unsigned char *p, struct wsr_schedule *out)
{
	for (uint32_t i = 0; i < out->nranges; i++, p += WSR_RANGE_SIZE) {
		struct wsr_range *r = &out->ranges[i];
		r->offset = GET(p, RANGE, OFFSET);
		r->length = GET(p, RANGE, LENGTH);
		r->sector = GET(p, RANGE, SECTOR);
		r->file_no = GET(p, RANGE, FILE_NO);
		r->orig_pos = GET(p, RANGE, ORIG_POS);
		r->segment = GET(p, RANGE, SEGMENT);
		if (r->file_no >= out->nfiles)
			return "range names a file that does not exist";
		if (out->files[r->file_no].kind == WSR_KIND_DIR)
			return "range of a directory";
		if (r->segment >= out->nsegments || i < out->segments[r->segment].first_range ||
		    i >= out->segments[r->segment].first_range + out->segments[r->segment].nranges)
			return "range outside its segment";
		if (r->length == 0 || r->offset + r->length < r->offset || r->offset > (1ull << 62))
			return "range with a bad offset or length";
		/* a file's pages end at its size rounded up to a page: nothing to read past that */
		const struct wsr_file *f = &out->files[r->file_no];
		if (f->kind == WSR_KIND_FILE && r->offset + r->length > ((f->size + 4095) & ~4095ull))
			return "range beyond the end of its file";
	}
	return NULL;
}

int wsr_parse(void *image, size_t len, struct wsr_schedule *out, const char **why)
{
	const unsigned char *b = image;
	int rc = 0;

	memset(out, 0, sizeof(*out));
	*why = check_header(b, len);
	if (*why)
		return -EINVAL;
	/* the payload: files, segments, ranges, then the string table */
	out->nfiles = GET(b, HEADER, NFILES);
	out->nsegments = GET(b, HEADER, NSEGMENTS);
	out->nranges = GET(b, HEADER, NRANGES);
	uint32_t strtab = GET(b, HEADER, STRTAB_LEN);
	const unsigned char *files = b + WSR_HEADER_SIZE;
	const unsigned char *segments = files + (size_t)out->nfiles * WSR_FILE_SIZE;
	const unsigned char *ranges = segments + (size_t)out->nsegments * WSR_SEGMENT_SIZE;
	const char *strings = (const char *)(b + len - strtab);

	out->files = calloc(out->nfiles ? out->nfiles : 1, sizeof(*out->files));
	out->segments = calloc(out->nsegments ? out->nsegments : 1, sizeof(*out->segments));
	out->ranges = calloc(out->nranges ? out->nranges : 1, sizeof(*out->ranges));
	if (!out->files || !out->segments || !out->ranges)
		rc = -ENOMEM;
	else if ((*why = parse_files(files, strings, strtab, out)) ||
		 (*why = parse_segments(segments, out)) || (*why = parse_ranges(ranges, out)))
		rc = -EINVAL;
	if (rc) {
		free(out->files);
		free(out->segments);
		free(out->ranges);
		memset(out, 0, sizeof(*out));
		return rc;
	}
	out->schedule_id = GET(b, HEADER, SCHEDULE_ID);
	out->image = image;
	out->image_len = len;
	return 0;
}

int wsr_load(const char *path, struct wsr_schedule *out, const char **why)
{
	struct stat st;
	void *buf = NULL;
	size_t got = 0;
	int rc;
	int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);   /* a FIFO there must not hang us */

	*why = NULL;
	if (fd < 0)
		return -errno;
	if (fstat(fd, &st) < 0) {
		rc = -errno;
		goto out;
	}
	if (!S_ISREG(st.st_mode) || st.st_size > (64 << 20)) {
		*why = "not a regular file of a plausible size";
		rc = -EINVAL;
		goto out;
	}
	buf = malloc(st.st_size ? (size_t)st.st_size : 1);
	if (!buf) {
		rc = -ENOMEM;
		goto out;
	}
	while (got < (size_t)st.st_size) {
		ssize_t n = read(fd, (char *)buf + got, st.st_size - got);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0) {
			rc = n < 0 ? -errno : -EINVAL;
			if (!n)
				*why = "file shrank while reading";
			goto out;
		}
		got += n;
	}
	rc = wsr_parse(buf, got, out, why);
	if (!rc)
		buf = NULL;  /* owned by *out now */
out:
	free(buf);
	close(fd);
	return rc;
}

void wsr_free(struct wsr_schedule *s)
{
	free(s->files);
	free(s->segments);
	free(s->ranges);
	free(s->image);
	memset(s, 0, sizeof(*s));
}
