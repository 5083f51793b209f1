/* test_shards.c - unit tests for the shard manager (cache/shards.c), run
 * against the Python fault server and a real disk store. */
#include "cache/shards.h"

#include "cache/store.h"
#include "common/util.h"
#include "fetch/http.h"
#include "fetch/index.h"

#include <criterion/criterion.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <libgen.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

/* ---- fixtures: temp dir, tar shards, fault server ---- */

#define NSHARDS 4
#define PER_SHARD 24

struct sample {
	uint64_t off, size;
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

static void make_shards(void)
{
	unsigned seed = 12345;
	for (int s = 0; s < NSHARDS; s++) {
		struct tarw t = {0};
		char name[64], path[160];
		FILE *f;
		for (int k = 0; k < PER_SHARD; k++) {
			size_t n = 1000 + (size_t)(rand_r(&seed) % 250000);
			uint8_t *img = xmalloc(n);
			for (size_t i = 0; i < n; i++)
				img[i] = (uint8_t)rand_r(&seed);
			snprintf(name, sizeof(name), "s%d_%04d.jpg", s, k);
			samples[s][k].off = tar_add(&t, name, img, n);
			samples[s][k].size = n;
			snprintf(name, sizeof(name), "s%d_%04d.cls", s, k);
			tar_add(&t, name, "3\n", 2);
			free(img);
		}
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
			       .retry_budget_s = 8,
			       .backoff_base_s = 0.05,
			       .low_speed_time_s = 3};

	snprintf(tdir, sizeof(tdir), "/tmp/echofs-shards-XXXXXX");
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

TestSuite(shards, .init = setup, .fini = teardown, .timeout = 90);

static struct index *make_index(void)
{
	struct index *ix = index_new();
	for (int s = 0; s < NSHARDS; s++) {
		char url[128];
		snprintf(url, sizeof(url), "http://127.0.0.1:%d/s%d.tar",
			 srv_port, s);
		index_add_shard(ix, url, shard_len[s], "");
	}
	return ix;
}

static struct store *open_store(uint64_t cap)
{
	char err[256];
	struct store *st = store_open(cdir, cap, err, sizeof(err));
	cr_assert_not_null(st, "store_open: %s", err);
	return st;
}

/* Read sample k of shard s and compare with the source bytes. */
static void check_sample(struct shards *sh, int s, int k)
{
	const struct sample *m = &samples[s][k];
	uint8_t *buf = xmalloc(m->size);
	ssize_t r = shards_read(sh, (uint32_t)s, m->off, m->size, buf);
	cr_assert_eq(r, (ssize_t)m->size, "shard %d sample %d: %zd (%s)", s, k,
		     r, r < 0 ? strerror((int)-r) : "short");
	cr_assert(memcmp(buf, shard_data[s] + m->off, m->size) == 0,
		  "shard %d sample %d: bytes differ", s, k);
	free(buf);
}

static void check_all(struct shards *sh, int nshards)
{
	for (int s = 0; s < nshards; s++)
		for (int k = 0; k < PER_SHARD; k++)
			check_sample(sh, s, k);
}

/* Background fetches finish after the last byte was handed to a reader. */
static void wait_cached(struct shards *sh, uint32_t n)
{
	for (int i = 0; i < 500 && !shards_is_cached(sh, n); i++)
		usleep(10000);
	cr_assert(shards_is_cached(sh, n), "shard %u never cached", n);
}

/* Requests the server saw for a path, from GET /_stats. */
static long srv_requests(const char *path)
{
	char url[128], key[64], *body = NULL, *p;
	size_t len;
	long n = 0;

	snprintf(url, sizeof(url), "http://127.0.0.1:%d/_stats", srv_port);
	cr_assert_eq(http_get_all(h, url, 1 << 20, &body, &len), 0);
	snprintf(key, sizeof(key), "\"%s\":", path);
	p = strstr(body, key);
	if (p)
		n = strtol(p + strlen(key), NULL, 10);
	free(body);
	return n;
}

Test(shards, every_sample_byte_identical)
{
	struct index *ix;
	struct store *st;
	struct shards *sh;
	struct shards_stats ss;
	uint8_t b[16];

	srv_start(NULL);
	ix = make_index();
	st = open_store(1ULL << 30);
	sh = shards_new(ix, h, st, NULL);
	cr_assert_not_null(sh);
	check_all(sh, NSHARDS);
	for (uint32_t s = 0; s < NSHARDS; s++)
		wait_cached(sh, s);
	check_all(sh, NSHARDS);
	/* Edges: past the end, across the end, bad shard number. */
	cr_assert_eq(shards_read(sh, 0, shard_len[0], 16, b), 0);
	cr_assert_eq(shards_read(sh, 0, shard_len[0] - 4, 16, b), 4);
	cr_assert(memcmp(b, shard_data[0] + shard_len[0] - 4, 4) == 0);
	cr_assert_eq(shards_read(sh, NSHARDS, 0, 16, b), -EINVAL);
	shards_get_stats(sh, &ss);
	cr_assert_eq(ss.fetched_shards, NSHARDS);
	cr_assert_geq(ss.misses, NSHARDS);
	cr_assert_geq(ss.hits, NSHARDS * PER_SHARD);
	cr_assert_eq(ss.failed_shards, 0);
	cr_assert_eq(ss.range_reads, 0);
	cr_assert_eq(ss.read_errors, 1);
	for (int s = 0; s < NSHARDS; s++) {
		char p[16];
		snprintf(p, sizeof(p), "/s%d.tar", s);
		cr_assert_eq(srv_requests(p), 1, "%s fetched more than once",
			     p);
	}
	shards_free(sh);
	store_close(st);
	index_free(ix);
}

struct rd {
	struct shards *sh;
	int id, errors;
};

static void *reader(void *arg)
{
	struct rd *r = arg;
	unsigned seed = (unsigned)r->id * 7919u;
	for (int i = 0; i < 60; i++) {
		int s = rand_r(&seed) % NSHARDS, k = rand_r(&seed) % PER_SHARD;
		const struct sample *m = &samples[s][k];
		uint8_t *buf = xmalloc(m->size);
		if (shards_read(r->sh, (uint32_t)s, m->off, m->size, buf) !=
			    (ssize_t)m->size ||
		    memcmp(buf, shard_data[s] + m->off, m->size) != 0)
			r->errors++;
		free(buf);
	}
	return NULL;
}

static void run_readers(struct shards *sh)
{
	pthread_t t[8];
	struct rd r[8];
	for (int i = 0; i < 8; i++) {
		r[i] = (struct rd){sh, i, 0};
		pthread_create(&t[i], NULL, reader, &r[i]);
	}
	for (int i = 0; i < 8; i++) {
		pthread_join(t[i], NULL);
		cr_assert_eq(r[i].errors, 0, "reader %d: %d bad reads", i,
			     r[i].errors);
	}
}

Test(shards, concurrent_readers_cold_cache)
{
	const char *faults[] = {"*.tar=slow:4000000", NULL};
	struct shards_opts o = {.workers = 2};
	struct index *ix;
	struct store *st;
	struct shards *sh;
	struct shards_stats ss;

	srv_start(faults);
	ix = make_index();
	st = open_store(1ULL << 30);
	sh = shards_new(ix, h, st, &o);
	run_readers(sh);
	for (uint32_t s = 0; s < NSHARDS; s++)
		wait_cached(sh, s);
	shards_get_stats(sh, &ss);
	cr_assert_eq(ss.fetched_shards, NSHARDS);
	cr_assert_eq(ss.read_errors, 0);
	cr_assert_eq(ss.hits + ss.misses, 8 * 60);
	cr_assert_gt(ss.misses, 0);
	cr_assert_eq(ss.queued, 0);
	cr_assert_eq(ss.active, 0);
	for (int s = 0; s < NSHARDS; s++) {
		char p[16];
		snprintf(p, sizeof(p), "/s%d.tar", s);
		cr_assert_eq(srv_requests(p), 1, "%s fetched more than once",
			     p);
	}
	shards_free(sh);
	store_close(st);
	index_free(ix);
}

Test(shards, failed_shard_fails_fast_others_work)
{
	const char *faults[] = {"/s1.tar=status:404", NULL};
	struct shards_opts o = {.retry_failed_s = 60};
	struct index *ix;
	struct store *st;
	struct shards *sh;
	struct shards_stats ss;
	uint8_t b[100];
	double t0;
	long before;

	srv_start(faults);
	ix = make_index();
	st = open_store(1ULL << 30);
	sh = shards_new(ix, h, st, &o);
	t0 = now_mono();
	cr_assert_eq(shards_read(sh, 1, 0, sizeof(b), b), -EIO);
	cr_assert_lt(now_mono() - t0, 5.0, "404 took %.1f s", now_mono() - t0);
	before = srv_requests("/s1.tar");
	t0 = now_mono();
	cr_assert_eq(shards_read(sh, 1, 4096, sizeof(b), b), -EIO);
	cr_assert_lt(now_mono() - t0, 0.5);
	cr_assert_eq(srv_requests("/s1.tar"), before, "failed shard retried");
	check_sample(sh, 0, 3);
	check_sample(sh, 2, 5);
	shards_get_stats(sh, &ss);
	cr_assert_eq(ss.failed_shards, 1);
	cr_assert_eq(ss.read_errors, 2);
	cr_assert_eq(shards_is_cached(sh, 1), 0);
	shards_free(sh);
	store_close(st);
	index_free(ix);
}

Test(shards, failed_shard_retried_after_delay)
{
	const char *faults[] = {"/s1.tar=status:404,count=1", NULL};
	struct shards_opts o = {.retry_failed_s = 0.5};
	struct index *ix;
	struct shards *sh;
	struct store *st;
	uint8_t b[100];

	srv_start(faults);
	ix = make_index();
	st = open_store(1ULL << 30);
	sh = shards_new(ix, h, st, &o);
	cr_assert_eq(shards_read(sh, 1, 0, sizeof(b), b), -EIO);
	usleep(600000);
	check_sample(sh, 1, 0);
	shards_free(sh);
	store_close(st);
	index_free(ix);
}

/* Server faults the fetch gets through; the bytes must still be exact. */
struct fault_case {
	const char *rule;
};

static const struct fault_case fault_cases[] = {
	{"/s0.tar=status:503,count=2,retry_after=0"},
	{"/s0.tar=truncate:100000,count=2"},
	{"/s0.tar=reset,count=1"},
	{"/s0.tar=ignore-range"},
};

Test(shards, transient_faults_survived)
{
	for (size_t i = 0; i < sizeof(fault_cases) / sizeof(fault_cases[0]);
	     i++) {
		const char *faults[] = {fault_cases[i].rule, NULL};
		struct index *ix;
		struct store *st;
		struct shards *sh;
		struct shards_stats ss;
		char cmd[200];

		srv_start(faults);
		ix = make_index();
		st = open_store(1ULL << 30);
		sh = shards_new(ix, h, st, NULL);
		check_all(sh, 1);
		wait_cached(sh, 0);
		shards_get_stats(sh, &ss);
		cr_assert_eq(ss.fetched_shards, 1, "%s", fault_cases[i].rule);
		cr_assert_eq(ss.read_errors, 0, "%s", fault_cases[i].rule);
		shards_free(sh);
		store_close(st);
		index_free(ix);
		srv_stop();
		snprintf(cmd, sizeof(cmd), "rm -rf %s", cdir);
		cr_assert_eq(system(cmd), 0);
	}
}

static void flip_in_cache(uint64_t off)
{
	char cmd[400];
	int fd;
	uint8_t b;
	FILE *p;
	char path[512] = "";

	snprintf(cmd, sizeof(cmd), "ls %s/shards/*.shard | head -n 1", cdir);
	p = popen(cmd, "r");
	cr_assert_not_null(p);
	cr_assert_not_null(fgets(path, sizeof(path), p));
	pclose(p);
	path[strcspn(path, "\n")] = '\0';
	fd = open(path, O_RDWR);
	cr_assert_geq(fd, 0, "%s", path);
	cr_assert_eq(pread(fd, &b, 1, (off_t)off), 1);
	b ^= 1;
	cr_assert_eq(pwrite(fd, &b, 1, (off_t)off), 1);
	close(fd);
}

Test(shards, corrupt_cache_refetched)
{
	struct index *ix;
	struct store *st;
	struct shards *sh;
	struct shards_stats ss;
	struct store_stats sts;
	const struct sample *m;

	srv_start(NULL);
	ix = make_index();
	st = open_store(1ULL << 30);
	sh = shards_new(ix, h, st, NULL);
	check_sample(sh, 2, 0);
	wait_cached(sh, 2);
	shards_free(sh);
	store_close(st);
	/* One shard in the cache; damage a byte inside sample 10. */
	m = &samples[2][10];
	flip_in_cache(m->off + m->size / 2);
	st = open_store(1ULL << 30);
	sh = shards_new(ix, h, st, NULL);
	check_sample(sh, 2, 10);
	check_all(sh, 3);
	shards_get_stats(sh, &ss);
	store_get_stats(st, &sts);
	cr_assert_eq(ss.refetches, 1);
	cr_assert_eq(sts.corrupt, 1);
	cr_assert_eq(srv_requests("/s2.tar"), 2);
	shards_free(sh);
	store_close(st);
	index_free(ix);
}

Test(shards, no_store_uses_range_reads)
{
	struct index *ix;
	struct shards *sh;
	struct shards_stats ss;

	srv_start(NULL);
	ix = make_index();
	sh = shards_new(ix, h, NULL, NULL);
	shards_prefetch(sh, 0);
	check_all(sh, 2);
	shards_get_stats(sh, &ss);
	cr_assert_eq(ss.range_reads, 2 * PER_SHARD);
	cr_assert_eq(ss.fetched_shards, 0);
	cr_assert_eq(shards_is_cached(sh, 0), 0);
	shards_free(sh);
	index_free(ix);
}

Test(shards, shard_larger_than_cache_uses_range_reads)
{
	struct index *ix;
	struct store *st;
	struct shards *sh;
	struct shards_stats ss;

	srv_start(NULL);
	ix = make_index();
	st = open_store(256 * 1024);
	sh = shards_new(ix, h, st, NULL);
	check_all(sh, 1);
	shards_get_stats(sh, &ss);
	cr_assert_eq(ss.range_reads, PER_SHARD);
	cr_assert_eq(ss.fetched_shards, 0);
	cr_assert_eq(ss.read_errors, 0);
	shards_free(sh);
	store_close(st);
	index_free(ix);
}

Test(shards, reopen_serves_without_network)
{
	struct index *ix;
	struct store *st;
	struct shards *sh;
	struct shards_stats ss;

	srv_start(NULL);
	ix = make_index();
	st = open_store(1ULL << 30);
	sh = shards_new(ix, h, st, NULL);
	for (uint32_t s = 0; s < NSHARDS; s++)
		shards_prefetch(sh, s);
	check_all(sh, NSHARDS);
	for (uint32_t s = 0; s < NSHARDS; s++)
		wait_cached(sh, s);
	shards_free(sh);
	store_close(st);
	srv_stop();

	st = open_store(1ULL << 30);
	sh = shards_new(ix, h, st, NULL);
	cr_assert(shards_is_cached(sh, 3));
	check_all(sh, NSHARDS);
	shards_get_stats(sh, &ss);
	cr_assert_eq(ss.fetched_shards, 0);
	cr_assert_eq(ss.misses, 0);
	cr_assert_eq(ss.hits, NSHARDS * PER_SHARD);
	shards_free(sh);
	store_close(st);
	index_free(ix);
}

Test(shards, read_times_out_on_stalled_server)
{
	const char *faults[] = {"/s0.tar=stall:4,count=1", NULL};
	struct shards_opts o = {.read_timeout_s = 1};
	struct index *ix;
	struct store *st;
	struct shards *sh;
	uint8_t b[64];
	double t0;

	srv_start(faults);
	ix = make_index();
	st = open_store(1ULL << 30);
	sh = shards_new(ix, h, st, &o);
	t0 = now_mono();
	cr_assert_eq(shards_read(sh, 0, 0, sizeof(b), b), -ETIMEDOUT);
	cr_assert_lt(now_mono() - t0, 2.5);
	/* Freeing aborts the stalled transfer (it must not hang). */
	shards_free(sh);
	store_close(st);
	index_free(ix);
}

Test(shards, changed_etag_fails_shard)
{
	struct index *ix;
	struct store *st;
	struct shards *sh;
	uint8_t b[64];
	char url[128];

	srv_start(NULL);
	ix = index_new();
	snprintf(url, sizeof(url), "http://127.0.0.1:%d/s0.tar", srv_port);
	index_add_shard(ix, url, shard_len[0], "\"not-the-etag\"");
	st = open_store(1ULL << 30);
	sh = shards_new(ix, h, st, NULL);
	cr_assert_eq(shards_read(sh, 0, 0, sizeof(b), b), -EIO);
	shards_free(sh);
	store_close(st);
	index_free(ix);
}
