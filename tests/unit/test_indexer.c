/* test_indexer.c - unit tests for the index builder (cache/indexer.c), run
 * against the Python fault server. */
#include "cache/indexer.h"

#include "cache/store.h"
#include "common/util.h"
#include "fetch/http.h"
#include "fetch/index.h"
#include "fetch/shardlist.h"

#include <criterion/criterion.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <libgen.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
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
static pid_t srv_pid;
static int srv_port;
static struct http *h;

static int rm_cb(const char *p, const struct stat *sb, int flag,
		 struct FTW *ftw)
{
	(void)sb;
	(void)flag;
	(void)ftw;
	return remove(p);
}

struct tarw {
	uint8_t *buf;
	size_t len, cap;
};

static void tar_reserve(struct tarw *t, size_t n)
{
	if (t->len + n > t->cap) {
		t->cap = (t->len + n) * 2;
		t->buf = xrealloc(t->buf, t->cap);
	}
	memset(t->buf + t->len, 0, n);
}

/* Append a ustar member; returns the offset of its data. */
static uint64_t tar_add(struct tarw *t, const char *name, const void *data,
			size_t n)
{
	uint8_t *hd;
	unsigned sum = 0;
	uint64_t off;

	tar_reserve(t, 512 + n + 512);
	hd = t->buf + t->len;
	snprintf((char *)hd, 100, "%s", name);
	snprintf((char *)hd + 100, 8, "%07o", 0644);
	snprintf((char *)hd + 108, 8, "%07o", 0);
	snprintf((char *)hd + 116, 8, "%07o", 0);
	snprintf((char *)hd + 124, 12, "%011llo", (unsigned long long)n);
	snprintf((char *)hd + 136, 12, "%011o", 1700000000);
	memset(hd + 148, ' ', 8);
	hd[156] = '0';
	memcpy(hd + 257, "ustar", 6);
	memcpy(hd + 263, "00", 2);
	for (int i = 0; i < 512; i++)
		sum += hd[i];
	snprintf((char *)hd + 148, 8, "%06o", sum);
	off = t->len + 512;
	memcpy(t->buf + off, data, n);
	t->len = off + ((n + 511) / 512) * 512;
	return off;
}

/* Samples: key.jpg (or .PNG) + key.cls; every 7th has no .cls and takes
 * its label from its directory; a .txt member without an image is skipped. */
static void make_shards(void)
{
	unsigned seed = 4242;
	for (int s = 0; s < NSHARDS; s++) {
		struct tarw t = {0};
		char name[96], path[160], cls[16];
		FILE *f;
		for (int k = 0; k < PER_SHARD; k++) {
			struct sample *m = &samples[s][k];
			size_t n = 100 + (size_t)(rand_r(&seed) % 60000);
			uint8_t *img = xmalloc(n);
			bool dir = k % 7 == 3;
			for (size_t i = 0; i < n; i++)
				img[i] = (uint8_t)rand_r(&seed);
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
			m->off = tar_add(&t, name, img, n);
			m->size = n;
			if (!dir) {
				snprintf(name, sizeof(name), "%s.cls", m->key);
				snprintf(cls, sizeof(cls), "%s\n", m->label);
				tar_add(&t, name, cls, strlen(cls));
			}
			free(img);
		}
		tar_add(&t, "zz_orphan.txt", "hello", 5);
		tar_reserve(&t, 1024);
		t.len += 1024;
		shard_data[s] = t.buf;
		shard_len[s] = t.len;
		snprintf(path, sizeof(path), "%s/s%d.tar", root, s);
		f = fopen(path, "wb");
		cr_assert_not_null(f);
		cr_assert_eq(fwrite(t.buf, 1, t.len, f), t.len);
		fclose(f);
	}
}

static void repo_root(char *out, size_t n)
{
	const char *d = getenv("ECHOFS_TEST_DATA");
	char tmp[512];
	cr_assert_not_null(d, "ECHOFS_TEST_DATA not set");
	snprintf(tmp, sizeof(tmp), "%s", d);
	snprintf(out, n, "%s", dirname(dirname(tmp)));
}

/* Start tests/fault_server.py on root with up to 4 fault rules. */
static void srv_start(const char *const *faults)
{
	char repo[512], script[600], pf[160];
	const char *argv[16];
	int a = 0;

	repo_root(repo, sizeof(repo));
	snprintf(script, sizeof(script), "%s/tests/fault_server.py", repo);
	if (access(script, R_OK) != 0)
		cr_skip_test("no %s", script);
	snprintf(pf, sizeof(pf), "%s/port", tdir);
	unlink(pf);
	argv[a++] = "/usr/bin/python3";
	argv[a++] = script;
	argv[a++] = "--root";
	argv[a++] = root;
	argv[a++] = "--port-file";
	argv[a++] = pf;
	for (int i = 0; faults && faults[i] && i < 4; i++) {
		argv[a++] = "--fault";
		argv[a++] = faults[i];
	}
	argv[a] = NULL;
	srv_pid = fork();
	cr_assert_geq(srv_pid, 0);
	if (srv_pid == 0) {
		int fd = open("/dev/null", O_WRONLY);
		/* Die with the test, even when it crashes. */
		prctl(PR_SET_PDEATHSIG, SIGTERM);
		dup2(fd, 1);
		dup2(fd, 2);
		execv(argv[0], (char *const *)argv);
		_exit(127);
	}
	for (int i = 0; i < 200; i++) {
		FILE *f = fopen(pf, "r");
		if (f) {
			int ok = fscanf(f, "%d", &srv_port) == 1;
			fclose(f);
			if (ok)
				return;
		}
		cr_assert_eq(waitpid(srv_pid, NULL, WNOHANG), 0, "server died");
		usleep(50000);
	}
	cr_assert_fail("fault server did not start");
}

static void srv_stop(void)
{
	if (srv_pid > 0) {
		kill(srv_pid, SIGTERM);
		waitpid(srv_pid, NULL, 0);
		srv_pid = 0;
	}
}

static void setup(void)
{
	char err[256];
	struct http_opts ho = {.connections = 8,
			       .retry_budget_s = 3,
			       .backoff_base_s = 0.05,
			       .low_speed_time_s = 3};

	snprintf(tdir, sizeof(tdir), "/tmp/echofs-indexer-XXXXXX");
	cr_assert_not_null(mkdtemp(tdir));
	snprintf(root, sizeof(root), "%s/www", tdir);
	snprintf(cdir, sizeof(cdir), "%s/cache", tdir);
	cr_assert_eq(mkdir(root, 0700), 0);
	make_shards();
	cr_assert_eq(http_global_init(), 0);
	h = http_new(&ho, err, sizeof(err));
	cr_assert_not_null(h, "http_new: %s", err);
}

static void teardown(void)
{
	srv_stop();
	http_free(h);
	h = NULL;
	for (int s = 0; s < NSHARDS; s++) {
		free(shard_data[s]);
		shard_data[s] = NULL;
	}
	nftw(tdir, rm_cb, 16, FTW_DEPTH | FTW_PHYS);
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
			 srv_port, s);
		l->urls[l->n++] = xstrdup(url);
	}
	if (extra) {
		char url[256];
		snprintf(url, sizeof(url), "http://127.0.0.1:%d%s", srv_port,
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
			 srv_port, s);
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
			cr_assert_str_eq(x->key, m->key);
			cr_assert_str_eq(x->label, m->label, "key %s", m->key);
			cr_assert_str_eq(x->ext, m->ext);
			cr_assert_eq(x->offset, m->off, "key %s", m->key);
			cr_assert_eq(x->size, m->size);
		}
	}
}

/* Same index whatever the number of jobs. */
static const unsigned job_counts[] = {1, 2, 8};

Test(indexer, builds_the_right_index)
{
	srv_start(NULL);
	for (size_t j = 0; j < sizeof(job_counts) / sizeof(job_counts[0]);
	     j++) {
		struct shardlist l;
		struct index *ix = NULL;
		struct prog p = {0};
		char err[256] = "";
		uint64_t skipped = 99;
		int r;

		make_list(&l, NSHARDS, NULL);
		r = indexer_build(h, NULL, &l, job_counts[j], on_progress, &p,
				  &ix, &skipped, err, sizeof(err));
		cr_assert_eq(r, 0, "jobs %u: %s", job_counts[j], err);
		/* One orphan member (no image) per shard. */
		cr_assert_eq(skipped, NSHARDS);
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

	srv_start(NULL);
	st = store_open(cdir, 1ULL << 30, err, sizeof(err));
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

	srv_start(NULL);
	st = store_open(cdir, 4096, err, sizeof(err));
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

static void write_file(const char *name, const void *data, size_t n)
{
	char path[200];
	FILE *f;
	snprintf(path, sizeof(path), "%s/%s", root, name);
	f = fopen(path, "wb");
	cr_assert_not_null(f);
	cr_assert_eq(fwrite(data, 1, n, f), n);
	fclose(f);
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

		srv_start(faults);
		make_list(&l, NSHARDS, c->extra);
		r = indexer_build(h, NULL, &l, 2, NULL, NULL, &ix, NULL, err,
				  sizeof(err));
		cr_assert_eq(r, c->err, "%s: %d (%s)", c->extra, r, err);
		cr_assert_null(ix);
		cr_assert(strstr(err, c->want), "err '%s' lacks '%s'", err,
			  c->want);
		cr_assert(strstr(err, "127.0.0.1"), "err '%s'", err);
		shardlist_clear(&l);
		srv_stop();
	}
}

Test(indexer, unreachable_and_redacted)
{
	struct shardlist l = {0};
	struct index *ix = NULL;
	char err[512] = "", url[200];
	int r;

	/* A port nobody listens on: start and stop a server to find one. */
	srv_start(NULL);
	srv_stop();
	snprintf(url, sizeof(url),
		 "http://user:hunter2@127.0.0.1:%d/s0.tar?sig=SECRET",
		 srv_port);
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
