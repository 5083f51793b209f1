/* webpdec.h - WebP input for the image engine, with libwebp: the declared
 * size from the header, then 8-bit RGB (alpha composited on black).
 * Animated WebP is refused (-ENOTSUP); corrupt or truncated data is
 * -EBADMSG, a side above TRANSFORM_MAX_SIDE -EFBIG. Working memory while
 * decoding an image with alpha is 4 bytes per pixel on top of the caller's
 * 3-byte output, none without. Pure; safe from any thread. */
#ifndef ECHOFS_WEBPDEC_H
#define ECHOFS_WEBPDEC_H

#include "common/attrs.h"
#include <stddef.h>
#include <stdint.h>

#include "cache/image/decoder.h"

/* 1 if the bytes start like a WebP file (RIFF....WEBP). */
int webpdec_sniff(const void *in, size_t len);

/* Width and height from the header. Returns 0, -EBADMSG, -ENOTSUP or
 * -EFBIG. */
MUST_CHECK
int webpdec_probe(const void *in, size_t len, unsigned *w, unsigned *h,
		  char *why, size_t whylen);

/* Decode into rgb, w * h * 3 bytes, w and h as webpdec_probe gave them.
 * Returns 0, -EBADMSG, -ENOTSUP, -EFBIG or -ENOMEM. */
MUST_CHECK
int webpdec_decode(const void *in, size_t len, uint8_t *rgb, unsigned w,
		   unsigned h, char *why, size_t whylen);

/* WebP in the decoder table (decoder.h). */
extern const struct decoder webpdec_decoder;

#endif
