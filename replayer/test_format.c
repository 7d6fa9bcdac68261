/* C tests of the .wsr parser against the shared test vectors (tests/vectors/wsr.json, whose
 * expectations build/gen/wsr_vectors.h carries): each vector decodes to exactly the contents the
 * Python writer was given, or is refused for the reason it names; then every kind of damage to
 * a valid vector is refused. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "wsr_format.h"
#include "wsr_vectors.h"

#ifndef VECTOR_DIR
#error "build with -DVECTOR_DIR='\"/path/to/tests/vectors\"' (replayer/build.mk does)"
#endif

static int passed, failed;
#define CHECK(cond, what) do { if (cond) passed++; else { failed++; fprintf(stderr, "FAIL %s:%d %s\n", __FILE__, __LINE__, what); } } while (0)

static void put(unsigned char *p, uint64_t v, int len) { for (int i = 0; i < len; i++) p[i] = v >> (8 * i); }
/* Set field NAME of record REC at p through the generated layout, like wsr_format.c reads it. */
#define SET(p, REC, NAME, v) put((p) + WSR_##REC##_##NAME##_OFF, (v), WSR_##REC##_##NAME##_LEN)

static char *vector_path(const char *name)
{
	static char path[4096];
	snprintf(path, sizeof(path), "%s/%s", VECTOR_DIR, name);
	return path;
}

static size_t read_vector(const char *name, unsigned char *buf, size_t cap)
{
	FILE *f = fopen(vector_path(name), "rb");
	size_t n = f ? fread(buf, 1, cap, f) : 0;
	if (!f || n == 0 || n == cap) {
		fprintf(stderr, "cannot read the test vector %s (run from a checkout; see tests/vectors/)\n", vector_path(name));
		exit(2);
	}
	fclose(f);
	return n;
}

/* The decoded schedule is exactly the vector's contents (tests/vectors/wsr.json). */
static void check_vector(const struct wsr_vector *v)
{
	struct wsr_schedule s;
	const char *why;
	int rc = wsr_load(vector_path(v->file), &s, &why);
	char what[256];

	snprintf(what, sizeof(what), "%s: %s (%s)", v->file, v->rejected ? v->rejected : "parses", why ? why : "-");
	if (v->rejected) {
		CHECK(rc == -EINVAL && why && strstr(why, v->rejected), what);
		if (!rc)
			wsr_free(&s);
		return;
	}
	CHECK(rc == 0, what);
	if (rc)
		return;
	CHECK(s.schedule_id == v->schedule_id && s.nfiles == v->nfiles && s.nsegments == v->nsegments &&
	      s.nranges == v->nranges, what);
	for (uint32_t i = 0; i < s.nfiles && i < v->nfiles; i++) {
		const struct wsr_file *a = &s.files[i], *b = &v->files[i];
		snprintf(what, sizeof(what), "%s: file %u", v->file, i);
		CHECK(a->dev == b->dev && a->ino == b->ino && a->size == b->size && a->mtime_ns == b->mtime_ns &&
		      a->kind == b->kind && a->flags == b->flags && a->meta_pos == b->meta_pos &&
		      a->step_segment == b->step_segment && a->path_len == b->path_len && !memcmp(a->path, b->path, b->path_len), what);
	}
	for (uint32_t i = 0; i < s.nsegments && i < v->nsegments; i++) {
		const struct wsr_segment *a = &s.segments[i], *b = &v->segments[i];
		snprintf(what, sizeof(what), "%s: segment %u", v->file, i);
		CHECK(a->idx == b->idx && a->first_range == b->first_range && a->nranges == b->nranges &&
		      a->bytes == b->bytes && a->cpu_ns == b->cpu_ns, what);
	}
	for (uint32_t i = 0; i < s.nranges && i < v->nranges; i++) {
		const struct wsr_range *a = &s.ranges[i], *b = &v->ranges[i];
		snprintf(what, sizeof(what), "%s: range %u", v->file, i);
		CHECK(a->offset == b->offset && a->length == b->length && a->sector == b->sector &&
		      a->file_no == b->file_no && a->orig_pos == b->orig_pos && a->segment == b->segment, what);
	}
	wsr_free(&s);
}

/* Recompute both checksums, as a writer that meant the change would. */
static void refix(unsigned char *d, size_t len)
{
	SET(d, HEADER, PAYLOAD_CRC32, wsr_crc32(0, d + WSR_HEADER_SIZE, len - WSR_HEADER_SIZE));
	SET(d, HEADER, HEADER_CRC32, 0);
	SET(d, HEADER, HEADER_CRC32, wsr_crc32(0, d, WSR_HEADER_SIZE));
}

static int parse_copy(const unsigned char *b, size_t len, struct wsr_schedule *s, const char **why)
{
	void *copy = malloc(len ? len : 1);
	memcpy(copy, b, len);
	int rc = wsr_parse(copy, len, s, why);
	if (rc)
		free(copy);
	return rc;
}

int main(void)
{
	static unsigned char b[1 << 16], d[1 << 16];
	struct wsr_schedule s;
	const char *why;

	CHECK(wsr_crc32(0, "123456789", 9) == 0xCBF43926u, "crc32 check value matches zlib");
	for (size_t i = 0; i < sizeof(wsr_vectors) / sizeof(*wsr_vectors); i++)
		check_vector(&wsr_vectors[i]);

	/* Damage to basic.wsr: two files (the second "/usr/bin/demo", last in the string table), two
	 * segments, three ranges (range 1 reads file 0, 8 KiB long, at 4096..8192). */
	size_t len = read_vector("basic.wsr", b, sizeof(b));
	const size_t files = WSR_HEADER_SIZE, ranges = files + 2 * WSR_FILE_SIZE + 2 * WSR_SEGMENT_SIZE;
	CHECK(parse_copy(b, len, &s, &why) == 0, "basic.wsr parses from memory");
	if (!why)
		wsr_free(&s);

	/* Flip every byte in turn: each damaged image must be refused. */
	int refused = 0;
	for (size_t i = 0; i < len; i++) {
		memcpy(d, b, len);
		d[i] ^= 0x40;
		if (parse_copy(d, len, &s, &why) != 0)
			refused++;
		else
			wsr_free(&s);
	}
	CHECK(refused == (int)len, "every single-byte corruption is refused");
	CHECK(parse_copy(b, len - 1, &s, &why) != 0 && why, "truncated image is refused with a reason");
	CHECK(parse_copy(b, 10, &s, &why) != 0, "short image is refused");

	/* A range naming a missing file, with checksums recomputed, is still refused. */
	memcpy(d, b, len);
	SET(d + ranges, RANGE, FILE_NO, 7);
	refix(d, len);
	CHECK(parse_copy(d, len, &s, &why) == -EINVAL && why && strstr(why, "file"), "bad file_no refused");

	/* Paths that walk elsewhere, checksums recomputed: refused. */
	static const char *bad_paths[] = {"usr/bin/demox", "/usr/bin/dem/", "/usr//bin/dem", "/usr/./bin/de",
					  "/usr/../bin/d"};  /* in place of the 13-byte "/usr/bin/demo" */
	for (size_t i = 0; i < sizeof(bad_paths) / sizeof(*bad_paths); i++) {
		memcpy(d, b, len);
		CHECK(!memcmp(d + len - 13, "/usr/bin/demo", 13), "basic.wsr ends with /usr/bin/demo");
		memcpy(d + len - 13, bad_paths[i], 13);
		refix(d, len);
		CHECK(parse_copy(d, len, &s, &why) == -EINVAL && why && strstr(why, "canonical"), bad_paths[i]);
	}
	/* A range past its file's last page is refused; one in the last, partial page is not. */
	memcpy(d, b, len);
	SET(d + ranges + WSR_RANGE_SIZE, RANGE, OFFSET, 8192);
	refix(d, len);
	CHECK(parse_copy(d, len, &s, &why) == -EINVAL && why && strstr(why, "end of its file"), "range past EOF refused");
	memcpy(d, b, len);
	SET(d + files, FILE, SIZE, 8000);  /* its last page still ends at 8192 */
	refix(d, len);
	CHECK(parse_copy(d, len, &s, &why) == 0, "range in the file's last, partial page parses");
	if (why == NULL)
		wsr_free(&s);

	printf("test-replay-format: %d passed, %d failed\n", passed, failed);
	return failed ? 1 : 0;
}
