/* stream.c - the echo pool's streamer: walks each pass's shards in a
 * seeded order, reads (and, through the ingest workers, decodes) every
 * classed sample into the shuffle buffer, re-reads owed samples, and moves
 * from pass to pass (see the DESIGN in pool.c, "Stream"). */
#include "cache/echo/pool_int.h"

#include "cache/index/partition.h"
#include "cache/store/shards.h"
#include "common/lockcheck.h"
#include "common/util.h"
#include "fetch/format/index.h"

#include <errno.h>
#include <stdlib.h>

/* With repartition (world > 1): this pass's part, drawn from (seed,
 * pass - 1) so that pass 1 streams the part the mount shows; its shards
 * in index order, shuffled by the caller. Every rank draws the same
 * partition, so each shard is streamed by one rank a pass. */
static void choose_part(struct pool *p)
{
	size_t n = p->ix->nshards;
	uint32_t *rank_of = xmalloc((n + 1) * sizeof(*rank_of));
	char err[128];

	p->norder = 0;
	if (partition_assign(p->counts, n, p->o.seed, p->o.world, p->pass,
			     rank_of, err, sizeof(err)) != 0) {
		for (size_t s = 0; s < n; s++)
			rank_of[s] = p->o.rank; /* cannot happen: the mount
						   checked */
	}
	for (size_t s = 0; s < n; s++)
		if (rank_of[s] == p->o.rank)
			p->order[p->norder++] = (uint32_t)s;
	free(rank_of);
}

/* A new pass of a fresh-first pool (echo_stage=encoded): drop the served
 * candidates nobody holds. Such a pool of encoded bytes holds a whole
 * small dataset, and every sample of the new pass whose old copy was
 * still held waited in line behind it (stream_sample): the new pass's
 * fresh samples came at 40/s against 200/s in the pass before, and the
 * readers got echoes instead (issue 29). Its echoes only fill waits, so
 * the candidates the new pass serves are enough. */
static void drop_served(struct pool *p)
{
	struct entry *next;

	for (struct entry *e = p->all; e; e = next) {
		next = e->next;
		if (!e->attached || e->refs || e->buffered ||
		    !echo_policy_drop_served(p->ep, &e->it))
			continue;
		e->attached = false;
		p->dropped++;
		pool_entry_free(p, e);
	}
	pthread_cond_signal(&p->room_cv);
}

/* Shuffle the shard order for a new pass (p->lock held, or at open before
 * the threads start: no ASSERT_HELD). */
void stream_begin_pass(struct pool *p)
{
	ASSERT_HELD(&p->lock);
	size_t n = p->ix->nshards;

	if (p->o.world > 1) {
		choose_part(p);
		n = p->norder;
	}
	for (size_t i = n; i > 1; i--) {
		size_t j = (size_t)echo_rng_below(&p->rng, i);
		uint32_t t = p->order[i - 1];
		p->order[i - 1] = p->order[j];
		p->order[j] = t;
	}
	p->pass++;
	p->fresh_in_pass = 0;
	p->takes_last_pass = p->takes_in_pass;
	p->takes_in_pass = 0;
	if (p->o.fresh_first)
		drop_served(p);
}

static struct entry *new_entry(uint32_t sample, uint32_t cls, uint64_t len)
{
	struct entry *e = xcalloc(1, sizeof(*e));

	e->sample = sample;
	e->cls = cls;
	e->len = (size_t)len;
	e->reserved = len;
	e->data = malloc(len ? (size_t)len : 1);
	if (!e->data) {
		free(e);
		return NULL;
	}
	return e;
}

/* A sample read (and ingested) joins the pool: a pass sample through the
 * shuffle buffer, a re-read owed sample straight into the policy. */
static void add_entry(struct pool *p, struct entry *e)
{
	p->bytes = p->bytes - e->reserved + e->len;
	if (p->held[e->sample] < UINT8_MAX && p->held[e->sample]++ == 0 &&
	    p->in_line[e->sample])
		p->owed[e->cls].nfree--;
	e->next = p->all;
	if (p->all)
		p->all->prev = e;
	p->all = e;
	if (e->reread) {
		if (p->is_owed[e->sample] == 2)
			p->fresh_in_pass++;
		p->is_owed[e->sample] = 0;
		p->nowed--;
		p->reread++;
		pool_attach(p, e);
		return;
	}
	p->fresh_in_pass++;
	pool_buffer_push(p, e);
}

/* A sample that could not be read or ingested (p->lock held). */
static void drop_failed(struct pool *p, struct entry *e, uint64_t reserved,
			uint32_t sample, bool rejected)
{
	ASSERT_HELD(&p->lock);
	p->bytes -= reserved;
	p->samples--;
	if (rejected && !p->bad[sample]) {
		/* Failed for the rest of the mount: a bad JPEG is decoded,
		 * counted and logged once, not once a pass (issue 32). */
		pool_set_bad(p, sample, 1);
		p->rejected++;
	} else if (!rejected) {
		p->read_errors++;
	}
	if (p->is_owed[sample]) {
		p->is_owed[sample] = 0; /* it is lost for this pass */
		p->nowed--;
	}
	pthread_cond_signal(&p->room_cv);
	if (e)
		free(e->data);
	free(e);
}

/* Run the ingest hook on a read sample and add it (no lock held). */
static void ingest_entry(struct pool *p, struct entry *e)
{
	uint8_t *out = NULL;
	size_t outlen = 0;
	int r = p->o.ingest(p->o.ingest_ud, e->sample, e->data, e->len, &out,
			    &outlen);

	free(e->data);
	e->data = out;
	e->len = outlen;
	pthread_mutex_lock(&p->lock);
	if (r) {
		free(out);
		e->data = NULL;
		/* -EAGAIN: not the sample's fault, a later pass tries it
		 * again (pool_opts.ingest). */
		drop_failed(p, e, e->reserved, e->sample, r != -EAGAIN);
	} else {
		add_entry(p, e);
	}
	p->ingesting--;
	pthread_cond_broadcast(&p->iq_cv);
	pool_unlock(p);
}

/* workq run callback: one read sample through the ingest hook. */
void stream_ingest_run(void *ctx, struct workq_item *it)
{
	ingest_entry(ctx, list_entry(it, struct entry, wi));
}

/* workq cancel callback (pool_free): a queued sample never ingested. */
void stream_ingest_cancel(void *ctx, struct workq_item *it)
{
	struct pool *p = ctx;
	struct entry *e = list_entry(it, struct entry, wi);

	pthread_mutex_lock(&p->lock);
	p->ingesting--;
	pthread_cond_broadcast(&p->iq_cv);
	pthread_mutex_unlock(&p->lock);
	free(e->data);
	free(e);
}

/* Hand a read sample to the ingest workers (waits while their queue is
 * full); without them, run the hook here. */
static int queue_ingest(struct pool *p, struct entry *e)
{
	bool stop;

	pthread_mutex_lock(&p->lock);
	p->ingesting++;
	stop = p->stop;
	pthread_mutex_unlock(&p->lock);
	if (!p->iwq && !stop) {
		ingest_entry(p, e);
		return 1;
	}
	/* Waits for room; -ESHUTDOWN once pool_free shuts the workq down. */
	if (!stop && workq_submit(p->iwq, &e->wi, WORKQ_WAIT) == 0)
		return 1;
	pthread_mutex_lock(&p->lock); /* stopping */
	p->ingesting--;
	pthread_cond_broadcast(&p->iq_cv);
	drop_failed(p, e, e->reserved, e->sample, false);
	pool_unlock(p);
	return -ESHUTDOWN;
}

/* Read sample s (memory reserved), then ingest or add it. Returns 1, 0
 * (skipped, counted) or -ESHUTDOWN. */
static int read_sample(struct pool *p, uint32_t s, bool reread, uint32_t pass)
{
	const struct index_sample *m = &p->units[s];
	struct entry *e = new_entry(s, p->class_of[s], m->size);
	ssize_t n = -ENOMEM;
	bool ok;

	if (e) {
		e->reread = reread;
		e->pass = pass;
		n = shards_read(p->sh, m->shard, m->offset, e->len, e->data);
	}
	ok = e && n == (ssize_t)m->size;
	if (ok && p->o.ingest)
		return queue_ingest(p, e);
	pthread_mutex_lock(&p->lock);
	if (!ok)
		drop_failed(p, e, m->size, s, false);
	else
		add_entry(p, e);
	pool_unlock(p);
	return ok ? 1 : 0;
}

/* Fresh samples read and not served yet: the shuffle buffer and the
 * policy's queues (p->lock held). */
static uint64_t fresh_ready(const struct pool *p)
{
	ASSERT_HELD(&p->lock);
	struct echo_policy_stats ps;

	echo_policy_get_stats(p->ep, &ps);
	return ps.ready + p->nshuf;
}

/* The stock of fresh samples the streamer keeps ahead of the readers: the
 * shuffle buffer and a few per class, unless o.lookahead says. */
static uint64_t pace_limit(const struct pool *p)
{
	if (p->o.lookahead)
		return p->o.lookahead;
	return (uint64_t)p->o.shuffle_buffer + 2ULL * p->ncls + 64;
}

/* Wait (p->lock held) while the readers have pace_limit fresh samples
 * ready and none of them waits: the ingest decodes no more than the
 * readers take (issue 29: decoding far ahead at full speed took the cores
 * a CPU-bound trainer needed, for samples it may never get). A take of a
 * fresh sample wakes it (p->pacing). -ESHUTDOWN on stop. */
static int pace(struct pool *p)
{
	ASSERT_HELD(&p->lock);
	while (!p->stop && p->waiters == 0 && fresh_ready(p) >= pace_limit(p)) {
		struct deadline dl = deadline_in(1.0);
		p->pacing = true;
		cond_wait_until(&p->room_cv, &p->lock, &dl);
		p->pacing = false;
	}
	return p->stop ? -ESHUTDOWN : 0;
}

/* Stream sample s of the pass, or an owed one (reread). Returns 1 if it
 * was read or given back, 0 if skipped, -ESHUTDOWN. */
static int stream_sample(struct pool *p, uint32_t s, bool reread)
{
	const struct index_sample *m;
	uint32_t cls = p->class_of[s], pass;
	int r;

	pthread_mutex_lock(&p->lock);
	if (p->bad[s]) {
		if (reread) {
			p->is_owed[s] = 0;
			p->nowed--;
		}
		pthread_mutex_unlock(&p->lock);
		return 0;
	}
	if (!reread && pace(p) < 0) {
		pthread_mutex_unlock(&p->lock);
		return -ESHUTDOWN;
	}
	if (!reread && p->own[s] && !echo_policy_holds_served(p->ep)) {
		/* Its own path serves it, and E allows no echo of it: reading
		 * it would only drop it (pool_claim_own). */
		pthread_mutex_unlock(&p->lock);
		return 0;
	}
	if (!reread && p->is_owed[s]) {
		/* Still owed from an earlier pass: it is served once. */
		pthread_mutex_unlock(&p->lock);
		return 0;
	}
	if (!reread && ((p->held[s] && !p->o.fresh_first) ||
			owed_any(p, cls))) {
		/* Its previous pass's copy is still held, or older samples of
		 * its class are owed: those go first, this one waits in line.
		 * Not for a held copy in a fresh-first pool: it holds a small
		 * dataset whole, so every sample of a new pass would wait,
		 * and a sample served at the end of one pass and early in the
		 * next is what any epoch-shuffling loader does. */
		owed_add(p, s, cls, false, (uint32_t)p->pass);
		p->given_back--; /* moved in line, not given back */
		if (!owed_pop(p, cls, p->want[cls] > 0, &s)) {
			pthread_mutex_unlock(&p->lock);
			return 0;
		}
		reread = true;
	}
	m = &p->units[s];
	if (m->size > POOL_SAMPLE_MAX) {
		p->read_errors++;
		p->is_owed[s] = 0;
		p->nowed -= reread;
		pthread_mutex_unlock(&p->lock);
		return 0;
	}
	if (!reread && p->waiters && !p->want[cls] && p->bytes &&
	    p->bytes + m->size > p->o.mem_size) {
		/* Memory is full and nobody asks for this class: give it back
		 * unread, so the stream reaches the classes asked for. */
		owed_add(p, s, cls, false, (uint32_t)p->pass);
		pthread_mutex_unlock(&p->lock);
		return 1;
	}
	pass = reread ? p->debt_pass[s] : (uint32_t)p->pass;
	r = pool_make_room(p, m->size);
	if (r == 0) {
		p->bytes += m->size; /* reserved while reading */
		p->samples++;
		p->walk_new += !reread;
	}
	pool_unlock(p);
	return r < 0 ? r : read_sample(p, s, reread, pass);
}

/* Re-read the owed samples that are wanted now. Returns how many, or
 * -ESHUTDOWN. */
static int64_t reread_owed(struct pool *p)
{
	int64_t n = 0;

	for (;;) {
		uint32_t s;
		bool got;
		pthread_mutex_lock(&p->lock);
		got = p->nowed && owed_pick(p, &s);
		pthread_mutex_unlock(&p->lock);
		if (!got)
			return n;
		int r = stream_sample(p, s, true);
		if (r < 0)
			return r;
		n += r;
	}
}

static bool shard_has_samples(const struct pool *p, uint32_t shard)
{
	return p->shard_first[shard + 1] > p->shard_first[shard];
}

/* Stream the classed samples of the i-th shard of this pass, asking for the
 * next shards in the background first. Returns samples added or
 * -ESHUTDOWN. */
static int64_t stream_shard(struct pool *p, size_t i)
{
	uint32_t shard = p->order[i];
	int64_t added = 0;

	for (size_t k = i; k < p->norder && k <= i + POOL_PREFETCH; k++)
		if (shard_has_samples(p, p->order[k]))
			shards_prefetch(p->sh, p->order[k]);
	for (uint32_t j = p->shard_first[shard]; j < p->shard_first[shard + 1];
	     j++) {
		int64_t r = reread_owed(p);
		if (r >= 0) {
			added += r;
			r = stream_sample(p, p->by_shard[j], false);
		}
		if (r < 0)
			return r;
		added += r;
	}
	return added;
}

/* Between passes (p->lock held): wait for the samples still being
 * ingested, flush the buffer; a pass that gave nothing (every shard
 * failing, or every sample owed or still held) rests and is walked again
 * rather than counted; else the next pass starts. False on stop. */
static uint64_t fresh_total(const struct pool *p)
{
	ASSERT_HELD(&p->lock);
	uint64_t n = p->nshuf;

	for (uint32_t c = 0; c < p->ncls; c++)
		n += echo_policy_ready(p->ep, c);
	return n;
}

/* Rest s seconds (p->lock held) unless a reader waits or the pool stops.
 * Releases signal room_cv too and do not end it: a walk per release is
 * what the rest is for. */
static void rest_unless_waited(struct pool *p, double s)
{
	ASSERT_HELD(&p->lock);
	struct deadline dl = deadline_in(s);

	while (!p->stop && p->waiters == 0)
		if (cond_wait_until(&p->room_cv, &p->lock, &dl) == -ETIMEDOUT)
			return;
}

/* No walk starts without demand (p->lock held): until a reader took a
 * fresh sample since the last walk began, or waits (issue 32: a mount
 * nobody read walked its passes 20 times a second, re-reading what it
 * held). */
static void wait_for_demand(struct pool *p)
{
	ASSERT_HELD(&p->lock);
	while (!p->stop && p->waiters == 0 && p->takes == p->takes_at_walk) {
		struct deadline dl = deadline_in(1.0);
		p->pacing = true;
		cond_wait_until(&p->room_cv, &p->lock, &dl);
		p->pacing = false;
	}
}

static bool next_pass(struct pool *p, int64_t added)
{
	while (!p->stop && p->ingesting)
		pthread_cond_wait(&p->iq_cv, &p->lock);
	pool_buffer_flush(p);
	/* The next pass waits while this one's fresh samples are plenty and
	 * nobody waits: it must not overtake them (fixed mode draws copies
	 * of every pass alike). A waiting reader lets it start at once. */
	while (!p->stop && p->waiters == 0 &&
	       fresh_total(p) > p->o.shuffle_buffer) {
		struct deadline dl = deadline_in(0.1);
		cond_wait_until(&p->room_cv, &p->lock, &dl);
	}
	if (added == 0 && !p->stop) {
		struct deadline dl = deadline_in(POOL_IDLE_S);
		cond_wait_until(&p->room_cv, &p->lock, &dl);
	} else if (p->walk_new == 0) {
		rest_unless_waited(p, POOL_REST_S);
	}
	wait_for_demand(p);
	if (p->stop)
		return false;
	if (added > 0)
		stream_begin_pass(p); /* else walk the same pass again */
	return true;
}

void *stream_main(void *arg)
{
	struct pool *p = arg;
	bool more = true;

	if (p->o.lazy_start) {
		pthread_mutex_lock(&p->lock);
		wait_for_demand(p);
		more = !p->stop;
		pool_unlock(p);
	}
	while (more) {
		int64_t added = 0;
		p->walk_new = 0;
		pthread_mutex_lock(&p->lock);
		p->walks++;
		p->takes_at_walk = p->takes;
		pthread_mutex_unlock(&p->lock);
		for (size_t i = 0; i < p->norder; i++) {
			int64_t r = stream_shard(p, i);
			if (r < 0)
				return NULL;
			added += r;
		}
		int64_t r = reread_owed(p);
		if (r < 0)
			return NULL;
		added += r;
		pthread_mutex_lock(&p->lock);
		more = next_pass(p, added);
		pool_unlock(p);
	}
	return NULL;
}
