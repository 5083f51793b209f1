/* test_outputs.c - the converted-output cache of preprocessing exact mounts
 * (cache/image/outputs.c), on real shards served by the fault server:
 * bytes, hits and misses, LRU eviction, held outputs, bad images. */
#include <criterion/criterion.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cache/image/outputs.h"
#include "cache/image/prep.h"
#include "cache/image/transform.h"
#include "cache/store/shards.h"
#include "common/util.h"
#include "fetch/format/index.h"
#include "fetch/net/http.h"
#include "fixtures.h"

/* Samples 0..NGOOD-1 are images (two alternating), sample NGOOD is corrupt. */
#define NGOOD (OUTPUTS_SLOTS + 6)
#define BAD NGOOD

/* cdir: fx_tree_make names it; no store here, so it stays unmade. */
static char tdir[FX_TDIR_MAX], root[FX_PATH_MAX], cdir[FX_PATH_MAX];
static struct fx_server srv;
static struct http *h;
static struct index *ix;
static struct shards *sh;
static struct prep *prep;
static uint8_t *img[2];
static size_t img_len[2];
static const struct transform_opts topts = {
	.size = 32, .crop = 32, .format = TF_PPM};

/* One shard: NGOOD images then a corrupt one, and its index. */
static void make_data(void)
{
	struct tarw t = {0};
	uint64_t off[NGOOD + 1], size[NGOOD + 1];
	size_t blen, tlen;
	uint8_t *bad = fx_load_img("corrupt.jpg", &blen), *tar;
	char name[64], url[128];

	img[0] = fx_load_img("photo.jpg", &img_len[0]);
	img[1] = fx_load_img("gray.jpg", &img_len[1]);
	for (int i = 0; i <= NGOOD; i++) {
		snprintf(name, sizeof(name), "k%03d.jpg", i);
		size[i] = i == BAD ? blen : img_len[i % 2];
		off[i] = tarw_add(&t, name, i == BAD ? bad : img[i % 2],
				  size[i]);
	}
	fx_shard_finish(&t, root, 0, &tar, &tlen);
	fx_server_start(&srv, root, tdir, NULL);
	ix = index_new();
	snprintf(url, sizeof(url), "http://127.0.0.1:%d/s0.tar", srv.port);
	index_add_shard(ix, url, tlen, "");
	for (int i = 0; i <= NGOOD; i++) {
		snprintf(name, sizeof(name), "k%03d", i);
		cr_assert_eq(index_add_sample(ix, 0, off[i], size[i], "0", name,
					      "jpg"),
			     0);
	}
	free(tar);
	free(bad);
}

static void setup(void)
{
	char err[256];
	struct http_opts ho = {.connections = 4,
			       .retry_budget_s = 8,
			       .backoff_base_s = 0.05,
			       .low_speed_time_s = 3};

	fx_tree_make("outputs", tdir, root, cdir);
	cr_assert_eq(http_global_init(), 0);
	cr_assert_eq(http_open(&ho, &h, err, sizeof(err)), 0, "http_open: %s",
		     err);
	make_data();
	/* No store: every miss is a range GET of just the sample. */
	cr_assert_eq(shards_open(ix, h, NULL, NULL, &sh), 0);
	cr_assert_not_null(sh);
	cr_assert_eq(prep_open(&topts, 2, &prep), 0);
	cr_assert_not_null(prep);
}

static void teardown(void)
{
	prep_free(prep);
	shards_free(sh);
	index_free(ix);
	fx_server_stop(&srv);
	http_free(h);
	free(img[0]);
	free(img[1]);
	fx_rm_tree(tdir);
}

TestSuite(outputs, .init = setup, .fini = teardown, .timeout = 90);

static void stats(struct outputs *o, uint64_t hits, uint64_t misses,
		  uint64_t rejected)
{
	struct outputs_stats st;
	outputs_get_stats(o, &st);
	cr_assert_eq(st.hits, hits, "hits %lu", (unsigned long)st.hits);
	cr_assert_eq(st.misses, misses, "misses %lu", (unsigned long)st.misses);
	cr_assert_eq(st.rejected, rejected, "rejected %lu",
		     (unsigned long)st.rejected);
}

/* get + check the bytes against the transform run directly + put. */
static void get_check(struct outputs *o, uint32_t sample)
{
	struct output *x;
	uint8_t *ref;
	size_t reflen;

	cr_assert_eq(outputs_get(o, sample, &x), 0, "sample %u", sample);
	fx_transform_ref(&topts, img[sample % 2], img_len[sample % 2], 0, &ref,
			 &reflen);
	cr_assert_eq(x->sample, sample);
	cr_assert_eq(x->len, reflen, "sample %u", sample);
	cr_assert(memcmp(x->data, ref, reflen) == 0, "sample %u bytes", sample);
	free(ref);
	outputs_put(o, x);
}

Test(outputs, bytes_are_the_transform_and_a_second_get_hits)
{
	struct outputs *o = outputs_new(ix, sh, prep);
	get_check(o, 0);
	get_check(o, 1);
	stats(o, 0, 2, 0);
	get_check(o, 0);
	stats(o, 1, 2, 0);
	outputs_free(o);
	outputs_free(NULL);
	outputs_get_stats(NULL, &(struct outputs_stats){0});
}

Test(outputs, the_least_recently_used_goes_first)
{
	struct outputs *o = outputs_new(ix, sh, prep);
	struct output *x;
	uint32_t n = OUTPUTS_SLOTS;

	for (uint32_t i = 0; i < n; i++) /* every slot filled */
		get_check(o, i);
	get_check(o, 0); /* 0 is now the most recent; 1 the least */
	get_check(o, n); /* evicts 1 */
	stats(o, 1, n + 1, 0);
	get_check(o, 0); /* still there */
	stats(o, 2, n + 1, 0);
	cr_assert_eq(outputs_get(o, 1, &x), 0); /* gone: made again */
	outputs_put(o, x);
	stats(o, 2, n + 2, 0);
	cr_assert_eq(outputs_get(o, 2, &x), 0); /* 1 took 2's place */
	outputs_put(o, x);
	stats(o, 2, n + 3, 0);
	outputs_free(o);
}

Test(outputs, held_outputs_are_never_evicted)
{
	struct outputs *o = outputs_new(ix, sh, prep);
	struct output *held[OUTPUTS_SLOTS], *x, *y;

	for (uint32_t i = 0; i < OUTPUTS_SLOTS; i++)
		cr_assert_eq(outputs_get(o, i, &held[i]), 0);
	/* Every slot held: a new output is served but not cached. */
	cr_assert_eq(outputs_get(o, OUTPUTS_SLOTS, &x), 0);
	cr_assert_eq(outputs_get(o, OUTPUTS_SLOTS, &y), 0);
	cr_assert_neq(x, y, "an uncached output was shared");
	outputs_put(o, x);
	outputs_put(o, y);
	stats(o, 0, OUTPUTS_SLOTS + 2, 0);
	for (uint32_t i = 0; i < OUTPUTS_SLOTS; i++) {
		cr_assert_eq(outputs_get(o, i, &x), 0); /* all still cached */
		cr_assert_eq(x, held[i]);
		outputs_put(o, x);
		outputs_put(o, held[i]);
	}
	stats(o, OUTPUTS_SLOTS, OUTPUTS_SLOTS + 2, 0);
	outputs_free(o);
}

Test(outputs, a_bad_image_is_rejected_each_time_and_not_cached)
{
	struct outputs *o = outputs_new(ix, sh, prep);
	struct output *x = NULL;

	cr_assert_eq(outputs_get(o, BAD, &x), -EBADMSG);
	cr_assert_eq(outputs_get(o, BAD, &x), -EBADMSG);
	cr_assert_null(x);
	stats(o, 0, 2, 1); /* an image error counts once per file */
	get_check(o, 0); /* others unaffected */
	outputs_free(o);
}

/* Issue 20: the index gives a sample's size and make() allocated that much
 * unchecked (the pool refuses past POOL_SAMPLE_MAX). A sample whose index
 * size is the largest an index holds (INDEX_SAMPLE_MAX, 4 GiB - 1), in a
 * shard the index claims is 128 GiB: refused with
 * -EFBIG before any allocation or request, counted and logged as an image
 * error once, others unaffected. */
Test(outputs, a_sample_above_the_cap_is_refused_before_reading)
{
	char url[128];
	snprintf(url, sizeof(url), "http://127.0.0.1:%d/s0.tar", srv.port);
	uint32_t big = index_add_shard(ix, url, 128ULL << 30, "");
	cr_assert_eq(index_add_sample(ix, big, 0, INDEX_SAMPLE_MAX, "0", "huge",
				      "jpg"),
		     0);
	uint32_t huge = (uint32_t)ix->nsamples - 1;
	/* The shard readers size their tables at open: open them again over
	 * the grown index. */
	shards_free(sh);
	cr_assert_eq(shards_open(ix, h, NULL, NULL, &sh), 0);
	cr_assert_not_null(sh);
	struct outputs *o = outputs_new(ix, sh, prep);
	struct output *x = NULL;

	int r = outputs_get(o, huge, &x);
	cr_assert_eq(r, -EFBIG, "first get: %d", r);
	cr_assert_eq(outputs_get(o, huge, &x), -EFBIG);
	cr_assert_null(x);
	stats(o, 0, 2, 1);
	get_check(o, 0);
	outputs_free(o);
}

/* Issue 50: only the image's own fault makes a sample bad. A sample whose
 * shard cannot be fetched (404) fails with the read's errno, is neither
 * counted nor marked (outputs_bad: a later get may succeed), and every get
 * asks again; a corrupt image is marked. */
Test(outputs, a_failed_read_is_no_bad_image)
{
	char url[128];
	snprintf(url, sizeof(url), "http://127.0.0.1:%d/gone.tar", srv.port);
	uint32_t gone = index_add_shard(ix, url, 4096, "");
	cr_assert_eq(index_add_sample(ix, gone, 512, 1000, "0", "far", "jpg"),
		     0);
	uint32_t far = (uint32_t)ix->nsamples - 1;
	shards_free(sh); /* sized at open: open again over the grown index */
	cr_assert_eq(shards_open(ix, h, NULL, NULL, &sh), 0);
	struct outputs *o = outputs_new(ix, sh, prep);
	struct output *x = NULL;

	cr_assert_eq(outputs_get(o, far, &x), -EIO);
	cr_assert_null(x);
	cr_expect_not(outputs_bad(o, far), "a failed fetch marked it bad");
	cr_assert_eq(outputs_get(o, far, &x), -EIO);
	stats(o, 0, 2, 0); /* asked twice, no image error */
	cr_expect_eq(outputs_get(o, BAD, &x), -EBADMSG);
	cr_expect(outputs_bad(o, BAD));
	cr_expect_not(outputs_bad(o, 0));
	cr_expect_not(outputs_bad(NULL, 0));
	outputs_free(o);
}
