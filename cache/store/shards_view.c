/* shards_view.c - zero-copy views of samples (shards_view): a sample
 * served straight from the pinned entry's mapped file, or from a writer's
 * temp file while its shard still streams, hashed where it lies before it
 * is handed out. Views hold a reference (cref / wref users) under
 * sh->lock and read outside it. */
#include "cache/store/shards_int.h"

#include "cache/store/store.h"
#include "cache/store/verify.h"
#include "common/lockcheck.h"
#include "common/log.h"
#include "common/util.h"
#include "fetch/format/index.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* ---- zero-copy views ---- */

/* Lock held. c's descriptor and size for views, found once. The bytes are
 * hashed with pread (verify_sample_fd), not through a mapping: cache_dir
 * may be shared, and a file another process truncates under a mapping
 * faults (SIGBUS) where a read only comes back short. */
static int cref_map(struct cref *c)
{
	uint64_t size;
	int fd;

	if (c->map_len)
		return 0;
	if (c->map_failed)
		return -EAGAIN;
	fd = store_entry_fd(c->e, &size);
	if (fd < 0 || size == 0) {
		c->map_failed = true;
		return -EAGAIN;
	}
	c->map_len = size;
	c->fd = fd;
	return 0;
}

/* Lock held. The whole member of sample i, if its shard is cached and
 * pinned: a user reference on the entry, mapped. NULL otherwise. */
static struct cref *view_ref(struct shards *sh, uint32_t shard)
{
	ASSERT_HELD(&sh->lock);
	struct slot *s = &sh->slots[shard];
	struct cref *c = s->state == CACHED && !sh->stop ? s->c : NULL;

	if (!c || cref_map(c) != 0)
		return NULL;
	c->users++;
	s->last_use = ++sh->use_clock;
	return c;
}

/* How a view ended: spliced, left to the copying path, or refused
 * because the bytes did not match the index (counted). */
enum view_end { VIEW_SERVED, VIEW_NOT_MADE, VIEW_REFUSED };

static void view_put(struct shards *sh, struct cref *c, enum view_end how)
{
	pthread_mutex_lock(&sh->lock);
	c->users--;
	shards_cref_release(c);
	if (how == VIEW_SERVED) {
		sh->stats.hits++;
		sh->stats.views++;
	} else if (how == VIEW_REFUSED) {
		sh->stats.views_refused++;
	}
	pthread_mutex_unlock(&sh->lock);
}

/* ---- zero-copy views of a shard still streaming ---- */

/* Lock held. A user reference on shard's live writer when [off, end) has
 * been written and nobody found a bad sample in the stream; NULL
 * otherwise. close_writer waits for the reference, so the writer (its
 * descriptor, its wref) outlives the view. */
static struct wref *view_wref(struct shards *sh, uint32_t shard, uint64_t end)
{
	ASSERT_HELD(&sh->lock);
	struct slot *s = &sh->slots[shard];
	struct wref *wr = s->state == FETCHING && !sh->stop ? s->wr : NULL;

	if (!wr || wr->closing || wr->bad || wr->avail < end)
		return NULL;
	wr->users++;
	return wr;
}

static void wref_put(struct shards *sh, uint32_t shard, struct wref *wr,
		     enum view_end how)
{
	pthread_mutex_lock(&sh->lock);
	if (--wr->users == 0)
		wake(&sh->slots[shard]); /* a worker in close_writer */
	if (how == VIEW_SERVED) {
		sh->stats.misses++;
		sh->stats.views++;
		sh->stats.views_streaming++;
	} else if (how == VIEW_REFUSED) {
		sh->stats.views_refused++;
	}
	pthread_mutex_unlock(&sh->lock);
}

/* Does sample i, len bytes at off in fd, match the index? Hashed with
 * pread (see cref_map): VIEW_SERVED (it matches), VIEW_REFUSED (it does
 * not) or VIEW_NOT_MADE (it could not be read whole: the file was
 * shortened, or a read failed). */
static enum view_end sample_check(struct shards *sh, size_t i, int fd,
				  uint64_t off, size_t len)
{
	int r = verify_sample_fd(sh->vf, i, fd, off, len);

	return r < 0 ? VIEW_NOT_MADE : r ? VIEW_SERVED : VIEW_REFUSED;
}

/* wr (a reference taken by view_wref): sample i as a view of its temp
 * file, or -EAGAIN (reference dropped) so that the copying path reads it,
 * finds any mismatch itself and marks the stream bad as before. */
static int view_stream(struct shards *sh, uint32_t shard, size_t i,
		       struct wref *wr, struct shards_view *v)
{
	const struct index_sample *smp = &sh->ix->samples[i];
	/* wr->w is fixed for the wref's life, which our reference extends. */
	int fd = store_writer_fd(wr->w);
	enum view_end how = fd < 0 ? VIEW_NOT_MADE
				   : sample_check(sh, i, fd, smp->offset,
						  (size_t)smp->size);

	if (how != VIEW_SERVED) {
		wref_put(sh, shard, wr, how);
		return -EAGAIN;
	}
	*v = (struct shards_view){.fd = fd,
				  .off = smp->offset,
				  .len = (size_t)smp->size,
				  .ref = wr,
				  .shard = shard,
				  .streaming = 1};
	return 0;
}

int shards_view(struct shards *sh, uint32_t shard, uint64_t off, size_t len,
		struct shards_view *v)
{
	const struct index_sample *smp;
	struct wref *wr = NULL;
	enum view_end how;
	struct cref *c;
	uint64_t stop;
	size_t i;

	if (!sh || shard >= nshards(sh))
		return -EINVAL;
	/* Without sample sums only store_pread's block check covers the
	 * bytes: copy them through it. */
	if (!sh->vf)
		return -EAGAIN;
	i = verify_find(sh->vf, shard, off, &stop);
	if (i == VERIFY_NONE)
		return -EAGAIN;
	smp = &sh->ix->samples[i];
	if (smp->offset != off || smp->size != len || len == 0)
		return -EAGAIN;
	pthread_mutex_lock(&sh->lock);
	c = view_ref(sh, shard);
	if (!c)
		wr = view_wref(sh, shard, off + len);
	pthread_mutex_unlock(&sh->lock);
	if (wr)
		return view_stream(sh, shard, i, wr, v);
	if (!c)
		return -EAGAIN;
	/* The same check as read_member, on the very pages the reply will
	 * splice: a mismatch is left to the copying path, which counts it,
	 * drops the entry and fetches the shard again. */
	if (off > c->map_len || len > c->map_len - off) {
		view_put(sh, c, VIEW_NOT_MADE);
		return -EAGAIN;
	}
	how = sample_check(sh, i, c->fd, off, len);
	if (how != VIEW_SERVED) {
		view_put(sh, c, how);
		return -EAGAIN;
	}
	*v = (struct shards_view){
		.fd = c->fd, .off = off, .len = len, .ref = c, .shard = shard};
	return 0;
}

void shards_view_done(struct shards *sh, struct shards_view *v)
{
	if (!sh || !v || !v->ref)
		return;
	if (v->streaming)
		wref_put(sh, v->shard, v->ref, VIEW_SERVED);
	else
		view_put(sh, v->ref, VIEW_SERVED);
	v->ref = NULL;
}
