/* shards_int.h - the shard manager's shared inside, for its own files
 * only: shards.c (readers, pass tracking, life cycle), shards_fetch.c (the
 * fetch workers) and shards_view.c (zero-copy views). States, reference
 * counts and the lock are described at the top of shards.c. */
#ifndef ECHOFS_SHARDS_INT_H
#define ECHOFS_SHARDS_INT_H

#include "cache/store/shards.h"
#include "common/workq.h"
#include "fetch/format/index.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

struct store_entry;
struct store_writer;
struct verify;

/* Not an errno: "state changed, look again". */
#define AGAIN ((ssize_t)-0x40000000)

enum state { NONE, QUEUED, FETCHING, CACHED, FAILED, UNCACHED };

struct cref {
	struct store_entry *e;
	unsigned users;
	bool retired;
	/* Zero-copy views (shards_view): the entry's descriptor and size
	 * (borrowed from the entry), found by the first view; map_len 0
	 * until then. */
	uint64_t map_len;
	int fd;
	bool map_failed; /* do not try again */
};

struct wref {
	struct store_writer *w;
	double started; /* when the stream began, for its rate */
	uint64_t avail; /* bytes readable through w */
	unsigned users;
	bool closing; /* worker is committing: no new users */
	bool bad;     /* a sample read from it failed its checksum */
};

struct slot {
	struct workq_item item; /* in the fetch queue while QUEUED */
	enum state state;
	struct cref *c;
	struct wref *wr;
	double until;
	double queued_at; /* when it entered the queue */
	uint64_t last_use;
	unsigned waiters;
	double tmo_at; /* when a read at tmo_off last timed out */
	uint64_t tmo_off;
	unsigned bad_copies; /* checksum failures since the last good copy */
	double bypass_until; /* the store refused it (EDQUOT) until then */
	unsigned wants;	     /* demand first: reads that waited for it since
			      * it was last cached (the download order) */
	pthread_cond_t cond; /* state, avail or users changed */
};

/* A shard's store key hash, for the store's "needed" hint. */
struct keyed {
	uint64_t hash;
	uint32_t shard;
};

/* The current pass over the mount's view (shards_track). Its own lock,
 * a leaf: taken by readers on every noted sample, nothing taken inside. */
struct pass {
	pthread_mutex_t lock;
	uint8_t *seen;	      /* per index sample: read this pass */
	uint8_t *in_view;     /* per index sample: part of the view */
	uint32_t *view_count; /* per shard: samples in the view */
	atomic_uint *left;    /* per shard: not read yet this pass; read
			       * without the lock by the store's hint */
	uint64_t view_left;   /* samples of the view not read yet */
	uint64_t view_total;
	uint64_t passes;    /* completed */
	struct keyed *keys; /* sorted by hash */
};

struct shards {
	const struct index *ix;
	struct pass *pass; /* NULL: not tracked (set once by shards_track) */
	struct http *h;
	struct store *st;
	struct verify *vf; /* NULL: the index has no checksums */
	double retry_failed_s, read_timeout_s;
	double range_after_s; /* 0: readers always wait for the stream */
	unsigned max_pinned;
	struct workq *wq; /* the fetch workers and their FIFO of slots */
	/* Everything below is guarded by lock (lock order: this lock, then the
	 * store's or the work queue's). */
	pthread_mutex_t lock;
	struct slot *slots;
	size_t nslots; /* the index's shards at open: a shard added later has
			* no slot and reads as unknown */
	unsigned npinned, nfetching;
	/* Demand first (shards_track; shards_demand.c). */
	bool demand;
	bool ranges_refused;	 /* the server said no: whole shards only */
	unsigned demand_streams; /* whole-shard downloads at once, at most */
	uint64_t range_bytes;	 /* demand range bytes (headers estimated) */
	uint64_t dataset_bytes;	 /* every shard's size */
	double rtt_s;		 /* EWMA of demand range GETs' durations */
	double wait_at_pass;	 /* stats.net_wait_s when the pass began */
	uint64_t use_clock;
	bool stop;
	struct shards_stats stats;
};

static inline size_t nshards(const struct shards *sh)
{
	return sh->nslots;
}

static inline void wake(struct slot *s)
{
	if (s->waiters)
		pthread_cond_broadcast(&s->cond);
}

/* With range_after_s set, a reader waiting for a stream switches to a range
 * GET of its own bytes when the shard has sat in the queue that long, or
 * the stream, after that long, would take over RANGE_ETA_S to reach them. */
#define RANGE_ETA_S 2.0
#define RANGE_RECHECK_S 0.25
/* The kernel repeats a failed readahead as a synchronous read of the same
 * bytes at once: fail that repeat at once, so that one read(2) waits
 * read_timeout, not twice that. */
#define TIMEOUT_REPEAT_S 1.0

/* ---- shards.c (sh->lock held) ---- */

void shards_enqueue(struct shards *sh, uint32_t n);
void shards_cref_release(struct cref *c);
void shards_retire(struct shards *sh, struct slot *s);
void shards_unpin_some(struct shards *sh, uint32_t keep, bool all);
void shards_attach(struct shards *sh, uint32_t n, struct store_entry *e);
/* Readers take range GETs for shard n for a while: the store refused it. */
#define BYPASS_S 1.0

/* ---- shards_demand.c (sh->lock held; see demand.h) ---- */

/* Whole-shard downloads in demand mode, at most (and workers). */
#define DEMAND_STREAMS 2u

/* Queue the shards readers waited for most, while fewer than
 * demand_streams downloads are queued or running. */
void shards_demand_schedule(struct shards *sh);
/* Should this reader (len bytes at off of shard n, in state NONE, QUEUED
 * or FETCHING) fetch its bytes with a range GET now? */
bool shards_demand_wants_range(struct shards *sh, uint32_t n, uint64_t off,
			       size_t len);
/* Lock dropped meanwhile. Is another mount sharing the cache downloading
 * shard n? Its bytes then come once for both (peer reads), not by range. */
bool shards_demand_peer_busy(struct shards *sh, uint32_t n);
/* Lock dropped meanwhile. len bytes at off of shard n with a range GET:
 * 0, or -errno (-ERANGE: the server refuses ranges; turned off for the
 * mount and logged once). Counted in range_reads and demand_ranges. */
int shards_demand_range(struct shards *sh, uint32_t n, uint64_t off, size_t len,
			void *buf);

/* ---- shards_fetch.c ---- */

/* The work queue's run callback: a fetch worker took slot `it`. */
void shards_fetch_slot(void *ctx, struct workq_item *it);
/* sh->lock held. Shard n failed for good (reads fail fast for a while). */
void shards_set_failed(struct shards *sh, uint32_t n);
/* sh->lock held. The store cannot take shard n: readers use range GETs. */
void shards_set_uncached(struct shards *sh, uint32_t n);
/* No lock held. Say why shard n failed. */
void shards_log_failure(struct shards *sh, uint32_t n, int err);
/* sh->lock held. A copy of shard n failed its checksum. */
void shards_bad_copy(struct shards *sh, uint32_t n);
/* No lock held. Say that shard n (sample `sample`, or NULL: the whole
 * shard) did not match the index, with its count of bad copies. */
void shards_log_mismatch(struct shards *sh, uint32_t n, const char *sample,
			 unsigned copies);

#endif
