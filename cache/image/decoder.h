/* decoder.h - the image engine's input formats behind one interface: each
 * decoder has a name, recognises its format by the first bytes, reads the
 * declared size from the header (probe), says what decoding will take
 * (plan) and decodes to 8-bit RGB (decode); transform.c picks one from the
 * table with decoder_find.
 *
 * DESIGN
 * - One decoder per file: jpegdec.c (TurboJPEG), pngdec.c (libspng),
 *   webpdec.c (libwebp), ppmdec.c (echofs). Adding a format is one file and
 *   one line in decoder.c's table. Only jpegdec.c and transform.c (lossless
 *   transforms, JPEG encoding) include TurboJPEG.
 * - Decoders are pure: no logging, no global mutable state. State kept
 *   between images (the JPEG decoder's TurboJPEG handle) lives in a struct
 *   decoder_state the caller owns, one per thread. A failed decode leaves
 *   that state as good as new.
 * - Errors as in transform.h: -EBADMSG corrupt, -EFBIG above max_pixels or
 *   TRANSFORM_MAX_SIDE, -ENOTSUP valid but unsupported, -ENOMEM; a short
 *   reason naming the format in why (may be NULL).
 */
#ifndef ECHOFS_DECODER_H
#define ECHOFS_DECODER_H

#include "common/attrs.h"
#include <stddef.h>
#include <stdint.h>

#include "cache/image/transform.h"

struct jpegdec;

/* Per-thread state of the decoders that keep one; zero it before first use
 * (each field is made on first use) and clear it with decoder_state_clear. */
struct decoder_state {
	struct jpegdec *jpeg; /* jpegdec.c */
};

/* What decoding an input at a size hint will take, read from its header. */
struct decode_plan {
	unsigned w, h; /* the image decode makes (JPEG: after DCT scaling) */
	unsigned bpp;  /* bytes a pixel of the buffer decode asks for */
	uint64_t work; /* the library's own working memory while decoding */
	uint64_t coef; /* JPEG's whole-image coefficient buffer (what a
			* lossless transform holds); 0 for other formats */
};

/* Where decode puts the pixels: get(arg, n) hands it a buffer of n bytes
 * the caller owns (NULL: no memory). decode asks once, after the header,
 * and leaves w x h 3-byte RGB pixels at the buffer's start in rgb. */
struct decode_out {
	void *(*get)(void *arg, size_t n);
	void *arg;
	uint8_t *rgb;
	unsigned w, h;
};

struct decoder {
	const char *name; /* "JPEG", "PNG", "WebP", "PPM" */
	/* What format=same gives for this input: TF_JPEG, TF_PPM, or TF_SAME
	 * when echofs has no encoder for it. */
	enum transform_format same;
	/* 1 if in starts with this format's magic bytes. */
	int (*sniff)(const uint8_t *in, size_t len);
	/* The declared size, held to max_pixels (0: the default). */
	int (*probe)(struct decoder_state *st, const uint8_t *in, size_t len,
		     uint64_t max_pixels, unsigned *w, unsigned *h, char *why,
		     size_t whylen);
	/* The plan for decoding at size_hint (see transform_decode; 0: full
	 * size), from the header alone, caps not applied. 0 or -EBADMSG. */
	int (*plan)(const uint8_t *in, size_t len, unsigned size_hint,
		    struct decode_plan *p);
	/* Decodes at size_hint into a buffer from out->get. */
	int (*decode)(struct decoder_state *st, const uint8_t *in, size_t len,
		      unsigned size_hint, uint64_t max_pixels,
		      struct decode_out *out, char *why, size_t whylen);
	/* The library and its version ("libspng 0.7.3") into buf; NULL when
	 * echofs decodes the format itself. */
	void (*version)(char *buf, size_t len);
};

/* The decoder whose magic bytes start in, or NULL. */
const struct decoder *decoder_find(const void *in, size_t len);

/* The table, NULL-terminated, in the order decoder_find tries it. */
extern const struct decoder *const decoder_table[];

/* Frees what the decoders made in st and zeroes it. */
void decoder_state_clear(struct decoder_state *st);

/* max_pixels, with 0 meaning TRANSFORM_DEFAULT_MAX_PIXELS. */
uint64_t decoder_max_pixels(uint64_t max_pixels);

/* For decoders that do not scale: w x h held to max_pixels (0: the
 * default). Returns 0 or -EFBIG with "<name>: WxH is above max_pixels". */
MUST_CHECK
int decoder_check_size(const char *name, unsigned w, unsigned h,
		       uint64_t max_pixels, char *why, size_t whylen);

/* A decoder that is a plain probe and a decode into the caller's buffer:
 * no state between images, no scaling (the size hint is ignored), decoded
 * to RGBA first. pngdec.c and webpdec.c fill their table entries from one
 * with the decoder_plain_* calls below. */
struct decoder_plain {
	const char *name; /* as in struct decoder, and in reasons */
	/* The declared size from the header; 0 or -errno. */
	int (*probe)(const void *in, size_t len, unsigned *w, unsigned *h,
		     char *why, size_t whylen);
	/* Decodes into rgb, w * h * 3 bytes, w and h as probe gave them. */
	int (*decode)(const void *in, size_t len, uint8_t *rgb, unsigned w,
		      unsigned h, char *why, size_t whylen);
	/* Working memory beyond the 4 bytes a pixel of RGBA. */
	uint64_t work_extra;
};

/* struct decoder's probe, plan and decode for a plain decoder d. */
int decoder_plain_probe(const struct decoder_plain *d, const uint8_t *in,
			size_t len, uint64_t max_pixels, unsigned *w,
			unsigned *h, char *why, size_t whylen);
int decoder_plain_plan(const struct decoder_plain *d, const uint8_t *in,
		       size_t len, struct decode_plan *p);
int decoder_plain_decode(const struct decoder_plain *d, const uint8_t *in,
			 size_t len, uint64_t max_pixels,
			 struct decode_out *out, char *why, size_t whylen);

/* Formats a reason into why (when given) and returns err. */
int decoder_fail(char *why, size_t whylen, int err, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));

#endif
