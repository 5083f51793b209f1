/* test_verify.c - cache/store/verify.c: what verify_open answers for each
 * kind of index, and lookups of samples by shard offset. */
#include <criterion/criterion.h>
#include <errno.h>
#include <stdint.h>
#include <string.h>
#include <xxhash.h>

#include "cache/store/verify.h"
#include "fetch/format/index.h"

/* Two shards; samples added out of offset order in shard 0. */
static struct index *make_index(bool sums)
{
	struct index *ix = index_new();

	index_add_shard(ix, "http://h/0.tar", 10240, "");
	index_add_shard(ix, "http://h/1.tar", 10240, "");
	cr_assert_eq(index_add_sample(ix, 0, 2048, 100, "a", "k2", "jpg"), 0);
	cr_assert_eq(index_add_sample(ix, 0, 512, 100, "a", "k1", "jpg"), 0);
	cr_assert_eq(index_add_sample(ix, 1, 512, 300, "b", "k3", "jpg"), 0);
	ix->has_sums = sums;
	return ix;
}

Test(verify, format_1_index_is_zero_with_no_verifier)
{
	struct index *ix = make_index(false);
	struct verify *v = (struct verify *)ix; /* must be reset */

	cr_assert_eq(verify_open(ix, &v), 0);
	cr_assert_null(v);
	verify_free(v);
	index_free(ix);
}

Test(verify, format_2_index_finds_samples_by_offset)
{
	struct index *ix = make_index(true);
	struct verify *v = NULL;
	uint64_t end;

	cr_assert_eq(verify_open(ix, &v), 0);
	cr_assert_not_null(v);
	cr_expect_eq(verify_find(v, 0, 600, &end), 1);
	cr_expect_eq(end, 612);
	cr_expect_eq(verify_find(v, 0, 2048, &end), 0);
	cr_expect_eq(verify_find(v, 1, 811, &end), 2);
	cr_expect_eq(verify_find(v, 0, 1000, &end), VERIFY_NONE);
	cr_expect_eq(end, 2048, "the next member begins at 2048");
	verify_free(v);
	index_free(ix);
}

Test(verify, too_many_samples_is_eoverflow)
{
	struct index *ix = make_index(true);
	struct verify *v = (struct verify *)ix;
	size_t n = ix->nsamples;

	ix->nsamples = UINT32_MAX; /* checked before any sample is read */
	cr_assert_eq(verify_open(ix, &v), -EOVERFLOW);
	cr_assert_null(v);
	ix->nsamples = n;
	index_free(ix);
}

Test(verify, stream_matches_the_shard_sum)
{
	struct index *ix = make_index(true);
	struct verify *v;
	struct verify_stream *vs = verify_stream_new();
	static const char data[] = "shard bytes";

	cr_assert_not_null(vs);
	cr_assert_eq(verify_open(ix, &v), 0);
	ix->shards[1].sum = XXH3_64bits(data, sizeof(data));
	verify_stream_feed(vs, data, 5);
	verify_stream_feed(vs, data + 5, sizeof(data) - 5);
	cr_expect(verify_stream_ok(v, vs, 1));
	cr_expect_not(verify_stream_ok(v, vs, 0));
	verify_stream_free(vs);
	verify_stream_free(NULL);
	verify_free(v);
	index_free(ix);
}
