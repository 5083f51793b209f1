/* test_partition.c - shards to ranks: every shard in one part, balanced,
 * equal counts after the trim, stable, new per pass, world 1 = identity. */
#include <criterion/criterion.h>
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "cache/index/partition.h"
#include "common/util.h"

/* Deterministic pseudo-random shard sizes (not the partition's generator). */
static void make_counts(uint64_t *c, size_t n, uint64_t salt)
{
	uint64_t x = 88172645463325252ULL ^ salt;
	for (size_t i = 0; i < n; i++) {
		x ^= x << 13;
		x ^= x >> 7;
		x ^= x << 17;
		c[i] = 1 + x % 200;
	}
}

static void assign_ok(const uint64_t *c, size_t n, uint64_t seed,
		      uint32_t world, uint64_t pass, uint32_t *rank_of)
{
	char err[128] = "";
	int r = partition_assign(c, n, seed, world, pass, rank_of, err,
				 sizeof(err));
	cr_assert_eq(r, 0, "n=%zu world=%u: %s", n, world, err);
}

/* Sample i's shard for a dataset laid out shard after shard. */
static uint32_t *shard_of_samples(const uint64_t *c, size_t n, size_t *ns)
{
	size_t total = 0, k = 0;
	for (size_t i = 0; i < n; i++)
		total += c[i];
	uint32_t *s = xmalloc((total ? total : 1) * sizeof(*s));
	for (size_t i = 0; i < n; i++)
		for (uint64_t j = 0; j < c[i]; j++)
			s[k++] = (uint32_t)i;
	*ns = total;
	return s;
}

Test(partition, every_shard_in_one_part_and_balanced)
{
	static const uint32_t worlds[] = {1, 2, 3, 4, 7, 16, 64};
	uint64_t c[300];
	uint32_t rank_of[300];

	for (size_t w = 0; w < ARRAY_SIZE(worlds); w++) {
		for (uint64_t seed = 0; seed < 5; seed++) {
			uint64_t maxc = 0, lo = UINT64_MAX, hi = 0, sum = 0;
			make_counts(c, 300, seed * 31 + w);
			memset(rank_of, 0xff, sizeof(rank_of));
			assign_ok(c, 300, seed, worlds[w], 0, rank_of);
			for (size_t i = 0; i < 300; i++) {
				cr_assert_lt(rank_of[i], worlds[w], "shard %zu", i);
				maxc = c[i] > maxc ? c[i] : maxc;
			}
			for (uint32_t r = 0; r < worlds[w]; r++) {
				uint64_t l = partition_load(c, 300, rank_of, r);
				lo = l < lo ? l : lo;
				hi = l > hi ? l : hi;
				sum += l;
			}
			/* Each shard counted once: loads add up to the total. */
			uint64_t total = 0;
			for (size_t i = 0; i < 300; i++)
				total += c[i];
			cr_assert_eq(sum, total);
			/* Greedy onto the lightest: within one shard's count. */
			cr_assert_leq(hi - lo, maxc, "world %u", worlds[w]);
			cr_assert_eq(partition_common(c, 300, rank_of, worlds[w]), lo);
		}
	}
}

Test(partition, equal_counts_after_trim)
{
	uint64_t c[50];
	uint32_t rank_of[50];
	size_t ns;

	make_counts(c, 50, 7);
	uint32_t *shard_of = shard_of_samples(c, 50, &ns);
	uint8_t *keep = xmalloc(ns), *any = xcalloc(ns, 1);
	assign_ok(c, 50, 3, 6, 0, rank_of);
	uint64_t common = partition_common(c, 50, rank_of, 6), trimmed_all = 0;
	for (uint32_t r = 0; r < 6; r++) {
		uint64_t kept = 0, load = partition_load(c, 50, rank_of, r);
		uint64_t t = partition_trim(shard_of, ns, rank_of, r, common, keep);
		for (size_t i = 0; i < ns; i++) {
			kept += keep[i];
			if (keep[i]) {
				cr_assert_eq(rank_of[shard_of[i]], r);
				cr_assert_eq(any[i], 0, "sample %zu twice", i);
				any[i] = 1;
			}
		}
		cr_assert_eq(kept, common, "rank %u", r);
		cr_assert_eq(t, load - common, "rank %u", r);
		trimmed_all += t;
	}
	cr_assert_eq(trimmed_all + 6 * common, ns);
	free(shard_of);
	free(keep);
	free(any);
}

/* Distinct counts make the order (largest first) independent of the
 * shuffle, so this case is worked by hand: 5(s0)->r0, 4(s2)->r1,
 * 3(s4)->r1 (5 vs 4), 2(s3)->r0 (5 vs 7), 1(s1)->r0 (7 vs 7: lowest). */
Test(partition, hand_worked_case)
{
	const uint64_t c[] = {5, 1, 4, 2, 3};
	const uint32_t want[] = {0, 0, 1, 0, 1};
	uint32_t rank_of[5];

	for (uint64_t seed = 0; seed < 20; seed++) {
		assign_ok(c, 5, seed, 2, 0, rank_of);
		cr_assert_arr_eq(rank_of, want, sizeof(want), "seed %llu",
				 (unsigned long long)seed);
	}
	cr_assert_eq(partition_common(c, 5, rank_of, 2), 7);
	cr_assert_eq(partition_load(c, 5, rank_of, 0), 8);
}

/* Equal counts: the seeded shuffle decides. The vector was recorded once;
 * if it changes, nodes running different echofs versions would disagree
 * on the partition, so a change must be deliberate (and said so). */
Test(partition, stable_across_runs)
{
	uint64_t c[8];
	uint32_t a[8], b[8];
	const uint32_t recorded[8] = {2, 1, 0, 0, 1, 1, 2, 0};

	for (size_t i = 0; i < 8; i++)
		c[i] = 10;
	assign_ok(c, 8, 42, 3, 0, a);
	assign_ok(c, 8, 42, 3, 0, b);
	cr_assert_arr_eq(a, b, sizeof(a));
	cr_assert_arr_eq(a, recorded, sizeof(a));
}

Test(partition, new_partition_per_pass)
{
	uint64_t c[64];
	uint32_t p0[64], p1[64], again[64];
	int differ = 0;

	for (size_t i = 0; i < 64; i++)
		c[i] = 100;
	assign_ok(c, 64, 9, 4, 0, p0);
	assign_ok(c, 64, 9, 4, 1, p1);
	assign_ok(c, 64, 9, 4, 1, again);
	cr_assert_arr_eq(p1, again, sizeof(p1));
	for (size_t i = 0; i < 64; i++)
		differ += p0[i] != p1[i];
	cr_assert_gt(differ, 8, "pass 1 moved only %d of 64 shards", differ);
	/* Still balanced: 16 shards of 100 each. */
	for (uint32_t r = 0; r < 4; r++)
		cr_assert_eq(partition_load(c, 64, p1, r), 1600);
}

Test(partition, world_one_is_identity)
{
	uint64_t c[20];
	uint32_t rank_of[20];
	size_t ns;

	make_counts(c, 20, 1);
	uint32_t *shard_of = shard_of_samples(c, 20, &ns);
	uint8_t *keep = xmalloc(ns);
	assign_ok(c, 20, 5, 1, 3, rank_of);
	for (size_t i = 0; i < 20; i++)
		cr_assert_eq(rank_of[i], 0);
	uint64_t common = partition_common(c, 20, rank_of, 1);
	cr_assert_eq(common, ns);
	cr_assert_eq(partition_trim(shard_of, ns, rank_of, 0, common, keep), 0);
	for (size_t i = 0; i < ns; i++)
		cr_assert_eq(keep[i], 1);
	free(shard_of);
	free(keep);
}

Test(partition, world_larger_than_shards_is_refused)
{
	const uint64_t c[] = {3, 3, 3};
	uint32_t rank_of[3];
	char err[128] = "";

	cr_assert_eq(partition_assign(c, 3, 0, 4, 0, rank_of, err, sizeof(err)),
		     -EINVAL);
	cr_assert_str_eq(err, "world=4 but only 3 shards");
	cr_assert_eq(partition_assign(c, 3, 0, 0, 0, rank_of, err, sizeof(err)),
		     -EINVAL);
	cr_assert_eq(partition_assign(c, 3, 0, 3, 0, rank_of, err, sizeof(err)),
		     0);
}
