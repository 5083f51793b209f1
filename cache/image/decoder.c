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
