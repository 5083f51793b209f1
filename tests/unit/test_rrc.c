/* test_rrc.c - unit tests for RandomResizedCrop (cache/image/rrc.c): the
 * boxes' area and aspect distributions against torchvision's get_params
 * (reference boxes in tests/data/rrc, made by make_ref.py there), the
 * fallback, and the crop in the transform (transform_augment). */
#include "cache/image/rrc.h"
#include "cache/image/transform.h"

#include <criterion/criterion.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

TestSuite(rrc, .timeout = 120);

#define DRAWS 100000
#define REF_MAX 20000

/* Reads tests/data/rrc/ref_<w>x<h>.txt ("w h" lines) into bw/bh; returns
 * the count. Skips when the data directory is not given. */
static size_t load_ref(unsigned w, unsigned h, unsigned *bw, unsigned *bh)
{
	const char *dir = getenv("ECHOFS_TEST_DATA");
	if (!dir)
		cr_skip_test("ECHOFS_TEST_DATA not set (run through meson test)");
	char path[512];
	snprintf(path, sizeof(path), "%s/rrc/ref_%ux%u.txt", dir, w, h);
	FILE *f = fopen(path, "r");
	cr_assert_not_null(f, "missing reference %s", path);
	size_t n = 0;
	while (n < REF_MAX && fscanf(f, "%u %u", &bw[n], &bh[n]) == 2)
		n++;
	fclose(f);
	cr_assert_gt(n, 1000, "reference %s too short", path);
	return n;
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return (x > y) - (x < y);
}

/* The two-sample Kolmogorov-Smirnov statistic D (ties handled: both
 * samples step past equal values together). Sorts a and b. */
static double ks_d(double *a, size_t n, double *b, size_t m)
{
	qsort(a, n, sizeof(*a), cmp_double);
	qsort(b, m, sizeof(*b), cmp_double);
	size_t i = 0, j = 0;
	double d = 0;
	while (i < n && j < m) {
		double v = a[i] < b[j] ? a[i] : b[j];
		while (i < n && a[i] == v)
			i++;
		while (j < m && b[j] == v)
			j++;
		double gap = fabs((double)i / n - (double)j / m);
		if (gap > d)
			d = gap;
	}
	return d;
}

/* D at which the two-sample KS test rejects at alpha = 0.001. */
static double ks_crit(size_t n, size_t m)
{
	return 1.949 * sqrt((double)(n + m) / ((double)n * m));
}

struct ks {
	double area, ratio, crit;
};

/* KS statistics of DRAWS boxes of rrc_box(p) on a w x h image against the
 * torchvision reference for that size (drawn with the default ranges). */
static struct ks compare(unsigned w, unsigned h, const struct rrc_params *p)
{
	static unsigned rw[REF_MAX], rh[REF_MAX];
	size_t m = load_ref(w, h, rw, rh);
	double *a = malloc(DRAWS * sizeof(double));
	double *r = malloc(DRAWS * sizeof(double));
	double *ra = malloc(m * sizeof(double)), *rr = malloc(m * sizeof(double));
	cr_assert(a && r && ra && rr);
	double area = (double)w * h;
	for (size_t i = 0; i < DRAWS; i++) {
		struct rrc_box b;
		cr_assert_eq(rrc_box(w, h, p, i * 0x9E3779B97F4A7C15ULL + 7, &b),
			     0);
		a[i] = b.w * (double)b.h / area;
		r[i] = (double)b.w / b.h;
	}
	for (size_t i = 0; i < m; i++) {
		ra[i] = rw[i] * (double)rh[i] / area;
		rr[i] = (double)rw[i] / rh[i];
	}
	struct ks k = {ks_d(a, DRAWS, ra, m), ks_d(r, DRAWS, rr, m),
		       ks_crit(DRAWS, m)};
	free(a);
	free(r);
	free(ra);
	free(rr);
	return k;
}

/* The default ranges draw what torchvision draws: on a resized photo
 * (341x256, most tries succeed) and on a wide strip (900x120, where half
 * the draws end in the centre-crop fallback). */
Test(rrc, distribution_matches_torchvision)
{
	static const unsigned sizes[][2] = {{341, 256}, {900, 120}};
	for (size_t i = 0; i < 2; i++) {
		struct ks k = compare(sizes[i][0], sizes[i][1], NULL);
		cr_log_info("%ux%u: D area %.4f ratio %.4f (reject above %.4f)",
			    sizes[i][0], sizes[i][1], k.area, k.ratio, k.crit);
		cr_expect_lt(k.area, k.crit, "%ux%u area D %.4f >= %.4f",
			     sizes[i][0], sizes[i][1], k.area, k.crit);
		cr_expect_lt(k.ratio, k.crit, "%ux%u ratio D %.4f >= %.4f",
			     sizes[i][0], sizes[i][1], k.ratio, k.crit);
	}
}

/* The test has the power to see a wrong range: a scale of 0.2-1 or a
 * ratio of 1/2-2 instead of torchvision's is rejected. */
Test(rrc, distribution_test_rejects_wrong_ranges)
{
	struct rrc_params scale = {.scale = {0.2, 1.0}};
	struct ks k = compare(341, 256, &scale);
	cr_expect_gt(k.area, k.crit, "scale 0.2-1 not told apart: D %.4f",
		     k.area);
	struct rrc_params ratio = {.ratio = {0.5, 2.0}};
	k = compare(341, 256, &ratio);
	cr_expect_gt(k.ratio, k.crit, "ratio 1/2-2 not told apart: D %.4f",
		     k.ratio);
}

/* A 1000x10 strip fits no box of at least 8% of its area within the ratio
 * range: every draw is get_params's fallback, the centre 13x10 (w =
 * round(10 * 4/3)). */
Test(rrc, fallback_is_the_centre_clamped_to_the_ratio)
{
	for (uint64_t s = 0; s < 100; s++) {
		struct rrc_box b;
		cr_assert_eq(rrc_box(1000, 10, NULL, s, &b), 0);
		cr_assert(b.w == 13 && b.h == 10 && b.x == 493 && b.y == 0,
			  "box %ux%u+%u+%u", b.w, b.h, b.x, b.y);
	}
	/* A tall strip: h = round(10 / (3/4)) = 13. */
	struct rrc_box b;
	cr_assert_eq(rrc_box(10, 1000, NULL, 1, &b), 0);
	cr_assert(b.w == 10 && b.h == 13 && b.x == 0 && b.y == 493);
}

Test(rrc, boxes_inside_and_deterministic)
{
	for (uint64_t s = 0; s < 20000; s++) {
		struct rrc_box a, b;
		unsigned w = 1 + (unsigned)(s % 97) * 7, h = 1 + (unsigned)(s % 89) * 5;
		cr_assert_eq(rrc_box(w, h, NULL, s, &a), 0);
		cr_assert_eq(rrc_box(w, h, NULL, s, &b), 0);
		cr_assert(a.w >= 1 && a.h >= 1 && a.x + a.w <= w &&
				  a.y + a.h <= h,
			  "%ux%u: box %ux%u+%u+%u", w, h, a.w, a.h, a.x, a.y);
		cr_assert(memcmp(&a, &b, sizeof(a)) == 0);
	}
}

Test(rrc, bad_ranges_refused)
{
	static const struct rrc_params bad[] = {
		{.scale = {0, 1}, .ratio = {1, 1}},
		{.scale = {0.5, 0.4}},
		{.scale = {0.5, 1.5}},
		{.ratio = {2, 1}},
		{.ratio = {-1, 1}},
	};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		struct rrc_box b;
		cr_expect_eq(rrc_check(&bad[i]), -EINVAL, "case %zu", i);
		cr_expect_eq(rrc_box(100, 100, &bad[i], 1, &b), -EINVAL);
	}
	cr_expect_eq(rrc_check(NULL), 0);
}

static struct image grad(unsigned w, unsigned h)
{
	struct image im = {w, h, malloc((size_t)w * h * 3)};
	cr_assert_not_null(im.rgb);
	for (size_t i = 0; i < (size_t)w * h * 3; i++)
		im.rgb[i] = (uint8_t)(i * 7 + i / 3);
	return im;
}

/* Through the transform: every serve is crop x crop whatever box was
 * drawn, draws differ, the same draw gives the same bytes, and the
 * range renderer (which cannot resample a range alone) says so. */
Test(rrc, transform_augment_makes_crop_by_crop)
{
	struct transform_ctx *tc = transform_ctx_new();
	struct image im = grad(341, 256);
	struct transform_opts o = {.size = 256, .crop = 224, .random_crop = 1,
				   .rrc = 1, .format = TF_PPM};
	uint8_t *a, *b, *c;
	size_t al, bl, cl;
	cr_assert_eq(transform_augment(tc, &o, &im, 1, &a, &al), 0);
	cr_assert_eq(transform_augment(tc, &o, &im, 1, &b, &bl), 0);
	cr_assert_eq(transform_augment(tc, &o, &im, 2, &c, &cl), 0);
	cr_assert_eq(al, transform_ppm_size(224, 224));
	cr_assert(al == bl && memcmp(a, b, al) == 0);
	cr_assert(al == cl && memcmp(a, c, al) != 0);
	uint8_t dst[64];
	cr_assert_eq(transform_augment_ppm(&o, &im, 1, 0, dst, sizeof(dst)),
		     -ENOTSUP);
	free(c);
	o.crop = 0;
	cr_assert_eq(transform_augment(tc, &o, &im, 1, &c, &cl), -EINVAL);
	free(a);
	free(b);
	transform_image_free(&im);
	transform_ctx_free(tc);
}
