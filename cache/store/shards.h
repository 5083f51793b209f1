/* shards.h - shard data for readers: serves byte ranges of shards from the
 * disk cache, fetching whole shards in the background when they are not
 * there yet.
 *
 * DESIGN
 * - `workers` fetch threads (a common/workq.h work queue) take shards from a
 *   FIFO queue; shards_free drops what is still queued. A read of a
 *   shard that is not cached queues the whole shard (read-ahead: one
 *   sequential GET streamed into a store writer) and waits until the bytes it
 *   needs have arrived, then reads them back from the writer's file; later
 *   reads of that shard are served from the finished cache entry.
 * - Shuffled readers over a slow link would wait for half a shard per
 *   file; with range_after_s set, a reader that would wait long reads just
 *   its bytes with a range GET instead (see shards_opts).
 * - Demand first (tracked views, i.e. exact mounts; shards_demand.c and
 *   demand.h): a read whose shard is not local takes a range GET of its
 *   bytes at once when demand_decide says it pays, counts toward its
 *   shard's wants, and whole shards download at most DEMAND_STREAMS at a
 *   time, most wanted first, instead of one queued per read.
 * - When the disk cache can't take the shard (no store, disk full, shard
 *   larger than the cache), reads are served by range GETs of just the
 *   requested bytes (counted as range_reads) and nothing is kept.
 * - A corrupt cache entry (checksum mismatch) is dropped and fetched again;
 *   the reader waits for the new copy and is never given the bad bytes.
 * - A shard whose fetch failed for good (404, 403, retries exhausted) is
 *   marked failed: its reads return -EIO at once for `retry_failed_s` seconds,
 *   after which the next read tries again. Other shards are unaffected.
 * - A cached shard's store entry stays pinned while readers use it, so a hit
 *   costs one pread (each block's checksum is checked once). At most
 *   max(32, 8 * workers) entries stay pinned; the least recently read ones are
 *   unpinned so the store can evict them, and all are unpinned when the store
 *   has no room for a new shard.
 * - A shard another mount (sharing the cache) is fetching: our worker waits
 *   for that fetch in store_begin; meanwhile a read of one whole sample is
 *   served from the other mount's temp file (store_peer_open) as soon as
 *   the bytes there match the index's per-sample sum (polled every 50 ms),
 *   counted in peer_reads. Needs an index with sums.
 * - Pass tracking (shards_track): per-sample "read this pass" bits and
 *   per-shard counts under their own leaf lock; the counts are atomics the
 *   store's eviction hint reads under the store lock without taking ours.
 * - Zero-copy views (shards_view): a whole sample of a pinned entry is
 *   handed out as (fd, offset) after hashing it with pread from the
 *   entry's file (verify_sample_fd). Not through a mapping: cache_dir may
 *   be shared, and a file another process truncates under a mapping faults
 *   (SIGBUS) where a read comes back short, which only refuses the view
 *   (the copying path then finds the entry corrupt). The view holds a
 *   user reference like a reader does, so the entry stays pinned until
 *   shards_view_done.
 * - Views of a shard still streaming (FETCHING with a store writer): a
 *   whole sample below the bytes already written is handed out as the
 *   writer's temp file and the sample's offset in it, hashed the same way
 *   (no lock held). The view holds a writer user reference (wref.users)
 *   until shards_view_done, so the worker's commit or abort (close_writer)
 *   waits for it and the descriptor stays open. Counted in
 *   views_streaming.
 * - Locking: one mutex guards the per-shard state table and the queue; it is
 *   never held across network I/O or disk reads. It may be held while calling
 *   into the store (store_put, store_drop: short, no data I/O).
 *   Lock order: shards lock, then store lock (inside store_*) or the work
 *   queue's (queueing a fetch), never reverse; workers run without either.
 *   A view of a stream takes the shards lock only to add and drop its
 *   wref.users reference (nothing inside it); it hashes with no lock held, and the FUSE reply that splices it runs lock free.
 *   The worker's close_writer waits on the slot's cond (under the shards
 *   lock) for that reference to go, before store_commit / store_abort.
 */
#ifndef ECHOFS_SHARDS_H
#define ECHOFS_SHARDS_H

#include "common/attrs.h"
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

struct index;
struct http;
struct store;

struct shards_opts {
	unsigned workers;      /* fetch threads; 0 means 4 */
	double retry_failed_s; /* how long a failed shard fails fast; 0 means 30 */
	double read_timeout_s; /* longest a read waits for data (range GETs
				* included); 0 means 120 */
	/* When > 0: a read that has waited this long for its shard's stream
	 * (queued behind busy workers, or streaming too slowly to reach its
	 * bytes within 2 s) fetches just its bytes with a range GET, counted
	 * in range_reads; the stream goes on for later reads. Leave some
	 * connections free of streams (workers < connections) for these.
	 * 0: always wait for the stream. */
	double range_after_s;
};

struct shards_stats {
	uint64_t hits;          /* reads served from a complete cache entry */
	uint64_t misses;        /* reads that waited for a fetch (served from
				 * the partial file or the new entry) */
	uint64_t range_reads;   /* reads served by a range GET (uncached mode) */
	uint64_t fetched_shards;
	uint64_t fetched_bytes; /* shard body bytes streamed */
	uint64_t failed_shards; /* fetches that failed for good */
	uint64_t refetches;     /* corrupt cache entries fetched again */
	uint64_t read_errors;   /* reads that returned an error */
	uint64_t read_timeouts; /* of read_errors: reads that waited
				 * read_timeout (the kernel's repeat of one,
				 * failed at once, is not counted) */
	uint64_t verify_errors; /* samples or whole shards that did not match
				 * the index's checksums */
	uint64_t queued;        /* shards waiting for a worker now */
	uint64_t active;        /* shard fetches in progress now */
	uint64_t views;         /* reads answered as zero-copy views (all) */
	uint64_t views_streaming; /* of views: from a shard still streaming
				   * (counted in misses, not hits) */
	uint64_t views_refused; /* views not made: the bytes where the sample
				 * lies did not match the index (copied, and
				 * found bad, by the checking path instead) */
	uint64_t bypassed;      /* range reads of shards not admitted, to keep
				 * what the pass still needs (shards_track) */
	uint64_t peer_reads;    /* samples served from another mount's partial
				 * download of the shard (checked by sum) */
	uint64_t passes;        /* passes over the tracked view completed */
	uint64_t pass_left;     /* samples of the view this pass has not read */
	/* Demand first (shards_track) and the time readers waited. */
	uint64_t demand_ranges; /* of range_reads: a reader's sample fetched
				 * ahead of its shard (demand first) */
	uint64_t range_bytes;   /* their bytes, response headers estimated */
	uint64_t ranges_refused; /* range GETs the server refused (200 or
				  * 416): whole shards from then on */
	double net_wait_s;      /* reader time spent waiting for the network
				 * (a range GET, a download, a peer's) */
	double net_wait_pass_s; /* of it, in the current pass (the read
				 * that completes a pass counts in the next:
				 * its sample is noted before it is read) */
	double net_wait_last_pass_s; /* in the last completed pass */
};

struct shards;

/* ix, h and st are borrowed and must outlive the result; st may be NULL (no
 * disk cache). Starts the worker threads. Returns 0 with *out set, or
 * -errno (-EINVAL, -EOVERFLOW: too many samples to check, or the threads'). */
MUST_CHECK
int shards_open(const struct index *ix, struct http *h, struct store *st,
		const struct shards_opts *o, struct shards **out);
/* Stops the workers (aborting transfers in progress: a transfer stalled with
 * no data at all ends at the http low-speed limit) and frees. No read may be
 * in progress. Accepts NULL. */
void shards_free(struct shards *sh);

/* Shutdown, first step: reads waiting or starting now return -ECANCELED,
 * workers stop taking shards and their streams stop at the next chunk
 * (cancel the http handle too, so a stalled one ends). Accepts NULL. */
void shards_cancel(struct shards *sh);

/* A read of part of a sample's member (with checksums) holds the whole
 * member in memory to check it: members over this size are refused for
 * such reads (-EFBIG, logged); a read of the whole member never is. The
 * same bound as the pool's and the converted outputs'. */
#define SHARDS_PART_SAMPLE_MAX ((size_t)256 << 20)

/* Read up to len bytes at off of shard `shard` into buf, blocking until they
 * are available. Returns the byte count (len unless past the shard's end) or
 * -EIO (shard failed; the reason is logged once per failure), -ETIMEDOUT,
 * -EINVAL (bad shard number), -EFBIG (part of a member over
 * SHARDS_PART_SAMPLE_MAX). */
MUST_CHECK
ssize_t shards_read(struct shards *sh, uint32_t shard, uint64_t off,
		    size_t len, void *buf);

/* A zero-copy view of a read: len bytes at off of the open file fd. */
struct shards_view {
	int fd;
	uint64_t off;
	size_t len;
	void *ref; /* the pinned entry or the writer, for shards_view_done */
	uint32_t shard;
	int streaming; /* ref is the writer of a shard still streaming */
};

/* The bytes of one whole sample member (off and len exactly the index's)
 * as a place in a committed cache file, or in the temp file of a shard
 * still streaming once the member has been written, for a reply that
 * splices them
 * (fuse_reply_data with FUSE_BUF_IS_FD). The member is hashed and compared
 * with the index on every call, from a read-only mapping of the same file
 * whose pages the reply then takes, so no byte goes out unchecked; the
 * entry stays pinned (never evicted or reused; an unlinked file stays
 * readable), or the stream's writer stays open (its commit or abort waits),
 * until shards_view_done. Returns 0, or -EAGAIN when the bytes are not
 * servable this way now (not cached or not pinned yet, not written yet,
 * index without checksums, a partial member, or a mismatch: shards_read
 * then handles the read as before), or -EINVAL. Counted once done: in hits
 * and views (cache file), or misses, views and views_streaming (stream). */
MUST_CHECK
int shards_view(struct shards *sh, uint32_t shard, uint64_t off, size_t len,
		struct shards_view *v);
void shards_view_done(struct shards *sh, struct shards_view *v);

/* Pass tracking, for a cache smaller than the data (exact mounts): samples
 * (index sample numbers, n of them; borrowed) are the mount's view. A pass
 * is every sample of the view read once (shards_note), then the next one
 * begins. The store is told which shards the current pass has not finished
 * ("needed"); those are evicted last and never to admit another shard: a
 * read of a shard that would fit only by evicting needed ones is served by
 * a range GET of just its bytes (counted in bypassed), without a
 * whole-shard fetch. A shard the pass has finished is unpinned at once so
 * it goes first. Call once, before the first read. 0 or -EINVAL. Without
 * it (echo mounts: the pool streams whole shards on purpose) nothing
 * changes. */
MUST_CHECK
int shards_track(struct shards *sh, const uint32_t *samples, size_t n);
/* Sample (an index sample number) is being read by the mount's reader (or
 * pushed into the page cache). No-op without shards_track. */
void shards_note(struct shards *sh, uint32_t sample);

/* Queue shard for background fetch if it is neither cached nor queued. */
void shards_prefetch(struct shards *sh, uint32_t shard);

/* 1 if the shard is complete in the disk cache. */
int shards_is_cached(struct shards *sh, uint32_t shard);
/* 1 if every shard is complete in the disk cache (so under its cap, and
 * this mount's reads, which then write nothing, evict none of them;
 * another mount sharing the directory still may). A scan of every shard:
 * call it seldom. */
int shards_all_local(struct shards *sh);

void shards_get_stats(struct shards *sh, struct shards_stats *out);

#endif
