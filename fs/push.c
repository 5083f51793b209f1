/* push.c - once a shard is in the disk cache, push all its files into the
 * kernel page cache (FUSE notify_store), so that reading them later costs
 * no request to the daemon at all. */
#define FUSE_USE_VERSION 314
#include "fs/push.h"

#include <errno.h>
#include <fuse_lowlevel.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cache/dataset.h"
#include "common/log.h"
#include "common/util.h"
#include "fs/namespace.h"

#define RETRY_MS 50
#define MAX_PUSH_FILE (16u << 20) /* larger files are read the usual way */

struct push {
	struct fuse_session *se;
	const struct namespace *ns;
	struct dataset *ds;
	size_t nshards; /* the dataset's groups */
	/* Files of shard s: files[first[s]] .. files[first[s + 1] - 1]. */
	uint32_t *first;
	uint32_t *files;
	atomic_uchar *touched; /* one per shard */
	pthread_t thread;

	pthread_mutex_t lock; /* guards the queue and stop */
	pthread_cond_t cond;
	uint32_t *queue;      /* ring of nshards slots */
	size_t head, len;
	int stop;

	_Atomic uint64_t n_shards, n_files, n_bytes, n_unknown;
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

static void enqueue(struct push *p, uint32_t shard)
{
	pthread_mutex_lock(&p->lock);
	if (p->len < p->nshards) {
		p->queue[(p->head + p->len) % p->nshards] = shard;
		p->len++;
		pthread_cond_signal(&p->cond);
	}
	pthread_mutex_unlock(&p->lock);
}

/* Next shard, or -1 to stop. Waits up to RETRY_MS when `idle_wait`. */
static int64_t dequeue(struct push *p, int idle_wait)
{
	int64_t s = -1;
	pthread_mutex_lock(&p->lock);
	if (idle_wait && !p->stop) {
		struct timespec ts;
		clock_gettime(CLOCK_REALTIME, &ts);
		ts.tv_nsec += RETRY_MS * 1000000L;
		ts.tv_sec += ts.tv_nsec / 1000000000L;
		ts.tv_nsec %= 1000000000L;
		pthread_cond_timedwait(&p->cond, &p->lock, &ts);
	}
	while (!p->stop && p->len == 0)
		pthread_cond_wait(&p->cond, &p->lock);
	if (!p->stop) {
		s = p->queue[p->head];
		p->head = (p->head + 1) % p->nshards;
		p->len--;
	}
	pthread_mutex_unlock(&p->lock);
	return s;
}

static int stopping(struct push *p)
{
	pthread_mutex_lock(&p->lock);
	int s = p->stop;
	pthread_mutex_unlock(&p->lock);
	return s;
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
		ssize_t n = dataset_read(p->ds, sample, 0, (size_t)size, *buf);
		if (n != (ssize_t)size)
			return 0; /* the readers will see and count the error */
		struct fuse_bufvec bv = FUSE_BUFVEC_INIT((size_t)size);
		bv.buf[0].mem = *buf;
		int r = fuse_lowlevel_notify_store(p->se, ns_file_ino(p->ns, f), 0,
						   &bv, 0);
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

static void *push_main(void *arg)
{
	struct push *p = arg;
	uint32_t *waits = xcalloc(p->nshards ? p->nshards : 1,
				  sizeof(*waits));
	size_t cap = 0;
	char *buf = NULL;
	int retrying = 0;
	int64_t s;

	while ((s = dequeue(p, retrying)) >= 0) {
		retrying = 0;
		if (!dataset_is_cached(p->ds, (uint32_t)s)) {
			/* Still arriving (or never to be cached): later. */
			if (++waits[s] < PUSH_WAIT_S * 1000 / RETRY_MS) {
				enqueue(p, (uint32_t)s);
				retrying = 1;
			}
			continue;
		}
		if (push_shard(p, (uint32_t)s, &buf, &cap) == -ENOSYS) {
			log_warn("kernel refuses page-cache stores; files of "
				 "cold shards are read one request each");
			break;
		}
	}
	free(buf);
	free(waits);
	return NULL;
}

struct push *push_new(struct fuse_session *se, const struct namespace *ns,
		      struct dataset *ds)
{
	struct push *p = xcalloc(1, sizeof(*p));
	size_t nsh = dataset_ngroups(ds);
	int r;

	p->se = se;
	p->ns = ns;
	p->ds = ds;
	p->nshards = nsh;
	build_shard_files(p);
	p->touched = xcalloc(nsh ? nsh : 1, sizeof(*p->touched));
	p->queue = xcalloc(nsh ? nsh : 1, sizeof(*p->queue));
	pthread_mutex_init(&p->lock, NULL);
	pthread_cond_init(&p->cond, NULL);
	r = pthread_create(&p->thread, NULL, push_main, p);
	if (r) {
		pthread_cond_destroy(&p->cond);
		pthread_mutex_destroy(&p->lock);
		free(p->queue);
		free(p->touched);
		free(p->files);
		free(p->first);
		free(p);
		errno = r;
		return NULL;
	}
	return p;
}

void push_free(struct push *p)
{
	if (!p)
		return;
	pthread_mutex_lock(&p->lock);
	p->stop = 1;
	pthread_cond_broadcast(&p->cond);
	pthread_mutex_unlock(&p->lock);
	pthread_join(p->thread, NULL);
	pthread_cond_destroy(&p->cond);
	pthread_mutex_destroy(&p->lock);
	free(p->queue);
	free((void *)p->touched);
	free(p->files);
	free(p->first);
	free(p);
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
}
