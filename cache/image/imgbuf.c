/* imgbuf.c - the image engine's reusable buffers and window copies. */
#include "cache/image/imgbuf.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

void *scratch_get(struct scratch *s, size_t n)
{
	if (n > s->cap) {
		free(s->p);
		s->p = malloc(n);
		s->cap = s->p ? n : 0;
	}
	return s->p;
}

void scratch_trim(struct scratch *s)
{
	if (s->cap > SCRATCH_KEEP) {
		free(s->p);
		s->p = NULL;
		s->cap = 0;
	}
}

void *imgbuf_get(struct scratch *sc, size_t n)
{
	return sc ? scratch_get(sc, n) : malloc(n);
}

int imgbuf_alloc(struct image *img, unsigned w, unsigned h,
		 struct scratch *sc)
{
	memset(img, 0, sizeof(*img));
	if (!w || !h || w > TRANSFORM_MAX_SIDE || h > TRANSFORM_MAX_SIDE)
		return -EINVAL;
	img->rgb = imgbuf_get(sc, (size_t)w * h * 3);
	if (!img->rgb)
		return -ENOMEM;
	img->w = w;
	img->h = h;
	return 0;
}

int imgbuf_crop(const struct image *in, unsigned x, unsigned y, unsigned w,
		unsigned h, struct image *out, struct scratch *sc)
{
	memset(out, 0, sizeof(*out));
	if (!in || !in->rgb || !w || !h || x > in->w || w > in->w - x ||
	    y > in->h || h > in->h - y)
		return -EINVAL;
	int r = imgbuf_alloc(out, w, h, sc);
	if (r < 0)
		return r;
	for (unsigned j = 0; j < h; j++)
		memcpy(out->rgb + (size_t)j * w * 3,
		       in->rgb + ((size_t)(y + j) * in->w + x) * 3,
		       (size_t)w * 3);
	return 0;
}
