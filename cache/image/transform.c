/* transform.c - the image engine: the pipeline over the decoders
 * (decoder.h) and the resampler (resample.h), crop, flip, JPEG and PPM
 * encoding and the lossless TurboJPEG transform. */
#include "cache/image/transform.h"

#include "cache/image/decoder.h"
#include "cache/image/imgbuf.h"
#include "cache/image/jpegdec.h"
#include "cache/image/resample.h"
#include "cache/image/rrc.h"
#include "common/util.h"

#include <errno.h>
#include <limits.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <turbojpeg.h>
#if defined(__x86_64__) || defined(__i386__)
#include <tmmintrin.h> /* SSSE3 byte shuffle, for the mirrored rows */
#define HAVE_X86_SHUFFLE 1
#endif

/* Compression: the fast integer forward DCT (TJFLAG_FASTDCT, also
 * TurboJPEG's default when compressing), said explicitly so a library
 * change of default does not change our bytes. Measured on 224x224 crops of
 * the bench photos at q90: 40.62 dB vs 40.74 dB PSNR for the accurate DCT,
 * ~3% faster to encode. The 0.1 dB is invisible in training data; the
 * accurate IDCT matters more on the decode side and is kept there. */
#define ENCODE_FLAGS (TJFLAG_FASTDCT | TJFLAG_NOREALLOC)

struct transform_ctx {
	struct decoder_state ds; /* the decoders' (JPEG's decompressor) */
	tjhandle enc;		 /* created on first use, each */
	tjhandle xf;
	struct scratch pix; /* decoded pixels (pipeline only) */
	struct scratch tmp; /* resampling rows */
	struct scratch img; /* resampled / cropped image (pipeline only) */
	struct scratch jpg; /* worst-case JPEG encode buffer */
};

static void ctx_trim(struct transform_ctx *tc)
{
	scratch_trim(&tc->pix);
	scratch_trim(&tc->tmp);
	scratch_trim(&tc->img);
	scratch_trim(&tc->jpg);
}

void transform_versions(char *buf, size_t len)
{
	size_t n = 0;

	buf[0] = '\0';
	for (size_t i = 0; decoder_table[i]; i++) {
		const struct decoder *d = decoder_table[i];
		if (!d->version || n + 2 >= len)
			continue;
		if (n) {
			snprintf(buf + n, len - n, ", ");
			n += 2;
		}
		d->version(buf + n, len - n);
		n += strlen(buf + n);
	}
}

struct transform_ctx *transform_ctx_new(void)
{
	return xcalloc(1, sizeof(struct transform_ctx));
}

void transform_ctx_free(struct transform_ctx *tc)
{
	if (!tc)
		return;
	decoder_state_clear(&tc->ds);
	if (tc->enc)
		tjDestroy(tc->enc);
	if (tc->xf)
		tjDestroy(tc->xf);
	free(tc->pix.p);
	free(tc->tmp.p);
	free(tc->img.p);
	free(tc->jpg.p);
	free(tc);
}

static tjhandle get_enc(struct transform_ctx *tc)
{
	if (!tc->enc)
		tc->enc = tjInitCompress();
	return tc->enc;
}

static tjhandle get_xf(struct transform_ctx *tc)
{
	if (!tc->xf)
		tc->xf = tjInitTransform();
	return tc->xf;
}

/* Destroys a handle after a TurboJPEG call on it failed; the next use makes
 * a fresh one, so one bad image cannot fail the next ones (issue 21; see
 * jpegdec.c's drop for how a failed handle misbehaves). */
static void tj_drop(tjhandle *tj)
{
	if (*tj)
		tjDestroy(*tj);
	*tj = NULL;
}

void transform_image_free(struct image *img)
{
	if (!img)
		return;
	free(img->rgb);
	memset(img, 0, sizeof(*img));
}

/* ---- decode --------------------------------------------------------- */

int transform_probe(struct transform_ctx *tc, const void *in, size_t len,
		    uint64_t max_pixels, unsigned *w, unsigned *h, char *why,
		    size_t whylen)
{
	const struct decoder *d = decoder_find(in, len);

	*w = *h = 0;
	if (!d)
		return decoder_fail(why, whylen, -EBADMSG,
				    "not a JPEG, PNG, WebP or PPM");
	return d->probe(&tc->ds, in, len, max_pixels, w, h, why, whylen);
}

/* A decoder's buffer: from sc (owned by the context) or, with NULL, a new
 * malloc; p remembers it so a failed decode can free it. */
struct bufreq {
	struct scratch *sc;
	void *p;
};

static void *bufreq_get(void *arg, size_t n)
{
	struct bufreq *b = arg;
	b->p = imgbuf_get(b->sc, n);
	return b->p;
}

/* transform_decode into sc (context-owned) or, with NULL, a new buffer. */
static int decode_any(struct transform_ctx *tc, const void *in, size_t len,
		      unsigned size_hint, uint64_t max_pixels,
		      struct image *out, struct scratch *sc, char *why,
		      size_t whylen)
{
	struct bufreq br = {sc, NULL};
	struct decode_out o = {.get = bufreq_get, .arg = &br};
	const struct decoder *d = decoder_find(in, len);

	memset(out, 0, sizeof(*out));
	if (!in)
		return decoder_fail(why, whylen, -EINVAL, "no input");
	if (!d)
		return decoder_fail(why, whylen, -EBADMSG,
				    "not a JPEG, PNG, WebP or PPM");
	int r = d->decode(&tc->ds, in, len, size_hint, max_pixels, &o, why,
			  whylen);
	if (r < 0) {
		if (!sc)
			free(br.p);
		return r;
	}
	out->w = o.w;
	out->h = o.h;
	out->rgb = o.rgb;
	return 0;
}

int transform_decode(struct transform_ctx *tc, const void *in, size_t len,
		     unsigned size_hint, uint64_t max_pixels, struct image *out,
		     char *why, size_t whylen)
{
	return decode_any(tc, in, len, size_hint, max_pixels, out, NULL, why,
			  whylen);
}

/* ---- resampling ----------------------------------------------------- */

void transform_resized_dims(unsigned w, unsigned h, unsigned shorter,
			    unsigned *ow, unsigned *oh)
{
	if (!w || !h || !shorter) {
		*ow = w;
		*oh = h;
		return;
	}
	int wide = w >= h;
	unsigned s = wide ? h : w, l = wide ? w : h;
	uint64_t lo = ((uint64_t)l * shorter * 2 + s) / (2 * (uint64_t)s);
	unsigned long_out = lo < 1	    ? 1
			    : lo > UINT_MAX ? UINT_MAX
					    : (unsigned)lo;
	*ow = wide ? long_out : shorter;
	*oh = wide ? shorter : long_out;
}

int transform_resize(const struct image *in, unsigned shorter,
		     struct image *out)
{
	memset(out, 0, sizeof(*out));
	if (!in || !in->rgb || !in->w || !in->h || !shorter)
		return -EINVAL;
	struct resample_region rg = {0};
	transform_resized_dims(in->w, in->h, shorter, &rg.fw, &rg.fh);
	rg.w = rg.fw;
	rg.h = rg.fh;
	return resample_region(in, &rg, NULL, NULL, out);
}

/* ---- crop, flip, randomness ----------------------------------------- */

int transform_crop(const struct image *in, unsigned x, unsigned y, unsigned w,
		   unsigned h, struct image *out)
{
	return imgbuf_crop(in, x, y, w, h, out, NULL);
}

/* splitmix64: one caller value spreads into independent streams. */
static uint64_t mix(uint64_t x)
{
	x += 0x9E3779B97F4A7C15ULL;
	x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ULL;
	x = (x ^ (x >> 27)) * 0x94D049BB133111EBULL;
	return x ^ (x >> 31);
}

int transform_crop_origin(unsigned w, unsigned h, unsigned c, int random,
			  uint64_t rand, unsigned *x, unsigned *y)
{
	if (!c || c > w || c > h)
		return -EINVAL;
	if (!random) {
		*x = (w - c) / 2;
		*y = (h - c) / 2;
		return 0;
	}
	*x = (unsigned)(mix(rand) % ((uint64_t)w - c + 1));
	*y = (unsigned)(mix(rand ^ 0x5851F42D4C957F2DULL) %
			((uint64_t)h - c + 1));
	return 0;
}

int transform_rand_flip(uint64_t rand)
{
	return (int)(mix(rand ^ 0xD1B54A32D192ED03ULL) >> 63);
}

void transform_flip(struct image *img)
{
	if (!img || !img->rgb)
		return;
	for (unsigned y = 0; y < img->h; y++) {
		uint8_t *a = img->rgb + (size_t)y * img->w * 3;
		uint8_t *b = a + ((size_t)img->w - 1) * 3;
		for (; a < b; a += 3, b -= 3) {
			uint8_t t[3];
			memcpy(t, a, 3);
			memcpy(a, b, 3);
			memcpy(b, t, 3);
		}
	}
}

/* ---- encode --------------------------------------------------------- */

int transform_encode_jpeg(struct transform_ctx *tc, const struct image *img,
			  int quality, uint8_t **out, size_t *len)
{
	*out = NULL;
	*len = 0;
	if (!img || !img->rgb || !img->w || !img->h ||
	    img->w > TRANSFORM_MAX_SIDE || img->h > TRANSFORM_MAX_SIDE ||
	    quality < 0 || quality > 100)
		return -EINVAL;
	tjhandle tj = get_enc(tc);
	if (!tj)
		return -ENOMEM;
	/* tjBufSize is the worst case, so NOREALLOC never fails for size;
	 * the big buffer is the context's, the result an exact-size copy. */
	unsigned long cap = tjBufSize((int)img->w, (int)img->h, TJSAMP_420);
	if (cap == (unsigned long)-1)
		return -EINVAL;
	unsigned char *buf = scratch_get(&tc->jpg, cap);
	if (!buf)
		return -ENOMEM;
	unsigned long n = cap;
	int r = tjCompress2(tj, img->rgb, (int)img->w, 0, (int)img->h, TJPF_RGB,
			    &buf, &n, TJSAMP_420,
			    quality ? quality : TRANSFORM_DEFAULT_QUALITY,
			    ENCODE_FLAGS);
	if (r < 0)
		tj_drop(&tc->enc);
	*out = r < 0 ? NULL : malloc(n);
	if (*out) {
		memcpy(*out, buf, n);
		*len = n;
	}
	scratch_trim(&tc->jpg);
	return r < 0 ? -EIO : *out ? 0 : -ENOMEM;
}

size_t transform_ppm_size(unsigned w, unsigned h)
{
	char hdr[40];
	int n = snprintf(hdr, sizeof(hdr), "P6\n%u %u\n255\n", w, h);
	return (size_t)n + (size_t)w * h * 3;
}

int transform_encode_ppm(const struct image *img, uint8_t **out, size_t *len)
{
	*out = NULL;
	*len = 0;
	if (!img || !img->rgb || !img->w || !img->h)
		return -EINVAL;
	char hdr[40];
	int n = snprintf(hdr, sizeof(hdr), "P6\n%u %u\n255\n", img->w, img->h);
	size_t px = (size_t)img->w * img->h * 3;
	uint8_t *buf = malloc((size_t)n + px);
	if (!buf)
		return -ENOMEM;
	memcpy(buf, hdr, (size_t)n);
	memcpy(buf + n, img->rgb, px);
	*out = buf;
	*len = (size_t)n + px;
	return 0;
}

/* ---- pipeline ------------------------------------------------------- */

/* The size the deterministic half resizes a w x h input to: shorter side
 * opts->size, raised to opts->crop when the crop would not fit. No resize
 * gives w x h back. Returns 0, or -EFBIG past the caps. */
static int target_dims(const struct transform_opts *o, unsigned w, unsigned h,
		       unsigned *tw, unsigned *th)
{
	unsigned s = o->size, shorter = w < h ? w : h;
	if (!s && o->crop && shorter < o->crop)
		s = o->crop;
	if (s && o->crop && s < o->crop)
		s = o->crop;
	transform_resized_dims(w, h, s, tw, th);
	if (*tw > TRANSFORM_MAX_SIDE || *th > TRANSFORM_MAX_SIDE ||
	    (uint64_t)*tw * *th > decoder_max_pixels(o->max_pixels))
		return -EFBIG;
	return 0;
}

/* The ranges of opts's RandomResizedCrop. */
static struct rrc_params rrc_of(const struct transform_opts *o)
{
	return (struct rrc_params){
		.scale = {o->rrc_scale[0], o->rrc_scale[1]},
		.ratio = {o->rrc_ratio[0], o->rrc_ratio[1]},
	};
}

/* Whether a serve draws a RandomResizedCrop box (else a fixed crop). */
static int rrc_on(const struct transform_opts *o)
{
	return o->rrc && o->random_crop && o->crop;
}

static int check_opts(const struct transform_opts *o)
{
	if (!o || o->size > TRANSFORM_MAX_SIDE ||
	    o->crop > TRANSFORM_MAX_SIDE || o->quality < 0 ||
	    o->quality > 100 || o->format < TF_SAME || o->format > TF_PPM)
		return -EINVAL;
	if (o->rrc) {
		struct rrc_params p = rrc_of(o);
		if (!o->crop || rrc_check(&p) < 0)
			return -EINVAL;
	}
	return 0;
}

ssize_t transform_output_size(const struct transform_opts *opts, unsigned w,
			      unsigned h)
{
	if (check_opts(opts) < 0 || !w || !h)
		return -EINVAL;
	if (opts->format != TF_PPM)
		return -ENOTSUP;
	if ((uint64_t)w * h > decoder_max_pixels(opts->max_pixels))
		return -EFBIG;
	unsigned tw, th;
	if (target_dims(opts, w, h, &tw, &th) < 0)
		return -EFBIG;
	if (opts->crop)
		tw = th = opts->crop;
	return (ssize_t)transform_ppm_size(tw, th);
}

/* Decodes in with the DCT scaling for opts and tells the target size,
 * computed from the declared size so it does not depend on the scaling. */
static int decode_for(struct transform_ctx *tc, const struct transform_opts *o,
		      const void *in, size_t inlen, struct image *img,
		      struct resample_region *rg, char *why, size_t whylen)
{
	unsigned w, h;
	int r = transform_probe(tc, in, inlen, o->max_pixels, &w, &h, why,
				whylen);
	if (r < 0)
		return r;
	memset(rg, 0, sizeof(*rg));
	if (target_dims(o, w, h, &rg->fw, &rg->fh) < 0)
		return decoder_fail(why, whylen, -EFBIG,
				    "resized image too large");
	unsigned tshort = rg->fw < rg->fh ? rg->fw : rg->fh;
	unsigned hint = (rg->fw == w && rg->fh == h) ? 0 : tshort;
	return decode_any(tc, in, inlen, hint, o->max_pixels, img, &tc->pix,
			  why, whylen);
}

static int pick_window(const struct transform_opts *o,
		       struct resample_region *rg, uint64_t rand, int *flip);

int transform_prepared_is_cut(const struct transform_opts *o)
{
	return o->crop && !o->random_crop && !o->flip_prob_half;
}

int transform_prepared_dims(struct transform_ctx *tc,
			    const struct transform_opts *opts, const void *in,
			    size_t inlen, unsigned *w, unsigned *h)
{
	unsigned iw, ih;
	*w = *h = 0;
	if (check_opts(opts) < 0 || !in)
		return -EINVAL;
	int r = transform_probe(tc, in, inlen, opts->max_pixels, &iw, &ih,
				NULL, 0);
	if (r < 0)
		return r;
	r = target_dims(opts, iw, ih, w, h);
	if (r == 0 && transform_prepared_is_cut(opts))
		*w = *h = opts->crop;
	return r;
}

int transform_prepare(struct transform_ctx *tc,
		      const struct transform_opts *opts, const void *in,
		      size_t inlen, struct image *out, char *why, size_t whylen)
{
	memset(out, 0, sizeof(*out));
	if (check_opts(opts) < 0)
		return decoder_fail(why, whylen, -EINVAL, "bad options");
	struct image img;
	struct resample_region rg;
	int r = decode_for(tc, opts, in, inlen, &img, &rg, why, whylen);
	if (r < 0)
		return r;
	int flip;
	if (transform_prepared_is_cut(opts)) {
		r = pick_window(opts, &rg, 0, &flip);
	} else {
		rg.w = rg.fw;
		rg.h = rg.fh;
		r = 0;
	}
	if (r == 0)
		r = resample_region(&img, &rg, &tc->tmp, NULL, out);
	ctx_trim(tc);
	if (r < 0)
		return decoder_fail(why, whylen, r, "resize failed");
	return 0;
}

/* Crop window (full image when no crop) and flip from opts and rand. */
static int pick_window(const struct transform_opts *o, struct resample_region *rg,
		       uint64_t rand, int *flip)
{
	rg->x = rg->y = 0;
	rg->w = rg->fw;
	rg->h = rg->fh;
	if (o->crop) {
		int r = transform_crop_origin(rg->fw, rg->fh, o->crop,
					      o->random_crop, rand, &rg->x,
					      &rg->y);
		if (r < 0)
			return r;
		rg->w = rg->h = o->crop;
	}
	*flip = o->flip_prob_half && transform_rand_flip(rand);
	return 0;
}

static int encode_as(struct transform_ctx *tc, enum transform_format f,
		     int quality, const struct image *img, uint8_t **out,
		     size_t *outlen)
{
	if (f == TF_PPM)
		return transform_encode_ppm(img, out, outlen);
	return transform_encode_jpeg(tc, img, quality, out, outlen);
}

/* The RandomResizedCrop of img drawn from rand, crop x crop, into the
 * context's buffers (the box's copy in pix, the result in img). */
static int augment_rrc(struct transform_ctx *tc,
		       const struct transform_opts *o, const struct image *img,
		       uint64_t rand, struct image *out)
{
	struct rrc_params p = rrc_of(o);
	struct rrc_box b;
	int r = rrc_box(img->w, img->h, &p, rand, &b);
	if (r < 0)
		return r;
	return rrc_render(img, &b, o->crop, &tc->pix, &tc->tmp, &tc->img, out);
}

int transform_augment(struct transform_ctx *tc,
		      const struct transform_opts *opts,
		      const struct image *img, uint64_t rand, uint8_t **out,
		      size_t *outlen)
{
	*out = NULL;
	*outlen = 0;
	if (check_opts(opts) < 0 || !img || !img->rgb)
		return -EINVAL;
	struct resample_region rg = {.fw = img->w, .fh = img->h};
	int flip;
	int r = pick_window(opts, &rg, rand, &flip);
	if (r < 0)
		return r;
	struct image c;
	if (rrc_on(opts))
		r = augment_rrc(tc, opts, img, rand, &c);
	else
		r = imgbuf_crop(img, rg.x, rg.y, rg.w, rg.h, &c, &tc->img);
	if (r < 0) {
		ctx_trim(tc);
		return r;
	}
	if (flip)
		transform_flip(&c);
	r = encode_as(tc, opts->format, opts->quality, &c, out, outlen);
	ctx_trim(tc);
	return r;
}

/* Pixels [p0, p1) of the mirror image of the w-pixel row src, into dst. */
static void mirror_px(const uint8_t *src, unsigned w, size_t p0, size_t p1,
		      uint8_t *dst)
{
	for (const uint8_t *s = src + ((size_t)w - 1 - p0) * 3; p0 < p1;
	     p0++, s -= 3, dst += 3) {
		dst[0] = s[0];
		dst[1] = s[1];
		dst[2] = s[2];
	}
}

#ifdef HAVE_X86_SHUFFLE
/* mirror_px five pixels at a time with one 16-byte load, shuffle and store
 * (4.5x faster than byte moves here: the flip was the costliest part of a
 * PPM echo serve). A load starts one byte before its five source pixels,
 * so it never reads before the row; a store writes one byte past its 15,
 * which the next group overwrites, so the last group goes byte-wise. */
__attribute__((target("ssse3"))) static void
mirror_px_ssse3(const uint8_t *src, unsigned w, size_t p0, size_t p1,
		uint8_t *dst)
{
	const __m128i rev5 = _mm_setr_epi8(13, 14, 15, 10, 11, 12, 7, 8, 9, 4,
					   5, 6, 1, 2, 3, 0);
	/* Output pixel p is source pixel w - 1 - p; a group p..p+4 loads
	 * from source pixel w - 5 - p, minus one byte. */
	for (; p0 + 5 < p1 && p0 + 5 < w; p0 += 5, dst += 15) {
		const uint8_t *s = src + ((size_t)w - 5 - p0) * 3 - 1;
		__m128i v = _mm_loadu_si128((const __m128i *)(const void *)s);
		_mm_storeu_si128((__m128i *)(void *)dst,
				 _mm_shuffle_epi8(v, rev5));
	}
	mirror_px(src, w, p0, p1, dst);
}
#endif

/* Bytes [from, to) of one crop row of w pixels starting at src, mirrored
 * when flip: the flip happens while copying, not as a pass of its own. */
static void put_row(const uint8_t *src, unsigned w, int flip, size_t from,
		    size_t to, uint8_t *dst)
{
	size_t i = from;

	if (!flip) {
		memcpy(dst, src + from, to - from);
		return;
	}
	/* Byte i of the mirrored row is byte i % 3 of pixel w - 1 - i / 3. */
	for (; i < to && i % 3; i++)
		*dst++ = src[((size_t)w - 1 - i / 3) * 3 + i % 3];
	size_t p0 = i / 3, p1 = to / 3;
	if (p1 > p0) {
#ifdef HAVE_X86_SHUFFLE
		if (__builtin_cpu_supports("ssse3"))
			mirror_px_ssse3(src, w, p0, p1, dst);
		else
#endif
			mirror_px(src, w, p0, p1, dst);
		dst += (p1 - p0) * 3;
		i = p1 * 3;
	}
	for (; i < to; i++)
		*dst++ = src[((size_t)w - 1 - i / 3) * 3 + i % 3];
}

/* The crop window and flip of a PPM augment, and its header. */
static int ppm_plan(const struct transform_opts *opts, unsigned w, unsigned h,
		    uint64_t rand, struct resample_region *rg, int *flip, char *hdr,
		    size_t *hlen)
{
	if (check_opts(opts) < 0 || opts->format != TF_PPM || !w || !h)
		return -EINVAL;
	if (rrc_on(opts))
		return -ENOTSUP;
	*rg = (struct resample_region){.fw = w, .fh = h};
	int r = pick_window(opts, rg, rand, flip);
	if (r < 0)
		return r;
	*hlen = (size_t)snprintf(hdr, 40, "P6\n%u %u\n255\n", rg->w, rg->h);
	return 0;
}

ssize_t transform_augment_ppm_size(const struct transform_opts *opts,
				   unsigned w, unsigned h)
{
	struct resample_region rg;
	char hdr[40];
	size_t hl;
	int flip;
	int r = ppm_plan(opts, w, h, 0, &rg, &flip, hdr, &hl);

	return r < 0 ? r : (ssize_t)(hl + (size_t)rg.w * rg.h * 3);
}

ssize_t transform_augment_ppm(const struct transform_opts *opts,
			      const struct image *img, uint64_t rand,
			      uint64_t off, uint8_t *dst, size_t n)
{
	struct resample_region rg;
	char hdr[40];
	size_t hl, done = 0;
	int flip;

	if (!img || !img->rgb)
		return -EINVAL;
	int r = ppm_plan(opts, img->w, img->h, rand, &rg, &flip, hdr, &hl);
	if (r < 0)
		return r;
	size_t row = (size_t)rg.w * 3, total = hl + row * rg.h;
	if (off >= total)
		return 0;
	if (n > total - off)
		n = (size_t)(total - off);
	if (off < hl) {
		done = hl - (size_t)off < n ? hl - (size_t)off : n;
		memcpy(dst, hdr + off, done);
	}
	while (done < n) {
		size_t p = (size_t)off + done - hl, j = p / row, from = p % row;
		size_t to = row - from < n - done ? row : from + (n - done);
		put_row(img->rgb + ((rg.y + j) * img->w + rg.x) * 3, rg.w, flip,
			from, to, dst + done);
		done += to - from;
	}
	return (ssize_t)done;
}

/* ---- lossless ------------------------------------------------------- */

/* The tjTransform request for a c x c crop (0 = none) and/or a flip of a
 * w x h JPEG with MCU blocks mw x mh. Crop coordinates are in the flipped,
 * trimmed image, as transupp applies them. */
static int lossless_plan(const struct jpegdec_info *ji, unsigned c, int random,
			 int flip, uint64_t rand, tjtransform *xf)
{
	unsigned mw = (unsigned)tjMCUWidth[ji->subsamp];
	unsigned mh = (unsigned)tjMCUHeight[ji->subsamp];
	unsigned w = (unsigned)ji->w, h = (unsigned)ji->h;
	memset(xf, 0, sizeof(*xf));
	xf->options = TJXOPT_COPYNONE;
	if (flip) {
		xf->op = TJXOP_HFLIP;
		xf->options |= TJXOPT_TRIM;
		if (w >= mw)
			w -= w % mw;
	}
	if (!c)
		return 0;
	if (c > w || c > h)
		return -EINVAL;
	/* Random: uniform over the grid positions; centre: the true centre
	 * rounded down to the grid. */
	unsigned nx = (w - c) / mw + 1, ny = (h - c) / mh + 1;
	unsigned ix = ((w - c) / 2) / mw, iy = ((h - c) / 2) / mh;
	if (random) {
		ix = (unsigned)(mix(rand) % nx);
		iy = (unsigned)(mix(rand ^ 0x5851F42D4C957F2DULL) % ny);
	}
	xf->options |= TJXOPT_CROP;
	xf->r.x = (int)(ix * mw);
	xf->r.y = (int)(iy * mh);
	xf->r.w = (int)c;
	xf->r.h = (int)c;
	return 0;
}

int transform_lossless(struct transform_ctx *tc, const void *in, size_t inlen,
		       unsigned crop, int random_crop, int flip, uint64_t rand,
		       uint64_t max_pixels, uint8_t **out, size_t *outlen,
		       char *why, size_t whylen)
{
	*out = NULL;
	*outlen = 0;
	if (!in || decoder_find(in, inlen) != &jpegdec_decoder)
		return decoder_fail(why, whylen, -ENOTSUP,
				    "lossless: not a JPEG");
	struct jpegdec_info ji;
	int r = jpegdec_header(&tc->ds, in, inlen, max_pixels, &ji, why,
			       whylen);
	if (r < 0)
		return r;
	tjhandle tj = get_xf(tc);
	if (!tj)
		return decoder_fail(why, whylen, -ENOMEM,
				    "TurboJPEG init failed");
	if (ji.subsamp < 0 || ji.subsamp >= TJ_NUMSAMP)
		return decoder_fail(why, whylen, -ENOTSUP,
				    "lossless: odd subsampling");
	tjtransform xf;
	if (lossless_plan(&ji, crop, random_crop, flip, rand, &xf) < 0)
		return decoder_fail(why, whylen, -EINVAL,
				    "lossless: crop %u > %dx%d", crop, ji.w,
				    ji.h);
	/* Markers may be larger than tjBufSize allows for, so TurboJPEG
	 * allocates; the result is copied into a buffer the caller frees. */
	unsigned char *dst = NULL;
	unsigned long n = 0;
	if (tjTransform(tj, in, (unsigned long)inlen, 1, &dst, &n, &xf,
			jpegdec_flags()) < 0) {
		tjFree(dst);
		r = decoder_fail(why, whylen, -EBADMSG, "lossless: %s",
				 tjGetErrorStr2(tj));
		tj_drop(&tc->xf);
		return r;
	}
	*out = malloc(n ? n : 1);
	if (!*out) {
		tjFree(dst);
		return decoder_fail(why, whylen, -ENOMEM,
				    "lossless: no memory");
	}
	memcpy(*out, dst, n);
	*outlen = n;
	tjFree(dst);
	return 0;
}

/* The decode path of transform_apply: resampling straight into the crop
 * window, then flip and encode. */
static int apply_decoded(struct transform_ctx *tc,
			 const struct transform_opts *o, const void *in,
			 size_t inlen, uint64_t rand, uint8_t **out,
			 size_t *outlen, char *why, size_t whylen)
{
	struct image img, res;
	struct resample_region rg;
	int r = decode_for(tc, o, in, inlen, &img, &rg, why, whylen);
	if (r < 0)
		return r;
	int flip;
	r = pick_window(o, &rg, rand, &flip);
	if (r == 0)
		r = resample_region(&img, &rg, &tc->tmp, &tc->img, &res);
	if (r < 0) {
		ctx_trim(tc);
		return decoder_fail(why, whylen, r, "resize/crop failed");
	}
	if (flip)
		transform_flip(&res);
	enum transform_format f = o->format;
	if (f == TF_SAME) /* the input is a JPEG or a PPM here */
		f = decoder_find(in, inlen)->same == TF_PPM ? TF_PPM : TF_JPEG;
	r = encode_as(tc, f, o->quality, &res, out, outlen);
	ctx_trim(tc);
	if (r < 0)
		return decoder_fail(why, whylen, r, "encode failed");
	return 0;
}

/* ---- decode memory -------------------------------------------------- */

/* Pixels decoded (the plan at the hint decode_for gives) and resampled. */
static uint64_t pixel_bytes(const struct transform_opts *o,
			    const struct decoder *d, const void *in, size_t len,
			    unsigned w, unsigned h)
{
	struct decode_plan pl;
	unsigned tw, th;
	if (target_dims(o, w, h, &tw, &th) < 0)
		return 0; /* refused before any decoding */
	unsigned hint = (tw == w && th == h) ? 0 : (tw < th ? tw : th);
	if (d->plan(in, len, hint, &pl) < 0)
		return 0;
	return (uint64_t)pl.w * pl.h * pl.bpp + pl.work +
	       (uint64_t)tw * pl.h * 6 + (uint64_t)tw * th * 3;
}

int transform_decode_mem(const struct transform_opts *o, const void *in,
			 size_t len, uint64_t *bytes)
{
	const struct decoder *d = decoder_find(in, len);
	const uint64_t slack = 1u << 20; /* libjpeg's tables and rows */
	struct decode_plan full;

	*bytes = 0;
	if (check_opts(o) < 0)
		return -EINVAL;
	if (!d || d->plan(in, len, 0, &full) < 0)
		return -EBADMSG;
	/* Above max_pixels the transform refuses it with that reason, before
	 * the library allocates anything: nothing to budget. */
	if ((uint64_t)full.w * full.h > decoder_max_pixels(o->max_pixels))
		return 0;
	if (d->same == TF_JPEG && !o->size && o->format != TF_PPM)
		*bytes = full.coef + 2 * (uint64_t)len + slack; /* lossless */
	else
		*bytes = pixel_bytes(o, d, in, len, full.w, full.h) + slack;
	return 0;
}

static int copy_input(const void *in, size_t inlen, uint8_t **out,
		      size_t *outlen, char *why, size_t whylen)
{
	*out = malloc(inlen ? inlen : 1);
	if (!*out)
		return decoder_fail(why, whylen, -ENOMEM, "no memory");
	memcpy(*out, in, inlen);
	*outlen = inlen;
	return 0;
}

/* transform_apply with a RandomResizedCrop: the box is drawn on the
 * resized image, as on an echo serve, so the two stages agree. The output
 * is always re-encoded (format=same means JPEG, as transform_augment). */
static int apply_rrc(struct transform_ctx *tc, const struct transform_opts *o,
		     const void *in, size_t inlen, uint64_t rand, uint8_t **out,
		     size_t *outlen, char *why, size_t whylen)
{
	struct image img;
	int r = transform_prepare(tc, o, in, inlen, &img, why, whylen);
	if (r < 0)
		return r;
	r = transform_augment(tc, o, &img, rand, out, outlen);
	transform_image_free(&img);
	if (r < 0)
		return decoder_fail(why, whylen, r, "crop/encode failed");
	return 0;
}

int transform_apply(struct transform_ctx *tc, const struct transform_opts *opts,
		    const void *in, size_t inlen, uint64_t rand, uint8_t **out,
		    size_t *outlen, char *why, size_t whylen)
{
	*out = NULL;
	*outlen = 0;
	if (check_opts(opts) < 0 || !in)
		return decoder_fail(why, whylen, -EINVAL, "bad options");
	if (rrc_on(opts))
		return apply_rrc(tc, opts, in, inlen, rand, out, outlen, why,
				 whylen);
	const struct decoder *d = decoder_find(in, inlen);
	if (opts->format == TF_SAME && d && d->same == TF_SAME) {
		if (!opts->size && !opts->crop && !opts->flip_prob_half)
			return copy_input(in, inlen, out, outlen, why, whylen);
		return decoder_fail(
			why, whylen, -ENOTSUP,
			"format=same cannot re-encode %s: use format=jpeg "
			"or format=ppm",
			d->name);
	}
	int same = d && (opts->format == TF_SAME || opts->format == d->same);
	int flip = opts->flip_prob_half && transform_rand_flip(rand);
	if (d == &jpegdec_decoder && same && !opts->size) {
		unsigned w, h;
		int r = transform_probe(tc, in, inlen, opts->max_pixels, &w, &h,
					why, whylen);
		if (r < 0)
			return r;
		unsigned shorter = w < h ? w : h;
		if (!opts->crop && !flip)
			return copy_input(in, inlen, out, outlen, why, whylen);
		if (opts->crop <= shorter) {
			r = transform_lossless(tc, in, inlen, opts->crop,
					       opts->random_crop, flip, rand,
					       opts->max_pixels, out, outlen,
					       why, whylen);
			if (r != -ENOTSUP)
				return r;
		}
	}
	return apply_decoded(tc, opts, in, inlen, rand, out, outlen, why,
			     whylen);
}

int transform_image_fault(int r)
{
	return r == -EBADMSG || r == -EFBIG || r == -ENOTSUP || r == -EINVAL;
}
