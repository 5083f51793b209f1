/* deadline.c - points in time on CLOCK_MONOTONIC and timed condition waits
 * against them (see deadline.h). */
#include "common/deadline.h"

#include <errno.h>

#define NSEC 1000000000L
#define MAX_SECONDS (100.0 * 365 * 24 * 3600)

struct deadline deadline_in(double seconds)
{
	struct deadline d;
	time_t whole;
	long frac;

	if (!(seconds > 0)) /* also NaN */
		seconds = 0;
	if (seconds > MAX_SECONDS)
		seconds = MAX_SECONDS;
	clock_gettime(CLOCK_MONOTONIC, &d.at);
	whole = (time_t)seconds;
	frac = (long)((seconds - (double)whole) * 1e9);
	d.at.tv_sec += whole;
	d.at.tv_nsec += frac;
	if (d.at.tv_nsec >= NSEC) {
		d.at.tv_sec++;
		d.at.tv_nsec -= NSEC;
	}
	return d;
}

double deadline_remaining(const struct deadline *d)
{
	struct timespec now;
	double left;

	clock_gettime(CLOCK_MONOTONIC, &now);
	left = (double)(d->at.tv_sec - now.tv_sec) +
	       (double)(d->at.tv_nsec - now.tv_nsec) / 1e9;
	return left > 0 ? left : 0;
}

bool deadline_expired(const struct deadline *d)
{
	return deadline_remaining(d) <= 0;
}

struct deadline deadline_min(struct deadline a, struct deadline b)
{
	if (a.at.tv_sec != b.at.tv_sec)
		return a.at.tv_sec < b.at.tv_sec ? a : b;
	return a.at.tv_nsec <= b.at.tv_nsec ? a : b;
}

static pthread_once_t attr_once = PTHREAD_ONCE_INIT;
static pthread_condattr_t attr;
static int attr_err;

static void attr_make(void)
{
	attr_err = pthread_condattr_init(&attr);
	if (!attr_err)
		attr_err = pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
}

int cond_init_monotonic(pthread_cond_t *c)
{
	pthread_once(&attr_once, attr_make);
	if (attr_err)
		return -attr_err;
	return -pthread_cond_init(c, &attr);
}

int cond_wait_until(pthread_cond_t *c, pthread_mutex_t *m,
		    const struct deadline *d)
{
	int r = pthread_cond_timedwait(c, m, &d->at);
	return r ? -r : 0;
}
