/* workq.h - one bounded FIFO work queue with its pool of worker threads,
 * for every module that hands work to threads (shard fetches, page-cache
 * pushes, image decodes).
 *
 * DESIGN
 * - Items are intrusive: the caller embeds a struct workq_item in its own
 *   job and gets it back in the run callback (list_entry / container_of).
 *   The queue never allocates per item.
 * - `threads` workers take items in FIFO order and call run(ctx, item)
 *   without any workq lock held, so run may block, submit more items
 *   (including the one it runs) or call workq_pause.
 * - Two ways to submit: workq_submit (fire and forget; with cap set, either
 *   wait for room or refuse with -EAGAIN) and workq_run (submit, then wait
 *   until a worker has run the item; for results on the caller's stack).
 *   Each workq_run caller waits on its own condition variable, signalled
 *   for its item alone: a finished item never wakes other submitters. A
 *   submitter waiting for room is woken by one signal per freed slot.
 * - Urgent items (workq_run_first, e.g. an echo serve among queued image
 *   decodes) go ahead of every ordinary item, FIFO among themselves, in
 *   `urgent` slots kept beyond cap: an urgent item waits only for a worker,
 *   never behind the ordinary queue.
 * - workq_shutdown: no new items; WORKQ_DRAIN runs what is queued,
 *   WORKQ_CANCEL drops it (cancel callback for submitted items, -ECANCELED
 *   for workq_run callers). Either way it returns once every worker has
 *   finished its current item and exited.
 * - Locking: one mutex per queue guards the list, the counters and the
 *   items' states; never held while run or cancel callbacks execute. A
 *   caller may hold its own lock while submitting with WORKQ_NOWAIT (lock
 *   order: caller's lock, then the queue's), but then its run callback must
 *   take that lock itself rather than expect it held.
 */
#ifndef ECHOFS_WORKQ_H
#define ECHOFS_WORKQ_H

#include "common/attrs.h"
#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>

#include "common/list.h"

/* Embed one in each job; zero-initialise it (or workq_item_init) before
 * its first submit. Fields are private to workq. */
struct workq_item {
	struct list_node link;
	pthread_cond_t *done_cv; /* the workq_run caller's, or NULL */
	int state;
	bool urgent; /* queued by workq_run_first */
};

typedef void (*workq_fn)(void *ctx, struct workq_item *it);

struct workq_opts {
	unsigned threads; /* workers, at least 1 */
	size_t cap;	  /* most items queued (not running); 0: no limit */
	size_t urgent;	  /* with cap: extra slots for workq_run_first */
	workq_fn run;	  /* required */
	workq_fn cancel;  /* optional: a submitted item dropped by CANCEL */
	void *ctx;	  /* passed to every callback, borrowed */
	/* Optional per-worker state (e.g. a decoder context a thread must not
	 * share): made by each worker as it starts, read in run with
	 * workq_worker_state(), given to worker_fini as the worker exits. */
	void *(*worker_init)(void *ctx);
	void (*worker_fini)(void *ctx, void *state);
};

enum workq_wait { WORKQ_WAIT, WORKQ_NOWAIT };
enum workq_stop { WORKQ_DRAIN, WORKQ_CANCEL };

struct workq;

/* Starts the workers. Returns 0 with *out set, or -EINVAL / pthread_create's
 * -errno (*out NULL). */
MUST_CHECK
int workq_open(const struct workq_opts *o, struct workq **out);
/* workq_shutdown(DRAIN) unless already shut down, then frees. Accepts NULL.
 * Must not be called from a worker, nor while another thread may still be
 * inside workq_submit or workq_run on this queue. */
void workq_free(struct workq *q);

void workq_item_init(struct workq_item *it);

/* Queue it at the back. Returns 0; -EAGAIN when full and NOWAIT; -EBUSY
 * when it is queued already; -ESHUTDOWN after shutdown began (also for
 * a WAIT submitter still waiting for room then). */
MUST_CHECK
int workq_submit(struct workq *q, struct workq_item *it, enum workq_wait w);

/* Queue it (waiting for room) and wait until a worker has run it. Returns
 * 0, -ESHUTDOWN (never queued) or -ECANCELED (dropped unrun). Not from a
 * worker of the same queue when every worker could be waiting. */
MUST_CHECK
int workq_run(struct workq *q, struct workq_item *it);

/* workq_run for an urgent item: queued after the urgent items already
 * queued and before every ordinary one, waiting for room only when
 * cap + urgent items are queued. Same returns as workq_run. */
MUST_CHECK
int workq_run_first(struct workq *q, struct workq_item *it);

/* From a run callback: sleep up to `seconds`, returning early when an item
 * is submitted (returns 0) or shutdown begins (returns -ESHUTDOWN). For a
 * worker that retries later without spinning. */
MUST_CHECK
int workq_pause(struct workq *q, double seconds);

/* Stop taking items (see DESIGN) and join the workers. Idempotent; later
 * calls return at once. Must not be called from a worker. */
void workq_shutdown(struct workq *q, enum workq_stop how);

/* In a run callback: this worker's worker_init result (NULL without one,
 * or outside a worker). */
void *workq_worker_state(void);

/* Has shutdown begun? For long run callbacks that can stop early. */
bool workq_stopping(struct workq *q);
/* Items queued and not yet taken by a worker. */
size_t workq_pending(struct workq *q);

#endif
