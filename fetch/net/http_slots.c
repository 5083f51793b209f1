/* http_slots.c - the waits outside curl: a transfer slot (the bound on
 * transfers in flight) and the backoff sleep, both on the monotonic clock and
 * both cut short by http_cancel. */

#include "fetch/net/http_int.h"

#include "common/util.h"

#include <errno.h>
#include <pthread.h>
#include <time.h>

static void mono_abs(double until, struct timespec *ts)
{
	double s = until - now_mono();
	clock_gettime(CLOCK_MONOTONIC, ts);
	if (s < 0)
		s = 0;
	if (s > 86400)
		s = 86400;
	ts->tv_sec += (time_t)s;
	ts->tv_nsec += (long)((s - (double)(time_t)s) * 1e9);
	if (ts->tv_nsec >= 1000000000L) {
		ts->tv_sec++;
		ts->tv_nsec -= 1000000000L;
	}
}

/* Returns 0 with a slot, -ECANCELED after http_cancel, -ETIMEDOUT at until. */
int http_slot_take(struct http *h, double until)
{
	struct timespec ts;
	int r = 0;

	mono_abs(until, &ts);
	pthread_mutex_lock(&h->slot_lock);
	while (h->slots_free == 0 && !h->stopping && r == 0)
		if (pthread_cond_timedwait(&h->slot_cond, &h->slot_lock, &ts) ==
		    ETIMEDOUT)
			r = -ETIMEDOUT;
	if (h->stopping)
		r = -ECANCELED;
	else if (h->slots_free > 0)
		r = 0;
	if (r == 0)
		h->slots_free--;
	pthread_mutex_unlock(&h->slot_lock);
	return r;
}

void http_slot_give(struct http *h)
{
	pthread_mutex_lock(&h->slot_lock);
	h->slots_free++;
	pthread_cond_signal(&h->slot_cond);
	pthread_mutex_unlock(&h->slot_lock);
}

/* Sleep s seconds unless http_cancel comes first (then -ECANCELED). */
int http_sleep(struct http *h, double s)
{
	double until = now_mono() + s;
	struct timespec ts;

	mono_abs(until, &ts);
	pthread_mutex_lock(&h->slot_lock);
	while (!h->stopping && now_mono() < until)
		if (pthread_cond_timedwait(&h->stop_cond, &h->slot_lock, &ts) ==
		    ETIMEDOUT)
			break;
	pthread_mutex_unlock(&h->slot_lock);
	return h->stopping ? -ECANCELED : 0;
}
