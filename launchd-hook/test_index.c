/* C tests of the hook index: the shared test vectors (tests/vectors/hook_index.json, whose
 * expectations build/gen/hook_index_vectors.h carries) decode to exactly what the Python writer
 * was given or are refused; then checksum, lookup and argv signatures on hand-built images. */
#include "index.h"
#include "hook_index_vectors.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifndef VECTOR_DIR
#error "build with -DVECTOR_DIR='\"/path/to/tests/vectors\"' (launchd-hook/build.mk does)"
#endif

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

static int same_str(const struct ws_index *idx, uint32_t off, uint32_t len, const char *want, uint32_t want_len)
{
	return len == want_len && !memcmp(ws_index_str(idx, off), want, len) && ws_index_str(idx, off)[len] == '\0';
}

/* The index read from the vector file is exactly the vector's contents. */
static void check_vector(const struct idx_vector *v)
{
	char path[4096];
	static unsigned char buf[1 << 16]; /* static: aligned for the structs, as the mmap is */
	struct ws_index idx;
	size_t len;
	FILE *f;
	int rc;

	snprintf(path, sizeof(path), "%s/%s", VECTOR_DIR, v->file);
	f = fopen(path, "rb");
	if (!f) {
		fprintf(stderr, "cannot read the test vector %s (run from a checkout; see tests/vectors/)\n", path);
		exit(2);
	}
	len = fread(buf, 1, sizeof(buf), f);
	fclose(f);
	rc = ws_index_parse(&idx, buf, len);
	if (rc != (v->rejected ? v->rejected : 0))
		fprintf(stderr, "%s: ws_index_parse returned %d, expected %d\n", v->file, rc, v->rejected);
	CHECK(rc == v->rejected);
	if (v->rejected || rc)
		return;
	CHECK(idx.hdr->max_hold_ms == v->max_hold_ms && idx.hdr->n_entries == v->n_entries);
	for (uint32_t i = 0; i < idx.hdr->n_entries && i < v->n_entries; i++) {
		const struct ws_index_entry *e = &idx.entries[i];
		const struct idx_vector_entry *w = &v->entries[i];
		int ok = e->dev == w->dev && e->ino == w->ino && e->size == w->size && e->mtime_ns == w->mtime_ns &&
			 e->schedule_id == w->schedule_id && e->hold_ms == w->hold_ms && e->flags == w->flags &&
			 e->owner_uid == w->owner_uid &&
			 same_str(&idx, e->exe_off, e->exe_len, w->exe, w->exe_len) &&
			 same_str(&idx, e->argv_off, e->argv_len, w->argv, w->argv_len) &&
			 same_str(&idx, e->sched_off, e->sched_len, w->sched, w->sched_len) &&
			 same_str(&idx, e->name_off, e->name_len, w->name, w->name_len) &&
			 same_str(&idx, e->files_off, e->files_len, w->files, w->files_len);

		if (!ok)
			fprintf(stderr, "%s: entry %u differs from tests/vectors/hook_index.json\n", v->file, i);
		CHECK(ok);
		/* the lookup finds the first entry of this inode */
		CHECK(ws_index_find(&idx, w->dev, w->ino) == &idx.entries[i > 0 && idx.entries[i - 1].dev == w->dev &&
									 idx.entries[i - 1].ino == w->ino ? i - 1 : i]);
	}
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

	for (size_t i = 0; i < sizeof(idx_vectors) / sizeof(*idx_vectors); i++)
		check_vector(&idx_vectors[i]);

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
	CHECK(ws_index_match(&idx, 8, 20, 100, 5, argv_app, 4, 0, &mismatch) == &idx.entries[1]);
	CHECK(ws_index_match(&idx, 8, 20, 100, 5, argv_other, 2, 0, &mismatch) == &idx.entries[2]);
	CHECK(ws_index_match(&idx, 8, 20, 100, 5, NULL, 0, 0, &mismatch) == &idx.entries[2]);
	/* identity changed (upgrade): no match, reported */
	CHECK(ws_index_match(&idx, 8, 10, 101, 5, NULL, 0, 0, &mismatch) == NULL && mismatch == 1);
	CHECK(ws_index_match(&idx, 8, 10, 100, 6, NULL, 0, 0, &mismatch) == NULL && mismatch == 1);
	CHECK(ws_index_match(&idx, 8, 10, 100, 5, NULL, 0, 0, &mismatch) == &idx.entries[0] && mismatch == 0);

	/* an entry learned from uid 1000's launch serves uid 1000 only; root's (owner 0) serves all */
	b.e[1].owner_uid = 1000;
	b.h->checksum = ws_fnv1a64(b.buf + sizeof(*b.h), len - sizeof(*b.h));
	CHECK(ws_index_parse(&idx, b.buf, len) == 0);
	CHECK(ws_index_match(&idx, 8, 20, 100, 5, argv_app, 4, 1000, &mismatch) == &idx.entries[1]);
	CHECK(ws_index_match(&idx, 8, 20, 100, 5, argv_app, 4, 0, &mismatch) == &idx.entries[2]);
	CHECK(ws_index_match(&idx, 8, 20, 100, 5, argv_app, 4, 1001, &mismatch) == &idx.entries[2]);
	b.e[2].owner_uid = 1000;
	b.h->checksum = ws_fnv1a64(b.buf + sizeof(*b.h), len - sizeof(*b.h));
	CHECK(ws_index_parse(&idx, b.buf, len) == 0);
	CHECK(ws_index_match(&idx, 8, 20, 100, 5, argv_app, 4, 0, &mismatch) == NULL && mismatch == 0);
	CHECK(ws_index_match(&idx, 8, 20, 100, 5, NULL, 0, 1001, &mismatch) == NULL && mismatch == 0);
	CHECK(ws_index_match(&idx, 8, 20, 100, 5, NULL, 0, 1000, &mismatch) == &idx.entries[2]);

	/* needles are an ordered subsequence */
	CHECK(ws_argv_matches("-jar\0x.jar", 10, argv_two, 3) == 1);
	CHECK(ws_argv_matches("x.jar\0-jar", 10, argv_two, 3) == 0);
	CHECK(ws_argv_matches("-jar\0y.jar", 10, argv_two, 3) == 0);

	/* corruption is refused */
	b.buf[len - 2] ^= 1;
	CHECK(ws_index_parse(&idx, b.buf, len) == -EBADMSG);
	b.buf[len - 2] ^= 1;
	CHECK(ws_index_parse(&idx, b.buf, len - 1) == -EBADMSG);
	b.h->version = WS_INDEX_VERSION + 1;
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
