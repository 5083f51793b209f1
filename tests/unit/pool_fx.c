/* pool_fx.c - what the pool suites (test_pool.c, test_pool_owed.c) share:
 * tar shards of known samples served by tests/fault_server.py, and the
 * stack under test (index, store, shards, pool). */
#include "pool_fx.h"

#include "cache/echo/pool.h"
#include "cache/store/shards.h"
#include "cache/store/store.h"
#include "common/util.h"
#include "fetch/format/index.h"
#include "fetch/net/http.h"
#include "fixtures.h"

#include <criterion/criterion.h>
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* ---- fixtures: temp dir, tar shards, fault server (from test_shards.c) */

char tdir[64], root[96], cdir[96];
uint8_t *shard_data[NSHARDS];
size_t shard_len[NSHARDS];
struct sample samples[NSHARDS][PER_SHARD];
uint32_t class_of[NSAMPLES];
uint32_t per_class[NCLS];
struct fx_server srv;
struct http *h;

static void make_shards(void)
{
	unsigned seed = 4242;
	memset(per_class, 0, sizeof(per_class));
	for (int s = 0; s < NSHARDS; s++) {
		struct tarw t = {0};
		char name[64];
		for (int k = 0; k < PER_SHARD; k++) {
			int i = s * PER_SHARD + k;
			size_t n = 2000 + (size_t)(rand_r(&seed) % 20000);
			uint8_t *img = fx_random_bytes(&seed, n);
			snprintf(name, sizeof(name), "s%d_%04d.jpg", s, k);
			samples[s][k].off = tarw_add(&t, name, img, n);
			samples[s][k].size = n;
			class_of[i] = k == PER_SHARD - 1 ? POOL_NO_CLASS
							 : (uint32_t)(i % NCLS);
			if (class_of[i] != POOL_NO_CLASS)
				per_class[class_of[i]]++;
			free(img);
		}
		fx_shard_finish(&t, root, s, &shard_data[s], &shard_len[s]);
	}
}

void pool_fx_setup(void)
{
	fx_tree_make("pool", tdir, root, cdir);
	make_shards();
	h = fx_http_open(8, 8);
}

void pool_fx_teardown(void)
{
	fx_shards_teardown(&srv, &h, shard_data, NSHARDS, tdir);
}

/* ---- the stack under test ---- */

static struct index *make_index(void)
{
	struct index *ix = fx_shards_index(srv.port, shard_len, NSHARDS);
	for (int s = 0; s < NSHARDS; s++)
		for (int k = 0; k < PER_SHARD; k++) {
			char key[32], label[16];
			int i = s * PER_SHARD + k;
			snprintf(key, sizeof(key), "s%d_%04d", s, k);
			snprintf(label, sizeof(label), "%u", i % NCLS);
			cr_assert_eq(index_add_sample(ix, (uint32_t)s,
						      samples[s][k].off,
						      samples[s][k].size, label,
						      key, "jpg"),
				     0);
		}
	return ix;
}

/* Server with faults, index, store, shards, pool. */
void stack_open(struct stack *k, const char *const *faults,
		const struct pool_opts *po, const struct shards_opts *so)
{
	char err[256];

	fx_server_start(&srv, root, tdir, faults);
	k->ix = make_index();
	cr_assert_eq(store_open(cdir, 1ULL << 30, &k->st, err, sizeof(err)), 0);
	cr_assert_not_null(k->st, "store_open: %s", err);
	cr_assert_eq(shards_open(k->ix, h, k->st, so, &k->sh), 0);
	cr_assert_not_null(k->sh);
	int r = pool_open(k->ix, k->sh, class_of, NCLS, po, &k->p);
	cr_assert_eq(r, 0, "pool_open: %s", strerror(-r));
	cr_assert_not_null(k->p);
}

void stack_close(struct stack *k)
{
	pool_free(k->p);
	shards_free(k->sh);
	store_close(k->st);
	index_free(k->ix);
}

/* The served bytes are exactly the source sample's, of the right class. */
void check_bytes(const struct pool_sample *s, uint32_t cls)
{
	int sh = (int)(s->sample / PER_SHARD), k = (int)(s->sample % PER_SHARD);

	cr_assert_lt(s->sample, NSAMPLES);
	cr_assert_eq(s->cls, cls, "sample %u: class %u, asked %u", s->sample,
		     s->cls, cls);
	cr_assert_eq(class_of[s->sample], cls, "sample %u is not of class %u",
		     s->sample, cls);
	cr_assert_eq(s->len, samples[sh][k].size);
	cr_assert(memcmp(s->data, shard_data[sh] + samples[sh][k].off,
			 s->len) == 0,
		  "sample %u: bytes differ", s->sample);
}

/* Reserve a sample of cls (a lookup) and check its bytes. */
struct pool_sample *reserve_ok(struct pool *p, uint32_t cls)
{
	struct pool_sample *s = NULL;
	int r = pool_take(p, cls, &s);
	cr_assert_eq(r, 0, "pool_take(%u): %s", cls, strerror(-r));
	check_bytes(s, cls);
	return s;
}

/* Reserve and serve (a lookup then an open). */
struct pool_sample *take_ok(struct pool *p, uint32_t cls)
{
	struct pool_sample *s = reserve_ok(p, cls);
	pool_commit(p, s);
	return s;
}
