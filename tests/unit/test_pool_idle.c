/* test_pool_idle.c - the echo pool without demand and with bad samples
 * (issue 32, finding 4): a mount nobody reads does not walk its passes, a
 * sample whose ingest failed is tried and counted once, and the streamer
 * reads no further ahead than the readers take (issue 29). Counted, not
 * timed. */
#include "cache/echo/pool.h"

#include "common/util.h"
#include "pool_fx.h"

#include <criterion/criterion.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

TestSuite(pool_idle, .init = pool_fx_setup, .fini = pool_fx_teardown);

/* An ingest hook that refuses one sample (a JPEG whose entropy data is
 * garbage) and copies the others; it counts its calls per sample. */
struct refuse {
	uint32_t bad;
	unsigned calls[NSAMPLES];
};

static int refuse_one(void *ud, uint32_t sample, const uint8_t *in,
		      size_t len, uint8_t **out, size_t *outlen)
{
	struct refuse *r = ud;

	__atomic_add_fetch(&r->calls[sample], 1, __ATOMIC_RELAXED);
	if (sample == r->bad)
		return -EBADMSG;
	*out = malloc(len ? len : 1);
	memcpy(*out, in, len);
	*outlen = len;
	return 0;
}

/* Serve n opens spread over the classes. */
static void read_n(struct pool *p, unsigned n)
{
	for (unsigned i = 0; i < n; i++) {
		struct pool_sample *s = NULL;
		cr_assert_eq(pool_take(p, i % NCLS, &s), 0);
		pool_commit(p, s);
		pool_release(p, s);
	}
}

/* Before: every pass read and decoded the bad sample again, counted it and
 * logged it again (200 bad of 300: 5,278 errors in 2 s). */
Test(pool_idle, a_bad_sample_is_ingested_and_counted_once)
{
	struct refuse rf = {.bad = 1};
	struct pool_opts po = {.echo = 1,
			       .seed = 2,
			       .wait_s = 10,
			       .ingest = refuse_one,
			       .ingest_ud = &rf,
			       .ingest_threads = 1};
	struct pool_stats ps;
	struct stack k;

	cr_assert_neq(class_of[rf.bad], UINT32_MAX);
	stack_open(&k, NULL, &po, NULL);
	/* Five passes' worth of fresh serves (echo=1: each pass serves every
	 * classed sample but the bad one once). */
	read_n(k.p, 5 * (NCLASSED - 1));
	pool_get_stats(k.p, &ps);
	cr_assert_geq(ps.pass, 5, "only %llu passes",
		      (unsigned long long)ps.pass);
	cr_assert_eq(ps.rejected, 1, "the bad sample counted %llu times",
		     (unsigned long long)ps.rejected);
	cr_assert_eq(rf.calls[rf.bad], 1, "the bad sample ingested %u times",
		     rf.calls[rf.bad]);
	stack_close(&k);
}

/* Before: with no reader at all and one bad sample, the streamer walked
 * pass after pass, decoding the bad one each time (an echo mount of 300
 * samples ran ~20 passes a second for a minute). Now a walk starts only
 * when readers took something since the last one began. */
Test(pool_idle, no_walk_without_demand)
{
	struct refuse rf = {.bad = 1};
	struct pool_opts po = {.echo = 2,
			       .seed = 3,
			       .wait_s = 10,
			       .ingest = refuse_one,
			       .ingest_ud = &rf,
			       .ingest_threads = 1};
	struct pool_stats a, b;
	struct stack k;

	stack_open(&k, NULL, &po, NULL);
	read_n(k.p, 2 * NCLASSED); /* the first pass and its echoes */
	usleep(300000);
	pool_get_stats(k.p, &a);
	usleep(2000000); /* nobody reads */
	pool_get_stats(k.p, &b);
	cr_assert_leq(b.walks - a.walks, 1, "%llu walks in 2 s without a reader",
		      (unsigned long long)(b.walks - a.walks));
	cr_assert_leq(b.pass - a.pass, 1);
	/* Demand comes back: the pool serves again. */
	read_n(k.p, NCLASSED);
	stack_close(&k);
}

/* The streamer reads ahead no more than lookahead fresh samples the
 * readers have not taken (issue 29: it decoded the whole of mem_size
 * ahead at full speed, on the cores a CPU-bound trainer needed). */
Test(pool_idle, read_ahead_is_bounded_by_lookahead)
{
	struct pool_opts po = {.echo = 1,
			       .seed = 4,
			       .wait_s = 10,
			       .shuffle_buffer = 4,
			       .lookahead = 8};
	struct pool_stats ps;
	struct stack k;

	stack_open(&k, NULL, &po, NULL);
	/* Nobody reads: the stream fills up to lookahead (polled: an event,
	 * not a time bound). */
	for (int i = 0; i < 1000; i++) {
		pool_get_stats(k.p, &ps);
		if (ps.fresh_ready >= 8)
			break;
		usleep(10000);
	}
	usleep(300000); /* and stops there */
	pool_get_stats(k.p, &ps);
	cr_assert_geq(ps.fresh_ready, 8, "%llu ready",
		      (unsigned long long)ps.fresh_ready);
	/* A sample or two may be past the check when the limit is reached. */
	cr_assert_leq(ps.fresh_ready, 10, "%llu read ahead of the readers",
		      (unsigned long long)ps.fresh_ready);
	read_n(k.p, 20); /* and serves on once readers come */
	stack_close(&k);
}

/* Issue 29: a fresh-first pool (echo_stage=encoded) holds a small
 * dataset whole, so at every new pass each sample's old copy was still
 * held and its new one waited in line (an owed re-read, served only
 * after the old copy left): a trainer's fresh samples came at a fifth of
 * the first pass's rate. Now a new pass drops the served candidates
 * nobody holds and streams its samples as the first pass did. Before the
 * fix: 52 to 151 re-reads in four passes. */
Test(pool_idle, a_fresh_first_pool_streams_every_pass_afresh)
{
	struct pool_opts po = {.echo = 4,
			       .mode = ECHO_ADAPTIVE,
			       .seed = 5,
			       .wait_s = 10,
			       .shuffle_buffer = 4,
			       .lookahead = 8,
			       .fresh_first = true};
	struct pool_stats ps;
	struct stack k;

	stack_open(&k, NULL, &po, NULL);
	read_n(k.p, 4 * NCLASSED);
	pool_get_stats(k.p, &ps);
	cr_assert_geq(ps.pass, 3, "only %llu passes",
		      (unsigned long long)ps.pass);
	cr_assert_geq(ps.fresh_served, 3 * NCLASSED, "%llu fresh serves",
		      (unsigned long long)ps.fresh_served);
	cr_assert_eq(ps.reread, 0, "%llu samples waited in line",
		     (unsigned long long)ps.reread);
	stack_close(&k);
}

/* An ingest hook that fails one sample once for a reason not its own
 * (memory ran short: -EAGAIN, pool_opts.ingest) and copies the rest. */
static int fail_once(void *ud, uint32_t sample, const uint8_t *in,
		     size_t len, uint8_t **out, size_t *outlen)
{
	struct refuse *r = ud;

	if (__atomic_add_fetch(&r->calls[sample], 1, __ATOMIC_RELAXED) == 1 &&
	    sample == r->bad)
		return -EAGAIN;
	*out = malloc(len ? len : 1);
	memcpy(*out, in, len);
	*outlen = len;
	return 0;
}

/* Issue 50: a failure of the moment (ENOMEM, shutdown) at ingest marked
 * the sample bad for good: it left the pool and its class lost it. Now it
 * is skipped this pass, counted as a read error, and ingested again in a
 * later one. */
Test(pool_idle, a_transient_ingest_failure_is_no_bad_sample)
{
	struct refuse rf = {.bad = 1};
	struct pool_opts po = {.echo = 1,
			       .seed = 2,
			       .wait_s = 10,
			       .ingest = fail_once,
			       .ingest_ud = &rf,
			       .ingest_threads = 1};
	struct pool_stats ps;
	struct stack k;

	stack_open(&k, NULL, &po, NULL);
	read_n(k.p, 3 * (NCLASSED - 1));
	pool_get_stats(k.p, &ps);
	cr_assert_geq(ps.pass, 3, "only %llu passes",
		      (unsigned long long)ps.pass);
	cr_assert_eq(ps.rejected, 0, "counted as a bad image");
	cr_assert_geq(ps.read_errors, 1, "not counted at all");
	cr_assert_geq(rf.calls[rf.bad], 2, "never ingested again (%u calls)",
		      rf.calls[rf.bad]);
	stack_close(&k);
}
