/* store.h - the on-disk shard cache: one file per shard version under
 * cache_dir, written atomically, checksummed per block, capped in size, and
 * shared by any number of echofs processes at once and by later mounts.
 *
 * An entry is keyed by (url, etag, size): a changed remote object has another
 * key, so stale bytes are never served for it. Entry files are
 * "<dir>/shards/<16 hex digits>.shard": the shard bytes, then a footer of one
 * checksum per STORE_BLOCK bytes (store_format.h) and a trailer naming the key,
 * so a file is self-describing and a corrupt or foreign file is detected.
 *
 * Sharing (the DESIGN note at the top of store.c has the details): processes
 * coordinate through flock(2) on files in the directory, never by guessing.
 * A writer's temp file ("<dir>/shards/.tmp-<hash>-<pid>-<n>-<random>") stays
 * locked until it is renamed, and store_open removes only temp files nobody
 * holds; the cap is kept over the whole directory (every admission, under a
 * directory lock, learns from a journal, "<dir>/shards.journal", what other
 * processes added or removed since it last looked, their temp files
 * included, without reading the directory); an entry pinned
 * here is never evicted, and one pinned by another process only when nothing
 * else frees enough (that process keeps reading the unlinked file); and an
 * entry being written by one process is waited for, not written again, by
 * the others ("<name>.lock").
 *
 * Eviction is scan resistant: entries used again since they were written
 * (looked up at least a second later) are kept before entries that were not,
 * and among the latter the newest go first (the two newest last), so a sweep
 * over more data than fits keeps part of it instead of none (plain LRU keeps
 * none). With a reader's hint (store_set_needed), entries it still needs go
 * after all others, and never to admit a new entry. Files in the directory
 * that are not named like
 * entries, temp or lock files are left alone.
 *
 * Thread safety: every function may be called from any thread. Entries handed
 * out by store_get are pinned (never evicted or unlinked under a reader) until
 * store_put. An entry's file is open only while it is pinned (one descriptor
 * per pinned entry, opened by the first store_get, closed by the last
 * store_put): callers reading an entry often should keep it pinned. */
#ifndef ECHOFS_STORE_H
#define ECHOFS_STORE_H

#include "common/attrs.h"
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#define STORE_BLOCK (1024 * 1024)

struct store_stats {
	uint64_t entries;
	uint64_t bytes; /* on disk, data + footers */
	uint64_t cap;
	uint64_t evictions;
	uint64_t corrupt;      /* entries found corrupt and dropped */
	uint64_t write_errors; /* entries that could not be written (disk
				  full...) */
	uint64_t waits;	       /* writers that waited for another writer of
				* the same entry (another mount's fetch);
				* counted when the wait starts */
	uint64_t rescans;      /* directory rescans (open; an admission only
				* when the journal cannot say what changed) */
};

struct store;
struct store_entry;
struct store_writer;

/* Creates dir (and dir/shards) with mode 0700 if missing, removes temp files
 * whose writer is gone, loads the existing entries and evicts down to cap.
 * dir, dir/shards and dir/prepared (if there) must each be a real
 * directory (not a symlink: -ELOOP) owned by the effective uid and not
 * writable by group or others (-EPERM): another local user must not be
 * able to plant entries, or links that send writes elsewhere. Every later
 * call goes through the descriptor of dir/shards opened here, so a
 * directory recreated under that path meanwhile is not used. Returns 0
 * with *out set, or -errno with one line naming the directory in err. */
MUST_CHECK
int store_open(const char *dir, uint64_t cap, struct store **out, char *err,
	       size_t errlen);
/* Every entry must have been put and every writer finished. Accepts NULL. */
void store_close(struct store *s);

/* How long store_begin waits for another writer of the same entry (default
 * 120 s); 0: not at all. */
void store_set_wait(struct store *s, double seconds);
/* For a store of many small entries that are checked at every first read
 * (the prepared-sample tier): a commit skips both fsyncs. A crash of the
 * machine may then lose or cut recent entries, which their checks drop at
 * the first read. Any `seconds` > 0 turns it on (the value is no longer
 * used: admissions stopped rescanning the directory, lazy or not); 0 (the
 * default): every commit is durable. */
void store_set_lazy(struct store *s, double seconds);
/* A lookup within this many seconds after an entry was written does not
 * count as a use again (default 1 s; see the eviction order above). */
void store_set_reuse_gap(struct store *s, double seconds);
/* The reader's hint for eviction and admission: fn(ud, hash) says whether
 * the entry whose key hashes to `hash` (store_key_hash) is still needed by
 * the reader (e.g. its shard has samples the current pass has not read).
 * With a hint set, entries it names are never evicted to admit another:
 * store_begin fails with EDQUOT instead, and the reader serves that shard
 * without the cache. fn is called under the store's lock, from any thread:
 * it must not block nor call into the store. NULL removes it (before ud
 * goes away). */
typedef int (*store_needed_fn)(void *ud, uint64_t hash);
void store_set_needed(struct store *s, store_needed_fn fn, void *ud);
/* The hash that store_needed_fn is given for an entry of this key. */
uint64_t store_key_hash(const char *url, const char *etag, uint64_t size);
/* 1 if an entry of `size` bytes would fit now by evicting only entries the
 * hint does not name (this process's table; a guess, store_begin decides),
 * or could never fit (larger than the cap: store_begin refuses that with
 * ENOSPC and its reason is logged); 0 if only needed entries stand in the
 * way. For readers that would rather not queue a fetch that is refused. */
int store_fits(struct store *s, uint64_t size);
/* For tests: store_fits's answer by a walk of the whole table (how it was
 * computed before the running sum), and that sum beside the same sum
 * walked; they must agree. */
void store_debug_fits_walk(struct store *s, uint64_t size, int *fits,
			   uint64_t *live_sum, uint64_t *live_walk);

/* For tests: fn(ud, name) runs when a lookup or a rescan has found the
 * entry file `name` invalid, before the file is removed (the store's mutex
 * not held), so that a test can put another file under that name at that
 * moment. Set it before other threads use the store; NULL removes it. */
typedef void (*store_invalid_fn)(void *ud, const char *name);
void store_debug_on_invalid(struct store *s, store_invalid_fn fn, void *ud);

/* End every present and future wait of store_begin with ECANCELED (for
 * shutdown). */
void store_interrupt(struct store *s);

/* Look up a complete entry (also one another process wrote). NULL if
 * absent. The entry is pinned and its use recorded (for every process's
 * eviction order); release it with store_put. */
struct store_entry *store_get(struct store *s, const char *url,
			      const char *etag, uint64_t size);
void store_put(struct store_entry *e);

/* 1 if a complete entry of the key is in the store, else 0. Neither pins nor
 * records a use nor reads the file: for statistics. Constant time. */
int store_contains(struct store *s, const char *url, const char *etag,
		   uint64_t size);

/* Read from a pinned entry. Each block is checked against its checksum the
 * first time any of it is read. Returns bytes read (len unless past the end),
 * or -EBADMSG when a block is corrupt (the caller then calls store_drop and
 * fetches again), or -errno. */
MUST_CHECK
ssize_t store_pread(struct store_entry *e, void *buf, size_t len, uint64_t off);

/* The descriptor of a pinned entry's file (data at offset 0, size bytes),
 * valid until the caller's store_put; for zero-copy readers that check
 * what they serve themselves (cache/store/shards.c). -EBADF if not open. */
MUST_CHECK
int store_entry_fd(const struct store_entry *e, uint64_t *size);

/* Mark a pinned entry corrupt: it is unlinked once unpinned and never
 * returned again. Does not release the caller's pin. */
void store_drop(struct store_entry *e);
/* store_drop for a caller that says what was wrong: `what` (borrowed)
 * ends the one line logged (log_counted "cache_corrupt", rate-limited)
 * after the entry's name, instead of the shard layer's words. */
void store_drop_said(struct store_entry *e, const char *what);

/* Start writing an entry. If another writer (in any process) is writing the
 * same entry, first waits for it to finish (see store_set_wait). Evicts
 * unpinned entries to make room for size bytes plus footer, and claims the
 * disk space up front (fallocate) so a full disk shows here rather than half
 * way through. Returns 0 with *out set (the caller finishes it with
 * store_commit or store_abort), or -errno with *out NULL when the entry
 * can't be written: -EEXIST when the entry is complete in the store now,
 * written by the writer waited for (store_get it); -EBUSY when that writer
 * took longer than the wait; -ECANCELED after store_interrupt; -ENOSPC when
 * it can't fit under the cap even after eviction, or is larger than the
 * cap, or the disk is full; -EDQUOT when it would fit only by evicting
 * entries the needed hint names (store_set_needed); -EROFS, -EACCES... from
 * creating the file. The caller then serves without the cache. Disk errors
 * are counted in write_errors; the others are not. A writer is used by one
 * thread; store_writer_pread may be called from others. */
MUST_CHECK
int store_begin(struct store *s, const char *url, const char *etag,
		uint64_t size, struct store_writer **out);
/* A read-only descriptor of the temp file a live writer (in any process,
 * this one included) is writing for this key, or -ENOENT. Its bytes are
 * what has arrived so far and zeros (allocated, unwritten) after: a caller
 * must check what it reads (the index's per-sample sums) before using it.
 * The caller closes it; it stays readable after the writer renames it into
 * place or aborts. For a reader waiting while another mount fetches the
 * shard (store_begin's wait). */
MUST_CHECK
int store_peer_open(struct store *s, const char *url, const char *etag,
		    uint64_t size);
/* store_peer_open, but only another process's writer: a reader deciding
 * whether another mount is downloading the shard must not take its own
 * fetch worker's temp file, made before the worker's state says so, for
 * one (issue 46: it then waited for its own slow stream). */
MUST_CHECK
int store_peer_open_other(struct store *s, const char *url, const char *etag,
			  uint64_t size);
/* Append data. Returns 0 or -errno (e.g. -ENOSPC). */
MUST_CHECK
int store_write(struct store_writer *w, const void *data, size_t len);
/* Bytes appended so far. */
uint64_t store_written(const struct store_writer *w);
/* Read back bytes already appended (off + len <= store_written). Used to
 * serve readers while the rest of the shard is still arriving. */
ssize_t store_writer_pread(struct store_writer *w, void *buf, size_t len,
			   uint64_t off);
/* The temp file's descriptor (borrowed: valid until store_commit or
 * store_abort), for readers that map or splice bytes below store_written
 * instead of copying them. The file was sized to the whole entry by
 * store_begin and is never shortened while the writer lives, so a mapping
 * of bytes below the entry's size cannot fault. -EBADF for NULL. */
MUST_CHECK
int store_writer_fd(const struct store_writer *w);
/* Finish: all `size` bytes must have been written (-EPROTO otherwise). Writes
 * the footer, fsyncs, renames into place. Returns 0 with *out set to the
 * entry, pinned (as store_get would), or -errno with *out NULL. The writer
 * is freed either way. */
MUST_CHECK
int store_commit(struct store_writer *w, struct store_entry **out);
/* Discard a partial entry. Frees the writer. Accepts NULL. */
void store_abort(struct store_writer *w);

void store_get_stats(struct store *s, struct store_stats *out);

#endif
