/* governor.h - the adaptive echo mode's controller: picks the echo factor,
 * from 1 up to echo=E, that keeps the fresh-sample rate at least `keep`
 * (0.95) of the best rate it has measured (issue 29).
 *
 * Why: echoing pays only when it fills time the trainer would spend
 * waiting. On a network-bound mount the fresh rate is the link's, whatever
 * the echo factor, and echoes are free extra steps; on a CPU-bound node
 * every echo a reader takes costs the same cores the decoders need, so the
 * fresh rate falls as the factor rises and echoes replace fresh samples
 * instead of adding to them. The governor tells the two apart by measuring
 * what it controls: fresh serves per second at each factor.
 *
 * DESIGN
 * - Levels: factors 1 = l_0 < l_1 < ... < l_K = E, in fine steps below 2
 *   and sqrt(2) apart above (E = 4: 1, 1.125, 1.25, 1.5, 2, 2.83, 4): on a
 *   CPU-bound node the most echo that keeps the fresh rate is small, since
 *   every echo a reader takes costs a fraction of a decode. It starts at
 *   level 0 (an exact mount's behaviour) so that the best rate includes
 *   the rate without echo.
 * - Windows: fresh samples supplied (fresh serves, plus the growth of the
 *   read-ahead the caller reports) are counted in windows of `window_s`
 *   seconds; a window with fewer than `min_serves` serves is extended (up
 *   to 8 windows), and
 *   one that still has fewer than 4, or in which no serve came for a whole
 *   window, is dropped as idle (a trainer evaluating, an epoch boundary):
 *   no information, no decision. Each
 *   level keeps the mean fresh rate of its last 8 windows and their
 *   spread, and the window number it was last measured in; an estimate
 *   older than `stale` windows is forgotten.
 * - After `settle` windows at a level, one decision. "Below" means below
 *   keep x the best live mean by more than twice the standard error of
 *   the difference: serves come in bursts (a shard's samples at once, a
 *   DataLoader's batches), so single windows are noisy, and a drop must be
 *   real to count.
 *   down   when the level is below: echo is taking the place of fresh
 *          samples; and again after a fall while each step down paid
 *          (the level left is below the new one), so that a reader that
 *          became CPU-bound is followed down in a few windows a level;
 *   up     when the next level has no live estimate or is not below: try
 *          more echo (this is how the top is found, and how a stale
 *          verdict is re-checked: a reader that changes half-way is
 *          followed within `stale` + a few windows). The stride doubles
 *          (1, 2, 4 levels) while each step up costs no fresh samples at
 *          all (not below the best even with keep 1), so a network-bound
 *          mount reaches E = 4 in 3 steps, not 6 (about 12 windows, not
 *          24: a trainer behind a slow link waited through the whole
 *          climb); it stops below the lowest level found below since the
 *          climb last held there, and a fall right after a stride returns
 *          to the level the stride left;
 *   probe  every `probe` windows at a level > 0, one step down to measure
 *          the rate with less echo (the best must stay current).
 *   With probing off (tests), the level never changes.
 * - Pure state and arithmetic on a clock the caller passes in: no threads,
 *   no I/O. The caller (cache/echo/pool.c) serializes calls with its lock.
 */
#ifndef ECHOFS_ECHO_GOVERNOR_H
#define ECHOFS_ECHO_GOVERNOR_H

#include "common/attrs.h"
#include <stdbool.h>
#include <stdint.h>

#define GOV_MAX_LEVELS 24

struct echo_gov_opts {
	double echo;	     /* E >= 1: the top factor */
	double window_s;     /* 0 picks 1 s */
	unsigned min_serves; /* 0 picks 32 */
	double keep;	     /* 0 picks 0.95 */
	unsigned settle;     /* windows at a level before it is judged; 0: 3 */
	unsigned stale;	     /* windows an estimate lives; 0: 30 */
	unsigned probe;	     /* windows between probes down; 0: 15 */
	bool no_probing;     /* never change level (for tests) */
};

/* Why the factor last changed. */
enum gov_reason {
	GOV_START = 0, /* the first level: no echo yet */
	GOV_UP,	       /* the fresh rate held: more echo */
	GOV_DOWN,      /* the fresh rate fell below keep * best */
	GOV_PROBE,     /* a periodic step down to re-measure */
	GOV_SET,       /* echo= was changed */
};

struct echo_gov_state {
	double factor;	   /* the echo factor in force */
	unsigned level, nlevels;
	double fresh_rate; /* the current level's estimate, fresh/s */
	double best_rate;  /* the best live estimate, fresh/s */
	double best_factor;
	enum gov_reason reason;
	uint64_t windows;  /* windows closed with data */
	uint64_t idle;	   /* windows dropped as idle */
	uint64_t changes;  /* level changes */
};

struct echo_gov;

/* 0 with *out set, or -EINVAL (*out NULL) for bad options. now is the
 * caller's monotonic clock in seconds. */
MUST_CHECK
int echo_gov_open(const struct echo_gov_opts *o, double now,
		  struct echo_gov **out);
void echo_gov_free(struct echo_gov *g); /* accepts NULL */

/* One serve shown to a reader: fresh (its first) or an echo. */
void echo_gov_serve(struct echo_gov *g, bool fresh);
/* Undo a serve counted by echo_gov_serve (a take given back). */
void echo_gov_unserve(struct echo_gov *g, bool fresh);

/* Fresh samples read ahead and not served yet, told before each tick: a
 * window measures what the source supplied (fresh serves plus the growth
 * of this backlog), so that a read-ahead drained at once does not pass
 * for a faster source. Never told: 0, serves alone are measured. */
void echo_gov_backlog(struct echo_gov *g, uint64_t ready);
/* Advance the clock to now: closes the window if its time is up and may
 * change the level. Returns true when the factor changed. */
bool echo_gov_tick(struct echo_gov *g, double now);

/* A new top factor E (echo= changed): the levels are rebuilt and the
 * governor starts again from level 0. -EINVAL if E < 1 or not finite. */
MUST_CHECK
int echo_gov_set_top(struct echo_gov *g, double echo, double now);

double echo_gov_factor(const struct echo_gov *g);
void echo_gov_get(const struct echo_gov *g, struct echo_gov_state *out);
const char *echo_gov_reason_name(enum gov_reason r);

#endif
