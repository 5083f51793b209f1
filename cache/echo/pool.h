/* pool.h - the echo pool: samples streamed from the shards in a seeded order
 * reshuffled every pass, passed through a shuffle buffer into per-class
 * ready queues, kept in bounded memory, and handed to readers fresh or
 * echoed by the echo policy (cache/echo/policy.h).
 *
 * DESIGN
 * - A streamer thread walks the shards of the current pass in a seeded
 *   random order (a new order each pass), asking cache/shards for a few
 *   shards ahead (shards_prefetch) and reading each sample's bytes with
 *   shards_read. Each sample enters a shuffle buffer; when the buffer is
 *   full a random entry leaves it into its class's fresh queue.
 * - Memory: every sample held (shuffle buffer, fresh queues, echo
 *   candidates, taken by readers, the one being read) counts against
 *   mem_size. A fully used sample is freed as soon as its last reader
 *   releases it, whatever the memory. Past mem_size the streamer evicts the
 *   least useful echo candidate no reader holds (in fixed mode only while a
 *   reader waits); if nothing can go (all fresh, buffered or taken), the
 *   streamer waits (back-pressure).
 * - pool_take asks the policy for a sample of the class; when the policy
 *   says "wait" (no fresh sample ready and no echo allowed), the caller
 *   waits on a condition variable for fresh data, up to wait_s, and the
 *   time is counted as stall time.
 * - Over one pass every sample of the index whose class is not NO_CLASS
 *   enters exactly once, so it is served fresh exactly once; samples whose
 *   bytes can't be read (shard failed) are counted and skipped.
 * - Locking: one mutex guards the queues, the policy and the statistics;
 *   it is never held across shards_read or shards_prefetch, so the shards
 *   lock (inside shards_*) is never taken while holding the pool lock: the
 *   two locks have no order because they never nest.
 */
#ifndef ECHOFS_POOL_H
#define ECHOFS_POOL_H

#include <stddef.h>
#include <stdint.h>

#include "cache/echo/policy.h" /* enum echo_mode */

struct index;
struct shards;

#define POOL_NO_CLASS UINT32_MAX

struct pool_opts {
	double echo;             /* E in [1, 1000]; 1 (or 0) means fresh only */
	enum echo_mode mode;
	unsigned window;         /* echo_window in opens of a class; 0 picks
				  * ECHO_DEFAULT_WINDOW (16, cache/echo/policy.h) */
	uint64_t mem_size;       /* bytes; 0 means 512 MiB */
	uint64_t seed;
	unsigned shuffle_buffer; /* samples; 0 picks 1024; at most 2^20 */
	double wait_s;           /* longest pool_take waits; 0 means 60 s */
	/* Optional: what the pool keeps of a sample, made from its bytes by
	 * the streamer without the pool lock (a decoded and resized image,
	 * or the final preprocessed bytes). Returns 0 with a malloc'd *out,
	 * or -errno: the sample is skipped and counted in `rejected`. */
	int (*ingest)(void *ud, uint32_t sample, const uint8_t *in, size_t len,
		      uint8_t **out, size_t *outlen);
	void *ingest_ud;
};

struct pool_stats {
	uint64_t pass;          /* current pass, from 1 */
	uint64_t fresh_in_pass; /* samples that entered the pool this pass */
	uint64_t fresh_served;  /* over the pool's life */
	uint64_t echoes_served;
	double effective_echo;  /* (fresh_served + echoes_served) / fresh_served, 0 if none */
	double stall_s;         /* time readers spent waiting in pool_take */
	uint64_t pool_bytes;
	uint64_t pool_samples;
	uint64_t dropped;       /* samples dropped to stay within mem_size */
	uint64_t read_errors;   /* samples skipped because their bytes could not be read */
	uint64_t timeouts;      /* pool_take calls that gave up after wait_s */
	uint64_t rejected;      /* samples the ingest hook refused (bad images) */
};

/* A sample handed to a reader: immutable bytes, reference counted. */
struct pool_sample {
	uint32_t sample;       /* number of the source sample in the index */
	uint32_t cls;          /* its class */
	const uint8_t *data;   /* owned by the pool; valid until pool_release */
	size_t len;
};

struct pool;

/* ix and sh are borrowed and must outlive the pool. class_of[i] is the class
 * number (< nclasses) of index sample i, or POOL_NO_CLASS to leave it out;
 * the array is copied. Starts the streamer. NULL with errno set (EINVAL for
 * bad options). */
struct pool *pool_new(const struct index *ix, struct shards *sh,
		      const uint32_t *class_of, uint32_t nclasses,
		      const struct pool_opts *o);
/* Stops the streamer and frees. Every taken sample must have been
 * released. Accepts NULL. */
void pool_free(struct pool *p);

/* Shutdown, first step: readers waiting in pool_take (and later ones)
 * return -ESHUTDOWN at once and the streamer stops; pool_free still frees.
 * Any thread. Accepts NULL. */
void pool_cancel(struct pool *p);

/* Reserve a sample of class cls for one binding (a path looked up): fresh
 * if the policy can, else an echo. The policy's state (uses, window) moves
 * as if it were served, but the serve is not counted in the statistics
 * until pool_commit. Blocks up to wait_s. On success *out holds a reference
 * (release it with pool_release). Returns 0, -ETIMEDOUT, -EINVAL (bad
 * class) or -ESHUTDOWN (pool stopping). */
int pool_take(struct pool *p, uint32_t cls, struct pool_sample **out);

/* The reserved sample was opened by a reader: count the serve (fresh or
 * echo). At most once per pool_take. */
void pool_commit(struct pool *p, struct pool_sample *s);

/* Undo a pool_take that was never committed (a binding only stat'ed, then
 * expired): the sample goes back where it came from, fresh again if it was
 * fresh, and the policy forgets the use. Releases the reference. */
void pool_untake(struct pool *p, struct pool_sample *s);

/* Drop the reference from pool_take. Accepts NULL. */
void pool_release(struct pool *p, struct pool_sample *s);

/* Change the echo factor and mode at run time (from .echofs/config).
 * Returns 0 or -EINVAL (echo < 1, > 1000 or not finite, unknown mode). */
int pool_set_echo(struct pool *p, double echo, enum echo_mode mode);
void pool_get_echo(struct pool *p, double *echo, enum echo_mode *mode);

void pool_get_stats(struct pool *p, struct pool_stats *out);
/* Fresh samples ready now in class cls (shuffle buffer included: a take
 * pulls one out of the buffer before it echoes). 0 for a bad class. */
uint64_t pool_ready(struct pool *p, uint32_t cls);

/* "adaptive" / "fixed" <-> enum. Returns 0 or -EINVAL. */
int echo_mode_parse(const char *s, enum echo_mode *out);
const char *echo_mode_name(enum echo_mode m);

#endif
