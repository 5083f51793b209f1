/* pool.c - the echo pool: streams samples from the shards into bounded
 * memory and hands them to readers fresh or echoed (see pool.h).
 *
 * DESIGN
 * - Threads: one streamer thread (streamer_main) reads samples; with an
 *   ingest hook, a common/workq of ingest_threads workers (ingest_run) runs
 *   it on what was read (its bounded queue, POOL_IQ_PER_THREAD read samples
 *   per worker, is between them: the streamer waits for room in
 *   workq_submit); one timer thread
 *   (timer_main) answers parked takes whose wait ran out. Readers call
 *   pool_take(_async) / pool_untake / pool_release / pool_cancel from any
 *   thread.
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
 *   have become takeable (notify_class), parked takes of c are served in
 *   order under the lock and moved to the done list; unlock_pool runs their
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
 *   dropped by ingest_cancel, a streamer waiting for room gets
 *   -ESHUTDOWN), then joins the threads; the streamer may first finish the
 *   shards_read it is in. Lock order: p->lock is never held while calling
 *   into the workq, whose callbacks take p->lock themselves.
 */
#include "cache/echo/pool.h"

#include "cache/echo/policy.h"
#include "cache/index/partition.h"
#include "cache/store/shards.h"
#include "common/util.h"
#include "common/workq.h"
#include "fetch/format/index.h"

#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define POOL_MEM_DEFAULT (512ULL << 20)
#define POOL_WAIT_DEFAULT 30.0
/* 1024 samples: enough to mix the ~4 shards in flight at a few hundred
 * samples each, small enough that the first samples are ready quickly. */
#define POOL_SHUFFLE_DEFAULT 1024
#define POOL_SHUFFLE_MAX (1U << 20)
#define POOL_PREFETCH 2
/* Larger samples are counted as read errors rather than buffered. */
#define POOL_SAMPLE_MAX (256ULL << 20)
/* A pass that produced nothing (every shard failing) is retried after this. */
#define POOL_IDLE_S 1.0
/* Rest after a walk that streamed nothing new (every sample still held for
 * its echoes, only owed ones re-read): long enough that the walk, O(samples),
 * is not a busy loop; short against a reader's patience (a waiting reader
 * ends it at once). */
#define POOL_REST_S 0.05
#define POOL_INGEST_MAX 64
/* Read samples queued for the ingest threads, per thread: enough that a
 * thread finishing a decode finds the next one read. */
#define POOL_IQ_PER_THREAD 2

struct entry {
	struct echo_item it; /* first: container_of is a cast */
	uint32_t sample, cls;
	size_t len;
	uint8_t *data;
	uint64_t reserved; /* bytes reserved while read and ingested */
	bool reread;   /* an owed sample read again: straight to the policy */
	uint32_t pass; /* the pass whose serve of the sample this is */
	struct workq_item wi; /* queued for an ingest worker */
	/* Under p->lock: */
	unsigned refs;		   /* readers holding it */
	bool attached;		   /* held by the policy */
	bool buffered;		   /* in the shuffle buffer */
	struct entry *prev, *next; /* all entries, for pool_free */
};

/* One reader's reference: what pool_take handed out. */
struct ref {
	struct pool_sample pub; /* first: container_of is a cast */
	struct entry *e;
	struct echo_take t;
	bool committed; /* guarded by the pool lock */
};

/* A parked take. */
struct waiter {
	uint32_t cls;
	const void *tag;
	pool_done_fn done;
	void *ud;
	double t0, deadline; /* CLOCK_MONOTONIC seconds */
	int err;
	struct pool_sample *got;
	struct waiter *prev, *next;
};

/* Sample numbers given back, per class, oldest first (v[head..n)).
 * nfree counts those whose previous copy is no longer held: the streamer
 * asks "is one of them readable now?" for every sample it walks, and a
 * line of held samples (the whole data set in memory, each kept for its
 * echoes) must answer that without a scan. */
struct owed {
	uint32_t *v;
	size_t head, n, cap;
	size_t nfree;
};

struct pool {
	/* Immutable after pool_open (or streamer-only). */
	const struct index *ix;
	struct shards *sh;
	uint32_t ncls;
	struct pool_opts o;
	uint32_t *class_of;    /* copy of the caller's array */
	uint32_t *by_shard;    /* classed sample numbers, grouped by shard */
	uint32_t *shard_first; /* nshards + 1 offsets into by_shard */
	uint32_t *order;       /* this pass's shard order (streamer) */
	size_t norder;	       /* shards in it: all, or this pass's part */
	uint64_t walk_new;     /* pass samples read (not re-read) this walk */
	uint64_t walks;	       /* walks of a pass begun (under p->lock) */
	uint64_t owed_looks; /* owed entries looked at to find a readable one */
	uint64_t *counts;    /* samples per shard (repartition only) */
	pthread_t thread, timer;
	bool started, timer_started;
	struct workq *iwq; /* ingest workers; NULL without an ingest hook */

	pthread_mutex_t lock;
	pthread_cond_t *cls_cv;
	pthread_cond_t room_cv, idle_cv, iq_cv, timer_cv;
	bool stop;
	struct echo_policy *ep;
	struct echo_rng rng;
	struct entry **shuf;
	unsigned nshuf;
	uint64_t *shuf_count; /* buffered samples per class */
	struct entry *all;
	uint64_t bytes, samples;
	unsigned waiters, active;
	uint32_t *want;	     /* readers waiting per class */
	struct owed *owed;   /* per class */
	uint8_t *is_owed;    /* per sample */
	uint8_t *held;	     /* per sample: entries of it held (saturating) */
	uint8_t *in_line;    /* per sample: in its class's owed line */
	uint32_t *debt_pass; /* per sample in line: the pass it is owed for */
	uint64_t nowed;
	uint32_t owed_next; /* class the next owed pick starts at */
	unsigned ingesting; /* read, not yet added: queued or in the hook */
	struct waiter *whead, *wtail; /* parked, oldest first */
	struct waiter *done;	      /* answered, callbacks not run yet */
	uint64_t nparked;
	uint64_t pass, fresh_in_pass, dropped, read_errors, timeouts, rejected;
	uint64_t given_back, reread;
	/* Serves counted at pool_commit (readers opened them), unlike the
	 * policy's own counts, which include reservations. */
	uint64_t served_fresh, served_echo;
	double stall_s;
};

static void notify_class(struct pool *p, uint32_t cls);

/* Drop the lock, then run the callbacks of the takes answered under it. */
static void unlock_pool(struct pool *p)
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

/* ---- entries (p->lock held) ---- */

static void free_entry(struct pool *p, struct entry *e)
{
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
		free_entry(p, e);
	pthread_cond_signal(&p->room_cv);
}

static void attach(struct pool *p, struct entry *e)
{
	echo_policy_add(p->ep, &e->it, e->cls);
	e->attached = true;
	notify_class(p, e->cls);
}

/* From the shuffle buffer (slot j) into the policy. */
static void unbuffer(struct pool *p, unsigned j)
{
	struct entry *e = p->shuf[j];

	p->shuf[j] = p->shuf[--p->nshuf];
	e->buffered = false;
	p->shuf_count[e->cls]--;
	attach(p, e);
}

static void buffer_push(struct pool *p, struct entry *e)
{
	if (p->nshuf == p->o.shuffle_buffer)
		unbuffer(p, (unsigned)echo_rng_below(&p->rng, p->nshuf));
	e->buffered = true;
	p->shuf[p->nshuf++] = e;
	p->shuf_count[e->cls]++;
	notify_class(p, e->cls);
}

static void buffer_flush(struct pool *p)
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
	for (uint64_t i = 0; i < k; i++) {
		echo_policy_add(p->ep, &out[i]->it, cls);
		out[i]->attached = true;
	}
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
	free_entry(p, e);
	return true;
}

/* ---- demand: giving back and re-reading (p->lock held) ---- */

/* counted: the sample was counted in fresh_in_pass when it first came
 * (is_owed 1); else it counts when it is read (is_owed 2). pass: the pass
 * it is owed for. The line is in pass order, oldest first within a pass:
 * a copy of pass N given back after pass N+1 began must not queue behind
 * pass N+1's samples, or a reader of the class would see one sample twice
 * before another once. */
static void owe(struct pool *p, uint32_t sample, uint32_t cls, bool counted,
		uint32_t pass)
{
	struct owed *o = &p->owed[cls];
	size_t k;

	if (o->n == o->cap && o->head > 0) {
		memmove(o->v, o->v + o->head, (o->n - o->head) * sizeof(*o->v));
		o->n -= o->head;
		o->head = 0;
	}
	if (o->n == o->cap) {
		o->cap = o->cap ? o->cap * 2 : 64;
		o->v = xrealloc(o->v, o->cap * sizeof(*o->v));
	}
	for (k = o->n; k > o->head && p->debt_pass[o->v[k - 1]] > pass; k--)
		;
	memmove(o->v + k + 1, o->v + k, (o->n - k) * sizeof(*o->v));
	o->v[k] = sample;
	o->n++;
	p->debt_pass[sample] = pass;
	p->in_line[sample] = 1;
	o->nfree += !p->held[sample];
	p->is_owed[sample] = counted ? 1 : 2;
	p->nowed++;
	p->given_back++;
}

/* Take a sample out of its class's line (O(line): give-backs only). */
static void line_remove(struct pool *p, uint32_t sample, uint32_t cls)
{
	struct owed *o = &p->owed[cls];
	size_t k = o->head;

	while (k < o->n && o->v[k] != sample)
		k++;
	if (k == o->n)
		return;
	memmove(o->v + k, o->v + k + 1, (o->n - k - 1) * sizeof(*o->v));
	if (--o->n == o->head)
		o->head = o->n = 0;
	p->in_line[sample] = 0;
	o->nfree -= !p->held[sample];
	p->nowed--;
	p->given_back--; /* owe() counts it again */
}

static bool owes(const struct pool *p, uint32_t cls)
{
	return p->owed[cls].n > p->owed[cls].head;
}

/* The oldest owed sample of cls whose previous copy is no longer held
 * (held ones keep their place in line), or the oldest when the class
 * starves (a reader waits: a small class may have all its samples inside
 * the echo window). False if there is none; O(1) when all are held. */
static bool owed_pop(struct pool *p, uint32_t cls, bool any, uint32_t *out)
{
	struct owed *o = &p->owed[cls];
	size_t k = o->head;

	if (o->head == o->n || (!any && o->nfree == 0))
		return false;
	while (!any && k < o->n && p->held[o->v[k]])
		k++;
	p->owed_looks += k - o->head + 1;
	if (k == o->n)
		return false; /* not reached: nfree > 0 */
	*out = o->v[k];
	memmove(o->v + o->head + 1, o->v + o->head,
		(k - o->head) * sizeof(*o->v));
	if (++o->head == o->n)
		o->head = o->n = 0;
	p->in_line[*out] = 0;
	o->nfree -= !p->held[*out];
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
		line_remove(p, e->sample, e->cls);
	owe(p, e->sample, e->cls, true, e->pass);
	free_entry(p, e);
	return true;
}

/* An owed sample to read again now: of a class someone waits for, else
 * (nobody waiting) any whose previous copy is gone, while it fits in
 * memory: the owed line is the rest of the stream, kept ahead of demand. */
static bool pick_owed(struct pool *p, uint32_t *sample)
{
	for (int round = 0; round < 2; round++) {
		if (round == 1 && p->waiters)
			break;
		for (uint32_t k = 0; k < p->ncls; k++) {
			uint32_t c = (p->owed_next + k) % p->ncls;
			struct owed *o = &p->owed[c];
			if (!owes(p, c) || (round == 0 && !p->want[c]))
				continue;
			if (round == 1 &&
			    p->bytes + p->ix->samples[o->v[o->head]].size >
				    p->o.mem_size)
				continue;
			if (owed_pop(p, c, round == 0, sample)) {
				p->owed_next = c + 1;
				return true;
			}
		}
	}
	return false;
}

/* Wait until len more bytes fit under mem_size (or the pool is empty). */
static int make_room(struct pool *p, uint64_t len)
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

/* ---- streamer ---- */

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

/* Shuffle the shard order for a new pass (p->lock held). */
static void begin_pass(struct pool *p)
{
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
		attach(p, e);
		return;
	}
	p->fresh_in_pass++;
	buffer_push(p, e);
}

/* A sample that could not be read or ingested (p->lock held). */
static void drop_failed(struct pool *p, struct entry *e, uint64_t reserved,
			uint32_t sample, bool rejected)
{
	p->bytes -= reserved;
	p->samples--;
	if (rejected)
		p->rejected++;
	else
		p->read_errors++;
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
		drop_failed(p, e, e->reserved, e->sample, true);
	} else {
		add_entry(p, e);
	}
	p->ingesting--;
	pthread_cond_broadcast(&p->iq_cv);
	unlock_pool(p);
}

/* workq run callback: one read sample through the ingest hook. */
static void ingest_run(void *ctx, struct workq_item *it)
{
	ingest_entry(ctx, list_entry(it, struct entry, wi));
}

/* workq cancel callback (pool_free): a queued sample never ingested. */
static void ingest_cancel(void *ctx, struct workq_item *it)
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
	unlock_pool(p);
	return -ESHUTDOWN;
}

/* Read sample s (memory reserved), then ingest or add it. Returns 1, 0
 * (skipped, counted) or -ESHUTDOWN. */
static int read_sample(struct pool *p, uint32_t s, bool reread, uint32_t pass)
{
	const struct index_sample *m = &p->ix->samples[s];
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
	unlock_pool(p);
	return ok ? 1 : 0;
}

/* Stream sample s of the pass, or an owed one (reread). Returns 1 if it
 * was read or given back, 0 if skipped, -ESHUTDOWN. */
static int stream_sample(struct pool *p, uint32_t s, bool reread)
{
	const struct index_sample *m;
	uint32_t cls = p->class_of[s], pass;
	int r;

	pthread_mutex_lock(&p->lock);
	if (!reread && p->is_owed[s]) {
		/* Still owed from an earlier pass: it is served once. */
		pthread_mutex_unlock(&p->lock);
		return 0;
	}
	if (!reread && (p->held[s] || owes(p, cls))) {
		/* Its previous pass's copy is still held, or older samples of
		 * its class are owed: those go first, this one waits in line.
		 */
		owe(p, s, cls, false, (uint32_t)p->pass);
		p->given_back--; /* moved in line, not given back */
		if (!owed_pop(p, cls, p->want[cls] > 0, &s)) {
			pthread_mutex_unlock(&p->lock);
			return 0;
		}
		reread = true;
	}
	m = &p->ix->samples[s];
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
		owe(p, s, cls, false, (uint32_t)p->pass);
		pthread_mutex_unlock(&p->lock);
		return 1;
	}
	pass = reread ? p->debt_pass[s] : (uint32_t)p->pass;
	r = make_room(p, m->size);
	if (r == 0) {
		p->bytes += m->size; /* reserved while reading */
		p->samples++;
		p->walk_new += !reread;
	}
	unlock_pool(p);
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
		got = p->nowed && pick_owed(p, &s);
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

static struct timespec mono_ts(double t)
{
	struct timespec ts;
	double whole = floor(t);

	ts.tv_sec = (time_t)whole;
	ts.tv_nsec = (long)((t - whole) * 1e9);
	if (ts.tv_nsec >= 1000000000L) {
		ts.tv_sec++;
		ts.tv_nsec -= 1000000000L;
	}
	return ts;
}

static struct timespec deadline_after(double s)
{
	return mono_ts(now_mono() + s);
}

/* Between passes (p->lock held): wait for the samples still being
 * ingested, flush the buffer; a pass that gave nothing (every shard
 * failing, or every sample owed or still held) rests and is walked again
 * rather than counted; else the next pass starts. False on stop. */
static uint64_t fresh_total(const struct pool *p)
{
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
	struct timespec dl = deadline_after(s);

	while (!p->stop && p->waiters == 0)
		if (pthread_cond_timedwait(&p->room_cv, &p->lock, &dl) ==
		    ETIMEDOUT)
			return;
}

static bool next_pass(struct pool *p, int64_t added)
{
	while (!p->stop && p->ingesting)
		pthread_cond_wait(&p->iq_cv, &p->lock);
	buffer_flush(p);
	/* The next pass waits while this one's fresh samples are plenty and
	 * nobody waits: it must not overtake them (fixed mode draws copies
	 * of every pass alike). A waiting reader lets it start at once. */
	while (!p->stop && p->waiters == 0 &&
	       fresh_total(p) > p->o.shuffle_buffer) {
		struct timespec dl = deadline_after(0.1);
		pthread_cond_timedwait(&p->room_cv, &p->lock, &dl);
	}
	if (added == 0 && !p->stop) {
		struct timespec dl = deadline_after(POOL_IDLE_S);
		pthread_cond_timedwait(&p->room_cv, &p->lock, &dl);
	} else if (p->walk_new == 0) {
		rest_unless_waited(p, POOL_REST_S);
	}
	if (p->stop)
		return false;
	if (added > 0)
		begin_pass(p); /* else walk the same pass again */
	return true;
}

static void *streamer_main(void *arg)
{
	struct pool *p = arg;
	bool more = true;

	while (more) {
		int64_t added = 0;
		p->walk_new = 0;
		pthread_mutex_lock(&p->lock);
		p->walks++;
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
		unlock_pool(p);
	}
	return NULL;
}

/* ---- parked takes ---- */

static void unpark(struct pool *p, struct waiter *w, int err,
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

static int try_take(struct pool *p, uint32_t cls, struct echo_take *t);
static struct pool_sample *hand_out(struct echo_take *t);

/* Serve the parked takes of class cls that can be served now, oldest
 * first; blocking takes are woken. */
static void notify_class(struct pool *p, uint32_t cls)
{
	struct waiter *w = p->whead, *n;

	pthread_cond_broadcast(&p->cls_cv[cls]);
	for (; w; w = n) {
		struct echo_take t;
		n = w->next;
		if (w->cls != cls)
			continue;
		if (try_take(p, cls, &t) != 0)
			return;
		unpark(p, w, 0, hand_out(&t));
		n = p->whead; /* the list changed; start over */
	}
}

static void *timer_main(void *arg)
{
	struct pool *p = arg;

	pthread_mutex_lock(&p->lock);
	while (!p->stop) {
		if (!p->whead) {
			pthread_cond_wait(&p->timer_cv, &p->lock);
			continue;
		}
		struct timespec dl = mono_ts(p->whead->deadline);
		pthread_cond_timedwait(&p->timer_cv, &p->lock, &dl);
		double now = now_mono();
		while (p->whead && p->whead->deadline <= now) {
			p->timeouts++;
			unpark(p, p->whead, -ETIMEDOUT, NULL);
		}
		unlock_pool(p);
		pthread_mutex_lock(&p->lock);
	}
	pthread_mutex_unlock(&p->lock);
	return NULL;
}

/* ---- set-up ---- */

static int settle_opts(struct pool_opts *o, const struct pool_opts *in)
{
	*o = in ? *in : (struct pool_opts){0};
	if (o->echo == 0)
		o->echo = 1;
	if (o->window == 0)
		o->window = ECHO_DEFAULT_WINDOW;
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

/* Copy class_of and group the classed samples by shard (counting sort,
 * index order kept within a shard). */
static int group_samples(struct pool *p, const uint32_t *class_of)
{
	const struct index *ix = p->ix;
	uint32_t *fill;

	if (ix->nsamples >= UINT32_MAX || ix->nshards >= UINT32_MAX)
		return -EINVAL;
	p->class_of = xmalloc((ix->nsamples + 1) * sizeof(uint32_t));
	p->is_owed = xcalloc(ix->nsamples + 1, 1);
	p->in_line = xcalloc(ix->nsamples + 1, 1);
	p->debt_pass = xcalloc(ix->nsamples + 1, sizeof(uint32_t));
	p->held = xcalloc(ix->nsamples + 1, 1);
	p->shard_first = xcalloc(ix->nshards + 1, sizeof(uint32_t));
	p->by_shard = xmalloc((ix->nsamples + 1) * sizeof(uint32_t));
	p->order = xmalloc((ix->nshards + 1) * sizeof(uint32_t));
	for (size_t i = 0; i < ix->nsamples; i++) {
		uint32_t c = class_of[i];
		if (c != POOL_NO_CLASS && c >= p->ncls)
			return -EINVAL;
		if (ix->samples[i].shard >= ix->nshards)
			return -EINVAL;
		p->class_of[i] = c;
		if (c != POOL_NO_CLASS)
			p->shard_first[ix->samples[i].shard + 1]++;
	}
	for (size_t s = 0; s < ix->nshards; s++) {
		p->shard_first[s + 1] += p->shard_first[s];
		p->order[s] = (uint32_t)s;
	}
	p->norder = ix->nshards;
	if (p->o.world > 1) { /* the partition weighs every sample */
		p->counts = xcalloc(ix->nshards + 1, sizeof(*p->counts));
		for (size_t i = 0; i < ix->nsamples; i++)
			p->counts[ix->samples[i].shard]++;
	}
	fill = xmalloc((ix->nshards + 1) * sizeof(uint32_t));
	memcpy(fill, p->shard_first, ix->nshards * sizeof(uint32_t));
	for (size_t i = 0; i < ix->nsamples; i++)
		if (class_of[i] != POOL_NO_CLASS)
			p->by_shard[fill[ix->samples[i].shard]++] = (uint32_t)i;
	free(fill);
	return 0;
}

static void init_sync(struct pool *p)
{
	pthread_condattr_t ca;

	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_mutex_init(&p->lock, NULL);
	p->cls_cv = xcalloc(p->ncls, sizeof(*p->cls_cv));
	for (uint32_t c = 0; c < p->ncls; c++)
		pthread_cond_init(&p->cls_cv[c], &ca);
	pthread_cond_init(&p->room_cv, &ca);
	pthread_cond_init(&p->idle_cv, &ca);
	pthread_cond_init(&p->iq_cv, &ca);
	pthread_cond_init(&p->timer_cv, &ca);
	pthread_condattr_destroy(&ca);
}

static void destroy(struct pool *p)
{
	while (p->all)
		free_entry(p, p->all);
	workq_free(p->iwq); /* shut down by pool_free: nothing queued */
	if (p->cls_cv) {
		for (uint32_t c = 0; c < p->ncls; c++)
			pthread_cond_destroy(&p->cls_cv[c]);
		pthread_cond_destroy(&p->room_cv);
		pthread_cond_destroy(&p->idle_cv);
		pthread_cond_destroy(&p->iq_cv);
		pthread_cond_destroy(&p->timer_cv);
		pthread_mutex_destroy(&p->lock);
	}
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
				.run = ingest_run,
				.cancel = ingest_cancel,
				.ctx = p},
			&p->iwq);
		if (r < 0)
			return r;
	}
	r = -pthread_create(&p->thread, NULL, streamer_main, p);
	if (r < 0)
		return r;
	p->started = true;
	r = -pthread_create(&p->timer, NULL, timer_main, p);
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
	p->ix = ix;
	p->sh = sh;
	p->ncls = nclasses;
	r = settle_opts(&p->o, o);
	if (r == 0)
		r = group_samples(p, class_of);
	eo = (struct echo_policy_opts){p->o.echo, p->o.mode, p->o.window,
				       p->o.seed};
	if (r == 0)
		r = echo_policy_open(nclasses, &eo, &p->ep);
	if (r < 0)
		goto fail;
	/* The stream's draws come from another sequence than the policy's. */
	echo_rng_seed(&p->rng, p->o.seed ^ 0x5eed5eed5eed5eedULL);
	alloc_state(p);
	init_sync(p);
	begin_pass(p);
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
static bool wait_class(struct pool *p, uint32_t cls, const struct timespec *dl)
{
	double t0 = now_mono();
	int r;

	p->waiters++;
	p->want[cls]++;
	pthread_cond_signal(&p->room_cv); /* memory may be given back now */
	r = pthread_cond_timedwait(&p->cls_cv[cls], &p->lock, dl);
	p->waiters--;
	p->want[cls]--;
	p->stall_s += now_mono() - t0;
	return r == ETIMEDOUT;
}

/* One take of class cls if one is possible now (p->lock held). */
static int try_take(struct pool *p, uint32_t cls, struct echo_take *t)
{
	buffer_pull(p, cls);
	return echo_policy_take(p->ep, cls, t);
}

static int take_locked(struct pool *p, uint32_t cls, struct echo_take *t)
{
	struct timespec dl = deadline_after(p->o.wait_s);
	bool late = false;

	for (;;) {
		int r;
		if (p->stop)
			return -ESHUTDOWN;
		r = try_take(p, cls, t);
		if (r != -EAGAIN)
			return r;
		if (late) {
			p->timeouts++;
			return -ETIMEDOUT;
		}
		late = wait_class(p, cls, &dl);
	}
}

static struct pool_sample *hand_out(struct echo_take *t)
{
	struct entry *e = (struct entry *)t->item;
	struct ref *rf = xmalloc(sizeof(*rf));

	e->refs++;
	if (t->retired)
		e->attached = false;
	rf->pub = (struct pool_sample){.sample = e->sample,
				       .cls = e->cls,
				       .data = e->data,
				       .len = e->len};
	rf->e = e;
	rf->t = *t;
	rf->committed = false;
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
		*out = hand_out(&t);
		/* The class tick moved: a waiting echo may be allowed now. */
		if (p->waiters)
			notify_class(p, cls);
	}
	if (--p->active == 0 && p->stop)
		pthread_cond_broadcast(&p->idle_cv);
	unlock_pool(p);
	return r;
}

/* Park a take (p->lock held). */
static void park(struct pool *p, uint32_t cls, const void *tag,
		 pool_done_fn done, void *ud)
{
	struct waiter *w = xcalloc(1, sizeof(*w));

	w->cls = cls;
	w->tag = tag;
	w->done = done;
	w->ud = ud;
	w->t0 = now_mono();
	w->deadline = w->t0 + p->o.wait_s;
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
	r = p->stop ? -ESHUTDOWN : try_take(p, cls, &t);
	if (r == 0) {
		*out = hand_out(&t);
		if (p->waiters)
			notify_class(p, cls);
	} else if (r == -EAGAIN && p->o.interrupted && p->o.interrupted(tag)) {
		r = -EINTR; /* checked under the lock: see pool_opts */
	} else if (r == -EAGAIN) {
		park(p, cls, tag, done, ud);
		r = -EINPROGRESS;
	}
	unlock_pool(p);
	return r;
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
		unpark(p, w, -EINTR, NULL);
	unlock_pool(p);
	return w != NULL;
}

void pool_cancel_all(struct pool *p)
{
	if (!p)
		return;
	pthread_mutex_lock(&p->lock);
	while (p->whead)
		unpark(p, p->whead, -ESHUTDOWN, NULL);
	unlock_pool(p);
}

void pool_commit(struct pool *p, struct pool_sample *s)
{
	struct ref *rf = (struct ref *)s;

	if (!p || !s)
		return;
	pthread_mutex_lock(&p->lock);
	if (!rf->committed) {
		rf->committed = true;
		if (rf->t.fresh)
			p->served_fresh++;
		else
			p->served_echo++;
	}
	pthread_mutex_unlock(&p->lock);
}

void pool_untake(struct pool *p, struct pool_sample *s)
{
	struct ref *rf = (struct ref *)s;

	if (!p || !s)
		return;
	pthread_mutex_lock(&p->lock);
	rf->e->attached = echo_policy_untake(p->ep, &rf->t);
	put_entry(p, rf->e);
	notify_class(p, rf->pub.cls);
	unlock_pool(p);
	free(rf);
}

void pool_release(struct pool *p, struct pool_sample *s)
{
	struct ref *rf = (struct ref *)s;

	if (!p || !s)
		return;
	pthread_mutex_lock(&p->lock);
	put_entry(p, rf->e);
	pthread_mutex_unlock(&p->lock);
	free(rf);
}

/* ---- control and statistics ---- */

int pool_set_echo(struct pool *p, double echo, enum echo_mode mode)
{
	int r;

	if (!p)
		return -EINVAL;
	pthread_mutex_lock(&p->lock);
	r = echo_policy_set(p->ep, echo, mode);
	if (r == 0) {
		for (uint32_t c = 0; c < p->ncls; c++)
			notify_class(p, c);
		pthread_cond_signal(&p->room_cv);
	}
	unlock_pool(p);
	return r;
}

void pool_get_echo(struct pool *p, double *echo, enum echo_mode *mode)
{
	pthread_mutex_lock(&p->lock);
	echo_policy_get(p->ep, echo, mode);
	pthread_mutex_unlock(&p->lock);
}

void pool_get_stats(struct pool *p, struct pool_stats *out)
{
	pthread_mutex_lock(&p->lock);
	uint64_t fresh = p->served_fresh, all = fresh + p->served_echo;
	*out = (struct pool_stats){
		.pass = p->pass,
		.fresh_in_pass = p->fresh_in_pass,
		.fresh_served = fresh,
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
	};
	pthread_mutex_unlock(&p->lock);
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
	else
		return -EINVAL;
	return 0;
}

const char *echo_mode_name(enum echo_mode m)
{
	return m == ECHO_FIXED ? "fixed" : "adaptive";
}
