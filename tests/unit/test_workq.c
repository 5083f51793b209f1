/* test_workq.c - the work queue: FIFO order, concurrency, back-pressure,
 * refusal, workq_run results, drain and cancel at shutdown, pause. */
#include <criterion/criterion.h>
#include <errno.h>
#include <stdatomic.h>
#include <string.h>

#include "common/util.h"
#include "common/workq.h"
#include "wrap_cond.h"

struct job {
	struct workq_item it;
	int id;
	int result;
};

/* Shared by the callbacks: a gate that holds workers, and a log. */
struct ctx {
	pthread_mutex_t m;
	pthread_cond_t c;
	int gate_open;
	int running; /* callbacks inside run now */
	int max_running;
	int order[256];
	int nrun;
	int ncancelled;
	int resubmits; /* run puts its own item back this many times */
	struct workq *q;
};

static void ctx_init(struct ctx *x)
{
	memset(x, 0, sizeof(*x));
	pthread_mutex_init(&x->m, NULL);
	pthread_cond_init(&x->c, NULL);
}

static void run(void *ud, struct workq_item *it)
{
	struct ctx *x = ud;
	struct job *j = (struct job *)it; /* it is the first member */

	pthread_mutex_lock(&x->m);
	x->running++;
	if (x->running > x->max_running)
		x->max_running = x->running;
	pthread_cond_broadcast(&x->c);
	while (!x->gate_open)
		pthread_cond_wait(&x->c, &x->m);
	x->order[x->nrun++ % 256] = j->id;
	j->result = j->id * 10;
	x->running--;
	pthread_cond_broadcast(&x->c);
	int again = x->resubmits > 0 ? x->resubmits-- : 0;
	pthread_mutex_unlock(&x->m);
	if (again)
		cr_assert_eq(workq_submit(x->q, it, WORKQ_NOWAIT), 0);
}

static void cancel(void *ud, struct workq_item *it)
{
	struct ctx *x = ud;
	(void)it;
	pthread_mutex_lock(&x->m);
	x->ncancelled++;
	pthread_mutex_unlock(&x->m);
}

static struct workq *start(struct ctx *x, unsigned threads, size_t cap)
{
	struct workq_opts o = {.threads = threads,
			       .cap = cap,
			       .run = run,
			       .cancel = cancel,
			       .ctx = x};
	cr_assert_eq(workq_open(&o, &x->q), 0);
	cr_assert_not_null(x->q);
	return x->q;
}

static void open_gate(struct ctx *x)
{
	pthread_mutex_lock(&x->m);
	x->gate_open = 1;
	pthread_cond_broadcast(&x->c);
	pthread_mutex_unlock(&x->m);
}

/* Wait (bounded) until `n` callbacks are inside run. */
static void wait_running(struct ctx *x, int n)
{
	double until = now_mono() + 10;
	pthread_mutex_lock(&x->m);
	while (x->running < n && now_mono() < until) {
		pthread_mutex_unlock(&x->m);
		nanosleep(&(struct timespec){0, 1000000L}, NULL);
		pthread_mutex_lock(&x->m);
	}
	cr_assert_geq(x->running, n, "workers never started");
	pthread_mutex_unlock(&x->m);
}

Test(workq, bad_options_are_einval)
{
	struct workq_opts o = {.threads = 0, .run = run};
	struct workq *q = (struct workq *)1;
	cr_assert_eq(workq_open(&o, &q), -EINVAL);
	cr_assert_null(q);
	o.threads = 1;
	o.run = NULL;
	cr_assert_eq(workq_open(&o, &q), -EINVAL);
	cr_assert_eq(workq_open(NULL, &q), -EINVAL);
	workq_free(NULL);
}

Test(workq, one_worker_runs_items_in_fifo_order_once_each)
{
	struct ctx x;
	struct job j[100];

	ctx_init(&x);
	x.gate_open = 1;
	start(&x, 1, 0);
	for (int i = 0; i < 100; i++) {
		memset(&j[i], 0, sizeof(j[i]));
		j[i].id = i;
		cr_assert_eq(workq_submit(x.q, &j[i].it, WORKQ_WAIT), 0);
	}
	workq_free(x.q); /* drains */
	cr_assert_eq(x.nrun, 100);
	for (int i = 0; i < 100; i++)
		cr_assert_eq(x.order[i], i);
	cr_assert_eq(x.ncancelled, 0);
}

Test(workq, n_workers_run_at_once)
{
	struct ctx x;
	struct job j[4] = {{.id = 0}, {.id = 1}, {.id = 2}, {.id = 3}};

	ctx_init(&x);
	start(&x, 4, 0);
	for (int i = 0; i < 4; i++)
		cr_assert_eq(workq_submit(x.q, &j[i].it, WORKQ_NOWAIT), 0);
	wait_running(&x, 4); /* all four inside run, gate still shut */
	open_gate(&x);
	workq_free(x.q);
	cr_assert_eq(x.max_running, 4);
	cr_assert_eq(x.nrun, 4);
}

Test(workq, full_queue_refuses_nowait_and_twice_queued_is_ebusy)
{
	struct ctx x;
	struct job j[4] = {{.id = 0}, {.id = 1}, {.id = 2}, {.id = 3}};

	ctx_init(&x);
	start(&x, 1, 2);
	cr_assert_eq(workq_submit(x.q, &j[0].it, WORKQ_NOWAIT), 0);
	wait_running(&x, 1); /* j0 taken: the queue is empty again */
	cr_assert_eq(workq_submit(x.q, &j[1].it, WORKQ_NOWAIT), 0);
	cr_assert_eq(workq_submit(x.q, &j[1].it, WORKQ_NOWAIT), -EBUSY);
	cr_assert_eq(workq_submit(x.q, &j[2].it, WORKQ_NOWAIT), 0);
	cr_assert_eq(workq_pending(x.q), 2);
	cr_assert_eq(workq_submit(x.q, &j[3].it, WORKQ_NOWAIT), -EAGAIN);
	open_gate(&x);
	workq_free(x.q);
	cr_assert_eq(x.nrun, 3);
}

struct submitter {
	struct workq *q;
	struct job *j;
	_Atomic int r;
	_Atomic int done;
};

static void *submit_main(void *arg)
{
	struct submitter *s = arg;
	s->r = workq_submit(s->q, &s->j->it, WORKQ_WAIT);
	s->done = 1;
	return NULL;
}

static void *run_main(void *arg)
{
	struct submitter *s = arg;
	s->r = workq_run(s->q, &s->j->it);
	s->done = 1;
	return NULL;
}

Test(workq, full_queue_makes_wait_submitters_wait_for_room)
{
	struct ctx x;
	struct job j[3] = {{.id = 0}, {.id = 1}, {.id = 2}};
	struct submitter s = {.j = &j[2], .r = 1};
	pthread_t t;

	ctx_init(&x);
	start(&x, 1, 1);
	s.q = x.q;
	cr_assert_eq(workq_submit(x.q, &j[0].it, WORKQ_WAIT), 0);
	wait_running(&x, 1);
	cr_assert_eq(workq_submit(x.q, &j[1].it, WORKQ_WAIT), 0);
	pthread_create(&t, NULL, submit_main, &s);
	nanosleep(&(struct timespec){0, 100000000L}, NULL);
	cr_assert_eq(s.done, 0, "submitter did not wait for room");
	open_gate(&x);
	pthread_join(t, NULL);
	cr_assert_eq(s.r, 0);
	workq_free(x.q);
	cr_assert_eq(x.nrun, 3);
	cr_assert_eq(x.order[2], 2);
}

static void *run_first_main(void *arg)
{
	struct submitter *s = arg;
	s->r = workq_run_first(s->q, &s->j->it);
	s->done = 1;
	return NULL;
}

/* Wait (bounded) until `n` items are queued. */
static void wait_pending(struct workq *q, size_t n)
{
	double until = now_mono() + 10;
	while (workq_pending(q) < n && now_mono() < until)
		nanosleep(&(struct timespec){0, 1000000L}, NULL);
	cr_assert_eq(workq_pending(q), n);
}

Test(workq, urgent_items_pass_a_full_queue_in_fifo_order)
{
	struct ctx x;
	struct job j[3] = {{.id = 0}, {.id = 1}, {.id = 2}};
	struct job u[3] = {{.id = 10}, {.id = 11}, {.id = 12}};
	struct submitter s[3];
	pthread_t t[3];
	struct workq_opts o = {
		.threads = 1, .cap = 2, .urgent = 2, .run = run, .ctx = &x};

	ctx_init(&x);
	cr_assert_eq(workq_open(&o, &x.q), 0);
	cr_assert_not_null(x.q);
	cr_assert_eq(workq_submit(x.q, &j[0].it, WORKQ_WAIT), 0);
	wait_running(&x, 1);
	cr_assert_eq(workq_submit(x.q, &j[1].it, WORKQ_WAIT), 0);
	cr_assert_eq(workq_submit(x.q, &j[2].it, WORKQ_WAIT), 0);
	for (int i = 0; i < 3; i++) { /* ordinary room is full */
		s[i] = (struct submitter){x.q, &u[i], 1, 0};
		pthread_create(&t[i], NULL, run_first_main, &s[i]);
		if (i < 2)
			wait_pending(x.q, 3 + (size_t)i);
	}
	nanosleep(&(struct timespec){0, 100000000L}, NULL);
	cr_assert_eq(workq_pending(x.q), 4, "urgent room is 2, not more");
	cr_assert_eq(s[2].done, 0, "third urgent caller did not wait");
	open_gate(&x);
	for (int i = 0; i < 3; i++) {
		pthread_join(t[i], NULL);
		cr_assert_eq(s[i].r, 0);
		cr_assert_eq(u[i].result, u[i].id * 10);
	}
	workq_free(x.q);
	cr_assert_eq(x.nrun, 6);
	/* the two urgent ones queued ran before any ordinary one, in their
	 * order (the third found room only once the worker took one) */
	int want[3] = {0, 10, 11};
	for (int i = 0; i < 3; i++)
		cr_assert_eq(x.order[i], want[i], "run %d was %d", i,
			     x.order[i]);
}

Test(workq, run_waits_for_its_own_result_among_many_callers)
{
	enum { N = 32 };
	struct ctx x;
	struct job j[N];
	struct submitter s[N];
	pthread_t t[N];

	ctx_init(&x);
	x.gate_open = 1;
	start(&x, 3, 2); /* fewer slots than callers: back-pressure too */
	for (int i = 0; i < N; i++) {
		memset(&j[i], 0, sizeof(j[i]));
		j[i].id = i + 1;
		s[i] = (struct submitter){x.q, &j[i], 1, 0};
		pthread_create(&t[i], NULL, run_main, &s[i]);
	}
	for (int i = 0; i < N; i++) {
		pthread_join(t[i], NULL);
		cr_assert_eq(s[i].r, 0);
		cr_assert_eq(j[i].result, (i + 1) * 10, "caller %d", i);
	}
	workq_free(x.q);
	cr_assert_eq(x.nrun, N);
}

Test(workq, drain_runs_what_is_queued)
{
	struct ctx x;
	struct job j[5];

	ctx_init(&x);
	start(&x, 1, 0);
	for (int i = 0; i < 5; i++) {
		memset(&j[i], 0, sizeof(j[i]));
		j[i].id = i;
		cr_assert_eq(workq_submit(x.q, &j[i].it, WORKQ_NOWAIT), 0);
	}
	wait_running(&x, 1);
	open_gate(&x);
	workq_shutdown(x.q, WORKQ_DRAIN);
	cr_assert_eq(x.nrun, 5);
	cr_assert_eq(workq_submit(x.q, &j[0].it, WORKQ_NOWAIT), -ESHUTDOWN);
	cr_assert_eq(workq_run(x.q, &j[0].it), -ESHUTDOWN);
	workq_free(x.q);
}

struct shutter {
	struct ctx *x;
};

static void *shut_main(void *arg)
{
	struct ctx *x = arg;
	workq_shutdown(x->q, WORKQ_CANCEL);
	return NULL;
}

Test(workq, cancel_drops_queued_items_and_tells_everyone)
{
	struct ctx x;
	struct job j[6];
	struct submitter waiter, blocked;
	pthread_t tw, tb, ts;

	ctx_init(&x);
	start(&x, 1, 4);
	for (int i = 0; i < 6; i++) {
		memset(&j[i], 0, sizeof(j[i]));
		j[i].id = i;
	}
	cr_assert_eq(workq_submit(x.q, &j[0].it, WORKQ_NOWAIT), 0);
	wait_running(&x, 1); /* j0 runs, held at the gate */
	for (int i = 1; i <= 3; i++)
		cr_assert_eq(workq_submit(x.q, &j[i].it, WORKQ_NOWAIT), 0);
	waiter = (struct submitter){x.q, &j[4], 1, 0};
	pthread_create(&tw, NULL, run_main, &waiter); /* 4th slot */
	while (workq_pending(x.q) < 4)
		nanosleep(&(struct timespec){0, 1000000L}, NULL);
	blocked = (struct submitter){x.q, &j[5], 1, 0};
	pthread_create(&tb, NULL, submit_main, &blocked); /* no room */
	nanosleep(&(struct timespec){0, 50000000L}, NULL);
	cr_assert_eq(blocked.done, 0);

	pthread_create(&ts, NULL, shut_main, &x);
	pthread_join(tw, NULL);
	pthread_join(tb, NULL);
	cr_assert_eq(waiter.r, -ECANCELED);
	cr_assert_eq(blocked.r, -ESHUTDOWN);
	open_gate(&x); /* the running item finishes; shutdown joins it */
	pthread_join(ts, NULL);
	cr_assert_eq(x.nrun, 1, "cancelled items ran");
	cr_assert_eq(x.ncancelled, 3);
	cr_assert_eq(workq_pending(x.q), 0);
	workq_free(x.q);
}

Test(workq, run_may_resubmit_its_own_item)
{
	struct ctx x;
	struct job j = {.id = 7};

	ctx_init(&x);
	x.gate_open = 1;
	x.resubmits = 3;
	start(&x, 2, 0);
	cr_assert_eq(workq_submit(x.q, &j.it, WORKQ_NOWAIT), 0);
	while (1) {
		pthread_mutex_lock(&x.m);
		int n = x.nrun;
		pthread_mutex_unlock(&x.m);
		if (n == 4)
			break;
		nanosleep(&(struct timespec){0, 1000000L}, NULL);
	}
	workq_free(x.q);
	cr_assert_eq(x.nrun, 4);
}

/* ---- pause ---- */

struct pctx {
	struct workq *q;
	_Atomic int r;
	_Atomic double took;
	_Atomic int ran;
	double seconds;
};

static void pause_run(void *ud, struct workq_item *it)
{
	struct pctx *p = ud;
	struct job *j = (struct job *)it;
	if (j->id == 0) {
		double t0 = now_mono();
		p->r = workq_pause(p->q, p->seconds);
		p->took = now_mono() - t0;
	}
	p->ran++;
}

static struct workq *pause_start(struct pctx *p, double seconds)
{
	struct workq_opts o = {.threads = 2, .run = pause_run, .ctx = p};
	p->seconds = seconds;
	p->r = 1;
	cr_assert_eq(workq_open(&o, &p->q), 0);
	cr_assert_not_null(p->q);
	return p->q;
}

/* A pause that ignored its deadline would never end (nothing is submitted):
 * the test's timeout turns that hang into a failure. */
Test(workq, pause_times_out_when_nothing_happens, .timeout = 60)
{
	struct pctx p = {0};
	struct job j = {.id = 0};

	pause_start(&p, 0.1);
	cr_assert_eq(workq_submit(p.q, &j.it, WORKQ_NOWAIT), 0);
	while (p.ran < 1)
		nanosleep(&(struct timespec){0, 1000000L}, NULL);
	cr_assert_eq(p.r, 0);
	/* The deadline is on CLOCK_MONOTONIC: never early (0.09: the float
	 * sum). */
	cr_assert(p.took >= 0.09, "took %f", p.took);
	workq_free(p.q);
}

Test(workq, pause_ends_early_on_submit_and_on_shutdown, .timeout = 60)
{
	struct pctx p = {0};
	struct job j0 = {.id = 0}, j1 = {.id = 1};

	/* A pause of an hour: ending at all (p.ran below) shows the submit or
	 * the shutdown ended it; one that ignored them hangs into the test's
	 * timeout. */
	pause_start(&p, 3600);
	cr_assert_eq(workq_submit(p.q, &j0.it, WORKQ_NOWAIT), 0);
	nanosleep(&(struct timespec){0, 50000000L}, NULL);
	cr_assert_eq(workq_submit(p.q, &j1.it, WORKQ_NOWAIT), 0);
	while (p.ran < 2)
		nanosleep(&(struct timespec){0, 1000000L}, NULL);
	cr_assert_eq(p.r, 0);

	p.r = 1;
	cr_assert_eq(workq_submit(p.q, &j0.it, WORKQ_NOWAIT), 0);
	nanosleep(&(struct timespec){0, 50000000L}, NULL);
	workq_shutdown(p.q, WORKQ_DRAIN);
	cr_assert_eq(p.r, -ESHUTDOWN);
	workq_free(p.q);
}

/* ---- per-worker state ---- */

struct wctx {
	atomic_int made, freed;
	atomic_int mismatch; /* run saw another thread's state */
};

struct wstate {
	pthread_t self;
};

static void *w_init(void *ctx)
{
	struct wctx *w = ctx;
	struct wstate *s = xcalloc(1, sizeof(*s));
	s->self = pthread_self();
	w->made++;
	return s;
}

static void w_fini(void *ctx, void *state)
{
	struct wctx *w = ctx;
	cr_assert_not_null(state);
	free(state);
	w->freed++;
}

static void w_run(void *ctx, struct workq_item *it)
{
	struct wctx *w = ctx;
	struct wstate *s = workq_worker_state();
	(void)it;
	if (!s || !pthread_equal(s->self, pthread_self()))
		w->mismatch++;
}

Test(workq, each_worker_has_its_own_state)
{
	struct wctx w = {0};
	struct workq_opts o = {.threads = 3,
			       .run = w_run,
			       .ctx = &w,
			       .worker_init = w_init,
			       .worker_fini = w_fini};
	struct job j[50];
	struct workq *q;
	cr_assert_eq(workq_open(&o, &q), 0);

	cr_assert_not_null(q);
	cr_assert_null(workq_worker_state(), "state outside a worker");
	for (int i = 0; i < 50; i++) {
		memset(&j[i], 0, sizeof(j[i]));
		cr_assert_eq(workq_run(q, &j[i].it), 0);
	}
	workq_free(q);
	cr_assert_eq(w.made, 3);
	cr_assert_eq(w.freed, 3);
	cr_assert_eq(w.mismatch, 0);
}

/* A monotonic condition variable that cannot be made fails the open (it
 * used to be ignored, leaving workq_pause to wait on an unmade one). */
Test(workq, open_fails_when_its_timed_cond_cannot_be_made)
{
	struct ctx x;
	struct workq *q = (struct workq *)&x; /* not NULL */

	ctx_init(&x);
	cond_fail_after = 0;
	cr_assert_eq(workq_open(&(struct workq_opts){.threads = 2,
						     .run = run,
						     .ctx = &x},
				&q),
		     -ENOMEM);
	cr_assert_null(q);
	cond_fail_after = -1;
	cr_assert_eq(workq_open(&(struct workq_opts){.threads = 2,
						     .run = run,
						     .ctx = &x},
				&q),
		     0);
	workq_free(q);
}
