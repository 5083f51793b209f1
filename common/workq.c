/* workq.c - a bounded FIFO work queue and its worker threads (see the
 * DESIGN note in workq.h). */
#include "common/workq.h"

#include <errno.h>
#include <stdlib.h>

#include "common/deadline.h"
#include "common/lockcheck.h"
#include "common/util.h"

/* Item states (workq_item.state, guarded by the queue lock). */
enum { IDLE = 0, QUEUED, RUNNING, DONE, CANCELLED };

struct workq {
	struct workq_opts o;
	pthread_t *threads;
	unsigned nthreads;
	pthread_mutex_t lock; /* guards everything below and items' states */
	pthread_cond_t work;  /* an item queued, or stop: idle workers */
	pthread_cond_t room;  /* a slot freed, or stop: WAIT submitters */
	pthread_cond_t room_urgent; /* the same for workq_run_first callers */
	pthread_cond_t poke;	    /* an item queued, or stop: workq_pause */
	struct list_node queue;
	size_t nqueued;
	size_t nurgent; /* urgent items queued (all at the front) */
	struct list_node *urgent_tail; /* the last of them, NULL when none */
	unsigned nroom_urgent; /* workq_run_first callers waiting for room */
	unsigned npausing;
	bool stop, joined;
};

void workq_item_init(struct workq_item *it)
{
	list_init(&it->link);
	it->done_cv = NULL;
	it->state = IDLE;
	it->urgent = false;
}

/* Lock held. Take the first item and note whether a caller waits for it. */
static struct workq_item *take(struct workq *q, bool *waited)
{
	ASSERT_HELD(&q->lock);
	struct workq_item *it =
		list_entry(list_pop_front(&q->queue), struct workq_item, link);
	q->nqueued--;
	if (it->urgent && --q->nurgent == 0)
		q->urgent_tail = NULL;
	if (q->o.cap) {
		pthread_cond_signal(&q->room);
		if (q->nroom_urgent)
			pthread_cond_signal(&q->room_urgent);
	}
	*waited = it->done_cv != NULL;
	/* A fire-and-forget item is the caller's again as run starts: run
	 * may submit or free it. */
	it->state = *waited ? RUNNING : IDLE;
	return it;
}

static _Thread_local void *worker_state;

void *workq_worker_state(void)
{
	return worker_state;
}

static void *worker_main(void *arg)
{
	struct workq *q = arg;
	if (q->o.worker_init)
		worker_state = q->o.worker_init(q->o.ctx);
	pthread_mutex_lock(&q->lock);
	for (;;) {
		struct workq_item *it;
		bool waited;
		while (!q->stop && q->nqueued == 0)
			pthread_cond_wait(&q->work, &q->lock);
		if (q->nqueued == 0)
			break; /* stopping and drained */
		it = take(q, &waited);
		pthread_mutex_unlock(&q->lock);
		q->o.run(q->o.ctx, it);
		pthread_mutex_lock(&q->lock);
		if (waited) {
			it->state = DONE;
			pthread_cond_signal(it->done_cv);
		}
	}
	pthread_mutex_unlock(&q->lock);
	if (q->o.worker_fini)
		q->o.worker_fini(q->o.ctx, worker_state);
	worker_state = NULL;
	return NULL;
}

/* Lock held. Wait for room: cap for ordinary items, cap + urgent for
 * urgent ones (on their own condition, so a freed slot that only an urgent
 * caller may take is not spent waking an ordinary one). */
static int wait_room(struct workq *q, bool urgent, enum workq_wait w)
{
	ASSERT_HELD(&q->lock);
	size_t most = q->o.cap + (urgent ? q->o.urgent : 0);

	while (!q->stop && q->o.cap && q->nqueued >= most) {
		if (w == WORKQ_NOWAIT)
			return -EAGAIN;
		if (!urgent) {
			pthread_cond_wait(&q->room, &q->lock);
			continue;
		}
		q->nroom_urgent++;
		pthread_cond_wait(&q->room_urgent, &q->lock);
		q->nroom_urgent--;
	}
	return q->stop ? -ESHUTDOWN : 0;
}

/* Lock held. Ordinary items at the back; urgent ones after the last urgent
 * item queued (or at the front). */
static int enqueue(struct workq *q, struct workq_item *it, bool urgent,
		   enum workq_wait w)
{
	ASSERT_HELD(&q->lock);
	int r;

	if (it->state == QUEUED)
		return -EBUSY;
	if ((r = wait_room(q, urgent, w)) != 0)
		return r;
	if (!it->link.next)
		list_init(&it->link); /* zero-initialised item */
	it->urgent = urgent;
	if (!urgent) {
		list_push_back(&q->queue, &it->link);
	} else {
		struct list_node *prev =
			q->urgent_tail ? q->urgent_tail : &q->queue;
		list_insert_between(&it->link, prev, prev->next);
		q->urgent_tail = &it->link;
		q->nurgent++;
	}
	it->state = QUEUED;
	q->nqueued++;
	pthread_cond_signal(&q->work);
	if (q->npausing)
		pthread_cond_broadcast(&q->poke);
	return 0;
}

int workq_submit(struct workq *q, struct workq_item *it, enum workq_wait w)
{
	int r;
	pthread_mutex_lock(&q->lock);
	it->done_cv = NULL;
	r = enqueue(q, it, false, w);
	pthread_mutex_unlock(&q->lock);
	return r;
}

static int run_and_wait(struct workq *q, struct workq_item *it, bool urgent)
{
	pthread_cond_t done; /* ours alone: signalled for this item only */
	int r;

	pthread_cond_init(&done, NULL);
	pthread_mutex_lock(&q->lock);
	it->done_cv = &done;
	r = enqueue(q, it, urgent, WORKQ_WAIT);
	while (r == 0 && it->state != DONE && it->state != CANCELLED)
		pthread_cond_wait(&done, &q->lock);
	if (r == 0 && it->state == CANCELLED)
		r = -ECANCELED;
	it->done_cv = NULL;
	it->state = IDLE;
	pthread_mutex_unlock(&q->lock);
	pthread_cond_destroy(&done);
	return r;
}

int workq_run(struct workq *q, struct workq_item *it)
{
	return run_and_wait(q, it, false);
}

int workq_run_first(struct workq *q, struct workq_item *it)
{
	return run_and_wait(q, it, true);
}

int workq_pause(struct workq *q, double seconds)
{
	struct deadline d = deadline_in(seconds);
	int r = 0;

	pthread_mutex_lock(&q->lock);
	if (!q->stop) {
		q->npausing++;
		cond_wait_until(&q->poke, &q->lock, &d);
		q->npausing--;
	}
	if (q->stop)
		r = -ESHUTDOWN;
	pthread_mutex_unlock(&q->lock);
	return r;
}

/* Lock held. Unlink every queued item: workq_run callers learn it from
 * their item's state; the others go to `dropped` for the cancel callback. */
static void drop_queued(struct workq *q, struct list_node *dropped)
{
	ASSERT_HELD(&q->lock);
	struct list_node *n;
	while ((n = list_pop_front(&q->queue)) != NULL) {
		struct workq_item *it = list_entry(n, struct workq_item, link);
		q->nqueued--;
		if (it->urgent && --q->nurgent == 0)
			q->urgent_tail = NULL;
		if (it->done_cv) {
			it->state = CANCELLED;
			pthread_cond_signal(it->done_cv);
		} else {
			it->state = IDLE;
			list_push_back(dropped, n);
		}
	}
}

void workq_shutdown(struct workq *q, enum workq_stop how)
{
	struct list_node dropped = LIST_HEAD_INIT(dropped);
	struct list_node *n;

	pthread_mutex_lock(&q->lock);
	if (q->stop) {
		pthread_mutex_unlock(&q->lock);
		return;
	}
	q->stop = true;
	if (how == WORKQ_CANCEL)
		drop_queued(q, &dropped);
	pthread_cond_broadcast(&q->work);
	pthread_cond_broadcast(&q->room);
	pthread_cond_broadcast(&q->room_urgent);
	pthread_cond_broadcast(&q->poke);
	pthread_mutex_unlock(&q->lock);
	while ((n = list_pop_front(&dropped)) != NULL)
		if (q->o.cancel)
			q->o.cancel(q->o.ctx,
				    list_entry(n, struct workq_item, link));
	for (unsigned i = 0; i < q->nthreads; i++)
		pthread_join(q->threads[i], NULL);
	q->joined = true;
}

bool workq_stopping(struct workq *q)
{
	bool s;
	pthread_mutex_lock(&q->lock);
	s = q->stop;
	pthread_mutex_unlock(&q->lock);
	return s;
}

size_t workq_pending(struct workq *q)
{
	size_t n;
	pthread_mutex_lock(&q->lock);
	n = q->nqueued;
	pthread_mutex_unlock(&q->lock);
	return n;
}

int workq_open(const struct workq_opts *o, struct workq **out)
{
	struct workq *q;
	int r;

	*out = NULL;
	if (!o || !o->run || o->threads == 0)
		return -EINVAL;
	q = xcalloc(1, sizeof(*q));
	/* workq_pause waits on poke with a deadline: without it, none. */
	if ((r = cond_init_monotonic(&q->poke)) != 0) {
		free(q);
		return r;
	}
	q->o = *o;
	list_init(&q->queue);
	pthread_mutex_init(&q->lock, NULL);
	pthread_cond_init(&q->work, NULL);
	pthread_cond_init(&q->room, NULL);
	pthread_cond_init(&q->room_urgent, NULL);
	q->threads = xcalloc(o->threads, sizeof(*q->threads));
	for (; q->nthreads < o->threads; q->nthreads++) {
		r = pthread_create(&q->threads[q->nthreads], NULL, worker_main,
				   q);
		if (r) {
			workq_free(q);
			return -r;
		}
	}
	*out = q;
	return 0;
}

void workq_free(struct workq *q)
{
	if (!q)
		return;
	if (!q->joined)
		workq_shutdown(q, WORKQ_DRAIN);
	pthread_cond_destroy(&q->poke);
	pthread_cond_destroy(&q->room_urgent);
	pthread_cond_destroy(&q->room);
	pthread_cond_destroy(&q->work);
	pthread_mutex_destroy(&q->lock);
	free(q->threads);
	free(q);
}
