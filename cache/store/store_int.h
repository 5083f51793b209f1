/* store_int.h - the store's shared inside, for its own files only
 * (store.c: open, rescans, readers and writers; store_table.c: the table
 * and pins; store_evict.c: accounting and eviction; store_lock.c:
 * cross-process locks; store_format.c: the entry file). Locking rules are
 * the DESIGN note in store.c: s->lock guards what is marked so below. */
#ifndef ECHOFS_STORE_INT_H
#define ECHOFS_STORE_INT_H

#include "cache/store/store.h"
#include "cache/store/store_format.h"
#include "common/attrs.h"

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>
#include <time.h>
#include <xxhash.h>

struct store_entry {
	struct store *s;
	struct store_entry *hnext; /* hash chain; s->lock */
	uint64_t hash;		   /* hash64(key): names the file */
	char *key;
	char name[STORE_FMT_NAME_LEN + 1];
	uint64_t size;	     /* data bytes */
	uint64_t file_bytes; /* data + footer */
	uint32_t nblocks;
	uint32_t *sums;		  /* block checksums; immutable */
	enum store_sum sum_kind;  /* of the file's version; immutable */
	uint8_t *verified;	  /* per block; atomic loads/stores */
	struct timespec ins, use; /* written, last used; s->lock */
	dev_t dev;		  /* the file this entry describes */
	ino_t ino;
	int fd;		/* open (LOCK_SH) while pins > 0; s->lock */
	unsigned pins;	/* s->lock */
	bool dropped;	/* corrupt or gone: never returned again */
	bool owns_file; /* the name on disk is still this entry's file */
	bool seen;	/* rescan mark */
	uint64_t born;	/* s->gen when it entered the table */
};

struct store_writer {
	struct store *s;
	char *key;
	char name[STORE_FMT_NAME_LEN + 1];
	char *tmp_name; /* in s->dirfd, until renamed into place */
	uint64_t hash;
	uint64_t size, file_bytes;
	uint64_t written; /* atomic: read by store_writer_pread callers */
	uint32_t nblocks;
	uint32_t *sums;
	XXH3_state_t *xs; /* running sum of the block being filled */
	int fd;
	int lockfd; /* "<name>.lock", flock(LOCK_EX) held */
	int err;    /* first write error, sticky */
};

/* A temp file in the directory and its size: a writer in progress, in any
 * process, whose bytes count under the cap. */
struct store_tmp {
	char *name;
	uint64_t bytes;
};

struct store {
	pthread_mutex_t lock;
	char *shards_dir; /* for messages only: every call goes through dirfd */
	int dirfd;
	double wait_s;	    /* longest wait for another writer of an entry */
	double reuse_gap_s; /* see DEFAULT_REUSE_GAP_S, store.c */
	/* store_set_lazy: > 0, commits skip their fsyncs. */
	double lazy_s;
	/* Held with the directory lock (store_dir_lock), before it: flock
	 * already keeps out other threads, each on its own open file, but
	 * only a mutex makes that visible to ThreadSanitizer and to readers
	 * of the code. Taken before `lock`, never while holding it. */
	pthread_mutex_t dirmu;
	/* The change journal (store_journal.c) and what it keeps current:
	 * all guarded by the directory lock and dirmu. */
	int rootfd; /* the cache_dir: the journal's directory */
	int jfd;    /* the journal, or -1 (admissions rescan) */
	dev_t jdev; /* the file jfd is, to see it replaced */
	ino_t jino;
	uint64_t jseq; /* the table holds every change before it */
	bool jstale;   /* jseq means nothing: the next admission rescans */
	struct store_tmp *tmps; /* temp files in the directory (any writer's) */
	size_t ntmps, tmps_cap;
	int interrupted;  /* atomic: waits end with -ECANCELED */
	uint64_t counter; /* atomic: temp file names */
	/* All below guarded by lock. The table holds every entry this process
	 * knows, dropped ones included until their last put. */
	struct store_entry **tab;
	size_t nbuckets, nentries;
	uint64_t gen; /* rescans started */
	struct store_stats st;
	/* Sum of file_bytes over entries that own their file and are not
	 * dropped (entry_live): what eviction could free at most, so that
	 * store_fits answers most calls without walking the table. */
	uint64_t live_bytes;
	/* The reader's "still needed" hint (store_set_needed); NULL: none. */
	store_needed_fn needed;
	void *needed_ud;
	store_invalid_fn on_invalid; /* tests only (store_debug_on_invalid) */
	void *on_invalid_ud;
};

/* Does e count in s->live_bytes? Test (and adjust the sum) before any
 * change of owns_file, dropped or table membership: store_acct_* do. */
static inline bool entry_live(const struct store_entry *e)
{
	return e->owns_file && !e->dropped;
}

static inline int ts_cmp(struct timespec a, struct timespec b)
{
	if (a.tv_sec != b.tv_sec)
		return a.tv_sec < b.tv_sec ? -1 : 1;
	if (a.tv_nsec != b.tv_nsec)
		return a.tv_nsec < b.tv_nsec ? -1 : 1;
	return 0;
}

static inline struct timespec now_real(void)
{
	struct timespec t;
	clock_gettime(CLOCK_REALTIME, &t);
	return t;
}

/* ---- accounting (store_evict.c): the only code that changes s->st's
 * entries, bytes and counters and s->live_bytes. s->lock held, except
 * store_acct_count, which takes it. ---- */

/* e enters the table, owning its file, not dropped. */
void store_acct_add(struct store *s, struct store_entry *e);
/* e leaves the table (it is freed next). */
void store_acct_remove(struct store *s, struct store_entry *e);
/* The name no longer holds e's file (another process evicted or replaced
 * it): e stops counting and is never returned again. */
void store_acct_disown(struct store *s, struct store_entry *e);
/* e was found corrupt: never returned again (its file goes with its last
 * pin). Returns true the first time. */
bool store_acct_drop(struct store *s, struct store_entry *e);

enum store_count {
	STORE_COUNT_CORRUPT,
	STORE_COUNT_WRITE_ERRORS,
	STORE_COUNT_WAITS,
	STORE_COUNT_EVICTIONS,
};
void store_acct_count_locked(struct store *s, enum store_count c);
void store_acct_count(struct store *s, enum store_count c);

/* ---- eviction (store_evict.c) ---- */

/* s->lock and the directory lock held. Evict until `need` more bytes fit
 * under the cap, counting `tmp_bytes` of writers in progress. Returns 0,
 * -EDQUOT (only entries the needed hint names stand in the way) or
 * -ENOSPC. */
MUST_CHECK
int store_evict_for(struct store *s, uint64_t tmp_bytes, uint64_t need);

/* ---- the table (store_table.c; s->lock held unless said) ---- */

struct store_entry **store_tab_bucket(struct store *s, uint64_t h);
void store_tab_grow(struct store *s);
void store_tab_insert(struct store *s, struct store_entry *e);
void store_tab_remove(struct store *s, struct store_entry *e);
/* The live (not dropped) entry of key, in constant time. */
struct store_entry *store_tab_find(struct store *s, const char *key,
				   uint64_t h);
/* The entry, live or dropped, that describes the file (h, dev, ino). */
struct store_entry *store_tab_find_file(struct store *s, uint64_t h, dev_t dev,
					ino_t ino);
/* Add a loaded entry unless the table already describes that file; the
 * entry in the table. */
struct store_entry *store_tab_adopt(struct store *s, struct store_entry *e);
/* A new entry (no lock needed): takes sums; not in the table. */
struct store_entry *store_ent_new(struct store *s, const char *key,
				  uint64_t hash, uint64_t size, uint32_t *sums);
/* Free an entry not in the table (accepts NULL). */
void store_ent_free(struct store_entry *e);
/* Forget an unpinned entry; `unlink_file`: remove its file too, if the
 * name still holds that very file. */
void store_ent_destroy(struct store *s, struct store_entry *e,
		       bool unlink_file);

/* ---- loading and changes (store.c) ---- */

/* Directory lock held. Note the change in the journal, then remove `name`
 * if it still holds the file (dev, ino). Returns true if removed. */
bool store_unlink_same(struct store *s, const char *name, dev_t dev, ino_t ino);
/* Directory lock held. Bring the table (or the temp files' list) in line
 * with what the name `name` holds now: the journal's replay. */
void store_recheck_name(struct store *s, const char *name);

/* No lock held. The entry of key if its file is on disk (another process's
 * or an earlier mount's): loaded into the table, unpinned. */
struct store_entry *store_discover(struct store *s, const char *key,
				   uint64_t h);

#endif
