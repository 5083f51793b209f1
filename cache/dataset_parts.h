/* dataset_parts.h - the parts behind the dataset face (cache/dataset.h),
 * for cache/ modules, tests and tools that build on them: a dataset over
 * an index and shard readers that exist already, and the parts of an open
 * one. fs/ never includes this (tests/check_layers.sh). */
#ifndef ECHOFS_DATASET_PARTS_H
#define ECHOFS_DATASET_PARTS_H

#include "cache/dataset.h"

struct index;
struct shards;
struct store;
struct pool;

/* A dataset over parts that exist already, all borrowed and outliving it:
 * ix is required; sh may be NULL (then reads fail with -ENXIO and nothing
 * is cached). Returns NULL with errno set. */
struct dataset *dataset_wrap(const struct index *ix, struct shards *sh);
/* Serve the echo takes of a wrapped dataset from pool (borrowed; it
 * outlives the dataset or dataset_echo_end). */
void dataset_wrap_pool(struct dataset *ds, struct pool *pool);

/* The parts (borrowed). store may be NULL (no disk cache). */
const struct index *dataset_index(const struct dataset *ds);
struct shards *dataset_shards(struct dataset *ds);
struct store *dataset_store(struct dataset *ds);

#endif
