/* resample.c - area-average and bilinear resampling of RGB images (the
 * resize of the image engine, split out of transform.c unchanged). */
#include "cache/image/resample.h"

#include <errno.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#if defined(__x86_64__) || defined(__i386__)
#include <tmmintrin.h> /* SSSE3 byte shuffle, for the horizontal pass */
#define HAVE_X86_SHUFFLE 1
#endif

/* Fixed-point precision of the resampling weights (sum of a row's taps). */
#define WBITS 14
/* The horizontal pass keeps 8 fractional bits: 255 << 8 fits in uint16. */
#define HBITS (WBITS - 8)
/* Horizontal taps up to this many run unrolled (taps_pad): a downscale of
 * up to 3x, every scale a DCT-scaled decode leaves. */
#define HPASS_FIXED_MAX 4

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

/* Vertical pass: output rows from the horizontally resampled source rows
 * tmp (row r of tmp is source row r0 + r). */
static void vpass(const uint16_t *tmp, unsigned r0, const struct taps *ty,
		  const struct resample_region *rg, int32_t *acc, struct image *out)
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
			   const struct taps *ty, const struct resample_region *rg,
			   struct scratch *tsc, struct image *out)
{
	unsigned last = rg->y + rg->h - 1;
	unsigned r0 = ty->start[rg->y];
	unsigned r1 = ty->start[last] + ty->n[last]; /* exclusive */
	size_t row = (size_t)rg->w * 3;
	/* One allocation: the accumulator row, then the resampled rows. */
	size_t accb = row * sizeof(int32_t);
	uint8_t *mem = imgbuf_get(tsc, accb + (r1 - r0) * row * sizeof(uint16_t));
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
int resample_region(const struct image *in, const struct resample_region *rg,
		    struct scratch *tsc, struct scratch *osc, struct image *out)
{
	if (!in || !in->rgb || !rg->w || !rg->h || rg->x + rg->w > rg->fw ||
	    rg->y + rg->h > rg->fh || rg->fw > TRANSFORM_MAX_SIDE ||
	    rg->fh > TRANSFORM_MAX_SIDE)
		return -EINVAL;
	if (rg->fw == in->w && rg->fh == in->h)
		return imgbuf_crop(in, rg->x, rg->y, rg->w, rg->h, out, osc);
	struct taps tx, ty;
	int r = taps_make(&tx, in->w, rg->fw, 1);
	if (r < 0)
		return r;
	r = taps_make(&ty, in->h, rg->fh, 0);
	if (r < 0) {
		taps_free(&tx);
		return r;
	}
	r = imgbuf_alloc(out, rg->w, rg->h, osc);
	if (r == 0)
		r = resample_passes(in, &tx, &ty, rg, tsc, out);
	if (r < 0 && !osc)
		transform_image_free(out);
	taps_free(&tx);
	taps_free(&ty);
	return r;
}
