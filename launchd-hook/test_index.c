/* C tests of the hook index: layout checks, checksum, lookup, argv signatures. */
#include "index.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int passed, failed;
#define CHECK(cond)                                                        \
	do {                                                               \
		if (cond) {                                                \
			passed++;                                          \
		} else {                                                   \
			failed++;                                          \
			fprintf(stderr, "%s:%d: FAILED: %s\n", __FILE__, __LINE__, #cond); \
		}                                                          \
	} while (0)

struct builder {
	unsigned char buf[4096];
	struct ws_index_header *h;
	struct ws_index_entry *e;
	char strtab[1024];
	uint32_t slen;
};

static uint32_t add_str(struct builder *b, const char *s, uint32_t len)
{
	uint32_t off = b->slen;

	memcpy(b->strtab + off, s, len);
	b->strtab[off + len] = '\0';
	b->slen += len + 1;
	return off;
}

/* entries: (dev, ino, needles) with size 100, mtime 5 */
static size_t build(struct builder *b, int n, const uint64_t *dev, const uint64_t *ino, const char **needles,
		    const uint32_t *needle_len)
{
	size_t len;

	memset(b, 0, sizeof(*b));
	b->h = (struct ws_index_header *)b->buf;
	memcpy(b->h->magic, WS_INDEX_MAGIC, 8);
	b->h->version = WS_INDEX_VERSION;
	b->h->n_entries = n;
	b->e = (struct ws_index_entry *)(b->h + 1);
	add_str(b, "", 0);
	for (int i = 0; i < n; i++) {
		b->e[i] = (struct ws_index_entry){.dev = dev[i], .ino = ino[i], .size = 100, .mtime_ns = 5,
						  .schedule_id = (uint64_t)i + 1};
		b->e[i].exe_off = add_str(b, "/bin/x", 6);
		b->e[i].exe_len = 6;
		b->e[i].argv_off = add_str(b, needles[i], needle_len[i]);
		b->e[i].argv_len = needle_len[i];
	}
	b->h->strtab_len = b->slen;
	memcpy(b->e + n, b->strtab, b->slen);
	len = sizeof(*b->h) + n * sizeof(*b->e) + b->slen;
	b->h->checksum = ws_fnv1a64(b->buf + sizeof(*b->h), len - sizeof(*b->h));
	return len;
}

int main(void)
{
	static struct builder b;
	struct ws_index idx;
	const uint64_t dev[] = {8, 8, 8, 9};
	const uint64_t ino[] = {10, 20, 20, 1ull << 63};
	const char *needles[] = {"", "app.py", "", ""};
	const uint32_t nlen[] = {0, 6, 0, 0};
	char *argv_app[] = {"python3", "-X", "app.py", "--flag", NULL};
	char *argv_other[] = {"python3", "other.py", NULL};
	char *argv_two[] = {"java", "-jar", "x.jar", NULL};
	int mismatch;
	size_t len;

	CHECK(sizeof(struct ws_index_header) == 64);
	CHECK(sizeof(struct ws_index_entry) == 88);
	/* known FNV-1a 64 values */
	CHECK(ws_fnv1a64("", 0) == 0xcbf29ce484222325ull);
	CHECK(ws_fnv1a64("a", 1) == 0xaf63dc4c8601ec8cull);

	len = build(&b, 4, dev, ino, needles, nlen);
	CHECK(ws_index_parse(&idx, b.buf, len) == 0);
	CHECK(ws_index_find(&idx, 8, 10) == &idx.entries[0]);
	CHECK(ws_index_find(&idx, 8, 20) == &idx.entries[1]); /* first of the two */
	CHECK(ws_index_find(&idx, 9, 1ull << 63) == &idx.entries[3]);
	CHECK(ws_index_find(&idx, 8, 11) == NULL);
	CHECK(ws_index_find(&idx, 7, 10) == NULL);
	CHECK(ws_index_find(&idx, 10, 0) == NULL);

	/* the argv signature picks the interpreter entry; otherwise the exe-only fallback */
	CHECK(ws_index_match(&idx, 8, 20, 100, 5, argv_app, 4, &mismatch) == &idx.entries[1]);
	CHECK(ws_index_match(&idx, 8, 20, 100, 5, argv_other, 2, &mismatch) == &idx.entries[2]);
	CHECK(ws_index_match(&idx, 8, 20, 100, 5, NULL, 0, &mismatch) == &idx.entries[2]);
	/* identity changed (upgrade): no match, reported */
	CHECK(ws_index_match(&idx, 8, 10, 101, 5, NULL, 0, &mismatch) == NULL && mismatch == 1);
	CHECK(ws_index_match(&idx, 8, 10, 100, 6, NULL, 0, &mismatch) == NULL && mismatch == 1);
	CHECK(ws_index_match(&idx, 8, 10, 100, 5, NULL, 0, &mismatch) == &idx.entries[0] && mismatch == 0);

	/* needles are an ordered subsequence */
	CHECK(ws_argv_matches("-jar\0x.jar", 10, argv_two, 3) == 1);
	CHECK(ws_argv_matches("x.jar\0-jar", 10, argv_two, 3) == 0);
	CHECK(ws_argv_matches("-jar\0y.jar", 10, argv_two, 3) == 0);

	/* corruption is refused */
	b.buf[len - 2] ^= 1;
	CHECK(ws_index_parse(&idx, b.buf, len) == -EBADMSG);
	b.buf[len - 2] ^= 1;
	CHECK(ws_index_parse(&idx, b.buf, len - 1) == -EBADMSG);
	b.h->version = 2;
	CHECK(ws_index_parse(&idx, b.buf, len) == -EPROTO);
	b.h->version = WS_INDEX_VERSION;
	b.buf[0] = 'X';
	CHECK(ws_index_parse(&idx, b.buf, len) == -EBADMSG);

	/* an unterminated string offset is refused even with a valid checksum */
	len = build(&b, 1, dev, ino, needles, nlen);
	b.e[0].exe_len = b.slen; /* runs past the string table */
	b.h->checksum = ws_fnv1a64(b.buf + sizeof(*b.h), len - sizeof(*b.h));
	CHECK(ws_index_parse(&idx, b.buf, len) == -EBADMSG);

	/* unsorted entries are refused (binary search needs the order) */
	{
		const uint64_t d2[] = {9, 8};
		const uint64_t i2[] = {1, 1};

		len = build(&b, 2, d2, i2, needles, nlen);
		CHECK(ws_index_parse(&idx, b.buf, len) == -EBADMSG);
	}
	/* a missing file and a symlink are refused by ws_index_open */
	CHECK(ws_index_open(&idx, "/nonexistent/hook.idx", 0) == -ENOENT);

	printf("test-hook-index: %d passed, %d failed\n", passed, failed);
	return failed ? 1 : 0;
}
