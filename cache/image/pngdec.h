/* pngdec.h - PNG input for the image engine, with libspng: the declared size
 * from the header, then 8-bit RGB whatever the PNG holds (palette and grey
 * expanded, 16-bit reduced to 8, transparency composited on black).
 *
 * Hostile input fails with a negative errno and a short reason: -EBADMSG
 * (corrupt, truncated, bad CRC), -EFBIG (a side above TRANSFORM_MAX_SIDE or
 * chunks above the limits below), -ENOMEM. Working memory while decoding is
 * 4 bytes per pixel (RGBA) on top of the caller's 3-byte output. Pure: no
 * logging, no global state; safe from any thread on distinct inputs. */
#ifndef ECHOFS_PNGDEC_H
#define ECHOFS_PNGDEC_H

#include "common/attrs.h"
#include <stddef.h>
#include <stdint.h>

#include "cache/image/decoder.h"

/* Largest ancillary chunk, and all of them together, kept while decoding
 * (text and ICC chunks are skipped, but a bomb must not allocate). */
#define PNGDEC_CHUNK_LIMIT (4u << 20)
#define PNGDEC_CACHE_LIMIT (16u << 20)

/* 1 if the bytes start with the PNG signature. */
int pngdec_sniff(const void *in, size_t len);

/* Width and height from the header. Returns 0, -EBADMSG or -EFBIG. */
MUST_CHECK
int pngdec_probe(const void *in, size_t len, unsigned *w, unsigned *h,
		 char *why, size_t whylen);

/* Decode into rgb, w * h * 3 bytes, w and h as pngdec_probe gave them.
 * Returns 0, -EBADMSG, -EFBIG or -ENOMEM. */
MUST_CHECK
int pngdec_decode(const void *in, size_t len, uint8_t *rgb, unsigned w,
		  unsigned h, char *why, size_t whylen);

/* PNG in the decoder table (decoder.h). */
extern const struct decoder pngdec_decoder;

/* Composite n RGBA pixels on black into 3-byte RGB (dst may equal src). */
void pngdec_rgba_on_black(const uint8_t *rgba, uint8_t *rgb, size_t n);

#endif
