/* webpdec.c - WebP input for the image engine, with libwebp (see
 * webpdec.h). */
#include "cache/image/webpdec.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <webp/decode.h>

#include "cache/image/pngdec.h"
#include "cache/image/transform.h"

static int fail(char *why, size_t whylen, int err, const char *what)
{
	if (why && whylen)
		snprintf(why, whylen, "WebP: %s", what);
	return err;
}

int webpdec_sniff(const void *in, size_t len)
{
	const uint8_t *p = in;
	return len >= 12 && memcmp(p, "RIFF", 4) == 0 &&
	       memcmp(p + 8, "WEBP", 4) == 0;
}

static int features(const void *in, size_t len, WebPBitstreamFeatures *f,
		    char *why, size_t whylen)
{
	VP8StatusCode s = WebPGetFeatures(in, len, f);

	if (s == VP8_STATUS_NOT_ENOUGH_DATA)
		return fail(why, whylen, -EBADMSG, "truncated header");
	if (s == VP8_STATUS_UNSUPPORTED_FEATURE)
		return fail(why, whylen, -ENOTSUP, "unsupported feature");
	if (s != VP8_STATUS_OK)
		return fail(why, whylen, -EBADMSG, "bad header");
	if (f->has_animation)
		return fail(why, whylen, -ENOTSUP, "animated WebP");
	if (f->width <= 0 || f->height <= 0)
		return fail(why, whylen, -EBADMSG, "empty image");
	if ((unsigned)f->width > TRANSFORM_MAX_SIDE ||
	    (unsigned)f->height > TRANSFORM_MAX_SIDE)
		return fail(why, whylen, -EFBIG, "image too large");
	return 0;
}

int webpdec_probe(const void *in, size_t len, unsigned *w, unsigned *h,
		  char *why, size_t whylen)
{
	WebPBitstreamFeatures f;
	int r = features(in, len, &f, why, whylen);

	*w = r ? 0 : (unsigned)f.width;
	*h = r ? 0 : (unsigned)f.height;
	return r;
}

int webpdec_decode(const void *in, size_t len, uint8_t *rgb, unsigned w,
		   unsigned h, char *why, size_t whylen)
{
	WebPBitstreamFeatures f;
	size_t n = (size_t)w * h;
	uint8_t *rgba;
	int r = features(in, len, &f, why, whylen);

	if (r)
		return r;
	if ((unsigned)f.width != w || (unsigned)f.height != h)
		return fail(why, whylen, -EINVAL,
			    "size changed since the probe");
	if (!f.has_alpha) {
		if (!WebPDecodeRGBInto(in, len, rgb, n * 3, (int)w * 3))
			return fail(why, whylen, -EBADMSG, "cannot decode");
		return 0;
	}
	rgba = malloc(n * 4);
	if (!rgba)
		return fail(why, whylen, -ENOMEM, "no memory");
	if (!WebPDecodeRGBAInto(in, len, rgba, n * 4, (int)w * 4)) {
		free(rgba);
		return fail(why, whylen, -EBADMSG, "cannot decode");
	}
	pngdec_rgba_on_black(rgba, rgb, n);
	free(rgba);
	return 0;
}

/* ---- the decoder table's entry ------------------------------------- */

/* Counted as if every image had alpha (decoded to RGBA first). */
static const struct decoder_plain plain = {
	.name = "WebP",
	.probe = webpdec_probe,
	.decode = webpdec_decode,
	.work_extra = 0,
};

static int webp_sniff(const uint8_t *in, size_t len)
{
	return webpdec_sniff(in, len);
}

static int webp_probe(struct decoder_state *st, const uint8_t *in, size_t len,
		      uint64_t maxpx, unsigned *w, unsigned *h, char *why,
		      size_t whylen)
{
	(void)st;
	return decoder_plain_probe(&plain, in, len, maxpx, w, h, why, whylen);
}

static int webp_plan(const uint8_t *in, size_t len, unsigned hint,
		     struct decode_plan *p)
{
	(void)hint;
	return decoder_plain_plan(&plain, in, len, p);
}

static int webp_decode(struct decoder_state *st, const uint8_t *in, size_t len,
		       unsigned hint, uint64_t maxpx, struct decode_out *out,
		       char *why, size_t whylen)
{
	(void)st;
	(void)hint;
	return decoder_plain_decode(&plain, in, len, maxpx, out, why, whylen);
}

static void webp_version(char *buf, size_t len)
{
	int v = WebPGetDecoderVersion();
	snprintf(buf, len, "libwebp %d.%d.%d", (v >> 16) & 0xff,
		 (v >> 8) & 0xff, v & 0xff);
}

const struct decoder webpdec_decoder = {
	.name = "WebP",
	.same = TF_SAME, /* no WebP encoder */
	.sniff = webp_sniff,
	.probe = webp_probe,
	.plan = webp_plan,
	.decode = webp_decode,
	.version = webp_version,
};
