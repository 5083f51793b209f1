/* decoder.c - the table of image decoders and what they share (see
 * decoder.h). */
#include "cache/image/decoder.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "cache/image/jpegdec.h"
#include "cache/image/pngdec.h"
#include "cache/image/ppmdec.h"
#include "cache/image/webpdec.h"

/* JPEG first: nearly every sample is one. */
const struct decoder *const decoder_table[] = {
	&jpegdec_decoder,
	&ppmdec_decoder,
	&pngdec_decoder,
	&webpdec_decoder,
	NULL,
};

const struct decoder *decoder_find(const void *in, size_t len)
{
	if (!in)
		return NULL;
	for (size_t i = 0; decoder_table[i]; i++)
		if (decoder_table[i]->sniff(in, len))
			return decoder_table[i];
	return NULL;
}

void decoder_state_clear(struct decoder_state *st)
{
	jpegdec_free(st->jpeg);
	memset(st, 0, sizeof(*st));
}

uint64_t decoder_max_pixels(uint64_t max_pixels)
{
	return max_pixels ? max_pixels : TRANSFORM_DEFAULT_MAX_PIXELS;
}

int decoder_check_size(const char *name, unsigned w, unsigned h,
		       uint64_t max_pixels, char *why, size_t whylen)
{
	if ((uint64_t)w * h > decoder_max_pixels(max_pixels))
		return decoder_fail(why, whylen, -EFBIG,
				    "%s: %ux%u is above max_pixels", name, w,
				    h);
	return 0;
}

int decoder_fail(char *why, size_t whylen, int err, const char *fmt, ...)
{
	if (why && whylen) {
		va_list ap;
		va_start(ap, fmt);
		vsnprintf(why, whylen, fmt, ap);
		va_end(ap);
	}
	return err;
}

int decoder_plain_probe(const struct decoder_plain *d, const uint8_t *in,
			size_t len, uint64_t max_pixels, unsigned *w,
			unsigned *h, char *why, size_t whylen)
{
	int r = d->probe(in, len, w, h, why, whylen);

	return r < 0 ? r
		     : decoder_check_size(d->name, *w, *h, max_pixels, why,
					  whylen);
}

int decoder_plain_plan(const struct decoder_plain *d, const uint8_t *in,
		       size_t len, struct decode_plan *p)
{
	unsigned w, h;

	if (d->probe(in, len, &w, &h, NULL, 0) < 0)
		return -EBADMSG;
	*p = (struct decode_plan){.w = w, .h = h, .bpp = 3};
	p->work = (uint64_t)w * h * 4 + d->work_extra;
	return 0;
}

int decoder_plain_decode(const struct decoder_plain *d, const uint8_t *in,
			 size_t len, uint64_t max_pixels,
			 struct decode_out *out, char *why, size_t whylen)
{
	unsigned w, h;
	int r = decoder_plain_probe(d, in, len, max_pixels, &w, &h, why,
				    whylen);

	if (r < 0)
		return r;
	out->rgb = out->get(out->arg, (size_t)w * h * 3);
	if (!out->rgb)
		return decoder_fail(why, whylen, -ENOMEM,
				    "%s: no memory for %ux%u", d->name, w, h);
	out->w = w;
	out->h = h;
	return d->decode(in, len, out->rgb, w, h, why, whylen);
}
