/* ppmdec.h - binary PPM input for the image engine (P6, maxval 255), read by
 * echofs itself: the declared size from the header, then the pixels as
 * they are. Other maxvals are -ENOTSUP, a bad or truncated file -EBADMSG,
 * a size above max_pixels or TRANSFORM_MAX_SIDE -EFBIG. Pure; safe from
 * any thread. */
#ifndef ECHOFS_PPMDEC_H
#define ECHOFS_PPMDEC_H

#include "cache/image/decoder.h"

extern const struct decoder ppmdec_decoder;

#endif
