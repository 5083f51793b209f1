/* pngdec.c - PNG input for the image engine, with libspng (see pngdec.h). */
#include "cache/image/pngdec.h"

#include <errno.h>
#include <spng.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cache/image/transform.h"

static int fail(char *why, size_t whylen, int err, const char *what,
		int spng_err)
{
	if (why && whylen)
		snprintf(why, whylen, "PNG: %s%s%s", what, spng_err ? ": " : "",
			 spng_err ? spng_strerror(spng_err) : "");
	return err;
}

/* libspng's limit errors are ours -EFBIG; everything else is bad data. */
static int errno_of(int e)
{
	return e == SPNG_EWIDTH || e == SPNG_EHEIGHT || e == SPNG_EUSER_WIDTH ||
			       e == SPNG_EUSER_HEIGHT || e == SPNG_ECHUNK_LIMITS
		       ? -EFBIG
	       : e == SPNG_EMEM ? -ENOMEM
				: -EBADMSG;
}

int pngdec_sniff(const void *in, size_t len)
{
	return len >= 8 && memcmp(in, "\x89PNG\r\n\x1a\n", 8) == 0;
}

/* A context over in with the limits set. NULL only when out of memory. */
static spng_ctx *open_ctx(const void *in, size_t len, int *err)
{
	spng_ctx *c = spng_ctx_new(0);

	if (!c) {
		*err = SPNG_EMEM;
		return NULL;
	}
	*err = spng_set_image_limits(c, TRANSFORM_MAX_SIDE, TRANSFORM_MAX_SIDE);
	if (!*err)
		*err = spng_set_chunk_limits(c, PNGDEC_CHUNK_LIMIT,
					     PNGDEC_CACHE_LIMIT);
	if (!*err)
		*err = spng_set_png_buffer(c, in, len);
	return c;
}

int pngdec_probe(const void *in, size_t len, unsigned *w, unsigned *h,
		 char *why, size_t whylen)
{
	struct spng_ihdr ih;
	int e;
	spng_ctx *c = open_ctx(in, len, &e);

	*w = *h = 0;
	if (!e)
		e = spng_get_ihdr(c, &ih);
	spng_ctx_free(c);
	if (e)
		return fail(why, whylen, errno_of(e), "bad header", e);
	*w = ih.width;
	*h = ih.height;
	return 0;
}

void pngdec_rgba_on_black(const uint8_t *rgba, uint8_t *rgb, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		unsigned a = rgba[4 * i + 3];
		for (int k = 0; k < 3; k++)
			rgb[3 * i + k] =
				(uint8_t)((rgba[4 * i + k] * a + 127) / 255);
	}
}

int pngdec_decode(const void *in, size_t len, uint8_t *rgb, unsigned w,
		  unsigned h, char *why, size_t whylen)
{
	struct spng_ihdr ih;
	size_t need = 0;
	uint8_t *rgba = NULL;
	int e, r = 0;
	spng_ctx *c = open_ctx(in, len, &e);

	if (!e)
		e = spng_get_ihdr(c, &ih);
	if (!e && (ih.width != w || ih.height != h)) {
		r = fail(why, whylen, -EINVAL, "size changed since the probe",
			 0);
		goto out;
	}
	if (!e)
		e = spng_decoded_image_size(c, SPNG_FMT_RGBA8, &need);
	if (!e && need != (size_t)w * h * 4)
		e = SPNG_EOVERFLOW;
	if (!e && !(rgba = malloc(need ? need : 1)))
		e = SPNG_EMEM;
	if (!e)
		e = spng_decode_image(c, rgba, need, SPNG_FMT_RGBA8,
				      SPNG_DECODE_TRNS);
	/* The image can be whole before the file is: read on to IEND so a
	 * cut or corrupt tail is an error, not a silent success. */
	if (!e)
		e = spng_decode_chunks(c);
	if (e) {
		r = fail(why, whylen, errno_of(e), "cannot decode", e);
		goto out;
	}
	pngdec_rgba_on_black(rgba, rgb, (size_t)w * h);
out:
	free(rgba);
	spng_ctx_free(c);
	return r;
}

/* ---- the decoder table's entry ------------------------------------- */

/* libspng decodes to RGBA first and may keep PNGDEC_CACHE_LIMIT of
 * ancillary chunks. */
static const struct decoder_plain plain = {
	.name = "PNG",
	.probe = pngdec_probe,
	.decode = pngdec_decode,
	.work_extra = PNGDEC_CACHE_LIMIT,
};

static int png_sniff(const uint8_t *in, size_t len)
{
	return pngdec_sniff(in, len);
}

static int png_probe(struct decoder_state *st, const uint8_t *in, size_t len,
		     uint64_t maxpx, unsigned *w, unsigned *h, char *why,
		     size_t whylen)
{
	(void)st;
	return decoder_plain_probe(&plain, in, len, maxpx, w, h, why, whylen);
}

static int png_plan(const uint8_t *in, size_t len, unsigned hint,
		    struct decode_plan *p)
{
	(void)hint;
	return decoder_plain_plan(&plain, in, len, p);
}

static int png_decode(struct decoder_state *st, const uint8_t *in, size_t len,
		      unsigned hint, uint64_t maxpx, struct decode_out *out,
		      char *why, size_t whylen)
{
	(void)st;
	(void)hint;
	return decoder_plain_decode(&plain, in, len, maxpx, out, why, whylen);
}

static void png_version(char *buf, size_t len)
{
	snprintf(buf, len, "libspng %s", spng_version_string());
}

const struct decoder pngdec_decoder = {
	.name = "PNG",
	.same = TF_SAME, /* no PNG encoder */
	.sniff = png_sniff,
	.probe = png_probe,
	.plan = png_plan,
	.decode = png_decode,
	.version = png_version,
};
