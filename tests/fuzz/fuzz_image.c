/* fuzz_image.c - libFuzzer targets for PNG (cache/image/pngdec.c, built as
 * fuzz_png) and WebP input (cache/image/webpdec.c, built as fuzz_webp with
 * -DFUZZ_WEBP): any bytes are decoded or refused with a listed errno, never
 * a crash, a leak or an allocation past the declared size. */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>

#ifdef FUZZ_WEBP
#include "cache/image/webpdec.h"
#define PROBE webpdec_probe
#define DECODE webpdec_decode
#else
#include "cache/image/pngdec.h"
#define PROBE pngdec_probe
#define DECODE pngdec_decode
#endif

/* Small enough that the fuzzer explores instead of allocating: 4 MP. */
#define FUZZ_MAX_PIXELS (4u << 20)

static int listed(int r)
{
	return r == 0 || r == -EBADMSG || r == -ENOTSUP || r == -EFBIG ||
	       r == -ENOMEM;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	unsigned w, h;
	char why[160];
	uint8_t *rgb;
	int r = PROBE(data, size, &w, &h, why, sizeof(why));

	if (!listed(r))
		abort();
	if (r || !w || !h || (uint64_t)w * h > FUZZ_MAX_PIXELS)
		return 0;
	rgb = malloc((size_t)w * h * 3);
	if (!rgb)
		return 0;
	r = DECODE(data, size, rgb, w, h, why, sizeof(why));
	if (!listed(r))
		abort();
	free(rgb);
	return 0;
}
