/* test_prep.c - the decode worker pool, through its public API only:
 * results equal the transform run directly, errors with reasons, many
 * callers at once, prepare + augment, shutdown. */
#include <criterion/criterion.h>
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cache/image/prep.h"
#include "cache/image/transform.h"
#include "common/util.h"
#include "fixtures.h"

static const struct transform_opts jpeg_opts = {.size = 64,
						.crop = 56,
						.random_crop = 1,
						.flip_prob_half = 1,
						.format = TF_JPEG};

Test(prep, apply_gives_the_transform_bytes)
{
	size_t len, outlen, reflen;
	uint8_t *in = fx_load_img("photo.jpg", &len), *out, *ref;
	struct prep *p;
	cr_assert_eq(prep_open(&jpeg_opts, 2, &p), 0);
	char why[160] = "";

	cr_assert_not_null(p);
	for (uint64_t rand = 0; rand < 4; rand++) {
		cr_assert_eq(prep_apply(p, in, len, rand, &out, &outlen, why,
					sizeof(why)),
			     0, "%s", why);
		fx_transform_ref(&jpeg_opts, in, len, rand, &ref, &reflen);
		cr_assert_eq(outlen, reflen);
		cr_assert(memcmp(out, ref, outlen) == 0, "rand %lu differs",
			  (unsigned long)rand);
		free(out);
		free(ref);
	}
	prep_free(p);
	free(in);
}

Test(prep, bad_images_fail_with_errno_and_reason)
{
	static const struct {
		const char *file;
		int err;
	} cases[] = {
		{"corrupt.jpg", -EBADMSG},
		{"animated.webp", -ENOTSUP},
	};
	struct prep *p;
	cr_assert_eq(prep_open(&jpeg_opts, 1, &p), 0);
	cr_assert_not_null(p);
	for (size_t i = 0; i < ARRAY_SIZE(cases); i++) {
		size_t len, outlen;
		uint8_t *in = fx_load_img(cases[i].file, &len), *out = NULL;
		char why[160] = "";
		int r = prep_apply(p, in, len, 0, &out, &outlen, why,
				   sizeof(why));
		cr_assert_eq(r, cases[i].err, "%s: %d (%s)", cases[i].file, r,
			     why);
		cr_assert_neq(why[0], '\0', "%s: no reason", cases[i].file);
		free(in);
	}
	/* NULL why is allowed. */
	uint8_t *out;
	size_t outlen;
	cr_assert_lt(prep_apply(p, "junk", 4, 0, &out, &outlen, NULL, 0), 0);
	prep_free(p);
}

Test(prep, prepare_then_augment_equals_apply)
{
	size_t len, plen, alen, reflen;
	uint8_t *in = fx_load_img("photo.jpg", &len), *prepared, *aug, *ref;
	struct prep *p;
	cr_assert_eq(prep_open(&jpeg_opts, 2, &p), 0);
	char why[160] = "";

	cr_assert_not_null(p);
	cr_assert_eq(
		prep_prepare(p, in, len, &prepared, &plen, why, sizeof(why)), 0,
		"%s", why);
	for (uint64_t rand = 10; rand < 14; rand++) {
		cr_assert_eq(prep_augment(p, prepared, plen, rand, &aug, &alen,
					  why, sizeof(why)),
			     0, "%s", why);
		fx_transform_ref(&jpeg_opts, in, len, rand, &ref, &reflen);
		cr_assert_eq(alen, reflen, "rand %lu", (unsigned long)rand);
		cr_assert(memcmp(aug, ref, alen) == 0);
		free(aug);
		free(ref);
	}
	/* Not a prepared buffer. */
	cr_assert_eq(prep_augment(p, in, len, 0, &aug, &alen, why, sizeof(why)),
		     -EINVAL);
	cr_assert(strstr(why, "augment"), "%s", why);
	free(prepared);
	prep_free(p);
	free(in);
}

Test(prep, fixed_size_only_for_cropped_ppm)
{
	struct transform_opts ppm = {.size = 64, .crop = 56, .format = TF_PPM};
	struct transform_opts nocrop = {.size = 64, .format = TF_PPM};
	struct prep *a, *b, *c;

	cr_assert_eq(prep_open(&ppm, 1, &a), 0);
	cr_assert_eq(prep_open(&nocrop, 1, &b), 0);
	cr_assert_eq(prep_open(&jpeg_opts, 1, &c), 0);

	cr_assert_eq(prep_fixed_size(a), transform_output_size(&ppm, 56, 56));
	cr_assert_gt(prep_fixed_size(a), 56 * 56 * 3);
	cr_assert_eq(prep_fixed_size(b), -ENOTSUP);
	cr_assert_eq(prep_fixed_size(c), -ENOTSUP);
	prep_free(a);
	prep_free(b);
	prep_free(c);
}

/* ---- many callers ---- */

#define CALLERS 12
#define PER_CALLER 6

struct caller {
	struct prep *p;
	const uint8_t *in;
	size_t len;
	unsigned id;
	uint8_t *out[PER_CALLER];
	size_t outlen[PER_CALLER];
	int r[PER_CALLER];
};

static void *caller_main(void *arg)
{
	struct caller *c = arg;
	for (int k = 0; k < PER_CALLER; k++)
		c->r[k] = prep_apply(c->p, c->in, c->len,
				     (uint64_t)(c->id * PER_CALLER + k),
				     &c->out[k], &c->outlen[k], NULL, 0);
	return NULL;
}

Test(prep, many_callers_each_get_their_own_result, .timeout = 60)
{
	size_t len;
	uint8_t *in = fx_load_img("photo.jpg", &len);
	/* 2 workers: 8 queue slots for 12 callers, so submitters also wait
	 * for room. */
	struct prep *p;
	cr_assert_eq(prep_open(&jpeg_opts, 2, &p), 0);
	struct caller c[CALLERS];
	pthread_t t[CALLERS];

	cr_assert_not_null(p);
	for (unsigned i = 0; i < CALLERS; i++) {
		c[i] = (struct caller){.p = p, .in = in, .len = len, .id = i};
		cr_assert_eq(pthread_create(&t[i], NULL, caller_main, &c[i]),
			     0);
	}
	for (unsigned i = 0; i < CALLERS; i++)
		pthread_join(t[i], NULL);
	for (unsigned i = 0; i < CALLERS; i++)
		for (int k = 0; k < PER_CALLER; k++) {
			uint8_t *ref;
			size_t reflen;
			cr_assert_eq(c[i].r[k], 0);
			fx_transform_ref(&jpeg_opts, in, len,
			       (uint64_t)(i * PER_CALLER + k), &ref, &reflen);
			cr_assert_eq(c[i].outlen[k], reflen);
			cr_assert(memcmp(c[i].out[k], ref, reflen) == 0,
				  "caller %u job %d got another's bytes", i, k);
			free(ref);
			free(c[i].out[k]);
		}
	prep_free(p);
	free(in);
}

/* Threads of this process now, from /proc/self/status. */
static long threads_now(void)
{
	char line[256];
	long n = -1;
	FILE *f = fopen("/proc/self/status", "r");

	cr_assert_not_null(f);
	while (fgets(line, sizeof(line), f))
		if (sscanf(line, "Threads: %ld", &n) == 1)
			break;
	fclose(f);
	cr_assert_gt(n, 0, "no Threads: line");
	return n;
}

/* Idle workers sleep on a condition variable with no timeout: only the
 * shutdown's wake-up ends them, so a missed one hangs prep_free into the
 * test's timeout. Each free returns with every worker joined. */
Test(prep, shutdown_of_idle_pools_is_prompt, .timeout = 60)
{
	struct prep *warm;

	/* A sanitizer's runtime starts its own thread at the process's first
	 * pthread_create: one pool opened and freed first lets the count
	 * below see only the workers. */
	cr_assert_eq(prep_open(&jpeg_opts, 1, &warm), 0);
	prep_free(warm);
	long base = threads_now();

	for (int i = 0; i < 20; i++) {
		struct prep *p;
		cr_assert_eq(prep_open(&jpeg_opts, 8, &p), 0);
		cr_assert_eq(threads_now(), base + 8, "pool %d", i);
		prep_free(p);
		cr_assert_eq(threads_now(), base, "pool %d left workers", i);
	}
	prep_free(NULL);
}
