/* pool.c - the echo pool: streams samples from the shards into bounded
 * memory and hands them to readers fresh or echoed (see pool.h).
 *
 * DESIGN
 * - Threads: one streamer thread (streamer_main) reads samples; readers call
 *   pool_take / pool_untake / pool_release from any thread.
 * - Stream: each pass walks the shards in an order shuffled by the pool's
 *   seeded generator (a new order every pass, same seed -> same orders),
 *   prefetching POOL_PREFETCH shards ahead and reading each classed sample
 *   with shards_read into its own buffer. A sample enters the shuffle buffer
 *   (default POOL_SHUFFLE_DEFAULT samples); once it is full each new sample
 *   pushes a random one out into the policy (its class's fresh queue). At
 *   the end of a pass the buffer is flushed in random order, so pass N+1's
 *   samples never overtake pass N's: a pass serves each sample fresh once.
 *   A reader whose class has no fresh sample in the policy pulls a random
 *   sample of its class out of the buffer first: the buffer reorders, it
 *   never makes a reader stall or take an echo while a fresh one is there.
 * - Memory: pool_bytes counts the data of every sample held (in the buffer,
 *   in the policy, taken by readers, and the one being read, reserved
 *   before the read). A sample fully used (retired by the policy) is freed
 *   as soon as its last reader releases it: fully used samples go first.
 *   Past mem_size the streamer evicts the least useful idle echo candidate
 *   (echo_policy_evict; in fixed mode only while a reader is waiting, since
 *   dropping a sample with copies left lowers the mean below E); when
 *   nothing can go (all fresh, buffered or taken) it waits on room_cv
 *   (back-pressure). A sample larger than mem_size is admitted only into an
 *   empty pool.
 * - Locking: p->lock guards everything below it in struct pool, the policy
 *   and every entry's refs/attached/buffered fields. It is never held
 *   across shards_read or shards_prefetch (the shards lock is never taken
 *   under it). Condition variables: cls_cv[c] (fresh data or an echo may be
 *   ready in class c), room_cv (memory freed, a reader started waiting, or
 *   stop), idle_cv (the last caller left pool_take during pool_free).
 * - Shutdown: pool_free sets stop, wakes everyone (waiting readers return
 *   -ESHUTDOWN at once), waits for callers to leave pool_take, then joins the
 *   streamer, which may first finish the shards_read it is in.
 */
#include "cache/echo/pool.h"

#include "cache/echo/policy.h"
#include "cache/store/shards.h"
#include "common/util.h"
#include "fetch/format/index.h"

#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define POOL_MEM_DEFAULT (512ULL << 20)
#define POOL_WAIT_DEFAULT 60.0
/* 1024 samples: enough to mix the ~4 shards in flight at a few hundred
 * samples each, small enough that the first samples are ready quickly. */
#define POOL_SHUFFLE_DEFAULT 1024
#define POOL_SHUFFLE_MAX (1U << 20)
#define POOL_PREFETCH 2
/* Larger samples are counted as read errors rather than buffered. */
#define POOL_SAMPLE_MAX (256ULL << 20)
/* A pass that produced nothing (every shard failing) is retried after this. */
#define POOL_IDLE_S 1.0

struct entry {
	struct echo_item it; /* first: container_of is a cast */
	uint32_t sample, cls;
	size_t len;
	uint8_t *data;
	/* Under p->lock: */
	unsigned refs;	/* readers holding it */
	bool attached;	/* held by the policy */
	bool buffered;	/* in the shuffle buffer */
	struct entry *prev, *next; /* all entries, for pool_free */
};

/* One reader's reference: what pool_take handed out. */
struct ref {
	struct pool_sample pub; /* first: container_of is a cast */
	struct entry *e;
	struct echo_take t;
	bool committed; /* guarded by the pool lock */
};

struct pool {
	/* Immutable after pool_new (or streamer-only). */
	const struct index *ix;
	struct shards *sh;
	uint32_t ncls;
	struct pool_opts o;
	uint32_t *class_of;    /* copy of the caller's array */
	uint32_t *by_shard;    /* classed sample numbers, grouped by shard */
	uint32_t *shard_first; /* nshards + 1 offsets into by_shard */
	uint32_t *order;       /* this pass's shard order (streamer) */
	pthread_t thread;
	bool started;

	pthread_mutex_t lock;
	pthread_cond_t *cls_cv;
	pthread_cond_t room_cv, idle_cv;
	bool stop;
	struct echo_policy *ep;
	struct echo_rng rng;
	struct entry **shuf;
	unsigned nshuf;
	uint64_t *shuf_count; /* buffered samples per class */
	struct entry *all;
	uint64_t bytes, samples;
	unsigned waiters, active;
	uint64_t pass, fresh_in_pass, dropped, read_errors, timeouts, rejected;
	/* Serves counted at pool_commit (readers opened them), unlike the
	 * policy's own counts, which include reservations. */
	uint64_t served_fresh, served_echo;
	double stall_s;
};

/* ---- entries (p->lock held) ---- */

static void free_entry(struct pool *p, struct entry *e)
{
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

/* From the shuffle buffer (slot j) into the policy. */
static void unbuffer(struct pool *p, unsigned j)
{
	struct entry *e = p->shuf[j];

	p->shuf[j] = p->shuf[--p->nshuf];
	e->buffered = false;
	p->shuf_count[e->cls]--;
	echo_policy_add(p->ep, &e->it, e->cls);
	e->attached = true;
	pthread_cond_broadcast(&p->cls_cv[e->cls]);
}

static void buffer_push(struct pool *p, struct entry *e)
{
	if (p->nshuf == p->o.shuffle_buffer)
		unbuffer(p, (unsigned)echo_rng_below(&p->rng, p->nshuf));
	e->buffered = true;
	p->shuf[p->nshuf++] = e;
	p->shuf_count[e->cls]++;
	pthread_cond_broadcast(&p->cls_cv[e->cls]);
}

static void buffer_flush(struct pool *p)
{
	while (p->nshuf)
		unbuffer(p, (unsigned)echo_rng_below(&p->rng, p->nshuf));
}

/* A random buffered sample of class cls leaves the buffer early. */
static bool buffer_pull(struct pool *p, uint32_t cls)
{
	uint64_t k;

	if (p->shuf_count[cls] == 0)
		return false;
	k = echo_rng_below(&p->rng, p->shuf_count[cls]);
	for (unsigned j = 0; j < p->nshuf; j++) {
		if (p->shuf[j]->cls != cls)
			continue;
		if (k-- == 0) {
			unbuffer(p, j);
			return true;
		}
	}
	return false; /* not reached: shuf_count is exact */
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

/* Wait until len more bytes fit under mem_size (or the pool is empty). */
static int make_room(struct pool *p, uint64_t len)
{
	while (!p->stop) {
		if (p->bytes == 0 || p->bytes + len <= p->o.mem_size)
			return 0;
		if (evict_one(p))
			continue;
		pthread_cond_wait(&p->room_cv, &p->lock);
	}
	return -ESHUTDOWN;
}

/* ---- streamer ---- */

/* Shuffle the shard order for a new pass (p->lock held). */
static void begin_pass(struct pool *p)
{
	size_t n = p->ix->nshards;

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
	e->data = malloc(len ? (size_t)len : 1);
	if (!e->data) {
		free(e);
		return NULL;
	}
	return e;
}

static void count_read_error(struct pool *p)
{
	pthread_mutex_lock(&p->lock);
	p->read_errors++;
	pthread_mutex_unlock(&p->lock);
}

static void add_entry(struct pool *p, struct entry *e)
{
	e->next = p->all;
	if (p->all)
		p->all->prev = e;
	p->all = e;
	p->fresh_in_pass++;
	buffer_push(p, e);
}

/* Replace a read sample's bytes by what the ingest hook makes of them, then
 * buffer it; reserved is what was reserved for it. Returns 1, or 0 when the
 * hook refused it (counted in rejected). */
static int ingest_sample(struct pool *p, struct entry *e, uint64_t reserved)
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
		p->bytes -= reserved;
		p->samples--;
		p->rejected++;
		pthread_mutex_unlock(&p->lock);
		free(out);
		free(e);
		return 0;
	}
	p->bytes = p->bytes - reserved + outlen;
	add_entry(p, e);
	pthread_mutex_unlock(&p->lock);
	return 1;
}

/* Reserve memory for sample s, read it (unlocked), buffer it. Returns 1 if
 * it was added, 0 if it was skipped (counted in read_errors), -ESHUTDOWN. */
static int stream_sample(struct pool *p, uint32_t s)
{
	const struct index_sample *m = &p->ix->samples[s];
	struct entry *e;
	ssize_t n = -ENOMEM;
	int r;

	if (m->size > POOL_SAMPLE_MAX) {
		count_read_error(p);
		return 0;
	}
	pthread_mutex_lock(&p->lock);
	r = make_room(p, m->size);
	if (r == 0) {
		p->bytes += m->size; /* reserved while reading */
		p->samples++;
	}
	pthread_mutex_unlock(&p->lock);
	if (r < 0)
		return r;
	e = new_entry(s, p->class_of[s], m->size);
	if (e)
		n = shards_read(p->sh, m->shard, m->offset, e->len, e->data);
	if (e && n == (ssize_t)e->len && p->o.ingest)
		return ingest_sample(p, e, m->size);
	pthread_mutex_lock(&p->lock);
	if (!e || n != (ssize_t)e->len) {
		p->bytes -= m->size;
		p->samples--;
		p->read_errors++;
		pthread_mutex_unlock(&p->lock);
		if (e)
			free(e->data);
		free(e);
		return 0;
	}
	add_entry(p, e);
	pthread_mutex_unlock(&p->lock);
	return 1;
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

	for (size_t k = i; k < p->ix->nshards && k <= i + POOL_PREFETCH; k++)
		if (shard_has_samples(p, p->order[k]))
			shards_prefetch(p->sh, p->order[k]);
	for (uint32_t j = p->shard_first[shard]; j < p->shard_first[shard + 1];
	     j++) {
		int r = stream_sample(p, p->by_shard[j]);
		if (r < 0)
			return r;
		added += r;
	}
	return added;
}

static struct timespec deadline_after(double s)
{
	struct timespec ts;
	double whole = floor(s);

	clock_gettime(CLOCK_MONOTONIC, &ts);
	ts.tv_sec += (time_t)whole;
	ts.tv_nsec += (long)((s - whole) * 1e9);
	if (ts.tv_nsec >= 1000000000L) {
		ts.tv_sec++;
		ts.tv_nsec -= 1000000000L;
	}
	return ts;
}

/* Between passes (p->lock held): flush the buffer, rest if the pass gave
 * nothing (every shard failing), start the next pass. False on stop. */
static bool next_pass(struct pool *p, int64_t added)
{
	buffer_flush(p);
	if (added == 0 && !p->stop) {
		struct timespec dl = deadline_after(POOL_IDLE_S);
		pthread_cond_timedwait(&p->room_cv, &p->lock, &dl);
	}
	if (p->stop)
		return false;
	begin_pass(p);
	return true;
}

static void *streamer_main(void *arg)
{
	struct pool *p = arg;
	bool more = true;

	while (more) {
		int64_t added = 0;
		for (size_t i = 0; i < p->ix->nshards; i++) {
			int64_t r = stream_shard(p, i);
			if (r < 0)
				return NULL;
			added += r;
		}
		pthread_mutex_lock(&p->lock);
		more = next_pass(p, added);
		pthread_mutex_unlock(&p->lock);
	}
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
	pthread_cond_init(&p->idle_cv, NULL);
	pthread_condattr_destroy(&ca);
}

static void destroy(struct pool *p)
{
	while (p->all)
		free_entry(p, p->all);
	if (p->cls_cv) {
		for (uint32_t c = 0; c < p->ncls; c++)
			pthread_cond_destroy(&p->cls_cv[c]);
		pthread_cond_destroy(&p->room_cv);
		pthread_cond_destroy(&p->idle_cv);
		pthread_mutex_destroy(&p->lock);
	}
	echo_policy_free(p->ep);
	free(p->cls_cv);
	free(p->shuf);
	free(p->shuf_count);
	free(p->class_of);
	free(p->by_shard);
	free(p->shard_first);
	free(p->order);
	free(p);
}

struct pool *pool_new(const struct index *ix, struct shards *sh,
		      const uint32_t *class_of, uint32_t nclasses,
		      const struct pool_opts *o)
{
	struct pool *p;
	struct echo_policy_opts eo;
	int r;

	if (!ix || !sh || !class_of || nclasses == 0 ||
	    nclasses == POOL_NO_CLASS) {
		errno = EINVAL;
		return NULL;
	}
	p = xcalloc(1, sizeof(*p));
	p->ix = ix;
	p->sh = sh;
	p->ncls = nclasses;
	r = settle_opts(&p->o, o);
	if (r == 0)
		r = group_samples(p, class_of);
	eo = (struct echo_policy_opts){p->o.echo, p->o.mode, p->o.window,
				       p->o.seed};
	if (r == 0 && !(p->ep = echo_policy_new(nclasses, &eo)))
		r = -EINVAL;
	if (r < 0)
		goto fail;
	/* The stream's draws come from another sequence than the policy's. */
	echo_rng_seed(&p->rng, p->o.seed ^ 0x5eed5eed5eed5eedULL);
	p->shuf = xcalloc(p->o.shuffle_buffer, sizeof(*p->shuf));
	p->shuf_count = xcalloc(nclasses, sizeof(*p->shuf_count));
	init_sync(p);
	begin_pass(p);
	r = -pthread_create(&p->thread, NULL, streamer_main, p);
	if (r < 0)
		goto fail;
	p->started = true;
	return p;
fail:
	destroy(p);
	errno = -r;
	return NULL;
}

void pool_cancel(struct pool *p)
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
	pthread_mutex_lock(&p->lock);
	p->stop = true;
	for (uint32_t c = 0; c < p->ncls; c++)
		pthread_cond_broadcast(&p->cls_cv[c]);
	pthread_cond_broadcast(&p->room_cv);
	while (p->active)
		pthread_cond_wait(&p->idle_cv, &p->lock);
	pthread_mutex_unlock(&p->lock);
	if (p->started)
		pthread_join(p->thread, NULL);
	destroy(p);
}

/* ---- readers ---- */

/* Wait for class cls until dl, counting stall time. True on timeout. */
static bool wait_class(struct pool *p, uint32_t cls,
		       const struct timespec *dl)
{
	double t0 = now_mono();
	int r;

	p->waiters++;
	pthread_cond_signal(&p->room_cv); /* fixed mode may now evict */
	r = pthread_cond_timedwait(&p->cls_cv[cls], &p->lock, dl);
	p->waiters--;
	p->stall_s += now_mono() - t0;
	return r == ETIMEDOUT;
}

static int take_locked(struct pool *p, uint32_t cls, struct echo_take *t)
{
	struct timespec dl = deadline_after(p->o.wait_s);
	bool late = false;

	for (;;) {
		int r;
		if (p->stop)
			return -ESHUTDOWN;
		/* A buffered sample of the class is ready: fresh before echo. */
		if (echo_policy_ready(p->ep, cls) == 0)
			buffer_pull(p, cls);
		r = echo_policy_take(p->ep, cls, t);
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
			pthread_cond_broadcast(&p->cls_cv[cls]);
	}
	if (--p->active == 0 && p->stop)
		pthread_cond_broadcast(&p->idle_cv);
	pthread_mutex_unlock(&p->lock);
	return r;
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
	pthread_cond_broadcast(&p->cls_cv[rf->e->cls]);
	put_entry(p, rf->e);
	pthread_mutex_unlock(&p->lock);
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
			pthread_cond_broadcast(&p->cls_cv[c]);
		pthread_cond_signal(&p->room_cv);
	}
	pthread_mutex_unlock(&p->lock);
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
