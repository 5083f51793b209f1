/* prep.h - the decode worker pool: image transforms (cache/image/transform.h) run
 * on `threads` worker threads, each with its own TurboJPEG context, so that
 * neither the FUSE threads nor the pool's streamer decode images.
 *
 * DESIGN
 * - The workers are a common/workq: callers submit a job and wait for its
 *   result (workq_run; each caller is woken for its own job alone). The
 *   bounded FIFO queue (4 jobs per worker) holds jobs not yet started, and
 *   submitters wait while it is full. Serve jobs (prep_augment, on the path
 *   of an echo open) go ahead of queued decodes with workq_run_first, in
 *   room kept for them beyond the bound: a serve never waits behind the
 *   echo pool's queued decodes.
 * - A "prepared" image (decoded and resized, for echoing before augment) is
 *   one self-contained buffer: a 16-byte header (magic, width, height) and
 *   the RGB pixels, so the echo pool can hold it like any sample's bytes.
 * - Locking: the workq's mutex guards the queue; transforms run without it.
 * - Memory: before a decode, a worker takes what transform_decode_mem says
 *   it needs from a budget of opts->decode_mem bytes shared by all workers
 *   (cache/image/budget.h), waiting while it is spent; an image needing
 *   more than the whole budget fails with -EFBIG. Order: the queue mutex is
 *   never held while waiting for the budget.
 */
#ifndef ECHOFS_PREP_H
#define ECHOFS_PREP_H

#include "common/attrs.h"
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "cache/image/transform.h"

struct prep;

/* opts is copied. threads 0 means the number of online CPUs. Returns 0 with
 * *out set, or -errno (the workers could not start). */
MUST_CHECK
int prep_open(const struct transform_opts *opts, unsigned threads,
	      struct prep **out);
/* Stops the workers once the queue is empty. Accepts NULL. */
void prep_free(struct prep *p);

/* The whole pipeline (transform_apply) on a sample's bytes. *out is
 * malloc'd; the caller frees it. Returns 0 or -errno (-EBADMSG, -EFBIG,
 * -ENOTSUP...) with the reason in why. */
MUST_CHECK
int prep_apply(struct prep *p, const void *in, size_t len, uint64_t rand,
	       uint8_t **out, size_t *outlen, char *why, size_t whylen);

/* Decode and resize (transform_prepare) into a prepared-image buffer. */
int prep_prepare(struct prep *p, const void *in, size_t len, uint8_t **out,
		 size_t *outlen, char *why, size_t whylen);

/* The length prep_prepare's buffer for in will have, from in's header
 * alone (transform_prepared_dims, in the calling thread), or -errno when
 * the header is unusable (prep_prepare then fails with the reason). */
MUST_CHECK
ssize_t prep_prepared_len(struct prep *p, const void *in, size_t len);

/* Crop, flip and encode (transform_augment) a prepared-image buffer. With
 * format=ppm this runs in the calling thread (copies only, no decode), with
 * a transform context kept per thread; else on a worker, ahead of queued
 * decodes. */
int prep_augment(struct prep *p, const void *prepared, size_t len,
		 uint64_t rand, uint8_t **out, size_t *outlen, char *why,
		 size_t whylen);

/* The same augment as prep_augment for format=ppm, without making a file:
 * prep_augment_size gives its length, prep_augment_range writes bytes
 * [off, off + n) of it to dst in one pass (transform_augment_ppm) in the
 * calling thread, so an echo READ renders straight into its reply buffer.
 * Same bytes as prep_augment for the same rand. Return the length / bytes
 * written, -ENOTSUP unless format=ppm, -EINVAL for a bad buffer. */
MUST_CHECK
ssize_t prep_augment_size(const struct prep *p, const void *prepared,
			  size_t len);
ssize_t prep_augment_range(const struct prep *p, const void *prepared,
			   size_t len, uint64_t rand, uint64_t off,
			   uint8_t *dst, size_t n);

/* Number of worker threads. */
unsigned prep_threads(const struct prep *p);

/* The output size when it is known before any decoding (PPM with a crop),
 * else -ENOTSUP. */
MUST_CHECK
ssize_t prep_fixed_size(const struct prep *p);

#endif
