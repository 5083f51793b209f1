/* shards.c - shard data for readers: byte ranges served from the disk cache,
 * whole shards fetched in the background (see the DESIGN note in shards.h).
 *
 * This file: the read path (the per-state steps below, checksummed reads),
 * pinned entries, pass tracking and the life cycle. The fetch workers are
 * in shards_fetch.c, zero-copy views in shards_view.c; shards_int.h holds
 * the structs they share.
 *
 * Per-shard states (slot.state, sh->lock):
 *   NONE      nothing known; a read looks in the store, else queues a fetch
 *   QUEUED    in the FIFO, waiting for a worker
 *   FETCHING  a worker streams it; with a store writer (slot.wr), bytes below
 *             wr->avail can be read back (copied, or a whole sample as a
 *             zero-copy view) while the rest arrives
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
 * unpinned) so the store can still evict what readers no longer use.
 *
 * Checksums (index format 2, cache/store/verify.h): a read is split at
 * sample boundaries; each sample's whole member is read once through the
 * state machine above, hashed and compared with the index before any of it
 * is served (then kept a while for the rest of the file). A mismatch drops
 * the copy it came from (cache entry dropped and fetched again, a stream
 * marked bad so nobody reads it further) and the member is read once more;
 * a second mismatch is EIO. A stream is also hashed whole and committed to
 * the store only if it matches; a shard whose copies failed twice in a row
 * is marked FAILED. */
#include "cache/store/shards.h"

#include "cache/store/shards_int.h"

#include "cache/store/store.h"
#include "cache/store/verify.h"
#include "common/deadline.h"
#include "common/lockcheck.h"
#include "common/log.h"
#include "common/util.h"
#include "common/workq.h"
#include "fetch/format/index.h"
#include "fetch/net/http.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

/* ---- the fetch queue and pinned entries (lock held) ---- */

/* Lock held. A slot is queued at most once (state QUEUED until a worker
 * takes it), so the unbounded queue holds at most nshards items. */
void shards_enqueue(struct shards *sh, uint32_t n)
{
	ASSERT_HELD(&sh->lock);
	struct slot *s = &sh->slots[n];
	/* Refused only once shards_free began: readers then see stop. */
	if (workq_submit(sh->wq, &s->item, WORKQ_NOWAIT) != 0)
		return;
	s->state = QUEUED;
	s->queued_at = now_mono();
}

void shards_cref_release(struct cref *c)
{
	if (c->retired && c->users == 0) {
		store_put(c->e);
		free(c);
	}
}

void shards_retire(struct shards *sh, struct slot *s)
{
	struct cref *c = s->c;
	if (!c)
		return;
	s->c = NULL;
	sh->npinned--;
	c->retired = true;
	shards_cref_release(c);
}

/* Unpin the least recently read entry (not `keep`), or all of them (entries
 * in use are released by their last reader, a moment later). */
void shards_unpin_some(struct shards *sh, uint32_t keep, bool all)
{
	struct slot *best = NULL;
	for (size_t i = 0; i < nshards(sh); i++) {
		struct slot *s = &sh->slots[i];
		if (!s->c || i == keep)
			continue;
		if (all)
			shards_retire(sh, s);
		else if (!best || s->last_use < best->last_use)
			best = s;
	}
	if (best)
		shards_retire(sh, best);
}

/* Make e (pinned by the caller) the shard's cache entry. */
void shards_attach(struct shards *sh, uint32_t n, struct store_entry *e)
{
	struct slot *s = &sh->slots[n];
	if (s->c) {
		store_put(e);
	} else {
		s->c = xcalloc(1, sizeof(*s->c));
		s->c->e = e;
		sh->npinned++;
		if (sh->npinned > sh->max_pinned)
			shards_unpin_some(sh, n, false);
	}
	s->state = CACHED;
	s->wants = 0;
	wake(s);
}

/* ---- the current pass (shards_track) ---- */

/* After the store refused a shard to keep what the pass still needs, its
 * reads take range GETs without asking the store again for this long. */

static int cmp_keyed(const void *a, const void *b)
{
	const struct keyed *x = a, *y = b;
	return x->hash < y->hash ? -1 : x->hash > y->hash;
}

/* The store's hint, under the store's lock: is the entry of `hash` one of
 * our shards with samples the current pass has not read yet? Lock free. */
static int pass_needed(void *ud, uint64_t hash)
{
	const struct shards *sh = ud;
	const struct pass *p = sh->pass;
	struct keyed k = {hash, 0};
	const struct keyed *f;

	f = bsearch(&k, p->keys, nshards(sh), sizeof(k), cmp_keyed);
	return f && atomic_load_explicit(&p->left[f->shard],
					 memory_order_relaxed) > 0;
}

/* p->lock held. Every sample of the view was read: a new pass begins. */
static void pass_restart(struct shards *sh, struct pass *p)
{
	ASSERT_HELD(&p->lock);
	memset(p->seen, 0, sh->ix->nsamples);
	for (size_t g = 0; g < nshards(sh); g++)
		atomic_store_explicit(&p->left[g], p->view_count[g],
				      memory_order_relaxed);
	p->view_left = p->view_total;
}

/* The pass has read all of shard g: unpin its entry so that the store
 * evicts it before any the pass still needs. */
static void pass_finished(struct shards *sh, uint32_t g)
{
	struct slot *s = &sh->slots[g];

	pthread_mutex_lock(&sh->lock);
	if (s->state == CACHED)
		shards_retire(sh, s);
	pthread_mutex_unlock(&sh->lock);
}

/* Lock held. Should a read of shard n that is not cached take a range GET
 * instead of admitting the shard? Yes when the pass is tracked and the
 * store has no room without evicting shards the pass still needs. */
static bool bypass_store(struct shards *sh, struct slot *s, uint32_t n)
{
	ASSERT_HELD(&sh->lock);
	if (!sh->pass || !sh->st)
		return false;
	if (now_mono() < s->bypass_until)
		return true;
	return !store_fits(sh->st, sh->ix->shards[n].size);
}

/* ---- readers (each step: lock held on entry and exit) ---- */

struct req {
	uint32_t n;
	uint64_t off;
	size_t len;
	void *buf;
	struct deadline deadline;
	bool waited;
	bool ranged; /* a range GET was tried for it already */
	bool net;    /* it waited for the network (net_wait_s) */
	bool wanted; /* counted in its shard's wants (demand first) */
	bool peer;   /* reads another mount's download (demand first) */
};

static ssize_t wait_slot(struct shards *sh, struct slot *s, struct req *q)
{
	ASSERT_HELD(&sh->lock);
	struct deadline until = q->deadline;
	int r;

	if (deadline_expired(&q->deadline))
		return -ETIMEDOUT;
	/* Look again soon: a range GET may pay. */
	if (sh->range_after_s > 0 && !q->ranged)
		until = deadline_min(until, deadline_in(RANGE_RECHECK_S));
	q->waited = true;
	q->net = true;
	s->waiters++;
	r = cond_wait_until(&s->cond, &sh->lock, &until);
	s->waiters--;
	if (r == -ETIMEDOUT && deadline_expired(&q->deadline))
		return -ETIMEDOUT;
	return AGAIN;
}

/* Lock held (dropped meanwhile). Just q's bytes with a range GET, the
 * shard left uncached; a failure fails the shard if it is still in state
 * `st`. `bypass`: the store was not asked to take it (admission_bypass). */
static ssize_t range_read(struct shards *sh, struct slot *s, struct req *q,
			  enum state st, bool bypass)
{
	ASSERT_HELD(&sh->lock);
	const struct index_shard *is = &sh->ix->shards[q->n];
	int r;

	q->net = true;
	pthread_mutex_unlock(&sh->lock);
	r = http_get_range_of(sh->h, is->url, is->etag, is->size, q->off,
			      q->len, q->buf);
	pthread_mutex_lock(&sh->lock);
	sh->stats.range_reads++;
	if (r == 0) {
		sh->stats.bypassed += bypass;
		return (ssize_t)q->len;
	}
	if (s->state == st) {
		shards_set_failed(sh, q->n);
		pthread_mutex_unlock(&sh->lock);
		shards_log_failure(sh, q->n, r);
		pthread_mutex_lock(&sh->lock);
	}
	return -EIO;
}

static ssize_t step_demand(struct shards *sh, struct slot *s, struct req *q);

/* NONE: look in the store (lock dropped), else queue a fetch (or, demand
 * first, count the wait and maybe fetch just q's bytes). */
static ssize_t step_none(struct shards *sh, struct slot *s, struct req *q)
{
	ASSERT_HELD(&sh->lock);
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
		shards_attach(sh, q->n, e);
	else if (e)
		store_put(e);
	else if (s->state == NONE && bypass_store(sh, s, q->n))
		return range_read(sh, s, q, NONE, true);
	else if (s->state == NONE && sh->demand)
		return step_demand(sh, s, q);
	else if (s->state == NONE)
		shards_enqueue(sh, q->n);
	else if (s->state == CACHED && !s->c)
		s->state = NONE; /* evicted since */
	return AGAIN;
}

/* Lock held. A corrupt entry: drop it and fetch the shard again. */
static void refetch(struct shards *sh, struct slot *s, uint32_t n)
{
	ASSERT_HELD(&sh->lock);
	store_drop(s->c->e);
	shards_retire(sh, s);
	sh->stats.refetches++;
	shards_enqueue(sh, n);
}

static ssize_t step_cached(struct shards *sh, struct slot *s, struct req *q)
{
	ASSERT_HELD(&sh->lock);
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
		shards_cref_release(c);
	if (r == -EBADMSG)
		return AGAIN;
	if (r >= 0 && q->waited)
		sh->stats.misses++;
	else if (r >= 0)
		sh->stats.hits++;
	return r;
}

/* Between looks at another mount's partial file for a sample. */
#define PEER_POLL_S 0.05

/* Lock held (dropped meanwhile). Our worker waits for another mount's
 * fetch of this shard (store_begin): serve a whole sample from that
 * mount's temp file once its bytes are there, i.e. once they match the
 * index's sum (unwritten bytes are zeros and do not), else look again a
 * little later. Without sums, or for a read that is not one whole sample,
 * wait for the fetch as before. */
static ssize_t step_peer(struct shards *sh, struct slot *s, struct req *q)
{
	ASSERT_HELD(&sh->lock);
	const struct index_shard *is = &sh->ix->shards[q->n];
	uint64_t stop;
	size_t i =
		sh->vf ? verify_find(sh->vf, q->n, q->off, &stop) : VERIFY_NONE;
	struct deadline until;
	ssize_t r = -1;
	int fd;

	if (i == VERIFY_NONE || sh->ix->samples[i].offset != q->off ||
	    sh->ix->samples[i].size != q->len)
		return wait_slot(sh, s, q);
	pthread_mutex_unlock(&sh->lock);
	fd = store_peer_open(sh->st, is->url, is->etag, is->size);
	if (fd >= 0) {
		r = pread(fd, q->buf, q->len, (off_t)q->off);
		close(fd);
	}
	pthread_mutex_lock(&sh->lock);
	if (r == (ssize_t)q->len &&
	    verify_sample_ok(sh->vf, i, q->buf, q->len)) {
		sh->stats.peer_reads++;
		return r;
	}
	if (deadline_expired(&q->deadline))
		return -ETIMEDOUT;
	until = deadline_min(q->deadline, deadline_in(PEER_POLL_S));
	q->waited = true;
	q->net = true;
	s->waiters++;
	cond_wait_until(&s->cond, &sh->lock, &until);
	s->waiters--;
	return AGAIN;
}

static ssize_t step_fetching(struct shards *sh, struct slot *s, struct req *q)
{
	ASSERT_HELD(&sh->lock);
	struct wref *wr = s->wr;
	ssize_t r;

	if (!wr && sh->st)
		return step_peer(sh, s, q);
	if (!wr || wr->closing || wr->bad || wr->avail < q->off + q->len)
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
	ASSERT_HELD(&sh->lock);
	if (now_mono() >= s->until) {
		s->state = NONE; /* maybe the store has room again */
		return AGAIN;
	}
	return range_read(sh, s, q, UNCACHED, false);
}

/* Lock held. Would this reader wait long for the whole-shard stream? A
 * shard queued for a while (every worker busy), or a stream whose rate
 * puts the wanted bytes more than RANGE_ETA_S away: shuffled readers over
 * a slow link would otherwise wait for half a shard per file. */
static bool worth_a_range(const struct shards *sh, const struct slot *s,
			  const struct req *q)
{
	ASSERT_HELD(&sh->lock);
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
	ASSERT_HELD(&sh->lock);
	const struct index_shard *is = &sh->ix->shards[q->n];
	int r;

	q->ranged = true;
	q->net = true;
	pthread_mutex_unlock(&sh->lock);
	r = http_get_range_of(sh->h, is->url, is->etag, is->size, q->off,
			      q->len, q->buf);
	pthread_mutex_lock(&sh->lock);
	if (r != 0)
		return AGAIN;
	sh->stats.range_reads++;
	return (ssize_t)q->len;
}

/* Demand first (shards_demand.c): q's shard is not local. Its wait
 * counts toward the download order; its bytes come by a range GET when
 * that pays (one try: a failure waits for the shard), else from the
 * download. */
static ssize_t step_demand(struct shards *sh, struct slot *s, struct req *q)
{
	ASSERT_HELD(&sh->lock);
	int r;

	if (!q->wanted) {
		q->wanted = true;
		s->wants++;
	}
	shards_demand_schedule(sh);
	/* Another mount downloads the shard: its temp file, polled, until
	 * our own worker has a stream (a QUEUED slot's waiters are not woken
	 * when a worker takes it, so waiting on the slot would last until
	 * our worker's store_begin, blocked on that mount's fetch, returns
	 * with the shard complete). */
	if (q->peer && !s->wr)
		return step_peer(sh, s, q);
	if (!q->ranged && shards_demand_wants_range(sh, q->n, q->off, q->len)) {
		q->ranged = true;
		q->net = true;
		if (!s->wr && shards_demand_peer_busy(sh, q->n)) {
			q->peer = true;
			return step_peer(sh, s, q);
		}
		r = shards_demand_range(sh, q->n, q->off, q->len, q->buf);
		return r == 0 ? (ssize_t)q->len : AGAIN;
	}
	if (s->state == FETCHING)
		return step_fetching(sh, s, q);
	if (s->state == NONE || s->state == QUEUED)
		return wait_slot(sh, s, q);
	return AGAIN;
}

static ssize_t step(struct shards *sh, struct req *q)
{
	ASSERT_HELD(&sh->lock);
	struct slot *s = &sh->slots[q->n];

	switch (s->state) {
	case NONE:
		return step_none(sh, s, q);
	case QUEUED:
		if (sh->demand)
			return step_demand(sh, s, q);
		if (worth_a_range(sh, s, q))
			return step_range(sh, q);
		return wait_slot(sh, s, q);
	case FETCHING:
		if (sh->demand && s->wr)
			return step_demand(sh, s, q);
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

/* The bytes of q as they come, through the state machine. */
static ssize_t read_plain(struct shards *sh, struct req *q)
{
	double t0 = now_mono();
	ssize_t r;

	pthread_mutex_lock(&sh->lock);
	do {
		r = sh->stop ? -ECANCELED : step(sh, q);
	} while (r == AGAIN);
	if (q->net)
		sh->stats.net_wait_s += now_mono() - t0;
	pthread_mutex_unlock(&sh->lock);
	return r;
}

/* A sample's member did not match: drop the copy it most likely came from
 * so that the next read gets another one. */
static void sample_mismatch(struct shards *sh, uint32_t n, size_t i,
			    unsigned attempt)
{
	struct slot *s = &sh->slots[n];

	pthread_mutex_lock(&sh->lock);
	sh->stats.verify_errors++;
	if (s->state == CACHED && s->c) {
		s->bad_copies++;
		refetch(sh, s, n);
	} else if (s->state == FETCHING && s->wr)
		s->wr->bad = true; /* readers wait for the next copy */
	pthread_mutex_unlock(&sh->lock);
	shards_log_mismatch(sh, n, index_key(sh->ix, &sh->ix->samples[i]),
			    attempt + 1);
}

/* Sample i's whole member into buf (size bytes), checked; a mismatch drops
 * the copy and reads once more. 0, -EIO (two bad copies) or -errno. */
static int read_member(struct shards *sh, const struct req *q, size_t i,
		       uint8_t *buf)
{
	const struct index_sample *smp = &sh->ix->samples[i];

	for (unsigned attempt = 0; attempt < 2; attempt++) {
		struct req m = {.n = q->n,
				.off = smp->offset,
				.len = (size_t)smp->size,
				.buf = buf,
				.deadline = q->deadline};
		ssize_t r = m.len ? read_plain(sh, &m) : 0;
		if (r < 0)
			return (int)r;
		if (verify_sample_ok(sh->vf, i, buf, (size_t)r))
			return 0;
		sample_mismatch(sh, q->n, i, attempt);
	}
	return -EIO;
}

/* len bytes at rel of sample i into dst, from checked bytes only: the whole
 * member is read and compared with the index first. A read of the whole
 * member (most are: FUSE reads of small files, the pool, preprocessing)
 * goes straight into dst; a part is served from a kept copy. */
static int read_sample(struct shards *sh, const struct req *q, size_t i,
		       uint64_t rel, size_t len, void *dst)
{
	size_t size = (size_t)sh->ix->samples[i].size;
	uint8_t *buf;
	int r;

	if (rel == 0 && len == size)
		return read_member(sh, q, i, dst); /* dst unused on error */
	if (verify_copy(sh->vf, i, rel, len, dst) == 0) {
		pthread_mutex_lock(&sh->lock);
		sh->stats.hits++;
		pthread_mutex_unlock(&sh->lock);
		return 0;
	}
	if (size > SHARDS_PART_SAMPLE_MAX) {
		/* The index says how big; a part of it still costs the whole
		 * member in memory (it is checked whole), so not any size. */
		log_counted("read",
			    "sample %s: a part of %zu bytes asked, but the "
			    "sample (%zu bytes) is over the %llu MiB checked "
			    "for a partial read; EFBIG",
			    index_key(sh->ix, &sh->ix->samples[i]), len, size,
			    (unsigned long long)(SHARDS_PART_SAMPLE_MAX >> 20));
		return -EFBIG;
	}
	if (!(buf = malloc(size + 1)))
		return -ENOMEM;
	r = read_member(sh, q, i, buf);
	if (r) {
		free(buf);
		return r;
	}
	memcpy(dst, buf + rel, len);
	verify_keep(sh->vf, i, buf, size);
	return 0;
}

/* q split at sample boundaries: sample bytes checked, the rest (tar
 * headers, other members) as they come. */
static ssize_t read_checked(struct shards *sh, const struct req *q)
{
	uint64_t pos = q->off, end = q->off + q->len, stop;
	uint8_t *out = q->buf;

	while (pos < end) {
		size_t i = verify_find(sh->vf, q->n, pos, &stop);
		size_t piece = (size_t)((stop < end ? stop : end) - pos);
		ssize_t r;

		if (i != VERIFY_NONE) {
			r = read_sample(sh, q, i,
					pos - sh->ix->samples[i].offset, piece,
					out + (pos - q->off));
		} else {
			struct req g = {.n = q->n,
					.off = pos,
					.len = piece,
					.buf = out + (pos - q->off),
					.deadline = q->deadline};
			r = read_plain(sh, &g);
			if (r >= 0)
				r = (size_t)r == piece ? 0 : -EIO;
		}
		if (r < 0)
			return r;
		pos += piece;
	}
	return (ssize_t)q->len;
}

ssize_t shards_read(struct shards *sh, uint32_t shard, uint64_t off, size_t len,
		    void *buf)
{
	struct req q = {.n = shard, .off = off, .len = len, .buf = buf};
	uint64_t size;
	ssize_t r;
	double old;
	struct slot *s;
	bool repeat;

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
	q.deadline = deadline_in(sh->read_timeout_s);
	/* range GETs made for this read end by its deadline too */
	old = http_thread_deadline(now_mono() + sh->read_timeout_s);
	s = &sh->slots[shard];
	/* The kernel repeats a read that timed out at once: fail the repeat
	 * at once too, so one read(2) waits read_timeout once, not twice. */
	pthread_mutex_lock(&sh->lock);
	repeat = s->tmo_at > 0 && s->tmo_off == off &&
		 now_mono() - s->tmo_at < TIMEOUT_REPEAT_S;
	pthread_mutex_unlock(&sh->lock);
	if (repeat)
		r = -ETIMEDOUT;
	else
		r = sh->vf ? read_checked(sh, &q) : read_plain(sh, &q);
	pthread_mutex_lock(&sh->lock);
	if (r == -ETIMEDOUT && !repeat) {
		s->tmo_at = now_mono();
		s->tmo_off = off;
		sh->stats.read_timeouts++;
	}
	if (r < 0)
		sh->stats.read_errors++;
	pthread_mutex_unlock(&sh->lock);
	http_thread_deadline(old);
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
		shards_enqueue(sh, shard);
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

int shards_all_local(struct shards *sh)
{
	if (!sh || !sh->st)
		return 0;
	for (size_t i = 0; i < nshards(sh); i++)
		if (!shards_is_cached(sh, (uint32_t)i))
			return 0;
	return 1;
}

/* ---- pass tracking (see shards_track) ---- */

static struct pass *pass_new(struct shards *sh, const uint32_t *samples,
			     size_t n)
{
	const struct index *ix = sh->ix;
	size_t ns = ix->nsamples ? ix->nsamples : 1;
	size_t ng = nshards(sh) ? nshards(sh) : 1;
	struct pass *p = xcalloc(1, sizeof(*p));

	p->seen = xcalloc(ns, 1);
	p->in_view = xcalloc(ns, 1);
	p->view_count = xcalloc(ng, sizeof(*p->view_count));
	p->left = xcalloc(ng, sizeof(*p->left));
	p->keys = xcalloc(ng, sizeof(*p->keys));
	for (size_t i = 0; i < n; i++) {
		uint32_t k = samples[i];
		if (k >= ix->nsamples || p->in_view[k])
			continue;
		p->in_view[k] = 1;
		p->view_count[ix->samples[k].shard]++;
		p->view_total++;
	}
	for (size_t g = 0; g < nshards(sh); g++) {
		const struct index_shard *is = &ix->shards[g];
		atomic_init(&p->left[g], 0);
		p->keys[g] = (struct keyed){
			store_key_hash(is->url, is->etag, is->size),
			(uint32_t)g};
	}
	qsort(p->keys, nshards(sh), sizeof(*p->keys), cmp_keyed);
	pthread_mutex_init(&p->lock, NULL);
	pthread_mutex_lock(&p->lock); /* p is not shared yet: for the check */
	pass_restart(sh, p);
	pthread_mutex_unlock(&p->lock);
	return p;
}

static void pass_free(struct pass *p)
{
	if (!p)
		return;
	pthread_mutex_destroy(&p->lock);
	free(p->seen);
	free(p->in_view);
	free(p->view_count);
	free(p->left);
	free(p->keys);
	free(p);
}

int shards_track(struct shards *sh, const uint32_t *samples, size_t n)
{
	if (!sh || sh->pass || (n && !samples))
		return -EINVAL;
	sh->pass = pass_new(sh, samples, n);
	store_set_needed(sh->st, pass_needed, sh);
	/* Exact mounts read each path's own sample: demand first pays. The
	 * echo pool streams whole shards in order and never calls this. */
	pthread_mutex_lock(&sh->lock);
	sh->demand = true;
	pthread_mutex_unlock(&sh->lock);
	return 0;
}

/* A pass ended: its readers' network wait becomes the last pass's, and
 * is logged, so that it can be read even where the stats are not. */
static void pass_wait_ended(struct shards *sh)
{
	double w;
	uint64_t n;

	pthread_mutex_lock(&sh->lock);
	w = sh->stats.net_wait_s - sh->wait_at_pass;
	sh->stats.net_wait_last_pass_s = w;
	sh->wait_at_pass = sh->stats.net_wait_s;
	pthread_mutex_unlock(&sh->lock);
	pthread_mutex_lock(&sh->pass->lock);
	n = sh->pass->passes;
	pthread_mutex_unlock(&sh->pass->lock);
	log_info("pass %llu read: readers waited %.1f s for the network",
		 (unsigned long long)n, w);
}

void shards_note(struct shards *sh, uint32_t sample)
{
	struct pass *p = sh ? sh->pass : NULL;
	bool done = false, ended = false;
	uint32_t g;

	if (!p || sample >= sh->ix->nsamples || !p->in_view[sample])
		return;
	g = sh->ix->samples[sample].shard;
	pthread_mutex_lock(&p->lock);
	if (!p->seen[sample]) {
		p->seen[sample] = 1;
		done = atomic_fetch_sub_explicit(&p->left[g], 1,
						 memory_order_relaxed) == 1;
		if (--p->view_left == 0) {
			p->passes++;
			pass_restart(sh, p);
			ended = true;
		}
	}
	pthread_mutex_unlock(&p->lock);
	if (ended) /* the network wait of the pass that ended */
		pass_wait_ended(sh);
	if (done)
		pass_finished(sh, g);
}

void shards_get_stats(struct shards *sh, struct shards_stats *out)
{
	memset(out, 0, sizeof(*out));
	if (!sh)
		return;
	pthread_mutex_lock(&sh->lock);
	*out = sh->stats;
	out->queued = workq_pending(sh->wq);
	out->active = sh->nfetching;
	out->range_bytes = sh->range_bytes;
	out->net_wait_pass_s = sh->stats.net_wait_s - sh->wait_at_pass;
	pthread_mutex_unlock(&sh->lock);
	if (sh->pass) {
		pthread_mutex_lock(&sh->pass->lock);
		out->passes = sh->pass->passes;
		out->pass_left = sh->pass->view_left;
		pthread_mutex_unlock(&sh->pass->lock);
	}
}

/* ---- life cycle ---- */

/* Readers wait on a slot's cond with their deadline: one that cannot be
 * made fails the open (those made before it are undone). */
static int init_slots(struct shards *sh)
{
	for (size_t i = 0; i < nshards(sh); i++) {
		int r = cond_init_monotonic(&sh->slots[i].cond);
		if (r) {
			while (i-- > 0)
				pthread_cond_destroy(&sh->slots[i].cond);
			return r;
		}
		workq_item_init(&sh->slots[i].item);
	}
	return 0;
}

int shards_open(const struct index *ix, struct http *h, struct store *st,
		const struct shards_opts *o, struct shards **out)
{
	struct shards *sh;
	unsigned workers = o && o->workers ? o->workers : 4;
	int r;

	*out = NULL;
	if (!ix || !h)
		return -EINVAL;
	sh = xcalloc(1, sizeof(*sh));
	sh->ix = ix;
	sh->h = h;
	sh->st = st;
	r = verify_open(ix, &sh->vf); /* NULL: format 1, no checksums */
	if (r) {
		free(sh);
		return r;
	}
	if (!ix->has_sums)
		log_warn("the index has no checksums (format 1): shard bytes "
			 "are checked only by size and ETag; rebuild it with "
			 "echofs-index for end-to-end checks");
	sh->retry_failed_s =
		o && o->retry_failed_s > 0 ? o->retry_failed_s : 30;
	sh->read_timeout_s =
		o && o->read_timeout_s > 0 ? o->read_timeout_s : 120;
	sh->range_after_s = o && o->range_after_s > 0 ? o->range_after_s : 0;
	sh->max_pinned = workers * 8 < 32 ? 32 : workers * 8;
	sh->demand_streams =
		workers < DEMAND_STREAMS ? workers : DEMAND_STREAMS;
	for (size_t i = 0; i < ix->nshards; i++)
		sh->dataset_bytes += ix->shards[i].size;
	sh->slots = xcalloc(ix->nshards ? ix->nshards : 1, sizeof(*sh->slots));
	sh->nslots = ix->nshards;
	if ((r = init_slots(sh)) != 0) {
		verify_free(sh->vf);
		free(sh->slots);
		free(sh);
		return r;
	}
	pthread_mutex_init(&sh->lock, NULL);
	r = workq_open(&(struct workq_opts){.threads = workers,
					    .run = shards_fetch_slot,
					    .ctx = sh},
		       &sh->wq);
	if (r) {
		shards_free(sh);
		return r;
	}
	*out = sh;
	return 0;
}

void shards_cancel(struct shards *sh)
{
	if (!sh)
		return;
	pthread_mutex_lock(&sh->lock);
	sh->stop = true;
	for (size_t i = 0; i < nshards(sh); i++)
		pthread_cond_broadcast(&sh->slots[i].cond);
	pthread_mutex_unlock(&sh->lock);
	store_interrupt(sh->st); /* a wait for another mount's fetch */
}

/* No read may be in progress. */
void shards_free(struct shards *sh)
{
	if (!sh)
		return;
	if (sh->pass) /* the store outlives us: drop its hint first */
		store_set_needed(sh->st, NULL, NULL);
	pthread_mutex_lock(&sh->lock);
	sh->stop = true; /* streams in progress stop at their next chunk */
	pthread_mutex_unlock(&sh->lock);
	/* A worker may be waiting for another mount's fetch of its shard. */
	store_interrupt(sh->st);
	if (sh->wq) /* queued fetches are dropped */
		workq_shutdown(sh->wq, WORKQ_CANCEL);
	workq_free(sh->wq);
	for (size_t i = 0; i < nshards(sh); i++) {
		shards_retire(sh, &sh->slots[i]);
		pthread_cond_destroy(&sh->slots[i].cond);
	}
	pthread_mutex_destroy(&sh->lock);
	pass_free(sh->pass);
	verify_free(sh->vf);
	free(sh->slots);
	free(sh);
}
