/* fuzz_transform.c - libFuzzer target for the image engine with JPEG (or any)
 * input: every entry point returns 0 or a documented negative errno, never a
 * crash or an unbounded allocation, and what it returns is well formed. */
#include "cache/image/transform.h"

#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* Small caps keep each run fast; the header checks are what is fuzzed. */
#define FUZZ_MAX_PIXELS (4ULL * 1000 * 1000)

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static int documented(int r)
{
	return r == 0 || r == -EBADMSG || r == -EFBIG || r == -ENOTSUP ||
	       r == -EINVAL || r == -ENOMEM || r == -EIO;
}

/* The first two bytes pick the options; the rest is the image. */
static void pick(const uint8_t *p, struct transform_opts *o, uint64_t *rand)
{
	static const unsigned sizes[] = {0, 1, 7, 32, 64, 100};
	static const unsigned crops[] = {0, 1, 8, 33, 56, 120};
	memset(o, 0, sizeof(*o));
	o->size = sizes[p[0] % 6];
	o->crop = crops[(p[0] / 6) % 6];
	o->format = (enum transform_format)(p[1] % 3);
	o->random_crop = (p[1] >> 2) & 1;
	o->flip_prob_half = (p[1] >> 3) & 1;
	o->quality = 1 + (p[1] >> 4) * 6;
	o->max_pixels = FUZZ_MAX_PIXELS;
	*rand = (uint64_t)p[0] * 0x9e3779b97f4a7c15ULL ^ p[1];
}

static void check_probe(struct transform_ctx *tc, const uint8_t *in, size_t len,
			const struct transform_opts *o)
{
	unsigned w = 0, h = 0;
	char why[128];
	int r = transform_probe(tc, in, len, FUZZ_MAX_PIXELS, &w, &h, why,
				sizeof(why));
	if (!documented(r))
		abort();
	if (r == 0 && (w == 0 || h == 0 || (uint64_t)w * h > FUZZ_MAX_PIXELS))
		abort();
	if (r == 0) {
		ssize_t n = transform_output_size(o, w, h);
		if (n < 0 && !documented((int)n))
			abort();
	}
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static struct transform_ctx *tc;
	struct transform_opts o;
	struct image img = {0};
	uint64_t rand;
	uint8_t *out = NULL;
	size_t outlen = 0;
	char why[128];
	int r;

	if (size < 2)
		return 0;
	if (!tc && !(tc = transform_ctx_new()))
		abort();
	pick(data, &o, &rand);
	data += 2;
	size -= 2;
	check_probe(tc, data, size, &o);
	uint64_t need;
	r = transform_decode_mem(&o, data, size, &need);
	if (r != 0 && r != -EBADMSG)
		abort();
	r = transform_apply(tc, &o, data, size, rand, &out, &outlen, why,
			    sizeof(why));
	if (!documented(r) || (r == 0 && (!out || outlen == 0)))
		abort();
	free(out);
	r = transform_decode(tc, data, size, o.size, FUZZ_MAX_PIXELS, &img, why,
			     sizeof(why));
	if (!documented(r) || (r == 0 && (!img.rgb || !img.w || !img.h)))
		abort();
	transform_image_free(&img);
	return 0;
}
