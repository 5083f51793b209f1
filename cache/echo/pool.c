/* pool.c - the echo pool: streams samples from the shards into bounded
 * memory and hands them to readers fresh or echoed (see pool.h). This file
 * holds the entries, the shuffle buffer, memory and the readers' takes;
 * stream.c the streamer and ingest workers, owed.c the owed ledger,
 * parked.c the parked takes and their timer; pool_int.h the state they
 * share under p->lock.
 *
 * DESIGN
 * - Threads: one streamer thread (stream_main) reads samples; with an
 *   ingest hook, a common/workq of ingest_threads workers
 *   (stream_ingest_run) runs it on what was read (its bounded queue,
 *   POOL_IQ_PER_THREAD read samples per worker, is between them: the
 *   streamer waits for room in workq_submit); one timer thread
 *   (parked_timer_main) answers parked takes whose wait ran out. Readers
 *   call pool_take(_async) / pool_untake / pool_release / pool_cancel from
 *   any thread.
 * - Stream: each pass walks the shards in an order shuffled by the pool's
 *   seeded generator (a new order every pass, same seed -> same orders),
 *   only the shards with classed samples (a rank's part) or, with
 *   repartition (o.world > 1), the part of (seed, pass - 1) (choose_part),
 *   prefetching POOL_PREFETCH shards ahead and reading each classed sample
 *   with shards_read into its own buffer. A sample enters the shuffle buffer
 *   (default POOL_SHUFFLE_DEFAULT samples); once it is full each new sample
 *   pushes a random one out into the policy (its class's fresh queue). At
 *   the end of a pass (after the samples still being ingested are in) the
 *   buffer is flushed in random order, so pass N+1's samples never
 *   overtake pass N's: a pass serves each sample fresh once. A take of a
 *   class first moves the class's buffered samples into the policy, in
 *   random order, so the policy weighs every fresh sample ready.
 * - Demand: want[c] counts the readers waiting for class c (blocking or
 *   parked). While anyone waits and memory is full, the streamer gives
 *   back fresh samples of classes with want 0 (give_back_one: shuffle
 *   buffer first, then the policy's never-served samples), and does not
 *   read the unwanted samples it meets in the pass (they are given back
 *   unread). Given-back sample numbers wait in owed[c] and are marked in
 *   is_owed[]; before each pass sample the streamer re-reads owed samples
 *   of wanted classes (and of empty classes while there is room), which go
 *   straight to the policy. A later pass skips samples still owed. A
 *   line is in pass order (debt_pass[]): a copy given back after the next
 *   pass began goes before that pass's samples, and a sample owed for two
 *   passes keeps one place, the older, so a reader of one class sees each
 *   of its samples once before any twice.
 *   When the whole set is held for its echoes, every sample of a walk is
 *   owed: each line counts its readable entries (nfree) so the per-sample
 *   check costs O(1), and a walk that read nothing new rests POOL_REST_S
 *   before the next, so the streamer is not a busy loop (issue 11).
 * - Memory: pool_bytes counts the data of every sample held (in the buffer,
 *   in the policy, taken by readers, and those being read or ingested,
 *   reserved before the read at their raw size and corrected after the
 *   hook). A sample fully used (retired by the policy) is freed as soon as
 *   its last reader releases it. Past mem_size the streamer evicts the
 *   least useful idle echo candidate (echo_policy_evict; in fixed mode only
 *   while a reader is waiting, since dropping a sample with copies left
 *   lowers the mean below E), then gives back unwanted fresh samples while
 *   a reader waits; when nothing can go it waits on room_cv. A sample
 *   larger than mem_size is admitted only into an empty pool.
 * - Parked takes: struct waiter in the parked list (oldest first, which is
 *   deadline order since wait_s is fixed). Whenever a sample of class c may
 *   have become takeable (pool_notify), parked takes of c are served in
 *   order under the lock and moved to the done list; pool_unlock runs their
 *   callbacks after dropping the lock.
 * - Locking: p->lock guards everything below it in struct pool, the policy
 *   and every entry's refs/attached/buffered fields. It is never held
 *   across shards_read, shards_prefetch, the ingest hook or a done
 *   callback. Condition variables (all on CLOCK_MONOTONIC): cls_cv[c]
 *   (blocking takes of class c), room_cv (memory freed, a reader started
 *   waiting, or stop), iq_cv (ingesting dropped), timer_cv (a take was
 *   parked), idle_cv (the last caller left pool_take during pool_free).
 * - Shutdown: pool_free sets stop, answers parked takes with -ESHUTDOWN,
 *   wakes everyone (blocking readers return -ESHUTDOWN at once), waits for
 *   callers to leave pool_take, shuts the ingest workq down (queued samples
 *   dropped by stream_ingest_cancel, a streamer waiting for room gets
 *   -ESHUTDOWN), then joins the threads; the streamer may first finish the
 *   shards_read it is in. Lock order: p->lock is never held while calling
 *   into the workq, whose callbacks take p->lock themselves.
 */
#include "cache/echo/pool_int.h"

#include "cache/store/shards.h"
#include "common/lockcheck.h"
#include "common/util.h"
#include "fetch/format/index.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

/* ---- entries (p->lock held) ---- */

void pool_entry_free(struct pool *p, struct entry *e)
{
	ASSERT_HELD(&p->lock);
	if (p->held[e->sample] && p->held[e->sample] < UINT8_MAX &&
	    --p->held[e->sample] == 0 && p->in_line[e->sample])
		p->owed[e->cls].nfree++;
	if (e->prev)
		e->prev->next = e->next;
	else
		p->all = e->next;
	if (e->next)
		e->next->prev = e->prev;
	p->bytes -= e->len;
	p->samples--;
	free(e->data);
	free(e);
}

/* Drop a reader's hold; an unheld retired sample is freed. */
static void put_entry(struct pool *p, struct entry *e)
{
	if (--e->refs > 0)
		return;
	if (!e->attached && !e->buffered)
		pool_entry_free(p, e);
	pthread_cond_signal(&p->room_cv);
}

/* Into the policy: fresh, or, for a sample its own path serves (exact
 * first, pool_claim_own), as an echo candidate already served once; kept
 * out (and freed when nobody holds it) when E allows no echo of it. */
static void policy_join(struct pool *p, struct entry *e)
{
	ASSERT_HELD(&p->lock);
	if (!p->own[e->sample]) {
		IGNORE_RESULT(echo_policy_add(p->ep, &e->it, e->cls)); /* cls < ncls */
		e->attached = true;
	} else if (echo_policy_add_served(p->ep, &e->it, e->cls) == 0) {
		e->attached = true;
	} else {
		e->attached = false;
		if (e->refs == 0 && !e->buffered)
			pool_entry_free(p, e);
	}
}

void pool_attach(struct pool *p, struct entry *e)
{
	uint32_t cls = e->cls; /* e may be freed */

	policy_join(p, e);
	pool_notify(p, cls);
}

/* From the shuffle buffer (slot j) into the policy. */
static void unbuffer(struct pool *p, unsigned j)
{
	struct entry *e = p->shuf[j];

	p->shuf[j] = p->shuf[--p->nshuf];
	e->buffered = false;
	p->shuf_count[e->cls]--;
	pool_attach(p, e);
}

void pool_buffer_push(struct pool *p, struct entry *e)
{
	if (p->nshuf == p->o.shuffle_buffer)
		unbuffer(p, (unsigned)echo_rng_below(&p->rng, p->nshuf));
	e->buffered = true;
	p->shuf[p->nshuf++] = e;
	p->shuf_count[e->cls]++;
	pool_notify(p, e->cls);
}

void pool_buffer_flush(struct pool *p)
{
	while (p->nshuf)
		unbuffer(p, (unsigned)echo_rng_below(&p->rng, p->nshuf));
}

/* Every buffered sample of class cls leaves the buffer early, in random
 * order, into the policy: a take weighs the class's fresh samples against
 * its echoes (policy.h), and samples hidden in the buffer would make a
 * decoder that keeps up look behind (issue 19: with the buffer unseen,
 * adaptive mode served 219 fresh of 600 opens while the decoder made
 * twice what readers asked). */
static void buffer_pull(struct pool *p, uint32_t cls)
{
	uint64_t n = p->shuf_count[cls], k = 0;
	struct entry **out;

	if (n == 0)
		return;
	out = xmalloc(n * sizeof(*out));
	for (unsigned j = 0; j < p->nshuf;) {
		struct entry *e = p->shuf[j];
		if (e->cls != cls) {
			j++;
			continue;
		}
		p->shuf[j] = p->shuf[--p->nshuf];
		e->buffered = false;
		out[k++] = e;
	}
	p->shuf_count[cls] = 0;
	for (uint64_t i = k; i > 1; i--) { /* the buffer's random order */
		uint64_t j = echo_rng_below(&p->rng, i);
		struct entry *t = out[i - 1];
		out[i - 1] = out[j];
		out[j] = t;
	}
	for (uint64_t i = 0; i < k; i++)
		policy_join(p, out[i]);
	free(out);
}

static bool idle_entry(struct echo_item *it, void *ud)
{
	(void)ud;
	return ((struct entry *)it)->refs == 0;
}

/* Evict one idle echo candidate. */
static bool evict_one(struct pool *p)
{
	enum echo_mode mode;
	struct echo_item *it;
	struct entry *e;

	echo_policy_get(p->ep, NULL, &mode);
	if (mode == ECHO_FIXED && p->waiters == 0)
		return false;
	it = echo_policy_evict(p->ep, idle_entry, NULL);
	if (!it)
		return false;
	e = (struct entry *)it;
	e->attached = false;
	p->dropped++;
	pool_entry_free(p, e);
	return true;
}

/* Give back one fresh sample of a class nobody waits for: from the
 * shuffle buffer, else the class with the most never-served samples. */
static bool give_back_one(struct pool *p)
{
	uint32_t best = POOL_NO_CLASS;
	uint64_t most = 0;
	struct entry *e;

	for (unsigned j = 0; j < p->nshuf; j++) {
		e = p->shuf[j];
		if (p->want[e->cls])
			continue;
		p->shuf[j] = p->shuf[--p->nshuf];
		e->buffered = false;
		p->shuf_count[e->cls]--;
		goto drop;
	}
	for (uint32_t c = 0; c < p->ncls; c++) {
		uint64_t n = echo_policy_ready(p->ep, c);
		if (!p->want[c] && n > most) {
			most = n;
			best = c;
		}
	}
	if (best == POOL_NO_CLASS)
		return false;
	e = (struct entry *)echo_policy_give_back(p->ep, best);
	if (!e)
		return false;
	e->attached = false;
drop:
	if (p->in_line[e->sample])
		/* Its next pass already waits in line (deferred while this
		 * copy was held): one debt, served once (as a pass skips a
		 * sample still owed from an earlier one), kept in line at
		 * the older pass's place. */
		owed_line_remove(p, e->sample, e->cls);
	owed_add(p, e->sample, e->cls, true, e->pass);
	pool_entry_free(p, e);
	return true;
}

/* Wait until len more bytes fit under mem_size (or the pool is empty). */
int pool_make_room(struct pool *p, uint64_t len)
{
	while (!p->stop) {
		if (p->bytes == 0 || p->bytes + len <= p->o.mem_size)
			return 0;
		if (evict_one(p))
			continue;
		if (p->waiters && give_back_one(p))
			continue;
		pthread_cond_wait(&p->room_cv, &p->lock);
	}
	return -ESHUTDOWN;
}

/* ---- set-up ---- */

static int settle_opts(struct pool_opts *o, const struct pool_opts *in)
{
	*o = in ? *in : (struct pool_opts){0};
	if (o->echo == 0)
		o->echo = 1;
	if (o->window == 0)
		o->window = ECHO_WINDOW_AUTO;
	if (o->mem_size == 0)
		o->mem_size = POOL_MEM_DEFAULT;
	if (o->shuffle_buffer == 0)
		o->shuffle_buffer = POOL_SHUFFLE_DEFAULT;
	if (o->shuffle_buffer > POOL_SHUFFLE_MAX)
		o->shuffle_buffer = POOL_SHUFFLE_MAX;
	if (o->wait_s == 0)
		o->wait_s = POOL_WAIT_DEFAULT;
	if (o->world > 1 && o->rank >= o->world)
		return -EINVAL;
	if (o->ingest_threads > POOL_INGEST_MAX)
		o->ingest_threads = POOL_INGEST_MAX;
	if (!isfinite(o->wait_s) || o->wait_s < 0 || o->wait_s > 1e7)
		return -EINVAL;
	return 0;
}

/* Copy class_of and group the classed units by shard (counting sort,
 * index order kept within a shard). */
static int group_samples(struct pool *p, const uint32_t *class_of)
{
	const struct index *ix = p->ix;
	const struct index_sample *u = p->units;
	size_t n = p->nunits;
	uint32_t *fill;

	if (n >= UINT32_MAX || ix->nshards >= UINT32_MAX)
		return -EINVAL;
	p->class_of = xmalloc((n + 1) * sizeof(uint32_t));
	p->is_owed = xcalloc(n + 1, 1);
	p->in_line = xcalloc(n + 1, 1);
	p->debt_pass = xcalloc(n + 1, sizeof(uint32_t));
	p->held = xcalloc(n + 1, 1);
	p->bad = xcalloc(n + 1, 1);
	p->class_good = xcalloc(p->ncls + 1, sizeof(uint32_t));
	p->own = xcalloc(n + 1, 1);
	p->taken = xcalloc(n + 1, 1);
	p->shard_first = xcalloc(ix->nshards + 1, sizeof(uint32_t));
	p->by_shard = xmalloc((n + 1) * sizeof(uint32_t));
	p->order = xmalloc((ix->nshards + 1) * sizeof(uint32_t));
	for (size_t i = 0; i < n; i++) {
		uint32_t c = class_of[i];
		if (c != POOL_NO_CLASS && c >= p->ncls)
			return -EINVAL;
		if (u[i].shard >= ix->nshards)
			return -EINVAL;
		p->class_of[i] = c;
		if (c != POOL_NO_CLASS) {
			p->class_good[c]++;
			p->shard_first[u[i].shard + 1]++;
		}
	}
	for (size_t s = 0; s < ix->nshards; s++) {
		p->shard_first[s + 1] += p->shard_first[s];
		p->order[s] = (uint32_t)s;
	}
	p->norder = ix->nshards;
	if (p->o.world > 1) { /* the partition weighs every sample */
		p->counts = xcalloc(ix->nshards + 1, sizeof(*p->counts));
		for (size_t i = 0; i < n; i++)
			p->counts[u[i].shard]++;
	}
	fill = xmalloc((ix->nshards + 1) * sizeof(uint32_t));
	memcpy(fill, p->shard_first, ix->nshards * sizeof(uint32_t));
	for (size_t i = 0; i < n; i++)
		if (class_of[i] != POOL_NO_CLASS)
			p->by_shard[fill[u[i].shard]++] = (uint32_t)i;
	free(fill);
	return 0;
}

/* The condition variables, in the order destroy_sync undoes them:
 * room_cv, idle_cv, iq_cv, timer_cv, then cls_cv[]. All on
 * CLOCK_MONOTONIC through common/deadline (the pool's own condattr code
 * ignored a failing pthread_condattr_setclock: issue 20). 0 or -errno;
 * p->ncond says how many were made. */
static int init_sync(struct pool *p)
{
	pthread_cond_t *fixed[] = {&p->room_cv, &p->idle_cv, &p->iq_cv,
				   &p->timer_cv};
	int r;

	p->cls_cv = xcalloc(p->ncls, sizeof(*p->cls_cv));
	for (size_t i = 0; i < ARRAY_SIZE(fixed); i++, p->ncond++)
		if ((r = cond_init_monotonic(fixed[i])) < 0)
			return r;
	for (uint32_t c = 0; c < p->ncls; c++, p->ncond++)
		if ((r = cond_init_monotonic(&p->cls_cv[c])) < 0)
			return r;
	return 0;
}

static void destroy_sync(struct pool *p)
{
	pthread_cond_t *fixed[] = {&p->room_cv, &p->idle_cv, &p->iq_cv,
				   &p->timer_cv};

	for (size_t i = 0; i < p->ncond; i++)
		pthread_cond_destroy(
			i < ARRAY_SIZE(fixed)
				? fixed[i]
				: &p->cls_cv[i - ARRAY_SIZE(fixed)]);
}

static void destroy(struct pool *p)
{
	pthread_mutex_lock(&p->lock); /* no thread left: for the checks */
	while (p->all)
		pool_entry_free(p, p->all);
	pthread_mutex_unlock(&p->lock);
	workq_free(p->iwq); /* shut down by pool_free: nothing queued */
	destroy_sync(p);
	pthread_mutex_destroy(&p->lock);
	echo_policy_free(p->ep);
	for (uint32_t c = 0; p->owed && c < p->ncls; c++)
		free(p->owed[c].v);
	free(p->owed);
	free(p->want);
	free(p->cls_cv);
	free(p->shuf);
	free(p->shuf_count);
	free(p->class_of);
	free(p->is_owed);
	free(p->in_line);
	free(p->debt_pass);
	free(p->held);
	free(p->bad);
	free(p->class_good);
	free(p->own);
	free(p->taken);
	echo_gov_free(p->gov);
	free(p->by_shard);
	free(p->shard_first);
	free(p->order);
	free(p->counts);
	free(p);
}

/* The streamer, the timer and the ingest threads. 0 or -errno. */
static int start_threads(struct pool *p)
{
	int r;

	/* The workers first: the streamer submits to them from its start. */
	if (p->o.ingest && p->o.ingest_threads) {
		r = workq_open(
			&(struct workq_opts){
				.threads = p->o.ingest_threads,
				.cap = (size_t)p->o.ingest_threads *
				       POOL_IQ_PER_THREAD,
				.run = stream_ingest_run,
				.cancel = stream_ingest_cancel,
				.ctx = p},
			&p->iwq);
		if (r < 0)
			return r;
	}
	r = -pthread_create(&p->thread, NULL, stream_main, p);
	if (r < 0)
		return r;
	p->started = true;
	r = -pthread_create(&p->timer, NULL, parked_timer_main, p);
	if (r < 0)
		return r;
	p->timer_started = true;
	return 0;
}

static void alloc_state(struct pool *p)
{
	p->shuf = xcalloc(p->o.shuffle_buffer, sizeof(*p->shuf));
	p->shuf_count = xcalloc(p->ncls, sizeof(*p->shuf_count));
	p->want = xcalloc(p->ncls, sizeof(*p->want));
	p->owed = xcalloc(p->ncls, sizeof(*p->owed));
}

/* The adaptive mode's governor for E (p->lock held, or before the pool's
 * threads start): made, restarted at factor 1, or dropped in the other
 * modes; the policy's cap follows it. 0 or -EINVAL. */
static int govern(struct pool *p)
{
	double echo;
	enum echo_mode mode;

	echo_policy_get(p->ep, &echo, &mode);
	if (mode != ECHO_ADAPTIVE || echo <= 1.0) {
		echo_gov_free(p->gov);
		p->gov = NULL;
		return 0; /* echo_policy_set put the cap at E */
	}
	if (p->gov) {
		if (echo_gov_set_top(p->gov, echo, now_mono()) != 0)
			return -EINVAL;
	} else if (echo_gov_open(&(struct echo_gov_opts){.echo = echo},
				 now_mono(), &p->gov) != 0) {
		return -EINVAL;
	}
	return echo_policy_set_cap(p->ep, echo_gov_factor(p->gov));
}

int pool_open(const struct index *ix, struct shards *sh,
	      const uint32_t *class_of, uint32_t nclasses,
	      const struct pool_opts *o, struct pool **out)
{
	struct pool *p;
	struct echo_policy_opts eo;
	int r;

	*out = NULL;
	if (!ix || !sh || !class_of || nclasses == 0 ||
	    nclasses == POOL_NO_CLASS)
		return -EINVAL;
	p = xcalloc(1, sizeof(*p));
	pthread_mutex_init(&p->lock, NULL);
	p->ix = ix;
	p->units = o && o->members ? ix->members : ix->samples;
	p->nunits = o && o->members ? ix->nmembers : ix->nsamples;
	p->sh = sh;
	p->ncls = nclasses;
	r = settle_opts(&p->o, o);
	if (r == 0)
		r = group_samples(p, class_of);
	eo = (struct echo_policy_opts){p->o.echo, p->o.mode, p->o.window,
				       p->o.seed, p->o.fresh_first};
	if (r == 0)
		r = echo_policy_open(nclasses, &eo, &p->ep);
	if (r == 0)
		r = govern(p);
	if (r < 0)
		goto fail;
	/* The stream's draws come from another sequence than the policy's. */
	echo_rng_seed(&p->rng, p->o.seed ^ 0x5eed5eed5eed5eedULL);
	alloc_state(p);
	r = init_sync(p);
	if (r < 0)
		goto fail;
	pthread_mutex_lock(&p->lock);
	stream_begin_pass(p);
	pthread_mutex_unlock(&p->lock);
	r = start_threads(p);
	if (r < 0) {
		pool_free(p);
		return r;
	}
	*out = p;
	return 0;
fail:
	destroy(p);
	return r;
}

void pool_stop(struct pool *p)
{
	if (!p)
		return;
	pthread_mutex_lock(&p->lock);
	p->stop = true;
	for (uint32_t c = 0; c < p->ncls; c++)
		pthread_cond_broadcast(&p->cls_cv[c]);
	pthread_cond_broadcast(&p->room_cv);
	pthread_mutex_unlock(&p->lock);
}

void pool_free(struct pool *p)
{
	if (!p)
		return;
	pool_cancel_all(p);
	pthread_mutex_lock(&p->lock);
	p->stop = true;
	for (uint32_t c = 0; c < p->ncls; c++)
		pthread_cond_broadcast(&p->cls_cv[c]);
	pthread_cond_broadcast(&p->room_cv);
	pthread_cond_broadcast(&p->iq_cv);
	pthread_cond_broadcast(&p->timer_cv);
	while (p->active)
		pthread_cond_wait(&p->idle_cv, &p->lock);
	pthread_mutex_unlock(&p->lock);
	if (p->iwq)
		workq_shutdown(p->iwq, WORKQ_CANCEL);
	if (p->started)
		pthread_join(p->thread, NULL);
	if (p->timer_started)
		pthread_join(p->timer, NULL);
	pool_cancel_all(p); /* parked after the first call */
	destroy(p);
}

/* ---- readers ---- */

/* Wait for class cls until dl, counting stall time. True on timeout. */
static bool wait_class(struct pool *p, uint32_t cls, const struct deadline *dl)
{
	double t0 = now_mono();
	int r;

	p->waiters++;
	p->want[cls]++;
	pthread_cond_signal(&p->room_cv); /* memory may be given back now */
	r = cond_wait_until(&p->cls_cv[cls], &p->lock, dl);
	p->waiters--;
	p->want[cls]--;
	p->stall_s += now_mono() - t0;
	return r == -ETIMEDOUT;
}

/* One take of class cls if one is possible now (p->lock held). */
int pool_try_take(struct pool *p, uint32_t cls, struct echo_take *t)
{
	ASSERT_HELD(&p->lock);
	int r;

	if (p->class_good[cls] == 0)
		return -EIO; /* no pass will give one */
	buffer_pull(p, cls);
	while ((r = echo_policy_take(p->ep, cls, t)) == 0 && t->fresh) {
		struct entry *e = (struct entry *)t->item;
		if (!p->own[e->sample])
			break;
		/* Streamed before its own path claimed it (pool_claim_own):
		 * that path serves it fresh, the pool may only echo it. */
		echo_policy_discard(p->ep, t);
		policy_join(p, e); /* sets e->attached */
	}
	if (r == 0 && t->fresh) {
		p->taken[((struct entry *)t->item)->sample] = pass_tag(p->pass);
		p->takes++;
		p->takes_in_pass++;
		if (p->pacing) /* the streamer waits for readers to take */
			pthread_cond_signal(&p->room_cv);
	}
	return r;
}

static int take_locked(struct pool *p, uint32_t cls, struct echo_take *t)
{
	struct deadline dl = deadline_in(p->o.wait_s);
	bool late = false;

	for (;;) {
		int r;
		if (p->stop)
			return -ESHUTDOWN;
		r = pool_try_take(p, cls, t);
		if (r != -EAGAIN)
			return r;
		if (late) {
			p->timeouts++;
			return -ETIMEDOUT;
		}
		late = wait_class(p, cls, &dl);
	}
}

struct pool_sample *pool_hand_out(struct pool *p, struct echo_take *t)
{
	struct entry *e = (struct entry *)t->item;
	struct ref *rf = xmalloc(sizeof(*rf));

	e->refs++;
	if (t->retired)
		e->attached = false;
	rf->pub = (struct pool_sample){.sample = e->sample + p->o.number_base,
				       .cls = e->cls,
				       .data = e->data,
				       .len = e->len};
	rf->e = e;
	rf->t = *t;
	rf->committed = false;
	rf->ended = false;
	rf->lead = rf;
	rf->shares = 1;
	return &rf->pub;
}

int pool_take(struct pool *p, uint32_t cls, struct pool_sample **out)
{
	struct echo_take t;
	int r;

	if (!p || !out)
		return -EINVAL;
	*out = NULL;
	if (cls >= p->ncls)
		return -EINVAL;
	pthread_mutex_lock(&p->lock);
	p->active++;
	r = take_locked(p, cls, &t);
	if (r == 0) {
		*out = pool_hand_out(p, &t);
		/* The class tick moved: a waiting echo may be allowed now. */
		if (p->waiters)
			pool_notify(p, cls);
	}
	if (--p->active == 0 && p->stop)
		pthread_cond_broadcast(&p->idle_cv);
	pool_unlock(p);
	return r;
}

int pool_take_async(struct pool *p, uint32_t cls, const void *tag,
		    pool_done_fn done, void *ud, struct pool_sample **out)
{
	struct echo_take t;
	int r;

	if (!p || !out || !done || !tag)
		return -EINVAL;
	*out = NULL;
	if (cls >= p->ncls)
		return -EINVAL;
	pthread_mutex_lock(&p->lock);
	r = p->stop ? -ESHUTDOWN : pool_try_take(p, cls, &t);
	if (r == 0) {
		*out = pool_hand_out(p, &t);
		if (p->waiters)
			pool_notify(p, cls);
	} else if (r == -EAGAIN && p->o.interrupted && p->o.interrupted(tag)) {
		r = -EINTR; /* checked under the lock: see pool_opts */
	} else if (r == -EAGAIN) {
		parked_add(p, cls, tag, done, ud);
		r = -EINPROGRESS;
	}
	pool_unlock(p);
	return r;
}

/* An echo served age opens of its class after its last serve. */
static void count_echo(struct pool *p, uint64_t age)
{
	unsigned b = 0;

	p->served_echo++;
	while (b + 1 < POOL_AGE_BUCKETS && age >> (b + 1))
		b++;
	p->echo_age[b]++;
}

/* A committed serve through the governor; a new factor becomes the
 * policy's cap, and parked takes may be served echoes now. */
static void tick_governor(struct pool *p, bool fresh)
{
	struct echo_policy_stats ps;

	echo_policy_get_stats(p->ep, &ps);
	echo_gov_serve(p->gov, fresh);
	echo_gov_backlog(p->gov, ps.ready + p->nshuf);
	if (!echo_gov_tick(p->gov, now_mono()))
		return;
	IGNORE_RESULT(echo_policy_set_cap(p->ep, echo_gov_factor(p->gov))); /* >= 1 */
	for (uint32_t c = 0; p->nparked && c < p->ncls; c++)
		pool_notify(p, c);
}

void pool_commit(struct pool *p, struct pool_sample *s)
{
	struct ref *rf = (struct ref *)s;
	struct ref *lead;

	if (!p || !s)
		return;
	pthread_mutex_lock(&p->lock);
	lead = rf->lead;
	if (!lead->committed && !lead->ended) {
		lead->committed = true;
		if (lead->t.fresh)
			p->served_fresh++;
		else
			count_echo(p, lead->t.tick - lead->t.prev_tick);
		if (p->gov)
			tick_governor(p, lead->t.fresh);
	}
	pool_unlock(p);
}

struct pool_sample *pool_share(struct pool *p, struct pool_sample *s)
{
	struct ref *rf = (struct ref *)s;
	struct ref *nr = xmalloc(sizeof(*nr));

	pthread_mutex_lock(&p->lock);
	*nr = *rf;
	nr->lead = rf->lead;
	nr->lead->shares++;
	rf->e->refs++;
	pthread_mutex_unlock(&p->lock);
	return &nr->pub;
}

/* Let go of ref rf (p->lock held): its entry's reference, the ref, and
 * with the take's last ref its lead. */
static void drop_ref(struct pool *p, struct ref *rf)
{
	ASSERT_HELD(&p->lock);
	struct ref *lead = rf->lead;

	put_entry(p, rf->e);
	if (rf != lead)
		free(rf);
	if (--lead->shares == 0)
		free(lead);
}

void pool_mark_bad(struct pool *p, uint32_t sample)
{
	if (!p)
		return;
	pthread_mutex_lock(&p->lock);
	if (sample < p->nunits && !p->bad[sample])
		pool_set_bad(p, sample, 2);
	pool_unlock(p);
}

void pool_set_bad(struct pool *p, uint32_t sample, uint8_t how)
{
	uint32_t c = p->class_of[sample];
	bool first = !p->bad[sample];

	ASSERT_HELD(&p->lock);
	p->bad[sample] = how;
	if (first && c != POOL_NO_CLASS && --p->class_good[c] == 0)
		pool_notify(p, c);
}

bool pool_claim_own(struct pool *p, uint32_t sample, bool local)
{
	bool r = false;

	if (!p || sample >= p->nunits || p->o.members)
		return false;
	pthread_mutex_lock(&p->lock);
	if (!local)
		p->own[sample] = 0; /* the pool may stream it again */
	else if (p->own[sample])
		r = true;
	else if (!p->bad[sample] &&
		 p->taken[sample] != pass_tag(p->pass) &&
		 p->taken[sample] != pass_tag(p->pass - 1)) {
		p->own[sample] = 1;
		r = true;
	}
	pthread_mutex_unlock(&p->lock);
	return r;
}

void pool_count_own(struct pool *p)
{
	if (!p)
		return;
	pthread_mutex_lock(&p->lock);
	p->served_fresh++;
	p->served_own++;
	echo_policy_count_own(p->ep);
	if (p->gov)
		tick_governor(p, true);
	pool_unlock(p);
}

void pool_untake(struct pool *p, struct pool_sample *s)
{
	struct ref *rf = (struct ref *)s;
	struct ref *lead;
	uint32_t cls;

	if (!p || !s)
		return;
	pthread_mutex_lock(&p->lock);
	lead = rf->lead;
	cls = rf->pub.cls;
	/* A shared take is undone by its last ref, and only if none of its
	 * refs was served. */
	if (!lead->committed && !lead->ended && lead->shares == 1) {
		rf->e->attached = echo_policy_untake(p->ep, &lead->t);
		lead->ended = true;
	}
	drop_ref(p, rf);
	pool_notify(p, cls);
	pool_unlock(p);
}

void pool_discard(struct pool *p, struct pool_sample *s)
{
	struct ref *rf = (struct ref *)s;
	struct entry *e;
	uint32_t cls;

	if (!p || !s)
		return;
	e = rf->e;
	cls = rf->pub.cls;
	pthread_mutex_lock(&p->lock);
	if (p->bad[e->sample] != 1) {
		/* The first holder to find it bad takes it out; another
		 * holder's take of it then just lets go. Counted once (not
		 * here when pool_mark_bad's caller counted it), and never
		 * streamed again (stream_sample skips bad samples). */
		if (!p->bad[e->sample])
			p->rejected++;
		pool_set_bad(p, e->sample, 1);
		if (!rf->lead->ended)
			echo_policy_discard(p->ep, &rf->lead->t);
		rf->lead->ended = true;
		e->attached = false;
	}
	drop_ref(p, rf);
	pool_notify(p, cls);
	pool_unlock(p);
}

void pool_release(struct pool *p, struct pool_sample *s)
{
	if (!p || !s)
		return;
	pthread_mutex_lock(&p->lock);
	drop_ref(p, (struct ref *)s);
	pthread_mutex_unlock(&p->lock);
}

/* ---- control and statistics ---- */

int pool_set_echo(struct pool *p, double echo, enum echo_mode mode)
{
	int r;

	if (!p)
		return -EINVAL;
	pthread_mutex_lock(&p->lock);
	r = echo_policy_set(p->ep, echo, mode);
	if (r == 0)
		r = govern(p);
	if (r == 0) {
		for (uint32_t c = 0; c < p->ncls; c++)
			pool_notify(p, c);
		pthread_cond_signal(&p->room_cv);
	}
	pool_unlock(p);
	return r;
}

void pool_get_echo(struct pool *p, double *echo, enum echo_mode *mode)
{
	pthread_mutex_lock(&p->lock);
	echo_policy_get(p->ep, echo, mode);
	pthread_mutex_unlock(&p->lock);
}

/* The lower bound of the bucket holding quantile q of the echoes' ages
 * (p->lock held); 0 before any echo. */
static uint64_t age_quantile(const struct pool *p, double q)
{
	ASSERT_HELD(&p->lock);
	uint64_t n = 0, seen = 0;

	for (unsigned b = 0; b < POOL_AGE_BUCKETS; b++)
		n += p->echo_age[b];
	if (n == 0)
		return 0;
	for (unsigned b = 0; b < POOL_AGE_BUCKETS; b++) {
		seen += p->echo_age[b];
		if ((double)seen >= q * (double)n)
			return (uint64_t)1 << b;
	}
	return (uint64_t)1 << (POOL_AGE_BUCKETS - 1);
}

void pool_get_stats(struct pool *p, struct pool_stats *out)
{
	pthread_mutex_lock(&p->lock);
	uint64_t fresh = p->served_fresh, all = fresh + p->served_echo;
	struct echo_gov_state g = {0};
	struct echo_policy_stats ps;
	double echo;

	echo_policy_get(p->ep, &echo, NULL);
	echo_policy_get_stats(p->ep, &ps);
	if (p->gov)
		echo_gov_get(p->gov, &g);
	*out = (struct pool_stats){
		.pass = p->pass,
		.fresh_in_pass = p->fresh_in_pass,
		.taken_recently = p->takes_in_pass + p->takes_last_pass,
		.fresh_served = fresh,
		.own_served = p->served_own,
		.echoes_served = p->served_echo,
		.effective_echo = fresh ? (double)all / (double)fresh : 0,
		.stall_s = p->stall_s,
		.pool_bytes = p->bytes,
		.pool_samples = p->samples,
		.dropped = p->dropped,
		.read_errors = p->read_errors,
		.timeouts = p->timeouts,
		.rejected = p->rejected,
		.given_back = p->given_back,
		.reread = p->reread,
		.owed = p->nowed,
		.parked = p->nparked,
		.walks = p->walks,
		.owed_looks = p->owed_looks,
		.echo_factor = p->gov ? g.factor : echo,
		.fresh_rate = g.fresh_rate,
		.best_fresh_rate = g.best_rate,
		.echo_reason = p->gov ? echo_gov_reason_name(g.reason) : "",
		.echo_changes = g.changes,
		.echo_age_p10 = age_quantile(p, 0.10),
		.echo_age_p50 = age_quantile(p, 0.50),
		.fresh_ready = ps.ready + p->nshuf,
		.bad_samples = p->rejected,
	};
	pthread_mutex_unlock(&p->lock);
}

uint64_t pool_parked(struct pool *p)
{
	uint64_t n;

	if (!p)
		return 0;
	pthread_mutex_lock(&p->lock);
	n = p->nparked;
	pthread_mutex_unlock(&p->lock);
	return n;
}

uint64_t pool_ready(struct pool *p, uint32_t cls)
{
	uint64_t n;

	if (!p || cls >= p->ncls)
		return 0;
	pthread_mutex_lock(&p->lock);
	n = echo_policy_ready(p->ep, cls) + p->shuf_count[cls];
	pthread_mutex_unlock(&p->lock);
	return n;
}

int echo_mode_parse(const char *s, enum echo_mode *out)
{
	if (!s || !out)
		return -EINVAL;
	if (strcmp(s, "adaptive") == 0)
		*out = ECHO_ADAPTIVE;
	else if (strcmp(s, "fixed") == 0)
		*out = ECHO_FIXED;
	else if (strcmp(s, "greedy") == 0)
		*out = ECHO_GREEDY;
	else
		return -EINVAL;
	return 0;
}

const char *echo_mode_name(enum echo_mode m)
{
	return m == ECHO_FIXED	 ? "fixed"
	       : m == ECHO_GREEDY ? "greedy"
				  : "adaptive";
}
