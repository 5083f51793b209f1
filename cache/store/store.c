/* store.c - the on-disk shard cache: atomic, checksummed entry files under a
 * size cap, shared by any number of echofs processes and found again by later
 * mounts.
 *
 * This file: opening the directory, rescans and loading entry files,
 * readers' checked reads, and writers (begin, write, commit). The rest of
 * the store, one concept a file: store_format.c (the entry file: layout,
 * read and check, footer), store_table.c (the table of entries and their
 * pins: get, put, drop), store_evict.c (byte accounting and the eviction
 * order), store_lock.c (the flock protocol below); store_int.h holds the
 * structs they share.
 *
 * DESIGN (sharing one directory between processes; see store.h)
 * - The directory is the truth; each process keeps a hash table (keyed by the
 *   entry name, i.e. the key's hash) of the entries it knows, and a list of
 *   the temp files in the directory, brought up to date whenever it admits
 *   a new entry: from the journal, or by a rescan when the journal cannot
 *   say.
 * - Directory lock: flock(LOCK_EX) on a fresh descriptor of the shards
 *   directory (a fresh open file description, so threads of one process
 *   exclude each other too). Held to sweep, to catch up + evict + create a
 *   temp file, to rename a finished entry into place, and to remove a temp
 *   or entry file, so an admission counts every byte on disk: entry files
 *   plus other writers' temp files, which are allocated to their full size
 *   when created.
 * - The journal ("<cache_dir>/shards.journal", store_lock.c; issue 50: a
 *   rescan per admission read every entry's name and stat, CPU that grew
 *   with the cache): a ring of records, each the name of a file about to
 *   be created, renamed or removed, written under the directory lock
 *   before the change it names. An admission replays the records since
 *   its last look: each name is looked at again in the directory (a stat,
 *   a footer read for a new entry), so a record whose change never
 *   happened (its writer was killed between the two) changes nothing, and
 *   no change is without its record. It rescans instead when the journal
 *   cannot say: missing or replaced (its file is compared with the one
 *   held open), a header or record that does not check (a torn write),
 *   or more records behind than the ring keeps; and a record that cannot
 *   be written removes the journal, so that every process rescans. A
 *   rescan syncs the position to the end. Uses are not journaled (a
 *   futimens on the entry, as before): eviction reads the times of a
 *   victim before removing it and skips one used since, sorting again.
 *   Files put in the directory by hand are counted from the next rescan
 *   (a start-up); ones removed by hand are forgotten when eviction or a
 *   lookup meets their absence.
 * - Invalid entry files (not ours, truncated, corrupt) met by a rescan or a
 *   lookup are removed under the directory lock, and only if the name still
 *   holds the file that was read (dev/ino): a rename into place, which
 *   holds that lock too, may have put a good entry there since.
 * - Temp files ".tmp-<entry hash>-<pid>-<counter>-<random>" are
 *   flock(LOCK_EX)ed by their
 *   writer from creation (under the directory lock) to rename; the start-up
 *   sweep removes only those whose lock it can take (writer gone).
 * - Pins: a pinned entry's descriptor holds flock(LOCK_SH); eviction takes
 *   LOCK_EX | LOCK_NB first, so a file another process reads is evicted
 *   only when nothing else frees enough (its reader keeps reading the
 *   unlinked file; its blocks return when the reader lets go).
 * - Fetch once: a writer holds "<name>.lock" (flock, the lock file unlinked
 *   by its holder before release) from store_begin to commit or abort. A
 *   second writer of the same entry, in any process, waits for it (bounded by
 *   store_set_wait), then finds the finished file and gets EEXIST.
 * - Eviction policy (segmented, scan resistant): an entry used again after
 *   it was written ("protected") outranks one that was not ("probation").
 *   Probation entries go newest first, so a sweep over more data than fits
 *   keeps the start of the sweep instead of flushing everything, except
 *   that the FRESH_KEEP newest entries go last of them (other mounts a
 *   little behind are about to read those); protected entries go least
 *   recently used first, and first of all while they hold more than 3/4 of
 *   the cap (so a new working set can take over). Times are kept on the
 *   file itself, shared by every process: atime = when written (files are
 *   opened O_NOATIME), mtime = last use.
 * - Needed entries (store_set_needed, the shard layer's "this pass has not
 *   read all of it yet"): a third segment, evicted after the other two and
 *   never to make room for a new entry (store_begin says EDQUOT and the
 *   reader fetches just its bytes): under a cap smaller than the working
 *   set, admitting a shard for one sample and evicting a shard the pass
 *   still needs is the thrash. Entries the hint does not know (other
 *   datasets', other processes' stale ones) stay in the first two segments.
 *   The hint is asked under s->lock and must not block.
 *
 * Locking inside a process: s->lock guards the hash table, every entry's
 * pins, fd, flags and times, and the byte accounting. It is held for table
 * work and the metadata calls that must agree with it (open, unlink, flock
 * with LOCK_NB), never for data reads or writes or any wait. Lock order:
 * entry lock file, directory flock, s->lock. Block checksums are immutable
 * once an entry exists; the per-block "verified" flags are atomics. */
#include "cache/store/store.h"

#include "cache/store/store_format.h"
#include "cache/store/store_int.h"
#include "cache/store/store_journal.h"
#include "cache/store/store_lock.h"

#include "common/lockcheck.h"
#include "common/log.h"
#include "common/util.h"
#include "fetch/net/http.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define DEFAULT_WAIT_S 120.0
/* A lookup this soon after an entry was written is part of the same read
 * (the shard layer re-pins what it unpinned to make room, other mounts take
 * what they waited for), not a use again: it does not protect the entry. */
#define DEFAULT_REUSE_GAP_S 1.0

/* ---- loading entry files ---- */

bool store_unlink_same(struct store *s, const char *name, dev_t dev, ino_t ino)
{
	struct stat sb;

	if (fstatat(s->dirfd, name, &sb, AT_SYMLINK_NOFOLLOW) != 0 ||
	    sb.st_dev != dev || sb.st_ino != ino)
		return false;
	store_jnl_note(s, name);
	return unlinkat(s->dirfd, name, 0) == 0;
}

/* The file `name` was read and found invalid (not ours, truncated or
 * corrupt; dev and ino say which file that was): remove it, but only if
 * the name still holds that very file, since another process may have
 * renamed a new entry there meanwhile. Under the directory lock (taken here
 * unless `dir_locked`), which every rename into place holds too, so that
 * the check and the unlink are one step for every echofs process. Counted
 * under s->lock, like store_drop's count. */
static void drop_invalid(struct store *s, const char *name, dev_t dev,
			 ino_t ino, bool dir_locked)
{
	bool removed;
	int lk = -1;

	if (s->on_invalid)
		s->on_invalid(s->on_invalid_ud, name);
	if (!dir_locked && (lk = store_dir_lock(s)) < 0)
		return; /* the next rescan finds it again */
	removed = store_unlink_same(s, name, dev, ino);
	if (!dir_locked)
		store_dir_unlock(s, lk);
	if (!removed)
		return;
	store_acct_count(s, STORE_COUNT_CORRUPT);
	log_counted("cache_corrupt",
		    "cache: entry %s is truncated or corrupt; removed", name);
}

/* Read and check the entry file `name` (no lock of ours held: this reads;
 * `dir_locked` says whether the caller holds the directory lock). Returns
 * the entry, unpinned and not in the table, or NULL when there is no such
 * regular file or it is not a valid entry (then it is removed:
 * drop_invalid). */
static struct store_entry *load_entry(struct store *s, const char *name,
				      bool dir_locked)
{
	struct store_entry *e = NULL;
	struct stat sb;
	uint64_t size = 0;
	uint32_t *sums = NULL;
	enum store_sum kind;
	char *key = NULL;
	int fd = store_fmt_open(s->dirfd, name);

	if (fd < 0)
		return NULL;
	if (fstat(fd, &sb) != 0 || !S_ISREG(sb.st_mode)) {
		close(fd);
		return NULL;
	}
	sums = store_fmt_read_footer(fd, (uint64_t)sb.st_size, name, &size,
				     &key, &kind);
	close(fd);
	if (!sums) {
		drop_invalid(s, name, sb.st_dev, sb.st_ino, dir_locked);
		return NULL;
	}
	e = store_ent_new(s, key, hash64(key, strlen(key), 0), size, sums);
	e->sum_kind = kind;
	e->ins = sb.st_atim;
	e->use = sb.st_mtim;
	e->dev = sb.st_dev;
	e->ino = sb.st_ino;
	free(key);
	return e;
}

/* Directory lock held. One entry file seen by a rescan: refresh the entry
 * that describes it, or load it. */
static void rescan_entry(struct store *s, const char *name)
{
	struct stat sb;
	struct store_entry *e;
	uint64_t h = strtoull(name, NULL, 16);

	if (fstatat(s->dirfd, name, &sb, AT_SYMLINK_NOFOLLOW) != 0 ||
	    !S_ISREG(sb.st_mode))
		return;
	pthread_mutex_lock(&s->lock);
	e = store_tab_find_file(s, h, sb.st_dev, sb.st_ino);
	if (e) {
		e->seen = true;
		e->ins = sb.st_atim; /* times other processes recorded */
		if (ts_cmp(sb.st_mtim, e->use) > 0)
			e->use = sb.st_mtim;
	}
	pthread_mutex_unlock(&s->lock);
	if (!e && (e = load_entry(s, name, true)) != NULL) {
		pthread_mutex_lock(&s->lock);
		store_tab_adopt(s, e)->seen = true;
		pthread_mutex_unlock(&s->lock);
	}
}

/* s->lock held. Entries known before the rescan started whose file was not
 * seen: another process evicted them (never a pinned one: pins hold
 * LOCK_SH) or replaced the file. */
static void forget_unseen(struct store *s, uint64_t gen)
{
	ASSERT_HELD(&s->lock);
	for (size_t i = 0; i < s->nbuckets; i++) {
		struct store_entry *e = s->tab[i], *next;
		for (; e; e = next) {
			next = e->hnext;
			if (e->seen || !e->owns_file || e->born >= gen) {
				e->seen = false;
				continue;
			}
			if (e->pins == 0) {
				store_ent_destroy(s, e, false);
				continue;
			}
			store_acct_disown(s, e);
		}
	}
}

/* ---- temp files in the directory (directory lock held) ---- */

static bool is_tmp_name(const char *name)
{
	return strncmp(name, STORE_TMP_PREFIX, strlen(STORE_TMP_PREFIX)) == 0;
}

static void tmps_clear(struct store *s)
{
	for (size_t i = 0; i < s->ntmps; i++)
		free(s->tmps[i].name);
	s->ntmps = 0;
}

/* The temp file `name` holds `bytes` now; -1: it is gone. */
static void tmps_set(struct store *s, const char *name, int64_t bytes)
{
	size_t i = 0;

	while (i < s->ntmps && strcmp(s->tmps[i].name, name) != 0)
		i++;
	if (i < s->ntmps && bytes < 0) {
		free(s->tmps[i].name);
		s->tmps[i] = s->tmps[--s->ntmps];
		return;
	}
	if (bytes < 0)
		return;
	if (i == s->ntmps) {
		if (s->ntmps == s->tmps_cap) {
			s->tmps_cap = s->tmps_cap ? 2 * s->tmps_cap : 8;
			s->tmps = xrealloc(s->tmps,
					   s->tmps_cap * sizeof(*s->tmps));
		}
		s->tmps[s->ntmps++].name = xstrdup(name);
	}
	s->tmps[i].bytes = (uint64_t)bytes;
}

/* Bytes of every writer in progress, ours included. */
static uint64_t tmps_bytes(const struct store *s)
{
	uint64_t n = 0;
	for (size_t i = 0; i < s->ntmps; i++)
		n += s->tmps[i].bytes;
	return n;
}

/* What the name holds now: a regular file's size, or -1. */
static int64_t file_bytes_at(struct store *s, const char *name, struct stat *sb)
{
	if (fstatat(s->dirfd, name, sb, AT_SYMLINK_NOFOLLOW) != 0 ||
	    !S_ISREG(sb->st_mode))
		return -1;
	return (int64_t)sb->st_size;
}

/* ---- the journal's replay ---- */

/* s->lock held. The entries of hash h that own a file: keep the one that
 * describes the file now there (sb, when `here`), forget the others (the
 * file was evicted or replaced). Returns whether one was kept. */
static bool recheck_entries(struct store *s, uint64_t h, bool here,
			    const struct stat *sb)
{
	ASSERT_HELD(&s->lock);
	struct store_entry *e = *store_tab_bucket(s, h), *next;
	bool kept = false;

	for (; e; e = next) {
		next = e->hnext;
		if (e->hash != h || !e->owns_file)
			continue;
		if (here && e->dev == sb->st_dev && e->ino == sb->st_ino) {
			kept = true;
			e->ins = sb->st_atim;
			if (ts_cmp(sb->st_mtim, e->use) > 0)
				e->use = sb->st_mtim;
		} else if (e->pins == 0) {
			store_ent_destroy(s, e, false);
		} else {
			store_acct_disown(s, e);
		}
	}
	return kept;
}

/* Like a rescan's look, for one name: each change in the journal is
 * looked at again in the directory, so a record whose change never
 * happened (its writer died first) changes nothing. */
void store_recheck_name(struct store *s, const char *name)
{
	struct store_entry *e;
	struct stat sb;
	bool here, kept;

	if (is_tmp_name(name)) {
		tmps_set(s, name, file_bytes_at(s, name, &sb));
		return;
	}
	if (!store_fmt_is_entry_name(name))
		return;
	here = file_bytes_at(s, name, &sb) >= 0;
	pthread_mutex_lock(&s->lock);
	kept = recheck_entries(s, strtoull(name, NULL, 16), here, &sb);
	pthread_mutex_unlock(&s->lock);
	if (here && !kept && (e = load_entry(s, name, true)) != NULL) {
		pthread_mutex_lock(&s->lock);
		store_tab_adopt(s, e);
		pthread_mutex_unlock(&s->lock);
	}
}

/* Directory lock held. Bring the table and the list of temp files
 * (writers in progress, ours included) in line with the directory, and
 * the journal's position with both. With `sweep` (start-up), temp and
 * lock files nobody holds are removed first: their writers are gone. */
static int rescan(struct store *s, bool sweep)
{
	struct dirent *d;
	uint64_t gen;
	int fd = openat(s->dirfd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	DIR *dir = fd >= 0 ? fdopendir(fd) : NULL;

	if (!dir) {
		int r = -errno;
		if (fd >= 0)
			close(fd);
		return r;
	}
	pthread_mutex_lock(&s->lock);
	gen = ++s->gen;
	s->st.rescans++;
	pthread_mutex_unlock(&s->lock);
	tmps_clear(s);
	while ((d = readdir(dir)) != NULL) {
		struct stat sb;
		bool tmp = is_tmp_name(d->d_name);
		if (sweep && tmp)
			store_jnl_note(s, d->d_name); /* it may go */
		if (sweep && (tmp || store_is_lock_name(d->d_name)))
			store_remove_if_unlocked(s, d->d_name);
		if (tmp)
			tmps_set(s, d->d_name,
				 file_bytes_at(s, d->d_name, &sb));
		else if (store_fmt_is_entry_name(d->d_name))
			rescan_entry(s, d->d_name);
	}
	closedir(dir);
	pthread_mutex_lock(&s->lock);
	forget_unseen(s, gen);
	pthread_mutex_unlock(&s->lock);
	store_jnl_sync(s);
	return 0;
}

/* ---- open and close ---- */

/* Another store's directory beside "shards" under the same root (the
 * prepared tier's, cache/image/prepared.h): checked here as well, so that a
 * mount refuses a planted link there at start rather than only logging
 * that the tier is off. */
static const char *const SIBLINGS[] = {"prepared"};

/* The directory `name` under `at` (created 0700 if missing and `create`),
 * opened without following a symlink, and refused unless it is ours
 * (owner: the effective uid) and nobody else may write in it: whoever can
 * put files or links in a cache directory chooses what mounts serve and
 * where they write. A `root` may be sticky and writable by all (a tmpfs's
 * root): others cannot replace what we make there, and what we read lies
 * in subdirectories checked here without that exception. Returns 0 with *out
 * set (-1 when absent and not `create`), or -errno with one line in err naming
 * the directory `shown`: -ELOOP (a symlink), -EPERM (owner or mode), or why it
 * cannot be used. */
static int open_own_dir(int at, const char *name, const char *shown,
			bool create, bool root, int *out, char *err,
			size_t errlen)
{
	struct stat sb;
	int fd, r = 0;

	*out = -1;
	if (create && mkdirat(at, name, 0700) != 0 && errno != EEXIST)
		r = -errno;
	fd = r ? -1
	       : openat(at, name,
			O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (fd < 0 && !r) {
		r = -errno;
		if (fstatat(at, name, &sb, AT_SYMLINK_NOFOLLOW) == 0 &&
		    S_ISLNK(sb.st_mode)) {
			snprintf(err, errlen,
				 "cache dir %s is a symlink: refused (name the "
				 "directory it points to instead)",
				 shown);
			return -ELOOP;
		}
		if (r == -ENOENT && !create)
			return 0;
	}
	if (fd >= 0 && fstat(fd, &sb) != 0)
		r = -errno;
	if (r) {
		snprintf(err, errlen, "cache dir %s: %s", shown, strerror(-r));
	} else if (sb.st_uid != geteuid()) {
		snprintf(err, errlen,
			 "cache dir %s is owned by uid %u, not by this mount's "
			 "uid %u: refused",
			 shown, (unsigned)sb.st_uid, (unsigned)geteuid());
		r = -EPERM;
	} else if ((sb.st_mode & (S_IWGRP | S_IWOTH)) &&
		   !(root && (sb.st_mode & S_ISVTX))) {
		snprintf(err, errlen,
			 "cache dir %s is writable by group or others (mode "
			 "%03o): refused (chmod go-w it)",
			 shown, (unsigned)(sb.st_mode & 0777));
		r = -EPERM;
	}
	if (r) {
		if (fd >= 0)
			close(fd);
		return r;
	}
	*out = fd;
	return 0;
}

/* The root (dir) and its "shards", both checked (open_own_dir), and the
 * siblings' directories if present; s->dirfd set to "shards". */
static int open_dirs(struct store *s, const char *dir, char *err, size_t errlen)
{
	char shown[4096];
	int root, fd, r;

	r = open_own_dir(AT_FDCWD, dir, dir, true, true, &root, err, errlen);
	if (r)
		return r;
	for (size_t i = 0; r == 0 && i < sizeof(SIBLINGS) / sizeof(*SIBLINGS);
	     i++) {
		snprintf(shown, sizeof(shown), "%s/%s", dir, SIBLINGS[i]);
		r = open_own_dir(root, SIBLINGS[i], shown, false, false, &fd,
				 err, errlen);
		if (fd >= 0)
			close(fd);
	}
	if (r == 0)
		r = open_own_dir(root, "shards", s->shards_dir, true, false,
				 &s->dirfd, err, errlen);
	s->rootfd = root; /* the journal's directory */
	return r;
}

/* Sweep, load every entry and evict down to the cap, under the directory
 * lock. */
static int open_scan(struct store *s)
{
	int lk = store_dir_lock(s), r;

	if (lk < 0)
		return lk;
	r = rescan(s, true);
	if (r == 0) {
		pthread_mutex_lock(&s->lock);
		/* Best effort: over the cap with nothing evictable now, the
		 * next admission evicts again and fails there if it must. */
		IGNORE_RESULT(store_evict_for(s, tmps_bytes(s), 0));
		pthread_mutex_unlock(&s->lock);
	}
	store_dir_unlock(s, lk);
	return r;
}

int store_open(const char *dir, uint64_t cap, struct store **out, char *err,
	       size_t errlen)
{
	struct store *s = xcalloc(1, sizeof(*s));
	size_t n = strlen(dir) + sizeof("/shards");
	int r;

	*out = NULL;
	s->dirfd = s->rootfd = s->jfd = -1;
	s->shards_dir = xmalloc(n);
	snprintf(s->shards_dir, n, "%s/shards", dir);
	s->st.cap = cap;
	s->wait_s = DEFAULT_WAIT_S;
	s->reuse_gap_s = DEFAULT_REUSE_GAP_S;
	pthread_mutex_init(&s->lock, NULL);
	pthread_mutex_init(&s->dirmu, NULL);
	/* Nobody else sees s yet; the lock is for store_tab_grow's check. */
	pthread_mutex_lock(&s->lock);
	store_tab_grow(s);
	pthread_mutex_unlock(&s->lock);
	if ((r = open_dirs(s, dir, err, errlen)) != 0)
		goto fail;
	if ((r = open_scan(s)) != 0) {
		snprintf(err, errlen, "cache dir %s: %s", s->shards_dir,
			 strerror(-r));
		goto fail;
	}
	*out = s;
	return 0;
fail:
	store_close(s);
	return r;
}

/* All entries must have been put and all writers finished. */
void store_close(struct store *s)
{
	if (!s)
		return;
	for (size_t i = 0; i < s->nbuckets; i++) {
		struct store_entry *e = s->tab[i], *next;
		for (; e; e = next) {
			next = e->hnext;
			store_ent_free(e);
		}
	}
	free(s->tab);
	tmps_clear(s);
	free(s->tmps);
	store_jnl_close(s);
	if (s->dirfd >= 0)
		close(s->dirfd);
	if (s->rootfd >= 0)
		close(s->rootfd);
	pthread_mutex_destroy(&s->lock);
	pthread_mutex_destroy(&s->dirmu);
	free(s->shards_dir);
	free(s);
}

void store_set_wait(struct store *s, double seconds)
{
	if (s && seconds >= 0)
		s->wait_s = seconds;
}

void store_set_lazy(struct store *s, double seconds)
{
	if (s && seconds >= 0)
		s->lazy_s = seconds;
}

void store_set_reuse_gap(struct store *s, double seconds)
{
	if (s && seconds >= 0)
		s->reuse_gap_s = seconds;
}

void store_set_needed(struct store *s, store_needed_fn fn, void *ud)
{
	if (!s)
		return;
	pthread_mutex_lock(&s->lock);
	s->needed = fn;
	s->needed_ud = fn ? ud : NULL;
	pthread_mutex_unlock(&s->lock);
}

uint64_t store_key_hash(const char *url, const char *etag, uint64_t size)
{
	char *k = store_fmt_key(url, etag, size);
	uint64_t h = hash64(k, strlen(k), 0);
	free(k);
	return h;
}

void store_debug_on_invalid(struct store *s, store_invalid_fn fn, void *ud)
{
	s->on_invalid = fn;
	s->on_invalid_ud = ud;
}

void store_interrupt(struct store *s)
{
	if (s)
		__atomic_store_n(&s->interrupted, 1, __ATOMIC_RELEASE);
}

/* ---- readers ---- */

/* The entry of key if its file is on disk (written by another process, or
 * by an earlier mount and evicted from our table meanwhile): loaded and put
 * in the table, unpinned. A file we dropped as corrupt is not taken back.
 * No lock held. */
struct store_entry *store_discover(struct store *s, const char *key, uint64_t h)
{
	char name[STORE_FMT_NAME_LEN + 1];
	struct store_entry *e, *known;
	struct stat sb;

	store_fmt_name(h, name);
	if (fstatat(s->dirfd, name, &sb, AT_SYMLINK_NOFOLLOW) != 0)
		return NULL;
	pthread_mutex_lock(&s->lock);
	known = store_tab_find_file(s, h, sb.st_dev, sb.st_ino);
	e = store_tab_find(s, key, h);
	pthread_mutex_unlock(&s->lock);
	if (e || known)
		return e;
	if (!(e = load_entry(s, name, false)))
		return NULL;
	if (strcmp(e->key, key) != 0) { /* another key of the same hash */
		store_ent_free(e);
		return NULL;
	}
	pthread_mutex_lock(&s->lock);
	e = store_tab_adopt(s, e);
	if (e->dropped)
		e = NULL;
	pthread_mutex_unlock(&s->lock);
	return e;
}

static bool is_verified(const struct store_entry *e, uint32_t b)
{
	return __atomic_load_n(&e->verified[b], __ATOMIC_ACQUIRE) != 0;
}

/* Read block b whole into tmp and check it. Returns 0 or -EBADMSG / -errno
 * (then tmp holds unchecked bytes: the caller returns none of them). */
static int verify_block(struct store_entry *e, uint32_t b, uint8_t *tmp)
{
	size_t n = store_fmt_block_len(e->size, b);
	ssize_t r =
		store_fmt_read_full(e->fd, tmp, n, (uint64_t)b * STORE_BLOCK);
	if (r < 0)
		return (int)r;
	if ((size_t)r != n ||
	    store_fmt_block_sum(e->sum_kind, tmp, n) != e->sums[b])
		return -EBADMSG;
	__atomic_store_n(&e->verified[b], 1, __ATOMIC_RELEASE);
	return 0;
}

/* Slow path: some block of the range has not been checked yet. */
static ssize_t pread_verify(struct store_entry *e, uint8_t *buf, size_t len,
			    uint64_t off)
{
	uint8_t *tmp = NULL;
	size_t done = 0;
	ssize_t r = 0;

	while (done < len) {
		uint64_t pos = off + done;
		uint32_t b = (uint32_t)(pos / STORE_BLOCK);
		size_t in = (size_t)(pos % STORE_BLOCK);
		size_t n = store_fmt_block_len(e->size, b) - in;
		if (n > len - done)
			n = len - done;
		if (!is_verified(e, b) && in == 0 &&
		    n == store_fmt_block_len(e->size, b)) {
			/* The whole block is wanted: check it in place. */
			if ((r = verify_block(e, b, buf + done)) != 0)
				break;
		} else if (!is_verified(e, b)) {
			if (!tmp && !(tmp = malloc(STORE_BLOCK))) {
				r = -ENOMEM;
				break;
			}
			if ((r = verify_block(e, b, tmp)) != 0)
				break;
			memcpy(buf + done, tmp + in, n);
		} else if ((r = store_fmt_read_full(e->fd, buf + done, n,
						    pos)) != (ssize_t)n) {
			r = r < 0 ? r : -EBADMSG;
			break;
		}
		done += n;
		r = 0;
	}
	free(tmp);
	return r < 0 ? r : (ssize_t)len;
}

ssize_t store_pread(struct store_entry *e, void *buf, size_t len, uint64_t off)
{
	uint32_t first, last;
	ssize_t r;

	if (!e || e->fd < 0)
		return -EBADF;
	if (off >= e->size || len == 0)
		return 0;
	if (len > e->size - off)
		len = (size_t)(e->size - off);
	first = (uint32_t)(off / STORE_BLOCK);
	last = (uint32_t)((off + len - 1) / STORE_BLOCK);
	for (uint32_t b = first; b <= last; b++)
		if (!is_verified(e, b))
			return pread_verify(e, buf, len, off);
	/* Fast path (every hit after the first): one pread. A short read means
	 * the file was cut under us, which is corruption too. */
	r = store_fmt_read_full(e->fd, buf, len, off);
	if (r >= 0 && (size_t)r != len)
		return -EBADMSG;
	return r;
}

int store_entry_fd(const struct store_entry *e, uint64_t *size)
{
	/* e->fd changes only at the first get and the last put: stable
	 * while the caller holds its pin. */
	if (!e || e->fd < 0)
		return -EBADF;
	*size = e->size;
	return e->fd;
}

/* ---- writers ---- */

static void count_write_error(struct store *s, int err)
{
	store_acct_count(s, STORE_COUNT_WRITE_ERRORS);
	log_counted("cache_write", "cache: cannot write an entry in %s: %s",
		    s->shards_dir, strerror(-err));
}

/* Directory lock held. Create the temp file under a name no other writer,
 * in this process or another, can pick; lock it (the mark of a live writer
 * for other mounts' start-up sweeps) and claim its disk space up front, so
 * a full disk is found before the shard is streamed and other mounts count
 * the bytes at once. */
static int create_tmp(struct store_writer *w)
{
	struct store *s = w->s;
	size_t n = 80;
	int fl;

	w->tmp_name = xmalloc(n);
	for (int i = 0; i < 16; i++) {
		uint64_t c =
			__atomic_add_fetch(&s->counter, 1, __ATOMIC_RELAXED);
		uint32_t rnd;
		if (getrandom(&rnd, sizeof(rnd), GRND_NONBLOCK) !=
		    (ssize_t)sizeof(rnd))
			rnd = (uint32_t)hash64(&c, sizeof(c),
					       (uint64_t)time(NULL));
		/* The entry's hash first: store_peer_open checks it. */
		snprintf(w->tmp_name, n,
			 STORE_TMP_PREFIX "%016" PRIx64 "-%ld-%" PRIu64
					  "-%08" PRIx32,
			 w->hash, (long)getpid(), c, rnd);
		store_jnl_note(s, w->tmp_name);
		w->fd = openat(s->dirfd, w->tmp_name,
			       O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC |
				       O_NOFOLLOW,
			       0600);
		if (w->fd >= 0 || errno != EEXIST)
			break;
	}
	if (w->fd < 0) {
		int r = -errno;
		free(w->tmp_name);
		w->tmp_name = NULL;
		return r;
	}
	/* Peers waiting for this entry find the temp file by the name in
	 * the lock file, without reading the directory. */
	store_entry_note_tmp(w->lockfd, w->tmp_name);
	/* Nobody else can hold it: it was just made under the directory lock.
	 * O_NOATIME: reading our own bytes back must not move the atime that
	 * will record when the entry was written. */
	if (flock(w->fd, LOCK_EX | LOCK_NB) != 0)
		return -errno;
	if ((fl = fcntl(w->fd, F_GETFL)) >= 0)
		fcntl(w->fd, F_SETFL, fl | O_NOATIME);
	if (fallocate(w->fd, 0, 0, (off_t)w->file_bytes) == 0)
		return 0;
	if (errno != EOPNOTSUPP && errno != ENOSYS)
		return -errno;
	/* No fallocate here: at least show the full size to other mounts. */
	return ftruncate(w->fd, (off_t)w->file_bytes) == 0 ? 0 : -errno;
}

/* Room under the cap, counted over everything in the directory, then the
 * temp file: all under the directory lock so that no two processes admit
 * into the same room. What others changed since this process last looked
 * comes from the journal (a record per change); the directory is read
 * again only when the journal cannot say. */
static int admit(struct store_writer *w)
{
	struct store *s = w->s;
	int r = 0, lk = store_dir_lock(s);

	if (lk < 0)
		return lk;
	if (store_jnl_replay(s, store_recheck_name) != 0)
		r = rescan(s, false);
	if (r == 0) {
		pthread_mutex_lock(&s->lock);
		r = store_evict_for(s, tmps_bytes(s), w->file_bytes);
		pthread_mutex_unlock(&s->lock);
		if (r == 0 && (r = create_tmp(w)) != 0)
			count_write_error(s, r);
	}
	store_dir_unlock(s, lk);
	return r;
}

static void writer_free(struct store_writer *w)
{
	int lk;

	if (w->fd >= 0)
		close(w->fd);
	/* Recorded, so other processes stop counting it. Without the lock
	 * the file stays, its bytes truly there, for the next start-up's
	 * sweep (its writer's lock is gone with the descriptor). */
	if (w->tmp_name && (lk = store_dir_lock(w->s)) >= 0) {
		store_jnl_note(w->s, w->tmp_name);
		unlinkat(w->s->dirfd, w->tmp_name, 0);
		store_dir_unlock(w->s, lk);
	}
	store_entry_unlock(w->s, w->name, w->lockfd);
	free(w->tmp_name);
	free(w->key);
	free(w->sums);
	XXH3_freeState(w->xs);
	free(w);
}

/* Is the entry there already (complete, in memory or on disk)? */
static bool present(struct store *s, const char *key, uint64_t h)
{
	bool found;
	pthread_mutex_lock(&s->lock);
	found = store_tab_find(s, key, h) != NULL;
	pthread_mutex_unlock(&s->lock);
	return found || store_discover(s, key, h) != NULL;
}

/* Take the entry lock (waiting for another writer of it), look again, and
 * admit. */
static int begin_locked(struct store_writer *w)
{
	struct store *s = w->s;
	bool waited = false;
	int r = store_entry_lock(s, w->name, &waited);

	if (r < 0) {
		if (r != -EBUSY && r != -ECANCELED)
			count_write_error(s, r);
		return r;
	}
	w->lockfd = r;
	if (present(s, w->key, w->hash))
		return -EEXIST;
	w->sums = malloc(w->nblocks ? 4ULL * w->nblocks : 1);
	return w->sums ? admit(w) : -ENOMEM;
}

int store_begin(struct store *s, const char *url, const char *etag,
		uint64_t size, struct store_writer **out)
{
	struct store_writer *w;
	int r;

	*out = NULL;
	if (!s)
		return -EINVAL;
	w = xcalloc(1, sizeof(*w));
	w->s = s;
	w->fd = w->lockfd = -1;
	w->key = store_fmt_key(url, etag, size);
	w->hash = hash64(w->key, strlen(w->key), 0);
	store_fmt_name(w->hash, w->name);
	w->size = size;
	w->nblocks = store_fmt_blocks(size);
	w->file_bytes =
		size + store_fmt_footer_bytes(w->nblocks, strlen(w->key));
	w->xs = XXH3_createState();
	if (!w->xs || XXH3_64bits_reset(w->xs) != XXH_OK)
		r = -ENOMEM;
	else if (strlen(w->key) > STORE_FMT_KEY_MAX)
		r = -ENAMETOOLONG;
	else if (w->nblocks == UINT32_MAX)
		r = -EFBIG;
	else if (w->file_bytes > s->st.cap)
		r = -ENOSPC;
	else
		r = begin_locked(w);
	if (r) {
		writer_free(w);
		return r;
	}
	*out = w;
	return 0;
}

static void sum_update(struct store_writer *w, const uint8_t *p, size_t len,
		       uint64_t pos)
{
	while (len > 0) {
		size_t in = (size_t)(pos % STORE_BLOCK);
		size_t n = STORE_BLOCK - in;
		if (n > len)
			n = len;
		XXH3_64bits_update(w->xs, p, n);
		pos += n;
		p += n;
		len -= n;
		if (pos % STORE_BLOCK == 0 || pos == w->size) {
			w->sums[(pos - 1) / STORE_BLOCK] =
				(uint32_t)XXH3_64bits_digest(w->xs);
			XXH3_64bits_reset(w->xs);
		}
	}
}

int store_write(struct store_writer *w, const void *data, size_t len)
{
	uint64_t pos;
	int r;

	if (!w)
		return -EINVAL;
	if (w->err)
		return w->err;
	pos = w->written;
	if (len > w->size - pos)
		return -EFBIG;
	r = store_fmt_write_full(w->fd, data, len, pos);
	if (r) {
		w->err = r;
		count_write_error(w->s, r);
		return r;
	}
	sum_update(w, data, len, pos);
	__atomic_store_n(&w->written, pos + len, __ATOMIC_RELEASE);
	return 0;
}

uint64_t store_written(const struct store_writer *w)
{
	return w ? __atomic_load_n(&w->written, __ATOMIC_ACQUIRE) : 0;
}

ssize_t store_writer_pread(struct store_writer *w, void *buf, size_t len,
			   uint64_t off)
{
	uint64_t have = store_written(w);
	ssize_t r;

	if (!w)
		return -EINVAL;
	if (off >= have)
		return 0;
	if (len > have - off)
		len = (size_t)(have - off);
	r = store_fmt_read_full(w->fd, buf, len, off);
	return r >= 0 && (size_t)r != len ? -EIO : r;
}

int store_writer_fd(const struct store_writer *w)
{
	/* w->fd is set by store_begin and closed only by commit or abort. */
	return w && w->fd >= 0 ? w->fd : -EBADF;
}

/* Footer bytes and tail, then durable (fsync). */
static int write_footer(struct store_writer *w)
{
	int r = store_fmt_write_footer(w->fd, w->key, w->size, w->nblocks,
				       w->sums, STORE_SUM_XXH3);
	if (r == 0 && !w->s->lazy_s && fsync(w->fd) != 0)
		r = -errno;
	return r;
}

/* s->lock held. The rename replaced any older file of that name: entries
 * of that name no longer own a file. */
static void supersede(struct store *s, uint64_t h)
{
	ASSERT_HELD(&s->lock);
	struct store_entry *e = *store_tab_bucket(s, h), *next;
	for (; e; e = next) {
		next = e->hnext;
		if (e->hash != h || !e->owns_file)
			continue;
		store_acct_disown(s, e);
		if (e->pins == 0)
			store_ent_destroy(s, e, false);
	}
}

/* Turn the writer's LOCK_EX into a reader's LOCK_SH (the pin other stores
 * see), before the rename: an entry without it would look unpinned and
 * could be evicted under its reader. A blocking flock may be interrupted
 * by a signal handler (EINTR): retried. Returns 0 or -errno (the caller
 * aborts the temp file). */
static int pin_shared(int fd)
{
	while (flock(fd, LOCK_SH) != 0)
		if (errno != EINTR)
			return -errno;
	return 0;
}

/* Under the directory lock (so a rescan sees the temp file or the entry,
 * never neither): stamp the times (written = last used = now), rename into
 * place, turn the writer's lock into a reader's pin, and enter it in the
 * table. */
static int publish(struct store_writer *w, struct store_entry *e)
{
	struct store *s = w->s;
	struct timespec t[2];
	struct stat sb;
	int r = 0, lk = store_dir_lock(s);

	if (lk < 0)
		return lk;
	t[0] = t[1] = now_real();
	store_jnl_note(s, w->tmp_name);
	store_jnl_note(s, w->name);
	if (futimens(w->fd, t) != 0 || fstat(w->fd, &sb) != 0 ||
	    (r = pin_shared(w->fd)) != 0 ||
	    renameat(s->dirfd, w->tmp_name, s->dirfd, w->name) != 0) {
		r = r ? r : -errno;
		store_dir_unlock(s, lk);
		return r;
	}
	free(w->tmp_name);
	w->tmp_name = NULL;
	e->fd = w->fd; /* opened O_RDWR; now only read */
	w->fd = -1;
	e->ins = e->use = t[0];
	e->dev = sb.st_dev;
	e->ino = sb.st_ino;
	e->pins = 1;
	pthread_mutex_lock(&s->lock);
	supersede(s, e->hash);
	e->born = s->gen;
	store_tab_insert(s, e);
	store_acct_add(s, e);
	pthread_mutex_unlock(&s->lock);
	store_dir_unlock(s, lk);
	/* The rename is durable once the directory is. If it is not, the entry
	 * still serves now (its bytes were synced); a crash may lose its name,
	 * which costs a fetch: a disk error to count and say, not a failed
	 * commit. */
	if (!s->lazy_s && fsync(s->dirfd) != 0)
		count_write_error(s, -errno);
	return 0;
}

int store_commit(struct store_writer *w, struct store_entry **out)
{
	struct store_entry *e;
	int r;

	*out = NULL;
	if (!w)
		return -EINVAL;
	r = w->err ? w->err : w->written != w->size ? -EPROTO : 0;
	if (r == 0) {
		e = store_ent_new(w->s, w->key, w->hash, w->size, w->sums);
		if ((r = write_footer(w)) == 0 && (r = publish(w, e)) == 0) {
			w->sums = NULL; /* now the entry's */
			writer_free(w);
			*out = e;
			return 0;
		}
		e->sums = NULL;
		store_ent_free(e);
		count_write_error(w->s, r);
	}
	store_abort(w);
	return r;
}

void store_abort(struct store_writer *w)
{
	if (w)
		writer_free(w);
}

void store_get_stats(struct store *s, struct store_stats *out)
{
	memset(out, 0, sizeof(*out));
	if (!s)
		return;
	pthread_mutex_lock(&s->lock);
	*out = s->st;
	pthread_mutex_unlock(&s->lock);
}
