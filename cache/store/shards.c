/* shards.c - shard data for readers: byte ranges served from the disk cache,
 * whole shards fetched in the background (see the DESIGN note in shards.h).
 *
 * Per-shard states (slot.state, sh->lock):
 *   NONE      nothing known; a read looks in the store, else queues a fetch
 *   QUEUED    in the FIFO, waiting for a worker
 *   FETCHING  a worker streams it; with a store writer (slot.wr), bytes below
 *             wr->avail can be read back while the rest arrives
 *   CACHED    complete in the store; slot.c is the pinned entry, or NULL when
 *             unpinned (the next read looks it up again)
 *   FAILED    fetch failed for good; reads fail fast until slot.until
 *   UNCACHED  the store can't take it; reads use range GETs (until slot.until
 *             when a store exists, then the cache is tried again)
 *
 * Readers use a pinned entry or a writer outside the lock, so both are
 * reference counted (cref.users / wref.users). A cref that is replaced
 * (corrupt) or unpinned (too many pins) is "retired" and released by its last
 * user. A worker finishing a writer first waits for its users to leave.
 * At most max_pinned entries stay pinned (least recently read ones are
 * unpinned) so the store can still evict what readers no longer use. */
#include "cache/store/shards.h"

#include "cache/store/store.h"
#include "common/log.h"
#include "common/util.h"
#include "fetch/net/http.h"
#include "fetch/format/index.h"

#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* Not an errno: "state changed, look again". */
#define AGAIN ((ssize_t)-0x40000000)

enum state { NONE, QUEUED, FETCHING, CACHED, FAILED, UNCACHED };

struct cref {
	struct store_entry *e;
	unsigned users;
	bool retired;
};

struct wref {
	struct store_writer *w;
	double started;  /* when the stream began, for its rate */
	uint64_t avail; /* bytes readable through w */
	unsigned users;
	bool closing; /* worker is committing: no new users */
};

struct slot {
	enum state state;
	struct cref *c;
	struct wref *wr;
	double until;
	double queued_at; /* when it entered the queue */
	uint64_t last_use;
	unsigned waiters;
	pthread_cond_t cond; /* state, avail or users changed */
};

struct shards {
	const struct index *ix;
	struct http *h;
	struct store *st;
	double retry_failed_s, read_timeout_s;
	double range_after_s; /* 0: readers always wait for the stream */
	unsigned max_pinned;
	pthread_t *threads;
	unsigned nthreads;
	/* Everything below is guarded by lock (lock order: this lock, then the
	 * store's). */
	pthread_mutex_t lock;
	pthread_cond_t work; /* queue not empty, or stop */
	struct slot *slots;
	uint32_t *queue; /* ring of nshards */
	size_t qhead, qlen;
	unsigned npinned, nfetching;
	uint64_t use_clock;
	bool stop;
	struct shards_stats stats;
};

static size_t nshards(const struct shards *sh)
{
	return sh->ix->nshards;
}

static void wake(struct slot *s)
{
	if (s->waiters)
		pthread_cond_broadcast(&s->cond);
}

static void enqueue(struct shards *sh, uint32_t n)
{
	sh->queue[(sh->qhead + sh->qlen) % nshards(sh)] = n;
	sh->qlen++;
	sh->slots[n].state = QUEUED;
	sh->slots[n].queued_at = now_mono();
	pthread_cond_signal(&sh->work);
}

/* With range_after_s set, a reader waiting for a stream switches to a range
 * GET of its own bytes when the shard has sat in the queue that long, or
 * the stream, after that long, would take over RANGE_ETA_S to reach them. */
#define RANGE_ETA_S 2.0
#define RANGE_RECHECK_S 0.25

/* ---- pinned entries (lock held) ---- */

static void cref_release(struct cref *c)
{
	if (c->retired && c->users == 0) {
		store_put(c->e);
		free(c);
	}
}

static void retire(struct shards *sh, struct slot *s)
{
	struct cref *c = s->c;
	if (!c)
		return;
	s->c = NULL;
	sh->npinned--;
	c->retired = true;
	cref_release(c);
}

/* Unpin the least recently read entry (not `keep`), or all of them (entries
 * in use are released by their last reader, a moment later). */
static void unpin_some(struct shards *sh, uint32_t keep, bool all)
{
	struct slot *best = NULL;
	for (size_t i = 0; i < nshards(sh); i++) {
		struct slot *s = &sh->slots[i];
		if (!s->c || i == keep)
			continue;
		if (all)
			retire(sh, s);
		else if (!best || s->last_use < best->last_use)
			best = s;
	}
	if (best)
		retire(sh, best);
}

/* Make e (pinned by the caller) the shard's cache entry. */
static void attach(struct shards *sh, uint32_t n, struct store_entry *e)
{
	struct slot *s = &sh->slots[n];
	if (s->c) {
		store_put(e);
	} else {
		s->c = xcalloc(1, sizeof(*s->c));
		s->c->e = e;
		sh->npinned++;
		if (sh->npinned > sh->max_pinned)
			unpin_some(sh, n, false);
	}
	s->state = CACHED;
	wake(s);
}

/* ---- state changes by workers ---- */

static void log_failure(struct shards *sh, uint32_t n, int err)
{
	char red[512];
	http_redact(sh->ix->shards[n].url, red, sizeof(red));
	log_warn("shard %u (%s) failed: %s", n, red, strerror(-err));
}

/* Lock held. */
static void set_failed(struct shards *sh, uint32_t n)
{
	struct slot *s = &sh->slots[n];
	s->state = FAILED;
	s->until = now_mono() + sh->retry_failed_s;
	sh->stats.failed_shards++;
	wake(s);
}

/* Lock held. */
static void set_uncached(struct shards *sh, uint32_t n)
{
	struct slot *s = &sh->slots[n];
	s->state = UNCACHED;
	s->until = now_mono() + sh->retry_failed_s;
	wake(s);
}

/* ---- the worker ---- */

struct sink_ctx {
	struct shards *sh;
	struct slot *s;
	struct wref *wr;
	int store_err; /* store_write failed: not the server's fault */
};

static int sink(void *ud, const void *data, size_t len)
{
	struct sink_ctx *x = ud;
	int r = store_write(x->wr->w, data, len);
	pthread_mutex_lock(&x->sh->lock);
	if (x->sh->stop) {
		r = -ECANCELED;
	} else if (r) {
		x->store_err = r;
	} else {
		x->wr->avail += len;
		x->sh->stats.fetched_bytes += len;
		wake(x->s);
	}
	pthread_mutex_unlock(&x->sh->lock);
	return r;
}

/* Lock held. Stop new readers of wr and wait for the current ones. */
static void close_writer(struct shards *sh, struct slot *s, struct wref *wr)
{
	wr->closing = true;
	s->waiters++;
	while (wr->users)
		pthread_cond_wait(&s->cond, &sh->lock);
	s->waiters--;
	s->wr = NULL;
}

static struct store_writer *begin_writer(struct shards *sh,
					 const struct index_shard *is)
{
	struct store_writer *w;
	if (!sh->st)
		return NULL;
	w = store_begin(sh->st, is->url, is->etag, is->size);
	/* Our own pins may be what keeps the store from evicting: drop them
	 * and give readers still holding one a moment to let go. */
	for (int i = 0; !w && errno == ENOSPC && i < 3; i++) {
		pthread_mutex_lock(&sh->lock);
		unpin_some(sh, UINT32_MAX, true);
		pthread_mutex_unlock(&sh->lock);
		if (i)
			nanosleep(&(struct timespec){0, 20000000L}, NULL);
		w = store_begin(sh->st, is->url, is->etag, is->size);
	}
	return w;
}

/* Stream shard n into a store writer; readers follow wr->avail. */
static void fetch_cached(struct shards *sh, uint32_t n, struct store_writer *w)
{
	const struct index_shard *is = &sh->ix->shards[n];
	struct slot *s = &sh->slots[n];
	struct wref *wr = xcalloc(1, sizeof(*wr));
	struct sink_ctx x = {sh, s, wr, 0};
	struct store_entry *e = NULL;
	int r;

	wr->w = w;
	wr->started = now_mono();
	pthread_mutex_lock(&sh->lock);
	s->wr = wr;
	pthread_mutex_unlock(&sh->lock);
	r = http_stream(sh->h, is->url, is->etag, is->size, sink, &x);
	pthread_mutex_lock(&sh->lock);
	close_writer(sh, s, wr);
	pthread_mutex_unlock(&sh->lock);
	if (r == 0 && !(e = store_commit(w)))
		x.store_err = -errno;
	else if (r != 0)
		store_abort(w);
	free(wr);
	pthread_mutex_lock(&sh->lock);
	sh->nfetching--;
	if (e) {
		sh->stats.fetched_shards++;
		attach(sh, n, e);
	} else if (sh->stop) {
		s->state = NONE;
	} else if (x.store_err) {
		set_uncached(sh, n);
	} else {
		set_failed(sh, n);
	}
	pthread_mutex_unlock(&sh->lock);
	if (!e && !x.store_err && r != -ECANCELED)
		log_failure(sh, n, r);
}

static void fetch_one(struct shards *sh, uint32_t n)
{
	const struct index_shard *is = &sh->ix->shards[n];
	struct store_entry *e = NULL;
	struct store_writer *w;

	/* A reader or an earlier mount may have cached it already. */
	if (sh->st)
		e = store_get(sh->st, is->url, is->etag, is->size);
	if (!e && (w = begin_writer(sh, is)) != NULL) {
		fetch_cached(sh, n, w);
		return;
	}
	/* Another mount sharing the cache fetched it while we waited. */
	if (!e && sh->st && errno == EEXIST)
		e = store_get(sh->st, is->url, is->etag, is->size);
	pthread_mutex_lock(&sh->lock);
	sh->nfetching--;
	if (e)
		attach(sh, n, e);
	else
		set_uncached(sh, n);
	pthread_mutex_unlock(&sh->lock);
}

static void *worker_main(void *arg)
{
	struct shards *sh = arg;
	pthread_mutex_lock(&sh->lock);
	while (!sh->stop) {
		uint32_t n;
		if (sh->qlen == 0) {
			pthread_cond_wait(&sh->work, &sh->lock);
			continue;
		}
		n = sh->queue[sh->qhead];
		sh->qhead = (sh->qhead + 1) % nshards(sh);
		sh->qlen--;
		sh->slots[n].state = FETCHING;
		sh->nfetching++;
		pthread_mutex_unlock(&sh->lock);
		fetch_one(sh, n);
		pthread_mutex_lock(&sh->lock);
	}
	pthread_mutex_unlock(&sh->lock);
	return NULL;
}

/* ---- readers (each step: lock held on entry and exit) ---- */

struct req {
	uint32_t n;
	uint64_t off;
	size_t len;
	void *buf;
	double deadline;
	bool waited;
	bool ranged; /* a range GET was tried for it already */
};

static ssize_t wait_slot(struct shards *sh, struct slot *s, struct req *q)
{
	struct timespec ts;
	double d = q->deadline, left = d - now_mono();
	int r;

	if (left <= 0)
		return -ETIMEDOUT;
	if (sh->range_after_s > 0 && left > RANGE_RECHECK_S && !q->ranged)
		left = RANGE_RECHECK_S; /* look again: a range GET may pay */
	clock_gettime(CLOCK_MONOTONIC, &ts);
	ts.tv_sec += (time_t)left;
	ts.tv_nsec += (long)((left - (double)(time_t)left) * 1e9);
	if (ts.tv_nsec >= 1000000000L) {
		ts.tv_sec++;
		ts.tv_nsec -= 1000000000L;
	}
	q->waited = true;
	s->waiters++;
	r = pthread_cond_timedwait(&s->cond, &sh->lock, &ts);
	s->waiters--;
	return r == ETIMEDOUT && now_mono() >= d ? -ETIMEDOUT : AGAIN;
}

/* NONE: look in the store (lock dropped), else queue a fetch. */
static ssize_t step_none(struct shards *sh, struct slot *s, struct req *q)
{
	const struct index_shard *is = &sh->ix->shards[q->n];
	struct store_entry *e;

	if (!sh->st) {
		s->state = UNCACHED;
		s->until = 1e300; /* no store: for good */
		return AGAIN;
	}
	pthread_mutex_unlock(&sh->lock);
	e = store_get(sh->st, is->url, is->etag, is->size);
	pthread_mutex_lock(&sh->lock);
	if (e && (s->state == NONE || s->state == CACHED))
		attach(sh, q->n, e);
	else if (e)
		store_put(e);
	else if (s->state == NONE)
		enqueue(sh, q->n);
	else if (s->state == CACHED && !s->c)
		s->state = NONE; /* evicted since */
	return AGAIN;
}

/* Lock held. A corrupt entry: drop it and fetch the shard again. */
static void refetch(struct shards *sh, struct slot *s, uint32_t n)
{
	store_drop(s->c->e);
	retire(sh, s);
	sh->stats.refetches++;
	enqueue(sh, n);
}

static ssize_t step_cached(struct shards *sh, struct slot *s, struct req *q)
{
	struct cref *c = s->c;
	ssize_t r;

	if (!c) {
		s->state = NONE;
		return step_none(sh, s, q);
	}
	c->users++;
	s->last_use = ++sh->use_clock;
	pthread_mutex_unlock(&sh->lock);
	r = store_pread(c->e, q->buf, q->len, q->off);
	pthread_mutex_lock(&sh->lock);
	c->users--;
	if (r == -EBADMSG && s->c == c)
		refetch(sh, s, q->n); /* retires and releases c */
	else
		cref_release(c);
	if (r == -EBADMSG)
		return AGAIN;
	if (r >= 0 && q->waited)
		sh->stats.misses++;
	else if (r >= 0)
		sh->stats.hits++;
	return r;
}

static ssize_t step_fetching(struct shards *sh, struct slot *s, struct req *q)
{
	struct wref *wr = s->wr;
	ssize_t r;

	if (!wr || wr->closing || wr->avail < q->off + q->len)
		return wait_slot(sh, s, q);
	wr->users++;
	pthread_mutex_unlock(&sh->lock);
	r = store_writer_pread(wr->w, q->buf, q->len, q->off);
	pthread_mutex_lock(&sh->lock);
	if (--wr->users == 0)
		wake(s);
	if (r >= 0 && (size_t)r != q->len)
		r = -EIO;
	if (r >= 0)
		sh->stats.misses++;
	return r;
}

static ssize_t step_uncached(struct shards *sh, struct slot *s, struct req *q)
{
	const struct index_shard *is = &sh->ix->shards[q->n];
	int r;

	if (now_mono() >= s->until) {
		s->state = NONE; /* maybe the store has room again */
		return AGAIN;
	}
	pthread_mutex_unlock(&sh->lock);
	r = http_get_range(sh->h, is->url, is->etag, q->off, q->len, q->buf);
	pthread_mutex_lock(&sh->lock);
	sh->stats.range_reads++;
	if (r == 0)
		return (ssize_t)q->len;
	if (s->state == UNCACHED) {
		set_failed(sh, q->n);
		pthread_mutex_unlock(&sh->lock);
		log_failure(sh, q->n, r);
		pthread_mutex_lock(&sh->lock);
	}
	return -EIO;
}

/* Lock held. Would this reader wait long for the whole-shard stream? A
 * shard queued for a while (every worker busy), or a stream whose rate
 * puts the wanted bytes more than RANGE_ETA_S away: shuffled readers over
 * a slow link would otherwise wait for half a shard per file. */
static bool worth_a_range(const struct shards *sh, const struct slot *s,
			  const struct req *q)
{
	double now = now_mono(), el, rate;

	if (q->ranged || sh->range_after_s <= 0)
		return false;
	if (s->state == QUEUED)
		return now - s->queued_at > sh->range_after_s;
	if (!s->wr || s->wr->avail >= q->off + q->len)
		return false;
	el = now - s->wr->started;
	if (el < sh->range_after_s)
		return false;
	rate = (double)s->wr->avail / el;
	/* A stalled stream (nothing yet) says the server is stuck, not
	 * slow: a range GET would hang the same way. */
	return rate > 0 &&
	       (double)(q->off + q->len - s->wr->avail) > rate * RANGE_ETA_S;
}

/* Lock held (dropped meanwhile). Just this reader's bytes with a range
 * GET while the stream goes on; on failure the reader waits for the
 * stream as before. */
static ssize_t step_range(struct shards *sh, struct req *q)
{
	const struct index_shard *is = &sh->ix->shards[q->n];
	int r;

	q->ranged = true;
	pthread_mutex_unlock(&sh->lock);
	r = http_get_range(sh->h, is->url, is->etag, q->off, q->len, q->buf);
	pthread_mutex_lock(&sh->lock);
	if (r != 0)
		return AGAIN;
	sh->stats.range_reads++;
	return (ssize_t)q->len;
}

static ssize_t step(struct shards *sh, struct req *q)
{
	struct slot *s = &sh->slots[q->n];

	switch (s->state) {
	case NONE:
		return step_none(sh, s, q);
	case QUEUED:
		if (worth_a_range(sh, s, q))
			return step_range(sh, q);
		return wait_slot(sh, s, q);
	case FETCHING:
		if (worth_a_range(sh, s, q))
			return step_range(sh, q);
		return step_fetching(sh, s, q);
	case CACHED:
		return step_cached(sh, s, q);
	case UNCACHED:
		return step_uncached(sh, s, q);
	case FAILED:
		if (now_mono() < s->until)
			return -EIO;
		s->state = NONE;
		return AGAIN;
	}
	return -EINVAL;
}

ssize_t shards_read(struct shards *sh, uint32_t shard, uint64_t off, size_t len,
		    void *buf)
{
	struct req q = {shard, off, len, buf, 0, false, false};
	uint64_t size;
	ssize_t r;

	if (!sh)
		return -EINVAL;
	if (shard >= nshards(sh)) {
		pthread_mutex_lock(&sh->lock);
		sh->stats.read_errors++;
		pthread_mutex_unlock(&sh->lock);
		return -EINVAL;
	}
	size = sh->ix->shards[shard].size;
	if (off >= size || len == 0)
		return 0;
	if (q.len > size - off)
		q.len = (size_t)(size - off);
	q.deadline = now_mono() + sh->read_timeout_s;
	pthread_mutex_lock(&sh->lock);
	do {
		r = sh->stop ? -ECANCELED : step(sh, &q);
	} while (r == AGAIN);
	if (r < 0)
		sh->stats.read_errors++;
	pthread_mutex_unlock(&sh->lock);
	return r;
}

void shards_prefetch(struct shards *sh, uint32_t shard)
{
	struct slot *s;
	if (!sh || !sh->st || shard >= nshards(sh))
		return;
	pthread_mutex_lock(&sh->lock);
	s = &sh->slots[shard];
	if (s->state == NONE || (s->state == FAILED && now_mono() >= s->until))
		enqueue(sh, shard);
	pthread_mutex_unlock(&sh->lock);
}

int shards_is_cached(struct shards *sh, uint32_t shard)
{
	const struct index_shard *is;
	enum state st;
	bool pinned;

	if (!sh || shard >= nshards(sh))
		return 0;
	pthread_mutex_lock(&sh->lock);
	st = sh->slots[shard].state;
	pinned = sh->slots[shard].c != NULL;
	pthread_mutex_unlock(&sh->lock);
	if (pinned || !sh->st || (st != NONE && st != CACHED))
		return pinned;
	/* Not looked at yet (maybe an earlier or another mount cached it), or
	 * unpinned and maybe evicted since. A query for statistics: it must
	 * not pin, nor count as a use in the eviction order. */
	is = &sh->ix->shards[shard];
	return store_contains(sh->st, is->url, is->etag, is->size);
}

void shards_get_stats(struct shards *sh, struct shards_stats *out)
{
	memset(out, 0, sizeof(*out));
	if (!sh)
		return;
	pthread_mutex_lock(&sh->lock);
	*out = sh->stats;
	out->queued = sh->qlen;
	out->active = sh->nfetching;
	pthread_mutex_unlock(&sh->lock);
}

/* ---- life cycle ---- */

static void init_slots(struct shards *sh)
{
	pthread_condattr_t ca;
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	for (size_t i = 0; i < nshards(sh); i++)
		pthread_cond_init(&sh->slots[i].cond, &ca);
	pthread_condattr_destroy(&ca);
}

struct shards *shards_new(const struct index *ix, struct http *h,
			  struct store *st, const struct shards_opts *o)
{
	struct shards *sh;
	unsigned workers = o && o->workers ? o->workers : 4;

	if (!ix || !h) {
		errno = EINVAL;
		return NULL;
	}
	sh = xcalloc(1, sizeof(*sh));
	sh->ix = ix;
	sh->h = h;
	sh->st = st;
	sh->retry_failed_s =
		o && o->retry_failed_s > 0 ? o->retry_failed_s : 30;
	sh->read_timeout_s =
		o && o->read_timeout_s > 0 ? o->read_timeout_s : 120;
	sh->range_after_s = o && o->range_after_s > 0 ? o->range_after_s : 0;
	sh->max_pinned = workers * 8 < 32 ? 32 : workers * 8;
	sh->slots = xcalloc(ix->nshards ? ix->nshards : 1, sizeof(*sh->slots));
	sh->queue = xcalloc(ix->nshards ? ix->nshards : 1, sizeof(*sh->queue));
	pthread_mutex_init(&sh->lock, NULL);
	pthread_cond_init(&sh->work, NULL);
	init_slots(sh);
	sh->threads = xcalloc(workers, sizeof(*sh->threads));
	for (; sh->nthreads < workers; sh->nthreads++) {
		int r = pthread_create(&sh->threads[sh->nthreads], NULL,
				       worker_main, sh);
		if (r) {
			shards_free(sh);
			errno = r;
			return NULL;
		}
	}
	return sh;
}

/* No read may be in progress. */
void shards_free(struct shards *sh)
{
	if (!sh)
		return;
	pthread_mutex_lock(&sh->lock);
	sh->stop = true;
	pthread_cond_broadcast(&sh->work);
	pthread_mutex_unlock(&sh->lock);
	/* A worker may be waiting for another mount's fetch of its shard. */
	store_interrupt(sh->st);
	for (unsigned i = 0; i < sh->nthreads; i++)
		pthread_join(sh->threads[i], NULL);
	for (size_t i = 0; i < nshards(sh); i++) {
		retire(sh, &sh->slots[i]);
		pthread_cond_destroy(&sh->slots[i].cond);
	}
	pthread_cond_destroy(&sh->work);
	pthread_mutex_destroy(&sh->lock);
	free(sh->threads);
	free(sh->slots);
	free(sh->queue);
	free(sh);
}
