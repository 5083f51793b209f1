/* test_shards_demand.c - demand first in the shard manager
 * (cache/store/shards_demand.c): on a tracked (exact) mount, a reader
 * whose shard is not local gets its sample by a range GET without waiting
 * for the shard, whole shards download in the order of the most waited
 * for, a server that refuses ranges falls back to whole shards with one
 * log line, and the time readers waited for the network is counted. Run
 * against the Python fault server and a real disk store. */
#include "cache/store/shards.h"

#include "cache/store/store.h"
#include "common/file.h"
#include "common/log.h"
#include "common/util.h"
#include "fetch/format/index.h"
#include "fetch/format/sums.h"
#include "fetch/net/http.h"
#include "fixtures.h"

#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define NSHARDS 4
#define PER_SHARD 24

struct sample {
	uint64_t off, size;
};

static char tdir[64], root[96], cdir[96];
static uint8_t *shard_data[NSHARDS];
static size_t shard_len[NSHARDS];
static struct sample samples[NSHARDS][PER_SHARD];
static struct fx_server srv;
static struct http *h;

static void make_shards(void)
{
	unsigned seed = 4646;
	for (int s = 0; s < NSHARDS; s++) {
		struct tarw t = {0};
		char name[64];
		for (int k = 0; k < PER_SHARD; k++) {
			size_t n = 1000 + (size_t)(rand_r(&seed) % 250000);
			uint8_t *img = fx_random_bytes(&seed, n);
			snprintf(name, sizeof(name), "s%d_%04d.jpg", s, k);
			samples[s][k].off = tarw_add(&t, name, img, n);
			samples[s][k].size = n;
			snprintf(name, sizeof(name), "s%d_%04d.cls", s, k);
			tarw_add(&t, name, "3\n", 2);
			free(img);
		}
		fx_shard_finish(&t, root, s, &shard_data[s], &shard_len[s]);
	}
}

static void setup(void)
{
	fx_tree_make("shards_demand", tdir, root, cdir);
	make_shards();
	h = fx_http_open(8, 8);
}

static void teardown(void)
{
	fx_shards_teardown(&srv, &h, shard_data, NSHARDS, tdir);
}

TestSuite(shards_demand, .init = setup, .fini = teardown, .timeout = 90);

/* An index of the served shards with every sample and its checksum. */
static struct index *make_index(void)
{
	struct index *ix = fx_shards_index(srv.port, shard_len, NSHARDS);

	for (int s = 0; s < NSHARDS; s++) {
		ix->shards[s].sum = sums_of(shard_data[s], shard_len[s]);
		for (int k = 0; k < PER_SHARD; k++) {
			const struct sample *m = &samples[s][k];
			char key[32];
			snprintf(key, sizeof(key), "s%d_%04d", s, k);
			cr_assert_eq(index_add_sample(ix, (uint32_t)s, m->off,
						      m->size, "3", key, "jpg"),
				     0);
			ix->samples[ix->nsamples - 1].sum =
				sums_of(shard_data[s] + m->off, m->size);
		}
	}
	ix->has_sums = true;
	return ix;
}

/* shards over a fresh store, every sample tracked (an exact mount). */
static struct shards *open_tracked(const struct shards_opts *o,
				   struct index **ix, struct store **st)
{
	uint32_t view[NSHARDS * PER_SHARD];
	struct shards *sh;
	char err[256];

	*ix = make_index();
	cr_assert_eq(store_open(cdir, 1ULL << 30, st, err, sizeof(err)), 0,
		     "%s", err);
	cr_assert_eq(shards_open(*ix, h, *st, o, &sh), 0);
	for (uint32_t i = 0; i < NSHARDS * PER_SHARD; i++)
		view[i] = i;
	cr_assert_eq(shards_track(sh, view, NSHARDS * PER_SHARD), 0);
	return sh;
}

static void close_all(struct shards *sh, struct store *st, struct index *ix)
{
	shards_free(sh);
	store_close(st);
	index_free(ix);
}

/* The smallest sample of shard s (cheap to fetch through a slow link). */
static int smallest(int s)
{
	int best = 0;
	for (int k = 1; k < PER_SHARD; k++)
		if (samples[s][k].size < samples[s][best].size)
			best = k;
	return best;
}

static void check_sample(struct shards *sh, int s, int k)
{
	const struct sample *m = &samples[s][k];
	uint8_t *buf = xmalloc(m->size);
	ssize_t r;

	shards_note(sh, (uint32_t)(s * PER_SHARD + k)); /* as dataset_read */
	r = shards_read(sh, (uint32_t)s, m->off, m->size, buf);

	cr_assert_eq(r, (ssize_t)m->size, "shard %d sample %d: %zd", s, k, r);
	cr_assert(memcmp(buf, shard_data[s] + m->off, m->size) == 0,
		  "shard %d sample %d: bytes differ", s, k);
	free(buf);
}

/* Shards that take about 30 s each at the server's pace: a reader of a
 * sample in each of them gets its bytes by range GETs, long before any
 * shard is complete, while at most two whole-shard downloads run. */
Test(shards_demand, samples_come_before_their_shards)
{
	const char *faults[] = {"*.tar=slow:100000", NULL};
	struct index *ix;
	struct store *st;
	struct shards_stats ss;
	struct shards *sh;

	fx_server_start(&srv, root, tdir, faults);
	sh = open_tracked(NULL, &ix, &st);
	for (int s = NSHARDS - 1; s >= 0; s--)
		check_sample(sh, s, smallest(s));
	shards_get_stats(sh, &ss);
	cr_expect_eq(ss.fetched_shards, 0, "a reader waited for a shard");
	cr_expect_eq(ss.demand_ranges, NSHARDS);
	cr_expect_eq(ss.range_reads, NSHARDS);
	cr_expect_eq(ss.read_errors, 0);
	cr_expect_leq(ss.active + ss.queued, 2, "%llu + %llu downloads",
		      (unsigned long long)ss.active,
		      (unsigned long long)ss.queued);
	cr_expect_gt(ss.range_bytes, 0);
	cr_expect_gt(ss.net_wait_s, 0);
	cr_expect_float_eq(ss.net_wait_pass_s, ss.net_wait_s, 1e-9);
	close_all(sh, st, ix);
}

/* Without tracking (the echo pool's shards), nothing changes: a reader
 * waits for the stream (here a fast one) and no range GET is made. */
Test(shards_demand, untracked_readers_wait_for_the_stream)
{
	struct index *ix;
	struct store *st;
	struct shards_stats ss;
	struct shards *sh;
	char err[256];

	fx_server_start(&srv, root, tdir, NULL);
	ix = make_index();
	cr_assert_eq(store_open(cdir, 1ULL << 30, &st, err, sizeof(err)), 0);
	cr_assert_eq(shards_open(ix, h, st, NULL, &sh), 0);
	check_sample(sh, 2, PER_SHARD - 1);
	shards_get_stats(sh, &ss);
	cr_expect_eq(ss.range_reads, 0);
	cr_expect_eq(ss.demand_ranges, 0);
	close_all(sh, st, ix);
}

/* One download at a time (one worker): while shard 0 streams, readers
 * wait once on shard 1, three times on shard 2 and twice on shard 3 (each
 * served by a range GET); shard 2 is the next downloaded, then 3. */
Test(shards_demand, most_waited_shard_downloads_next)
{
	const char *faults[] = {"*.tar=slow:1000000", NULL};
	struct shards_opts o = {.workers = 1};
	static const int order[] = {1, 2, 3, 2, 3, 2};
	struct index *ix;
	struct store *st;
	struct shards *sh;

	fx_server_start(&srv, root, tdir, faults);
	sh = open_tracked(&o, &ix, &st);
	check_sample(sh, 0, smallest(0)); /* shard 0 starts */
	for (size_t i = 0; i < sizeof(order) / sizeof(order[0]); i++) {
		int s = order[i], k = (int)(i % 2) + smallest(s) % 2;
		check_sample(sh, s, k);
	}
	for (int i = 0; i < 3000 && !shards_is_cached(sh, 2); i++)
		usleep(10000);
	cr_assert(shards_is_cached(sh, 2), "shard 2 never cached");
	cr_expect(!shards_is_cached(sh, 3), "shard 3 came before 2");
	cr_expect(!shards_is_cached(sh, 1), "shard 1 came before 2");
	close_all(sh, st, ix);
}

/* The log of this test (Criterion runs each in its own process). */
static void log_to(char *path, size_t n)
{
	snprintf(path, n, "%s/demand.log", tdir);
	unlink(path);
	cr_assert_eq(log_set_file(path), 0);
}

static int count_lines(const char *path, const char *needle)
{
	char *text = NULL, *p;
	size_t len;
	int n = 0;

	cr_assert_eq(file_read_all(path, 1 << 20, &text, &len), 0);
	for (p = text; (p = strstr(p, needle)) != NULL; p++)
		n++;
	free(text);
	return n;
}

/* A server that answers ranges with the whole shard: the first refusal
 * turns range reads off for the mount (one log line, counted), its reader
 * and every later one read from whole shards, bytes intact. */
Test(shards_demand, refused_ranges_fall_back_to_whole_shards)
{
	const char *faults[] = {"*.tar=ignore-range", NULL};
	struct index *ix;
	struct store *st;
	struct shards_stats ss;
	struct shards *sh;
	char log[128];

	log_to(log, sizeof(log));
	fx_server_start(&srv, root, tdir, faults);
	sh = open_tracked(NULL, &ix, &st);
	for (int s = 0; s < NSHARDS; s++)
		check_sample(sh, s, PER_SHARD - 1 - s);
	shards_get_stats(sh, &ss);
	cr_expect_eq(ss.ranges_refused, 1, "%llu",
		     (unsigned long long)ss.ranges_refused);
	cr_expect_eq(ss.demand_ranges, 0);
	cr_expect_eq(ss.range_reads, 0);
	cr_expect_eq(ss.read_errors, 0);
	cr_expect_geq(ss.fetched_shards, 1);
	close_all(sh, st, ix);
	cr_expect_eq(count_lines(log, "refuses range requests"), 1);
}

/* Reader time waiting for the network, per pass: a pass read cold from
 * the network, the next one from the cache (no wait). */
Test(shards_demand, network_wait_per_pass)
{
	struct index *ix;
	struct store *st;
	struct shards_stats ss;
	struct shards *sh;
	char log[128];

	log_to(log, sizeof(log));
	log_set_level(LOG_LEVEL_INFO);
	fx_server_start(&srv, root, tdir, NULL);
	sh = open_tracked(NULL, &ix, &st);
	for (int s = 0; s < NSHARDS; s++)
		for (int k = 0; k < PER_SHARD; k++)
			if (s < NSHARDS - 1 || k < PER_SHARD - 1)
				check_sample(sh, s, k);
	/* The read that completes a pass counts in the next one (its sample
	 * is noted first): make it a cache hit, so pass 2 starts at 0. */
	for (int i = 0; i < 3000 && !shards_all_local(sh); i++)
		usleep(10000);
	cr_assert(shards_all_local(sh));
	check_sample(sh, NSHARDS - 1, PER_SHARD - 1);
	shards_get_stats(sh, &ss);
	cr_assert_eq(ss.passes, 1);
	cr_expect_gt(ss.net_wait_last_pass_s, 0);
	cr_expect_float_eq(ss.net_wait_last_pass_s, ss.net_wait_s, 1e-9);
	cr_expect_float_eq(ss.net_wait_pass_s, 0, 1e-9);
	for (int s = 0; s < NSHARDS; s++)
		for (int k = 0; k < PER_SHARD; k++)
			check_sample(sh, s, k);
	shards_get_stats(sh, &ss);
	cr_assert_eq(ss.passes, 2);
	cr_expect_float_eq(ss.net_wait_last_pass_s, 0, 1e-9,
			   "a warm pass waited %g s", ss.net_wait_last_pass_s);
	close_all(sh, st, ix);
	cr_expect_eq(count_lines(log, "for the network"), 2);
	cr_expect_eq(count_lines(log, "pass 2 read: readers waited 0.0 s"), 1);
}
