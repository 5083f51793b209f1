/* partition.h - which node (rank) of a world of W serves which shard: a pure
 * function of the shards' sample counts, a seed, W and a pass number.
 *
 * Every shard goes to exactly one rank. The assignment shuffles the shards
 * with a generator seeded by (seed, pass), orders them by sample count
 * (largest first; the shuffle breaks ties), then gives each to the rank
 * with the fewest samples so far (ties: the lowest rank). Parts are
 * therefore balanced to within one shard's count. Every node computes the
 * same answer from the same index, seed and world, with no talk between
 * nodes. pass matters only to callers that repartition every pass; they
 * pass 0 for the partition at mount time.
 *
 * So that every rank takes the same number of steps, every rank presents
 * the smallest part's sample count (partition_common); an exact mount trims
 * the rest of its part (partition_trim: the last samples of the part in
 * index order, like DistributedSampler's drop_last). */
#ifndef ECHOFS_PARTITION_H
#define ECHOFS_PARTITION_H

#include "common/attrs.h"
#include <stddef.h>
#include <stdint.h>

/* Most ranks a world may have. */
#define PARTITION_WORLD_MAX 65536

/* Fill rank_of[0 .. nshards-1] with the rank (< world) of each shard, from
 * counts[i] (samples in shard i). Returns 0, or -EINVAL with a one-line
 * reason in err when world is 0 or above PARTITION_WORLD_MAX, or when
 * world > nshards ("world=W but only S shards"): a rank would get nothing. */
MUST_CHECK
int partition_assign(const uint64_t *counts, size_t nshards, uint64_t seed,
		     uint32_t world, uint64_t pass, uint32_t *rank_of,
		     char *err, size_t errlen);

/* Samples in rank's part under rank_of. */
uint64_t partition_load(const uint64_t *counts, size_t nshards,
			const uint32_t *rank_of, uint32_t rank);

/* The sample count every rank presents: the smallest part's. */
uint64_t partition_common(const uint64_t *counts, size_t nshards,
			  const uint32_t *rank_of, uint32_t world);

/* Mark in keep[i] (0/1) whether sample i (of shard shard_of[i]) is in the
 * rank's view: in its part and among the first `common` such samples in
 * index order. Returns how many of the part's samples were trimmed. */
uint64_t partition_trim(const uint32_t *shard_of, size_t nsamples,
			const uint32_t *rank_of, uint32_t rank,
			uint64_t common, uint8_t *keep);

#endif
