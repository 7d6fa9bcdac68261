/* C tests of the .wsr parser: a valid image parses; every kind of damage is refused. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "wsr_format.h"

static int passed, failed;
#define CHECK(cond, what) do { if (cond) passed++; else { failed++; fprintf(stderr, "FAIL %s:%d %s\n", __FILE__, __LINE__, what); } } while (0)

static void put32(unsigned char *p, uint32_t v) { for (int i = 0; i < 4; i++) p[i] = v >> (8 * i); }
static void put64(unsigned char *p, uint64_t v) { put32(p, (uint32_t)v); put32(p + 4, (uint32_t)(v >> 32)); }

/* One file "/a", one segment, two ranges. */
static size_t build(unsigned char *b)
{
	const char *path = "/a";
	size_t strtab = strlen(path);
	size_t payload = WSR_FILE_SIZE + WSR_SEGMENT_SIZE + 2 * WSR_RANGE_SIZE + strtab;
	memset(b, 0, WSR_HEADER_SIZE + payload);
	memcpy(b, WSR_MAGIC, 8);
	put32(b + 8, WSR_VERSION);
	put32(b + 12, WSR_HEADER_SIZE);
	put64(b + 16, 42);
	put32(b + 24, 1);
	put32(b + 28, 1);
	put32(b + 32, 2);
	put32(b + 36, (uint32_t)strtab);
	put64(b + 40, payload);
	unsigned char *p = b + WSR_HEADER_SIZE;
	put64(p, 0x801); put64(p + 8, 12); put64(p + 16, 8192); put64(p + 24, 5);
	put32(p + 32, 0); put32(p + 36, (uint32_t)strtab); put32(p + 40, WSR_KIND_FILE);
	p += WSR_FILE_SIZE;
	put32(p, 1); put32(p + 4, 0); put32(p + 8, 2); put64(p + 16, 8192); put64(p + 24, 1000);
	p += WSR_SEGMENT_SIZE;
	for (int i = 0; i < 2; i++, p += WSR_RANGE_SIZE) {
		put64(p, i * 4096); put64(p + 8, 4096); put64(p + 16, 100 + i * 8);
		put32(p + 24, 0); put32(p + 28, 2 - i); put32(p + 32, 0);
	}
	memcpy(p, path, strtab);
	put32(b + 48, wsr_crc32(0, b + WSR_HEADER_SIZE, payload));
	put32(b + 56, wsr_crc32(0, b, WSR_HEADER_SIZE));
	return WSR_HEADER_SIZE + payload;
}

/* Recompute both checksums, as a writer that meant the change would. */
static void refix(unsigned char *d, size_t len)
{
	put32(d + 48, wsr_crc32(0, d + WSR_HEADER_SIZE, len - WSR_HEADER_SIZE));
	memset(d + 56, 0, 4);
	put32(d + 56, wsr_crc32(0, d, WSR_HEADER_SIZE));
}

static int parse_copy(const unsigned char *b, size_t len, struct wsr_schedule *s, const char **why)
{
	void *copy = malloc(len);
	memcpy(copy, b, len);
	int rc = wsr_parse(copy, len, s, why);
	if (rc)
		free(copy);
	return rc;
}

int main(void)
{
	unsigned char b[1024];
	struct wsr_schedule s;
	const char *why;
	size_t len = build(b);

	CHECK(wsr_crc32(0, "123456789", 9) == 0xCBF43926u, "crc32 check value matches zlib");
	CHECK(parse_copy(b, len, &s, &why) == 0, "valid image parses");
	CHECK(s.schedule_id == 42 && s.nfiles == 1 && s.nranges == 2 && s.nsegments == 1, "counts");
	CHECK(s.files[0].path_len == 2 && !memcmp(s.files[0].path, "/a", 2), "path");
	CHECK(s.ranges[1].offset == 4096 && s.ranges[1].orig_pos == 1 && s.segments[0].cpu_ns == 1000, "fields");
	wsr_free(&s);

	/* Flip every byte in turn: each damaged image must be refused. */
	int refused = 0;
	for (size_t i = 0; i < len; i++) {
		unsigned char d[1024];
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
	unsigned char d[1024];
	memcpy(d, b, len);
	put32(d + WSR_HEADER_SIZE + WSR_FILE_SIZE + WSR_SEGMENT_SIZE + 24, 7);
	put32(d + 48, wsr_crc32(0, d + WSR_HEADER_SIZE, len - WSR_HEADER_SIZE));
	memset(d + 56, 0, 4);
	put32(d + 56, wsr_crc32(0, d, WSR_HEADER_SIZE));
	CHECK(parse_copy(d, len, &s, &why) == -22 && why && strstr(why, "file"), "bad file_no refused");

	/* Paths that walk elsewhere and ranges past the file's end, checksums recomputed: refused. */
	static const char *bad_paths[] = {"ab", "/.", "//", "a/"};  /* the 2-byte path "/a" replaced */
	for (size_t i = 0; i < sizeof(bad_paths) / sizeof(*bad_paths); i++) {
		memcpy(d, b, len);
		memcpy(d + len - 2, bad_paths[i], 2);
		refix(d, len);
		CHECK(parse_copy(d, len, &s, &why) == -22 && why && strstr(why, "canonical"), bad_paths[i]);
	}
	memcpy(d, b, len);
	put64(d + WSR_HEADER_SIZE + WSR_FILE_SIZE + WSR_SEGMENT_SIZE + WSR_RANGE_SIZE, 8192);  /* past 8 KiB */
	refix(d, len);
	CHECK(parse_copy(d, len, &s, &why) == -22 && why && strstr(why, "end of its file"), "range past EOF refused");
	memcpy(d, b, len);
	put64(d + WSR_HEADER_SIZE + 16, 8000);  /* size 8000: its last page still ends at 8192 */
	refix(d, len);
	CHECK(parse_copy(d, len, &s, &why) == 0, "range in the file's last, partial page parses");
	if (why == NULL)
		wsr_free(&s);

	printf("test-replay-format: %d passed, %d failed\n", passed, failed);
	return failed ? 1 : 0;
}
