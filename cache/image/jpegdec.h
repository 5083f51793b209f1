/* jpegdec.h - JPEG input for the image engine, with TurboJPEG: a pre-scan
 * of the marker segments (12-bit and lossless JPEGs refused, the declared
 * size held to max_pixels before libjpeg sees the data), then a decode with
 * libjpeg-turbo's DCT scaling to 8-bit RGB (grey, YCbCr, RGB, CMYK, YCCK).
 *
 * Every decode stops at the first libjpeg warning and at 500 progressive
 * scans (-EBADMSG). The decompressor is kept in the caller's struct
 * decoder_state, made on first use and replaced after any failure, so one
 * bad file cannot fail the next ones (libjpeg-turbo 2.1 leaves a handle
 * whose header read failed mid-parse). Only this file and transform.c
 * include TurboJPEG. */
#ifndef ECHOFS_JPEGDEC_H
#define ECHOFS_JPEGDEC_H

#include "common/attrs.h"
#include <stddef.h>
#include <stdint.h>

#include "cache/image/decoder.h"

extern const struct decoder jpegdec_decoder;

/* What the header says. subsamp and cs are TurboJPEG's TJSAMP_* and
 * TJCS_* values. */
struct jpegdec_info {
	int w, h, subsamp, cs;
};

/* The header of a JPEG, checked as a decode would (pre-scan, then
 * libjpeg), for the lossless transform. Returns 0, -EBADMSG, -ENOTSUP,
 * -EFBIG or -ENOMEM. */
MUST_CHECK
int jpegdec_header(struct decoder_state *st, const void *in, size_t len,
		   uint64_t max_pixels, struct jpegdec_info *ji, char *why,
		   size_t whylen);

/* The TurboJPEG flags every decode runs with, for other TurboJPEG calls
 * that read a JPEG (tjTransform). */
int jpegdec_flags(void);

/* Frees what decoder_state.jpeg holds. Accepts NULL. */
void jpegdec_free(struct jpegdec *jd);

#endif
