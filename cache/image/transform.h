/* transform.h - the image engine: decode (JPEG, PNG, WebP, PPM through the
 * decoders of decoder.h), resize, crop, flip and encode (JPEG, PPM) for
 * preprocessing in the filesystem.
 *
 * DESIGN
 * - Pure functions over memory buffers: no files, no logging, no global
 *   mutable state. The input formats are decoders chosen by magic bytes
 *   (decoder.h: jpegdec, pngdec, webpdec, ppmdec); only jpegdec.c and
 *   transform.c (JPEG encoding, the lossless transform) include
 *   turbojpeg.h; callers see struct transform_ctx as an opaque type.
 * - Threads: a TurboJPEG handle must not be used by two threads at once, so
 *   every function that touches TurboJPEG takes a struct transform_ctx. Create
 *   one context per worker thread (transform_ctx_new) and never share it
 *   without a lock of your own. A call that fails leaves the context as
 *   good as new (a TurboJPEG handle that failed is replaced), so one bad
 *   image cannot fail the next ones. A context also keeps its work buffers
 *   between calls (a fresh large malloc per image costs page faults that
 *   dominated the pipeline); each is freed after use when above 8 MB, so a
 *   context pins at most ~32 MB. The pixel functions (resize, crop, flip, PPM)
 *   need no context and are safe to call from any thread on distinct images.
 * - Decoding uses libjpeg-turbo's DCT scaling: the smallest factor M/8 whose
 *   output shorter side is still >= the target S, then an exact area-average
 *   resample to S. The declared size is checked against a pixel cap from the
 *   header, before any image buffer is allocated.
 * - Hostile input (truncated, corrupt, huge declared size, scan bombs, 12-bit
 *   or lossless JPEG, PNG) returns a negative errno and a short reason in
 *   `why`; never a crash, hang or unbounded allocation:
 *     -EBADMSG  corrupt or truncated data, any libjpeg warning, > 500 scans
 *     -EFBIG    declared width*height above max_pixels
 *     -ENOTSUP  a valid but unsupported format (12-bit, lossless JPEG, PNG,
 *               PPM with maxval != 255, ...)
 *     -EINVAL   bad arguments (crop outside the image, zero size, ...)
 *     -ENOMEM   allocation failed
 * - Randomness comes from the caller: each augmentation takes one uint64_t
 *   from which the crop position and the flip are derived (independent bits,
 *   deterministic: same input + same rand = same bytes out).
 */
#ifndef ECHOFS_TRANSFORM_H
#define ECHOFS_TRANSFORM_H

#include "common/attrs.h"
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#define TRANSFORM_DEFAULT_MAX_PIXELS (64ULL * 1000 * 1000)
#define TRANSFORM_DEFAULT_QUALITY 90
#define TRANSFORM_DEFAULT_DECODE_MEM (256ULL << 20)
/* Longest accepted side, for any input and output (JPEG's own limit). */
#define TRANSFORM_MAX_SIDE 65500u

enum transform_format {
	TF_SAME = 0, /* the input's format: JPEG stays JPEG, PPM stays PPM */
	TF_JPEG,
	TF_PPM,
};

struct transform_opts {
	unsigned size;	    /* shorter side S after resizing; 0 = no resize */
	unsigned crop;	    /* C: crop to C x C after resizing; 0 = none. An
			     * image whose shorter side is below C is first
			     * upscaled to C, so every output is C x C. */
	int random_crop;    /* nonzero: crop position from rand; else centre */
	int flip_prob_half; /* nonzero: mirror horizontally when rand says so
			     * (probability 1/2) */
	/* nonzero, with random_crop and crop: torchvision's RandomResizedCrop
	 * (rrc.h) instead of a fixed-size random crop: a box of random area
	 * and aspect ratio of the resized image, resampled to crop x crop.
	 * Without random_crop the crop stays the centre crop. */
	int rrc;
	double rrc_scale[2], rrc_ratio[2]; /* its ranges; 0, 0 = torchvision's */
	enum transform_format format;
	int quality;	     /* JPEG quality 1..100; 0 = 90 */
	uint64_t max_pixels; /* cap on declared input w*h; 0 = 64 MP */
	uint64_t decode_mem; /* prep only: decode memory shared by its
			      * workers (transform_decode_mem); 0 = 256M */
};

/* An RGB image, 3 bytes a pixel, rows packed (stride 3*w). The caller owns
 * rgb and frees it with transform_image_free (or free). */
struct image {
	unsigned w, h;
	uint8_t *rgb;
};

/* The image libraries in use, e.g. "libjpeg-turbo 2.1.5, libspng 0.7.3,
 * libwebp 1.2.4" (libjpeg-turbo's as built against), into buf. */
void transform_versions(char *buf, size_t len);

/* Per-thread TurboJPEG state (see DESIGN). */
struct transform_ctx;

/* A new context; never NULL (small allocation, aborts on OOM). Its
 * TurboJPEG handles are made on first use: a failure there is that call's
 * -ENOMEM. */
struct transform_ctx *transform_ctx_new(void);
void transform_ctx_free(struct transform_ctx *tc);

/* Frees img->rgb and zeroes img. Accepts NULL. */
void transform_image_free(struct image *img);

/* Reads the declared size of a JPEG or PPM without decoding it (cheap: header
 * only). Returns 0, -EBADMSG, -ENOTSUP or -EFBIG (above max_pixels, 0 = the
 * default). */
/* Whether a transform error r is the image's own: the same bytes would
 * fail the same way at every try (corrupt, too large, an unsupported
 * format, a crop it cannot give). Memory running short or the decode
 * workers stopping (-ENOMEM, -ESHUTDOWN) are not. */
int transform_image_fault(int r);

MUST_CHECK
int transform_probe(struct transform_ctx *tc, const void *in, size_t len,
		    uint64_t max_pixels, unsigned *w, unsigned *h, char *why,
		    size_t whylen);

/* Decodes a JPEG (baseline or progressive; grey, YCbCr, RGB, CMYK or YCCK) or
 * a binary PPM (P6, maxval 255) into RGB. For JPEG, size_hint > 0 picks the
 * smallest DCT scaling factor whose output shorter side is still >= size_hint
 * (never upscaling), so out may be larger than asked but never smaller; 0
 * decodes at full size. On success *out holds a new image the caller frees;
 * on failure *out is zeroed and why (may be NULL) says what went wrong. */
int transform_decode(struct transform_ctx *tc, const void *in, size_t len,
		     unsigned size_hint, uint64_t max_pixels, struct image *out,
		     char *why, size_t whylen);

/* The size transform_resize gives an image of w x h: shorter side exactly
 * `shorter`, longer side scaled and rounded to nearest (at least 1). */
void transform_resized_dims(unsigned w, unsigned h, unsigned shorter,
			    unsigned *ow, unsigned *oh);

/* Resamples in to shorter side `shorter` (aspect kept, transform_resized_dims)
 * into a new image *out: area averaging (box filter with exact fractional
 * coverage) on an axis that shrinks, bilinear on an axis that grows. in is
 * borrowed. Returns 0, -EINVAL or -ENOMEM. */
MUST_CHECK
int transform_resize(const struct image *in, unsigned shorter,
		     struct image *out);

/* Copies the w x h window at (x, y) of in into a new image *out. Returns 0,
 * -EINVAL (window not inside in, or empty) or -ENOMEM. */
MUST_CHECK
int transform_crop(const struct image *in, unsigned x, unsigned y, unsigned w,
		   unsigned h, struct image *out);

/* The origin of a c x c crop of a w x h image: centred (rounded down) when
 * random is 0, else uniform over all positions from rand. Returns 0 or
 * -EINVAL if c is 0 or larger than w or h. */
MUST_CHECK
int transform_crop_origin(unsigned w, unsigned h, unsigned c, int random,
			  uint64_t rand, unsigned *x, unsigned *y);

/* Whether the augmentation drawn from rand flips (bit independent of the crop
 * position bits). */
int transform_rand_flip(uint64_t rand);

/* Mirrors img left-right in place. */
void transform_flip(struct image *img);

/* Encodes img as a baseline JPEG, 4:2:0, quality 1..100 (0 = 90). *out is
 * malloc'd, the caller frees it. Returns 0, -EINVAL, -ENOMEM or -EIO. */
MUST_CHECK
int transform_encode_jpeg(struct transform_ctx *tc, const struct image *img,
			  int quality, uint8_t **out, size_t *len);

/* Encodes img as binary PPM "P6\n<w> <h>\n255\n" + pixels; *out is malloc'd,
 * the caller frees it. Its length is transform_ppm_size(w, h). */
int transform_encode_ppm(const struct image *img, uint8_t **out, size_t *len);

/* Bytes of the PPM encoding of a w x h image. */
size_t transform_ppm_size(unsigned w, unsigned h);

/* The exact output size transform_apply will produce for an input declared
 * w x h (transform_probe), so that the FUSE layer knows st_size before making
 * the bytes. Only PPM output has a size known in advance: returns it, or
 * -ENOTSUP for TF_JPEG and TF_SAME (the input's format is not known here:
 * ask with TF_PPM), -EINVAL when w or h is 0, -EFBIG when w*h or the resized
 * size is above max_pixels. */
MUST_CHECK
ssize_t transform_output_size(const struct transform_opts *opts, unsigned w,
			      unsigned h);

/* The memory transform_apply / transform_prepare with opts would need for
 * in, read from the header alone (no decoding): libjpeg's whole-image
 * coefficient buffer when it keeps one (progressive or multi-scan JPEGs,
 * lossless transforms), the decoded pixels at the DCT scaling chosen and the
 * resampling buffers. Returns 0 with *bytes set, or -EBADMSG / -EINVAL when
 * the header is unusable (the transform then fails by itself). */
MUST_CHECK
int transform_decode_mem(const struct transform_opts *opts, const void *in,
			 size_t len, uint64_t *bytes);

/* Whether opts's prepared stage is the centre crop alone
 * (transform_prepare): options that draw nothing (a crop, no random crop,
 * no flip) only ever serve the centre crop of the resized image, so that
 * window is all they keep. */
int transform_prepared_is_cut(const struct transform_opts *opts);

/* Decode (scaled) then resize to opts->size: the deterministic half of the
 * pipeline, for echoing before augmenting. Also upscales to opts->crop when
 * the image would be smaller than the crop. With transform_prepared_is_cut
 * only the centre crop x crop window is resampled (the same bytes as that
 * window of the whole resize, and as transform_apply's output pixels).
 * *out is new; caller frees. */
int transform_prepare(struct transform_ctx *tc,
		      const struct transform_opts *opts, const void *in,
		      size_t inlen, struct image *out, char *why,
		      size_t whylen);

/* The size transform_prepare makes of in, from its header alone (probe and
 * the resize rule; no decoding). Returns 0, or the probe's or -EFBIG's
 * errors as transform_prepare would give them. */
MUST_CHECK
int transform_prepared_dims(struct transform_ctx *tc,
			    const struct transform_opts *opts, const void *in,
			    size_t inlen, unsigned *w, unsigned *h);

/* The random half: crop (centre or from rand; with opts->rrc a
 * RandomResizedCrop box resampled to crop x crop), flip (from rand), encode as
 * opts->format (TF_SAME means JPEG here: a prepared image has no source
 * format). img is borrowed and left unchanged, so one prepared image can be
 * augmented many times. *out is malloc'd; caller frees. */
int transform_augment(struct transform_ctx *tc,
		      const struct transform_opts *opts,
		      const struct image *img, uint64_t rand, uint8_t **out,
		      size_t *outlen);

/* The PPM transform_augment makes of img with rand when opts->format is
 * TF_PPM, written in one pass: bytes [off, off + n) of it go to dst, the
 * header and then each row of the crop window copied from img, mirrored
 * while copying when the draw flips. No intermediate image, no allocation,
 * no context, so an echo serve can render straight into its reply buffer
 * (any thread, img shared read-only). Returns the bytes written (fewer
 * than n only at the end of the PPM, 0 past it) or -EINVAL (bad options,
 * format not TF_PPM, crop larger than img). -ENOTSUP with a random rrc crop:
 * it resamples, so it cannot render a range alone (use transform_augment). */
MUST_CHECK
ssize_t transform_augment_ppm(const struct transform_opts *opts,
			      const struct image *img, uint64_t rand,
			      uint64_t off, uint8_t *dst, size_t n);

/* The length of what transform_augment_ppm renders of a w x h image, or
 * -EINVAL as transform_augment_ppm would. */
MUST_CHECK
ssize_t transform_augment_ppm_size(const struct transform_opts *opts,
				   unsigned w, unsigned h);

/* Lossless JPEG-to-JPEG crop and/or flip with tjTransform (no decode, no
 * re-encode, no quality loss). The crop is c x c (0 = none) and its origin
 * is rounded down to the JPEG's MCU grid (8 or 16 pixels), so a "centre" crop
 * is centred only up to the MCU size. A flip drops the partial MCU column on
 * the right edge (TJXOPT_TRIM), so the width may shrink by up to 15 pixels
 * when there is no crop. Markers (EXIF, ICC) are not copied. The crop is
 * taken from the flipped image when both are asked. Returns 0, -EBADMSG,
 * -ENOTSUP (not a JPEG, or a subsampling TurboJPEG can't name), -EINVAL
 * (crop larger than the image) or -ENOMEM. */
MUST_CHECK
int transform_lossless(struct transform_ctx *tc, const void *in, size_t inlen,
		       unsigned crop, int random_crop, int flip, uint64_t rand,
		       uint64_t max_pixels, uint8_t **out, size_t *outlen,
		       char *why, size_t whylen);

/* The whole pipeline on one input: decode (scaled) -> resize to S -> crop ->
 * flip -> encode. When there is no resize, the input is a JPEG and the output
 * JPEG (TF_SAME or TF_JPEG), the crop and flip are done losslessly with
 * transform_lossless instead. With nothing asked at all (no size, no crop, no
 * flip) and the output format equal to the input's, the input bytes are
 * copied unchanged. *out is malloc'd; caller frees. */
int transform_apply(struct transform_ctx *tc, const struct transform_opts *opts,
		    const void *in, size_t inlen, uint64_t rand, uint8_t **out,
		    size_t *outlen, char *why, size_t whylen);

#endif
