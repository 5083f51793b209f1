/* pool.h - the echo pool: samples streamed from the shards in a seeded order
 * reshuffled every pass, passed through a shuffle buffer into per-class
 * ready queues, kept in bounded memory, and handed to readers fresh or
 * echoed by the echo policy (cache/echo/policy.h).
 *
 * DESIGN
 * - A streamer thread walks the shards of the current pass in a seeded
 *   random order (a new order each pass), asking cache/shards for a few
 *   shards ahead (shards_prefetch) and reading each sample's bytes with
 *   shards_read. With an ingest hook (decoding), ingest_threads threads run
 *   the hook on what the streamer read, so every decode thread is busy.
 *   Each sample enters a shuffle buffer; when the buffer is full a random
 *   entry leaves it into its class's fresh queue.
 * - Demand: the pool knows which classes readers wait for. When memory is
 *   full and a reader waits, fresh samples of classes nobody waits for are
 *   given back: their bytes are dropped and their sample numbers kept
 *   (they are still owed a fresh serve); the stream skips the unwanted
 *   samples it meets without reading them, and a class that is asked for
 *   gets its given-back samples re-read (from the disk cache) first. So
 *   any reader order (one class, class-sorted, cp -r) gets its samples.
 * - Memory: every sample held (shuffle buffer, fresh queues, echo
 *   candidates, taken by readers, being read or decoded) counts against
 *   mem_size. Past it, fully used samples are dropped first, then the least
 *   useful echo candidates, then (while someone waits) fresh samples of
 *   unwanted classes are given back; if what is left is all wanted or
 *   taken, the streamer waits (back-pressure).
 * - pool_take_async asks the policy for a sample of the class; when the
 *   policy says "wait", the request is parked (no thread waits for it) and
 *   answered by whichever thread makes a sample of its class ready, by a
 *   timer thread after wait_s (-ETIMEDOUT), or by pool_cancel (-EINTR);
 *   a class whose every sample was refused (bad) answers -EIO at once.
 *   The time parked counts as stall time. pool_take is the blocking form.
 * - Over one pass every sample of the index whose class is not NO_CLASS
 *   enters exactly once, so it is served fresh exactly once; a given-back
 *   sample keeps its fresh serve and is not streamed again by a later pass
 *   until it has been served; samples whose bytes can't be read (shard
 *   failed) are counted and skipped.
 * - Locking: one mutex guards the queues, the policy and the statistics;
 *   it is never held across shards_read, the ingest hook or a completion
 *   callback. Lock order: the pool lock is never held while the shards
 *   lock (inside shards_*) or a caller's lock is taken.
 */
#ifndef ECHOFS_POOL_H
#define ECHOFS_POOL_H

#include "common/attrs.h"
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
				  * ECHO_WINDOW_AUTO (half the class's
				  * samples, cache/echo/policy.h) */
	uint64_t mem_size;       /* bytes; 0 means 512 MiB */
	uint64_t seed;
	unsigned shuffle_buffer; /* samples; 0 picks 1024; at most 2^20 */
	unsigned lookahead;      /* fresh samples read ahead of the readers
				  * (buffer included); 0 picks the buffer +
				  * 2 per class + 64 */
	double wait_s;           /* longest a take waits; 0 means 30 s */
	unsigned ingest_threads; /* threads running the ingest hook; 0 means 1 */
	bool fresh_first;        /* echo_policy_opts.fresh_first */
	/* The first walk waits for demand (a take, or a reader waiting), as
	 * every later walk does; else it starts at once, so that the first
	 * fetches overlap the readers' start. For a mount whose paths are
	 * served outside the pool first (exact first over a warm cache). */
	bool lazy_start;
	/* Optional: what the pool keeps of a sample, made from its bytes by
	 * the streamer without the pool lock (a decoded and resized image,
	 * or the final preprocessed bytes). Returns 0 with a malloc'd *out;
	 * -EAGAIN when the failure is not the sample's (memory, shutdown):
	 * skipped this time, counted in `read_errors`, streamed again in a
	 * later pass; or another -errno (a bad image): skipped for good and
	 * counted in `rejected`. */
	int (*ingest)(void *ud, uint32_t sample, const uint8_t *in, size_t len,
		      uint8_t **out, size_t *outlen);
	void *ingest_ud;
	/* Repartition (cache/index/partition.h): with world > 1, pass N
	 * streams only the shards that the partition of (seed, N - 1) gives
	 * rank, weighed by all of the index's samples; the caller classes
	 * every sample. 0 or 1: every classed shard, every pass. */
	uint32_t world, rank;
	/* Optional: whether the take named tag was interrupted (an INTERRUPT
	 * for the FUSE request). Asked under the pool lock right before a take
	 * parks, so an interrupt that comes later finds it parked (see
	 * pool_cancel): pool_take_async then returns -EINTR instead. Must not
	 * call into the pool. */
	int (*interrupted)(const void *tag);
	/* Stream the index's members instead of its samples (the samples
	 * layout: one member per key, class_of is nmembers long): sample
	 * numbers are then member numbers (index.members). */
	bool members;
	/* Added to the number a pool_sample carries (pool_sample.sample):
	 * the dataset numbers members after its samples. */
	uint32_t number_base;
};

struct pool_stats {
	uint64_t pass;          /* current pass, from 1 */
	uint64_t fresh_in_pass; /* samples that entered the pool this pass */
	uint64_t taken_recently; /* fresh takes this pass and the last */
	uint64_t fresh_served;  /* over the pool's life (own_served included) */
	uint64_t own_served;    /* of those, paths served their own sample
				 * outside the pool (pool_count_own) */
	uint64_t echoes_served;
	double effective_echo;  /* (fresh_served + echoes_served) / fresh_served, 0 if none */
	double stall_s;         /* time readers spent waiting in pool_take */
	uint64_t pool_bytes;
	uint64_t pool_samples;
	uint64_t dropped;       /* samples dropped to stay within mem_size */
	uint64_t read_errors;   /* samples skipped because their bytes could not be read */
	uint64_t timeouts;      /* pool_take calls that gave up after wait_s */
	uint64_t rejected;      /* samples the ingest hook refused (bad images) */
	uint64_t given_back;    /* fresh samples given back for unwanted classes */
	uint64_t reread;        /* given-back samples read again when wanted */
	uint64_t owed;          /* given-back samples still owed a fresh serve */
	uint64_t parked;        /* takes waiting now */
	/* The streamer's work, for tests and profiles: walks of a pass begun,
	 * and owed-line entries looked at to find one readable now. */
	uint64_t walks;
	uint64_t owed_looks;
	/* The adaptive mode's governor (cache/echo/governor.h); factor is E
	 * in the other modes and the other fields 0. */
	double echo_factor;     /* echoes per fresh sample allowed now */
	double fresh_rate;      /* fresh/s measured at that factor */
	double best_fresh_rate; /* best fresh/s measured at any factor */
	const char *echo_reason; /* why the factor last changed */
	uint64_t echo_changes;
	/* Echoes served, by opens of their class since that sample's last
	 * serve: the median and the 10th percentile (lower bound of a
	 * power-of-two bucket), 0 before any echo. */
	uint64_t echo_age_p10, echo_age_p50;
	uint64_t fresh_ready;   /* read, never served: buffer and queues */
	uint64_t bad_samples;   /* samples whose ingest failed (counted once) */
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
 * the array is copied. Starts the streamer. Returns 0 with *out set, or
 * -errno with *out NULL: -EINVAL for bad options or classes, or why a
 * thread could not start. */
MUST_CHECK
int pool_open(const struct index *ix, struct shards *sh,
	      const uint32_t *class_of, uint32_t nclasses,
	      const struct pool_opts *o, struct pool **out);
/* Stops the streamer and frees. Every taken sample must have been
 * released. Accepts NULL. */
void pool_free(struct pool *p);

/* Shutdown, first step: readers waiting in pool_take (and later ones)
 * return -ESHUTDOWN at once and the streamer stops; pool_free still frees.
 * Parked takes are answered by pool_cancel_all. Any thread. Accepts NULL. */
void pool_stop(struct pool *p);

/* Reserve a sample of class cls for one binding (a path looked up): fresh
 * if the policy can, else an echo. The policy's state (uses, window) moves
 * as if it were served, but the serve is not counted in the statistics
 * until pool_commit. Blocks up to wait_s. On success *out holds a reference
 * (release it with pool_release). Returns 0, -ETIMEDOUT, -EIO (every
 * sample of the class is bad), -EINVAL (bad class) or -ESHUTDOWN (pool
 * stopping). */
MUST_CHECK
int pool_take(struct pool *p, uint32_t cls, struct pool_sample **out);

/* Completion of a parked take: err 0 with a reference in s (as from
 * pool_take), or -ETIMEDOUT, -EIO, -EINTR (pool_cancel) or -ESHUTDOWN with s
 * NULL. Called exactly once, without the pool lock, from the thread that
 * made the sample ready, the timer or the canceller. */
typedef void (*pool_done_fn)(void *ud, int err, struct pool_sample *s);

/* pool_take without blocking: 0 with *out when a sample is ready now;
 * -EINPROGRESS when parked (done(ud, ...) will be called later; the caller
 * must not touch what ud refers to after this returns unless done says
 * so); -EINTR when it would park but o->interrupted(tag) says so;
 * -EINVAL or -ESHUTDOWN. tag (not NULL) names the take for pool_cancel. */
MUST_CHECK
int pool_take_async(struct pool *p, uint32_t cls, const void *tag,
		    pool_done_fn done, void *ud, struct pool_sample **out);

/* Answer the parked take named tag with -EINTR (its done runs in this
 * thread). Returns 1 if it was still parked, 0 if not (already answered,
 * or never parked). */
MUST_CHECK
int pool_cancel(struct pool *p, const void *tag);

/* Answer every parked take with -ESHUTDOWN (before the session that would
 * carry the replies goes away). Accepts NULL. */
void pool_cancel_all(struct pool *p);

/* The reserved sample was opened by a reader: count the serve (fresh or
 * echo). At most once per pool_take. */
void pool_commit(struct pool *p, struct pool_sample *s);
/* A reader was served a sample outside the pool, from its own path (the
 * exact-first serves of cache/dataset.h's dataset_echo_own): a fresh
 * serve, counted in fresh_served and own_served and by the governor. */
void pool_count_own(struct pool *p);
/* May sample be served by its own path from now on (exact first)? Only a
 * local sample the pool has not taken fresh in its current or previous
 * pass: a sample is then either its own path's (fresh, every pass) or the
 * pool's, never both, so echo=1 serves each once a pass. The pool still
 * holds a claimed sample, as an echo candidate served once (a fresh copy
 * it held is turned into one when a take finds it). A claim stands until
 * the sample is found not local (local false: the claim is let go of).
 * False with pool_opts.members. */
bool pool_claim_own(struct pool *p, uint32_t sample, bool local);
/* Sample is bad (it failed to decode outside the pool, where it was
 * counted): never streamed again; a held copy is taken out when a reader
 * discards it (pool_discard), not counted again. */
void pool_mark_bad(struct pool *p, uint32_t sample);

/* Undo a pool_take that was never committed (a binding only stat'ed, then
 * expired): the sample goes back where it came from, fresh again if it was
 * fresh, and the policy forgets the use. Releases the reference. */
void pool_untake(struct pool *p, struct pool_sample *s);

/* A taken sample turned out bad when served (echo_stage=encoded decodes
 * only then): the take is undone and the sample leaves the pool for the
 * rest of the mount, counted in `rejected` once; releases the reference. */
void pool_discard(struct pool *p, struct pool_sample *s);

/* Another reference to s's take, for a second binding that serves the
 * same take (a whole-sample visit: the key's image and its caption are
 * one serve). Its refs are one take: committed once (the first commit
 * counts), undone by pool_untake of the last of them if none was
 * committed; each ref is let go of on its own (untake or release). */
struct pool_sample *pool_share(struct pool *p, struct pool_sample *s);

/* Drop the reference from pool_take. Accepts NULL. */
void pool_release(struct pool *p, struct pool_sample *s);

/* Change the echo factor and mode at run time (from .echofs/config).
 * Returns 0 or -EINVAL (echo < 1, > 1000 or not finite, unknown mode). */
MUST_CHECK
int pool_set_echo(struct pool *p, double echo, enum echo_mode mode);
void pool_get_echo(struct pool *p, double *echo, enum echo_mode *mode);

void pool_get_stats(struct pool *p, struct pool_stats *out);
/* Fresh samples ready now in class cls (shuffle buffer included: a take
 * pulls one out of the buffer before it echoes). 0 for a bad class. */
uint64_t pool_ready(struct pool *p, uint32_t cls);
/* Takes parked now. */
uint64_t pool_parked(struct pool *p);

/* "adaptive" / "fixed" / "greedy" <-> enum. Returns 0 or -EINVAL. */
MUST_CHECK
int echo_mode_parse(const char *s, enum echo_mode *out);
const char *echo_mode_name(enum echo_mode m);

#endif
