/* push.h - once a shard is in the disk cache, push all its files into the
 * kernel page cache (FUSE notify_store), so that reading them later costs
 * no request to the daemon at all.
 *
 * DESIGN
 * - Shards are the dataset's groups (cache/dataset.h).
 * - One thread takes shard numbers from a FIFO queue. A shard is queued the
 *   first time any of its files is read (push_touch), at most once per
 *   mount. If the shard is not complete in the disk cache yet, the thread
 *   puts it back and tries again a little later (for at most
 *   PUSH_WAIT_S); shards served without a disk cache are never pushed.
 * - For each file of the shard it reads the sample from the cache and
 *   stores it at offset 0 of the file's inode. The kernel only accepts this
 *   for inodes it already knows (looked up or listed with READDIRPLUS, as
 *   ImageFolder does); other files are skipped and read the usual way.
 * - The thread and its queue are a one-worker common/workq.h queue; a
 *   shard put back waits with workq_pause (RETRY_MS, cut short when
 *   another shard is touched), so the thread never spins.
 * - Locking: only the work queue's mutex, never held while reading a
 *   sample or talking to the kernel. The per-shard "touched" flags are
 *   atomics so a read costs one atomic exchange.
 */
#ifndef ECHOFS_PUSH_H
#define ECHOFS_PUSH_H

#include "common/attrs.h"
#include <stdint.h>

struct fuse_session;
struct dataset;
struct namespace;

#define PUSH_WAIT_S 60.0

struct push_stats {
	uint64_t shards; /* shards pushed */
	uint64_t files;  /* files stored in the page cache */
	uint64_t bytes;
	uint64_t unknown; /* files skipped: inode not known to the kernel */
	uint64_t waits;   /* shards put back: not in the disk cache yet */
};

struct push;

/* All borrowed; must outlive the result. Starts the thread. Returns 0 with
 * *out set, or -errno with *out NULL (the thread could not start). */
MUST_CHECK
int push_open(struct fuse_session *se, const struct namespace *ns,
	      struct dataset *ds, struct push **out);
/* Stops the thread (it finishes the file it is on) and frees. Accepts NULL. */
void push_free(struct push *p);

/* A file of `shard` was read. Cheap after the first call for a shard. */
void push_touch(struct push *p, uint32_t shard);

void push_get_stats(struct push *p, struct push_stats *out);

#endif
