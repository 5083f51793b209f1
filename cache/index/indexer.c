/* indexer.c - build a dataset index by streaming every shard once through
 * the tar scanner, caching each shard on the way.
 *
 * DESIGN
 * - `jobs` workers (a common/workq.h queue holding one item per URL, in
 *   list order) take the URLs. Each job stats its
 *   URL, streams it once into scan_feed (and, with a store, into a store
 *   writer) and collects the shard's samples in a private one-shard index.
 * - When every job is done, the private indexes are merged in URL order, so
 *   shard numbers equal list order and samples are grouped by shard.
 * - The first failure wins: it records the error, the URLs still queued are
 *   skipped and transfers in progress are cancelled by their sinks.
 * - Locking: one mutex guards the first error, the progress
 *   count and the "cache failed" warning; it is never held across network
 *   I/O. The progress callback runs under a second mutex so calls are
 *   serialized and never concurrent.
 * - Checksums (index format 2) are computed from the same bytes the scanner
 *   and the store get, as they stream (fetch/format/sums.c). */
#include "cache/index/indexer.h"

#include "cache/store/store.h"
#include "common/log.h"
#include "common/util.h"
#include "common/workq.h"
#include "fetch/net/http.h"
#include "fetch/format/index.h"
#include "fetch/format/scan.h"
#include "fetch/format/sums.h"
#include "fetch/net/shardlist.h"

#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct job_result {
	struct workq_item item; /* queued for a worker */
	struct index *ix;	/* one shard (number 0) and its samples */
	uint64_t size;
	char etag[HTTP_ETAG_MAX];
};

struct build {
	struct http *h;
	struct store *st;
	const struct shardlist *list;
	indexer_progress_fn progress;
	void *ud;
	struct job_result *res; /* one per URL, written by its job only */
	pthread_mutex_t lock;
	pthread_mutex_t progress_lock;
	/* Guarded by lock. */
	size_t done;
	unsigned long long bytes;
	struct indexer_skips skipped; /* all shards */
	bool failed, cache_warned;
	int err;
	char errmsg[1024];
};

/* One shard's transfer: scanner and optional cache writer. */
struct shard_job {
	struct build *b;
	size_t i;
	struct scan *scan;
	struct sums *sums;
	struct store_writer *w;
	int scan_err;
};

static const char *reason(int err, char *buf, size_t n)
{
	if (err == -ESTALE)
		return "changed while indexing (ETag mismatch)";
	snprintf(buf, n, "%s", http_reason(err));
	return buf;
}

/* Record the first failure; later ones are consequences or noise. */
static void fail(struct build *b, size_t i, int err, const char *why)
{
	char red[400], tmp[128];

	http_redact(b->list->urls[i], red, sizeof(red));
	pthread_mutex_lock(&b->lock);
	if (!b->failed) {
		b->failed = true;
		b->err = err;
		snprintf(b->errmsg, sizeof(b->errmsg), "%s: %s", red,
			 why ? why : reason(err, tmp, sizeof(tmp)));
	}
	pthread_mutex_unlock(&b->lock);
}

static bool stopped(struct build *b)
{
	bool f;
	pthread_mutex_lock(&b->lock);
	f = b->failed;
	pthread_mutex_unlock(&b->lock);
	return f;
}

/* The cache is an optimisation: on failure warn once, keep indexing. */
/* ENOSPC from the store also means "larger than the whole cap": say so. */
static bool too_big_for_cache(struct store *st, uint64_t size)
{
	struct store_stats ss;
	if (!st)
		return false;
	store_get_stats(st, &ss);
	return size >= ss.cap;
}

static void cache_failed(struct shard_job *j, int err)
{
	struct build *b = j->b;
	bool warn;

	store_abort(j->w);
	j->w = NULL;
	pthread_mutex_lock(&b->lock);
	warn = !b->cache_warned;
	b->cache_warned = true;
	pthread_mutex_unlock(&b->lock);
	if (warn)
		log_warn("indexer: not keeping shards in the cache: %s",
			 too_big_for_cache(b->st, j->b->res[j->i].size)
				 ? "a shard is larger than cache_size"
				 : strerror(-err));
}

static int sink(void *ud, const void *data, size_t len)
{
	struct shard_job *j = ud;
	int r;

	if (stopped(j->b))
		return -ECANCELED;
	r = scan_feed(j->scan, data, len);
	if (r == 0)
		r = sums_feed(j->sums, data, len);
	if (r) {
		j->scan_err = r;
		return r;
	}
	if (j->w && (r = store_write(j->w, data, len)) != 0)
		cache_failed(j, r);
	return 0;
}

struct skip_log {
	struct build *b;
	const char *url;
};

static void log_skip(void *ud, const char *why, uint64_t n)
{
	const struct skip_log *l = ud;
	log_warn("indexer: %s: skipped %llu (%s)", l->url,
		 (unsigned long long)n, why);
	pthread_mutex_lock(&l->b->lock);
	/* A bad .cls is a label problem, counted as such (scan.c's reason). */
	if (strcmp(why, "bad label") == 0)
		l->b->skipped.bad_label += n;
	else
		l->b->skipped.members += n;
	pthread_mutex_unlock(&l->b->lock);
}

static void report(struct build *b, uint64_t size)
{
	size_t done, total = b->list->n;
	unsigned long long bytes;

	pthread_mutex_lock(&b->lock);
	done = ++b->done;
	bytes = b->bytes += size;
	pthread_mutex_unlock(&b->lock);
	if (!b->progress)
		return;
	/* Under its own lock: calls are serialized, counts may arrive out of
	 * order by a step but done only ever reaches total once. */
	pthread_mutex_lock(&b->progress_lock);
	b->progress(b->ud, done, total, bytes);
	pthread_mutex_unlock(&b->progress_lock);
}

/* The shard's skips are counted once it indexed without error. */
static int finish_shard(struct build *b, size_t i, struct shard_job *j,
			int r)
{
	const char *url = b->list->urls[i];

	if (r == 0)
		r = scan_finish(j->scan);
	if (r == 0)
		r = sums_fill(j->sums, b->res[i].ix, 0);
	if (r == -EBADMSG) {
		char why[300];
		snprintf(why, sizeof(why), "malformed tar: %s",
			 scan_error(j->scan));
		fail(b, i, r, why);
	} else if (r) {
		fail(b, i, r, NULL);
	} else {
		char red[400];
		struct skip_log l = {b, http_redact(url, red, sizeof(red))};
		scan_for_each_skip(j->scan, log_skip, &l);
	}
	return r;
}

/* Scanner and checksums for URL i, over a fresh one-shard index. */
static int start_shard(struct build *b, size_t i, struct shard_job *j)
{
	struct job_result *res = &b->res[i];

	*j = (struct shard_job){.b = b, .i = i};
	index_free(res->ix);
	res->ix = index_new();
	index_add_shard(res->ix, b->list->urls[i], res->size, res->etag);
	j->scan = scan_new(res->ix, 0);
	j->sums = sums_new();
	return 0;
}

static void end_shard(struct shard_job *j)
{
	scan_free(j->scan);
	sums_free(j->sums);
}

/* Index URL i from its cache entry e (pinned): the bytes another mount
 * fetched (or an earlier one kept) are not fetched again. Returns 0,
 * -EAGAIN when the entry cannot be read (it is dropped if corrupt; the
 * caller fetches), or the scanner's error (failed as for a fetch). */
static int index_cached(struct build *b, size_t i, struct store_entry *e)
{
	struct shard_job j;
	uint64_t off = 0, size = b->res[i].size;
	uint8_t *buf = xmalloc(STORE_BLOCK);
	int r = start_shard(b, i, &j);

	while (r == 0 && off < size) {
		size_t want = size - off < STORE_BLOCK ? (size_t)(size - off)
						       : STORE_BLOCK;
		ssize_t n = store_pread(e, buf, want, off);
		if (n <= 0) {
			if (n == -EBADMSG)
				store_drop(e);
			r = -EAGAIN;
			break;
		}
		r = sink(&j, buf, (size_t)n);
		off += (uint64_t)n;
	}
	free(buf);
	if (r != -EAGAIN)
		r = finish_shard(b, i, &j, r);
	end_shard(&j);
	store_put(e);
	return r;
}

/* Stream URL i once from the server, through the scanner and into the
 * store. -EEXIST (nothing fetched) when another process has just written
 * the entry, which store_begin waited for: the caller indexes that. */
static int fetch_shard(struct build *b, size_t i, bool reuse)
{
	const char *url = b->list->urls[i];
	struct job_result *res = &b->res[i];
	struct shard_job j;
	int r = start_shard(b, i, &j);

	if (r) {
		end_shard(&j);
		return r;
	}
	if (b->st) {
		int sr = store_begin(b->st, url, res->etag, res->size, &j.w);
		if (sr == -EEXIST && reuse) {
			end_shard(&j);
			return -EEXIST;
		}
		if (sr)
			cache_failed(&j, sr);
	}
	r = http_stream(b->h, url, res->etag, res->size, sink, &j);
	r = finish_shard(b, i, &j, r);
	if (r == 0 && j.w) {
		/* store_commit frees the writer even when it fails: forget it
		 * first so cache_failed does not abort it a second time. */
		struct store_writer *w = j.w;
		struct store_entry *e;
		int cr;
		j.w = NULL;
		cr = store_commit(w, &e);
		if (cr)
			cache_failed(&j, cr);
		store_put(e);
	} else {
		store_abort(j.w);
	}
	end_shard(&j);
	return r;
}

/* URL i from the cache when it is there (or once another mount writing it
 * has finished), else from the server. */
static int stream_shard(struct build *b, size_t i)
{
	const struct job_result *res = &b->res[i];
	struct store_entry *e;
	int r = -EAGAIN;

	for (int round = 0; round < 2 && r == -EAGAIN; round++) {
		e = b->st ? store_get(b->st, b->list->urls[i], res->etag,
				      res->size)
			  : NULL;
		r = e ? index_cached(b, i, e) : fetch_shard(b, i, round == 0);
		if (r == -EEXIST)
			r = -EAGAIN;
	}
	return r == -EAGAIN ? fetch_shard(b, i, false) : r;
}

static void index_one(struct build *b, size_t i)
{
	struct job_result *res = &b->res[i];
	int r;

	res->ix = index_new();
	r = http_stat(b->h, b->list->urls[i], &res->size, res->etag,
		      sizeof(res->etag));
	if (r) {
		fail(b, i, r, NULL);
		return;
	}
	if (stream_shard(b, i) == 0)
		report(b, res->size);
}

/* A worker took URL i's item: index it unless a job failed already. */
static void job_run(void *ctx, struct workq_item *it)
{
	struct build *b = ctx;
	size_t i = (size_t)(list_entry(it, struct job_result, item) - b->res);
	bool failed;

	pthread_mutex_lock(&b->lock);
	failed = b->failed;
	pthread_mutex_unlock(&b->lock);
	if (!failed)
		index_one(b, i);
}

/* Shard n's members (format 3: the samples layout lists them). */
static int merge_members(struct index *ix, uint32_t n, const struct index *p)
{
	for (size_t k = 0; k < p->nmembers; k++) {
		const struct index_sample *m = &p->members[k];
		if (index_add_member(ix, n, m->offset, m->size,
				     index_key(p, m), index_ext(p, m)))
			return -1;
		ix->members[ix->nmembers - 1].sum = m->sum;
	}
	return 0;
}

/* Concatenate the per-shard indexes in URL order. */
static int merge(struct build *b, struct index **out)
{
	struct index *ix = index_new();
	for (size_t i = 0; i < b->list->n; i++) {
		const struct index *p = b->res[i].ix;
		uint32_t n = index_add_shard(ix, b->list->urls[i],
					     b->res[i].size, b->res[i].etag);
		ix->shards[n].sum = p->shards[0].sum;
		for (size_t k = 0; k < p->nsamples; k++) {
			const struct index_sample *s = &p->samples[k];
			int r = index_add_sample(ix, n, s->offset, s->size,
						 index_label(p, s),
						 index_key(p, s),
						 index_ext(p, s));
			if (r) {
				index_free(ix);
				return r;
			}
			ix->samples[ix->nsamples - 1].sum = s->sum;
		}
		if (merge_members(ix, n, p)) {
			index_free(ix);
			return -ENOMEM;
		}
	}
	ix->has_sums = true;
	ix->has_members = true;
	*out = ix;
	return 0;
}

static void run_jobs(struct build *b, unsigned jobs)
{
	struct workq *q;

	if (jobs > b->list->n)
		jobs = (unsigned)b->list->n;
	/* If no thread can be started, the calling thread does all the work. */
	if (workq_open(&(struct workq_opts){.threads = jobs, .run = job_run,
					    .ctx = b},
		       &q) != 0)
		q = NULL;
	for (size_t i = 0; i < b->list->n; i++)
		if (!q || workq_submit(q, &b->res[i].item, WORKQ_NOWAIT) != 0)
			job_run(b, &b->res[i].item);
	workq_free(q); /* drains: every URL indexed or skipped */
}

int indexer_build(struct http *h, struct store *st,
		  const struct shardlist *list, unsigned jobs,
		  indexer_progress_fn progress, void *ud, struct index **out,
		  struct indexer_skips *skipped, char *err, size_t errlen)
{
	struct build b = {
		.h = h, .st = st, .list = list, .progress = progress, .ud = ud};
	int r;

	*out = NULL;
	if (!h || !list || list->n == 0) {
		snprintf(err, errlen, "no shards to index");
		return -EINVAL;
	}
	b.res = xcalloc(list->n, sizeof(*b.res));
	pthread_mutex_init(&b.lock, NULL);
	pthread_mutex_init(&b.progress_lock, NULL);
	run_jobs(&b, jobs ? jobs : 1);
	if (b.failed) {
		snprintf(err, errlen, "%s", b.errmsg);
		r = b.err;
	} else if ((r = merge(&b, out)) != 0) {
		snprintf(err, errlen, "merging the index: %s", strerror(-r));
	}
	if (skipped)
		*skipped = b.skipped;
	for (size_t i = 0; i < list->n; i++)
		index_free(b.res[i].ix);
	free(b.res);
	pthread_mutex_destroy(&b.lock);
	pthread_mutex_destroy(&b.progress_lock);
	return r;
}
