/* test_indexer.c - unit tests for the index builder (cache/index/indexer.c), run
 * against the Python fault server. */
#include "cache/index/indexer.h"

#include "cache/store/store.h"
#include "common/util.h"
#include "fetch/net/http.h"
#include "fetch/format/index.h"
#include "fetch/net/shardlist.h"
#include "fixtures.h"

#include <criterion/criterion.h>
#include <dirent.h>
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define NSHARDS 3
#define PER_SHARD 20

struct sample {
	uint64_t off, size;
	char key[32];
	char label[16];
	const char *ext;
};

static char tdir[64], root[96], cdir[96];
static uint8_t *shard_data[NSHARDS];
static size_t shard_len[NSHARDS];
static struct sample samples[NSHARDS][PER_SHARD];
static struct fx_server srv;
static struct http *h;

/* Samples: key.jpg (or .PNG) + key.cls; every 7th has no .cls and takes
 * its label from its directory; a .txt member without an image is skipped,
 * and so is a sample whose .cls is not a number. */
static void make_shards(void)
{
	unsigned seed = 4242;
	for (int s = 0; s < NSHARDS; s++) {
		struct tarw t = {0};
		char name[96], cls[16];
		for (int k = 0; k < PER_SHARD; k++) {
			struct sample *m = &samples[s][k];
			size_t n = 100 + (size_t)(rand_r(&seed) % 60000);
			uint8_t *img = fx_random_bytes(&seed, n);
			bool dir = k % 7 == 3;
			m->ext = k % 5 == 1 ? "png" : "jpg";
			snprintf(m->key, sizeof(m->key), "%s%d_%04d",
				 dir ? "dog/" : "", s, k);
			snprintf(m->label, sizeof(m->label), "%s",
				 dir ? "dog" : "");
			if (!dir)
				snprintf(m->label, sizeof(m->label), "%d",
					 (s * 31 + k) % 10);
			snprintf(name, sizeof(name), "%s.%s", m->key,
				 k % 5 == 1 ? "PNG" : "jpg");
			m->off = tarw_add(&t, name, img, n);
			m->size = n;
			if (!dir) {
				snprintf(name, sizeof(name), "%s.cls", m->key);
				snprintf(cls, sizeof(cls), "%s\n", m->label);
				tarw_add(&t, name, cls, strlen(cls));
			}
			free(img);
		}
		tarw_add(&t, "zz_orphan.txt", "hello", 5);
		/* A label that is not a number: bad_label, not tar_skipped. */
		tarw_add(&t, "zz_bad.jpg", "img", 3);
		tarw_add(&t, "zz_bad.cls", "cat\n", 4);
		fx_shard_finish(&t, root, s, &shard_data[s], &shard_len[s]);
	}
}

static void setup(void)
{
	fx_tree_make("indexer", tdir, root, cdir);
	make_shards();
	h = fx_http_open(8, 3);
}

static void teardown(void)
{
	fx_shards_teardown(&srv, &h, shard_data, NSHARDS, tdir);
}

TestSuite(indexer, .init = setup, .fini = teardown, .timeout = 90);

/* A list of n URLs: s0.tar, s1.tar... with `extra` (a path) appended. */
static void make_list(struct shardlist *l, int n, const char *extra)
{
	l->n = 0;
	l->urls = xcalloc((size_t)n + 1, sizeof(char *));
	for (int s = 0; s < n; s++) {
		char url[128];
		snprintf(url, sizeof(url), "http://127.0.0.1:%d/s%d.tar",
			 srv.port, s);
		l->urls[l->n++] = xstrdup(url);
	}
	if (extra) {
		char url[256];
		snprintf(url, sizeof(url), "http://127.0.0.1:%d%s", srv.port,
			 extra);
		l->urls[l->n++] = xstrdup(url);
	}
}

struct prog {
	size_t calls, last_done, total;
	unsigned long long bytes;
};

static void on_progress(void *ud, size_t done, size_t total,
			unsigned long long bytes)
{
	struct prog *p = ud;
	p->calls++;
	if (done > p->last_done)
		p->last_done = done;
	p->total = total;
	if (bytes > p->bytes)
		p->bytes = bytes;
}

static void check_index(const struct index *ix)
{
	size_t k = 0;
	cr_assert_eq(ix->nshards, NSHARDS);
	cr_assert_eq(ix->nsamples, NSHARDS * PER_SHARD);
	for (int s = 0; s < NSHARDS; s++) {
		char url[128];
		snprintf(url, sizeof(url), "http://127.0.0.1:%d/s%d.tar",
			 srv.port, s);
		cr_assert_str_eq(ix->shards[s].url, url);
		cr_assert_eq(ix->shards[s].size, shard_len[s]);
		cr_assert(ix->shards[s].etag[0] == '"', "etag %s",
			  ix->shards[s].etag);
	}
	/* Grouped by shard in shard order, in tar order within a shard. */
	for (int s = 0; s < NSHARDS; s++) {
		for (int i = 0; i < PER_SHARD; i++, k++) {
			const struct index_sample *x = &ix->samples[k];
			const struct sample *m = &samples[s][i];
			cr_assert_eq(x->shard, (uint32_t)s);
			cr_assert_str_eq(index_key(ix, x), m->key);
			cr_assert_str_eq(index_label(ix, x), m->label,
					 "key %s", m->key);
			cr_assert_str_eq(index_ext(ix, x), m->ext);
			cr_assert_eq(x->offset, m->off, "key %s", m->key);
			cr_assert_eq(x->size, m->size);
		}
	}
}

/* Same index whatever the number of jobs. */
static const unsigned job_counts[] = {1, 2, 8};

Test(indexer, builds_the_right_index)
{
	fx_server_start(&srv, root, tdir, NULL);
	for (size_t j = 0; j < sizeof(job_counts) / sizeof(job_counts[0]);
	     j++) {
		struct shardlist l;
		struct index *ix = NULL;
		struct prog p = {0};
		char err[256] = "";
		struct indexer_skips skipped = {99, 99};
		int r;

		make_list(&l, NSHARDS, NULL);
		r = indexer_build(h, NULL, &l, job_counts[j], on_progress, &p,
				  &ix, &skipped, err, sizeof(err));
		cr_assert_eq(r, 0, "jobs %u: %s", job_counts[j], err);
		/* One orphan member (no image) and one bad .cls per shard. */
		cr_assert_eq(skipped.members, NSHARDS);
		cr_assert_eq(skipped.bad_label, NSHARDS);
		check_index(ix);
		cr_assert_eq(p.calls, NSHARDS);
		cr_assert_eq(p.last_done, NSHARDS);
		cr_assert_eq(p.total, NSHARDS);
		cr_assert_eq(p.bytes,
			     shard_len[0] + shard_len[1] + shard_len[2]);
		index_free(ix);
		shardlist_clear(&l);
	}
}

Test(indexer, shards_land_in_the_store)
{
	struct shardlist l;
	struct index *ix = NULL;
	struct store *st;
	struct store_stats sts;
	char err[256] = "";

	fx_server_start(&srv, root, tdir, NULL);
	cr_assert_eq(store_open(cdir, 1ULL << 30, &st, err, sizeof(err)), 0);
	cr_assert_not_null(st, "%s", err);
	make_list(&l, NSHARDS, NULL);
	cr_assert_eq(
		indexer_build(h, st, &l, 2, NULL, NULL, &ix, NULL, err, sizeof(err)),
		0, "%s", err);
	check_index(ix);
	for (int s = 0; s < NSHARDS; s++) {
		const struct index_shard *is = &ix->shards[s];
		struct store_entry *e =
			store_get(st, is->url, is->etag, is->size);
		uint8_t *buf = xmalloc(is->size);
		cr_assert_not_null(e, "shard %d not cached", s);
		cr_assert_eq(store_pread(e, buf, is->size, 0),
			     (ssize_t)is->size);
		cr_assert(memcmp(buf, shard_data[s], is->size) == 0);
		free(buf);
		store_put(e);
	}
	store_get_stats(st, &sts);
	cr_assert_eq(sts.entries, NSHARDS);
	index_free(ix);
	shardlist_clear(&l);
	store_close(st);
}

Test(indexer, cache_too_small_still_indexes)
{
	struct shardlist l;
	struct index *ix = NULL;
	struct store *st;
	struct store_stats sts;
	char err[256] = "";

	fx_server_start(&srv, root, tdir, NULL);
	cr_assert_eq(store_open(cdir, 4096, &st, err, sizeof(err)), 0);
	cr_assert_not_null(st, "%s", err);
	make_list(&l, NSHARDS, NULL);
	cr_assert_eq(
		indexer_build(h, st, &l, 2, NULL, NULL, &ix, NULL, err, sizeof(err)),
		0, "%s", err);
	check_index(ix);
	store_get_stats(st, &sts);
	cr_assert_eq(sts.entries, 0);
	index_free(ix);
	shardlist_clear(&l);
	store_close(st);
}

/* Fault injection: removes every store temp file as soon as it appears (as
 * a careless sweep by another process would), so store_commit's rename fails
 * after the whole shard was streamed. */
struct sweeper {
	pthread_t t;
	atomic_bool stop; /* volatile is not enough: ThreadSanitizer saw the race */
	unsigned removed;
};

static void *sweep_main(void *arg)
{
	struct sweeper *sw = arg;
	char dir[160], path[512];

	snprintf(dir, sizeof(dir), "%s/shards", cdir);
	while (!sw->stop) {
		DIR *d = opendir(dir);
		struct dirent *de;
		while (d && (de = readdir(d)) != NULL) {
			if (strncmp(de->d_name, ".tmp-", 5) != 0)
				continue;
			snprintf(path, sizeof(path), "%s/%s", dir, de->d_name);
			if (unlink(path) == 0)
				sw->removed++;
		}
		if (d)
			closedir(d);
		nanosleep(&(struct timespec){0, 5000000L}, NULL);
	}
	return NULL;
}

/* store_commit failing (its writer already freed) must not be aborted a
 * second time: the index is still built, nothing is cached. Under ASan the
 * old code was a heap-use-after-free, in plain builds a double free. */
Test(indexer, failed_commit_keeps_indexing)
{
	const char *faults[] = {"*.tar=slow:400000", NULL};
	struct sweeper sw = {0};
	struct shardlist l;
	struct index *ix = NULL;
	struct store *st;
	struct store_stats sts;
	char err[256] = "";

	fx_server_start(&srv, root, tdir, faults);
	cr_assert_eq(store_open(cdir, 1ULL << 30, &st, err, sizeof(err)), 0);
	cr_assert_not_null(st, "%s", err);
	cr_assert_eq(pthread_create(&sw.t, NULL, sweep_main, &sw), 0);
	make_list(&l, NSHARDS, NULL);
	cr_assert_eq(
		indexer_build(h, st, &l, 3, NULL, NULL, &ix, NULL, err, sizeof(err)),
		0, "%s", err);
	sw.stop = true;
	pthread_join(sw.t, NULL);
	cr_assert_geq(sw.removed, 1, "no temp file was swept");
	check_index(ix);
	store_get_stats(st, &sts);
	cr_assert_lt(sts.entries, NSHARDS);
	index_free(ix);
	shardlist_clear(&l);
	store_close(st);
}

static void write_file(const char *name, const void *data, size_t n)
{
	char path[200];
	snprintf(path, sizeof(path), "%s/%s", root, name);
	fx_write_file(path, data, n);
}

/* Builds that must fail, naming the shard and the reason. */
struct fail_case {
	const char *extra; /* path appended to the good shards */
	const char *fault; /* fault rule or NULL */
	int err;
	const char *want; /* in the message */
};

static const struct fail_case fail_cases[] = {
	{"/missing.tar", NULL, -ENOENT, "/missing.tar: not found (HTTP 404)"},
	{"/bad.tar", NULL, -EBADMSG, "/bad.tar: malformed tar"},
	{"/s1.tar", "/s1.tar=status:403", -EACCES, "/s1.tar: access denied"},
	{"/cut.tar", NULL, -EBADMSG, "/cut.tar: malformed tar"},
};

static void make_bad_files(void)
{
	uint8_t bad[2048];
	memcpy(bad, shard_data[0], sizeof(bad));
	bad[148] ^= 1; /* header checksum */
	write_file("bad.tar", bad, sizeof(bad));
	/* Cut inside the first member's data. */
	write_file("cut.tar", shard_data[0], 700);
}

Test(indexer, failing_shard_fails_the_build)
{
	make_bad_files();
	for (size_t i = 0; i < sizeof(fail_cases) / sizeof(fail_cases[0]);
	     i++) {
		const struct fail_case *c = &fail_cases[i];
		const char *faults[] = {c->fault, NULL};
		struct shardlist l;
		struct index *ix = (struct index *)1;
		char err[256] = "";
		int r;

		fx_server_start(&srv, root, tdir, faults);
		make_list(&l, NSHARDS, c->extra);
		r = indexer_build(h, NULL, &l, 2, NULL, NULL, &ix, NULL, err,
				  sizeof(err));
		cr_assert_eq(r, c->err, "%s: %d (%s)", c->extra, r, err);
		cr_assert_null(ix);
		cr_assert(strstr(err, c->want), "err '%s' lacks '%s'", err,
			  c->want);
		cr_assert(strstr(err, "127.0.0.1"), "err '%s'", err);
		shardlist_clear(&l);
		fx_server_stop(&srv);
	}
}

Test(indexer, unreachable_and_redacted)
{
	struct shardlist l = {0};
	struct index *ix = NULL;
	char err[512] = "", url[200];
	int r;

	/* A port nobody listens on: start and stop a server to find one. */
	fx_server_start(&srv, root, tdir, NULL);
	fx_server_stop(&srv);
	snprintf(url, sizeof(url),
		 "http://user:hunter2@127.0.0.1:%d/s0.tar?sig=SECRET",
		 srv.port);
	l.urls = xcalloc(1, sizeof(char *));
	l.urls[0] = xstrdup(url);
	l.n = 1;
	r = indexer_build(h, NULL, &l, 1, NULL, NULL, &ix, NULL, err, sizeof(err));
	cr_assert_eq(r, -ECONNREFUSED, "%d: %s", r, err);
	cr_assert(strstr(err, "connection refused"), "%s", err);
	cr_assert_null(strstr(err, "hunter2"), "%s", err);
	cr_assert_null(strstr(err, "SECRET"), "%s", err);
	shardlist_clear(&l);
}

Test(indexer, empty_list_rejected)
{
	struct shardlist l = {0};
	struct index *ix = NULL;
	char err[128] = "";
	cr_assert_eq(indexer_build(h, NULL, &l, 1, NULL, NULL, &ix, NULL, err,
				   sizeof(err)),
		     -EINVAL);
	cr_assert(err[0]);
}
