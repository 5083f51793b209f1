/* test_pngdec.c - unit tests for PNG and WebP input (cache/image/pngdec.c,
 * cache/image/webpdec.c) and for the image engine taking them
 * (transform_decode, transform_apply). Fixtures: tests/data/img, made by
 * make_fixtures.py with Pillow. */
#include <criterion/criterion.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cache/image/pngdec.h"
#include "cache/image/transform.h"
#include "cache/image/webpdec.h"
#include "fixtures.h"

static struct transform_ctx *tc;

static void setup(void)
{
	tc = transform_ctx_new();
	cr_assert_not_null(tc);
}

static void teardown(void)
{
	transform_ctx_free(tc);
}

TestSuite(pngdec, .init = setup, .fini = teardown, .timeout = 60);

static uint8_t *load(const char *name, size_t *len)
{
	char path[256];
	snprintf(path, sizeof(path), "img/%s", name);
	return fx_load_data(path, len);
}

static struct image decode(const char *name)
{
	size_t len;
	uint8_t *b = load(name, &len);
	struct image im;
	char why[160] = "";
	int r = transform_decode(tc, b, len, 0, 0, &im, why, sizeof(why));
	cr_assert_eq(r, 0, "%s: %d (%s)", name, r, why);
	free(b);
	return im;
}

static const uint8_t *px(const struct image *im, unsigned x, unsigned y)
{
	return im->rgb + 3 * ((size_t)y * im->w + x);
}

/* Every colour type comes out as 8-bit RGB of the declared size. */
Test(pngdec, colour_types_decode_to_rgb)
{
	static const struct { const char *f; unsigned w, h; } cases[] = {
		{"rgb.png", 40, 30}, {"gray.png", 40, 30},
		{"palette.png", 40, 30}, {"gray16.png", 8, 8},
		{"rgba.png", 4, 4}, {"tiny.png", 8, 8},
		{"photo.webp", 64, 48}, {"alpha.webp", 4, 4},
	};
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		struct image im = decode(cases[i].f);
		cr_expect_eq(im.w, cases[i].w, "%s width %u", cases[i].f, im.w);
		cr_expect_eq(im.h, cases[i].h, "%s height %u", cases[i].f, im.h);
		transform_image_free(&im);
	}
}

Test(pngdec, grey_expands_to_equal_channels)
{
	struct image im = decode("gray.png");
	for (unsigned y = 0; y < im.h; y++)
		for (unsigned x = 0; x < im.w; x++) {
			const uint8_t *p = px(&im, x, y);
			cr_assert(p[0] == p[1] && p[1] == p[2], "(%u,%u)", x, y);
		}
	transform_image_free(&im);
}

/* 16-bit samples 0x8000 + 0x100 i reduce to their high byte 0x80 + i. */
Test(pngdec, sixteen_bit_reduces_to_high_byte)
{
	struct image im = decode("gray16.png");
	for (unsigned i = 0; i < 64; i++) {
		const uint8_t *p = px(&im, i % 8, i / 8);
		cr_expect_eq(p[0], 0x80 + i, "pixel %u: %u", i, p[0]);
	}
	transform_image_free(&im);
}

/* (200, 100, 50) at alpha 128 on black is (100, 50, 25); a fully
 * transparent pixel is black whatever its colour. */
Test(pngdec, alpha_is_composited_on_black)
{
	const char *files[] = {"rgba.png", "alpha.webp"};
	for (size_t i = 0; i < 2; i++) {
		struct image im = decode(files[i]);
		const uint8_t *t = px(&im, 0, 0), *h = px(&im, 2, 2);
		cr_expect(t[0] == 0 && t[1] == 0 && t[2] == 0, "%s transparent",
			  files[i]);
		cr_expect(h[0] == 100 && h[1] == 50 && h[2] == 25,
			  "%s half: %u %u %u", files[i], h[0], h[1], h[2]);
		transform_image_free(&im);
	}
}

/* The pixels match what PNG's own RGB holds: the palette image against the
 * photo it came from is exact per palette entry, so compare rgb.png with
 * itself through PPM output (lossless end to end). */
Test(pngdec, ppm_output_is_the_png_pixels)
{
	struct transform_opts o = {.crop = 16, .format = TF_PPM};
	size_t len, olen;
	uint8_t *b = load("rgb.png", &len), *out = NULL;
	struct image full = decode("rgb.png");
	char why[160] = "";
	int r = transform_apply(tc, &o, b, len, 0, &out, &olen, why, sizeof(why));
	cr_assert_eq(r, 0, "%d (%s)", r, why);
	const char *hdr = "P6\n16 16\n255\n";
	cr_assert_eq(olen, strlen(hdr) + 16 * 16 * 3);
	cr_assert_eq(memcmp(out, hdr, strlen(hdr)), 0);
	/* Centre crop of 40x30 at (12, 7). */
	for (unsigned y = 0; y < 16; y++)
		cr_assert_eq(memcmp(out + strlen(hdr) + y * 48,
				    px(&full, 12, 7 + y), 48), 0, "row %u", y);
	free(out);
	free(b);
	transform_image_free(&full);
}

Test(pngdec, every_option_works_on_png_and_webp)
{
	const char *files[] = {"rgb.png", "palette.png", "photo.webp"};
	struct transform_opts opts[] = {
		{.size = 24, .format = TF_PPM},
		{.size = 24, .crop = 20, .format = TF_JPEG},
		{.crop = 16, .random_crop = 1, .flip_prob_half = 1, .format = TF_PPM},
		{.size = 64, .crop = 56, .format = TF_JPEG, .quality = 80},
	};
	for (size_t f = 0; f < 3; f++)
		for (size_t i = 0; i < sizeof(opts) / sizeof(opts[0]); i++) {
			size_t len, olen;
			uint8_t *b = load(files[f], &len), *out = NULL;
			char why[160] = "";
			int r = transform_apply(tc, &opts[i], b, len, 5, &out,
						&olen, why, sizeof(why));
			cr_expect_eq(r, 0, "%s opts %zu: %d (%s)", files[f], i,
				     r, why);
			if (opts[i].format == TF_JPEG && r == 0)
				cr_expect(out[0] == 0xFF && out[1] == 0xD8,
					  "%s opts %zu: not a JPEG", files[f], i);
			free(out);
			free(b);
		}
}

/* format=same cannot re-encode a PNG or WebP; unchanged copies are fine. */
Test(pngdec, same_format_refuses_conversion_but_copies)
{
	struct transform_opts conv = {.size = 16, .format = TF_SAME};
	struct transform_opts none = {.format = TF_SAME};
	size_t len, olen;
	uint8_t *b = load("rgb.png", &len), *out = NULL;
	char why[160] = "";
	int r = transform_apply(tc, &conv, b, len, 0, &out, &olen, why,
				sizeof(why));
	cr_expect_eq(r, -ENOTSUP, "%d", r);
	cr_expect_not_null(strstr(why, "format=jpeg"), "why: %s", why);
	r = transform_apply(tc, &none, b, len, 0, &out, &olen, why, sizeof(why));
	cr_assert_eq(r, 0);
	cr_expect(olen == len && memcmp(out, b, len) == 0);
	free(out);
	free(b);
}

struct bad_case {
	const char *file;
	int err;
	const char *why; /* substring of the reason, or NULL */
};

static const struct bad_case bad_cases[] = {
	{"truncated.png", -EBADMSG, "PNG"},
	{"badcrc.png", -EBADMSG, "PNG"},
	{"huge.png", -EFBIG, "max_pixels"},
	{"toowide.png", -EFBIG, "PNG"},
	{"truncated.webp", -EBADMSG, "WebP"},
	{"animated.webp", -ENOTSUP, "animated"},
};

/* Hostile files fail with the right errno from probe, decode and the whole
 * pipeline, and leave nothing allocated. */
Test(pngdec, hostile_files_fail_cleanly)
{
	struct transform_opts o = {.size = 64, .crop = 56, .format = TF_PPM};
	for (size_t i = 0; i < sizeof(bad_cases) / sizeof(bad_cases[0]); i++) {
		const struct bad_case *c = &bad_cases[i];
		size_t len, olen = 0;
		uint8_t *b = load(c->file, &len), *out = NULL;
		struct image im;
		unsigned w, h;
		char why[160] = "";
		int r = transform_decode(tc, b, len, 0, 0, &im, why, sizeof(why));
		cr_expect_eq(r, c->err, "%s: %d (%s)", c->file, r, why);
		cr_expect_null(im.rgb);
		if (c->why)
			cr_expect_not_null(strstr(why, c->why), "%s: why '%s'",
					   c->file, why);
		r = transform_apply(tc, &o, b, len, 1, &out, &olen, NULL, 0);
		cr_expect_eq(r, c->err, "%s apply: %d", c->file, r);
		cr_expect_null(out);
		if (c->err == -EFBIG) {
			r = transform_probe(tc, b, len, 0, &w, &h, NULL, 0);
			cr_expect_eq(r, -EFBIG, "%s probe: %d", c->file, r);
		}
		free(b);
	}
}

/* A zTXt chunk that inflates to 64 MiB is a bomb: refused at the chunk
 * cache limit (16 MiB) before anything of that size is allocated. */
Test(pngdec, ztxt_bomb_is_refused)
{
	size_t len;
	uint8_t *b = load("ztxtbomb.png", &len);
	struct image im;
	char why[160] = "";
	int r = transform_decode(tc, b, len, 0, 0, &im, why, sizeof(why));
	cr_expect_eq(r, -EFBIG, "%d (%s)", r, why);
	cr_expect_null(im.rgb);
	free(b);
}

/* Every proper prefix of a PNG or WebP fails cleanly. */
Test(pngdec, every_prefix_fails_cleanly)
{
	const char *files[] = {"rgb.png", "photo.webp"};
	for (size_t f = 0; f < 2; f++) {
		size_t len;
		uint8_t *b = load(files[f], &len);
		for (size_t n = 0; n < len; n += 7) {
			struct image im;
			uint8_t *cut = malloc(n ? n : 1);
			memcpy(cut, b, n);
			int r = transform_decode(tc, cut, n, 0, 0, &im, NULL, 0);
			cr_expect_lt(r, 0, "%s prefix %zu decoded", files[f], n);
			cr_expect_null(im.rgb);
			free(cut);
		}
		free(b);
	}
}
