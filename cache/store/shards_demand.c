/* shards_demand.c - demand first on exact mounts (shards_track): a reader
 * waiting for a sample whose shard is not local fetches the sample's bytes
 * with a range GET when cache/store/demand.h says it pays, and whole-shard
 * downloads go on in the background, at most demand_streams at a time, the
 * shards most waited for first.
 *
 * Range bytes go only to the reader that asked (checked against the
 * index's XXH3 by the caller, read_member in shards.c), never into the
 * store: a cache entry is always a whole shard whose sum matched, so a
 * shared cache_dir, other mounts and later passes see only those. Called
 * with sh->lock held; the range GET runs with it dropped. */
#include "cache/store/shards_int.h"

#include "cache/store/demand.h"
#include "cache/store/store.h"
#include "common/lockcheck.h"
#include "common/log.h"
#include "common/util.h"
#include "fetch/format/index.h"
#include "fetch/net/http.h"

#include <errno.h>
#include <unistd.h>

/* Weight of a new duration in the round-trip EWMA. */
#define RTT_ALPHA 0.2

static unsigned busy_streams(struct shards *sh)
{
	return sh->nfetching + (unsigned)workq_pending(sh->wq);
}

/* The shard in state NONE that most readers waited for (the lowest
 * number among equals), or UINT32_MAX. */
static uint32_t most_wanted(const struct shards *sh)
{
	uint32_t best = UINT32_MAX;
	unsigned most = 0;
	double now = now_mono();

	for (size_t i = 0; i < nshards(sh); i++) {
		const struct slot *s = &sh->slots[i];
		if (s->state == NONE && s->wants > most &&
		    now >= s->bypass_until) {
			most = s->wants;
			best = (uint32_t)i;
		}
	}
	return best;
}

void shards_demand_schedule(struct shards *sh)
{
	ASSERT_HELD(&sh->lock);
	while (!sh->stop && busy_streams(sh) < sh->demand_streams) {
		uint32_t n = most_wanted(sh);
		if (n == UINT32_MAX)
			return;
		shards_enqueue(sh, n);
		if (sh->slots[n].state != QUEUED)
			return; /* the queue refused it: shutting down */
	}
}

/* Seconds until shard n's stream brings byte `end`: -1 when it is not
 * streaming into a writer or has brought nothing yet (no rate). */
static double stream_eta(const struct slot *s, uint64_t end, double *rate)
{
	double el;

	*rate = 0;
	if (s->state != FETCHING || !s->wr || s->wr->bad || s->wr->closing)
		return -1;
	if (s->wr->avail >= end)
		return 0;
	el = now_mono() - s->wr->started;
	if (el <= 0 || s->wr->avail == 0)
		return -1;
	*rate = (double)s->wr->avail / el;
	return (double)(end - s->wr->avail) / *rate;
}

bool shards_demand_wants_range(struct shards *sh, uint32_t n, uint64_t off,
			       size_t len)
{
	ASSERT_HELD(&sh->lock);
	const struct slot *s = &sh->slots[n];
	struct demand_link l = {.rtt_s = sh->rtt_s};
	struct demand_case c = {
		.sample_bytes = len,
		.shard_bytes = sh->ix->shards[n].size,
		.ranges_refused = sh->ranges_refused,
		.range_bytes = sh->range_bytes,
		.fetched_bytes = sh->stats.fetched_bytes,
		.dataset_bytes = sh->dataset_bytes,
	};

	c.shard_eta_s = stream_eta(s, off + len, &l.rate_Bps);
	return demand_decide(&c, &l) == DEMAND_RANGE;
}

bool shards_demand_peer_busy(struct shards *sh, uint32_t n)
{
	ASSERT_HELD(&sh->lock);
	const struct index_shard *is = &sh->ix->shards[n];
	int fd;

	if (!sh->st)
		return false;
	pthread_mutex_unlock(&sh->lock);
	fd = store_peer_open_other(sh->st, is->url, is->etag, is->size);
	if (fd >= 0)
		close(fd);
	pthread_mutex_lock(&sh->lock);
	return fd >= 0;
}

static void note_refused(struct shards *sh, uint32_t n)
{
	char red[512];

	http_redact(sh->ix->shards[n].url, red, sizeof(red));
	log_warn("shard %u (%s): the server refuses range requests (%s); "
		 "demand-first reads are off, readers wait for whole shards",
		 n, red, http_reason(-ERANGE));
}

int shards_demand_range(struct shards *sh, uint32_t n, uint64_t off, size_t len,
			void *buf)
{
	ASSERT_HELD(&sh->lock);
	const struct index_shard *is = &sh->ix->shards[n];
	double t0 = now_mono(), d;
	bool first = false;
	int r;

	pthread_mutex_unlock(&sh->lock);
	r = http_get_part(sh->h, is->url, is->etag, is->size, off, len, buf);
	pthread_mutex_lock(&sh->lock);
	d = now_mono() - t0;
	if (r == 0) {
		sh->stats.range_reads++;
		sh->stats.demand_ranges++;
		sh->range_bytes += len + DEMAND_HEADER_BYTES;
		sh->rtt_s = sh->rtt_s > 0 ? (1 - RTT_ALPHA) * sh->rtt_s +
						    RTT_ALPHA * d
					  : d;
	} else if (r == -ERANGE) {
		sh->stats.ranges_refused++;
		first = !sh->ranges_refused;
		sh->ranges_refused = true;
	}
	if (first) {
		pthread_mutex_unlock(&sh->lock);
		note_refused(sh, n);
		pthread_mutex_lock(&sh->lock);
	}
	return r;
}
