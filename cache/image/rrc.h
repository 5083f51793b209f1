/* rrc.h - torchvision's RandomResizedCrop in the image engine: a box of
 * random area and aspect ratio (RandomResizedCrop.get_params), resampled to
 * C x C.
 *
 * The box follows get_params exactly: up to 10 tries of an area fraction
 * uniform in [scale_lo, scale_hi] and an aspect ratio log-uniform in
 * [ratio_lo, ratio_hi], w = round(sqrt(area * ratio)), h = round(sqrt(area /
 * ratio)) (round half to even, as Python's round), accepted when
 * 0 < w <= width and 0 < h <= height, at a uniform position; else the
 * centre crop of the whole image clamped to the ratio range. Randomness is
 * the caller's uint64_t, spread by splitmix64 (deterministic: same rand,
 * same box). Pure functions, no state. */
#ifndef ECHOFS_RRC_H
#define ECHOFS_RRC_H

#include "common/attrs.h"
#include "cache/image/imgbuf.h"

#include <stdint.h>

/* torchvision's defaults. */
#define RRC_SCALE_LO 0.08
#define RRC_SCALE_HI 1.0
#define RRC_RATIO_LO (3.0 / 4.0)
#define RRC_RATIO_HI (4.0 / 3.0)

/* The ranges; a range of 0, 0 means torchvision's default. */
struct rrc_params {
	double scale[2]; /* fraction of the image's area, 0 < lo <= hi <= 1 */
	double ratio[2]; /* width / height, 0 < lo <= hi */
};

struct rrc_box {
	unsigned x, y, w, h;
};

/* 0 when p's ranges are usable (after defaults), else -EINVAL. */
MUST_CHECK
int rrc_check(const struct rrc_params *p);

/* The box get_params draws from a w x h image with rand. Returns 0 or
 * -EINVAL (empty image, bad ranges). */
MUST_CHECK
int rrc_box(unsigned w, unsigned h, const struct rrc_params *p, uint64_t rand,
	    struct rrc_box *out);

/* The box b of img resampled to c x c (resample.h: area average when
 * shrinking, bilinear when growing) into *out. bsc holds the box's copy,
 * tsc the resampler's rows, osc the output (each may be NULL: malloc; an
 * output from malloc is the caller's). Returns 0, -EINVAL or -ENOMEM. */
MUST_CHECK
int rrc_render(const struct image *img, const struct rrc_box *b, unsigned c,
	       struct scratch *bsc, struct scratch *tsc, struct scratch *osc,
	       struct image *out);

#endif
