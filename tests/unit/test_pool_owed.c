/* test_pool_owed.c - the echo pool's owed ledger and adaptive mixing
 * (cache/echo/owed.c, stream.c) on the real stack: a data set held whole
 * must not spin the streamer, and a decoder of fixed rate is kept busy with
 * fresh samples while first opens wait for one decode of their class. */
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

TestSuite(pool_owed, .init = pool_fx_setup, .fini = pool_fx_teardown,
	  .timeout = 120);

/* ---- a data set that fits in memory, every sample kept for its echoes */

#define BIG_N 12000
#define BIG_CLS 12

/* One shard of BIG_N 8-byte samples, class i % BIG_CLS, and its stack. */
static void big_open(struct stack *k, uint32_t *cls_of,
		     const struct pool_opts *po)
{
	struct tarw t = {0};
	uint64_t *off = xmalloc(BIG_N * sizeof(*off));
	char path[160], url[128], err[256];

	for (uint32_t i = 0; i < BIG_N; i++) {
		char name[32], data[8];
		snprintf(name, sizeof(name), "b_%05u.jpg", i);
		memset(data, (int)(i & 0xff), sizeof(data));
		off[i] = tarw_add(&t, name, data, sizeof(data));
		cls_of[i] = i % BIG_CLS;
	}
	tarw_end(&t);
	snprintf(path, sizeof(path), "%s/big.tar", root);
	fx_write_file(path, t.buf, t.len);
	fx_server_start(&srv, root, tdir, NULL);
	k->ix = index_new();
	snprintf(url, sizeof(url), "http://127.0.0.1:%d/big.tar", srv.port);
	index_add_shard(k->ix, url, t.len, "");
	for (uint32_t i = 0; i < BIG_N; i++) {
		char key[32], label[16];
		snprintf(key, sizeof(key), "b_%05u", i);
		snprintf(label, sizeof(label), "%u", i % BIG_CLS);
		cr_assert_eq(index_add_sample(k->ix, 0, off[i], 8, label, key,
					      "jpg"),
			     0);
	}
	free(off);
	tarw_free(&t);
	cr_assert_eq(store_open(cdir, 1ULL << 30, &k->st, err, sizeof(err)), 0);
	cr_assert_not_null(k->st, "store_open: %s", err);
	cr_assert_eq(shards_open(k->ix, h, k->st, NULL, &k->sh), 0);
	cr_assert_not_null(k->sh);
	cr_assert_eq(pool_open(k->ix, k->sh, cls_of, BIG_CLS, po, &k->p), 0);
}

/* Once pass 1 is in, serve every sample fresh (adaptive draws fresh
 * samples alongside echoes, so some echoes come too). */
static void big_serve_once(struct pool *p)
{
	struct pool_stats ps;

	for (int tries = 0; tries < 2000; tries++) {
		pool_get_stats(p, &ps);
		if (ps.fresh_in_pass == BIG_N)
			break;
		usleep(10000);
	}
	cr_assert_eq(ps.fresh_in_pass, BIG_N);
	for (uint32_t i = 0; i < 4 * BIG_N && ps.fresh_served < BIG_N; i++) {
		struct pool_sample *s = NULL;
		cr_assert_eq(pool_take(p, i % BIG_CLS, &s), 0);
		pool_commit(p, s);
		pool_release(p, s);
		pool_get_stats(p, &ps);
	}
	cr_assert_eq(ps.fresh_served, BIG_N, "%llu fresh served",
		     (unsigned long long)ps.fresh_served);
}

/* Serve the fresh samples ready (those a mixed draw left, read again by
 * the next pass after their echoes retired them), so that what is left is
 * the held data set, owed in the next pass. */
static void big_drain_fresh(struct pool *p)
{
	for (int tries = 0; tries < 4 * BIG_N; tries++) {
		uint64_t ready = 0;
		uint32_t c = 0;
		struct pool_sample *s = NULL;
		for (uint32_t i = 0; i < BIG_CLS; i++)
			if (pool_ready(p, i)) {
				ready += pool_ready(p, i);
				c = i;
			}
		if (ready == 0)
			return;
		cr_assert_eq(pool_take(p, c, &s), 0);
		pool_commit(p, s);
		pool_release(p, s);
	}
}

/* Issue 11 (a trainer on an echo mount got 0.6x the images of echo=1):
 * when the whole data set fits in memory, every sample is still held for
 * its echoes when the next pass walks it, so each one waits in its class's
 * owed line. The walk asked every class's line "is one readable now?" for
 * every sample by rotating the whole line (each held entry popped and owed
 * again): O(samples x owed) per walk under the pool lock, a core busy and
 * lookups waiting; and a walk that found nothing to read began the next at
 * once. Counted, not timed (a sanitizer build is slower, not busier): an
 * idle pool looks at no owed entry (before: the whole line per sample
 * walked, ~10^9 in these 2 s) and walks at most once per rest. */
Test(pool_owed, held_data_set_does_not_spin_the_streamer)
{
	/* The whole pass read ahead (the default paces the streamer to the
	 * readers), so that pass 1 is served mostly fresh and its samples
	 * stay held for their echoes. */
	struct pool_opts po = {.echo = 4,
			       .mode = ECHO_GREEDY,
			       .seed = 3,
			       .wait_s = 10,
			       .lookahead = BIG_N};
	uint32_t *cls_of = xmalloc(BIG_N * sizeof(*cls_of));
	struct pool_stats a, b;
	struct stack k;

	big_open(&k, cls_of, &po);
	big_serve_once(k.p);
	usleep(300000); /* the next pass starts: the samples are held */
	/* Adaptive mode mixes fresh samples with echoes: some samples used up
	 * their serves in the first pass and were read again as fresh; serve
	 * those, so that what is left is the held data set, idle. */
	big_drain_fresh(k.p);
	pool_get_stats(k.p, &a);
	usleep(2000000);
	pool_get_stats(k.p, &b);
	cr_assert_geq(b.pass, 2);
	/* About a fifth of the samples stay held at E=4 (the rest used their
	 * serves and were served fresh again); a few thousand owed entries
	 * are plenty for the old rotation's O(samples x owed) walk to show. */
	cr_assert_geq(a.owed, BIG_N / 8, "%llu owed: no held data set made",
		      (unsigned long long)a.owed);
	cr_assert_geq(b.owed, BIG_N / 8, "%llu owed at the end",
		      (unsigned long long)b.owed);
	/* Not quite idle under adaptive mode: samples that used their serves
	 * are still read again, and each such read looks past the held
	 * entries of its class's line, at most the whole line (BIG_N /
	 * BIG_CLS). How many are read in these 2 s depends on the machine's
	 * load (CI at load 4: 0.5-1 M looks; quiet: 16k-68k), so the bound
	 * counts looks per read again, not per 2 s. The spin this test guards
	 * against looked ~10^9 times with nothing read. 4: pops whose read
	 * had not finished when b was taken. */
	uint64_t looks = b.owed_looks - a.owed_looks;
	uint64_t rereads = b.reread - a.reread;
	cr_assert_leq(looks, (rereads + 4) * (BIG_N / BIG_CLS),
		      "pool looked at %llu owed entries for %llu reads in 2 s",
		      (unsigned long long)looks, (unsigned long long)rereads);
	cr_assert_leq(b.walks - a.walks, 45, "pool walked %llu times in 2 s",
		      (unsigned long long)(b.walks - a.walks));
	stack_close(&k);
	free(cls_of);
}

/* The same held data set under a steady reader (a trainer): each echo
 * retires a sample, whose owed copy is then re-read, so every walk re-read
 * something: a walk per retirement, each over 12,000 held samples. A walk
 * that streamed nothing new now rests (a waiting reader ends the rest),
 * and finding the readable entry looks only past the held ones before it
 * (before: ~1 s of CPU in 2 s; counted here: looks per take and walks). */
Test(pool_owed, steady_reader_of_held_data_set_does_not_spin_the_streamer)
{
	struct pool_opts po = {.echo = 2,
			       .mode = ECHO_GREEDY,
			       .seed = 4,
			       .wait_s = 10,
			       .lookahead = BIG_N};
	uint32_t *cls_of = xmalloc(BIG_N * sizeof(*cls_of));
	struct pool_stats a, b;
	struct stack k;
	double end;
	uint64_t takes = 0;

	big_open(&k, cls_of, &po);
	big_serve_once(k.p);
	usleep(300000);
	big_drain_fresh(k.p);
	pool_get_stats(k.p, &a);
	double t0 = now_mono();
	end = t0 + 2.0;
	/* At least 2 s, and on until something was re-read (a loaded
	 * machine may keep the streamer on its first walk past 2 s; 60 s:
	 * it never re-reads, a hang). */
	for (b = a; now_mono() < end || (b.reread == a.reread &&
					 now_mono() < t0 + 60);) {
		/* echoes: each one retires its sample */
		struct pool_sample *s = NULL;
		cr_assert_eq(pool_take(k.p, (uint32_t)(takes++ % BIG_CLS), &s),
			     0);
		pool_commit(k.p, s);
		pool_release(k.p, s);
		usleep(1000);
		if (takes % 64 == 0)
			pool_get_stats(k.p, &b);
	}
	double secs = now_mono() - t0;
	pool_get_stats(k.p, &b);
	uint64_t looks = b.owed_looks - a.owed_looks, walks = b.walks - a.walks;
	fprintf(stderr,
		"%llu takes in %.1f s: %llu re-read, %llu owed looks, "
		"%llu walks\n",
		(unsigned long long)takes, secs,
		(unsigned long long)(b.reread - a.reread),
		(unsigned long long)looks, (unsigned long long)walks);
	cr_assert_gt(b.reread, a.reread, "nothing was re-read in 60 s");
	cr_assert_leq(looks, takes * (BIG_N / BIG_CLS),
		      "%llu owed looks for %llu takes",
		      (unsigned long long)looks, (unsigned long long)takes);
	/* A walk that streamed nothing rests POOL_REST_S (50 ms): at most
	 * 20 a second, and 45 in 2 s as before (the spin walked once per
	 * take). */
	cr_assert_leq((double)walks, 22.5 * (secs > 2 ? secs : 2),
		      "%llu walks in %.1f s", (unsigned long long)walks, secs);
	stack_close(&k);
	free(cls_of);
}

/* ---- a stand-in decoder that makes at most what the test allows ---- */

/* The ingest hook waits for a token per sample (the test grants them: N per
 * "unit" is a decoder of fixed rate N, and no clock is involved), copies
 * the bytes and counts the sample's class. open: pool_free must not wait
 * for a hook that waits for a token. */
struct gate {
	pthread_mutex_t mu;
	pthread_cond_t cv;
	uint64_t tokens, decoded;
	const uint32_t *cls_of;
	uint64_t *per_cls;
	bool open;
};

static int gated_ingest(void *ud, uint32_t sample, const uint8_t *in,
			size_t len, uint8_t **out, size_t *outlen)
{
	struct gate *g = ud;

	pthread_mutex_lock(&g->mu);
	while (g->tokens == 0 && !g->open)
		pthread_cond_wait(&g->cv, &g->mu);
	if (g->tokens)
		g->tokens--;
	g->decoded++;
	g->per_cls[g->cls_of[sample]]++;
	pthread_cond_broadcast(&g->cv);
	pthread_mutex_unlock(&g->mu);
	*out = xmalloc(len ? len : 1);
	memcpy(*out, in, len);
	*outlen = len;
	return 0;
}

static void gate_init(struct gate *g, const uint32_t *cls_of, uint32_t ncls)
{
	memset(g, 0, sizeof(*g));
	pthread_mutex_init(&g->mu, NULL);
	pthread_cond_init(&g->cv, NULL);
	g->cls_of = cls_of;
	g->per_cls = xcalloc(ncls, sizeof(*g->per_cls));
}

static void gate_open(struct gate *g)
{
	pthread_mutex_lock(&g->mu);
	g->open = true;
	pthread_cond_broadcast(&g->cv);
	pthread_mutex_unlock(&g->mu);
}

static void gate_free(struct gate *g)
{
	pthread_cond_destroy(&g->cv);
	pthread_mutex_destroy(&g->mu);
	free(g->per_cls);
}

/* Grant n tokens and wait until the pool holds what they made: fresh
 * samples ready (buffer and policy) == decoded - fresh served. Polls (the
 * pool has no hook for "added"); the suite's timeout bounds a hang. */
static void gate_grant(struct gate *g, struct pool *p, uint32_t ncls,
		       uint64_t n)
{
	uint64_t want;

	pthread_mutex_lock(&g->mu);
	g->tokens += n;
	want = g->decoded + g->tokens;
	pthread_cond_broadcast(&g->cv);
	while (g->decoded < want)
		pthread_cond_wait(&g->cv, &g->mu);
	pthread_mutex_unlock(&g->mu);
	for (;;) {
		struct pool_stats ps;
		uint64_t ready = 0;
		for (uint32_t c = 0; c < ncls; c++)
			ready += pool_ready(p, c);
		pool_get_stats(p, &ps);
		if (ready + ps.fresh_served >= want)
			return;
		usleep(1000);
	}
}

static void never_done(void *ud, int err, struct pool_sample *s)
{
	(void)s;
	cr_assert_eq(err, -EINTR, "parked take answered with %d", err);
	(*(unsigned *)ud)++;
}

/* One open of class c that must not wait: true if answered now (served
 * and committed), false if it would park (it is then cancelled). */
static bool open_now(struct pool *p, uint32_t c, unsigned *cancelled)
{
	struct pool_sample *s = NULL;
	int tag = 0, r = pool_take_async(p, c, &tag, never_done, cancelled, &s);

	if (r == -EINPROGRESS) {
		cr_assert_eq(pool_cancel(p, &tag), 1);
		return false;
	}
	cr_assert_eq(r, 0, "take: %s", strerror(-r));
	cr_assert_eq(s->cls, c);
	pool_commit(p, s);
	pool_release(p, s);
	return true;
}

/* Issue 19: the first files of a mount waited for the pool: with the echo
 * window (16 opens of a class) nothing could be echoed until a class had
 * 17 served samples, so each of a decode-bound mount's first opens waited
 * for a decode (a real mount, echo=4: no echo before ~170 fresh serves,
 * both readers stalled most of the first 0.5 s). The bound: an open waits
 * for at most the first decoded sample of its class; from then on each
 * decoded sample answers E opens at once (the most echo=E allows: the
 * ratio served/fresh <= E). Counted, with the decoder held still: after 2
 * decodes, the class of the first must answer E x (its samples decoded)
 * opens without waiting. Old code: 1 or 2 (the fresh ones), then wait. */
Test(pool_owed, first_opens_wait_for_one_decode_of_their_class)
{
	struct gate g;
	struct pool_opts po = {.echo = 4,
			       .mode = ECHO_GREEDY,
			       .seed = 6,
			       .wait_s = 60,
			       .ingest = gated_ingest,
			       .ingest_ud = &g,
			       .ingest_threads = 1};
	struct stack k;
	unsigned answered = 0, cancelled = 0;
	uint32_t c = NCLS;

	gate_init(&g, class_of, NCLS);
	stack_open(&k, NULL, &po, NULL);
	gate_grant(&g, k.p, NCLS, 2);
	for (uint32_t i = 0; i < NCLS && c == NCLS; i++)
		if (g.per_cls[i])
			c = i;
	cr_assert_lt(c, NCLS);
	while (answered < 100 && open_now(k.p, c, &cancelled))
		answered++;
	cr_assert_eq(answered, 4 * g.per_cls[c],
		     "%u opens of class %u answered with %llu of its samples "
		     "decoded (E=4)",
		     answered, c, (unsigned long long)g.per_cls[c]);
	cr_assert_eq(cancelled, 1);
	gate_open(&g);
	stack_close(&k);
	gate_free(&g);
}

/* Wait until the gated decoder took every token granted, or made no
 * progress for 5 s (the pool stopped asking: back-pressure; the caller
 * counts decodes, this only ends the wait). Then until the pool holds
 * what was decoded. */
static void gate_settle(struct gate *g, struct pool *p, uint32_t ncls)
{
	uint64_t last = UINT64_MAX, decoded;
	double t0 = now_mono();

	for (;;) {
		pthread_mutex_lock(&g->mu);
		decoded = g->decoded;
		bool done = g->tokens == 0;
		pthread_mutex_unlock(&g->mu);
		if (done)
			break;
		if (decoded != last) {
			last = decoded;
			t0 = now_mono();
		} else if (now_mono() - t0 > 5.0) {
			break;
		}
		usleep(1000);
	}
	for (int i = 0; i < 5000; i++) {
		struct pool_stats ps;
		uint64_t ready = 0;
		for (uint32_t c = 0; c < ncls; c++)
			ready += pool_ready(p, c);
		pool_get_stats(p, &ps);
		if (ready + ps.fresh_served >= decoded)
			return;
		usleep(1000);
	}
}

struct rate_case {
	unsigned per_unit; /* samples the stand-in decodes per unit */
	unsigned opens;	   /* opens the readers make per unit */
	uint64_t mem_size; /* bytes (8 a sample) */
};

/* units of: grant per_unit decodes, wait for them, then `opens` opens of
 * random classes that must not wait (a parked one is cancelled). */
static void run_rate(const struct rate_case *rc, unsigned units,
		     uint64_t *decoded, uint64_t *fresh, uint64_t *served)
{
	struct gate g;
	uint32_t *cls_of = xmalloc(BIG_N * sizeof(*cls_of));
	struct pool_opts po = {.echo = 4,
			       .mode = ECHO_GREEDY,
			       .seed = 8,
			       .wait_s = 60,
			       .mem_size = rc->mem_size,
			       .ingest = gated_ingest,
			       .ingest_ud = &g,
			       .ingest_threads = 1};
	struct pool_stats ps;
	struct stack k;
	unsigned seed = 99, cancelled = 0;

	for (uint32_t i = 0; i < BIG_N; i++)
		cls_of[i] = i % BIG_CLS;
	gate_init(&g, cls_of, BIG_CLS);
	big_open(&k, cls_of, &po);
	*served = 0;
	for (unsigned u = 0; u < units; u++) {
		pthread_mutex_lock(&g.mu);
		g.tokens += rc->per_unit;
		pthread_cond_broadcast(&g.cv);
		pthread_mutex_unlock(&g.mu);
		gate_settle(&g, k.p, BIG_CLS);
		for (unsigned i = 0; i < rc->opens; i++)
			*served += open_now(k.p,
					    (uint32_t)(rand_r(&seed) % BIG_CLS),
					    &cancelled);
	}
	pool_get_stats(k.p, &ps);
	pthread_mutex_lock(&g.mu);
	*decoded = g.decoded;
	pthread_mutex_unlock(&g.mu);
	*fresh = ps.fresh_served;
	gate_open(&g);
	stack_close(&k);
	gate_free(&g);
	free(cls_of);
}

/* Issue 19: adaptive mode must never serve fresh samples slower than the
 * decoder makes them, nor echo when the decoder keeps up. A stand-in
 * decoder of fixed rate (tokens, no clock) against readers:
 *  - behind (readers open 3x what it decodes, E=4; memory for M = 256
 *    samples): the pool keeps the decoder busy, and every decoded sample
 *    is served fresh but for a backlog that does not grow with the run:
 *    the mixed draw keeps ceil(E) x backlog under the serves left of the
 *    candidates, at most (ceil(E) - 1) each, and backlog + candidates <= M,
 *    so backlog < M x 3/7 at E=4 (a policy that echoed whenever the ratio
 *    allowed would leave ~1/4 of the decoded samples unserved; one that
 *    held fresh samples until memory was full would stop the decoder);
 *  - keeps up (it decodes twice what readers open): 9 opens in 10 fresh
 *    (the start, before a class has a backlog, may echo a few). */
Test(pool_owed, adaptive_serves_fresh_as_fast_as_a_fixed_rate_decoder)
{
	const unsigned units = 60;
	const struct rate_case behind = {10, 30, 256 * 8};
	const struct rate_case ahead = {20, 10, 0};
	uint64_t decoded, fresh, served;

	run_rate(&behind, units, &decoded, &fresh, &served);
	fprintf(stderr, "behind: %llu decoded, %llu fresh, %llu served\n",
		(unsigned long long)decoded, (unsigned long long)fresh,
		(unsigned long long)served);
	cr_assert_geq(decoded, behind.per_unit * units,
		      "the decoder was held still: %llu of %u decoded",
		      (unsigned long long)decoded, behind.per_unit * units);
	cr_assert_geq(fresh + 256 * 3 / 7, decoded,
		      "%llu fresh served of %llu decoded",
		      (unsigned long long)fresh, (unsigned long long)decoded);
	run_rate(&ahead, units, &decoded, &fresh, &served);
	fprintf(stderr, "ahead: %llu decoded, %llu fresh, %llu served\n",
		(unsigned long long)decoded, (unsigned long long)fresh,
		(unsigned long long)served);
	cr_assert_eq(served, ahead.opens * units, "%llu opens answered",
		     (unsigned long long)served);
	cr_assert_geq(10 * fresh, 9 * served,
		      "%llu fresh of %llu served while the decoder kept up",
		      (unsigned long long)fresh, (unsigned long long)served);
}
