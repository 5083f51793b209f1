/* test_dataset.c - unit tests for the data face (cache/dataset.c) on real tar
 * shards served by the Python fault server, with a real disk store. */
#include "cache/dataset_parts.h"

#include "common/util.h"
#include "fetch/format/index.h"
#include "fixtures.h"

#include <arpa/inet.h>
#include <criterion/criterion.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define NSHARDS 3
#define PER_SHARD 10

struct sample {
	uint64_t off, size;
	char label[8];
};

static char tdir[64], root[96], cdir[96], source[160];
static uint8_t *shard_data[NSHARDS];
static size_t shard_len[NSHARDS];
static struct sample samples[NSHARDS][PER_SHARD];
static struct fx_server srv;

/* Shard s holds PER_SHARD images "s<s>_<k>.jpg" of random bytes, each with
 * a label "<k % 3>" in "s<s>_<k>.cls". */
static void make_shards(void)
{
	unsigned seed = 777;
	for (int s = 0; s < NSHARDS; s++) {
		struct tarw t = {0};
		char name[64];
		for (int k = 0; k < PER_SHARD; k++) {
			struct sample *m = &samples[s][k];
			size_t n = 500 + (size_t)(rand_r(&seed) % 60000);
			uint8_t *img = fx_random_bytes(&seed, n);
			snprintf(name, sizeof(name), "s%d_%04d.jpg", s, k);
			m->off = tarw_add(&t, name, img, n);
			m->size = n;
			snprintf(m->label, sizeof(m->label), "%d", k % 3);
			snprintf(name, sizeof(name), "s%d_%04d.cls", s, k);
			tarw_add(&t, name, m->label, strlen(m->label));
			free(img);
		}
		fx_shard_finish(&t, root, s, &shard_data[s], &shard_len[s]);
	}
}

static void setup(void)
{
	fx_tree_make("dataset", tdir, root, cdir);
	make_shards();
	cr_assert_eq(dataset_global_init(), 0);
}

static void teardown(void)
{
	fx_server_stop(&srv);
	for (int s = 0; s < NSHARDS; s++) {
		free(shard_data[s]);
		shard_data[s] = NULL;
	}
	fx_rm_tree(tdir);
}

TestSuite(dataset, .init = setup, .fini = teardown, .timeout = 90);

static struct dataset_opts opts_for(const char *src)
{
	return (struct dataset_opts){
		.source = src,
		.cache_dir = cdir,
		.cache_size = 64 << 20,
		.connections = 4,
		.boot_retry_budget_s = 2,
		.run_retry_budget_s = 5,
		.range_after_s = 0,
	};
}

static struct dataset *open_served(void)
{
	struct dataset *ds = NULL;
	char err[512] = "";

	fx_server_start(&srv, root, tdir, NULL);
	snprintf(source, sizeof(source), "http://127.0.0.1:%d/s{0..%d}.tar",
		 srv.port, NSHARDS - 1);
	struct dataset_opts o = opts_for(source);
	int r = dataset_open(&o, &ds, err, sizeof(err));
	cr_assert_eq(r, 0, "dataset_open: %s (%s)", strerror(-r), err);
	cr_assert_not_null(ds);
	return ds;
}

/* The written sample behind a key "s<s>_<k>". */
static const struct sample *by_key(const char *key, int *s_out)
{
	int s, k;
	char tail;
	cr_assert_eq(sscanf(key, "s%d_%d%c", &s, &k, &tail), 2, "key %s", key);
	cr_assert(s >= 0 && s < NSHARDS && k >= 0 && k < PER_SHARD, "key %s",
		  key);
	*s_out = s;
	return &samples[s][k];
}

static void check_read(struct dataset *ds, uint32_t i)
{
	int s;
	const struct sample *m = by_key(dataset_key(ds, i), &s);
	uint8_t *buf = xmalloc(m->size + 16);

	ssize_t r = dataset_read(ds, i, 0, m->size + 16, buf);
	cr_assert_eq(r, (ssize_t)m->size, "sample %u: %zd", i, r);
	cr_assert(memcmp(buf, shard_data[s] + m->off, m->size) == 0,
		  "sample %u: bytes differ", i);
	/* A slice in the middle, and nothing at or past the end. */
	r = dataset_read(ds, i, 100, 50, buf);
	cr_assert_eq(r, 50);
	cr_assert(memcmp(buf, shard_data[s] + m->off + 100, 50) == 0);
	cr_assert_eq(dataset_read(ds, i, m->size, 10, buf), 0);
	cr_assert_eq(dataset_read(ds, i, m->size + 5, 10, buf), 0);
	free(buf);
}

Test(dataset, samples_match_what_the_shards_hold)
{
	struct dataset *ds = open_served();

	cr_assert_eq(dataset_nsamples(ds), NSHARDS * PER_SHARD);
	cr_assert_eq(dataset_ngroups(ds), NSHARDS);
	cr_assert_str_eq(dataset_index_from(ds), "built");
	uint64_t total = 0;
	for (int s = 0; s < NSHARDS; s++)
		total += shard_len[s];
	cr_assert_eq(dataset_total_bytes(ds), total);
	for (uint32_t i = 0; i < dataset_nsamples(ds); i++) {
		int s;
		const struct sample *m = by_key(dataset_key(ds, i), &s);
		cr_assert_eq(dataset_size(ds, i), m->size, "sample %u", i);
		cr_assert_str_eq(dataset_label(ds, i), m->label);
		cr_assert_str_eq(dataset_ext(ds, i), "jpg");
		cr_assert_eq(dataset_group(ds, i), (uint32_t)s);
	}
	dataset_close(ds);
}

Test(dataset, reads_return_exact_bytes_and_fill_the_cache)
{
	struct dataset *ds = open_served();
	struct dataset_stats st;

	for (uint32_t i = 0; i < dataset_nsamples(ds); i++)
		check_read(ds, i);
	/* Every group streams into the store; wait for the last commit. */
	for (int t = 0; t < 200; t++) {
		dataset_get_stats(ds, &st);
		if (st.cached_groups == NSHARDS)
			break;
		usleep(100 * 1000);
	}
	cr_assert_eq(st.cached_groups, NSHARDS);
	for (uint32_t g = 0; g < NSHARDS; g++)
		cr_assert_eq(dataset_is_cached(ds, g), 1, "group %u", g);
	/* Building the index streamed every shard into the store (with the
	 * start-up client, whose figures are gone): the reads were hits. */
	cr_assert_gt(st.reads.hits, 0);
	cr_assert_not_null(dataset_store(ds));
	dataset_close(ds);

	/* A second open finds the cached index and serves from the disk
	 * cache alone: the server is gone. */
	fx_server_stop(&srv);
	struct dataset_opts o = opts_for(source);
	char err[512] = "";
	ds = NULL;
	int r = dataset_open(&o, &ds, err, sizeof(err));
	cr_assert_eq(r, 0, "reopen: %s (%s)", strerror(-r), err);
	cr_assert_str_eq(dataset_index_from(ds), "cache");
	for (uint32_t i = 0; i < dataset_nsamples(ds); i++)
		check_read(ds, i);
	dataset_close(ds);
}

Test(dataset, bad_numbers_are_rejected_not_read)
{
	struct dataset *ds = open_served();
	/* members are numbered after the samples: past both is bad */
	uint32_t n = (uint32_t)(dataset_nsamples(ds) + dataset_nmembers(ds));
	char buf[16];

	cr_assert_eq(dataset_read(ds, n, 0, sizeof(buf), buf), -EINVAL);
	cr_assert_eq(dataset_read(ds, UINT32_MAX, 0, sizeof(buf), buf),
		     -EINVAL);
	cr_assert_str_eq(dataset_key(ds, n), "");
	cr_assert_eq(dataset_size(ds, n), 0);
	cr_assert_eq(dataset_is_cached(ds, NSHARDS), 0);
	dataset_prefetch(ds, NSHARDS); /* ignored, no crash */
	dataset_close(ds);
}

/* A loopback port nobody listens on: bound, read back, closed. */
static int unused_port(void)
{
	struct sockaddr_in a = {.sin_family = AF_INET,
				.sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	socklen_t len = sizeof(a);
	int fd = socket(AF_INET, SOCK_STREAM, 0);
	cr_assert_geq(fd, 0);
	cr_assert_eq(bind(fd, (struct sockaddr *)&a, sizeof(a)), 0);
	cr_assert_eq(getsockname(fd, (struct sockaddr *)&a, &len), 0);
	close(fd);
	return ntohs(a.sin_port);
}

Test(dataset, unreachable_server_fails_the_open_with_a_reason)
{
	struct dataset *ds = NULL;
	char err[512] = "";
	char src[96];
	snprintf(src, sizeof(src), "http://127.0.0.1:%d/s{0..2}.tar",
		 unused_port());
	struct dataset_opts o = opts_for(src);
	int r = dataset_open(&o, &ds, err, sizeof(err));

	cr_assert_lt(r, 0);
	cr_assert_null(ds);
	cr_assert_neq(err[0], '\0', "a reason is given");
}

Test(dataset, a_failed_group_fails_its_reads_with_eio_only)
{
	struct dataset *ds = NULL;
	struct dataset_stats st;
	char err[512] = "", path[160];
	uint32_t in0 = UINT32_MAX, in1 = UINT32_MAX;

	/* A cache too small for any shard: every read goes to the server. */
	fx_server_start(&srv, root, tdir, NULL);
	snprintf(source, sizeof(source), "http://127.0.0.1:%d/s{0..%d}.tar",
		 srv.port, NSHARDS - 1);
	struct dataset_opts o = opts_for(source);
	o.cache_size = 4096;
	int r = dataset_open(&o, &ds, err, sizeof(err));
	cr_assert_eq(r, 0, "dataset_open: %s (%s)", strerror(-r), err);
	for (uint32_t i = 0; i < dataset_nsamples(ds); i++) {
		if (dataset_group(ds, i) == 0 && in0 == UINT32_MAX)
			in0 = i;
		if (dataset_group(ds, i) == 1 && in1 == UINT32_MAX)
			in1 = i;
	}
	snprintf(path, sizeof(path), "%s/s1.tar", root);
	cr_assert_eq(unlink(path), 0);

	uint8_t *buf = xmalloc(dataset_size(ds, in1));
	r = (int)dataset_read(ds, in1, 0, dataset_size(ds, in1), buf);
	cr_assert_eq(r, -EIO, "group 1 is gone: %d", r);
	free(buf);
	check_read(ds, in0); /* other groups are unaffected */
	dataset_get_stats(ds, &st);
	cr_assert_gt(st.net.bytes, 0, "group 0 came over the network");
	cr_assert_geq(st.reads.read_errors, 1);
	cr_assert_eq(st.cached_groups, 0);
	dataset_close(ds);
}

Test(dataset, wrap_serves_the_table_without_readers)
{
	struct index *ix = index_new();
	uint32_t a = index_add_shard(ix, "http://h/a.tar", 4096, "");
	uint32_t b = index_add_shard(ix, "http://h/b.tar", 8192, "");
	cr_assert_eq(index_add_sample(ix, a, 512, 100, "cat", "x/one", "jpg"),
		     0);
	cr_assert_eq(index_add_sample(ix, b, 1024, 200, "dog", "two", "png"),
		     0);
	struct dataset *ds = dataset_wrap(ix, NULL);
	char buf[8];

	cr_assert_not_null(ds);
	cr_assert_eq(dataset_nsamples(ds), 2);
	cr_assert_eq(dataset_ngroups(ds), 2);
	cr_assert_eq(dataset_total_bytes(ds), 4096 + 8192);
	cr_assert_str_eq(dataset_key(ds, 0), "x/one");
	cr_assert_str_eq(dataset_label(ds, 1), "dog");
	cr_assert_str_eq(dataset_ext(ds, 1), "png");
	cr_assert_eq(dataset_size(ds, 1), 200);
	cr_assert_eq(dataset_group(ds, 1), b);
	cr_assert_str_eq(dataset_index_from(ds), "given");
	cr_assert_eq(dataset_read(ds, 0, 0, sizeof(buf), buf), -ENXIO);
	cr_assert_eq(dataset_read(ds, 0, 100, sizeof(buf), buf), 0);
	cr_assert_eq(dataset_is_cached(ds, 0), 0);
	cr_assert_null(dataset_store(ds));
	cr_assert_null(dataset_wrap(NULL, NULL));
	dataset_close(ds);
	index_free(ix);
}

/* A group's URL for log lines: the index holds SOURCE's own URL, which may
 * carry a password or a presigned query; neither is given out. */
Test(dataset, group_url_is_redacted)
{
	struct index *ix = index_new();
	uint32_t a = index_add_shard(
		ix, "https://u:pw@h/a-000.tar?X-Amz-Signature=feed", 4096, "");
	uint32_t b = index_add_shard(ix, "http://h/b.tar", 8192, "");
	struct dataset *ds = dataset_wrap(ix, NULL);
	char buf[128], small[12];

	cr_assert_not_null(ds);
	cr_expect_str_eq(dataset_group_url(ds, a, buf, sizeof(buf)),
			 "https://***@h/a-000.tar?***");
	cr_expect_str_eq(dataset_group_url(ds, b, buf, sizeof(buf)),
			 "http://h/b.tar");
	cr_expect_str_eq(dataset_group_url(ds, 2, buf, sizeof(buf)), "");
	/* truncated to fit, never past the buffer */
	cr_expect_eq(strlen(dataset_group_url(ds, b, small, sizeof(small))),
		     sizeof(small) - 1);
	dataset_close(ds);
	index_free(ix);
}

/* Cap this test process's address space at what it maps now plus extra:
 * new threads' stacks (8 MiB each) then fail with EAGAIN. Criterion runs
 * each test in a process of its own, so the cap ends with the test. */
static void cap_address_space(uint64_t extra)
{
	unsigned long long kb = 0;
	char line[256];
	FILE *f = fopen("/proc/self/status", "r");

	cr_assert_not_null(f);
	while (fgets(line, sizeof(line), f))
		if (sscanf(line, "VmSize: %llu kB", &kb) == 1)
			break;
	fclose(f);
	cr_assert_gt(kb, 0ULL, "no VmSize in /proc/self/status");
	struct rlimit rl = {.rlim_cur = kb * 1024 + extra,
			    .rlim_max = RLIM_INFINITY};
	cr_assert_eq(setrlimit(RLIMIT_AS, &rl), 0);
}

/* The index cached first, so the capped open below starts no indexer. */
static struct dataset_opts cached_index_opts(void)
{
	struct dataset *ds = open_served();
	dataset_close(ds);
	return opts_for(source);
}

/* A failed start of the decode workers keeps its errno (EAGAIN: no
 * address space for 64 threads' stacks), with the reason, instead of
 * EINVAL. */
Test(dataset, decode_workers_failure_keeps_its_errno)
{
	struct dataset_opts o = cached_index_opts();
	struct dataset *ds = NULL;
	char err[512] = "";

	o.image =
		(struct dataset_image_opts){.on = 1, .size = 32, .threads = 64};
	cap_address_space(128 << 20); /* room for 16 stacks, not 64 */
	int r = dataset_open(&o, &ds, err, sizeof(err));
	cr_assert_eq(r, -EAGAIN, "dataset_open: %d %s (%s)", r, strerror(-r),
		     err);
	cr_assert_null(ds);
	cr_expect_str_eq(err, "cannot start decode workers: Resource "
			      "temporarily unavailable");
}

/* The same for the echo pool: its 128 ingest threads (twice the decode
 * workers; a pool that decodes at ingest) cannot start. */
Test(dataset, echo_pool_failure_keeps_its_errno)
{
	struct dataset_opts o = cached_index_opts();
	struct dataset *ds = NULL;
	char err[512] = "";

	o.echo = (struct dataset_echo_opts){
		.on = 1, .echo = 2, .stage = DATASET_STAGE_BEFORE_AUGMENT};
	o.image =
		(struct dataset_image_opts){.on = 1, .size = 32, .threads = 64};
	int r = dataset_open(&o, &ds, err, sizeof(err));
	cr_assert_eq(r, 0, "dataset_open: %s (%s)", strerror(-r), err);
	size_t n = dataset_nsamples(ds);
	uint32_t *cls = xcalloc(n, sizeof(*cls)); /* all class 0 */
	cap_address_space(128 << 20);
	r = dataset_echo_start(ds, cls, 1, err, sizeof(err));
	free(cls);
	cr_expect_eq(r, -EAGAIN, "dataset_echo_start: %d %s (%s)", r,
		     strerror(-r), err);
	cr_expect_str_eq(err, "cannot start the echo pool: Resource "
			      "temporarily unavailable");
	cr_expect_not(dataset_echoes(ds));
	dataset_close(ds);
}

/* The echo face: takes hand out a sample's own bytes, counted once
 * committed; one pool at a time; none without dataset_echo_start. */
Test(dataset, echo_takes_serve_the_samples_bytes)
{
	struct dataset_opts o = cached_index_opts();
	struct dataset *ds = NULL;
	struct dataset_sample *s = NULL;
	struct dataset_stats st;
	char err[512] = "";

	o.echo = (struct dataset_echo_opts){.on = 1, .echo = 2};
	cr_assert_eq(dataset_open(&o, &ds, err, sizeof(err)), 0, "%s", err);
	cr_assert_not(dataset_converts(ds), "no image options: no outputs");
	cr_assert_eq(dataset_echo_take(ds, 0, &s), -ENXIO);
	cr_assert_null(s);
	size_t n = dataset_nsamples(ds);
	uint32_t *cls = xcalloc(n, sizeof(*cls)); /* all class 0 */
	cr_assert_eq(dataset_echo_start(ds, cls, 1, err, sizeof(err)), 0);
	cr_assert(dataset_echoes(ds));
	cr_assert_eq(dataset_echo_start(ds, cls, 1, err, sizeof(err)), -EBUSY);
	free(cls);
	cr_assert_eq(dataset_echo_take(ds, 0, &s), 0);
	int sh;
	const struct sample *m =
		by_key(dataset_key(ds, dataset_sample_id(s)), &sh);
	cr_assert_eq(dataset_sample_len(s), m->size);
	cr_assert(memcmp(dataset_sample_data(s), shard_data[sh] + m->off,
			 m->size) == 0);
	dataset_echo_commit(ds, s);
	dataset_echo_release(ds, s);
	dataset_get_stats(ds, &st);
	cr_expect_eq(st.echo.fresh_served + st.echo.echoes_served, 1);
	cr_expect_eq(dataset_echo_set(ds, 3, DATASET_ECHO_FIXED), 0);
	double e;
	enum dataset_echo_mode mode;
	dataset_echo_get(ds, &e, &mode);
	cr_expect_float_eq(e, 3.0, 1e-12);
	cr_expect_eq(mode, DATASET_ECHO_FIXED);
	cr_expect_str_eq(dataset_echo_mode_name(mode), "fixed");
	dataset_echo_end(ds);
	cr_expect_not(dataset_echoes(ds));
	dataset_close(ds);
}

/* A preprocessing exact mount converts through the face; these samples
 * are random bytes, so the conversion fails with EIO (counted). */
Test(dataset, converted_reads_go_through_the_outputs)
{
	struct dataset_opts o = cached_index_opts();
	struct dataset *ds = NULL;
	struct dataset_output *out = NULL;
	struct dataset_stats st;
	char err[512] = "";

	o.image =
		(struct dataset_image_opts){.on = 1, .size = 32, .threads = 1};
	cr_assert_eq(dataset_open(&o, &ds, err, sizeof(err)), 0, "%s", err);
	cr_assert(dataset_converts(ds));
	cr_expect_lt(dataset_output_fixed_size(ds), 0, "JPEG: not fixed");
	int r = dataset_output_get(ds, 0, &out);
	cr_expect_lt(r, 0, "random bytes converted: %d", r);
	cr_expect_null(out);
	dataset_get_stats(ds, &st);
	cr_expect_eq(st.outputs.rejected, 1);
	dataset_close(ds);
}

/* Issue 50: exact first marks a sample bad only when its image is (these
 * are random bytes: every image is bad). A sample whose shard cannot be
 * fetched fails its own path's check with the fetch's EIO, is not marked
 * (its path would read another sample for good, and the pool skip it),
 * is not counted as an image error, and the next check asks again. */
Test(dataset, a_failed_fetch_of_an_own_output_is_no_bad_image)
{
	struct dataset *ds = NULL;
	struct dataset_stats st;
	char err[512] = "", path[160];
	uint32_t in0 = UINT32_MAX, in1 = UINT32_MAX;

	fx_server_start(&srv, root, tdir, NULL);
	snprintf(source, sizeof(source), "http://127.0.0.1:%d/s{0..%d}.tar",
		 srv.port, NSHARDS - 1);
	struct dataset_opts o = opts_for(source);
	o.cache_size = 4096; /* every read goes to the server */
	o.echo = (struct dataset_echo_opts){.on = 1, .echo = 2};
	o.image =
		(struct dataset_image_opts){.on = 1, .size = 32, .threads = 1};
	cr_assert_eq(dataset_open(&o, &ds, err, sizeof(err)), 0, "%s", err);
	size_t n = dataset_nsamples(ds);
	uint32_t *cls = xcalloc(n, sizeof(*cls)); /* all class 0 */
	cr_assert_eq(dataset_echo_start(ds, cls, 1, err, sizeof(err)), 0, "%s",
		     err);
	free(cls);
	for (uint32_t i = 0; i < n; i++) {
		if (dataset_group(ds, i) == 0 && in0 == UINT32_MAX)
			in0 = i;
		if (dataset_group(ds, i) == 1 && in1 == UINT32_MAX)
			in1 = i;
	}
	snprintf(path, sizeof(path), "%s/s1.tar", root);
	cr_assert_eq(unlink(path), 0);

	cr_expect_eq(dataset_echo_check_own(ds, in1), -EIO);
	cr_expect_not(dataset_echo_known_bad(ds, in1),
		      "a failed fetch marked the sample bad");
	cr_expect_eq(dataset_echo_check_own(ds, in1), -EIO);
	dataset_get_stats(ds, &st);
	cr_expect_eq(st.outputs.misses, 2, "asked again: %lu",
		     (unsigned long)st.outputs.misses);
	cr_expect_eq(st.outputs.rejected, 0);
	/* A bad image is marked, counted once, and not made again. */
	cr_expect_lt(dataset_echo_check_own(ds, in0), 0);
	cr_expect(dataset_echo_known_bad(ds, in0));
	cr_expect_eq(dataset_echo_check_own(ds, in0), -EIO);
	dataset_get_stats(ds, &st);
	cr_expect_eq(st.outputs.misses, 3);
	cr_expect_eq(st.outputs.rejected, 1);
	dataset_close(ds);
}
