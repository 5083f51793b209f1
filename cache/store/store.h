/* store.h - the on-disk shard cache: one file per shard version under
 * cache_dir, written atomically, checksummed per block, capped in size with
 * LRU eviction, and found again by later mounts.
 *
 * An entry is keyed by (url, etag, size): a changed remote object has another
 * key, so stale bytes are never served for it. Entry files are
 * "<dir>/shards/<16 hex digits>.shard": the shard bytes, then a footer of one
 * CRC-32 per STORE_BLOCK bytes and a trailer naming the key,
 * so a file is self-describing and a corrupt or foreign file is detected.
 *
 * The exact file layout is described at the top of store.c. Temp files
 * ("<dir>/shards/.tmp-*") left by a crash are removed by store_open, so two
 * live processes must not share one cache dir. Files in the directory that are
 * not named like entries are left alone.
 *
 * Thread safety: every function may be called from any thread. Entries handed
 * out by store_get are pinned (never evicted or unlinked under a reader) until
 * store_put. An entry's file is open only while it is pinned (one descriptor
 * per pinned entry, opened by the first store_get, closed by the last
 * store_put): callers reading an entry often should keep it pinned. */
#ifndef ECHOFS_STORE_H
#define ECHOFS_STORE_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#define STORE_BLOCK (1024 * 1024)

struct store_stats {
	uint64_t entries;
	uint64_t bytes;        /* on disk, data + footers */
	uint64_t cap;
	uint64_t evictions;
	uint64_t corrupt;      /* entries found corrupt and dropped */
	uint64_t write_errors; /* entries that could not be written (disk full...) */
};

struct store;
struct store_entry;
struct store_writer;

/* Creates dir (and dir/shards) with mode 0700 if missing, scans the existing
 * entries (LRU order by mtime) and evicts down to cap. Returns NULL with a
 * reason in err if the directory can't be created or used. */
struct store *store_open(const char *dir, uint64_t cap, char *err,
			 size_t errlen);
/* Every entry must have been put and every writer finished. Accepts NULL. */
void store_close(struct store *s);

/* Look up a complete entry. NULL if absent. The entry is pinned and marked
 * most recently used; release it with store_put. */
struct store_entry *store_get(struct store *s, const char *url,
			      const char *etag, uint64_t size);
void store_put(struct store_entry *e);

/* Read from a pinned entry. Each block is checked against its checksum the
 * first time any of it is read. Returns bytes read (len unless past the end),
 * or -EBADMSG when a block is corrupt (the caller then calls store_drop and
 * fetches again), or -errno. */
ssize_t store_pread(struct store_entry *e, void *buf, size_t len,
		    uint64_t off);

/* Mark a pinned entry corrupt: it is unlinked once unpinned and never
 * returned again. Does not release the caller's pin. */
void store_drop(struct store_entry *e);

/* Start writing an entry. Evicts unpinned entries to make room for size
 * bytes plus footer, and claims the disk space up front (fallocate) so a full
 * disk shows here rather than half way through. Returns NULL (errno set:
 * ENOSPC when it can't fit under the cap even after eviction, or is larger
 * than the cap, or the disk is full; EROFS, EACCES... from creating the file)
 * when the entry can't be written: the caller then serves without the cache.
 * Disk errors are counted in write_errors; "larger than the cap" is not. A
 * writer is used by one thread; store_writer_pread may be called from others. */
struct store_writer *store_begin(struct store *s, const char *url,
				 const char *etag, uint64_t size);
/* Append data. Returns 0 or -errno (e.g. -ENOSPC). */
int store_write(struct store_writer *w, const void *data, size_t len);
/* Bytes appended so far. */
uint64_t store_written(const struct store_writer *w);
/* Read back bytes already appended (off + len <= store_written). Used to
 * serve readers while the rest of the shard is still arriving. */
ssize_t store_writer_pread(struct store_writer *w, void *buf, size_t len,
			   uint64_t off);
/* Finish: all `size` bytes must have been written (-EPROTO otherwise). Writes
 * the footer, fsyncs, renames into place. Returns the entry pinned (as
 * store_get would), or NULL with errno set. The writer is freed either way. */
struct store_entry *store_commit(struct store_writer *w);
/* Discard a partial entry. Frees the writer. Accepts NULL. */
void store_abort(struct store_writer *w);

void store_get_stats(struct store *s, struct store_stats *out);

#endif
