/* test_decoder.c - the decoder table and interface (cache/image/decoder.c
 * and each decoder's entry): chosen by magic bytes, plan agrees with the
 * decode, buffers come from the caller, failures leave the state as new. */
#include "cache/image/decoder.h"

#include <criterion/criterion.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fixtures.h"

static void *get_malloc(void *arg, size_t n)
{
	void **p = arg;
	*p = malloc(n);
	return *p;
}

static void *get_none(void *arg, size_t n)
{
	(void)arg;
	(void)n;
	return NULL;
}

struct dcase {
	const char *file, *name;
	unsigned hint; /* JPEG: the DCT scaling shrinks photo.jpg to 250 */
	unsigned w, h;
};

static const struct dcase cases[] = {
	{"photo.jpg", "JPEG", 0, 500, 375},
	{"photo.jpg", "JPEG", 180, 250, 188},
	{"cmyk.jpg", "JPEG", 0, 32, 32},
	{"small.ppm", "PPM", 0, 40, 30},
	{"rgb.png", "PNG", 0, 40, 30},
	{"photo.webp", "WebP", 0, 64, 48},
};

/* Each decoder: found by its magic, probe, plan and decode agree on the
 * size, the pixels land in the caller's buffer. */
Test(decoder, table_plan_and_decode_agree)
{
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		const struct dcase *c = &cases[i];
		struct decoder_state st = {0};
		size_t len;
		uint8_t *b = fx_load_img(c->file, &len);
		const struct decoder *d = decoder_find(b, len);
		cr_assert_not_null(d, "%s", c->file);
		cr_expect_str_eq(d->name, c->name);
		unsigned w, h;
		cr_expect_eq(d->probe(&st, b, len, 0, &w, &h, NULL, 0), 0);
		struct decode_plan pl;
		cr_assert_eq(d->plan(b, len, c->hint, &pl), 0, "%s", c->file);
		cr_expect(pl.w == c->w && pl.h == c->h, "%s plan %ux%u",
			  c->file, pl.w, pl.h);
		void *buf = NULL;
		struct decode_out o = {.get = get_malloc, .arg = &buf};
		char why[128] = "";
		int r = d->decode(&st, b, len, c->hint, 0, &o, why,
				  sizeof(why));
		cr_expect_eq(r, 0, "%s: %s", c->file, why);
		cr_expect_eq((void *)o.rgb, buf, "pixels not in the buffer");
		cr_expect(o.w == c->w && o.h == c->h, "%s decoded %ux%u",
			  c->file, o.w, o.h);
		/* No memory from the caller: -ENOMEM, nothing written. */
		o = (struct decode_out){.get = get_none};
		cr_expect_eq(d->decode(&st, b, len, c->hint, 0, &o, NULL, 0),
			     -ENOMEM, "%s", c->file);
		free(buf);
		free(b);
		decoder_state_clear(&st);
	}
}

Test(decoder, unknown_bytes_have_no_decoder)
{
	static const uint8_t jpeg2[] = {0xFF, 0xD8};
	cr_expect_null(decoder_find("hello", 5));
	cr_expect_null(decoder_find(jpeg2, sizeof(jpeg2)));
	cr_expect_null(decoder_find(NULL, 0));
	for (size_t i = 0; decoder_table[i]; i++)
		cr_expect_not_null(decoder_table[i]->name);
}

/* The JPEG decoder's state after a header it could not read decodes the
 * next file (issue 21, here below the transform). */
Test(decoder, a_failure_leaves_the_state_as_new)
{
	struct decoder_state st = {0};
	size_t blen, glen;
	uint8_t *bad = fx_load_img("zero_size.jpg", &blen);
	uint8_t *good = fx_load_img("photo.jpg", &glen);
	const struct decoder *d = decoder_find(good, glen);
	unsigned w, h;
	cr_expect_lt(d->probe(&st, bad, blen, 0, &w, &h, NULL, 0), 0);
	char why[128] = "";
	cr_expect_eq(d->probe(&st, good, glen, 0, &w, &h, why, sizeof(why)), 0,
		     "%s", why);
	cr_expect(w == 500 && h == 375);
	decoder_state_clear(&st);
	decoder_state_clear(&st); /* twice: cleared state is empty */
	free(bad);
	free(good);
}
