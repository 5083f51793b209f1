/* test_sums.c - streaming member and shard checksums (fetch/format/sums.c):
 * whatever the chunking, each sample's sum is the XXH3-64 of its image
 * member's bytes and the shard's that of the whole stream. */
#include <criterion/criterion.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#include "fetch/format/index.h"
#include "fetch/format/scan.h"
#include "fetch/format/sums.h"
#include "tests/unit/fixtures.h"

/* Members small (handed over by the tar parser) and large (streamed, and
 * spanning chunks), with a non-image member between samples. */
static void make_shard(struct tarw *t)
{
	static uint8_t big[70000], mid[3000];

	for (size_t i = 0; i < sizeof(big); i++)
		big[i] = (uint8_t)(i * 7 + 3);
	for (size_t i = 0; i < sizeof(mid); i++)
		mid[i] = (uint8_t)(i ^ 0x5a);
	tarw_add(t, "a.jpg", "tiny", 4);
	tarw_add(t, "a.cls", "1", 1);
	tarw_add(t, "b.jpg", big, sizeof(big));
	tarw_add(t, "b.cls", "2", 1);
	tarw_add(t, "notes.txt", mid, 100);
	tarw_add(t, "c.png", mid, sizeof(mid));
	tarw_add(t, "c.cls", "3", 1);
	tarw_add(t, "d.jpg", "", 0);
	tarw_add(t, "d.cls", "4", 1);
	tarw_end(t);
}

static void check_chunked(const struct tarw *t, size_t chunk)
{
	struct index *ix = index_new();
	uint32_t n = index_add_shard(ix, "http://h/s.tar", t->len, "");
	struct scan *sc = scan_new(ix, n);
	struct sums *su = sums_new();

	cr_assert_not_null(su);
	for (size_t at = 0; at < t->len; at += chunk) {
		size_t k = t->len - at < chunk ? t->len - at : chunk;
		cr_assert_eq(scan_feed(sc, t->buf + at, k), 0);
		cr_assert_eq(sums_feed(su, t->buf + at, k), 0);
	}
	cr_assert_eq(scan_finish(sc), 0);
	cr_assert_eq(sums_fill(su, ix, n), 0, "chunk %zu", chunk);
	cr_expect_eq(ix->nsamples, 4);
	cr_expect_eq(ix->shards[0].sum, XXH3_64bits(t->buf, t->len));
	for (size_t i = 0; i < ix->nsamples; i++) {
		const struct index_sample *s = &ix->samples[i];
		cr_expect_eq(s->sum,
			     XXH3_64bits(t->buf + s->offset, (size_t)s->size),
			     "chunk %zu sample %zu", chunk, i);
		cr_expect_eq(s->sum,
			     sums_of(t->buf + s->offset, (size_t)s->size));
	}
	scan_free(sc);
	sums_free(su);
	index_free(ix);
}

Test(sums, every_chunking)
{
	static const size_t chunks[] = {1,   7,	   511,	  512,
					513, 4096, 65536, 1 << 20};
	struct tarw t = {0};

	make_shard(&t);
	for (size_t i = 0; i < sizeof(chunks) / sizeof(chunks[0]); i++)
		check_chunked(&t, chunks[i]);
	tarw_free(&t);
}

/* A sample the stream never had (an index that does not describe these
 * bytes) is refused, not given some other member's sum. */
Test(sums, unknown_sample_is_refused)
{
	struct tarw t = {0};
	struct index *ix = index_new();
	struct sums *su = sums_new();
	uint32_t n;

	make_shard(&t);
	n = index_add_shard(ix, "u", t.len, "");
	cr_assert_eq(index_add_sample(ix, n, 100, 4, "1", "a", "jpg"), 0);
	cr_assert_eq(sums_feed(su, t.buf, t.len), 0);
	cr_expect_eq(sums_fill(su, ix, n), -EBADMSG);
	sums_free(su);
	index_free(ix);
	tarw_free(&t);
}

Test(sums, malformed_tar)
{
	static uint8_t junk[1024];
	struct sums *su = sums_new();

	memset(junk, 'x', sizeof(junk));
	cr_expect_eq(sums_feed(su, junk, sizeof(junk)), -EBADMSG);
	cr_expect_eq(sums_feed(su, junk, 1), -EBADMSG);
	sums_free(su);
}
