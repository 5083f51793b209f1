/* ppmdec.c - binary PPM input for the image engine (see ppmdec.h). */
#include "cache/image/ppmdec.h"

#include <errno.h>
#include <limits.h>
#include <string.h>

#include "common/util.h"

/* Skips whitespace and '#' comments, then reads a decimal number. */
static int ppm_number(const uint8_t *p, size_t len, size_t *i, unsigned *out)
{
	for (;;) {
		if (*i >= len)
			return -EBADMSG;
		uint8_t c = p[*i];
		if (c == '#') {
			while (*i < len && p[*i] != '\n')
				(*i)++;
		} else if (c == ' ' || c == '\t' || c == '\n' || c == '\r' ||
			   c == '\v' || c == '\f') {
			(*i)++;
		} else {
			break;
		}
	}
	size_t start = *i;
	while (*i < len && p[*i] >= '0' && p[*i] <= '9' && *i - start < 10)
		(*i)++;
	uint64_t v;
	if (parse_u64_n((const char *)p + start, *i - start, &v) < 0 ||
	    v > UINT_MAX)
		return -EBADMSG;
	*out = (unsigned)v;
	return 0;
}

struct ppm_hdr {
	unsigned w, h, maxval;
	size_t data; /* offset of the first pixel byte */
};

static int ppm_header(const uint8_t *p, size_t len, uint64_t maxpx,
		      struct ppm_hdr *ph, char *why, size_t whylen)
{
	size_t i = 2;
	if (ppm_number(p, len, &i, &ph->w) < 0 ||
	    ppm_number(p, len, &i, &ph->h) < 0 ||
	    ppm_number(p, len, &i, &ph->maxval) < 0 || i >= len)
		return decoder_fail(why, whylen, -EBADMSG, "PPM: bad header");
	/* Exactly one whitespace byte separates maxval from the pixels. */
	if (p[i] != ' ' && p[i] != '\n' && p[i] != '\r' && p[i] != '\t')
		return decoder_fail(why, whylen, -EBADMSG,
				    "PPM: bad header end");
	ph->data = i + 1;
	if (ph->maxval != 255)
		return decoder_fail(why, whylen, -ENOTSUP,
				    "PPM: maxval %u (only 255)", ph->maxval);
	if (!ph->w || !ph->h)
		return decoder_fail(why, whylen, -EBADMSG, "PPM: empty image");
	if ((uint64_t)ph->w * ph->h > decoder_max_pixels(maxpx) ||
	    ph->w > TRANSFORM_MAX_SIDE || ph->h > TRANSFORM_MAX_SIDE)
		return decoder_fail(why, whylen, -EFBIG, "PPM: %ux%u too large",
				    ph->w, ph->h);
	if ((len - ph->data) / 3 / ph->w < ph->h)
		return decoder_fail(why, whylen, -EBADMSG,
				    "PPM: truncated pixels");
	return 0;
}

static int ppm_sniff(const uint8_t *p, size_t len)
{
	return len >= 2 && p[0] == 'P' && p[1] == '6';
}

static int ppm_probe(struct decoder_state *st, const uint8_t *p, size_t len,
		     uint64_t maxpx, unsigned *w, unsigned *h, char *why,
		     size_t whylen)
{
	struct ppm_hdr ph = {0};
	int r = ppm_header(p, len, maxpx, &ph, why, whylen);

	(void)st;
	*w = ph.w;
	*h = ph.h;
	return r;
}

static int ppm_plan(const uint8_t *p, size_t len, unsigned hint,
		    struct decode_plan *pl)
{
	struct ppm_hdr ph = {0};

	(void)hint;
	if (ppm_header(p, len, UINT64_MAX, &ph, NULL, 0) < 0)
		return -EBADMSG;
	*pl = (struct decode_plan){.w = ph.w, .h = ph.h, .bpp = 3};
	return 0;
}

static int ppm_decode(struct decoder_state *st, const uint8_t *p, size_t len,
		      unsigned hint, uint64_t maxpx, struct decode_out *out,
		      char *why, size_t whylen)
{
	struct ppm_hdr ph;
	int r = ppm_header(p, len, maxpx, &ph, why, whylen);

	(void)st;
	(void)hint;
	if (r < 0)
		return r;
	out->rgb = out->get(out->arg, (size_t)ph.w * ph.h * 3);
	if (!out->rgb)
		return decoder_fail(why, whylen, -ENOMEM, "PPM: no memory");
	memcpy(out->rgb, p + ph.data, (size_t)ph.w * ph.h * 3);
	out->w = ph.w;
	out->h = ph.h;
	return 0;
}

const struct decoder ppmdec_decoder = {
	.name = "PPM",
	.same = TF_PPM,
	.sniff = ppm_sniff,
	.probe = ppm_probe,
	.plan = ppm_plan,
	.decode = ppm_decode,
	.version = NULL,
};
