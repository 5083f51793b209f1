/* policy.h - the data-echoing policy (Choi et al., "Faster Neural Network
 * Training with Data Echoing", arXiv 1907.05550): for each open of a class,
 * serve a fresh sample, echo one already served, or wait.
 *
 * Pure state and arithmetic: no threads, no I/O, no clock, no logging. The
 * caller (cache/echo/pool.c) serializes every call with its own lock.
 *
 * Items are the caller's: it embeds a struct echo_item in each sample and
 * gets the same pointer back from echo_policy_take / echo_policy_evict
 * (container_of). The policy never allocates or frees items.
 *
 * Per class the policy keeps the class's open counter (tick), the samples
 * never served yet, and the echo candidates with their use counts and the
 * tick of their last serve. Two modes:
 *  - ECHO_ADAPTIVE (and ECHO_GREEDY, the same here): E is the most echoes
 *    per fresh sample. An echo is
 *    allowed only if serving it keeps served/fresh <= cap since the cap
 *    was last set (cap <= E: the echo factor the caller's governor allows
 *    now, cache/echo/governor.h; E until it is set); the echo served is
 *    the candidate whose last serve is oldest (the pool as a shuffle
 *    buffer: issue 29, copies of a sample as far apart as the pool
 *    allows); a sample is never served more than ceil(E) times.
 *    When both are possible, the class's fresh samples (oldest first) are
 *    drawn alongside the echoes, each weighing ceil(E) serves, while the
 *    upstream falls behind; fresh first when it keeps up, i.e. when the
 *    fresh samples ready outweigh the echoes (ceil(E) * ready >= serves
 *    left of the candidates outside the window), or when no echo is
 *    allowed. Fresh samples are thus never held back for echoes the ratio
 *    forbids, and the fresh backlog of a class stays under its echoes'
 *    weight.
 *  - ECHO_FIXED: the paper's example echoing: each fresh sample gets
 *    floor(E) or ceil(E) copies (ceil with probability E - floor(E), from the
 *    seeded generator), mean E; every open draws one copy uniformly at random
 *    from the class's bag of copies, leaving out samples inside the window.
 * E = 1 in either mode serves every sample exactly once (never an echo).
 *
 * The window: a sample served at the class's open number t is not served
 * again before open t + w + 1 of that class, i.e. never twice within w
 * consecutive opens of the class, where w, the window in force, is
 * `window` or half the samples the class holds (fresh and candidates),
 * whichever is smaller: a window wider than what exists would forbid every
 * echo, so a mount's first samples could not be echoed until ~2 * window
 * of each class had arrived. Fresh samples are never inside it. The
 * default, ECHO_WINDOW_AUTO, is that half alone. When every candidate is inside the
 * window (a class whose candidates were all just used) the policy says
 * "wait": the caller waits for fresh data, which always comes (the streamer
 * runs pass after pass, and each fresh serve advances the tick, so the window
 * moves); small classes never deadlock.
 */
#ifndef ECHOFS_ECHO_POLICY_H
#define ECHOFS_ECHO_POLICY_H

#include "common/attrs.h"
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* How echoes are chosen (see above). Defined here, not in pool.h, so that
 * the policy depends on nothing of the pool that uses it. */
enum echo_mode {
	ECHO_ADAPTIVE = 0,
	ECHO_FIXED = 1,
	/* The policy's ECHO_ADAPTIVE without the caller's governor: the pool
	 * echoes whenever no fresh sample is ready, whatever that costs the
	 * readers (the adaptive mode before issue 29). */
	ECHO_GREEDY = 2,
};

/* The default window: half the samples the class holds (see "The window"
 * above), so that it grows with the pool instead of being a fixed count of
 * opens (issue 29: 16 opens were a batch and a half of a trainer). */
#define ECHO_WINDOW_AUTO UINT32_MAX
/* Largest E accepted: a sample is kept for at most ceil(E) serves. */
#define ECHO_MAX 1000.0
/* Eviction looks at this many of the oldest served candidates. */
#define ECHO_EVICT_SCAN 32

/* xoshiro256** seeded through splitmix64: small, fast, reproducible. */
struct echo_rng {
	uint64_t s[4];
};
void echo_rng_seed(struct echo_rng *r, uint64_t seed);
uint64_t echo_rng_next(struct echo_rng *r);
/* Uniform in [0, n) without modulo bias; 0 when n is 0. */
uint64_t echo_rng_below(struct echo_rng *r, uint64_t n);
/* Uniform in [0, 1). */
double echo_rng_unit(struct echo_rng *r);

/* Embedded in the caller's sample. Every field is private to the policy;
 * echo_policy_add initializes them. */
struct echo_item {
	uint32_t cls;
	uint32_t state;	    /* out, fresh FIFO or bag */
	uint32_t uses;	    /* serves counted so far */
	uint32_t copies;    /* ECHO_FIXED: copies left in the bag */
	uint64_t last_tick; /* class tick of its last serve (uses > 0) */
	size_t pos;	    /* index in its class's bag */
	struct echo_item *prev, *next; /* served list (eviction order) */
};

/* What one take did, kept by the caller to undo it (echo_policy_untake). */
struct echo_take {
	struct echo_item *item;
	unsigned window;    /* the window in force for this serve */
	uint64_t tick;	    /* the class's open number of this serve */
	uint64_t prev_tick; /* the item's last_tick before it */
	bool fresh;	    /* its first serve */
	bool retired;	    /* the item left the policy (fully used): the
			     * caller frees it once nobody holds it */
};

struct echo_policy_opts {
	double echo; /* E, 1 <= E <= ECHO_MAX */
	enum echo_mode mode;
	unsigned window; /* opens of a class; 0 is a valid window (none) */
	uint64_t seed;
	/* ECHO_ADAPTIVE: a ready fresh sample is always served before any
	 * echo, so echoes only fill what would be a wait. For pools whose
	 * echoes cost the readers what a fresh serve does (echo_stage=
	 * encoded decodes every serve): drawing echoes among ready fresh
	 * samples there only displaces them (issue 29). */
	bool fresh_first;
};

struct echo_policy_stats {
	uint64_t served; /* serves counted (fresh + echoes) */
	uint64_t fresh;	 /* first serves */
	uint64_t items;	 /* items held (fresh, candidates, bag) */
	uint64_t ready;	 /* never-served items held, all classes */
};

struct echo_policy;

/* 0 with *out set, or -EINVAL (*out NULL) for bad options or
 * nclasses == 0. */
MUST_CHECK
int echo_policy_open(uint32_t nclasses, const struct echo_policy_opts *o,
		     struct echo_policy **out);
/* Forgets the items (the caller owns them). Accepts NULL. */
void echo_policy_free(struct echo_policy *ep);

/* A fresh sample of class cls arrives. Returns 0 or -EINVAL (bad class). */
MUST_CHECK
int echo_policy_add(struct echo_policy *ep, struct echo_item *it, uint32_t cls);

/* Decide one open of class cls. Returns 0 with *t filled (the serve is
 * counted), -EAGAIN when the caller must wait for fresh data, or -EINVAL. */
MUST_CHECK
int echo_policy_take(struct echo_policy *ep, uint32_t cls, struct echo_take *t);

/* Undo a take that was never shown to a reader: the serve is uncounted, an
 * echo's use is given back, a fresh sample is fresh again (at the front of
 * its class) unless it has been echoed since, in which case that later serve
 * becomes its first. The class tick is not rewound (other opens may have
 * happened since). The item must not have been evicted since the take.
 * Returns true when the policy holds the item afterwards (false: it stays
 * retired, e.g. E was lowered meanwhile, and the caller frees it). */
bool echo_policy_untake(struct echo_policy *ep, const struct echo_take *t);

/* Undo a take as echo_policy_untake does, then remove the item from the
 * policy for good (a sample found bad when served: echo_stage=encoded
 * decodes only then). The caller frees it once nobody holds it. */
void echo_policy_discard(struct echo_policy *ep, const struct echo_take *t);

/* Exact first (cache/echo/pool.h, pool_claim_own): a sample its own path
 * serves outside the policy joins as a candidate already served once at
 * the class's current tick (an echo of it is a second serve). Adaptive
 * and greedy modes only: -EINVAL in fixed mode, -ENOSPC when E allows no
 * second serve (the caller keeps it out). */
MUST_CHECK
int echo_policy_add_served(struct echo_policy *ep, struct echo_item *it,
			   uint32_t cls);
/* Would echo_policy_add_served take an item now? */
bool echo_policy_holds_served(const struct echo_policy *ep);
/* A fresh serve made outside the policy (an own path's): counted in the
 * echo ratio, so echoes of it are allowed as of the pool's own. */
void echo_policy_count_own(struct echo_policy *ep);

/* Pick and remove the least useful served candidate among the
 * ECHO_EVICT_SCAN oldest that can_drop accepts (the caller says which are
 * not in use): ECHO_ADAPTIVE the most used, ECHO_FIXED the one with the
 * fewest copies left, older first on ties. Never-served samples are never
 * chosen. NULL when there is none. */
struct echo_item *
echo_policy_evict(struct echo_policy *ep,
		  bool (*can_drop)(struct echo_item *it, void *ud), void *ud);

/* Remove item it if it is a served candidate (the caller frees it);
 * false, leaving it, if it is fresh or out of the policy. */
bool echo_policy_drop_served(struct echo_policy *ep, struct echo_item *it);

/* Give back a never-served sample of class cls (the pool re-reads it when
 * the class is asked for): it leaves the policy uncounted, as if it had not
 * arrived yet. ECHO_ADAPTIVE takes the newest of the FIFO; ECHO_FIXED any
 * never-served sample of the bag. NULL when the class has none. */
struct echo_item *echo_policy_give_back(struct echo_policy *ep, uint32_t cls);

/* Change E and the mode (samples already in the policy are re-filed: fixed
 * mode draws copies for them, net of the uses they already had). Returns 0
 * or -EINVAL (E < 1, > ECHO_MAX or not finite, unknown mode). */
MUST_CHECK
int echo_policy_set(struct echo_policy *ep, double echo, enum echo_mode mode);
void echo_policy_get(const struct echo_policy *ep, double *echo,
		     enum echo_mode *mode);

/* The echo factor allowed now, cap <= E (the adaptive mode's governor
 * moves it): echoes are allowed while served/fresh <= cap counted from this
 * call, so a cap raised after a long time at 1 does not release a burst of
 * echoes the old count would allow. Ignored in ECHO_FIXED. -EINVAL when
 * cap < 1 or not finite. */
MUST_CHECK
int echo_policy_set_cap(struct echo_policy *ep, double cap);

/* Never-served samples of class cls held now (0 for a bad class). */
uint64_t echo_policy_ready(const struct echo_policy *ep, uint32_t cls);
void echo_policy_get_stats(const struct echo_policy *ep,
			   struct echo_policy_stats *out);

#endif
