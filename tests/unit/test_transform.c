/* test_transform.c - unit tests for the image engine (cache/image/transform.c
 * and the JPEG and PPM decoders it picks, jpegdec.c and ppmdec.c). */
#include "cache/image/transform.h"

#include <criterion/criterion.h>
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static struct transform_ctx *tc;

static void setup(void)
{
	tc = transform_ctx_new();
	cr_assert_not_null(tc);
}

static void teardown(void)
{
	transform_ctx_free(tc);
	tc = NULL;
}

TestSuite(transform, .init = setup, .fini = teardown, .timeout = 60);

/* Reads tests/data/img/<name>; skips the test when the data is missing. */
static uint8_t *load(const char *name, size_t *len)
{
	const char *dir = getenv("ECHOFS_TEST_DATA");
	if (!dir)
		cr_skip_test(
			"ECHOFS_TEST_DATA not set (run through meson test)");
	char path[512];
	snprintf(path, sizeof(path), "%s/img/%s", dir, name);
	FILE *f = fopen(path, "rb");
	cr_assert_not_null(f, "missing fixture %s", path);
	fseek(f, 0, SEEK_END);
	long n = ftell(f);
	fseek(f, 0, SEEK_SET);
	uint8_t *b = malloc((size_t)n + 1);
	cr_assert_not_null(b);
	cr_assert_eq(fread(b, 1, (size_t)n, f), (size_t)n);
	fclose(f);
	*len = (size_t)n;
	return b;
}

/* A deterministic smooth-plus-texture RGB image. */
static struct image synth(unsigned w, unsigned h, unsigned seed)
{
	struct image im = {w, h, malloc((size_t)w * h * 3)};
	cr_assert_not_null(im.rgb);
	for (unsigned y = 0; y < h; y++)
		for (unsigned x = 0; x < w; x++) {
			uint8_t *p = im.rgb + ((size_t)y * w + x) * 3;
			p[0] = (uint8_t)(x * 255 / w);
			p[1] = (uint8_t)(128 + 100 * sin((x + y * seed) / 9.0));
			p[2] = (uint8_t)(((x / 7) ^ (y / 5) ^ seed) * 29);
		}
	return im;
}

static double psnr(const uint8_t *a, const uint8_t *b, size_t n)
{
	double se = 0;
	for (size_t i = 0; i < n; i++) {
		double d = (double)a[i] - b[i];
		se += d * d;
	}
	if (se == 0)
		return 99.0;
	return 10 * log10(255.0 * 255.0 / (se / n));
}

static struct image decode_ok(const void *buf, size_t len, unsigned hint)
{
	struct image im;
	char why[128] = "";
	int r = transform_decode(tc, buf, len, hint, 0, &im, why, sizeof(why));
	cr_assert_eq(r, 0, "decode: %d %s", r, why);
	return im;
}

/* ---- scaled decode -------------------------------------------------- */

struct dec_case {
	const char *file;
	unsigned hint, w, h;
};

Test(transform, decode_dimensions)
{
	static const struct dec_case cases[] = {
		{"photo.jpg", 0, 500, 375},
		{"photo.jpg", 64, 125, 94},
		{"photo.jpg", 256, 375, 282},
		{"photo.jpg", 300, 438, 329},
		{"photo.jpg", 375, 500, 375},
		{"photo.jpg", 1000, 500, 375},
		{"photo.jpg", 47, 63, 47},
		{"photo.jpg", 1, 63, 47},
		{"progressive.jpg", 64, 100, 75},
		{"gray.jpg", 0, 120, 90},
		{"cmyk.jpg", 0, 32, 32},
		{"photo444.jpg", 99, 127, 99},
		{"photo444.jpg", 100, 153, 118},
		{"small.ppm", 10, 40, 30}, /* PPM: no DCT scaling */
	};
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		const struct dec_case *c = &cases[i];
		size_t len;
		uint8_t *b = load(c->file, &len);
		struct image im = decode_ok(b, len, c->hint);
		cr_expect(im.w == c->w && im.h == c->h,
			  "%s hint %u: got %ux%u, want %ux%u", c->file, c->hint,
			  im.w, im.h, c->w, c->h);
		transform_image_free(&im);
		free(b);
	}
}

/* For every hint, the factor M/8 is the smallest whose shorter side is still
 * >= hint: never below the hint, and (M-1)/8 would be. */
Test(transform, decode_picks_smallest_factor)
{
	size_t len;
	uint8_t *b = load("photo.jpg", &len);
	for (unsigned hint = 1; hint <= 400; hint += 7) {
		unsigned m = 8;
		for (unsigned k = 1; k <= 8; k++)
			if ((375 * k + 7) / 8 >= hint) {
				m = k;
				break;
			}
		struct image im = decode_ok(b, len, hint);
		cr_expect_eq(im.h, (375 * m + 7) / 8, "hint %u", hint);
		cr_expect_eq(im.w, (500 * m + 7) / 8, "hint %u", hint);
		if (hint <= 375)
			cr_expect_geq(im.h, hint, "hint %u went below", hint);
		transform_image_free(&im);
	}
	free(b);
}

Test(transform, grayscale_becomes_rgb)
{
	size_t len;
	uint8_t *b = load("gray.jpg", &len);
	struct image im = decode_ok(b, len, 0);
	size_t grey = 0, n = (size_t)im.w * im.h;
	for (size_t i = 0; i < n; i++)
		grey += im.rgb[3 * i] == im.rgb[3 * i + 1] &&
			im.rgb[3 * i] == im.rgb[3 * i + 2];
	cr_expect_eq(grey, n);
	transform_image_free(&im);
	free(b);
}

/* Pillow wrote four flat CMYK quadrants; RGB = (255-C)(255-K)/255 etc. */
Test(transform, cmyk_converts_to_rgb)
{
	static const int ink[4][4] = {{0, 0, 0, 0},
				      {255, 0, 0, 0},
				      {0, 128, 255, 0},
				      {40, 40, 40, 128}};
	size_t len;
	uint8_t *b = load("cmyk.jpg", &len);
	struct image im = decode_ok(b, len, 0);
	cr_assert(im.w == 32 && im.h == 32);
	for (int q = 0; q < 4; q++) {
		unsigned x = (q % 2) * 16 + 8, y = (q / 2) * 16 + 8;
		const uint8_t *p = im.rgb + ((size_t)y * 32 + x) * 3;
		for (int c = 0; c < 3; c++) {
			int want = (255 - ink[q][c]) * (255 - ink[q][3]) / 255;
			cr_expect(abs(p[c] - want) <= 8,
				  "quadrant %d channel %d: %d, want %d", q, c,
				  p[c], want);
		}
	}
	transform_image_free(&im);
	free(b);
}

/* ---- hostile input -------------------------------------------------- */

struct bad_case {
	const char *file;
	int err;
	const char *why; /* substring of the reason, or NULL */
};

static const struct bad_case bad_cases[] = {
	{"truncated.jpg", -EBADMSG, NULL},
	{"corrupt.jpg", -EBADMSG, NULL},
	{"huge.jpg", -EFBIG, "pixels"},
	{"twelve_bit.jpg", -ENOTSUP, "12-bit"},
	{"scanbomb.jpg", -EBADMSG, "500 scans"},
	{"deep.ppm", -ENOTSUP, "maxval"},
	{"huge.ppm", -EFBIG, NULL},
};

Test(transform, hostile_files_fail_cleanly)
{
	struct transform_opts o = {.size = 64, .crop = 56, .format = TF_JPEG};
	struct transform_opts lo = {.crop = 8, .flip_prob_half = 1};
	for (size_t i = 0; i < sizeof(bad_cases) / sizeof(bad_cases[0]); i++) {
		const struct bad_case *c = &bad_cases[i];
		size_t len;
		uint8_t *b = load(c->file, &len);
		struct image im;
		char why[160] = "";
		int r = transform_decode(tc, b, len, 0, 0, &im, why,
					 sizeof(why));
		cr_expect_eq(r, c->err, "%s: %d (%s)", c->file, r, why);
		cr_expect_null(im.rgb);
		if (c->why)
			cr_expect_not_null(strstr(why, c->why), "%s: why '%s'",
					   c->file, why);
		uint8_t *out = NULL;
		size_t olen = 0;
		r = transform_apply(tc, &o, b, len, 7, &out, &olen, NULL, 0);
		cr_expect_eq(r, c->err, "%s apply: %d", c->file, r);
		cr_expect_null(out);
		/* The lossless path (no resize) must refuse them too. */
		for (uint64_t rnd = 0; rnd < 2; rnd++) {
			r = transform_apply(tc, &lo, b, len, rnd, &out, &olen,
					    why, sizeof(why));
			cr_expect_lt(r, 0, "%s lossless: %d", c->file, r);
			free(out);
			out = NULL;
		}
		free(b);
	}
}

/* Every proper prefix of a JPEG is truncated: an error, never a crash or a
 * half-grey image. */
Test(transform, every_truncation_fails)
{
	size_t len;
	uint8_t *b = load("progressive.jpg", &len);
	for (size_t n = 0; n < len - 2; n += 13) {
		uint8_t *cut =
			malloc(n + 1); /* exact size: ASan sees overreads */
		memcpy(cut, b, n);
		struct image im;
		int r = transform_decode(tc, cut, n, 32, 0, &im, NULL, 0);
		cr_expect_lt(r, 0, "prefix %zu decoded", n);
		free(cut);
	}
	free(b);
}

Test(transform, garbage_and_empty)
{
	static const uint8_t junk[] = {0xFF, 0xD8, 0xFF, 0xE0, 0x00, 0x01};
	struct image im;
	cr_expect_eq(transform_decode(tc, junk, 0, 0, 0, &im, NULL, 0),
		     -EBADMSG);
	cr_expect_eq(transform_decode(tc, "hello", 5, 0, 0, &im, NULL, 0),
		     -EBADMSG);
	cr_expect_eq(
		transform_decode(tc, junk, sizeof(junk), 0, 0, &im, NULL, 0),
		-EBADMSG);
	cr_expect_eq(
		transform_decode(tc, "P6\n4 4\n255\n", 11, 0, 0, &im, NULL, 0),
		-EBADMSG);
}

/* The pixel cap from opts applies to the declared size. */
Test(transform, max_pixels_is_enforced)
{
	size_t len;
	uint8_t *b = load("photo.jpg", &len);
	struct image im;
	cr_expect_eq(
		transform_decode(tc, b, len, 0, 500 * 375 - 1, &im, NULL, 0),
		-EFBIG);
	cr_expect_eq(transform_decode(tc, b, len, 0, 500 * 375, &im, NULL, 0),
		     0);
	transform_image_free(&im);
	free(b);
}

/* ---- a failure leaves the context as new ------------------------------ */

/* Each way into TurboJPEG, given one input: 0 or a negative errno. */
static int via_probe(const uint8_t *b, size_t len, char *why, size_t wl)
{
	unsigned w, h;
	return transform_probe(tc, b, len, 0, &w, &h, why, wl);
}

static int via_decode(const uint8_t *b, size_t len, char *why, size_t wl)
{
	struct image im;
	int r = transform_decode(tc, b, len, 100, 0, &im, why, wl);
	transform_image_free(&im);
	return r;
}

static int via_apply(const struct transform_opts *o, const uint8_t *b,
		     size_t len, char *why, size_t wl)
{
	uint8_t *out = NULL;
	size_t olen = 0;
	int r = transform_apply(tc, o, b, len, 3, &out, &olen, why, wl);
	free(out);
	return r;
}

static int via_ppm(const uint8_t *b, size_t len, char *why, size_t wl)
{
	struct transform_opts o = {.size = 64, .format = TF_PPM};
	return via_apply(&o, b, len, why, wl);
}

static int via_lossless(const uint8_t *b, size_t len, char *why, size_t wl)
{
	struct transform_opts o = {.crop = 64, .flip_prob_half = 1};
	return via_apply(&o, b, len, why, wl);
}

static int via_prepare(const uint8_t *b, size_t len, char *why, size_t wl)
{
	struct transform_opts o = {.size = 64, .format = TF_JPEG};
	struct image im;
	int r = transform_prepare(tc, &o, b, len, &im, why, wl);
	transform_image_free(&im);
	return r;
}

static int (*const entry_points[])(const uint8_t *, size_t, char *, size_t) = {
	via_probe, via_decode, via_ppm, via_lossless, via_prepare,
};

/* Issue 21: a JPEG that made libjpeg fail inside the header left the
 * context's TurboJPEG handle mid-parse, so every later JPEG through that
 * worker failed with the bad one's message. One context: each bad file
 * through each entry point, then the good photo through every entry point
 * must succeed, and no reason may name the bad file's error. */
Test(transform, a_failed_jpeg_leaves_the_context_as_new)
{
	static const char *const bad[] = {"zero_size.jpg", "bad_marker.jpg",
					  "garbage_scan.jpg", "corrupt.jpg",
					  "truncated.jpg"};
	size_t glen;
	uint8_t *good = load("photo.jpg", &glen);
	size_t n_ep = sizeof(entry_points) / sizeof(entry_points[0]);
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		size_t len;
		uint8_t *b = load(bad[i], &len);
		for (size_t e = 0; e < n_ep; e++) {
			char why[160] = "";
			int r = entry_points[e](b, len, why, sizeof(why));
			/* probe reads the header only: a bad scan is fine */
			if (e != 0 || i < 2)
				cr_expect_lt(r, 0, "%s via %zu: %d", bad[i], e,
					     r);
			for (size_t g = 0; g < n_ep; g++) {
				why[0] = 0;
				r = entry_points[g](good, glen, why,
						    sizeof(why));
				cr_expect_eq(r, 0,
					     "photo.jpg via %zu after %s via "
					     "%zu: %d (%s)",
					     g, bad[i], e, r, why);
			}
		}
		free(b);
	}
	free(good);
}

/* ---- resize --------------------------------------------------------- */

/* Straightforward reference: each output pixel is the exact area average of
 * the source rectangle it covers (double precision, 2-D at once). */
static void ref_box(const struct image *in, struct image *out)
{
	double sx = (double)in->w / out->w, sy = (double)in->h / out->h;
	for (unsigned oy = 0; oy < out->h; oy++)
		for (unsigned ox = 0; ox < out->w; ox++) {
			double acc[3] = {0}, area = 0;
			double x0 = ox * sx, x1 = x0 + sx;
			double y0 = oy * sy, y1 = y0 + sy;
			for (unsigned y = (unsigned)y0; y < y1 && y < in->h;
			     y++)
				for (unsigned x = (unsigned)x0;
				     x < x1 && x < in->w; x++) {
					double a =
						(fmin(x1, x + 1) -
						 fmax(x0, x)) *
						(fmin(y1, y + 1) - fmax(y0, y));
					const uint8_t *p =
						in->rgb +
						((size_t)y * in->w + x) * 3;
					for (int c = 0; c < 3; c++)
						acc[c] += a * p[c];
					area += a;
				}
			uint8_t *d = out->rgb + ((size_t)oy * out->w + ox) * 3;
			for (int c = 0; c < 3; c++)
				d[c] = (uint8_t)(acc[c] / area + 0.5);
		}
}

struct rs_case {
	unsigned w, h, s, ow, oh;
};

Test(transform, resize_matches_reference_box)
{
	static const struct rs_case cases[] = {
		{500, 375, 256, 341, 256}, {500, 375, 64, 85, 64},
		{375, 500, 224, 224, 299}, {97, 61, 30, 48, 30},
		{300, 300, 299, 299, 299}, {1000, 20, 7, 350, 7},
	};
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		const struct rs_case *c = &cases[i];
		struct image in = synth(c->w, c->h, (unsigned)i + 3), out;
		cr_assert_eq(transform_resize(&in, c->s, &out), 0);
		cr_expect(out.w == c->ow && out.h == c->oh, "%ux%u->%u: %ux%u",
			  c->w, c->h, c->s, out.w, out.h);
		struct image ref = {out.w, out.h,
				    malloc((size_t)out.w * out.h * 3)};
		ref_box(&in, &ref);
		double p = psnr(out.rgb, ref.rgb, (size_t)out.w * out.h * 3);
		cr_expect_geq(p, 35.0, "%ux%u->%u: PSNR %.1f dB", c->w, c->h,
			      c->s, p);
		transform_image_free(&in);
		transform_image_free(&out);
		transform_image_free(&ref);
	}
}

/* Every pixel, not just the PSNR: the horizontal pass runs a fixed count
 * of taps per column, a window near the right edge starting earlier with
 * its weights moved along, and in SIMD on x86; a misplaced weight would
 * show at single columns (the last ones first), which a PSNR over the
 * image can hide. Downscales of 1x to 3x (2 to 4 taps) of narrow and wide
 * rows, each pixel within 1 of the exact area average. */
Test(transform, resize_every_pixel_within_one_of_reference)
{
	const unsigned h = 9; /* the shorter side: out is h / s as wide */
	for (unsigned w = h; w <= 80; w++)
		for (unsigned s = 3; s <= h; s++) {
			struct image in = synth(w, h, w * 131 + s), out;
			cr_assert_eq(transform_resize(&in, s, &out), 0);
			struct image ref = {out.w, out.h,
					    malloc((size_t)out.w * out.h * 3)};
			ref_box(&in, &ref);
			for (size_t i = 0; i < (size_t)out.w * out.h * 3; i++)
				cr_assert(abs((int)out.rgb[i] - (int)ref.rgb[i]) <= 1,
					  "%ux%u -> %ux%u: byte %zu is %d, reference %d",
					  w, h, out.w, out.h, i, out.rgb[i], ref.rgb[i]);
			transform_image_free(&in);
			transform_image_free(&out);
			transform_image_free(&ref);
		}
}

/* Upscaling is bilinear: a 2-pixel ramp doubled keeps its ends and orders. */
Test(transform, resize_upscale_bilinear)
{
	struct image in = synth(40, 30, 1), out;
	cr_assert_eq(transform_resize(&in, 90, &out), 0);
	cr_expect(out.w == 120 && out.h == 90);
	/* Flat image stays flat, exactly. */
	struct image flat = {5, 4, malloc(60)}, big;
	memset(flat.rgb, 77, 60);
	cr_assert_eq(transform_resize(&flat, 13, &big), 0);
	for (size_t i = 0; i < (size_t)big.w * big.h * 3; i++)
		cr_assert_eq(big.rgb[i], 77);
	/* Round trip down then up stays close on a smooth image. */
	struct image sm = {64, 64, malloc(64 * 64 * 3)}, up;
	for (unsigned i = 0; i < 64 * 64; i++)
		for (int c = 0; c < 3; c++)
			sm.rgb[3 * i + c] = (uint8_t)((i % 64) * 2 + c * 40);
	cr_assert_eq(transform_resize(&sm, 128, &up), 0);
	for (unsigned y = 0; y < 128; y++)
		for (unsigned x = 2; x < 126; x++) {
			int v = up.rgb[((size_t)y * 128 + x) * 3];
			double want = ((x + 0.5) / 2 - 0.5) * 2;
			cr_assert(fabs(v - want) <= 1.0, "(%u,%u) %d vs %.1f",
				  x, y, v, want);
		}
	transform_image_free(&in);
	transform_image_free(&out);
	transform_image_free(&flat);
	transform_image_free(&big);
	transform_image_free(&sm);
	transform_image_free(&up);
}

/* ---- crop and flip -------------------------------------------------- */

Test(transform, random_crops_stay_inside)
{
	static const unsigned dims[][3] = {{341, 256, 224},
					   {256, 256, 256},
					   {300, 225, 1},
					   {230, 229, 224}};
	for (size_t i = 0; i < sizeof(dims) / sizeof(dims[0]); i++) {
		unsigned w = dims[i][0], h = dims[i][1], c = dims[i][2];
		unsigned minx = w, maxx = 0, miny = h, maxy = 0;
		for (uint64_t r = 0; r < 20000; r++) {
			unsigned x, y;
			cr_assert_eq(
				transform_crop_origin(w, h, c, 1, r, &x, &y),
				0);
			cr_assert(x + c <= w && y + c <= h);
			minx = x < minx ? x : minx;
			maxx = x > maxx ? x : maxx;
			miny = y < miny ? y : miny;
			maxy = y > maxy ? y : maxy;
		}
		/* Every position is reachable, edges included. */
		cr_expect(minx == 0 && maxx == w - c, "x in [%u,%u]", minx,
			  maxx);
		cr_expect(miny == 0 && maxy == h - c, "y in [%u,%u]", miny,
			  maxy);
	}
	unsigned x, y;
	cr_expect_eq(transform_crop_origin(100, 50, 51, 1, 0, &x, &y), -EINVAL);
	cr_expect_eq(transform_crop_origin(100, 50, 0, 0, 0, &x, &y), -EINVAL);
}

Test(transform, centre_crop_is_centred)
{
	struct image in = synth(341, 256, 2), out;
	unsigned x, y;
	cr_assert_eq(transform_crop_origin(341, 256, 224, 0, 99, &x, &y), 0);
	cr_expect(x == 58 && y == 16, "%u,%u", x, y);
	cr_assert_eq(transform_crop(&in, x, y, 224, 224, &out), 0);
	/* Pixel-exact copy of the window. */
	for (unsigned j = 0; j < 224; j++)
		cr_assert(!memcmp(out.rgb + (size_t)j * 224 * 3,
				  in.rgb + ((size_t)(y + j) * 341 + x) * 3,
				  224 * 3));
	transform_image_free(&out);
	cr_expect_eq(transform_crop(&in, 118, 0, 224, 224, &out), -EINVAL);
	cr_expect_eq(transform_crop(&in, 0, 33, 224, 224, &out), -EINVAL);
	cr_expect_eq(transform_crop(&in, 0, 0, 0, 1, &out), -EINVAL);
	transform_image_free(&in);
}

Test(transform, flip_is_pixel_exact)
{
	static const unsigned widths[] = {1, 2, 7, 224};
	for (size_t i = 0; i < sizeof(widths) / sizeof(widths[0]); i++) {
		unsigned w = widths[i], h = 3;
		struct image im = synth(w, h, 5), orig = synth(w, h, 5);
		transform_flip(&im);
		for (unsigned y = 0; y < h; y++)
			for (unsigned x = 0; x < w; x++)
				cr_assert(!memcmp(
					im.rgb + ((size_t)y * w + x) * 3,
					orig.rgb +
						((size_t)y * w + w - 1 - x) * 3,
					3));
		transform_flip(&im);
		cr_assert(!memcmp(im.rgb, orig.rgb, (size_t)w * h * 3));
		transform_image_free(&im);
		transform_image_free(&orig);
	}
	transform_flip(NULL);
}

/* Over many rands the flip bit is about half set. */
Test(transform, flip_probability_half)
{
	unsigned n = 0;
	for (uint64_t r = 0; r < 10000; r++)
		n += (unsigned)transform_rand_flip(r);
	cr_expect(n > 4700 && n < 5300, "%u flips of 10000", n);
}

/* ---- encode --------------------------------------------------------- */

Test(transform, jpeg_round_trip)
{
	/* Smooth content (JPEG at q90 keeps it well; sharp saturated chroma
	 * edges would not survive 4:2:0 and say nothing about the code). */
	struct image sm = {112, 112, malloc(112 * 112 * 3)};
	for (unsigned i = 0; i < 112 * 112; i++) {
		unsigned x = i % 112, y = i / 112;
		sm.rgb[3 * i] = (uint8_t)(x * 2);
		sm.rgb[3 * i + 1] = (uint8_t)(y * 2);
		sm.rgb[3 * i + 2] = (uint8_t)(128 + 60 * sin(x / 11.0));
	}
	uint8_t *jpg;
	size_t len;
	cr_assert_eq(transform_encode_jpeg(tc, &sm, 90, &jpg, &len), 0);
	cr_assert_gt(len, 100);
	struct image back = decode_ok(jpg, len, 0);
	cr_assert(back.w == 112 && back.h == 112);
	double p = psnr(back.rgb, sm.rgb, 112 * 112 * 3);
	cr_expect_geq(p, 38.0, "q90 round trip PSNR %.1f", p);
	free(jpg);
	cr_expect_eq(transform_encode_jpeg(tc, &sm, 101, &jpg, &len), -EINVAL);
	cr_expect_null(jpg);
	transform_image_free(&sm);
	transform_image_free(&back);
}

Test(transform, ppm_encode_and_decode)
{
	struct image im = synth(13, 7, 4);
	uint8_t *ppm;
	size_t len;
	cr_assert_eq(transform_encode_ppm(&im, &ppm, &len), 0);
	cr_assert_eq(len, transform_ppm_size(13, 7));
	cr_assert_eq(len, strlen("P6\n13 7\n255\n") + 13 * 7 * 3);
	cr_assert(!memcmp(ppm, "P6\n13 7\n255\n", 12));
	struct image back = decode_ok(ppm, len, 0);
	cr_assert(back.w == 13 && back.h == 7);
	cr_assert(!memcmp(back.rgb, im.rgb, 13 * 7 * 3));
	free(ppm);
	transform_image_free(&im);
	transform_image_free(&back);
}

/* ---- pipeline ------------------------------------------------------- */

struct apply_case {
	const char *file;
	struct transform_opts o;
	unsigned w, h;
};

static void ppm_dims(const uint8_t *p, size_t len, unsigned *w, unsigned *h)
{
	char hdr[64];
	size_t n = len < sizeof(hdr) - 1 ? len : sizeof(hdr) - 1;
	memcpy(hdr, p, n);
	hdr[n] = 0;
	cr_assert_eq(sscanf(hdr, "P6\n%u %u\n255\n", w, h), 2);
}

Test(transform, apply_output_dimensions_and_size)
{
	static const struct apply_case cases[] = {
		{"photo.jpg",
		 {.size = 256, .crop = 224, .format = TF_PPM},
		 224,
		 224},
		{"photo.jpg", {.size = 256, .format = TF_PPM}, 341, 256},
		{"photo.jpg", {.size = 64, .format = TF_PPM}, 85, 64},
		{"photo.jpg",
		 {.crop = 100, .random_crop = 1, .format = TF_PPM},
		 100,
		 100},
		{"photo.jpg", {.format = TF_PPM}, 500, 375},
		{"gray.jpg",
		 {.size = 32,
		  .crop = 32,
		  .flip_prob_half = 1,
		  .format = TF_PPM},
		 32,
		 32},
		{"gray.jpg", {.crop = 200, .format = TF_PPM}, 200, 200},
		{"gray.jpg",
		 {.size = 50, .crop = 64, .format = TF_PPM},
		 64,
		 64},
		{"small.ppm", {.size = 15, .format = TF_SAME}, 20, 15},
		{"small.ppm", {.size = 60, .format = TF_PPM}, 80, 60},
		{"cmyk.jpg",
		 {.size = 24, .crop = 20, .format = TF_PPM},
		 20,
		 20},
		{"progressive.jpg",
		 {.size = 100,
		  .crop = 96,
		  .random_crop = 1,
		  .flip_prob_half = 1,
		  .format = TF_PPM},
		 96,
		 96},
	};
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		const struct apply_case *c = &cases[i];
		size_t len;
		uint8_t *b = load(c->file, &len);
		unsigned iw, ih;
		cr_assert_eq(transform_probe(tc, b, len, 0, &iw, &ih, NULL, 0),
			     0);
		ssize_t want = transform_output_size(&c->o, iw, ih);
		for (uint64_t r = 0; r < 4; r++) {
			uint8_t *out;
			size_t olen;
			char why[128] = "";
			int e = transform_apply(tc, &c->o, b, len, r * 977,
						&out, &olen, why, sizeof(why));
			cr_assert_eq(e, 0, "case %zu: %d %s", i, e, why);
			unsigned w, h;
			ppm_dims(out, olen, &w, &h);
			cr_expect(w == c->w && h == c->h,
				  "case %zu: %ux%u want %ux%u", i, w, h, c->w,
				  c->h);
			if (c->o.format == TF_PPM)
				cr_expect_eq((ssize_t)olen, want,
					     "case %zu size", i);
			free(out);
		}
		free(b);
	}
}

Test(transform, output_size_rules)
{
	struct transform_opts o = {.size = 256, .crop = 224, .format = TF_PPM};
	ssize_t s = transform_output_size(&o, 500, 375);
	cr_expect_eq(s,
		     (ssize_t)(strlen("P6\n224 224\n255\n") + 224 * 224 * 3));
	/* With a crop every input gives the same size. */
	cr_expect_eq(transform_output_size(&o, 17, 4000), s);
	cr_expect_eq(transform_output_size(&o, 3000, 3000), s);
	o.format = TF_JPEG;
	cr_expect_eq(transform_output_size(&o, 500, 375), -ENOTSUP);
	o.format = TF_PPM;
	cr_expect_eq(transform_output_size(&o, 0, 375), -EINVAL);
	cr_expect_eq(transform_output_size(&o, 65000, 65000), -EFBIG);
	o.crop = 0;
	/* 1 x 60000 resized to shorter side 256 would be 15 M x 256. */
	cr_expect_eq(transform_output_size(&o, 1, 60000), -EFBIG);
}

/* Echo-before-augment gives the very bytes of the one-call pipeline. */
Test(transform, prepare_augment_equals_apply)
{
	size_t len;
	uint8_t *b = load("photo.jpg", &len);
	struct transform_opts o = {.size = 256,
				   .crop = 224,
				   .random_crop = 1,
				   .flip_prob_half = 1,
				   .format = TF_PPM};
	struct image prep;
	cr_assert_eq(transform_prepare(tc, &o, b, len, &prep, NULL, 0), 0);
	cr_assert(prep.w == 341 && prep.h == 256);
	int differ = 0;
	uint8_t *first = NULL;
	size_t firstlen = 0;
	for (uint64_t r = 0; r < 6; r++) {
		uint8_t *a, *p;
		size_t alen, plen;
		cr_assert_eq(
			transform_apply(tc, &o, b, len, r, &a, &alen, NULL, 0),
			0);
		cr_assert_eq(transform_augment(tc, &o, &prep, r, &p, &plen), 0);
		cr_assert_eq(alen, plen);
		cr_expect(!memcmp(a, p, alen), "rand %llu differs",
			  (unsigned long long)r);
		if (!first) {
			first = a;
			firstlen = alen;
		} else {
			differ |= memcmp(first, a, firstlen) != 0;
			free(a);
		}
		free(p);
	}
	cr_expect(differ, "all rands gave the same crop");
	free(first);
	transform_image_free(&prep);
	free(b);
}

/* Options that draw nothing keep only the centre crop (issue 30: 1.74x
 * fewer bytes in the prepared tier at 256/224), and serving it gives the
 * very bytes of the one-call pipeline, in PPM and in JPEG; a draw (random
 * crop or flip) keeps the whole resized image. */
Test(transform, prepare_without_draws_keeps_the_centre_crop)
{
	size_t len;
	uint8_t *b = load("photo.jpg", &len);
	static const enum transform_format fmts[] = {TF_PPM, TF_JPEG};
	for (size_t i = 0; i < 2; i++) {
		struct transform_opts o = {
			.size = 256, .crop = 224, .format = fmts[i]};
		struct image prep;
		unsigned w, h;
		uint8_t *a, *p;
		size_t alen, plen;
		cr_assert(transform_prepared_is_cut(&o));
		cr_assert_eq(transform_prepared_dims(tc, &o, b, len, &w, &h),
			     0);
		cr_assert(w == 224 && h == 224, "dims %ux%u", w, h);
		cr_assert_eq(transform_prepare(tc, &o, b, len, &prep, NULL, 0),
			     0);
		cr_assert(prep.w == 224 && prep.h == 224);
		cr_assert_eq(
			transform_apply(tc, &o, b, len, 0, &a, &alen, NULL, 0),
			0);
		cr_assert_eq(transform_augment(tc, &o, &prep, 0, &p, &plen), 0);
		cr_assert_eq(alen, plen);
		cr_expect(!memcmp(a, p, alen), "format %d differs", (int)fmts[i]);
		free(a);
		free(p);
		transform_image_free(&prep);
	}
	struct transform_opts d[] = {
		{.size = 256, .crop = 224, .random_crop = 1, .format = TF_PPM},
		{.size = 256, .crop = 224, .flip_prob_half = 1, .format = TF_PPM},
		{.size = 256, .format = TF_PPM},
	};
	for (size_t i = 0; i < 3; i++) {
		unsigned w, h;
		cr_assert(!transform_prepared_is_cut(&d[i]));
		cr_assert_eq(transform_prepared_dims(tc, &d[i], b, len, &w, &h),
			     0);
		cr_assert(w == 341 && h == 256, "case %zu: %ux%u", i, w, h);
	}
	free(b);
}

/* The one-pass PPM serve (transform_augment_ppm) gives the very bytes of
 * crop + flip + encode (transform_augment) for the same draw, whole or in
 * any slices: whole, page-sized pieces back to front, and odd pieces that
 * cut the header, rows and pixels anywhere. */
static void expect_ppm_same(const struct transform_opts *o,
			    const struct image *im, uint64_t rand)
{
	uint8_t *want, *got;
	size_t wlen;

	cr_assert_eq(transform_augment(tc, o, im, rand, &want, &wlen), 0);
	cr_assert_eq(transform_augment_ppm_size(o, im->w, im->h), (ssize_t)wlen);
	got = malloc(wlen + 64);
	cr_assert_not_null(got);
	memset(got, 0xA5, wlen + 64);
	cr_assert_eq(transform_augment_ppm(o, im, rand, 0, got, wlen + 64),
		     (ssize_t)wlen);
	cr_expect(!memcmp(got, want, wlen), "whole: rand %llu differs",
		  (unsigned long long)rand);
	cr_expect_eq(got[wlen], 0xA5, "wrote past the end");
	memset(got, 0, wlen);
	for (size_t end = wlen; end > 0;) {
		size_t start = end > 4096 ? end - 4096 : 0;
		cr_assert_eq(transform_augment_ppm(o, im, rand, start,
						   got + start, end - start),
			     (ssize_t)(end - start));
		end = start;
	}
	cr_expect(!memcmp(got, want, wlen), "pages: rand %llu differs",
		  (unsigned long long)rand);
	memset(got, 0, wlen);
	for (size_t off = 0, step = 1; off < wlen; off += step, step = step * 7 % 1009 + 1) {
		size_t k = wlen - off < step ? wlen - off : step;
		cr_assert_eq(transform_augment_ppm(o, im, rand, off, got + off, k),
			     (ssize_t)k);
	}
	cr_expect(!memcmp(got, want, wlen), "slices: rand %llu differs",
		  (unsigned long long)rand);
	cr_expect_eq(transform_augment_ppm(o, im, rand, wlen, got, 10), 0);
	free(got);
	free(want);
}

Test(transform, augment_ppm_one_pass_equals_augment)
{
	static const struct {
		unsigned w, h, crop;
		int random, flip;
	} cases[] = {
		{341, 256, 224, 1, 1}, {341, 256, 224, 0, 1},
		{341, 256, 224, 1, 0}, {256, 341, 224, 1, 1},
		{57, 31, 31, 1, 1},    {57, 31, 0, 0, 1},
		{1, 1, 1, 1, 1},       {300, 200, 0, 1, 0},
	};
	int flips = 0, noflips = 0;
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		struct image im = synth(cases[i].w, cases[i].h, (unsigned)i + 3);
		struct transform_opts o = {.size = 256,
					   .crop = cases[i].crop,
					   .random_crop = cases[i].random,
					   .flip_prob_half = cases[i].flip,
					   .format = TF_PPM};
		for (uint64_t r = 0; r < 12; r++) {
			expect_ppm_same(&o, &im, r * 0x9E3779B97F4A7C15ULL);
			if (cases[i].flip && transform_rand_flip(r * 0x9E3779B97F4A7C15ULL))
				flips++;
			else
				noflips++;
		}
		transform_image_free(&im);
	}
	cr_expect(flips > 10 && noflips > 10, "draws: %d flips, %d not",
		  flips, noflips);
}

Test(transform, augment_ppm_refuses_bad_arguments)
{
	struct image im = synth(40, 30, 1);
	struct transform_opts o = {.crop = 31, .format = TF_PPM};
	uint8_t buf[64];

	cr_expect_eq(transform_augment_ppm(&o, &im, 0, 0, buf, sizeof(buf)),
		     -EINVAL, "crop larger than the image");
	cr_expect_eq(transform_augment_ppm_size(&o, 40, 30), -EINVAL);
	o.crop = 8;
	o.format = TF_JPEG;
	cr_expect_eq(transform_augment_ppm(&o, &im, 0, 0, buf, sizeof(buf)),
		     -EINVAL, "not PPM");
	o.format = TF_PPM;
	cr_expect_eq(transform_augment_ppm(&o, NULL, 0, 0, buf, sizeof(buf)),
		     -EINVAL);
	cr_expect_eq(transform_augment_ppm_size(&o, 0, 30), -EINVAL);
	cr_expect_eq(transform_augment_ppm(&o, &im, 0, 0, buf, sizeof(buf)),
		     (ssize_t)sizeof(buf));
	transform_image_free(&im);
}

/* ---- lossless ------------------------------------------------------- */

Test(transform, lossless_flip_matches_decode_flip)
{
	size_t len;
	uint8_t *b = load("photo.jpg", &len);
	uint8_t *out;
	size_t olen;
	char why[128] = "";
	cr_assert_eq(transform_lossless(tc, b, len, 0, 0, 1, 0, 0, &out, &olen,
					why, sizeof(why)),
		     0, "%s", why);
	struct image orig = decode_ok(b, len, 0), fl = decode_ok(out, olen, 0);
	/* 4:2:0 MCUs are 16 wide: the partial column of 500 % 16 goes. */
	cr_assert(fl.w == 496 && fl.h == 375, "%ux%u", fl.w, fl.h);
	struct image ref;
	cr_assert_eq(transform_crop(&orig, 0, 0, 496, 375, &ref), 0);
	transform_flip(&ref);
	double p = psnr(fl.rgb, ref.rgb, (size_t)496 * 375 * 3);
	cr_expect_geq(p, 35.0, "lossless flip vs decode+flip: %.1f dB", p);
	free(out);
	transform_image_free(&orig);
	transform_image_free(&fl);
	transform_image_free(&ref);
	free(b);
}

Test(transform, lossless_crop_is_mcu_aligned)
{
	size_t len;
	uint8_t *b = load("photo.jpg", &len);
	struct image orig = decode_ok(b, len, 0);
	struct transform_opts o = {.crop = 224, .format = TF_SAME};
	uint8_t *out;
	size_t olen;
	/* apply with no resize goes lossless: centre (138, 75) rounds down
	 * to the 16-pixel grid, (128, 64). */
	cr_assert_eq(transform_apply(tc, &o, b, len, 0, &out, &olen, NULL, 0),
		     0);
	struct image cr = decode_ok(out, olen, 0), ref;
	cr_assert(cr.w == 224 && cr.h == 224);
	cr_assert_eq(transform_crop(&orig, 128, 64, 224, 224, &ref), 0);
	double p = psnr(cr.rgb, ref.rgb, 224 * 224 * 3);
	cr_expect_geq(p, 35.0, "lossless crop: %.1f dB", p);
	free(out);
	/* Nothing asked: the bytes come back unchanged. */
	struct transform_opts none = {.format = TF_JPEG};
	cr_assert_eq(
		transform_apply(tc, &none, b, len, 0, &out, &olen, NULL, 0), 0);
	cr_expect(olen == len && !memcmp(out, b, len));
	free(out);
	cr_expect_eq(transform_lossless(tc, b, len, 400, 0, 0, 0, 0, &out,
					&olen, NULL, 0),
		     -EINVAL);
	transform_image_free(&orig);
	transform_image_free(&cr);
	transform_image_free(&ref);
	free(b);
}

Test(transform, lossless_random_crops_inside)
{
	size_t len;
	uint8_t *b = load("photo444.jpg", &len); /* 203x157, MCU 8x8 */
	for (uint64_t r = 0; r < 40; r++) {
		uint8_t *out;
		size_t olen;
		cr_assert_eq(transform_lossless(tc, b, len, 100, 1,
						(int)(r & 1), r, 0, &out, &olen,
						NULL, 0),
			     0);
		struct image im = decode_ok(out, olen, 0);
		cr_expect(im.w == 100 && im.h == 100);
		transform_image_free(&im);
		free(out);
	}
	free(b);
}

/* ---- threads -------------------------------------------------------- */

struct job {
	const uint8_t *in;
	size_t len;
	uint8_t *out[8];
	size_t olen[8];
	int err;
};

static void *worker(void *arg)
{
	struct job *j = arg;
	struct transform_ctx *c = transform_ctx_new();
	struct transform_opts o = {.size = 128,
				   .crop = 112,
				   .random_crop = 1,
				   .flip_prob_half = 1,
				   .format = TF_JPEG};
	for (uint64_t r = 0; r < 8; r++)
		j->err |= transform_apply(c, &o, j->in, j->len, r, &j->out[r],
					  &j->olen[r], NULL, 0);
	transform_ctx_free(c);
	return NULL;
}

/* One context per thread: results equal to the single-threaded ones. */
Test(transform, contexts_per_thread)
{
	size_t len;
	uint8_t *b = load("photo.jpg", &len);
	struct job jobs[4];
	pthread_t th[4];
	for (int i = 0; i < 4; i++) {
		memset(&jobs[i], 0, sizeof(jobs[i]));
		jobs[i].in = b;
		jobs[i].len = len;
		cr_assert_eq(pthread_create(&th[i], NULL, worker, &jobs[i]), 0);
	}
	for (int i = 0; i < 4; i++)
		pthread_join(th[i], NULL);
	for (int i = 0; i < 4; i++) {
		cr_expect_eq(jobs[i].err, 0);
		for (int r = 0; r < 8; r++) {
			cr_expect(jobs[i].olen[r] == jobs[0].olen[r] &&
				  !memcmp(jobs[i].out[r], jobs[0].out[r],
					  jobs[0].olen[r]));
		}
	}
	for (int i = 0; i < 4; i++)
		for (int r = 0; r < 8; r++)
			free(jobs[i].out[r]);
	free(b);
}

Test(transform, bad_arguments)
{
	struct image in = synth(10, 10, 1), out;
	cr_expect_eq(transform_resize(&in, 0, &out), -EINVAL);
	cr_expect_eq(transform_resize(NULL, 5, &out), -EINVAL);
	struct transform_opts o = {.quality = 101};
	uint8_t *p;
	size_t n;
	cr_expect_eq(transform_augment(tc, &o, &in, 0, &p, &n), -EINVAL);
	o.quality = 90;
	o.crop = 11;
	cr_expect_eq(transform_augment(tc, &o, &in, 0, &p, &n), -EINVAL);
	transform_image_free(&in);
	transform_image_free(NULL);
	transform_ctx_free(NULL);
}

/* ---- decode memory ------------------------------------------------------ */

/* 4:2:0 at w x h: luma blocks plus two quarter-size chroma planes, each
 * rounded up to the sampling factor, 128 bytes a block. */
static uint64_t coef_420(unsigned w, unsigned h)
{
	uint64_t yw = (w + 15) / 16 * 2, yh = (h + 15) / 16 * 2;
	uint64_t cw = (w + 15) / 16, ch = (h + 15) / 16;
	return (yw * yh + 2 * cw * ch) * 128;
}

Test(transform, decode_mem_counts_the_progressive_coefficient_buffer)
{
	struct transform_opts o = {.size = 64, .crop = 56, .format = TF_PPM};
	size_t plen, blen;
	uint8_t *prog = load("progressive.jpg", &plen);
	uint8_t *base = load("photo.jpg", &blen);
	uint64_t pm, bm;

	cr_assert_eq(transform_decode_mem(&o, prog, plen, &pm), 0);
	cr_assert_eq(transform_decode_mem(&o, base, blen, &bm), 0);
	/* progressive.jpg is 200x150 4:2:0, photo.jpg 500x375 baseline: the
	 * smaller image needs more, its whole coefficient buffer. */
	cr_expect_geq(pm, coef_420(200, 150) + 64 * 85 * 3);
	cr_expect_lt(pm - coef_420(200, 150), (uint64_t)2 << 20);
	cr_expect_lt(bm, (uint64_t)2 << 20);
	/* The lossless path (JPEG out, no resize) keeps every coefficient. */
	struct transform_opts lossless = {.crop = 56, .format = TF_JPEG};
	cr_assert_eq(transform_decode_mem(&lossless, base, blen, &bm), 0);
	cr_expect_geq(bm, coef_420(500, 375));
	cr_expect_eq(transform_decode_mem(&o, "nope", 4, &bm), -EBADMSG);
	free(prog);
	free(base);
}

Test(transform, decode_mem_of_a_huge_progressive_header)
{
	/* SOI, SOF2 8000x8000 three components 4:2:0, SOS: a header alone. */
	static const uint8_t h[] = {
		0xFF, 0xD8, 0xFF, 0xC2, 0x00, 0x11, 0x08, 0x1F, 0x40, 0x1F,
		0x40, 0x03, 0x01, 0x22, 0x00, 0x02, 0x11, 0x01, 0x03, 0x11,
		0x01, 0xFF, 0xDA, 0x00, 0x08, 0x01, 0x01, 0x00, 0x00, 0x00,
		0x00};
	struct transform_opts o = {.size = 64, .crop = 56, .format = TF_PPM};
	uint64_t m;

	cr_assert_eq(transform_decode_mem(&o, h, sizeof(h), &m), 0);
	cr_expect_geq(m, coef_420(8000, 8000)); /* 192 MB */
	cr_expect_lt(m, coef_420(8000, 8000) + (8u << 20));
	/* Above max_pixels: refused by the transform itself, not budgeted. */
	o.max_pixels = 1000000;
	cr_assert_eq(transform_decode_mem(&o, h, sizeof(h), &m), 0);
	cr_expect_eq(m, 0);
}
