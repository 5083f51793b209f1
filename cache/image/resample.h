/* resample.h - the image engine's resampler: area averaging (box filter
 * with exact fractional coverage) on an axis that shrinks, bilinear on an
 * axis that grows, 14-bit fixed-point weights, two passes (horizontal into
 * 16-bit rows, then vertical). Pure functions over memory; buffers from the
 * caller's scratch (imgbuf.h) or malloc. */
#ifndef ECHOFS_RESAMPLE_H
#define ECHOFS_RESAMPLE_H

#include "common/attrs.h"
#include "cache/image/imgbuf.h"

/* Bumped whenever the resampler's output bytes change: it is part of the
 * prepared-sample tier's key (cache/image/prepared.h). */
#define RESAMPLE_VERSION 1

/* The image resampled to fw x fh, of which only the window (x, y, w, h) is
 * produced (cropping while resampling saves the work on pixels the crop
 * throws away). */
struct resample_region {
	unsigned fw, fh;     /* the full resized size */
	unsigned x, y, w, h; /* the window of it to produce */
};

/* Resamples in per rg into *out. tsc holds the intermediate rows and osc the
 * output (either may be NULL: malloc; an output from malloc is the caller's
 * to free). When rg's full size is in's size this is a plain window copy.
 * Returns 0, -EINVAL (empty window, window outside the full size, size past
 * TRANSFORM_MAX_SIDE) or -ENOMEM. */
MUST_CHECK
int resample_region(const struct image *in, const struct resample_region *rg,
		    struct scratch *tsc, struct scratch *osc,
		    struct image *out);

#endif
