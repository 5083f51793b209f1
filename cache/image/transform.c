/* transform.c - the image engine: the pipeline over the decoders
 * (decoder.h), area-average and bilinear resampling, crop, flip, JPEG and
 * PPM encoding and the lossless TurboJPEG transform. */
#include "cache/image/transform.h"

#include "cache/image/decoder.h"
#include "cache/image/jpegdec.h"
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

/* Fixed-point precision of the resampling weights (sum of a row's taps). */
#define WBITS 14
/* The horizontal pass keeps 8 fractional bits: 255 << 8 fits in uint16. */
#define HBITS (WBITS - 8)
/* Horizontal taps up to this many run unrolled (taps_pad): a downscale of
 * up to 3x, every scale a DCT-scaled decode leaves. */
#define HPASS_FIXED_MAX 4

/* A buffer kept across calls of one context: a fresh multi-100-KB malloc
 * per image is served by mmap and costs a page fault per 4 KB, which was
 * the biggest single cost of the pipeline. Past SCRATCH_KEEP it is given
 * back after each use, so one huge image does not pin memory. */
struct scratch {
	uint8_t *p;
	size_t cap;
};

#define SCRATCH_KEEP ((size_t)8 << 20)

struct transform_ctx {
	struct decoder_state ds; /* the decoders' (JPEG's decompressor) */
	tjhandle enc;		 /* created on first use, each */
	tjhandle xf;
	struct scratch pix; /* decoded pixels (pipeline only) */
	struct scratch tmp; /* resampling rows */
	struct scratch img; /* resampled / cropped image (pipeline only) */
	struct scratch jpg; /* worst-case JPEG encode buffer */
};

static void *scratch_get(struct scratch *s, size_t n)
{
	if (n > s->cap) {
		free(s->p);
		s->p = malloc(n);
		s->cap = s->p ? n : 0;
	}
	return s->p;
}

static void scratch_trim(struct scratch *s)
{
	if (s->cap > SCRATCH_KEEP) {
		free(s->p);
		s->p = NULL;
		s->cap = 0;
	}
}

static void ctx_trim(struct transform_ctx *tc)
{
	scratch_trim(&tc->pix);
	scratch_trim(&tc->tmp);
	scratch_trim(&tc->img);
	scratch_trim(&tc->jpg);
}

/* A buffer of n bytes: from sc when given (owned by the context), else a
 * new malloc the caller frees. */
static void *buf_get(struct scratch *sc, size_t n)
{
	return sc ? scratch_get(sc, n) : malloc(n);
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

static int image_alloc(struct image *img, unsigned w, unsigned h,
		       struct scratch *sc)
{
	memset(img, 0, sizeof(*img));
	if (!w || !h || w > TRANSFORM_MAX_SIDE || h > TRANSFORM_MAX_SIDE)
		return -EINVAL;
	img->rgb = buf_get(sc, (size_t)w * h * 3);
	if (!img->rgb)
		return -ENOMEM;
	img->w = w;
	img->h = h;
	return 0;
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
	b->p = buf_get(b->sc, n);
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

/* Per output sample i: taps n[i] source samples from start[i] with weights
 * w[i * maxn ...], which sum to 1 << WBITS. */
struct taps {
	unsigned *start, *n;
	int32_t *w;
	unsigned maxn;
	bool padded; /* every output has maxn taps (taps_pad) */
	/* With padded: per output, w as two pmaddwd operands (hpass_ssse3):
	 * (w0, w1) three times, 0, 0, then (w2, w3) three times, 0, 0. */
	int16_t *wv;
};

static void taps_free(struct taps *t)
{
	free(t->start);
	free(t->n);
	free(t->w);
	free(t->wv);
}

/* Makes the weights of output i sum to exactly 1 << WBITS: the rounding
 * error goes to the largest tap. */
static void normalise(int32_t *w, const double *f, unsigned n)
{
	double sum = 0;
	for (unsigned k = 0; k < n; k++)
		sum += f[k];
	int32_t tot = 0;
	unsigned big = 0;
	for (unsigned k = 0; k < n; k++) {
		w[k] = (int32_t)(f[k] / sum * (1 << WBITS) + 0.5);
		tot += w[k];
		if (w[k] > w[big])
			big = k;
	}
	w[big] += (1 << WBITS) - tot;
}

/* Box filter: output i covers source [i*s, (i+1)*s) with s = in/out >= 1;
 * each source sample weighs by how much of it lies inside. */
static void box_taps(struct taps *t, unsigned in, unsigned out, double *f)
{
	double s = (double)in / out;
	for (unsigned i = 0; i < out; i++) {
		double lo = i * s, hi = (i + 1) * s;
		unsigned j0 = (unsigned)lo, n = 0;
		for (unsigned j = j0; j < in && j < hi; j++) {
			double a = lo > j ? lo : j;
			double b = hi < j + 1 ? hi : j + 1;
			if (b > a && n < t->maxn)
				f[n++] = b - a;
		}
		t->start[i] = j0;
		t->n[i] = n ? n : 1;
		if (!n)
			f[0] = 1;
		normalise(t->w + (size_t)i * t->maxn, f, t->n[i]);
	}
}

/* Bilinear with centres aligned: output i samples source (i+0.5)*s - 0.5. */
static void bilinear_taps(struct taps *t, unsigned in, unsigned out)
{
	double s = (double)in / out;
	for (unsigned i = 0; i < out; i++) {
		double x = (i + 0.5) * s - 0.5;
		if (x < 0)
			x = 0;
		if (x > in - 1)
			x = in - 1;
		unsigned j = (unsigned)x;
		double fr = x - j, f[2] = {1 - fr, fr};
		t->start[i] = j;
		t->n[i] = j + 1 < in ? 2 : 1;
		if (t->n[i] == 1)
			f[0] = 1;
		normalise(t->w + (size_t)i * t->maxn, f, t->n[i]);
	}
}

/* Gives every output exactly maxn taps (zero weights added after the
 * last; a window that would run past the source's end starts earlier,
 * its weights moved along), so the horizontal pass runs a fixed count of
 * taps with no per-pixel loop: the same sums, so the same bytes. The
 * horizontal pass was two thirds of a resize, and a resize a third of an
 * echo pool's ingest (decode, resize) in a profile; a 375x282 -> 341x256
 * resize took 531 us, 380 us padded, 257-278 us with hpass_ssse3
 * (BENCHMARKS.md section 15, "Profiles of the decode"). Needs in >= maxn. */
static void taps_pad(struct taps *t, unsigned in, unsigned out)
{
	for (unsigned i = 0; i < out; i++) {
		int32_t *w = t->w + (size_t)i * t->maxn;
		unsigned n = t->n[i], shift = 0;
		if (t->start[i] + t->maxn > in)
			shift = t->start[i] + t->maxn - in;
		for (unsigned k = n; k-- > 0;)
			w[k + shift] = w[k];
		for (unsigned k = 0; k < shift; k++)
			w[k] = 0;
		for (unsigned k = n + shift; k < t->maxn; k++)
			w[k] = 0;
		t->start[i] -= shift;
		t->n[i] = t->maxn;
	}
	t->padded = true;
	t->wv = calloc((size_t)out * 16, sizeof(*t->wv));
	for (unsigned i = 0; t->wv && i < out; i++) {
		const int32_t *w = t->w + (size_t)i * t->maxn;
		int16_t *v = t->wv + (size_t)i * 16;
		for (unsigned k = 0; k < t->maxn; k++)
			for (unsigned c = 0; c < 3; c++)
				v[(k / 2) * 8 + 2 * c + k % 2] = (int16_t)w[k];
	}
}

static int taps_make(struct taps *t, unsigned in, unsigned out, int pad)
{
	memset(t, 0, sizeof(*t));
	/* Box taps span at most ceil(in/out) + 1 samples. */
	t->maxn = out < in ? (in + out - 1) / out + 1 : 2;
	t->start = malloc(out * sizeof(*t->start));
	t->n = malloc(out * sizeof(*t->n));
	t->w = malloc((size_t)out * t->maxn * sizeof(*t->w));
	double *f = malloc(t->maxn * sizeof(*f));
	if (!t->start || !t->n || !t->w || !f) {
		free(f);
		taps_free(t);
		return -ENOMEM;
	}
	if (out < in)
		box_taps(t, in, out, f);
	else
		bilinear_taps(t, in, out);
	free(f);
	if (pad && t->maxn <= HPASS_FIXED_MAX && in >= t->maxn)
		taps_pad(t, in, out);
	return 0;
}

/* The horizontal pass for output columns [x0, x0 + ow): fixed taps each
 * (padded; a constant where inlined), or with fixed 0 each column's own
 * n. */
static inline __attribute__((always_inline)) void
hpass_fixed(const uint8_t *src, uint16_t *dst, const struct taps *t,
	    unsigned x0, unsigned ow, unsigned fixed)
{
	const int32_t half = 1 << (HBITS - 1);

	for (unsigned x = 0; x < ow; x++) {
		unsigned i = x0 + x, n = fixed ? fixed : t->n[i];
		const uint8_t *s = src + 3 * (size_t)t->start[i];
		const int32_t *w = t->w + (size_t)i * t->maxn;
		int32_t r = half, g = half, b = half;
		for (unsigned k = 0; k < n; k++) {
			r += w[k] * s[3 * k];
			g += w[k] * s[3 * k + 1];
			b += w[k] * s[3 * k + 2];
		}
		dst[3 * x] = (uint16_t)(r >> HBITS);
		dst[3 * x + 1] = (uint16_t)(g >> HBITS);
		dst[3 * x + 2] = (uint16_t)(b >> HBITS);
	}
}

#ifdef HAVE_X86_SHUFFLE
/* hpass_fixed for 2 to 4 padded taps with one 16-byte load, two byte
 * shuffles and two pmaddwd per output pixel: the shuffles put taps k and
 * k + 1 of each channel side by side as 16-bit pairs, pmaddwd multiplies
 * them by (w[k], w[k + 1]) and adds each pair (exact: 8-bit samples, 14-bit
 * weights), so the sums and bytes are hpass_fixed's. Pixels whose load
 * would pass the row's end (the last few) go through hpass_fixed; a store
 * writes 8 bytes for 6, the extra 2 overwritten by the next pixel, so the
 * last pixel is stored exactly. row: the bytes of the source row. */
__attribute__((target("ssse3"))) static void
hpass_ssse3(const uint8_t *src, size_t row, uint16_t *dst,
	    const struct taps *t, unsigned x0, unsigned ow)
{
	const unsigned n = t->maxn;
	const __m128i lo = _mm_setr_epi8(0, -1, 3, -1, 1, -1, 4, -1, 2, -1, 5,
					 -1, -1, -1, -1, -1);
	const __m128i hi = _mm_setr_epi8(6, -1, 9, -1, 7, -1, 10, -1, 8, -1,
					 11, -1, -1, -1, -1, -1);
	const __m128i low16 = _mm_setr_epi8(0, 1, 4, 5, 8, 9, 12, 13, -1, -1,
					    -1, -1, -1, -1, -1, -1);
	const __m128i half = _mm_set1_epi32(1 << (HBITS - 1));

	for (unsigned x = 0; x < ow; x++) {
		unsigned i = x0 + x;
		size_t off = 3 * (size_t)t->start[i];
		if (off + 16 > row) {
			hpass_fixed(src, dst + 3 * (size_t)x, t, i, 1, n);
			continue;
		}
		__m128i v = _mm_loadu_si128((const __m128i *)(const void *)(src + off));
		const __m128i *wv = (const __m128i *)(const void *)(t->wv + (size_t)i * 16);
		__m128i acc = _mm_add_epi32(
			half, _mm_madd_epi16(_mm_shuffle_epi8(v, lo), _mm_loadu_si128(wv)));
		if (n > 2)
			acc = _mm_add_epi32(acc, _mm_madd_epi16(_mm_shuffle_epi8(v, hi),
								_mm_loadu_si128(wv + 1)));
		__m128i out = _mm_shuffle_epi8(_mm_srli_epi32(acc, HBITS), low16);
		if (x + 1 < ow)
			_mm_storel_epi64((__m128i *)(void *)(dst + 3 * (size_t)x), out);
		else {
			uint16_t px[4];
			_mm_storel_epi64((__m128i *)(void *)px, out);
			memcpy(dst + 3 * (size_t)x, px, 3 * sizeof(*px));
		}
	}
}
#endif

/* Horizontal pass of one source row of row bytes into 16-bit samples (8
 * fraction bits) for output columns [x0, x0 + ow). */
static void hpass_row(const uint8_t *src, size_t row, uint16_t *dst,
		      const struct taps *t, unsigned x0, unsigned ow)
{
#ifdef HAVE_X86_SHUFFLE
	if (t->padded && t->wv && __builtin_cpu_supports("ssse3")) {
		hpass_ssse3(src, row, dst, t, x0, ow);
		return;
	}
#else
	(void)row;
#endif
	switch (t->padded ? t->maxn : 0) {
	case 2: hpass_fixed(src, dst, t, x0, ow, 2); return;
	case 3: hpass_fixed(src, dst, t, x0, ow, 3); return;
	case 4: hpass_fixed(src, dst, t, x0, ow, 4); return;
	default: hpass_fixed(src, dst, t, x0, ow, 0); return;
	}
}

struct region {
	unsigned fw, fh;     /* the full resized size */
	unsigned x, y, w, h; /* the window of it to produce */
};

/* Vertical pass: output rows from the horizontally resampled source rows
 * tmp (row r of tmp is source row r0 + r). */
static void vpass(const uint16_t *tmp, unsigned r0, const struct taps *ty,
		  const struct region *rg, int32_t *acc, struct image *out)
{
	size_t row = (size_t)rg->w * 3;
	for (unsigned y = 0; y < rg->h; y++) {
		unsigned i = rg->y + y, n = ty->n[i];
		const int32_t *w = ty->w + (size_t)i * ty->maxn;
		memset(acc, 0, row * sizeof(*acc));
		for (unsigned k = 0; k < n; k++) {
			const uint16_t *s = tmp + (ty->start[i] + k - r0) * row;
			int32_t wk = w[k];
			for (size_t j = 0; j < row; j++)
				acc[j] += wk * s[j];
		}
		uint8_t *d = out->rgb + y * row;
		const int32_t half = 1 << (WBITS + 7);
		for (size_t j = 0; j < row; j++)
			d[j] = (uint8_t)((acc[j] + half) >> (WBITS + 8));
	}
}

static int resample_passes(const struct image *in, const struct taps *tx,
			   const struct taps *ty, const struct region *rg,
			   struct scratch *tsc, struct image *out)
{
	unsigned last = rg->y + rg->h - 1;
	unsigned r0 = ty->start[rg->y];
	unsigned r1 = ty->start[last] + ty->n[last]; /* exclusive */
	size_t row = (size_t)rg->w * 3;
	/* One allocation: the accumulator row, then the resampled rows. */
	size_t accb = row * sizeof(int32_t);
	uint8_t *mem = buf_get(tsc, accb + (r1 - r0) * row * sizeof(uint16_t));
	if (!mem)
		return -ENOMEM;
	int32_t *acc = (int32_t *)(void *)mem;
	uint16_t *tmp = (uint16_t *)(void *)(mem + accb);
	for (unsigned r = r0; r < r1; r++)
		hpass_row(in->rgb + (size_t)r * in->w * 3, (size_t)in->w * 3,
			  tmp + (r - r0) * row, tx, rg->x, rg->w);
	vpass(tmp, r0, ty, rg, acc, out);
	if (!tsc)
		free(mem);
	return 0;
}

/* Resamples in to rg->fw x rg->fh and keeps only the window of rg (cropping
 * while resampling saves the work on pixels the crop throws away). */
static int crop_into(const struct image *in, unsigned x, unsigned y, unsigned w,
		     unsigned h, struct image *out, struct scratch *sc);

/* tsc and osc (may be NULL: malloc) hold the rows and the output. */
static int resample(const struct image *in, const struct region *rg,
		    struct scratch *tsc, struct scratch *osc, struct image *out)
{
	if (!in || !in->rgb || !rg->w || !rg->h || rg->x + rg->w > rg->fw ||
	    rg->y + rg->h > rg->fh || rg->fw > TRANSFORM_MAX_SIDE ||
	    rg->fh > TRANSFORM_MAX_SIDE)
		return -EINVAL;
	if (rg->fw == in->w && rg->fh == in->h)
		return crop_into(in, rg->x, rg->y, rg->w, rg->h, out, osc);
	struct taps tx, ty;
	int r = taps_make(&tx, in->w, rg->fw, 1);
	if (r < 0)
		return r;
	r = taps_make(&ty, in->h, rg->fh, 0);
	if (r < 0) {
		taps_free(&tx);
		return r;
	}
	r = image_alloc(out, rg->w, rg->h, osc);
	if (r == 0)
		r = resample_passes(in, &tx, &ty, rg, tsc, out);
	if (r < 0 && !osc)
		transform_image_free(out);
	taps_free(&tx);
	taps_free(&ty);
	return r;
}

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
	struct region rg = {0};
	transform_resized_dims(in->w, in->h, shorter, &rg.fw, &rg.fh);
	rg.w = rg.fw;
	rg.h = rg.fh;
	return resample(in, &rg, NULL, NULL, out);
}

/* ---- crop, flip, randomness ----------------------------------------- */

static int crop_into(const struct image *in, unsigned x, unsigned y, unsigned w,
		     unsigned h, struct image *out, struct scratch *sc)
{
	memset(out, 0, sizeof(*out));
	if (!in || !in->rgb || !w || !h || x > in->w || w > in->w - x ||
	    y > in->h || h > in->h - y)
		return -EINVAL;
	int r = image_alloc(out, w, h, sc);
	if (r < 0)
		return r;
	for (unsigned j = 0; j < h; j++)
		memcpy(out->rgb + (size_t)j * w * 3,
		       in->rgb + ((size_t)(y + j) * in->w + x) * 3,
		       (size_t)w * 3);
	return 0;
}

int transform_crop(const struct image *in, unsigned x, unsigned y, unsigned w,
		   unsigned h, struct image *out)
{
	return crop_into(in, x, y, w, h, out, NULL);
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

static int check_opts(const struct transform_opts *o)
{
	if (!o || o->size > TRANSFORM_MAX_SIDE ||
	    o->crop > TRANSFORM_MAX_SIDE || o->quality < 0 ||
	    o->quality > 100 || o->format < TF_SAME || o->format > TF_PPM)
		return -EINVAL;
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
		      struct region *rg, char *why, size_t whylen)
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

int transform_prepare(struct transform_ctx *tc,
		      const struct transform_opts *opts, const void *in,
		      size_t inlen, struct image *out, char *why, size_t whylen)
{
	memset(out, 0, sizeof(*out));
	if (check_opts(opts) < 0)
		return decoder_fail(why, whylen, -EINVAL, "bad options");
	struct image img;
	struct region rg;
	int r = decode_for(tc, opts, in, inlen, &img, &rg, why, whylen);
	if (r < 0)
		return r;
	rg.w = rg.fw;
	rg.h = rg.fh;
	r = resample(&img, &rg, &tc->tmp, NULL, out);
	ctx_trim(tc);
	if (r < 0)
		return decoder_fail(why, whylen, r, "resize failed");
	return 0;
}

/* Crop window (full image when no crop) and flip from opts and rand. */
static int pick_window(const struct transform_opts *o, struct region *rg,
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

int transform_augment(struct transform_ctx *tc,
		      const struct transform_opts *opts,
		      const struct image *img, uint64_t rand, uint8_t **out,
		      size_t *outlen)
{
	*out = NULL;
	*outlen = 0;
	if (check_opts(opts) < 0 || !img || !img->rgb)
		return -EINVAL;
	struct region rg = {.fw = img->w, .fh = img->h};
	int flip;
	int r = pick_window(opts, &rg, rand, &flip);
	if (r < 0)
		return r;
	struct image c;
	r = crop_into(img, rg.x, rg.y, rg.w, rg.h, &c, &tc->img);
	if (r < 0)
		return r;
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
		    uint64_t rand, struct region *rg, int *flip, char *hdr,
		    size_t *hlen)
{
	if (check_opts(opts) < 0 || opts->format != TF_PPM || !w || !h)
		return -EINVAL;
	*rg = (struct region){.fw = w, .fh = h};
	int r = pick_window(opts, rg, rand, flip);
	if (r < 0)
		return r;
	*hlen = (size_t)snprintf(hdr, 40, "P6\n%u %u\n255\n", rg->w, rg->h);
	return 0;
}

ssize_t transform_augment_ppm_size(const struct transform_opts *opts,
				   unsigned w, unsigned h)
{
	struct region rg;
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
	struct region rg;
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
	struct region rg;
	int r = decode_for(tc, o, in, inlen, &img, &rg, why, whylen);
	if (r < 0)
		return r;
	int flip;
	r = pick_window(o, &rg, rand, &flip);
	if (r == 0)
		r = resample(&img, &rg, &tc->tmp, &tc->img, &res);
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

int transform_apply(struct transform_ctx *tc, const struct transform_opts *opts,
		    const void *in, size_t inlen, uint64_t rand, uint8_t **out,
		    size_t *outlen, char *why, size_t whylen)
{
	*out = NULL;
	*outlen = 0;
	if (check_opts(opts) < 0 || !in)
		return decoder_fail(why, whylen, -EINVAL, "bad options");
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
