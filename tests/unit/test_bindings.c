/* test_bindings.c - echo-mount path bindings (fs/bindings.c) on a real echo
 * pool: tar shards served by tests/fault_server.py, http, shard manager
 * (no disk cache), and a namespace made by hand. */
#include "fs/bindings.h"

#include "cache/dataset_parts.h"
#include "cache/echo/pool.h"
#include "cache/store/shards.h"
#include "common/util.h"
#include "fetch/format/index.h"
#include "fetch/net/http.h"
#include "fixtures.h"
#include "fs/namespace.h"

#include <criterion/criterion.h>
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define NSHARDS 2
#define PER_SHARD 8
#define NSAMPLES (NSHARDS * PER_SHARD)
#define NCLS 2
#define FIRST_INO 1000

static char tdir[64], root[96];
static uint8_t *shard_data[NSHARDS];
static size_t shard_len[NSHARDS];
static uint64_t off_of[NSAMPLES], size_of[NSAMPLES];
static uint32_t class_of[NSAMPLES];
static struct fx_server srv;
static struct http *h;
static struct index *ix;
static struct shards *sh;
static struct pool *pool;
static struct dataset *ds; /* over ix, sh and pool */
static struct ns_file files[NSAMPLES];
static struct namespace ns = {.files = files, .nfiles = NSAMPLES};

static void make_shards(void)
{
	for (int s = 0; s < NSHARDS; s++) {
		struct tarw t = {0};
		char name[32], path[160];
		for (int k = 0; k < PER_SHARD; k++) {
			int i = s * PER_SHARD + k;
			uint8_t img[3000];
			memset(img, 'a' + i, sizeof(img));
			snprintf(name, sizeof(name), "s%d_%02d.jpg", s, k);
			size_of[i] = 1000 + 100 * (uint64_t)i;
			off_of[i] = tarw_add(&t, name, img, size_of[i]);
			class_of[i] = (uint32_t)(i % NCLS);
			files[i] = (struct ns_file){"f", (uint32_t)i, class_of[i]};
		}
		tarw_end(&t);
		shard_data[s] = t.buf;
		shard_len[s] = t.len;
		snprintf(path, sizeof(path), "%s/s%d.tar", root, s);
		fx_write_file(path, t.buf, t.len);
	}
}

static void add_samples(void)
{
	for (int i = 0; i < NSAMPLES; i++) {
		char key[16], label[8];
		snprintf(key, sizeof(key), "k%02d", i);
		snprintf(label, sizeof(label), "%u", class_of[i]);
		cr_assert_eq(index_add_sample(ix, (uint32_t)(i / PER_SHARD),
					      off_of[i], size_of[i], label,
					      key, "jpg"),
			     0);
	}
}

static void setup(void)
{
	char err[256];
	struct pool_opts po = {.echo = 4, .seed = 7};

	snprintf(tdir, sizeof(tdir), "/tmp/echofs-bindings-XXXXXX");
	cr_assert_not_null(mkdtemp(tdir));
	snprintf(root, sizeof(root), "%s/www", tdir);
	cr_assert_eq(mkdir(root, 0700), 0);
	make_shards();
	fx_server_start(&srv, root, tdir, NULL);
	ix = index_new();
	for (int s = 0; s < NSHARDS; s++) {
		char url[96];
		snprintf(url, sizeof(url), "http://127.0.0.1:%d/s%d.tar",
			 srv.port, s);
		index_add_shard(ix, url, shard_len[s], "");
	}
	add_samples();
	cr_assert_eq(http_global_init(), 0);
	cr_assert_eq(http_open(&(struct http_opts){.connections = 4}, &h, err,
			       sizeof(err)),
		     0, "http_open: %s", err);
	cr_assert_eq(shards_open(ix, h, NULL, NULL, &sh), 0);
	cr_assert_eq(pool_open(ix, sh, class_of, NCLS, &po, &pool), 0);
	ds = dataset_wrap(ix, sh);
	cr_assert_not_null(ds);
	dataset_wrap_pool(ds, pool);
}

static void teardown(void)
{
	dataset_close(ds);
	pool_free(pool);
	shards_free(sh);
	http_free(h);
	index_free(ix);
	fx_server_stop(&srv);
	for (int s = 0; s < NSHARDS; s++)
		free(shard_data[s]);
	fx_rm_tree(tdir);
}

TestSuite(bindings, .init = setup, .fini = teardown, .timeout = 60);

/* The bytes of source sample i. */
static const uint8_t *source(uint32_t i)
{
	return shard_data[i / PER_SHARD] + off_of[i];
}

/* A lookup's answer (bindings_lookup_async's done). */
struct looked {
	pthread_mutex_t m;
	pthread_cond_t c;
	int done, err;
	struct binding_attr a;
};

static void looked_cb(void *ud, int err, const struct binding_attr *attr)
{
	struct looked *l = ud;

	pthread_mutex_lock(&l->m);
	l->err = err;
	if (attr)
		l->a = *attr;
	l->done = 1;
	pthread_cond_signal(&l->c);
	pthread_mutex_unlock(&l->m);
}

/* LOOKUP of file as fs/ops.c sends it (bindings_lookup_async, reader 1),
 * waited for when parked in the pool. */
static int lookup(struct bindings *b, uint32_t file, struct binding_attr *out)
{
	struct looked l = {.m = PTHREAD_MUTEX_INITIALIZER,
			   .c = PTHREAD_COND_INITIALIZER};
	int r = bindings_lookup_async(b, file, 1, &l, looked_cb, &l, out);

	if (r != -EINPROGRESS)
		return r;
	pthread_mutex_lock(&l.m);
	while (!l.done)
		pthread_cond_wait(&l.c, &l.m);
	pthread_mutex_unlock(&l.m);
	if (l.err == 0)
		*out = l.a;
	return l.err;
}

static struct bindings *open_bindings(double expire_s, bindings_make_fn make)
{
	struct bindings *b = (struct bindings *)&b; /* must be set */
	int r = bindings_start(ds, &ns, FIRST_INO, expire_s, make, NULL, &b);

	cr_assert_eq(r, 0, "bindings_start: %s", strerror(-r));
	cr_assert_not_null(b);
	return b;
}

/* Open ino, read it whole, check the bytes are sample src's, release. */
static void read_whole(struct bindings *b, uint64_t ino, uint64_t size,
		       uint32_t src)
{
	struct binding *hd;
	const void *data;
	cr_assert_eq(bindings_open(b, ino, &hd), 0);
	cr_assert_eq(bindings_read(b, hd, 0, size + 100, &data),
		     (ssize_t)size);
	cr_assert(memcmp(data, source(src), size) == 0, "bytes of %u", src);
	bindings_read_done(b, hd);
	cr_assert_eq(bindings_read(b, hd, size, 10, &data), 0, "past the end");
	bindings_read_done(b, hd);
	bindings_release(b, hd);
}

Test(bindings, a_path_looked_at_twice_gets_a_new_inode_after_its_open)
{
	struct bindings *b = open_bindings(60, NULL);
	struct binding_attr a1, a2, a3;
	struct bindings_stats st;
	uint32_t src;

	cr_assert_eq(lookup(b, 3, &a1), 0);
	cr_assert_geq(a1.ino, FIRST_INO);
	cr_assert(bindings_owns(b, a1.ino));
	cr_assert_not(bindings_owns(b, FIRST_INO - 1));
	cr_assert_eq(lookup(b, 3, &a2), 0); /* ls, stat: same file */
	cr_assert_eq(a2.ino, a1.ino);
	cr_assert_eq(bindings_getattr(b, a1.ino, &a2), 0);
	cr_assert_eq(a2.size, a1.size);
	cr_assert_eq(bindings_source(b, a1.ino, &src), 0);
	cr_assert_eq(class_of[src], class_of[3], "a sample of the path's class");
	cr_assert_eq(a1.size, size_of[src]);
	read_whole(b, a1.ino, a1.size, src);
	/* opened and released after two lookups and a getattr (a reply about
	 * it could still be applied late): the next lookup binds anew under a
	 * new inode */
	cr_assert_eq(lookup(b, 3, &a3), 0);
	cr_assert_gt(a3.ino, a1.ino);
	bindings_get_stats(b, &st);
	cr_assert_eq(st.live, 2, "the kernel still knows the first inode");
	cr_assert_eq(st.open, 0);
	bindings_forget(b, a1.ino, 2);
	bindings_get_stats(b, &st);
	cr_assert_eq(st.live, 1);
	cr_assert_eq(bindings_getattr(b, a1.ino, &a2), -ENOENT);
	cr_assert_eq(bindings_source(b, a1.ino, &src), -ENOENT);
	bindings_forget(b, a3.ino, 1);
	bindings_free(b);
}

Test(bindings, bytes_stay_pinned_while_a_read_outlives_its_release)
{
	struct bindings *b = open_bindings(60, NULL);
	struct binding_attr a;
	struct binding *hd;
	const void *data;
	uint32_t src;

	cr_assert_eq(lookup(b, 0, &a), 0);
	cr_assert_eq(bindings_source(b, a.ino, &src), 0);
	cr_assert_eq(bindings_open(b, a.ino, &hd), 0);
	cr_assert_eq(bindings_read(b, hd, 10, 50, &data), 50);
	bindings_release(b, hd); /* RELEASE before the READ's reply */
	bindings_forget(b, a.ino, 1);
	cr_assert(memcmp(data, source(src) + 10, 50) == 0);
	bindings_read_done(b, hd); /* the last reference: freed now */
	struct bindings_stats st;
	bindings_get_stats(b, &st);
	cr_assert_eq(st.live, 0);
	bindings_free(b);
}

/* The inval hook: the files whose entries the bindings asked to drop. */
static uint32_t inval_files[64];
static int inval_n;
static pthread_mutex_t inval_lock = PTHREAD_MUTEX_INITIALIZER;

static void inval_hook(void *ud, uint32_t file)
{
	(void)ud;
	pthread_mutex_lock(&inval_lock);
	if (inval_n < 64)
		inval_files[inval_n] = file;
	inval_n++;
	pthread_mutex_unlock(&inval_lock);
}

static int invals(void)
{
	pthread_mutex_lock(&inval_lock);
	int n = inval_n;
	pthread_mutex_unlock(&inval_lock);
	return n;
}

static struct bindings *open_bindings_inval(double expire_s)
{
	struct bindings *b = open_bindings(expire_s, NULL);
	pthread_mutex_lock(&inval_lock);
	inval_n = 0;
	pthread_mutex_unlock(&inval_lock);
	bindings_set_inval(b, inval_hook, NULL);
	return b;
}

Test(bindings, an_unopened_binding_is_given_back_after_its_last_lookup)
{
	struct bindings *b = open_bindings_inval(0.3);
	struct binding_attr a, a2;
	struct bindings_stats st;
	struct binding *hd;
	double until = now_mono() + 10;

	cr_assert_eq(lookup(b, 5, &a), 0);
	/* Looked up again (stat, then an open's walk): its time starts
	 * again, so an open soon after its last lookup always finds it. */
	usleep(200 * 1000);
	cr_assert_eq(lookup(b, 5, &a2), 0);
	cr_assert_eq(a2.ino, a.ino);
	usleep(200 * 1000);
	bindings_get_stats(b, &st);
	cr_assert_eq(st.expired, 0, "expired 0.3 s after its first lookup");
	do {
		usleep(50 * 1000);
		bindings_get_stats(b, &st);
	} while (st.expired == 0 && now_mono() < until);
	cr_assert_eq(st.expired, 1, "the reaper never gave it back");
	cr_assert_eq(invals(), 1, "its entry is dropped");
	cr_assert_eq(inval_files[0], 5);
	/* An open more than expire_s after the last lookup: the kernel looks
	 * the path up again (once). */
	cr_assert_eq(bindings_open(b, a.ino, &hd), -ESTALE);
	cr_assert_eq(lookup(b, 5, &a2), 0);
	cr_assert_neq(a2.ino, a.ino, "an expired binding is no longer the path's");
	bindings_forget(b, a.ino, 2);
	bindings_forget(b, a2.ino, 1);
	bindings_get_stats(b, &st);
	cr_assert_eq(st.live, 0);
	cr_assert_eq(bindings_open(b, a.ino, &hd), -ENOENT);
	bindings_free(b);
}

/* A make hook: the sample's bytes reversed, plus the rand it was given. */
static int make_reversed(void *ud, const uint8_t *data, size_t len,
			 uint64_t rand, uint8_t **out, size_t *outlen)
{
	uint8_t *o = malloc(len + sizeof(rand));
	(void)ud;
	if (!o)
		return -ENOMEM;
	for (size_t i = 0; i < len; i++)
		o[i] = data[len - 1 - i];
	memcpy(o + len, &rand, sizeof(rand));
	*out = o;
	*outlen = len + sizeof(rand);
	return 0;
}

Test(bindings, the_make_hook_gives_each_binding_its_own_bytes)
{
	struct bindings *b = open_bindings(60, make_reversed);
	uint64_t rands[2];

	for (int n = 0; n < 2; n++) {
		struct binding_attr a;
		struct binding *hd;
		const void *data;
		uint32_t src;
		cr_assert_eq(lookup(b, 1, &a), 0);
		cr_assert_eq(bindings_source(b, a.ino, &src), 0);
		cr_assert_eq(a.size, size_of[src] + sizeof(uint64_t));
		cr_assert_eq(bindings_open(b, a.ino, &hd), 0);
		cr_assert_eq(bindings_read(b, hd, 0, a.size, &data),
			     (ssize_t)a.size);
		const uint8_t *d = data;
		cr_assert_eq(d[0], source(src)[size_of[src] - 1]);
		memcpy(&rands[n], d + size_of[src], sizeof(uint64_t));
		bindings_read_done(b, hd);
		bindings_release(b, hd);
		bindings_forget(b, a.ino, 1);
	}
	cr_assert_neq(rands[0], rands[1], "each binding draws its own rand");
	bindings_free(b);
}

Test(bindings, free_gives_back_what_is_still_bound)
{
	struct bindings *b = open_bindings(60, NULL);
	struct binding_attr a;
	struct binding *hd;
	struct pool_stats ps;

	for (uint32_t f = 0; f < NSAMPLES; f++)
		cr_assert_eq(lookup(b, f, &a), 0);
	cr_assert_eq(bindings_open(b, a.ino, &hd), 0); /* one left open */
	bindings_free(b); /* no forget, no release: as at unmount */
	pool_get_stats(pool, &ps);
	cr_assert_eq(ps.fresh_served + ps.echoes_served, 1,
		     "only the opened binding counts as served");
}

/* The page-cache store at open (ops.c, store_echo) happens once per
 * binding, for bindings no larger than the cap, and the bytes it would
 * copy are the binding's. */
Test(bindings, take_store_says_yes_once_per_binding_within_the_cap)
{
	struct bindings *b = open_bindings(60, NULL);
	struct binding_attr a, a2;
	struct binding *h1, *h2;
	const void *data;
	uint64_t size = 0;
	uint32_t src;

	cr_assert_eq(lookup(b, 5, &a), 0);
	cr_assert_eq(bindings_source(b, a.ino, &src), 0);
	cr_assert_eq(bindings_open(b, a.ino, &h1), 0);
	cr_assert_eq(bindings_open(b, a.ino, &h2), 0); /* a second reader */
	cr_assert_eq(bindings_take_store(b, h1, a.size - 1, &size), 0,
		     "larger than the cap: never stored");
	cr_assert_eq(size, a.size);
	cr_assert_eq(bindings_take_store(b, h2, a.size, &size), 0,
		     "asked once already: the answer stays no");
	bindings_release(b, h1);
	bindings_release(b, h2);

	cr_assert_eq(lookup(b, 5, &a2), 0); /* a new binding */
	cr_assert_gt(a2.ino, a.ino, "a new sample, a new inode");
	cr_assert_gt(a2.gen, a.gen);
	cr_assert_eq(bindings_source(b, a2.ino, &src), 0);
	cr_assert_eq(bindings_open(b, a2.ino, &h1), 0);
	cr_assert_eq(bindings_open(b, a2.ino, &h2), 0);
	cr_assert_eq(bindings_take_store(b, h1, a2.size, &size), 1);
	cr_assert_eq(size, a2.size);
	cr_assert_eq(bindings_take_store(b, h2, a2.size, &size), 0,
		     "one store per binding, whichever handle asks");
	cr_assert_eq(bindings_read(b, h1, 0, (size_t)size, &data),
		     (ssize_t)size);
	cr_assert(memcmp(data, source(src), (size_t)size) == 0);
	bindings_read_done(b, h1);
	bindings_release(b, h1);
	bindings_release(b, h2);
	bindings_forget(b, a.ino, 1);
	bindings_forget(b, a2.ino, 1);
	bindings_free(b);
}

Test(bindings, a_path_opened_again_gets_a_new_inode_and_drops_its_entry)
{
	struct bindings *b = open_bindings_inval(60);
	struct binding_attr a[8];
	struct bindings_stats st;

	/* As a trainer reads a file in each pass: one lookup, one open. */
	for (int n = 0; n < 8; n++) {
		uint32_t src;
		cr_assert_eq(lookup(b, 2, &a[n]), 0);
		cr_assert_eq(bindings_source(b, a[n].ino, &src), 0);
		cr_assert_eq(class_of[src], class_of[2], "a sample of the class");
		cr_assert_eq(a[n].size, size_of[src], "the new sample's size");
		if (n > 0) {
			cr_assert_gt(a[n].ino, a[n - 1].ino, "a new inode");
			cr_assert_gt(a[n].gen, a[n - 1].gen, "a new mtime");
		}
		read_whole(b, a[n].ino, a[n].size, src);
		cr_assert_eq(invals(), n + 1, "the spent path's entry dropped");
		cr_assert_eq(inval_files[n], 2);
	}
	bindings_get_stats(b, &st);
	cr_assert_eq(st.live, 8, "each inode known until the kernel forgets it");
	cr_assert_eq(st.rebound, 0);
	for (int n = 0; n < 8; n++)
		bindings_forget(b, a[n].ino, 1);
	bindings_get_stats(b, &st);
	cr_assert_eq(st.live, 0);
	bindings_free(b);
}

/* Readers meeting on one path (issue 45): one looked the path up, another
 * opened, read and closed it before the first opened. The first still
 * opens what it was told about (same sample, same size), however many
 * opens and releases came between, and no inode the kernel knows ever
 * changes size. */
Test(bindings, an_open_after_another_readers_release_serves_its_lookup)
{
	struct bindings *b = open_bindings_inval(60);
	struct binding_attr a, a2, g;
	struct binding *h1, *h2;
	const void *data;
	uint32_t src, src2;

	cr_assert_eq(lookup(b, 7, &a), 0);  /* reader 1 */
	cr_assert_eq(lookup(b, 7, &a2), 0); /* reader 2 */
	cr_assert_eq(a2.ino, a.ino, "one binding while unopened");
	cr_assert_eq(bindings_source(b, a.ino, &src), 0);
	read_whole(b, a.ino, a.size, src); /* reader 2 opens, reads, closes */
	/* Reader 3 looks up: a new inode with the next sample. */
	cr_assert_eq(lookup(b, 7, &a2), 0);
	cr_assert_gt(a2.ino, a.ino);
	cr_assert_eq(bindings_source(b, a2.ino, &src2), 0);
	read_whole(b, a2.ino, a2.size, src2);
	/* Reader 1 opens the inode it looked up: its sample, its size. */
	cr_assert_eq(bindings_open(b, a.ino, &h1), 0);
	cr_assert_eq(bindings_open(b, a.ino, &h2), 0);
	cr_assert_eq(bindings_getattr(b, a.ino, &g), 0);
	cr_assert_eq(g.size, a.size, "the size the kernel was told");
	cr_assert_eq(g.gen, a.gen);
	cr_assert_eq(bindings_read(b, h1, 0, a.size + 10, &data), (ssize_t)a.size);
	cr_assert(memcmp(data, source(src), a.size) == 0);
	bindings_read_done(b, h1);
	cr_assert_eq(bindings_source(b, a.ino, &src2), 0);
	cr_assert_eq(src2, src, "user.echofs.source agrees");
	bindings_release(b, h1);
	bindings_release(b, h2);
	bindings_forget(b, a.ino, 2);
	bindings_forget(b, a2.ino, 1);
	struct bindings_stats st;
	bindings_get_stats(b, &st);
	cr_assert_eq(st.live, 0);
	bindings_free(b);
}

Test(bindings, a_path_closed_while_a_reply_is_sent_keeps_the_bytes)
{
	struct bindings *b = open_bindings(60, NULL);
	struct binding_attr a, a2;
	struct binding *hd, *h2;
	const void *data;
	uint32_t src;

	cr_assert_eq(lookup(b, 7, &a), 0);
	cr_assert_eq(bindings_source(b, a.ino, &src), 0);
	cr_assert_eq(bindings_open(b, a.ino, &hd), 0);
	cr_assert_eq(bindings_read(b, hd, 0, 64, &data), 64);
	bindings_release(b, hd); /* the reader closed; the reply is not done */
	cr_assert_eq(lookup(b, 7, &a2), 0);
	cr_assert_gt(a2.ino, a.ino, "the path moves on at once");
	cr_assert_eq(bindings_open(b, a.ino, &h2), 0, "the closed one opens");
	cr_assert(memcmp(data, source(src), 64) == 0, "still pinned");
	bindings_read_done(b, hd);
	bindings_release(b, h2);
	bindings_forget(b, a.ino, 1);
	bindings_forget(b, a2.ino, 1);
	bindings_free(b);
}

/* ---- binding at open ---- */

#define FIXED 512

/* A render hook whose renderings all have FIXED bytes: byte k of the
 * rendering of a sample for rand is the sample's first byte plus k plus
 * rand's low byte. */
static ssize_t fixed_size(void *ud, const uint8_t *data, size_t len)
{
	(void)ud, (void)data, (void)len;
	return FIXED;
}

static ssize_t fixed_range(void *ud, const uint8_t *data, size_t len,
			   uint64_t rand, uint64_t off, uint8_t *dst, size_t n)
{
	(void)ud, (void)len;
	for (size_t k = 0; k < n; k++)
		dst[k] = (uint8_t)(data[0] + off + k + rand);
	return (ssize_t)n;
}

/* What the store hook and the open completions saw. */
struct opened {
	pthread_mutex_t lock;
	pthread_cond_t cond;
	int stores, calls, r;
	uint8_t stored[FIXED]; /* the bytes of the last store */
	struct binding *h;
	struct bindings *b;
	void (*during_store)(struct opened *o, uint64_t ino);
	int store_err; /* what the store returns */
};

static struct opened done_of = {.lock = PTHREAD_MUTEX_INITIALIZER,
				.cond = PTHREAD_COND_INITIALIZER};

static int store_hook(void *ud, uint64_t ino, struct binding *h,
		      uint64_t size)
{
	struct opened *o = ud;
	const void *data;

	cr_assert_eq(size, FIXED);
	cr_assert_eq(bindings_read(o->b, h, 0, FIXED, &data), FIXED);
	pthread_mutex_lock(&o->lock);
	memcpy(o->stored, data, FIXED);
	o->stores++;
	cr_assert_eq(o->calls, 0, "an open answered before the store");
	pthread_mutex_unlock(&o->lock);
	bindings_read_done(o->b, h);
	if (o->during_store)
		o->during_store(o, ino);
	return o->store_err;
}

static void opened_cb(void *ud, int r, struct binding *h)
{
	struct opened *o = ud;
	pthread_mutex_lock(&o->lock);
	o->calls++;
	o->r = r;
	o->h = h;
	pthread_cond_broadcast(&o->cond);
	pthread_mutex_unlock(&o->lock);
}

/* Wait until o has seen `calls` completions (at most 10 s). */
static void wait_calls(struct opened *o, int calls)
{
	struct timespec until;
	clock_gettime(CLOCK_REALTIME, &until);
	until.tv_sec += 10;
	pthread_mutex_lock(&o->lock);
	while (o->calls < calls &&
	       pthread_cond_timedwait(&o->cond, &o->lock, &until) == 0)
		;
	cr_assert_eq(o->calls, calls, "open completions");
	pthread_mutex_unlock(&o->lock);
}

static struct bindings *open_fixed(struct opened *o)
{
	struct bindings *b = open_bindings(60, NULL);

	bindings_set_render(b, &(struct bindings_render){
		.size = fixed_size, .range = fixed_range});
	bindings_bind_at_open(b, FIXED, store_hook, o);
	o->b = b;
	o->stores = o->calls = o->r = 0;
	o->h = NULL;
	o->during_store = NULL;
	o->store_err = 0;
	return b;
}

/* An open that bound a sample was answered r after o had seen `stores`
 * stores: it keeps the pages its store wrote first. */
static void check_stored(struct opened *o, int r, int stores)
{
	cr_assert_eq(r, 0, "keep the pages");
	cr_assert_eq(o->stores, stores + 1, "stored before the answer");
}

/* Open ino (tag) and wait for the answer: returns its r, h in *h. */
static int open_wait(struct bindings *b, struct opened *o, uint64_t ino,
		     const void *tag, struct binding **h)
{
	int calls = o->calls;
	int r = bindings_open_async(b, ino, tag, opened_cb, o, h);

	if (r != -EINPROGRESS)
		return r;
	wait_calls(o, calls + 1);
	*h = o->h;
	return o->r;
}

Test(bindings, at_open_a_lookup_binds_nothing_and_each_open_a_new_sample)
{
	struct opened *o = &done_of;
	struct bindings *b = open_fixed(o);
	struct binding_attr a, a2;
	struct bindings_stats st;
	struct binding *h;
	const void *data;
	uint32_t src, last = UINT32_MAX;
	uint8_t prev[FIXED];

	cr_assert_eq(lookup(b, 4, &a), 0);
	cr_assert_eq(a.size, FIXED);
	cr_assert(a.stable, "the kernel may cache the entry");
	cr_assert_eq(bindings_source(b, a.ino, &src), -ENOENT,
		     "no sample bound at lookup");
	cr_assert_eq(lookup(b, 4, &a2), 0);
	cr_assert_eq(a2.ino, a.ino);
	for (int n = 0; n < 6; n++) {
		int stores = o->stores, r;
		o->calls = 0;
		r = open_wait(b, o, a.ino, &n, &h);
		check_stored(o, r, stores);
		cr_assert_eq(bindings_source(b, a.ino, &src), 0);
		cr_assert_eq(class_of[src], class_of[4]);
		cr_assert_eq(bindings_read(b, h, 0, FIXED + 9, &data), FIXED);
		cr_assert(memcmp(data, o->stored, FIXED) == 0,
			  "the store wrote the binding's bytes");
		cr_assert(n == 0 || memcmp(data, prev, FIXED) != 0 ||
			  src != last, "open %d: a new rendering", n);
		memcpy(prev, data, FIXED);
		last = src;
		bindings_read_done(b, h);
		cr_assert_eq(bindings_getattr(b, a.ino, &a2), 0);
		cr_assert_eq(a2.gen, 0, "the mtime stays");
		bindings_release(b, h);
	}
	bindings_get_stats(b, &st);
	cr_assert_eq(st.rebound, 5);
	cr_assert_eq(st.live, 1);
	cr_assert_eq(st.open, 0);
	bindings_forget(b, a.ino, 2);
	bindings_get_stats(b, &st);
	cr_assert_eq(st.live, 0);
	bindings_free(b);
}

/* During the store: an open of the same inode (waits, then shares), and
 * another that is interrupted (answered EINTR at once). */
static struct opened second = {.lock = PTHREAD_MUTEX_INITIALIZER,
			       .cond = PTHREAD_COND_INITIALIZER};
static int tag2, tag3;

static void open_twice_during_store(struct opened *o, uint64_t ino)
{
	struct binding *h = NULL;

	cr_assert_eq(bindings_open_async(o->b, ino, &tag2, opened_cb, &second,
					 &h),
		     -EINPROGRESS, "waits for the store");
	cr_assert_eq(bindings_open_async(o->b, ino, &tag3, opened_cb, &second,
					 &h),
		     -EINPROGRESS);
	cr_assert_eq(bindings_cancel(o->b, &tag3), 1);
	pthread_mutex_lock(&second.lock);
	cr_assert_eq(second.calls, 1);
	cr_assert_eq(second.r, -EINTR);
	pthread_mutex_unlock(&second.lock);
	o->during_store = NULL;
}

Test(bindings, at_open_opens_during_the_store_wait_and_share_the_sample)
{
	struct opened *o = &done_of;
	struct bindings *b = open_fixed(o);
	struct binding_attr a;
	struct bindings_stats st;
	struct binding *h, *h2;
	int tag1;

	second.calls = 0;
	cr_assert_eq(lookup(b, 2, &a), 0);
	o->during_store = open_twice_during_store;
	cr_assert_eq(open_wait(b, o, a.ino, &tag1, &h), 0);
	wait_calls(&second, 2);
	cr_assert_eq(second.r, 0);
	cr_assert_eq(second.h, h, "one binding shared");
	cr_assert_eq(o->stores, 1, "one store");
	/* Open now, stored: a third open shares at once. */
	cr_assert_eq(bindings_open_async(b, a.ino, &tag3, opened_cb, &second,
					 &h2),
		     0);
	cr_assert_eq(h2, h);
	bindings_get_stats(b, &st);
	cr_assert_eq(st.open, 3);
	bindings_release(b, h);
	bindings_release(b, h);
	bindings_release(b, h2);
	bindings_get_stats(b, &st);
	cr_assert_eq(st.open, 0);
	bindings_forget(b, a.ino, 1);
	bindings_free(b);
}

Test(bindings, at_open_a_failed_store_drops_the_pages_and_a_wrong_size_fails)
{
	struct opened *o = &done_of;
	struct bindings *b = open_fixed(o);
	struct binding_attr a;
	struct binding *h;
	int tag;

	cr_assert_eq(lookup(b, 1, &a), 0);
	o->store_err = -ENOMEM;
	cr_assert_eq(open_wait(b, o, a.ino, &tag, &h), 1, "drop the pages");
	cr_assert_eq(o->stores, 1, "tried");
	cr_assert_not_null(h);
	o->calls = 0;
	cr_assert_eq(bindings_open_async(b, a.ino, &tag, opened_cb, o, &h), 1,
		     "a second open of it drops them too");
	bindings_release(b, h);
	bindings_release(b, h);
	bindings_free(b);

	/* Renderings of another size than promised: EIO, nothing served. */
	struct pool_stats ps0, ps1;
	pool_get_stats(pool, &ps0);
	b = open_bindings(60, NULL);
	o->b = b;
	o->calls = 0;
	o->store_err = 0;
	bindings_set_render(b, &(struct bindings_render){
		.size = fixed_size, .range = fixed_range});
	bindings_bind_at_open(b, FIXED + 1, store_hook, o);
	cr_assert_eq(lookup(b, 1, &a), 0);
	cr_assert_eq(open_wait(b, o, a.ino, &tag, &h), -EIO);
	cr_assert_null(h);
	pool_get_stats(pool, &ps1);
	cr_assert_eq(ps1.fresh_served + ps1.echoes_served,
		     ps0.fresh_served + ps0.echoes_served);
	bindings_forget(b, a.ino, 1);
	bindings_free(b);
}

Test(bindings, at_open_a_reopen_waits_for_the_last_reply_of_the_old_sample)
{
	struct opened *o = &done_of;
	struct bindings *b = open_fixed(o);
	struct binding_attr a;
	struct binding *h, *h2;
	const void *data;
	uint32_t src1, src2;
	int tag, tag2_;

	cr_assert_eq(lookup(b, 6, &a), 0);
	cr_assert_eq(open_wait(b, o, a.ino, &tag, &h), 0);
	cr_assert_eq(bindings_source(b, a.ino, &src1), 0);
	cr_assert_eq(bindings_read(b, h, 0, 100, &data), 100);
	bindings_release(b, h); /* RELEASE before the READ's reply */
	o->calls = 0;
	cr_assert_eq(bindings_open_async(b, a.ino, &tag2_, opened_cb, o, &h2),
		     -EINPROGRESS);
	cr_assert_eq(o->calls, 0, "no new sample while the old is being sent");
	cr_assert_eq(o->stores, 1);
	bindings_read_done(b, h); /* the reply is sent: the open binds */
	wait_calls(o, 1);
	check_stored(o, o->r, 1);
	cr_assert_eq(o->h, h);
	cr_assert_eq(bindings_source(b, a.ino, &src2), 0);
	bindings_release(b, o->h);
	/* An interrupted open whose take waits for a reply gives way. */
	o->calls = 0;
	int stores = o->stores;
	cr_assert_eq(open_wait(b, o, a.ino, &tag, &h), 0);
	cr_assert_eq(o->stores, stores + 1);
	cr_assert_eq(bindings_read(b, h, 0, 10, &data), 10);
	bindings_release(b, h);
	o->calls = 0;
	cr_assert_eq(bindings_open_async(b, a.ino, &tag2_, opened_cb, o, &h2),
		     -EINPROGRESS);
	cr_assert_eq(bindings_cancel(b, &tag2_), 1);
	cr_assert_eq(o->calls, 1);
	cr_assert_eq(o->r, -EINTR);
	bindings_read_done(b, h); /* nobody waits: nothing is taken */
	cr_assert_eq(o->calls, 1);
	cr_assert_eq(o->stores, stores + 1);
	bindings_forget(b, a.ino, 1);
	bindings_free(b);
}

/* A take's answer (dataset_echo_take_async's done). */
struct taken {
	pthread_mutex_t m;
	pthread_cond_t c;
	int done, err;
	struct dataset_sample *s;
};

static void taken_cb(void *ud, int err, struct dataset_sample *s)
{
	struct taken *t = ud;

	pthread_mutex_lock(&t->m);
	t->err = err;
	t->s = s;
	t->done = 1;
	pthread_cond_signal(&t->c);
	pthread_mutex_unlock(&t->m);
}

/* A sample of class cls from the pool, as the bindings take one, waited
 * for when parked. */
static int take_wait(uint32_t cls, struct dataset_sample **out)
{
	struct taken t = {.m = PTHREAD_MUTEX_INITIALIZER,
			  .c = PTHREAD_COND_INITIALIZER};
	int r = dataset_echo_take_async(ds, cls, &t, taken_cb, &t, out);

	if (r != -EINPROGRESS)
		return r;
	pthread_mutex_lock(&t.m);
	while (!t.done)
		pthread_cond_wait(&t.c, &t.m);
	pthread_mutex_unlock(&t.m);
	*out = t.s;
	return t.err;
}

/* During the store the kernel forgets the inode and the one OPEN is
 * interrupted: nobody is answered with the binding, and it is freed. */
static int tag_forgotten;

static void forget_and_interrupt(struct opened *o, uint64_t ino)
{
	bindings_forget(o->b, ino, 1);
	cr_assert_eq(bindings_cancel(o->b, &tag_forgotten), 1);
	o->during_store = NULL;
}

Test(bindings, at_open_an_inode_forgotten_while_its_open_is_interrupted_is_freed)
{
	struct opened *o = &done_of;
	struct bindings *b = open_fixed(o);
	struct binding_attr a;
	struct bindings_stats st;
	struct binding *h = NULL;

	cr_assert_eq(lookup(b, 3, &a), 0);
	/* A sample of the class ready, so that the take, the store and the
	 * freeing all run in this thread (a parked take would finish them in
	 * the pool's thread, after the EINTR). */
	struct dataset_sample *ready;
	cr_assert_eq(take_wait(files[3].cls, &ready), 0);
	dataset_echo_untake(ds, ready);
	o->during_store = forget_and_interrupt;
	cr_assert_eq(open_wait(b, o, a.ino, &tag_forgotten, &h), -EINTR);
	cr_assert_null(h);
	cr_assert_eq(o->stores, 1);
	bindings_get_stats(b, &st);
	cr_assert_eq(st.open, 0);
	cr_assert_eq(st.live, 0, "the forgotten binding is freed");
	cr_assert_eq(bindings_getattr(b, a.ino, &a), -ENOENT);
	bindings_free(b);
}
