/* shards_fetch.c - the shard manager's fetch workers: one whole-shard GET
 * per queued shard, streamed into a store writer that readers follow, hashed
 * and committed only when it matches the index (DESIGN in shards.h; states
 * at the top of shards.c). Workers run on the work queue; they take
 * sh->lock only around state changes, never across network I/O. */
#include "cache/store/shards_int.h"

#include "cache/store/store.h"
#include "cache/store/verify.h"
#include "common/lockcheck.h"
#include "common/log.h"
#include "common/util.h"
#include "fetch/format/index.h"
#include "fetch/net/http.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* ---- state changes by workers ---- */

void shards_log_failure(struct shards *sh, uint32_t n, int err)
{
	char red[512];
	http_redact(sh->ix->shards[n].url, red, sizeof(red));
	log_counted("shard_failed", "shard %u (%s) failed: %s", n, red,
		    http_reason(err));
}

/* Lock held. */
void shards_set_failed(struct shards *sh, uint32_t n)
{
	ASSERT_HELD(&sh->lock);
	struct slot *s = &sh->slots[n];
	s->state = FAILED;
	s->until = now_mono() + sh->retry_failed_s;
	sh->stats.failed_shards++;
	wake(s);
}

/* Lock held. */
void shards_set_uncached(struct shards *sh, uint32_t n)
{
	ASSERT_HELD(&sh->lock);
	struct slot *s = &sh->slots[n];
	s->state = UNCACHED;
	s->until = now_mono() + sh->retry_failed_s;
	wake(s);
}

/* Lock held. A copy of shard n failed its checksum: counted, read again
 * by the next reader (state NONE), or failed fast after two bad copies in
 * a row. */
void shards_bad_copy(struct shards *sh, uint32_t n)
{
	ASSERT_HELD(&sh->lock);
	struct slot *s = &sh->slots[n];

	sh->stats.verify_errors++;
	if (++s->bad_copies >= 2) {
		shards_set_failed(sh, n);
	} else {
		s->state = NONE;
		wake(s);
	}
}

/* sample: the sample's key, or NULL for the whole shard. */
void shards_log_mismatch(struct shards *sh, uint32_t n, const char *sample,
			 unsigned bad_copies)
{
	char red[512];

	http_redact(sh->ix->shards[n].url, red, sizeof(red));
	log_warn("shard %u (%s): %s%s does not match the index's checksum: "
		 "%s",
		 n, red, sample ? "sample " : "whole shard",
		 sample ? sample : "",
		 bad_copies >= 2 ? "second bad copy, failing it (EIO)"
				 : "not served, fetching it again");
}

/* ---- the worker ---- */

struct sink_ctx {
	struct shards *sh;
	struct slot *s;
	struct wref *wr;
	struct verify_stream *vs; /* whole-shard checksum, or NULL */
	int store_err; /* store_write failed: not the server's fault */
};

static int sink(void *ud, const void *data, size_t len)
{
	struct sink_ctx *x = ud;
	int r = store_write(x->wr->w, data, len);

	if (x->vs)
		verify_stream_feed(x->vs, data, len);
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
	ASSERT_HELD(&sh->lock);
	wr->closing = true;
	s->waiters++;
	while (wr->users)
		pthread_cond_wait(&s->cond, &sh->lock);
	s->waiters--;
	s->wr = NULL;
}

/* The store said no: the shard is served by range reads; say why. */
static void cache_refused(struct shards *sh, const struct index_shard *is,
			  int err)
{
	struct store_stats ss;
	char red[512];

	store_get_stats(sh->st, &ss);
	http_redact(is->url, red, sizeof(red));
	if (err == ENOSPC && is->size >= ss.cap)
		log_counted("cache_write",
			    "shard %s (%llu MB) is larger than "
			    "cache_size (%llu MB): served without the disk "
			    "cache",
			    red, (unsigned long long)(is->size >> 20),
			    (unsigned long long)(ss.cap >> 20));
	else
		log_counted("cache_write", "shard %s not cached: %s", red,
			    strerror(err));
}

/* A writer for shard `is` in *w, or -errno: -ENODEV without a store,
 * -EDQUOT when only what the pass still needs stands in the way, -EEXIST
 * when another mount has just written it; others are logged here. */
static int begin_writer(struct shards *sh, const struct index_shard *is,
			struct store_writer **w)
{
	int r;

	*w = NULL;
	if (!sh->st)
		return -ENODEV;
	r = store_begin(sh->st, is->url, is->etag, is->size, w);
	/* Our own pins may be what keeps the store from evicting: drop them
	 * and give readers still holding one a moment to let go. */
	for (int i = 0; (r == -ENOSPC || (r == -EDQUOT && !i)) && i < 3; i++) {
		pthread_mutex_lock(&sh->lock);
		shards_unpin_some(sh, UINT32_MAX, true);
		pthread_mutex_unlock(&sh->lock);
		if (i)
			nanosleep(&(struct timespec){0, 20000000L}, NULL);
		r = store_begin(sh->st, is->url, is->etag, is->size, w);
	}
	/* EDQUOT: room only by evicting what the pass still needs; the
	 * policy, not a failure (counted as admission_bypass by readers).
	 * EEXIST: another mount wrote it while we waited; fetch_one takes it.
	 */
	if (r && r != -EDQUOT && r != -EEXIST)
		cache_refused(sh, is, -r);
	return r;
}

/* Stream shard n into a store writer; readers follow wr->avail. */
static void fetch_cached(struct shards *sh, uint32_t n, struct store_writer *w)
{
	const struct index_shard *is = &sh->ix->shards[n];
	struct slot *s = &sh->slots[n];
	struct wref *wr = xcalloc(1, sizeof(*wr));
	struct sink_ctx x = {sh, s, wr, NULL, 0};
	struct store_entry *e = NULL;
	bool bad_sum = false;
	unsigned copies;
	int r = 0;

	wr->w = w;
	wr->started = now_mono();
	pthread_mutex_lock(&sh->lock);
	s->wr = wr;
	pthread_mutex_unlock(&sh->lock);
	if (sh->vf)
		x.vs = verify_stream_new();
	if (r == 0)
		r = http_stream(sh->h, is->url, is->etag, is->size, sink, &x);
	pthread_mutex_lock(&sh->lock);
	close_writer(sh, s, wr);
	pthread_mutex_unlock(&sh->lock);
	/* The whole shard must match before its entry becomes visible. */
	if (r == 0 && x.vs && !verify_stream_ok(sh->vf, x.vs, n)) {
		bad_sum = true;
		r = -EIO;
	}
	verify_stream_free(x.vs);
	if (r == 0)
		x.store_err = store_commit(w, &e);
	else if (r != 0)
		store_abort(w);
	free(wr);
	pthread_mutex_lock(&sh->lock);
	sh->nfetching--;
	if (e) {
		sh->stats.fetched_shards++;
		s->bad_copies = 0;
		shards_attach(sh, n, e);
	} else if (sh->stop) {
		s->state = NONE;
	} else if (bad_sum) {
		shards_bad_copy(sh, n);
	} else if (x.store_err) {
		shards_set_uncached(sh, n);
	} else {
		shards_set_failed(sh, n);
	}
	if (sh->demand)
		shards_demand_schedule(sh); /* the next most wanted shard */
	copies = s->bad_copies; /* a reader may change it once unlocked */
	pthread_mutex_unlock(&sh->lock);
	if (bad_sum)
		shards_log_mismatch(sh, n, NULL, copies);
	else if (!e && !x.store_err && r != -ECANCELED)
		shards_log_failure(sh, n, r);
}

static void fetch_one(struct shards *sh, uint32_t n)
{
	const struct index_shard *is = &sh->ix->shards[n];
	struct store_entry *e = NULL;
	struct store_writer *w;
	bool refused;
	int r = 0;

	/* A reader or an earlier mount may have cached it already. */
	if (sh->st)
		e = store_get(sh->st, is->url, is->etag, is->size);
	if (!e && (r = begin_writer(sh, is, &w)) == 0) {
		fetch_cached(sh, n, w);
		return;
	}
	refused = r == -EDQUOT;
	/* Another mount sharing the cache fetched it while we waited. */
	if (r == -EEXIST)
		e = store_get(sh->st, is->url, is->etag, is->size);
	pthread_mutex_lock(&sh->lock);
	sh->nfetching--;
	if (e) {
		shards_attach(sh, n, e);
	} else if (refused) {
		/* Readers take range GETs (step_none) for a while. */
		sh->slots[n].bypass_until = now_mono() + BYPASS_S;
		sh->slots[n].state = NONE;
		wake(&sh->slots[n]);
	} else {
		shards_set_uncached(sh, n);
	}
	if (sh->demand)
		shards_demand_schedule(sh);
	pthread_mutex_unlock(&sh->lock);
}

/* A fetch worker took a queued slot (run by the work queue). */
void shards_fetch_slot(void *ctx, struct workq_item *it)
{
	struct shards *sh = ctx;
	struct slot *s = list_entry(it, struct slot, item);
	uint32_t n = (uint32_t)(s - sh->slots);

	pthread_mutex_lock(&sh->lock);
	if (sh->stop) {
		s->state = NONE;
		pthread_mutex_unlock(&sh->lock);
		return;
	}
	s->state = FETCHING;
	sh->nfetching++;
	pthread_mutex_unlock(&sh->lock);
	fetch_one(sh, n);
}
