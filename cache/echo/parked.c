/* parked.c - the echo pool's parked takes: pool_take_async's requests
 * waiting for a sample of their class (no thread waits for them), answered
 * by whichever thread makes one ready, by the timer thread after wait_s,
 * or by pool_cancel (see the DESIGN in pool.c, "Parked takes"). */
#include "cache/echo/pool_int.h"

#include "common/lockcheck.h"
#include "common/util.h"

#include <errno.h>
#include <stdlib.h>

/* Drop the lock, then run the callbacks of the takes answered under it. */
void pool_unlock(struct pool *p)
{
	struct waiter *w = p->done;

	p->done = NULL;
	pthread_mutex_unlock(&p->lock);
	while (w) {
		struct waiter *n = w->next;
		w->done(w->ud, w->err, w->got);
		free(w);
		w = n;
	}
}

void parked_answer(struct pool *p, struct waiter *w, int err,
		   struct pool_sample *got)
{
	if (w->prev)
		w->prev->next = w->next;
	else
		p->whead = w->next;
	if (w->next)
		w->next->prev = w->prev;
	else
		p->wtail = w->prev;
	p->nparked--;
	p->waiters--;
	p->want[w->cls]--;
	p->stall_s += now_mono() - w->t0;
	w->err = err;
	w->got = got;
	w->prev = NULL;
	w->next = p->done;
	p->done = w;
}

int pool_try_take(struct pool *p, uint32_t cls, struct echo_take *t);
struct pool_sample *pool_hand_out(struct pool *p, struct echo_take *t);

/* Serve the parked takes of class cls that can be served now, oldest
 * first; blocking takes are woken. */
void pool_notify(struct pool *p, uint32_t cls)
{
	struct waiter *w = p->whead, *n;

	pthread_cond_broadcast(&p->cls_cv[cls]);
	for (; w; w = n) {
		struct echo_take t;
		int r;
		n = w->next;
		if (w->cls != cls)
			continue;
		r = pool_try_take(p, cls, &t);
		if (r == -EAGAIN)
			return;
		parked_answer(p, w, r, r ? NULL : pool_hand_out(p, &t));
		n = p->whead; /* the list changed; start over */
	}
}

void *parked_timer_main(void *arg)
{
	struct pool *p = arg;

	pthread_mutex_lock(&p->lock);
	while (!p->stop) {
		if (!p->whead) {
			pthread_cond_wait(&p->timer_cv, &p->lock);
			continue;
		}
		cond_wait_until(&p->timer_cv, &p->lock, &p->whead->dl);
		while (p->whead && deadline_expired(&p->whead->dl)) {
			p->timeouts++;
			parked_answer(p, p->whead, -ETIMEDOUT, NULL);
		}
		pool_unlock(p);
		pthread_mutex_lock(&p->lock);
	}
	pthread_mutex_unlock(&p->lock);
	return NULL;
}

/* Park a take (p->lock held). */
void parked_add(struct pool *p, uint32_t cls, const void *tag,
		pool_done_fn done, void *ud)
{
	ASSERT_HELD(&p->lock);
	struct waiter *w = xcalloc(1, sizeof(*w));

	w->cls = cls;
	w->tag = tag;
	w->done = done;
	w->ud = ud;
	w->t0 = now_mono();
	w->dl = deadline_in(p->o.wait_s);
	w->prev = p->wtail;
	if (p->wtail)
		p->wtail->next = w;
	else
		p->whead = w;
	p->wtail = w;
	p->nparked++;
	p->waiters++;
	p->want[cls]++;
	pthread_cond_signal(&p->timer_cv);
	pthread_cond_signal(&p->room_cv); /* memory may be given back now */
}

int pool_cancel(struct pool *p, const void *tag)
{
	struct waiter *w;

	if (!p)
		return 0;
	pthread_mutex_lock(&p->lock);
	for (w = p->whead; w && w->tag != tag; w = w->next)
		;
	if (w)
		parked_answer(p, w, -EINTR, NULL);
	pool_unlock(p);
	return w != NULL;
}

void pool_cancel_all(struct pool *p)
{
	if (!p)
		return;
	pthread_mutex_lock(&p->lock);
	while (p->whead)
		parked_answer(p, p->whead, -ESHUTDOWN, NULL);
	pool_unlock(p);
}
