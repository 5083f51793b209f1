/* deadline.h - points in time on CLOCK_MONOTONIC (wall clock changes don't
 * move them) and timed condition waits against them.
 *
 * Every condition variable that is waited on with a timeout must be made
 * with cond_init_monotonic (pthread_cond_timedwait otherwise reads the
 * deadline on CLOCK_REALTIME): it is the one place that sets up a
 * pthread_condattr; modules do not make their own. */
#ifndef ECHOFS_DEADLINE_H
#define ECHOFS_DEADLINE_H

#include <pthread.h>
#include <stdbool.h>
#include <time.h>

struct deadline {
	struct timespec at; /* CLOCK_MONOTONIC */
};

/* Now plus `seconds` (negative counts as 0; huge values saturate at about
 * a century). */
struct deadline deadline_in(double seconds);
/* Seconds left, 0 once passed. */
double deadline_remaining(const struct deadline *d);
bool deadline_expired(const struct deadline *d);
/* The earlier of a and b. */
struct deadline deadline_min(struct deadline a, struct deadline b);

/* Make *c a condition variable whose timed waits (cond_wait_until) run on
 * CLOCK_MONOTONIC: pthread_cond_init with a condattr whose clock is set
 * (made once per process; a failure to make it is remembered and returned
 * by every call). Returns 0, or -errno with *c not made: the caller must
 * not wait on it nor destroy it, and fails its own open (a timed wait on a
 * condition variable that was never made is undefined behaviour). The
 * result must be checked: the compiler warns when it is not. Destroy with
 * pthread_cond_destroy. */
__attribute__((warn_unused_result)) int cond_init_monotonic(pthread_cond_t *c);

/* pthread_cond_timedwait until d; c must come from cond_init_monotonic and
 * m be held. Returns 0 when woken (maybe spuriously: callers re-check their
 * predicate), or -ETIMEDOUT when d passed before any wakeup. */
int cond_wait_until(pthread_cond_t *c, pthread_mutex_t *m,
		    const struct deadline *d);

#endif
