/* push.c - once a shard is in the disk cache, push all its files into the
 * kernel page cache (FUSE notify_store), so that reading them later costs
 * no request to the daemon at all. */
#define FUSE_USE_VERSION 314
#include "fs/push.h"

#include <errno.h>
#include <fuse_lowlevel.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "cache/dataset.h"
#include "common/log.h"
#include "common/util.h"
#include "common/workq.h"
#include "fs/namespace.h"

#define RETRY_MS 50
#define MAX_PUSH_FILE (16u << 20) /* larger files are read the usual way */

/* One per shard: its place in the queue and, for the worker alone, how
 * often it was found not cached yet. */
struct shard_item {
	struct workq_item it;
	uint32_t waits;
};

struct push {
	struct fuse_session *se;
	const struct namespace *ns;
	struct dataset *ds;
	size_t nshards; /* the dataset's groups */
	/* Files of shard s: files[first[s]] .. files[first[s + 1] - 1]. */
	uint32_t *first;
	uint32_t *files;
	atomic_uchar *touched;	  /* one per shard */
	struct shard_item *items; /* one per shard */
	struct workq *wq;	  /* one worker: the pusher thread */
	atomic_bool refused;	  /* the kernel takes no stores: push nothing */
	char *buf;		  /* the worker's sample buffer */
	size_t cap;

	_Atomic uint64_t n_shards, n_files, n_bytes, n_unknown, n_waits;
};

/* Group file numbers by shard (a counting sort, so O(files)). */
static void build_shard_files(struct push *p)
{
	size_t nsh = p->nshards, nf = p->ns->nfiles;

	p->first = xcalloc(nsh + 1, sizeof(*p->first));
	p->files = xmalloc((nf ? nf : 1) * sizeof(*p->files));
	for (size_t f = 0; f < nf; f++)
		p->first[dataset_group(p->ds, p->ns->files[f].sample) + 1]++;
	for (size_t s = 0; s < nsh; s++)
		p->first[s + 1] += p->first[s];
	uint32_t *fill = xmalloc((nsh ? nsh : 1) * sizeof(*fill));
	memcpy(fill, p->first, nsh * sizeof(*fill));
	for (size_t f = 0; f < nf; f++) {
		uint32_t s = dataset_group(p->ds, p->ns->files[f].sample);
		p->files[fill[s]++] = (uint32_t)f;
	}
	free(fill);
}

/* Each shard is queued at most once at a time (by its first touch, then
 * only by the worker itself), so the queue needs no bound. */
static void enqueue(struct push *p, uint32_t shard)
{
	/* -EBUSY: queued already; -ESHUTDOWN: the mount stops, nothing is left
	 * to push; -EAGAIN needs a cap, which this queue has not. */
	IGNORE_RESULT(workq_submit(p->wq, &p->items[shard].it, WORKQ_NOWAIT));
}

static int stopping(struct push *p)
{
	return workq_stopping(p->wq);
}

/* Store a file spliced from its verified cache file (dataset_read_span:
 * checked against the index just now, pinned until the store is sent).
 * Returns notify_store's result, or 1 when the bytes must be copied. */
static int store_span(struct push *p, uint32_t f, uint32_t sample,
		      uint64_t size)
{
	struct fuse_bufvec bv = FUSE_BUFVEC_INIT(0);
	struct dataset_span sp;
	int r;

	if (dataset_read_span(p->ds, sample, 0, (size_t)size, &sp) != 0)
		return 1;
	bv.buf[0].size = sp.len;
	bv.buf[0].flags = FUSE_BUF_IS_FD | FUSE_BUF_FD_SEEK;
	bv.buf[0].fd = sp.fd;
	bv.buf[0].pos = (off_t)sp.pos;
	r = fuse_lowlevel_notify_store(p->se, ns_file_ino(p->ns, f), 0, &bv,
				       0);
	dataset_span_done(p->ds, &sp);
	return r;
}

/* Push every file of a cached shard. Returns -ENOSYS when the kernel can't
 * take stores at all. */
static int push_shard(struct push *p, uint32_t shard, char **buf,
		      size_t *cap)
{
	for (uint32_t i = p->first[shard]; i < p->first[shard + 1]; i++) {
		uint32_t f = p->files[i];
		uint32_t sample = p->ns->files[f].sample;
		uint64_t size = dataset_size(p->ds, sample);
		if (size == 0 || size > MAX_PUSH_FILE)
			continue;
		if (size > *cap) {
			*cap = (size_t)size;
			*buf = xrealloc(*buf, *cap);
		}
		if (stopping(p))
			return 0;
		int r = store_span(p, f, sample, size);
		if (r == 1) {
			ssize_t n = dataset_read(p->ds, sample, 0, (size_t)size,
						 *buf);
			if (n != (ssize_t)size)
				return 0; /* the readers see and count it */
			struct fuse_bufvec bv = FUSE_BUFVEC_INIT((size_t)size);
			bv.buf[0].mem = *buf;
			r = fuse_lowlevel_notify_store(p->se,
						       ns_file_ino(p->ns, f), 0,
						       &bv, 0);
		}
		if (r == -ENOSYS)
			return r;
		if (r) {
			p->n_unknown++;
			continue;
		}
		p->n_files++;
		p->n_bytes += size;
	}
	p->n_shards++;
	return 0;
}

/* The worker, for one queued shard. */
static void push_one(void *ctx, struct workq_item *it)
{
	struct push *p = ctx;
	struct shard_item *si = list_entry(it, struct shard_item, it);
	uint32_t s = (uint32_t)(si - p->items);

	if (atomic_load(&p->refused))
		return;
	if (!dataset_is_cached(p->ds, s)) {
		/* Still arriving (or never to be cached): later, after a pause
		 * that a newly touched shard cuts short. */
		if (++si->waits < PUSH_WAIT_S * 1000 / RETRY_MS) {
			p->n_waits++;
			enqueue(p, s);
			/* -ESHUTDOWN: this run ends next anyway. */
			IGNORE_RESULT(workq_pause(p->wq, RETRY_MS / 1000.0));
		}
		return;
	}
	if (push_shard(p, s, &p->buf, &p->cap) == -ENOSYS) {
		atomic_store(&p->refused, true);
		log_warn("kernel refuses page-cache stores; files of "
			 "cold shards are read one request each");
	}
}

static void push_release(struct push *p)
{
	free(p->buf);
	free(p->items);
	free((void *)p->touched);
	free(p->files);
	free(p->first);
	free(p);
}

int push_open(struct fuse_session *se, const struct namespace *ns,
	      struct dataset *ds, struct push **out)
{
	struct push *p = xcalloc(1, sizeof(*p));
	size_t nsh = dataset_ngroups(ds);

	*out = NULL;
	p->se = se;
	p->ns = ns;
	p->ds = ds;
	p->nshards = nsh;
	build_shard_files(p);
	p->touched = xcalloc(nsh ? nsh : 1, sizeof(*p->touched));
	p->items = xcalloc(nsh ? nsh : 1, sizeof(*p->items));
	int r = workq_open(
		&(struct workq_opts){.threads = 1, .run = push_one, .ctx = p},
		&p->wq);
	if (r) {
		push_release(p);
		return r;
	}
	*out = p;
	return 0;
}

void push_free(struct push *p)
{
	if (!p)
		return;
	/* Queued shards are dropped; the one being pushed stops at its next
	 * file (push_shard checks stopping). */
	workq_shutdown(p->wq, WORKQ_CANCEL);
	workq_free(p->wq);
	push_release(p);
}

void push_touch(struct push *p, uint32_t shard)
{
	if (!p || shard >= p->nshards)
		return;
	if (atomic_load_explicit(&p->touched[shard], memory_order_relaxed) ||
	    atomic_exchange(&p->touched[shard], 1))
		return;
	enqueue(p, shard);
}

void push_get_stats(struct push *p, struct push_stats *out)
{
	memset(out, 0, sizeof(*out));
	if (!p)
		return;
	out->shards = p->n_shards;
	out->files = p->n_files;
	out->bytes = p->n_bytes;
	out->unknown = p->n_unknown;
	out->waits = p->n_waits;
}
