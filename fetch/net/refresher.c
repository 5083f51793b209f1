/* refresher.c - the credential renewal thread (see refresher.h). */
#include "fetch/net/refresher.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>

#include "common/deadline.h"
#include "common/util.h"

struct refresher {
	refresher_fn renew;
	void *ud;
	time_t expires;
	pthread_t thread;
	pthread_mutex_t lock; /* guards stop; leaf */
	pthread_cond_t cond;  /* monotonic; signalled on stop */
	int stop;
};

double refresher_delay(time_t fetched, time_t expires, time_t now)
{
	double life = difftime(expires, fetched), ahead = REFRESHER_AHEAD_S;
	double in;

	if (ahead > life / 2)
		ahead = life / 2;
	in = difftime(expires, now) - ahead;
	return in < 1 ? 1 : in;
}

/* Waits s seconds or until stopped; returns 1 when stopped. */
static int wait_stop(struct refresher *r, double s)
{
	struct deadline d = deadline_in(s);
	int stop;

	pthread_mutex_lock(&r->lock);
	while (!r->stop && cond_wait_until(&r->cond, &r->lock, &d) == 0)
		;
	stop = r->stop;
	pthread_mutex_unlock(&r->lock);
	return stop;
}

static void *refresher_main(void *ud)
{
	struct refresher *r = ud;
	time_t now = time(NULL);
	double delay = refresher_delay(now, r->expires, now);

	while (!wait_stop(r, delay)) {
		time_t expires = 0;

		if (r->renew(r->ud, &expires) != 0) {
			delay = REFRESHER_RETRY_S;
			continue;
		}
		if (!expires)
			break;
		now = time(NULL);
		delay = refresher_delay(now, expires, now);
	}
	return NULL;
}

int refresher_open(refresher_fn renew, void *ud, time_t expires,
		   struct refresher **out)
{
	struct refresher *r = xcalloc(1, sizeof(*r));
	int rc;

	*out = NULL;
	r->renew = renew;
	r->ud = ud;
	r->expires = expires;
	pthread_mutex_init(&r->lock, NULL);
	rc = cond_init_monotonic(&r->cond);
	if (rc)
		goto fail;
	rc = -pthread_create(&r->thread, NULL, refresher_main, r);
	if (rc) {
		pthread_cond_destroy(&r->cond);
		goto fail;
	}
	*out = r;
	return 0;
fail:
	pthread_mutex_destroy(&r->lock);
	free(r);
	return rc;
}

void refresher_free(struct refresher *r)
{
	if (!r)
		return;
	pthread_mutex_lock(&r->lock);
	r->stop = 1;
	pthread_cond_broadcast(&r->cond);
	pthread_mutex_unlock(&r->lock);
	pthread_join(r->thread, NULL);
	pthread_cond_destroy(&r->cond);
	pthread_mutex_destroy(&r->lock);
	free(r);
}
