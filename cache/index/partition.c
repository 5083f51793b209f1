/* partition.c - shards to ranks: seeded shuffle, then largest first onto
 * the lightest rank; the common per-rank count and the trim to it. */
#include "cache/index/partition.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>

#include "common/util.h"

/* splitmix64: small, fast, and the same on every node and build. */
static uint64_t mix_next(uint64_t *s)
{
	uint64_t z = (*s += 0x9e3779b97f4a7c15ULL);
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
	return z ^ (z >> 31);
}

/* Uniform in [0, n) without modulo bias. */
static uint64_t mix_below(uint64_t *s, uint64_t n)
{
	uint64_t limit = UINT64_MAX - UINT64_MAX % n, v;
	do
		v = mix_next(s);
	while (v >= limit);
	return v % n;
}

struct item {
	uint64_t count;
	size_t pos; /* place in the shuffle: breaks ties between counts */
	uint32_t shard;
};

static int item_cmp(const void *a, const void *b)
{
	const struct item *x = a, *y = b;
	if (x->count != y->count)
		return x->count > y->count ? -1 : 1;
	return x->pos < y->pos ? -1 : x->pos > y->pos;
}

/* The lightest rank, lowest number first. A linear scan: W is small next
 * to the shard count, and this runs once per mount (or pass). */
static uint32_t lightest(const uint64_t *load, uint32_t world)
{
	uint32_t best = 0;
	for (uint32_t r = 1; r < world; r++)
		if (load[r] < load[best])
			best = r;
	return best;
}

int partition_assign(const uint64_t *counts, size_t nshards, uint64_t seed,
		     uint32_t world, uint64_t pass, uint32_t *rank_of,
		     char *err, size_t errlen)
{
	uint64_t state = seed ^ (pass * 0xd1b54a32d192ed03ULL);
	struct item *it;
	uint64_t *load;

	if (world == 0 || world > PARTITION_WORLD_MAX) {
		snprintf(err, errlen, "bad world %u (1 to %u)", world,
			 PARTITION_WORLD_MAX);
		return -EINVAL;
	}
	if (world > nshards) {
		snprintf(err, errlen, "world=%u but only %zu shard%s", world,
			 nshards, nshards == 1 ? "" : "s");
		return -EINVAL;
	}
	it = xmalloc(nshards * sizeof(*it));
	load = xcalloc(world, sizeof(*load));
	for (size_t i = 0; i < nshards; i++)
		it[i].shard = (uint32_t)i;
	for (size_t i = nshards; i > 1; i--) {
		size_t j = (size_t)mix_below(&state, i);
		uint32_t t = it[i - 1].shard;
		it[i - 1].shard = it[j].shard;
		it[j].shard = t;
	}
	for (size_t i = 0; i < nshards; i++) {
		it[i].pos = i;
		it[i].count = counts[it[i].shard];
	}
	qsort(it, nshards, sizeof(*it), item_cmp);
	for (size_t i = 0; i < nshards; i++) {
		uint32_t r = lightest(load, world);
		rank_of[it[i].shard] = r;
		load[r] += it[i].count;
	}
	free(load);
	free(it);
	return 0;
}

uint64_t partition_load(const uint64_t *counts, size_t nshards,
			const uint32_t *rank_of, uint32_t rank)
{
	uint64_t n = 0;
	for (size_t i = 0; i < nshards; i++)
		if (rank_of[i] == rank)
			n += counts[i];
	return n;
}

uint64_t partition_common(const uint64_t *counts, size_t nshards,
			  const uint32_t *rank_of, uint32_t world)
{
	uint64_t *load = xcalloc(world ? world : 1, sizeof(*load));
	uint64_t least;

	for (size_t i = 0; i < nshards; i++)
		if (rank_of[i] < world)
			load[rank_of[i]] += counts[i];
	least = load[0];
	for (uint32_t r = 1; r < world; r++)
		if (load[r] < least)
			least = load[r];
	free(load);
	return least;
}

uint64_t partition_trim(const uint32_t *shard_of, size_t nsamples,
			const uint32_t *rank_of, uint32_t rank,
			uint64_t common, uint8_t *keep)
{
	uint64_t seen = 0, trimmed = 0;

	for (size_t i = 0; i < nsamples; i++) {
		keep[i] = 0;
		if (rank_of[shard_of[i]] != rank)
			continue;
		if (seen++ < common)
			keep[i] = 1;
		else
			trimmed++;
	}
	return trimmed;
}
