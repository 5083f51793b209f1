/* test_pool.c - unit tests for the echo pool (cache/echo/pool.c) on the real
 * stack: tar shards served by tests/fault_server.py, http, disk store,
 * shard manager. The owed ledger and adaptive mixing are in
 * test_pool_owed.c. */
#include "cache/echo/pool.h"

#include "cache/store/shards.h"
#include "cache/store/store.h"
#include "common/util.h"
#include "fetch/format/index.h"
#include "fetch/net/http.h"
#include "fixtures.h"
#include "pool_fx.h"

#include <criterion/criterion.h>
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

TestSuite(pool, .init = pool_fx_setup, .fini = pool_fx_teardown,
	  .timeout = 120);

/* ---- one pass ---- */

Test(pool, one_pass_serves_every_sample_fresh_once)
{
	struct pool_opts po = {.echo = 1, .seed = 1};
	unsigned seen[NSAMPLES] = {0};
	struct pool_stats ps;
	struct pool_sample *s;
	struct stack k;

	stack_open(&k, NULL, &po, NULL);
	for (uint32_t c = 0; c < NCLS; c++)
		for (uint32_t n = 0; n < per_class[c]; n++) {
			s = take_ok(k.p, c);
			seen[s->sample]++;
			pool_release(k.p, s);
		}
	for (int i = 0; i < NSAMPLES; i++)
		cr_assert_eq(seen[i], class_of[i] == POOL_NO_CLASS ? 0 : 1,
			     "sample %d served %u times in one pass", i,
			     seen[i]);
	pool_get_stats(k.p, &ps);
	cr_assert_eq(ps.fresh_served, NCLASSED);
	cr_assert_eq(ps.echoes_served, 0);
	cr_assert_eq(ps.read_errors, 0);
	cr_assert_eq(ps.timeouts, 0);
	cr_assert_geq(ps.pass, 1);
	/* One more open of a class: the first sample of pass 2. */
	s = take_ok(k.p, 0);
	pool_get_stats(k.p, &ps);
	cr_assert_geq(ps.pass, 2, "pass %llu", (unsigned long long)ps.pass);
	/* Not >= 1: the streamer may have read this sample (counting it in
	 * pass 1's figures) just before it moved the pass counter on (seen
	 * once under ASan). */
	cr_assert_leq(ps.fresh_in_pass, NCLASSED);
	cr_assert_eq(ps.fresh_served, NCLASSED + 1);
	cr_assert_eq(ps.effective_echo, 1.0);
	pool_release(k.p, s);
	stack_close(&k);
}

/* ---- echoes under a slow upstream ---- */

struct echo_case {
	double echo;
	enum echo_mode mode;
};

/* ECHO_GREEDY: the policy's adaptive draws without the governor, which
 * starts at factor 1 and needs seconds of measurements to echo at all
 * (its own tests: test_governor.c and governed_mode_* below). */
static const struct echo_case echo_cases[] = {
	{3.0, ECHO_GREEDY},
	{2.0, ECHO_FIXED},
};

/* Opens random classes quickly; checks class, bytes, the window and the
 * use cap on every serve. Returns the serves per sample in *uses. The
 * window in force is at most half what the class holds (policy.h), and the
 * class holds at least its candidates, the samples served fewer than
 * ceil(E) times (nothing is evicted here): the separation is checked
 * against that. Adaptive mode may echo while fresh samples are ready (they
 * are drawn together while the upstream is behind: test_echo_policy.c). */
static void read_fast(struct pool *p, const struct echo_case *c,
		      unsigned window, int n, unsigned *uses)
{
	uint64_t opens[NCLS] = {0}, last[NSAMPLES] = {0}, cand[NCLS] = {0};
	unsigned seed = 77, cap = (unsigned)ceil(c->echo);

	for (int i = 0; i < n; i++) {
		uint32_t cls = (uint32_t)(rand_r(&seed) % NCLS);
		uint64_t w = cand[cls] / 2 < window ? cand[cls] / 2 : window;
		struct pool_sample *s;

		s = take_ok(p, cls);
		opens[cls]++;
		if (uses[s->sample])
			cr_assert_gt(opens[cls] - last[s->sample], w,
				     "sample %u repeated inside the window",
				     s->sample);
		last[s->sample] = opens[cls];
		if (uses[s->sample] == 0 && cap > 1)
			cand[cls]++;
		uses[s->sample]++;
		if (uses[s->sample] == cap && cap > 1)
			cand[cls]--;
		cr_assert_leq(uses[s->sample], cap);
		pool_release(p, s);
	}
}

Test(pool, slow_upstream_echoes_right_class_and_bytes)
{
	const char *faults[] = {"*.tar=slow:30000", NULL};

	for (size_t n = 0; n < ARRAY_SIZE(echo_cases); n++) {
		const struct echo_case *c = &echo_cases[n];
		struct pool_opts po = {.echo = c->echo,
				       .mode = c->mode,
				       .window = 2,
				       .seed = 5};
		unsigned uses[NSAMPLES] = {0};
		struct pool_stats ps;
		struct stack k;

		stack_open(&k, faults, &po, NULL);
		read_fast(k.p, c, 2, 45, uses);
		pool_get_stats(k.p, &ps);
		/* The whole test must stay within pass 1 for the window and
		 * cap checks to be about one copy of each sample. */
		cr_assert_lt(ps.fresh_served, NCLASSED, "upstream too fast");
		cr_assert_gt(ps.echoes_served, 0, "case %zu: no echo", n);
		cr_assert_eq(ps.fresh_served + ps.echoes_served, 45);
		cr_assert_leq(ps.effective_echo, c->echo + 1e-9);
		cr_assert_gt(ps.stall_s, 0.0);
		stack_close(&k);
		fx_server_stop(&srv);
	}
}

Test(pool, untake_makes_a_fresh_sample_fresh_again)
{
	struct pool_opts po = {.echo = 2, .seed = 3};
	struct pool_sample *a, *b;
	struct pool_stats ps;
	struct stack k;
	uint64_t ready;
	uint32_t first;

	stack_open(&k, NULL, &po, NULL);
	a = reserve_ok(k.p, 1);
	first = a->sample;
	ready = pool_ready(k.p, 1);
	pool_untake(k.p, a);
	/* The streamer may add more meanwhile, never fewer. */
	cr_assert_geq(pool_ready(k.p, 1), ready + 1);
	pool_get_stats(k.p, &ps);
	cr_assert_eq(ps.fresh_served, 0);
	cr_assert_eq(ps.echoes_served, 0);
	b = take_ok(k.p, 1);
	cr_assert_eq(b->sample, first, "the untaken sample comes first");
	pool_get_stats(k.p, &ps);
	cr_assert_eq(ps.fresh_served, 1, "the retake must be fresh");
	pool_release(k.p, b);
	pool_release(k.p, NULL);
	pool_untake(k.p, NULL);
	stack_close(&k);
}

/* Shares (whole-sample visits): the refs of one take are one serve. */
Test(pool, shared_take_counts_once_and_is_undone_by_its_last_ref)
{
	struct pool_opts po = {.echo = 2, .seed = 3};
	struct pool_sample *a, *sa, *b, *sb;
	struct pool_stats ps;
	struct stack k;
	uint32_t first;

	stack_open(&k, NULL, &po, NULL);
	/* Never committed: the take is undone only by its last ref. */
	a = reserve_ok(k.p, 1);
	first = a->sample;
	sa = pool_share(k.p, a);
	cr_assert_eq(sa->sample, first);
	cr_assert_eq(sa->data, a->data, "a share serves the same bytes");
	pool_untake(k.p, a);
	b = take_ok(k.p, 1);
	cr_assert_neq(b->sample, first, "undone while a share still holds it");
	pool_release(k.p, b);
	pool_untake(k.p, sa);
	b = take_ok(k.p, 1);
	cr_assert_eq(b->sample, first, "the last ref's untake gives it back");
	/* Committed by both refs: one serve. Untaken after: not undone. */
	sb = pool_share(k.p, b);
	pool_commit(k.p, sb);
	pool_commit(k.p, b);
	pool_untake(k.p, b);
	pool_untake(k.p, sb);
	pool_get_stats(k.p, &ps);
	cr_assert_eq(ps.fresh_served, 2, "one serve per take, shares or not");
	cr_assert_eq(ps.echoes_served, 0);
	b = take_ok(k.p, 1);
	cr_assert_neq(b->sample, first, "a served take is not given back");
	pool_release(k.p, b);
	stack_close(&k);
}

/* ---- bounded memory ---- */

/* Take from a class that has fresh data ready (readers of a real epoch
 * spread over the classes), polling briefly when none has. left (NULL: no
 * limit) holds the takes each class still may have; a take counts down. */
static struct pool_sample *take_ready(struct pool *p, unsigned *rr,
				      unsigned *left)
{
	for (int tries = 0; tries < 5000; tries++) {
		for (uint32_t j = 0; j < NCLS; j++) {
			uint32_t c = (*rr + j) % NCLS;
			if ((!left || left[c] > 0) && pool_ready(p, c) > 0) {
				*rr = c + 1;
				if (left)
					left[c]--;
				return take_ok(p, c);
			}
		}
		usleep(1000);
	}
	cr_assert_fail("no class ever had fresh data ready");
	return NULL;
}

static const double small_mem_echo[] = {1.0, 2.0};

Test(pool, small_mem_stays_bounded_and_correct)
{
	/* Room for about three samples (each is at most 22000 bytes). */
	const uint64_t mem = 66000;

	for (size_t n = 0; n < ARRAY_SIZE(small_mem_echo); n++) {
		struct pool_opts po = {.echo = small_mem_echo[n],
				       .mem_size = mem,
				       .seed = 9,
				       .wait_s = 10};
		unsigned seen[NSAMPLES] = {0}, rr = 0, left[NCLS];
		bool fresh_only = small_mem_echo[n] == 1.0;
		struct pool_stats ps;
		struct stack k;

		/* Fresh only: two passes' worth from each class. The pool keeps
		 * passes in order within a class, not across classes: once a
		 * class's pass 2 is served, its pass-3 samples may be ready
		 * while another class still has pass-2 samples, and a reader
		 * free to pick any class would take one (seen under TSan,
		 * 1 run in 20: one sample seen once, another three times). */
		for (uint32_t c = 0; c < NCLS; c++)
			left[c] = 2 * per_class[c];
		stack_open(&k, NULL, &po, NULL);
		for (int i = 0; i < 2 * NCLASSED; i++) {
			/* Near the end of pass 2 let the streamer run ahead
			 * into pass 3, the interleaving above. */
			if (fresh_only && i >= 2 * NCLASSED - 10)
				usleep(50000);
			struct pool_sample *s =
				take_ready(k.p, &rr, fresh_only ? left : NULL);
			seen[s->sample]++;
			pool_get_stats(k.p, &ps);
			cr_assert_leq(ps.pool_bytes, mem, "%llu bytes held",
				      (unsigned long long)ps.pool_bytes);
			pool_release(k.p, s);
		}
		pool_get_stats(k.p, &ps);
		cr_assert_eq(ps.read_errors, 0);
		if (fresh_only) {
			/* Two passes, fresh only: each sample exactly twice. */
			for (int i = 0; i < NSAMPLES; i++)
				cr_assert_eq(seen[i],
					     class_of[i] == POOL_NO_CLASS ? 0
									  : 2);
			cr_assert_geq(ps.pass, 2);
		} else {
			cr_assert_gt(ps.dropped, 0, "nothing was dropped");
		}
		stack_close(&k);
		fx_server_stop(&srv);
	}
}

/* ---- run-time control ---- */

Test(pool, set_echo_at_run_time)
{
	const char *faults[] = {"*.tar=slow:30000", NULL};
	struct pool_opts po = {.echo = 1, .window = 1, .seed = 2};
	unsigned uses[NSAMPLES] = {0};
	const struct echo_case fresh_only = {1.0, ECHO_ADAPTIVE};
	const struct echo_case three = {3.0, ECHO_GREEDY};
	struct pool_stats ps;
	enum echo_mode m;
	struct stack k;
	double e;

	stack_open(&k, faults, &po, NULL);
	read_fast(k.p, &fresh_only, 1, 6, uses);
	pool_get_stats(k.p, &ps);
	cr_assert_eq(ps.echoes_served, 0);
	cr_assert_eq(pool_set_echo(k.p, 0.5, ECHO_ADAPTIVE), -EINVAL);
	cr_assert_eq(pool_set_echo(k.p, NAN, ECHO_FIXED), -EINVAL);
	cr_assert_eq(pool_set_echo(k.p, 3.0, ECHO_GREEDY), 0);
	pool_get_echo(k.p, &e, &m);
	cr_assert_eq(e, 3.0);
	cr_assert_eq(m, ECHO_GREEDY);
	memset(uses, 0, sizeof(uses));
	read_fast(k.p, &three, 1, 24, uses);
	pool_get_stats(k.p, &ps);
	cr_assert_gt(ps.echoes_served, 0);
	cr_assert_leq(ps.effective_echo, 3.0 + 1e-9);
	cr_assert_eq(pool_set_echo(k.p, 2.0, ECHO_FIXED), 0);
	pool_get_echo(k.p, &e, &m);
	cr_assert_eq(m, ECHO_FIXED);
	stack_close(&k);
}

/* ---- waiting: timeouts, shutdown, bad arguments ---- */

Test(pool, take_times_out_and_counts_stall)
{
	/* The stall ends (and the streamer's read fails) only after 10 s,
	 * long after wait_s: a take woken by that failure instead of by its
	 * own deadline finds a read error counted below. */
	const char *faults[] = {"*.tar=stall:10", NULL};
	struct shards_opts so = {.read_timeout_s = 60};
	struct pool_opts po = {.echo = 2, .wait_s = 0.3};
	struct pool_sample *s = (void *)1;
	struct pool_stats ps;
	struct shards_stats ss;
	struct stack k;
	double t0;

	stack_open(&k, faults, &po, &so);
	cr_assert_eq(pool_take(k.p, NCLS, &s), -EINVAL);
	cr_assert_null(s);
	t0 = now_mono();
	cr_assert_eq(pool_take(k.p, 0, &s), -ETIMEDOUT);
	cr_assert_geq(now_mono() - t0, 0.29);
	shards_get_stats(k.sh, &ss);
	cr_assert_eq(ss.read_errors + ss.failed_shards, 0,
		     "the take ended by a failed read, not by wait_s");
	pool_get_stats(k.p, &ps);
	cr_assert_eq(ps.timeouts, 1);
	cr_assert_geq(ps.stall_s, 0.25);
	cr_assert_eq(ps.fresh_served, 0);
	stack_close(&k);
}

struct waiter {
	struct pool *p;
	uint32_t cls;
	int r;
	double done;
};

static void *wait_take(void *arg)
{
	struct waiter *w = arg;
	struct pool_sample *s = NULL;

	w->r = pool_take(w->p, w->cls, &s);
	w->done = now_mono();
	if (s)
		pool_release(w->p, s);
	return NULL;
}

Test(pool, free_wakes_waiting_readers_with_eshutdown)
{
	const char *faults[] = {"*.tar=stall:30", NULL};
	struct shards_opts so = {.read_timeout_s = 2};
	struct pool_opts po = {.echo = 1, .wait_s = 30};
	struct waiter w[3];
	pthread_t t[3];
	struct shards_stats ss;
	struct stack k;

	stack_open(&k, faults, &po, &so);
	for (int i = 0; i < 3; i++) {
		w[i] = (struct waiter){k.p, (uint32_t)i, 1, 0};
		pthread_create(&t[i], NULL, wait_take, &w[i]);
	}
	usleep(300000);
	pool_free(k.p);
	k.p = NULL;
	/* -ESHUTDOWN, not wait_s's -ETIMEDOUT: pool_free woke them. */
	for (int i = 0; i < 3; i++) {
		pthread_join(t[i], NULL);
		cr_assert_eq(w[i].r, -ESHUTDOWN, "reader %d: %d", i, w[i].r);
	}
	/* pool_free waits at most for the streamer's current read: one
	 * timed-out read, not a second one started after the stop. */
	shards_get_stats(k.sh, &ss);
	cr_assert_leq(ss.read_errors, 1, "the streamer read on after stop");
	stack_close(&k);
}

Test(pool, bad_arguments)
{
	struct pool_opts bad_echo = {.echo = 0.5};
	struct pool_opts bad_wait = {.echo = 1, .wait_s = -1};
	uint32_t bad_class[NSAMPLES];
	enum echo_mode m;
	struct stack k;

	stack_open(&k, NULL, NULL, NULL);
	struct pool *none = (struct pool *)&k;
	cr_assert_eq(pool_open(k.ix, k.sh, class_of, NCLS, &bad_echo, &none),
		     -EINVAL);
	cr_assert_null(none, "*out left set on failure");
	cr_assert_eq(pool_open(k.ix, k.sh, class_of, NCLS, &bad_wait, &none),
		     -EINVAL);
	cr_assert_eq(pool_open(k.ix, k.sh, class_of, 0, NULL, &none), -EINVAL);
	cr_assert_eq(pool_open(NULL, k.sh, class_of, NCLS, NULL, &none),
		     -EINVAL);
	memcpy(bad_class, class_of, sizeof(bad_class));
	bad_class[3] = NCLS;
	cr_assert_eq(pool_open(k.ix, k.sh, bad_class, NCLS, NULL, &none),
		     -EINVAL);
	cr_assert_null(none);
	cr_assert_eq(echo_mode_parse("fixed", &m), 0);
	cr_assert_eq(m, ECHO_FIXED);
	cr_assert_eq(echo_mode_parse("adaptive", &m), 0);
	cr_assert_eq(m, ECHO_ADAPTIVE);
	cr_assert_eq(echo_mode_parse("sometimes", &m), -EINVAL);
	cr_assert_str_eq(echo_mode_name(ECHO_FIXED), "fixed");
	cr_assert_str_eq(echo_mode_name(ECHO_ADAPTIVE), "adaptive");
	pool_free(NULL);
	stack_close(&k);
}

/* ---- failed shards ---- */

Test(pool, unreadable_shard_is_counted_and_skipped)
{
	const char *faults[] = {"/s1.tar=status:404", NULL};
	struct pool_opts po = {.echo = 1, .seed = 4, .wait_s = 10};
	struct pool_stats ps;
	unsigned rr = 0;
	struct stack k;

	stack_open(&k, faults, &po, NULL);
	for (int i = 0; i < NCLASSED - (PER_SHARD - 1); i++) {
		struct pool_sample *s = take_ready(k.p, &rr, NULL);
		cr_assert_neq(s->sample / PER_SHARD, 1, "served from s1");
		pool_release(k.p, s);
	}
	/* The streamer reads ahead: it reaches s1 within the pass. */
	for (int i = 0; i < 500; i++) {
		pool_get_stats(k.p, &ps);
		if (ps.read_errors >= PER_SHARD - 1)
			break;
		usleep(10000);
	}
	/* 15 a pass; the streamer may be passes ahead by now. */
	cr_assert_geq(ps.read_errors, PER_SHARD - 1);
	stack_close(&k);
}

/* ---- demand: a reader of one class only (issue 9) ---- */

/* mem_size holds about three samples: without giving back samples of the
 * classes nobody asks for, memory fills with classes 1 and 2 and a class-0
 * reader times out. */
Test(pool, class_only_reader_gets_every_sample_of_its_class)
{
	struct pool_opts po = {.echo = 1,
			       .mem_size = 40000,
			       .wait_s = 10,
			       .shuffle_buffer = 4,
			       .seed = 5};
	bool seen[NSAMPLES] = {0};
	struct pool_stats ps;
	struct stack k;

	stack_open(&k, NULL, &po, NULL);
	for (uint32_t i = 0; i < per_class[0]; i++) {
		struct pool_sample *s = take_ok(k.p, 0);
		cr_assert(!seen[s->sample], "sample %u served twice",
			  s->sample);
		seen[s->sample] = true;
		pool_release(k.p, s);
	}
	pool_get_stats(k.p, &ps);
	cr_assert_eq(ps.fresh_served, per_class[0]);
	cr_assert_eq(ps.timeouts, 0);
	cr_assert_gt(ps.given_back, 0, "nothing was given back");
	cr_assert_leq(ps.pool_bytes, 40000 + 22000);
	/* The other classes still get their owed samples, each once. */
	for (uint32_t c = 1; c < NCLS; c++)
		for (uint32_t i = 0; i < per_class[c]; i++) {
			struct pool_sample *s = take_ok(k.p, c);
			cr_assert(!seen[s->sample], "sample %u twice",
				  s->sample);
			seen[s->sample] = true;
			pool_release(k.p, s);
		}
	stack_close(&k);
}

/* ---- parked takes ---- */

struct parked_take {
	pthread_mutex_t lock;
	pthread_cond_t cond;
	int calls, err;
	struct pool_sample *s;
};

static void parked_init(struct parked_take *w)
{
	memset(w, 0, sizeof(*w));
	pthread_mutex_init(&w->lock, NULL);
	pthread_cond_init(&w->cond, NULL);
}

static void parked_done(void *ud, int err, struct pool_sample *s)
{
	struct parked_take *w = ud;

	pthread_mutex_lock(&w->lock);
	w->calls++;
	w->err = err;
	w->s = s;
	pthread_cond_broadcast(&w->cond);
	pthread_mutex_unlock(&w->lock);
}

/* Wait up to 20 s for the completion; returns the number of calls. */
static int parked_wait(struct parked_take *w)
{
	double end = now_mono() + 20;

	pthread_mutex_lock(&w->lock);
	while (w->calls == 0 && now_mono() < end) {
		pthread_mutex_unlock(&w->lock);
		usleep(10000);
		pthread_mutex_lock(&w->lock);
	}
	int n = w->calls;
	pthread_mutex_unlock(&w->lock);
	return n;
}

Test(pool, parked_take_is_answered_when_data_arrives)
{
	const char *faults[] = {"*.tar=stall:1,count=8", NULL};
	struct pool_opts po = {.echo = 1, .wait_s = 20};
	struct parked_take w;
	struct pool_sample *s = NULL;
	struct pool_stats ps;
	struct stack k;

	parked_init(&w);
	stack_open(&k, faults, &po, NULL);
	cr_assert_eq(pool_take_async(k.p, 0, &w, parked_done, &w, &s),
		     -EINPROGRESS);
	cr_assert_null(s);
	pool_get_stats(k.p, &ps);
	cr_assert_eq(ps.parked, 1);
	cr_assert_eq(parked_wait(&w), 1);
	cr_assert_eq(w.err, 0, "parked take: %s", strerror(-w.err));
	check_bytes(w.s, 0);
	pool_commit(k.p, w.s);
	pool_release(k.p, w.s);
	pool_get_stats(k.p, &ps);
	cr_assert_eq(ps.parked, 0);
	cr_assert_eq(ps.fresh_served, 1);
	cr_assert_gt(ps.stall_s, 0.5, "parked time not counted: %g",
		     ps.stall_s);
	cr_assert_eq(pool_cancel(k.p, &w), 0,
		     "answered takes cannot be cancelled");
	stack_close(&k);
}

Test(pool, parked_take_cancel_timeout_and_shutdown)
{
	/* As in take_times_out_and_counts_stall: no read can fail before the stall ends
	 * (10 s), so a parked take answered by a failed read shows one. */
	const char *faults[] = {"*.tar=stall:10", NULL};
	struct shards_opts so = {.read_timeout_s = 60};
	struct pool_opts po = {.echo = 2, .wait_s = 0.5};
	struct parked_take a, b, c;
	struct pool_sample *s = NULL;
	struct pool_stats ps;
	struct shards_stats ss;
	struct stack k;
	double t0;

	parked_init(&a);
	parked_init(&b);
	parked_init(&c);
	stack_open(&k, faults, &po, &so);
	cr_assert_eq(pool_take_async(k.p, 1, &a, parked_done, &a, &s),
		     -EINPROGRESS);
	cr_assert_eq(pool_cancel(k.p, &a), 1);
	cr_assert_eq(a.calls, 1, "cancel answers in the caller's thread");
	cr_assert_eq(a.err, -EINTR);
	cr_assert_eq(pool_cancel(k.p, &a), 0);

	t0 = now_mono();
	cr_assert_eq(pool_take_async(k.p, 2, &b, parked_done, &b, &s),
		     -EINPROGRESS);
	cr_assert_eq(parked_wait(&b), 1);
	cr_assert_eq(b.err, -ETIMEDOUT);
	cr_assert_geq(now_mono() - t0, 0.45);
	shards_get_stats(k.sh, &ss);
	cr_assert_eq(ss.read_errors + ss.failed_shards, 0,
		     "the parked take ended by a failed read, not by wait_s");
	pool_get_stats(k.p, &ps);
	cr_assert_eq(ps.timeouts, 1);
	cr_assert_eq(ps.parked, 0);

	cr_assert_eq(pool_take_async(k.p, 0, &c, parked_done, &c, &s),
		     -EINPROGRESS);
	pool_free(k.p);
	k.p = NULL;
	cr_assert_eq(c.calls, 1);
	cr_assert_eq(c.err, -ESHUTDOWN);
	stack_close(&k);
}

/* ---- interrupts of parked takes (pool_opts.interrupted) ----
 * The check runs under the pool lock right before a take parks: an
 * interrupt seen there answers -EINTR at once, and one arriving just after
 * the check finds the take parked (pool_cancel waits for the lock), so no
 * interrupt is lost and no take waits out its wait_s. */

static const void *interrupted_tag;
static struct pool *cancel_pool;
static pthread_t canceller;
static int canceller_started, cancel_result = -1;

static void *cancel_main(void *tag)
{
	cancel_result = pool_cancel(cancel_pool, tag);
	return NULL;
}

static int interrupt_now(const void *tag)
{
	return tag == interrupted_tag;
}

/* The INTERRUPT arrives right after the check: its handler (pool_cancel)
 * runs in another thread while this one goes on to park. */
static int interrupt_later(const void *tag)
{
	if (!canceller_started &&
	    pthread_create(&canceller, NULL, cancel_main, (void *)tag) == 0)
		canceller_started = 1;
	usleep(50000); /* the handler reaches the pool lock first */
	return 0;
}

Test(pool, interrupt_before_parking_answers_at_once)
{
	const char *faults[] = {"*.tar=stall:3", NULL};
	struct shards_opts so = {.read_timeout_s = 5};
	struct pool_opts po = {
		.echo = 2, .wait_s = 20, .interrupted = interrupt_now};
	struct parked_take a, b;
	struct pool_sample *s = NULL;
	struct pool_stats ps;
	struct stack k;

	parked_init(&a);
	parked_init(&b);
	stack_open(&k, faults, &po, &so);
	interrupted_tag = &a;
	cr_assert_eq(pool_take_async(k.p, 1, &a, parked_done, &a, &s), -EINTR);
	cr_assert_eq(a.calls, 0, "done runs only for parked takes");
	pool_get_stats(k.p, &ps);
	cr_assert_eq(ps.parked, 0);
	cr_assert_eq(pool_take_async(k.p, 1, &b, parked_done, &b, &s),
		     -EINPROGRESS, "takes nobody interrupted still park");
	cr_assert_eq(pool_cancel(k.p, &b), 1);
	cr_assert_eq(b.err, -EINTR);
	stack_close(&k);
}

Test(pool, interrupt_just_after_the_check_is_not_lost)
{
	const char *faults[] = {"*.tar=stall:3", NULL};
	struct shards_opts so = {.read_timeout_s = 5};
	struct pool_opts po = {
		.echo = 2, .wait_s = 20, .interrupted = interrupt_later};
	struct parked_take c;
	struct pool_sample *s = NULL;
	struct stack k;

	parked_init(&c);
	stack_open(&k, faults, &po, &so);
	cancel_pool = k.p;
	cr_assert_eq(pool_take_async(k.p, 1, &c, parked_done, &c, &s),
		     -EINPROGRESS);
	cr_assert(canceller_started, "the pool never asked about interrupts");
	pthread_join(canceller, NULL);
	cr_assert_eq(cancel_result, 1, "the interrupt missed the parked take");
	cr_assert_eq(parked_wait(&c), 1);
	/* -EINTR from the cancel above: a lost interrupt would have left the
	 * take to wait_s's timer (-ETIMEDOUT after 20 s). */
	cr_assert_eq(c.err, -EINTR);
	stack_close(&k);
}

/* ---- ingest workers ---- */

static _Atomic unsigned ingest_calls;

/* An ingest hook that keeps each sample's bytes XORed with 0x5A, slowly
 * enough that the queue between the streamer and the workers fills. */
static int xor_ingest(void *ud, uint32_t sample, const uint8_t *in, size_t len,
		      uint8_t **out, size_t *outlen)
{
	(void)ud;
	(void)sample;
	ingest_calls++;
	*out = malloc(len ? len : 1);
	cr_assert_not_null(*out);
	for (size_t i = 0; i < len; i++)
		(*out)[i] = in[i] ^ 0x5A;
	*outlen = len;
	nanosleep(&(struct timespec){0, 200000}, NULL);
	return 0;
}

/* The ingest workers (a common/workq) hand every sample of a pass in once,
 * through the hook; pool_free with samples still queued drops them (ASan
 * checks nothing leaks) and returns. */
Test(pool, ingest_workers_pass_every_sample_through_the_hook)
{
	struct pool_opts po = {.echo = 1,
			       .seed = 2,
			       .ingest = xor_ingest,
			       .ingest_threads = 3};
	unsigned seen[NSAMPLES] = {0};
	struct pool_stats ps;
	struct stack k;

	ingest_calls = 0;
	stack_open(&k, NULL, &po, NULL);
	for (uint32_t c = 0; c < NCLS; c++)
		for (uint32_t n = 0; n < per_class[c]; n++) {
			struct pool_sample *s = NULL;
			cr_assert_eq(pool_take(k.p, c, &s), 0);
			pool_commit(k.p, s);
			int sh = (int)(s->sample / PER_SHARD);
			int j = (int)(s->sample % PER_SHARD);
			cr_assert_eq(s->cls, c);
			cr_assert_eq(s->len, samples[sh][j].size);
			for (size_t i = 0; i < s->len; i++)
				cr_assert_eq(
					s->data[i] ^ 0x5A,
					shard_data[sh][samples[sh][j].off + i],
					"sample %u byte %zu", s->sample, i);
			seen[s->sample]++;
			pool_release(k.p, s);
		}
	for (int i = 0; i < NSAMPLES; i++)
		cr_assert_eq(seen[i], class_of[i] == POOL_NO_CLASS ? 0 : 1,
			     "sample %d served %u times", i, seen[i]);
	pool_get_stats(k.p, &ps);
	cr_assert_eq(ps.fresh_served, NCLASSED);
	cr_assert_eq(ps.rejected, 0);
	cr_assert_geq(ingest_calls, NCLASSED);
	stack_close(&k); /* pass 2 is streaming: samples queued and running */
}

/* Exact first (cache/dataset.h, dataset_echo_own): a serve of a path's own
 * sample outside the pool counts as fresh; a sample found bad there is
 * never streamed, and not counted again by the pool. Without pool_mark_bad
 * the bad sample would be served in the pass. */
Test(pool, own_serves_count_fresh_and_marked_bad_samples_are_skipped)
{
	struct pool_opts po = {.echo = 1, .seed = 4};
	unsigned seen[NSAMPLES] = {0};
	struct pool_stats ps;
	struct stack k;
	uint32_t bad = 0;

	while (class_of[bad] == POOL_NO_CLASS)
		bad++;
	stack_open(&k, NULL, &po, NULL);
	pool_count_own(k.p);
	pool_count_own(k.p);
	/* Marked before any take. The stream may have read it already (it
	 * starts at pool_open): then its one serve fails to decode and is
	 * discarded, as dataset_echo_discard does, without counting it a
	 * second time; otherwise it is never streamed. */
	pool_mark_bad(k.p, bad);
	for (uint32_t c = 0; c < NCLS; c++)
		for (uint32_t n = 0; n < per_class[c] - (c == class_of[bad]);
		     n++) {
			struct pool_sample *s = take_ok(k.p, c);
			if (seen[s->sample]++ == 0 && s->sample == bad)
				pool_discard(k.p, s);
			else
				pool_release(k.p, s);
		}
	cr_assert_leq(seen[bad], 1, "the marked sample was served again");
	pool_get_stats(k.p, &ps);
	cr_assert_eq(ps.own_served, 2);
	cr_assert_eq(ps.fresh_served, 2 + NCLASSED - 1);
	cr_assert_eq(ps.rejected, 0, "counted again by the pool");
	stack_close(&k);
}

/* An ingest hook that refuses every sample of class 2 (bad images) and
 * keeps the others as they are. */
static int reject_class_2(void *ud, uint32_t sample, const uint8_t *in,
			  size_t len, uint8_t **out, size_t *outlen)
{
	(void)ud;
	if (class_of[sample] == 2)
		return -EIO;
	*out = malloc(len ? len : 1);
	cr_assert_not_null(*out);
	memcpy(*out, in, len);
	*outlen = len;
	return 0;
}

/* A class whose every sample is bad has nothing any pass can give: its
 * takes, parked or blocking, fail with -EIO once its last sample is
 * refused, instead of waiting out wait_s (-ETIMEDOUT, here 60 s, longer
 * than parked_wait's 20); the other classes are served as before. */
Test(pool, a_class_of_bad_samples_fails_its_takes_with_eio)
{
	struct pool_opts po = {
		.echo = 2, .seed = 3, .wait_s = 60, .ingest = reject_class_2};
	struct parked_take w;
	struct pool_sample *s = NULL;
	struct pool_stats ps;
	struct stack k;
	double t0;
	int r;

	parked_init(&w);
	stack_open(&k, NULL, &po, NULL);
	r = pool_take_async(k.p, 2, &w, parked_done, &w, &s);
	if (r == -EINPROGRESS) {
		cr_assert_eq(parked_wait(&w), 1, "still parked after 20 s");
		r = w.err;
	}
	cr_assert_eq(r, -EIO, "parked take: %s", strerror(-r));
	t0 = now_mono();
	cr_assert_eq(pool_take(k.p, 2, &s), -EIO);
	cr_assert_lt(now_mono() - t0, 5.0, "the blocking take waited");
	s = take_ok(k.p, 0);
	pool_release(k.p, s);
	pool_get_stats(k.p, &ps);
	cr_assert_eq(ps.rejected, per_class[2]);
	cr_assert_eq(ps.timeouts, 0);
	cr_assert_eq(ps.parked, 0);
	stack_close(&k);
}
