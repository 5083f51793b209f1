/* jpegdec.c - JPEG input for the image engine, with TurboJPEG (see
 * jpegdec.h). */
#include "cache/image/jpegdec.h"

#include <errno.h>
#include <jconfig.h> /* LIBJPEG_TURBO_VERSION_NUMBER */
#include <stdio.h>
#include <stdlib.h>
#include <turbojpeg.h>

#include "common/util.h"

/* Every decode and lossless transform runs with these: a scan bomb (> 500
 * progressive scans) and any libjpeg warning (truncation, corrupt data) are
 * errors, not silently repaired images. The accurate IDCT is TurboJPEG's
 * default when decompressing and is kept. */
#define DECODE_FLAGS (TJFLAG_LIMITSCANS | TJFLAG_STOPONWARNING)

struct jpegdec {
	tjhandle tj; /* the decompressor; NULL until used or after a failure */
};

int jpegdec_flags(void)
{
	return DECODE_FLAGS;
}

void jpegdec_free(struct jpegdec *jd)
{
	if (!jd)
		return;
	if (jd->tj)
		tjDestroy(jd->tj);
	free(jd);
}

static tjhandle handle(struct decoder_state *st)
{
	if (!st->jpeg)
		st->jpeg = xcalloc(1, sizeof(*st->jpeg));
	if (!st->jpeg->tj)
		st->jpeg->tj = tjInitDecompress();
	return st->jpeg->tj;
}

/* Destroys the decompressor after a call on it failed; the next use makes
 * a fresh one. libjpeg-turbo 2.1's tjDecompressHeader3 returns from its
 * error longjmp without aborting the decompressor, so the handle stays
 * mid-parse and the next image is read as the rest of the bad one: every
 * later JPEG of that worker failed with the bad one's message (issue 21).
 * Dropping the handle after any failure leaves nothing for a bad image to
 * pass on, whatever state a library version keeps; it costs one handle
 * creation per bad image. */
static void drop(struct decoder_state *st)
{
	if (st->jpeg && st->jpeg->tj)
		tjDestroy(st->jpeg->tj);
	if (st->jpeg)
		st->jpeg->tj = NULL;
}

/* ---- JPEG header pre-scan ------------------------------------------- */

#define SOF_COMPS 10 /* libjpeg's MAX_COMPONENTS */

struct sof {
	unsigned marker; /* 0xC0..0xCF */
	unsigned precision, w, h, ncomp;
	unsigned hs[SOF_COMPS], vs[SOF_COMPS]; /* sampling factors */
	size_t next; /* offset of the segment after the frame header */
};

/* The next marker segment at *i: its marker in *m, the offset of its length
 * field in *at and its length in *seg (0 for standalone markers). Returns 0,
 * or -ENOENT at the end or on anything that is not a marker. */
static int next_segment(const uint8_t *p, size_t len, size_t *i, unsigned *m,
			size_t *at, size_t *seg)
{
	if (*i + 4 > len || p[*i] != 0xFF)
		return -ENOENT;
	while (*i < len && p[*i] == 0xFF)
		(*i)++; /* fill bytes */
	if (*i + 3 > len)
		return -ENOENT;
	*m = p[(*i)++];
	*at = *i;
	*seg = 0;
	if (*m == 0x01 || (*m >= 0xD0 && *m <= 0xD7))
		return 0; /* standalone markers */
	if (*m == 0xD9)
		return -ENOENT;
	*seg = ((size_t)p[*i] << 8) | p[*i + 1];
	if (*seg < 2 || *i + *seg > len)
		return -ENOENT;
	*i += *seg;
	return 0;
}

static void sof_comps(const uint8_t *p, size_t seg, struct sof *s)
{
	for (unsigned c = 0; c < s->ncomp && c < SOF_COMPS; c++) {
		size_t o = 8 + 3 * (size_t)c + 1;
		unsigned hv = o < seg ? p[o] : 0x11;
		s->hs[c] = hv >> 4 ? hv >> 4 : 1;
		s->vs[c] = hv & 15 ? hv & 15 : 1;
	}
}

/* Walks the marker segments up to the frame header, so that 12-bit and
 * lossless JPEGs get -ENOTSUP (libjpeg-turbo's 8-bit TurboJPEG only calls
 * them "corrupt") and the size is known before libjpeg sees the data.
 * Returns 0, or -ENOENT when no SOF comes before the first scan or the end. */
static int find_sof(const uint8_t *p, size_t len, struct sof *s)
{
	size_t i = 2, at, seg;
	unsigned m;
	while (next_segment(p, len, &i, &m, &at, &seg) == 0) {
		if (m == 0xDA)
			return -ENOENT;
		if (seg && m >= 0xC0 && m <= 0xCF && m != 0xC4 && m != 0xC8 &&
		    m != 0xCC) {
			if (seg < 8)
				return -ENOENT;
			s->marker = m;
			s->precision = p[at + 2];
			s->h = ((unsigned)p[at + 3] << 8) | p[at + 4];
			s->w = ((unsigned)p[at + 5] << 8) | p[at + 6];
			s->ncomp = p[at + 7];
			sof_comps(p + at, seg, s);
			s->next = i;
			return 0;
		}
	}
	return -ENOENT;
}

/* Components in the first scan (after the frame header), 0 if none. */
static unsigned first_scan_comps(const uint8_t *p, size_t len, size_t from)
{
	size_t i = from, at, seg;
	unsigned m;
	while (next_segment(p, len, &i, &m, &at, &seg) == 0)
		if (m == 0xDA && seg >= 3)
			return p[at + 2];
	return 0;
}

/* Checks what the frame header declares. Returns 0 or a negative errno. */
static int check_jpeg_frame(const uint8_t *p, size_t len, uint64_t maxpx,
			    char *why, size_t whylen)
{
	struct sof s;
	if (find_sof(p, len, &s) < 0)
		return decoder_fail(why, whylen, -EBADMSG,
				    "JPEG: no frame header");
	if ((s.marker & 3) == 3)
		return decoder_fail(why, whylen, -ENOTSUP,
				    "JPEG: lossless or hierarchical (SOF%u)",
				    s.marker - 0xC0);
	if (s.precision != 8)
		return decoder_fail(why, whylen, -ENOTSUP,
				    "JPEG: %u-bit samples", s.precision);
	if ((uint64_t)s.w * s.h > decoder_max_pixels(maxpx))
		return decoder_fail(
			why, whylen, -EFBIG, "JPEG: %ux%u is above %llu pixels",
			s.w, s.h,
			(unsigned long long)decoder_max_pixels(maxpx));
	return 0;
}

int jpegdec_header(struct decoder_state *st, const void *in, size_t len,
		   uint64_t maxpx, struct jpegdec_info *ji, char *why,
		   size_t whylen)
{
	tjhandle tj = handle(st);
	int r;

	if (!tj)
		return decoder_fail(why, whylen, -ENOMEM,
				    "TurboJPEG init failed");
	r = check_jpeg_frame(in, len, maxpx, why, whylen);
	if (r < 0)
		return r;
	if (tjDecompressHeader3(tj, in, (unsigned long)len, &ji->w, &ji->h,
				&ji->subsamp, &ji->cs) < 0) {
		r = decoder_fail(why, whylen, -EBADMSG, "JPEG header: %s",
				 tjGetErrorStr2(tj));
		drop(st);
		return r;
	}
	/* The pre-scan and libjpeg agree unless the file is odd; trust the
	 * stricter of the two for the cap. */
	if (ji->w <= 0 || ji->h <= 0 ||
	    (uint64_t)ji->w * (uint64_t)ji->h > decoder_max_pixels(maxpx))
		return decoder_fail(why, whylen, -EFBIG,
				    "JPEG: %dx%d too large", ji->w, ji->h);
	return 0;
}

/* The smallest DCT scaling factor (never above 1) whose shorter output side
 * is still >= hint; 1/1 when hint is 0 or the image is already small. */
static tjscalingfactor pick_scale(int w, int h, unsigned hint)
{
	tjscalingfactor best = {1, 1};
	int n = 0;
	tjscalingfactor *f = hint ? tjGetScalingFactors(&n) : NULL;
	int shorter = w < h ? w : h;
	for (int i = 0; f && i < n; i++) {
		if (f[i].num > f[i].denom)
			continue;
		if ((unsigned)TJSCALED(shorter, f[i]) < hint)
			continue;
		if ((long)f[i].num * best.denom < (long)best.num * f[i].denom)
			best = f[i];
	}
	return best;
}

/* Adobe CMYK as libjpeg hands it back is inverted (255 = no ink), so
 * R = C' * K' / 255. Converts 4-byte pixels to 3-byte in the same buffer. */
static void cmyk_to_rgb(uint8_t *buf, size_t npix)
{
	for (size_t i = 0; i < npix; i++) {
		const uint8_t *s = buf + 4 * i;
		unsigned k = s[3];
		uint8_t r = (uint8_t)((s[0] * k + 127) / 255);
		uint8_t g = (uint8_t)((s[1] * k + 127) / 255);
		uint8_t b = (uint8_t)((s[2] * k + 127) / 255);
		buf[3 * i] = r;
		buf[3 * i + 1] = g;
		buf[3 * i + 2] = b;
	}
}
static uint64_t ceil_div(uint64_t a, uint64_t b)
{
	return (a + b - 1) / b;
}

/* libjpeg's whole-image coefficient buffer: every component's 8x8 blocks,
 * rounded up to its sampling factors, 64 coefficients of 2 bytes each. */
static uint64_t coef_bytes(const struct sof *s)
{
	unsigned n = s->ncomp < SOF_COMPS ? s->ncomp : SOF_COMPS;
	unsigned hmax = 1, vmax = 1;
	uint64_t total = 0;

	for (unsigned c = 0; c < n; c++) {
		hmax = s->hs[c] > hmax ? s->hs[c] : hmax;
		vmax = s->vs[c] > vmax ? s->vs[c] : vmax;
	}
	for (unsigned c = 0; c < n; c++) {
		uint64_t wb =
			ceil_div(ceil_div((uint64_t)s->w * s->hs[c], hmax), 8);
		uint64_t hb =
			ceil_div(ceil_div((uint64_t)s->h * s->vs[c], vmax), 8);
		wb = ceil_div(wb, s->hs[c]) * s->hs[c];
		hb = ceil_div(hb, s->vs[c]) * s->vs[c];
		total += wb * hb * 128;
	}
	/* Components beyond libjpeg's limit fail anyway; count them. */
	return total * (s->ncomp > n ? 2 : 1);
}

static int jpeg_sniff(const uint8_t *p, size_t len)
{
	return len >= 3 && p[0] == 0xFF && p[1] == 0xD8 && p[2] == 0xFF;
}

static int jpeg_probe(struct decoder_state *st, const uint8_t *p, size_t len,
		      uint64_t maxpx, unsigned *w, unsigned *h, char *why,
		      size_t whylen)
{
	struct jpegdec_info ji;
	int r = jpegdec_header(st, p, len, maxpx, &ji, why, whylen);

	*w = r < 0 ? 0 : (unsigned)ji.w;
	*h = r < 0 ? 0 : (unsigned)ji.h;
	return r;
}

/* From the pre-scan: libjpeg keeps the whole image's coefficients when
 * the file is progressive or its first scan lacks components, and 16 rows
 * of each component's samples (2 bytes each) in any case. */
static int jpeg_plan(const uint8_t *p, size_t len, unsigned hint,
		     struct decode_plan *pl)
{
	struct sof s = {0};

	if (find_sof(p, len, &s) < 0 || !s.w || !s.h)
		return -EBADMSG;
	int progressive = s.marker == 0xC2 || s.marker == 0xC6 ||
			  s.marker == 0xCA || s.marker == 0xCE;
	int buffered =
		progressive || first_scan_comps(p, len, s.next) < s.ncomp;
	tjscalingfactor sf = pick_scale((int)s.w, (int)s.h, hint);
	*pl = (struct decode_plan){
		.w = (unsigned)TJSCALED((int)s.w, sf),
		.h = (unsigned)TJSCALED((int)s.h, sf),
		.bpp = s.ncomp == 4 ? 4 : 3,
		.coef = coef_bytes(&s),
	};
	pl->work = (buffered ? pl->coef : 0) + (uint64_t)s.w * s.ncomp * 16 * 2;
	return 0;
}

static int jpeg_decode(struct decoder_state *st, const uint8_t *p, size_t len,
		       unsigned hint, uint64_t maxpx, struct decode_out *out,
		       char *why, size_t whylen)
{
	struct jpegdec_info ji;
	int r = jpegdec_header(st, p, len, maxpx, &ji, why, whylen);
	if (r < 0)
		return r;
	tjhandle tj = st->jpeg->tj;
	tjscalingfactor sf = pick_scale(ji.w, ji.h, hint);
	int dw = TJSCALED(ji.w, sf), dh = TJSCALED(ji.h, sf);
	int cmyk = ji.cs == TJCS_CMYK || ji.cs == TJCS_YCCK;
	/* libjpeg-turbo has no CMYK -> RGB conversion: take CMYK, convert. */
	int pf = cmyk ? TJPF_CMYK : TJPF_RGB;
	uint8_t *buf = out->get(out->arg, (size_t)dw * dh * (cmyk ? 4 : 3));
	if (!buf)
		return decoder_fail(why, whylen, -ENOMEM,
				    "JPEG: no memory for %dx%d", dw, dh);
	if (tjDecompress2(tj, p, (unsigned long)len, buf, dw, 0, dh, pf,
			  DECODE_FLAGS) < 0) {
		r = decoder_fail(why, whylen, -EBADMSG, "JPEG: %s",
				 tjGetErrorStr2(tj));
		drop(st);
		return r;
	}
	if (cmyk)
		cmyk_to_rgb(buf, (size_t)dw * dh);
	out->rgb = buf;
	out->w = (unsigned)dw;
	out->h = (unsigned)dh;
	return 0;
}

static void jpeg_version(char *buf, size_t len)
{
	snprintf(buf, len, "libjpeg-turbo %d.%d.%d",
		 LIBJPEG_TURBO_VERSION_NUMBER / 1000000,
		 LIBJPEG_TURBO_VERSION_NUMBER / 1000 % 1000,
		 LIBJPEG_TURBO_VERSION_NUMBER % 1000);
}

const struct decoder jpegdec_decoder = {
	.name = "JPEG",
	.same = TF_JPEG,
	.sniff = jpeg_sniff,
	.probe = jpeg_probe,
	.plan = jpeg_plan,
	.decode = jpeg_decode,
	.version = jpeg_version,
};
