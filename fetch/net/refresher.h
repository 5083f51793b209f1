/* refresher.h - a thread that renews expiring credentials ahead of time
 * (AWS credentials, Google tokens).
 *
 * DESIGN: one thread per refresher. It waits until REFRESHER_AHEAD_S before
 * the credentials expire (or half their life when that is shorter, at least
 * 1 s, so short-lived ones cause no busy loop), then calls renew; a failed
 * renew is tried again every REFRESHER_RETRY_S. The wait is a timed
 * condition wait on CLOCK_MONOTONIC (common/deadline.h) that
 * refresher_free cuts short. `lock` guards only the stop flag; it is a leaf
 * and is never held while renew runs, so renew may take its owner's locks
 * and do I/O. */
#ifndef ECHOFS_REFRESHER_H
#define ECHOFS_REFRESHER_H

#include "common/attrs.h"
#include <time.h>

#define REFRESHER_AHEAD_S 300
#define REFRESHER_RETRY_S 10

struct refresher;

/* Fetches and installs new credentials. Returns 0 with *expires set to
 * their expiry (0: they do not expire, the thread ends), or -errno (the
 * callback logs why; tried again in REFRESHER_RETRY_S). */
typedef int (*refresher_fn)(void *ud, time_t *expires);

/* Starts the thread for credentials fetched now that expire at `expires`.
 * ud is borrowed until refresher_free. Returns 0 with *out set, or -errno
 * (no thread: the credentials are then never renewed). */
MUST_CHECK
int refresher_open(refresher_fn renew, void *ud, time_t expires,
		   struct refresher **out);
/* Stops the thread (a renew under way finishes first) and frees. Accepts
 * NULL. */
void refresher_free(struct refresher *r);

/* Seconds after `now` to renew credentials fetched at `fetched` that
 * expire at `expires`. */
double refresher_delay(time_t fetched, time_t expires, time_t now);

#endif
