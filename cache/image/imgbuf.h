/* imgbuf.h - the image engine's buffers: a context's reusable scratch
 * buffers, image allocation into them and window copies (transform.c,
 * resample.c and rrc.c share them).
 *
 * A buffer kept across calls of one context: a fresh multi-100-KB malloc
 * per image is served by mmap and costs a page fault per 4 KB, which was
 * the biggest single cost of the pipeline. Past SCRATCH_KEEP it is given
 * back after each use (scratch_trim), so one huge image does not pin
 * memory. Not thread-safe: a scratch belongs to one transform_ctx. */
#ifndef ECHOFS_IMGBUF_H
#define ECHOFS_IMGBUF_H

#include "common/attrs.h"
#include "cache/image/transform.h"

#include <stddef.h>
#include <stdint.h>

struct scratch {
	uint8_t *p;
	size_t cap;
};

#define SCRATCH_KEEP ((size_t)8 << 20)

/* At least n bytes of s (its old contents lost), or NULL on OOM. */
void *scratch_get(struct scratch *s, size_t n);

/* Frees s's buffer when above SCRATCH_KEEP. */
void scratch_trim(struct scratch *s);

/* A buffer of n bytes: from sc when given (owned by the context), else a
 * new malloc the caller frees. */
void *imgbuf_get(struct scratch *sc, size_t n);

/* Zeroes img, then gives it a w x h pixel buffer from sc (or malloc with
 * NULL). Returns 0, -EINVAL (empty or past TRANSFORM_MAX_SIDE) or
 * -ENOMEM. */
MUST_CHECK
int imgbuf_alloc(struct image *img, unsigned w, unsigned h,
		 struct scratch *sc);

/* Copies the w x h window at (x, y) of in into *out (buffer from sc, or
 * malloc with NULL). Returns 0, -EINVAL (window not inside in) or
 * -ENOMEM. */
MUST_CHECK
int imgbuf_crop(const struct image *in, unsigned x, unsigned y, unsigned w,
		unsigned h, struct image *out, struct scratch *sc);

#endif
