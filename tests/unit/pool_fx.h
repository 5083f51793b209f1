/* pool_fx.h - helpers the pool suites share (pool_fx.c): NSHARDS tar shards
 * of PER_SHARD random samples in NCLS classes, served by
 * tests/fault_server.py, and the stack under test. */
#ifndef ECHOFS_TESTS_POOL_FX_H
#define ECHOFS_TESTS_POOL_FX_H

#include "fixtures.h"

#include <stddef.h>
#include <stdint.h>

#define NSHARDS 4
#define PER_SHARD 16
#define NCLS 3
#define NSAMPLES (NSHARDS * PER_SHARD)
/* The last sample of each shard has no class: the pool must leave it out. */
#define NCLASSED (NSHARDS * (PER_SHARD - 1))

struct http;
struct index;
struct pool;
struct pool_opts;
struct pool_sample;
struct shards;
struct shards_opts;
struct store;

/* Where a sample lies in its shard's tar. */
struct sample {
	uint64_t off, size;
};

struct stack {
	struct index *ix;
	struct store *st;
	struct shards *sh;
	struct pool *p;
};

/* Made by pool_fx_setup: the scratch tree (fx_tree_make), the shards' bytes
 * and samples, each sample's class (POOL_NO_CLASS for the last of a shard)
 * and each class's count, the server (started by stack_open) and an http. */
extern char tdir[64], root[96], cdir[96];
extern uint8_t *shard_data[NSHARDS];
extern size_t shard_len[NSHARDS];
extern struct sample samples[NSHARDS][PER_SHARD];
extern uint32_t class_of[NSAMPLES];
extern uint32_t per_class[NCLS];
extern struct fx_server srv;
extern struct http *h;

/* Suite init and fini. */
void pool_fx_setup(void);
void pool_fx_teardown(void);

/* Server with faults (NULL: none), index, store, shards, pool (po and so
 * passed to pool_open and shards_open). stack_close frees all but the
 * server. */
void stack_open(struct stack *k, const char *const *faults,
		const struct pool_opts *po, const struct shards_opts *so);
void stack_close(struct stack *k);
/* The served bytes are exactly the source sample's, of class cls. */
void check_bytes(const struct pool_sample *s, uint32_t cls);
/* Reserve a sample of cls (a lookup) and check its bytes; take_ok also
 * serves it (an open). */
struct pool_sample *reserve_ok(struct pool *p, uint32_t cls);
struct pool_sample *take_ok(struct pool *p, uint32_t cls);

#endif
