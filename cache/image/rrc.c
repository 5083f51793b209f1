/* rrc.c - RandomResizedCrop: torchvision's get_params box, then a resample
 * of the box to C x C. */
#include "cache/image/rrc.h"

#include "cache/image/resample.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>

/* splitmix64 step: the stream of draws of one rand. */
static uint64_t next(uint64_t *s)
{
	uint64_t x = (*s += 0x9E3779B97F4A7C15ULL);
	x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ULL;
	x = (x ^ (x >> 27)) * 0x94D049BB133111EBULL;
	return x ^ (x >> 31);
}

/* Uniform in [lo, hi) from 53 bits. */
static double uniform(uint64_t *s, double lo, double hi)
{
	return lo + (hi - lo) * ((double)(next(s) >> 11) * 0x1p-53);
}

/* Uniform integer in [0, n) (n >= 1), by multiply-high: no modulo bias
 * beyond 2^-32 for the sides an image has. */
static unsigned below(uint64_t *s, unsigned n)
{
	return (unsigned)(((next(s) >> 32) * (uint64_t)n) >> 32);
}

static void ranges(const struct rrc_params *p, double sc[2], double ra[2])
{
	int ds = !p || (p->scale[0] == 0 && p->scale[1] == 0);
	int dr = !p || (p->ratio[0] == 0 && p->ratio[1] == 0);
	sc[0] = ds ? RRC_SCALE_LO : p->scale[0];
	sc[1] = ds ? RRC_SCALE_HI : p->scale[1];
	ra[0] = dr ? RRC_RATIO_LO : p->ratio[0];
	ra[1] = dr ? RRC_RATIO_HI : p->ratio[1];
}

int rrc_check(const struct rrc_params *p)
{
	double sc[2], ra[2];
	ranges(p, sc, ra);
	if (!(sc[0] > 0 && sc[0] <= sc[1] && sc[1] <= 1))
		return -EINVAL;
	if (!(ra[0] > 0 && ra[0] <= ra[1] && ra[1] < 1e6))
		return -EINVAL;
	return 0;
}

/* get_params's fallback: the whole image, cut to the ratio range. */
static void centre(unsigned w, unsigned h, const double ra[2],
		   struct rrc_box *b)
{
	double in = (double)w / h;
	b->w = w;
	b->h = h;
	if (in < ra[0])
		b->h = (unsigned)nearbyint(w / ra[0]);
	else if (in > ra[1])
		b->w = (unsigned)nearbyint(h * ra[1]);
	if (!b->w)
		b->w = 1;
	if (!b->h)
		b->h = 1;
	b->x = (w - b->w) / 2;
	b->y = (h - b->h) / 2;
}

int rrc_box(unsigned w, unsigned h, const struct rrc_params *p, uint64_t rand,
	    struct rrc_box *out)
{
	double sc[2], ra[2];
	uint64_t s = rand ^ 0x2545F4914F6CDD1DULL;

	if (!w || !h || rrc_check(p) < 0)
		return -EINVAL;
	ranges(p, sc, ra);
	double area = (double)w * h, lr0 = log(ra[0]), lr1 = log(ra[1]);
	for (int i = 0; i < 10; i++) {
		double t = area * uniform(&s, sc[0], sc[1]);
		double a = exp(uniform(&s, lr0, lr1));
		/* nearbyint rounds half to even, as Python's round(). */
		double bw = nearbyint(sqrt(t * a)), bh = nearbyint(sqrt(t / a));
		if (bw > 0 && bw <= w && bh > 0 && bh <= h) {
			out->w = (unsigned)bw;
			out->h = (unsigned)bh;
			out->y = below(&s, h - out->h + 1);
			out->x = below(&s, w - out->w + 1);
			return 0;
		}
	}
	centre(w, h, ra, out);
	return 0;
}

int rrc_render(const struct image *img, const struct rrc_box *b, unsigned c,
	       struct scratch *bsc, struct scratch *tsc, struct scratch *osc,
	       struct image *out)
{
	struct image box;
	int r = imgbuf_crop(img, b->x, b->y, b->w, b->h, &box, bsc);
	if (r < 0)
		return r;
	struct resample_region rg = {.fw = c, .fh = c, .w = c, .h = c};
	r = resample_region(&box, &rg, tsc, osc, out);
	if (!bsc)
		free(box.rgb);
	return r;
}
