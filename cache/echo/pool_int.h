/* pool_int.h - what the echo pool's files share (cache/echo/pool.c,
 * stream.c, owed.c, parked.c): the pool's state under its one lock, its
 * entries, and the functions one file calls in another. Internal: nothing
 * outside cache/echo/ includes it. See pool.c for the DESIGN.
 *
 * Every function here is called with p->lock held, except where it says
 * otherwise.
 */
#ifndef ECHOFS_POOL_INT_H
#define ECHOFS_POOL_INT_H

#include "common/attrs.h"
#include "cache/echo/governor.h"
#include "cache/echo/policy.h"
#include "cache/echo/pool.h"
#include "common/deadline.h"
#include "common/workq.h"

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define POOL_MEM_DEFAULT (512ULL << 20)
#define POOL_WAIT_DEFAULT 30.0
/* 1024 samples: enough to mix the ~4 shards in flight at a few hundred
 * samples each, small enough that the first samples are ready quickly. */
#define POOL_SHUFFLE_DEFAULT 1024
#define POOL_SHUFFLE_MAX (1U << 20)
#define POOL_PREFETCH 2
/* Larger samples are counted as read errors rather than buffered. */
#define POOL_SAMPLE_MAX (256ULL << 20)
/* A pass that produced nothing (every shard failing) is retried after this. */
#define POOL_IDLE_S 1.0
/* Rest after a walk that streamed nothing new (every sample still held for
 * its echoes, only owed ones re-read): long enough that the walk, O(samples),
 * is not a busy loop; short against a reader's patience (a waiting reader
 * ends it at once). */
#define POOL_REST_S 0.05
#define POOL_INGEST_MAX 64
/* Read samples queued for the ingest threads, per thread: enough that a
 * thread finishing a decode finds the next one read. */
#define POOL_IQ_PER_THREAD 2
#define POOL_AGE_BUCKETS 24

struct entry {
	struct echo_item it; /* first: container_of is a cast */
	uint32_t sample, cls;
	size_t len;
	uint8_t *data;
	uint64_t reserved; /* bytes reserved while read and ingested */
	bool reread;   /* an owed sample read again: straight to the policy */
	uint32_t pass; /* the pass whose serve of the sample this is */
	struct workq_item wi; /* queued for an ingest worker */
	/* Under p->lock: */
	unsigned refs;		   /* readers holding it */
	bool attached;		   /* held by the policy */
	bool buffered;		   /* in the shuffle buffer */
	struct entry *prev, *next; /* all entries, for pool_free */
};

/* One reader's reference: what pool_take handed out. */
struct ref {
	struct pool_sample pub; /* first: container_of is a cast */
	struct entry *e;
	struct echo_take t;
	/* Guarded by the pool lock. A take's refs (pool_share) are one
	 * serve: lead is the take's first ref (itself for a take), which
	 * holds the take's state for all of them. */
	bool committed; /* lead: the serve was counted */
	bool ended;	/* lead: the take was undone or discarded */
	struct ref *lead;
	unsigned shares; /* lead: refs of the take alive, itself included */
};

/* A parked take. */
struct waiter {
	uint32_t cls;
	const void *tag;
	pool_done_fn done;
	void *ud;
	double t0;	    /* now_mono() when parked: stall time */
	struct deadline dl; /* answered with -ETIMEDOUT after it */
	int err;
	struct pool_sample *got;
	struct waiter *prev, *next;
};

/* Sample numbers given back, per class, oldest first (v[head..n)).
 * nfree counts those whose previous copy is no longer held: the streamer
 * asks "is one of them readable now?" for every sample it walks, and a
 * line of held samples (the whole data set in memory, each kept for its
 * echoes) must answer that without a scan. */
struct owed {
	uint32_t *v;
	size_t head, n, cap;
	size_t nfree;
};

struct pool {
	/* Immutable after pool_open (or streamer-only). */
	const struct index *ix;
	/* What the pool streams: the index's samples, or with
	 * pool_opts.members its members (the samples layout's keys). */
	const struct index_sample *units;
	size_t nunits;
	struct shards *sh;
	uint32_t ncls;
	struct pool_opts o;
	uint32_t *class_of;    /* copy of the caller's array */
	uint32_t *by_shard;    /* classed sample numbers, grouped by shard */
	uint32_t *shard_first; /* nshards + 1 offsets into by_shard */
	uint32_t *order;       /* this pass's shard order (streamer) */
	size_t norder;	       /* shards in it: all, or this pass's part */
	uint64_t walk_new;     /* pass samples read (not re-read) this walk */
	uint64_t walks;	       /* walks of a pass begun (under p->lock) */
	uint64_t owed_looks; /* owed entries looked at to find a readable one */
	uint64_t *counts;    /* samples per shard (repartition only) */
	pthread_t thread, timer;
	bool started, timer_started;
	struct workq *iwq; /* ingest workers; NULL without an ingest hook */

	pthread_mutex_t lock;
	pthread_cond_t *cls_cv;
	size_t ncond; /* condition variables made (init_sync) */
	pthread_cond_t room_cv, idle_cv, iq_cv, timer_cv;
	bool stop;
	struct echo_policy *ep;
	struct echo_rng rng;
	struct entry **shuf;
	unsigned nshuf;
	uint64_t *shuf_count; /* buffered samples per class */
	struct entry *all;
	uint64_t bytes, samples;
	unsigned waiters, active;
	uint32_t *want;	     /* readers waiting per class */
	struct owed *owed;   /* per class */
	uint8_t *is_owed;    /* per sample */
	uint8_t *held;	     /* per sample: entries of it held (saturating) */
	uint8_t *in_line;    /* per sample: in its class's owed line */
	uint32_t *debt_pass; /* per sample in line: the pass it is owed for */
	uint64_t nowed;
	uint32_t owed_next; /* class the next owed pick starts at */
	unsigned ingesting; /* read, not yet added: queued or in the hook */
	struct waiter *whead, *wtail; /* parked, oldest first */
	struct waiter *done;	      /* answered, callbacks not run yet */
	uint64_t nparked;
	uint64_t pass, fresh_in_pass, dropped, read_errors, timeouts, rejected;
	uint64_t given_back, reread;
	/* Serves counted at pool_commit (readers opened them), unlike the
	 * policy's own counts, which include reservations. */
	uint64_t served_fresh, served_echo, served_own;
	double stall_s;
	/* ECHO_ADAPTIVE with E > 1: the governor that sets the policy's cap
	 * (cache/echo/governor.h), ticked at every committed serve. */
	struct echo_gov *gov;
	/* Echoes committed by age, opens of their class since their last
	 * serve: bucket i holds ages in [2^i, 2^(i+1)). */
	uint64_t echo_age[POOL_AGE_BUCKETS];
	/* Fresh takes so far, and at the start of the streamer's walk: a
	 * walk starts only after readers took something (demand). */
	uint64_t takes, takes_at_walk;
	/* Fresh takes in the current and the previous pass (pool_claim_own's
	 * window): while either is non-zero some path's own sample was the
	 * pool's this pass. */
	uint64_t takes_in_pass, takes_last_pass;
	bool pacing;	 /* the streamer waits for readers to take */
	/* Per sample: 1 its ingest or serve failed (counted in rejected), 2
	 * marked by pool_mark_bad (counted elsewhere); not read again. */
	uint8_t *bad;
	/* Per class: its samples not marked bad (pool_set_bad). A class with
	 * none left answers its takes -EIO: no pass can give it a sample. */
	uint32_t *class_good;
	/* Per sample: 1 claimed by its own path (pool_claim_own), which
	 * serves it fresh every pass: the pool holds it only as an echo
	 * candidate (policy_join), and does not read it when E allows no
	 * echo. */
	uint8_t *own;
	/* Per sample: the tag (pass_tag) of the pass the pool last took it
	 * fresh in, 0 never: a sample the pool served this pass is not
	 * claimed by its own path in the same pass. */
	uint8_t *taken;
};

/* A pass's tag in p->taken: 1..255 (0: never); passes 255 apart share
 * one, which at worst refuses a claim for a pass. */
static inline uint8_t pass_tag(uint64_t pass)
{
	return (uint8_t)(pass % 255 + 1);
}

/* ---- pool.c: entries, the shuffle buffer, memory, takes ---- */

/* Free entry e (p->lock held). */
void pool_entry_free(struct pool *p, struct entry *e);
/* Into the policy (and wake its class's readers). */
void pool_attach(struct pool *p, struct entry *e);
void pool_buffer_push(struct pool *p, struct entry *e);
void pool_buffer_flush(struct pool *p);
/* Wait until len more bytes fit under mem_size (or the pool is empty):
 * 0, or -ESHUTDOWN. */
MUST_CHECK
int pool_make_room(struct pool *p, uint64_t len);
/* Mark sample bad for the rest of the mount (how: see struct pool's bad;
 * p->lock held); the first mark counts it out of its class_good, and a
 * class left with none answers its parked takes -EIO. */
void pool_set_bad(struct pool *p, uint32_t sample, uint8_t how);
/* One take of class cls if one is possible now: 0 or -EAGAIN/-EINVAL, or
 * -EIO when every sample of the class is bad. */
MUST_CHECK
int pool_try_take(struct pool *p, uint32_t cls, struct echo_take *t);
/* A reader's reference to what t took. */
struct pool_sample *pool_hand_out(struct pool *p, struct echo_take *t);

/* ---- parked.c: parked takes and the timer ---- */

/* Drop the lock, then run the callbacks of the takes answered under it. */
void pool_unlock(struct pool *p);
/* Serve the parked takes of class cls that can be served now, oldest
 * first; wake the blocking takes of cls. */
void pool_notify(struct pool *p, uint32_t cls);
void parked_add(struct pool *p, uint32_t cls, const void *tag,
		pool_done_fn done, void *ud);
/* Move w to the done list with its answer (pool_unlock runs it). */
void parked_answer(struct pool *p, struct waiter *w, int err,
		   struct pool_sample *got);
/* The timer thread (no lock held on entry). */
void *parked_timer_main(void *arg);

/* ---- owed.c: the owed ledger ---- */

void owed_add(struct pool *p, uint32_t sample, uint32_t cls, bool counted,
	      uint32_t pass);
void owed_line_remove(struct pool *p, uint32_t sample, uint32_t cls);
bool owed_any(const struct pool *p, uint32_t cls);
bool owed_pop(struct pool *p, uint32_t cls, bool any, uint32_t *out);
bool owed_pick(struct pool *p, uint32_t *sample);

/* ---- stream.c: the streamer and the ingest workers ---- */

/* Shuffle the shard order for a new pass (p->lock held). */
void stream_begin_pass(struct pool *p);
/* The streamer thread (no lock held on entry). */
void *stream_main(void *arg);
/* workq callbacks (no lock held): ingest a read sample, or drop it. */
void stream_ingest_run(void *ctx, struct workq_item *it);
void stream_ingest_cancel(void *ctx, struct workq_item *it);

#endif
