/* store.c - the on-disk shard cache: atomic, checksummed entry files under a
 * size cap, shared by any number of echofs processes and found again by later
 * mounts.
 *
 * Entry file layout ("<dir>/shards/<16 hex of hash64(key)>.shard"):
 *   data        `size` bytes, the shard itself
 *   crcs        nblocks x u32 LE, zlib crc32 of each STORE_BLOCK of data
 *   key         keylen bytes, "url|etag|size" (url without userinfo
 *               or query: see http_strip_secrets), no NUL
 *   tail        TAIL_SIZE bytes: magic[16] ("ECHOFS-STORE-1", NUL padded),
 *               u64 size, u64 nblocks, u32 keylen, u32 crc32 of everything
 *               from the first block crc up to and including keylen.
 * The fixed tail sits at the very end so a file describes itself: it is read
 * from the end, checked, and the key compared before any byte is trusted.
 *
 * DESIGN (sharing one directory between processes; see store.h)
 * - The directory is the truth; each process keeps a hash table (keyed by the
 *   entry name, i.e. the key's hash) of the entries it knows, refreshed from
 *   the directory whenever it admits a new entry.
 * - Directory lock: flock(LOCK_EX) on a fresh descriptor of the shards
 *   directory (a fresh open file description, so threads of one process
 *   exclude each other too). Held to sweep, to rescan + evict + create a temp
 *   file, and to rename a finished entry into place, so every rescan sees
 *   every byte on disk: entry files plus other writers' temp files, which are
 *   allocated to their full size when created.
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
#include <zlib.h>

#define MAGIC "ECHOFS-STORE-1"
#define MAGIC_LEN 16
#define TAIL_SIZE (MAGIC_LEN + 8 + 8 + 4 + 4)
#define KEY_MAX 16384
#define NAME_LEN 22 /* 16 hex digits + ".shard" */
#define LOCK_SUFFIX ".lock"
#define TMP_PREFIX ".tmp-"
#define WAIT_POLL_NS 20000000L /* 20 ms between looks at a busy entry lock */
#define DEFAULT_WAIT_S 120.0
/* A lookup this soon after an entry was written is part of the same read
 * (the shard layer re-pins what it unpinned to make room, other mounts take
 * what they waited for), not a use again: it does not protect the entry. */
#define DEFAULT_REUSE_GAP_S 1.0

struct store_entry {
	struct store *s;
	struct store_entry *hnext; /* hash chain; s->lock */
	uint64_t hash;		   /* hash64(key): names the file */
	char *key;
	char name[NAME_LEN + 1];
	uint64_t size;	     /* data bytes */
	uint64_t file_bytes; /* data + footer */
	uint32_t nblocks;
	uint32_t *crcs;		  /* immutable */
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
	char name[NAME_LEN + 1];
	char *tmp_path;
	uint64_t hash;
	uint64_t size, file_bytes;
	uint64_t written; /* atomic: read by store_writer_pread callers */
	uint32_t nblocks;
	uint32_t *crcs;
	uint32_t cur_crc; /* running crc of the block being filled */
	int fd;
	int lockfd; /* "<name>.lock", flock(LOCK_EX) held */
	int err;    /* first write error, sticky */
};

struct store {
	pthread_mutex_t lock;
	char *shards_dir;
	int dirfd;
	double wait_s;	    /* longest wait for another writer of an entry */
	double reuse_gap_s; /* see DEFAULT_REUSE_GAP_S */
	int interrupted;    /* atomic: waits end with -ECANCELED */
	uint64_t counter;   /* atomic: temp file names */
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

static uint32_t blocks_for(uint64_t size)
{
	uint64_t n = size / STORE_BLOCK + (size % STORE_BLOCK != 0);
	return n > UINT32_MAX ? UINT32_MAX : (uint32_t)n;
}

static uint64_t footer_bytes(uint32_t nblocks, size_t keylen)
{
	return 4ULL * nblocks + keylen + TAIL_SIZE;
}

static size_t block_len(uint64_t size, uint32_t b)
{
	uint64_t start = (uint64_t)b * STORE_BLOCK;
	uint64_t left = size - start;
	return left < STORE_BLOCK ? (size_t)left : STORE_BLOCK;
}

static void put_le(uint8_t *p, uint64_t v, int n)
{
	for (int i = 0; i < n; i++)
		p[i] = (uint8_t)(v >> (8 * i));
}

static uint64_t get_le(const uint8_t *p, int n)
{
	uint64_t v = 0;
	for (int i = n - 1; i >= 0; i--)
		v = (v << 8) | p[i];
	return v;
}

static uint32_t crc_buf(uint32_t crc, const void *p, size_t n)
{
	const uint8_t *b = p;
	/* zlib's crc32 takes a uInt length. */
	while (n > 0) {
		uInt chunk = n > (1u << 30) ? (1u << 30) : (uInt)n;
		crc = (uint32_t)crc32(crc, b, chunk);
		b += chunk;
		n -= chunk;
	}
	return crc;
}

static ssize_t read_full(int fd, void *buf, size_t len, uint64_t off)
{
	size_t done = 0;
	while (done < len) {
		ssize_t r = pread(fd, (char *)buf + done, len - done,
				  (off_t)(off + done));
		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0)
			return -errno;
		if (r == 0)
			break;
		done += (size_t)r;
	}
	return (ssize_t)done;
}

static int write_full(int fd, const void *buf, size_t len, uint64_t off)
{
	size_t done = 0;
	while (done < len) {
		ssize_t r = pwrite(fd, (const char *)buf + done, len - done,
				   (off_t)(off + done));
		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0)
			return -errno;
		if (r == 0)
			return -EIO;
		done += (size_t)r;
	}
	return 0;
}

/* The URL without userinfo or query: footers hold no credential, and a
 * mount with a new token finds the same entries. */
static char *make_key(const char *url, const char *etag, uint64_t size)
{
	char *u = http_strip_secrets(url);
	size_t n = strlen(u) + strlen(etag ? etag : "") + 24;
	char *k = xmalloc(n);
	snprintf(k, n, "%s|%s|%" PRIu64, u, etag ? etag : "", size);
	free(u);
	return k;
}

static void name_for_key(const char *key, size_t keylen, char *name)
{
	snprintf(name, NAME_LEN + 1, "%016" PRIx64 ".shard",
		 hash64(key, keylen, 0));
}

static void name_for_hash(uint64_t h, char *name)
{
	snprintf(name, NAME_LEN + 1, "%016" PRIx64 ".shard", h);
}

/* ---- the hash table (s->lock held) ---- */

static struct store_entry **bucket(struct store *s, uint64_t h)
{
	return &s->tab[h & (s->nbuckets - 1)];
}

static void table_grow(struct store *s)
{
	size_t old = s->nbuckets;
	struct store_entry **ot = s->tab;

	s->nbuckets = old ? 2 * old : 64;
	s->tab = xcalloc(s->nbuckets, sizeof(*s->tab));
	for (size_t i = 0; i < old; i++) {
		struct store_entry *e = ot[i], *next;
		for (; e; e = next) {
			struct store_entry **b = bucket(s, e->hash);
			next = e->hnext;
			e->hnext = *b;
			*b = e;
		}
	}
	free(ot);
}

/* Does e count in s->live_bytes? Test (and adjust the sum) before any
 * change of owns_file, dropped or table membership. */
static bool entry_live(const struct store_entry *e)
{
	return e->owns_file && !e->dropped;
}

static void table_insert(struct store *s, struct store_entry *e)
{
	struct store_entry **b;
	if (s->nentries >= s->nbuckets)
		table_grow(s);
	b = bucket(s, e->hash);
	e->hnext = *b;
	*b = e;
	s->nentries++;
}

static void table_remove(struct store *s, struct store_entry *e)
{
	struct store_entry **p = bucket(s, e->hash);
	while (*p && *p != e)
		p = &(*p)->hnext;
	if (*p) {
		*p = e->hnext;
		s->nentries--;
	}
	e->hnext = NULL;
}

/* The live (not dropped) entry of key, in constant time. */
static struct store_entry *find(struct store *s, const char *key, uint64_t h)
{
	if (!s->nbuckets)
		return NULL;
	for (struct store_entry *e = *bucket(s, h); e; e = e->hnext)
		if (e->hash == h && !e->dropped && strcmp(e->key, key) == 0)
			return e;
	return NULL;
}

/* The entry, live or dropped, that describes the file (h, dev, ino). */
static struct store_entry *find_file(struct store *s, uint64_t h, dev_t dev,
				     ino_t ino)
{
	if (!s->nbuckets)
		return NULL;
	for (struct store_entry *e = *bucket(s, h); e; e = e->hnext)
		if (e->hash == h && e->owns_file && e->dev == dev &&
		    e->ino == ino)
			return e;
	return NULL;
}

static void entry_free(struct store_entry *e)
{
	if (!e)
		return;
	if (e->fd >= 0)
		close(e->fd); /* releases its LOCK_SH */
	free(e->key);
	free(e->crcs);
	free(e->verified);
	free(e);
}

/* Forget an unpinned entry; `unlink_file`: remove its file too, if the name
 * still holds that very file (another process may have put a new one
 * there). */
static void entry_destroy(struct store *s, struct store_entry *e,
			  bool unlink_file)
{
	struct stat sb;
	table_remove(s, e);
	if (entry_live(e))
		s->live_bytes -= e->file_bytes;
	if (e->owns_file) {
		if (unlink_file &&
		    fstatat(s->dirfd, e->name, &sb, AT_SYMLINK_NOFOLLOW) == 0 &&
		    sb.st_dev == e->dev && sb.st_ino == e->ino)
			unlinkat(s->dirfd, e->name, 0);
		s->st.bytes -= e->file_bytes;
	}
	if (!e->dropped)
		s->st.entries--;
	entry_free(e);
}

static int ts_cmp(struct timespec a, struct timespec b)
{
	if (a.tv_sec != b.tv_sec)
		return a.tv_sec < b.tv_sec ? -1 : 1;
	if (a.tv_nsec != b.tv_nsec)
		return a.tv_nsec < b.tv_nsec ? -1 : 1;
	return 0;
}

static double ts_seconds(struct timespec t)
{
	return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

/* Used again since it was written. */
static bool is_protected(const struct store_entry *e)
{
	return ts_cmp(e->use, e->ins) > 0;
}

static struct timespec now_real(void)
{
	struct timespec t;
	clock_gettime(CLOCK_REALTIME, &t);
	return t;
}

/* Open an entry file for reading without touching its atime (which records
 * when it was written). O_NOATIME needs ownership; fall back without it. */
static int open_entry_file(struct store *s, const char *name)
{
	int fd = openat(s->dirfd, name,
			O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NOATIME);
	if (fd < 0 && errno == EPERM)
		fd = openat(s->dirfd, name, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
	return fd;
}

/* ---- the directory lock ---- */

/* Returns a descriptor holding the lock, or -errno. */
static int dir_lock(struct store *s)
{
	int fd = open(s->shards_dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	while (flock(fd, LOCK_EX) != 0) {
		if (errno != EINTR) {
			int r = -errno;
			close(fd);
			return r;
		}
	}
	return fd;
}

static void dir_unlock(int fd)
{
	if (fd >= 0)
		close(fd);
}

/* ---- loading entry files ---- */

static struct store_entry *entry_new(struct store *s, const char *key,
				     uint64_t hash, uint64_t size,
				     uint32_t *crcs)
{
	struct store_entry *e = xcalloc(1, sizeof(*e));
	e->s = s;
	e->key = xstrdup(key);
	e->hash = hash;
	name_for_hash(hash, e->name);
	e->size = size;
	e->nblocks = blocks_for(size);
	e->file_bytes = size + footer_bytes(e->nblocks, strlen(key));
	e->crcs = crcs;
	e->verified = xcalloc(e->nblocks ? e->nblocks : 1, 1);
	e->fd = -1;
	e->owns_file = true;
	return e;
}

/* Check the tail and footer of an open entry file. Returns the block crcs
 * (malloc'd) and the key, or NULL when the file is not a valid entry. */
static uint32_t *read_footer(int fd, uint64_t fsize, const char *name,
			     uint64_t *size, char **key)
{
	uint8_t tail[TAIL_SIZE], *foot = NULL;
	uint32_t *crcs = NULL;
	uint64_t nb, klen, flen;
	char want[NAME_LEN + 1];

	if (fsize < TAIL_SIZE ||
	    read_full(fd, tail, TAIL_SIZE, fsize - TAIL_SIZE) != TAIL_SIZE ||
	    memcmp(tail, MAGIC, sizeof(MAGIC)) != 0)
		return NULL;
	*size = get_le(tail + MAGIC_LEN, 8);
	nb = get_le(tail + MAGIC_LEN + 8, 8);
	klen = get_le(tail + MAGIC_LEN + 16, 4);
	if (klen == 0 || klen > KEY_MAX || *size > fsize ||
	    nb != blocks_for(*size))
		return NULL;
	flen = 4 * nb + klen;
	if (fsize != *size + flen + TAIL_SIZE || !(foot = malloc(flen)))
		return NULL;
	if (read_full(fd, foot, flen, *size) != (ssize_t)flen ||
	    crc_buf(crc_buf(0, foot, flen), tail, TAIL_SIZE - 4) !=
		    get_le(tail + TAIL_SIZE - 4, 4))
		goto out;
	name_for_key((const char *)foot + 4 * nb, klen, want);
	if (memchr(foot + 4 * nb, 0, klen) || strcmp(want, name) != 0)
		goto out;
	crcs = xmalloc(nb ? 4 * nb : 1);
	for (uint64_t i = 0; i < nb; i++)
		crcs[i] = (uint32_t)get_le(foot + 4 * i, 4);
	*key = xstrndup((const char *)foot + 4 * nb, klen);
out:
	free(foot);
	return crcs;
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
	struct stat sb;
	bool removed = false;
	int lk = -1;

	if (s->on_invalid)
		s->on_invalid(s->on_invalid_ud, name);
	if (!dir_locked && (lk = dir_lock(s)) < 0)
		return; /* the next rescan finds it again */
	if (fstatat(s->dirfd, name, &sb, AT_SYMLINK_NOFOLLOW) == 0 &&
	    sb.st_dev == dev && sb.st_ino == ino)
		removed = unlinkat(s->dirfd, name, 0) == 0;
	if (!dir_locked)
		dir_unlock(lk);
	if (!removed)
		return;
	pthread_mutex_lock(&s->lock);
	s->st.corrupt++;
	pthread_mutex_unlock(&s->lock);
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
	uint32_t *crcs = NULL;
	char *key = NULL;
	int fd = open_entry_file(s, name);

	if (fd < 0)
		return NULL;
	if (fstat(fd, &sb) != 0 || !S_ISREG(sb.st_mode)) {
		close(fd);
		return NULL;
	}
	crcs = read_footer(fd, (uint64_t)sb.st_size, name, &size, &key);
	close(fd);
	if (!crcs) {
		drop_invalid(s, name, sb.st_dev, sb.st_ino, dir_locked);
		return NULL;
	}
	e = entry_new(s, key, hash64(key, strlen(key), 0), size, crcs);
	e->ins = sb.st_atim;
	e->use = sb.st_mtim;
	e->dev = sb.st_dev;
	e->ino = sb.st_ino;
	free(key);
	return e;
}

/* s->lock held. Add a loaded entry unless the table already describes that
 * file (another thread loaded it meanwhile). Returns the entry in the table.
 */
static struct store_entry *adopt(struct store *s, struct store_entry *e)
{
	struct store_entry *have = find_file(s, e->hash, e->dev, e->ino);
	if (have) {
		entry_free(e);
		return have;
	}
	e->born = s->gen;
	table_insert(s, e);
	s->st.entries++;
	s->st.bytes += e->file_bytes;
	s->live_bytes += e->file_bytes;
	return e;
}

static bool is_entry_name(const char *n)
{
	if (strlen(n) != NAME_LEN || strcmp(n + 16, ".shard") != 0)
		return false;
	for (int i = 0; i < 16; i++)
		if (!((n[i] >= '0' && n[i] <= '9') ||
		      (n[i] >= 'a' && n[i] <= 'f')))
			return false;
	return true;
}

static bool is_lock_name(const char *n)
{
	return strlen(n) == 16 + strlen(LOCK_SUFFIX) &&
	       strcmp(n + 16, LOCK_SUFFIX) == 0;
}

/* Remove a temp or lock file whose owner is gone: nobody holds its flock. */
static void remove_if_unlocked(struct store *s, const char *name)
{
	int fd = openat(s->dirfd, name, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
	if (fd < 0)
		return;
	if (flock(fd, LOCK_EX | LOCK_NB) == 0)
		unlinkat(s->dirfd, name, 0);
	close(fd);
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
	e = find_file(s, h, sb.st_dev, sb.st_ino);
	if (e) {
		e->seen = true;
		e->ins = sb.st_atim; /* times other processes recorded */
		if (ts_cmp(sb.st_mtim, e->use) > 0)
			e->use = sb.st_mtim;
	}
	pthread_mutex_unlock(&s->lock);
	if (!e && (e = load_entry(s, name, true)) != NULL) {
		pthread_mutex_lock(&s->lock);
		adopt(s, e)->seen = true;
		pthread_mutex_unlock(&s->lock);
	}
}

/* s->lock held. Entries known before the rescan started whose file was not
 * seen: another process evicted them (never a pinned one: pins hold
 * LOCK_SH) or replaced the file. */
static void forget_unseen(struct store *s, uint64_t gen)
{
	for (size_t i = 0; i < s->nbuckets; i++) {
		struct store_entry *e = s->tab[i], *next;
		for (; e; e = next) {
			next = e->hnext;
			if (e->seen || !e->owns_file || e->born >= gen) {
				e->seen = false;
				continue;
			}
			if (e->pins == 0) {
				entry_destroy(s, e, false);
				continue;
			}
			if (entry_live(e))
				s->live_bytes -= e->file_bytes;
			e->owns_file = false;
			s->st.bytes -= e->file_bytes;
			if (!e->dropped) {
				e->dropped = true;
				s->st.entries--;
			}
		}
	}
}

/* Directory lock held. Bring the table in line with the directory and
 * return the bytes of temp files (writers in progress, ours included) in
 * *tmp_bytes. With `sweep` (start-up), temp and lock files nobody holds are
 * removed first: their writers are gone. */
static int rescan(struct store *s, bool sweep, uint64_t *tmp_bytes)
{
	struct dirent *d;
	uint64_t gen;
	int fd = openat(s->dirfd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	DIR *dir = fd >= 0 ? fdopendir(fd) : NULL;

	*tmp_bytes = 0;
	if (!dir) {
		int r = -errno;
		if (fd >= 0)
			close(fd);
		return r;
	}
	pthread_mutex_lock(&s->lock);
	gen = ++s->gen;
	pthread_mutex_unlock(&s->lock);
	while ((d = readdir(dir)) != NULL) {
		struct stat sb;
		bool tmp =
			strncmp(d->d_name, TMP_PREFIX, strlen(TMP_PREFIX)) == 0;
		if (sweep && (tmp || is_lock_name(d->d_name)))
			remove_if_unlocked(s, d->d_name);
		if (tmp &&
		    fstatat(s->dirfd, d->d_name, &sb, AT_SYMLINK_NOFOLLOW) == 0)
			*tmp_bytes += (uint64_t)sb.st_size;
		else if (is_entry_name(d->d_name))
			rescan_entry(s, d->d_name);
	}
	closedir(dir);
	pthread_mutex_lock(&s->lock);
	forget_unseen(s, gen);
	pthread_mutex_unlock(&s->lock);
	return 0;
}

/* ---- eviction (s->lock and the directory lock held) ---- */

/* Evict one entry this process has not pinned. Unless `force`, not one that
 * another process has pinned either. Returns true when its bytes are gone
 * from the directory. */
static bool try_evict(struct store *s, struct store_entry *e, bool force)
{
	struct stat sb;
	int fd = open_entry_file(s, e->name);

	if (fd < 0) {
		entry_destroy(s, e, false); /* already gone */
		return true;
	}
	if (fstat(fd, &sb) != 0 || sb.st_ino != e->ino || sb.st_dev != e->dev ||
	    (flock(fd, LOCK_EX | LOCK_NB) != 0 && !force)) {
		close(fd); /* a new file, or pinned by another process */
		return false;
	}
	unlinkat(s->dirfd, e->name, 0);
	close(fd);
	s->st.evictions++;
	entry_destroy(s, e, false);
	return true;
}

static int cmp_newest_ins(const void *a, const void *b)
{
	const struct store_entry *x = *(struct store_entry *const *)a;
	const struct store_entry *y = *(struct store_entry *const *)b;
	int c = ts_cmp(y->ins, x->ins);
	return c ? c : strcmp(x->name, y->name);
}

static int cmp_oldest_use(const void *a, const void *b)
{
	const struct store_entry *x = *(struct store_entry *const *)a;
	const struct store_entry *y = *(struct store_entry *const *)b;
	int c = ts_cmp(x->use, y->use);
	return c ? c : strcmp(x->name, y->name);
}

/* The eviction candidates (unpinned entries), by segment, each sorted in
 * eviction order. */
struct victims {
	struct store_entry **prob; /* newest written first */
	struct store_entry **prot; /* least recently used first */
	struct store_entry **need; /* still needed: least recently used first */
	size_t np, nq, nn;
	uint64_t free_bytes; /* of prob and prot: what goes before `need` */
	size_t nfresh;	     /* prob[0..nfresh) are among the newest */
	uint64_t prot_bytes; /* of every protected entry, pinned ones too */
};

/* Keep FRESH_KEEP newest entries until last: another mount reading the same
 * shards a little behind this one needs them next (without this, a sweep's
 * newest-first rule would evict exactly what the others are about to read).
 */
#define FRESH_KEEP 2

/* The FRESH_KEEP-th newest write time of all live entries. */
static struct timespec fresh_threshold(struct store *s)
{
	struct timespec top[FRESH_KEEP] = {{0, 0}};
	for (size_t i = 0; i < s->nbuckets; i++)
		for (struct store_entry *e = s->tab[i]; e; e = e->hnext) {
			struct timespec t = e->ins;
			if (!e->owns_file || e->dropped)
				continue;
			for (int k = 0; k < FRESH_KEEP; k++)
				if (ts_cmp(t, top[k]) > 0) {
					struct timespec x = top[k];
					top[k] = t;
					t = x;
				}
		}
	return top[FRESH_KEEP - 1];
}

static void candidates(struct store *s, struct victims *v)
{
	size_t n = s->nentries ? s->nentries : 1;
	struct timespec fresh = fresh_threshold(s);

	memset(v, 0, sizeof(*v));
	v->prob = xmalloc(n * sizeof(*v->prob));
	v->prot = xmalloc(n * sizeof(*v->prot));
	v->need = xmalloc(n * sizeof(*v->need));
	for (size_t i = 0; i < s->nbuckets; i++)
		for (struct store_entry *e = s->tab[i]; e; e = e->hnext) {
			if (!e->owns_file || e->dropped)
				continue;
			if (is_protected(e))
				v->prot_bytes += e->file_bytes;
			if (e->pins)
				continue;
			if (s->needed && s->needed(s->needed_ud, e->hash)) {
				v->need[v->nn++] = e;
				continue;
			}
			v->free_bytes += e->file_bytes;
			if (is_protected(e))
				v->prot[v->nq++] = e;
			else
				v->prob[v->np++] = e;
		}
	qsort(v->prob, v->np, sizeof(*v->prob), cmp_newest_ins);
	qsort(v->prot, v->nq, sizeof(*v->prot), cmp_oldest_use);
	qsort(v->need, v->nn, sizeof(*v->need), cmp_oldest_use);
	while (v->nfresh < v->np && ts_cmp(v->prob[v->nfresh]->ins, fresh) >= 0)
		v->nfresh++;
}

/* The next victim: protected LRU while protected entries hold over 3/4 of
 * the cap; then probation newest first, but the newest (fresh) ones last of
 * the probation entries, oldest of them first; then protected LRU; then,
 * when `needed` is allowed, the entries the reader still needs, LRU. *ip,
 * *iq and *in walk prob, prot and need. */
static struct store_entry *next_victim(struct store *s, struct victims *v,
				       size_t pos[3], bool needed)
{
	if (pos[1] < v->nq && v->prot_bytes > s->st.cap / 4 * 3)
		return v->prot[pos[1]++];
	if (pos[0] < v->np - v->nfresh)
		return v->prob[v->nfresh + pos[0]++];
	if (pos[0] < v->np)
		return v->prob[v->np - 1 - pos[0]++];
	if (pos[1] < v->nq)
		return v->prot[pos[1]++];
	if (needed && pos[2] < v->nn)
		return v->need[pos[2]++];
	return NULL;
}

static void victims_free(struct victims *v)
{
	free(v->prob);
	free(v->prot);
	free(v->need);
}

/* One pass over the candidates in eviction order. Returns true when `need`
 * more bytes fit. Without `needed`, refuses at once (evicting nothing)
 * when only entries the reader still needs would make room. */
static bool evict_pass(struct store *s, uint64_t tmp_bytes, uint64_t need,
		       bool force, bool needed)
{
	struct victims v;
	struct store_entry *e;
	size_t pos[3] = {0, 0, 0};

	candidates(s, &v);
	if (!needed &&
	    s->st.bytes + tmp_bytes + need > s->st.cap + v.free_bytes) {
		victims_free(&v);
		return false;
	}
	while (s->st.bytes + tmp_bytes + need > s->st.cap &&
	       (e = next_victim(s, &v, pos, needed)) != NULL) {
		uint64_t fb = e->file_bytes;
		bool p = is_protected(e);
		if (try_evict(s, e, force) && p)
			v.prot_bytes -= fb;
	}
	victims_free(&v);
	return s->st.bytes + tmp_bytes + need <= s->st.cap;
}

/* Evict until `need` more bytes fit under the cap, counting `tmp_bytes` of
 * writers in progress. Entries other processes have pinned go only when
 * nothing else frees enough: their readers keep reading the unlinked file
 * (its blocks return when they let go), whereas refusing would leave the
 * cache unusable to every mount while others hold old pins. Entries this
 * process has pinned never go. With a "needed" hint set, entries it names
 * never go either: -EDQUOT then says "only by pushing out what the reader
 * still needs" (the reader serves that shard without the cache). Returns 0,
 * -EDQUOT or -ENOSPC. */
static int evict_for(struct store *s, uint64_t tmp_bytes, uint64_t need)
{
	bool all = s->needed == NULL;

	if (evict_pass(s, tmp_bytes, need, false, all) ||
	    evict_pass(s, tmp_bytes, need, true, all))
		return 0;
	return all ? -ENOSPC : -EDQUOT;
}

/* ---- open and close ---- */

static int make_dir(const char *path)
{
	if (mkdir(path, 0700) == 0 || errno == EEXIST)
		return 0;
	return -errno;
}

/* Sweep, load every entry and evict down to the cap, under the directory
 * lock. */
static int open_scan(struct store *s)
{
	uint64_t tmp_bytes;
	int lk = dir_lock(s), r;

	if (lk < 0)
		return lk;
	r = rescan(s, true, &tmp_bytes);
	if (r == 0) {
		pthread_mutex_lock(&s->lock);
		evict_for(s, tmp_bytes, 0);
		pthread_mutex_unlock(&s->lock);
	}
	dir_unlock(lk);
	return r;
}

int store_open(const char *dir, uint64_t cap, struct store **out, char *err,
	       size_t errlen)
{
	struct store *s = xcalloc(1, sizeof(*s));
	size_t n = strlen(dir) + sizeof("/shards");
	int r;

	*out = NULL;
	s->dirfd = -1;
	s->shards_dir = xmalloc(n);
	snprintf(s->shards_dir, n, "%s/shards", dir);
	s->st.cap = cap;
	s->wait_s = DEFAULT_WAIT_S;
	s->reuse_gap_s = DEFAULT_REUSE_GAP_S;
	pthread_mutex_init(&s->lock, NULL);
	table_grow(s);
	if ((r = make_dir(dir)) != 0 || (r = make_dir(s->shards_dir)) != 0) {
		snprintf(err, errlen, "cache dir %s: %s", dir, strerror(-r));
		goto fail;
	}
	s->dirfd = open(s->shards_dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (s->dirfd < 0)
		r = -errno;
	else
		r = open_scan(s);
	if (r) {
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
			entry_free(e);
		}
	}
	free(s->tab);
	if (s->dirfd >= 0)
		close(s->dirfd);
	pthread_mutex_destroy(&s->lock);
	free(s->shards_dir);
	free(s);
}

void store_set_wait(struct store *s, double seconds)
{
	if (s && seconds >= 0)
		s->wait_s = seconds;
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
	char *k = make_key(url, etag, size);
	uint64_t h = hash64(k, strlen(k), 0);
	free(k);
	return h;
}

/* A footer's size for a key of a typical length: for the estimate below. */
#define FIT_KEY_GUESS 256

/* s->lock held, s->needed set. Do the live entries the hint does not name
 * hold at least `need` bytes? Walks the table (the hint's answers change
 * in the reader's pass without the store hearing of it), stopping once they
 * do. */
static bool unneeded_reach(struct store *s, uint64_t need)
{
	uint64_t freeable = 0;

	for (size_t i = 0; i < s->nbuckets; i++)
		for (struct store_entry *e = s->tab[i]; e; e = e->hnext) {
			if (!entry_live(e) || s->needed(s->needed_ud, e->hash))
				continue;
			freeable += e->file_bytes;
			if (freeable >= need)
				return true;
		}
	return freeable >= need;
}

/* Room now, none even with every live entry gone, or no hint: answered
 * from the sums; only a full store under a hint asks the hint per entry. */
int store_fits(struct store *s, uint64_t size)
{
	uint64_t want;
	int fits;

	if (!s)
		return 0;
	want = size + footer_bytes(blocks_for(size), FIT_KEY_GUESS);
	if (want > s->st.cap)
		return 1; /* never fits: store_begin refuses it and says why */
	pthread_mutex_lock(&s->lock);
	want += s->st.bytes;
	if (want <= s->st.cap)
		fits = 1;
	else if (want - s->st.cap > s->live_bytes)
		fits = 0;
	else
		fits = !s->needed || unneeded_reach(s, want - s->st.cap);
	pthread_mutex_unlock(&s->lock);
	return fits;
}

void store_debug_fits_walk(struct store *s, uint64_t size, int *fits,
			   uint64_t *live_sum, uint64_t *live_walk)
{
	uint64_t freeable = 0, live = 0, want;

	want = size + footer_bytes(blocks_for(size), FIT_KEY_GUESS);
	pthread_mutex_lock(&s->lock);
	for (size_t i = 0; i < s->nbuckets; i++)
		for (struct store_entry *e = s->tab[i]; e; e = e->hnext) {
			if (!entry_live(e))
				continue;
			live += e->file_bytes;
			if (!s->needed || !s->needed(s->needed_ud, e->hash))
				freeable += e->file_bytes;
		}
	*fits = want > s->st.cap || want + s->st.bytes <= s->st.cap + freeable;
	*live_sum = s->live_bytes;
	*live_walk = live;
	pthread_mutex_unlock(&s->lock);
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

/* Open the file of an entry being pinned for the first time (s->lock held;
 * metadata only). The shared flock keeps other processes from evicting it;
 * an evictor holds LOCK_EX only around its unlink, so this waits at most
 * that long, and a file unlinked meanwhile has no links left. Returns 0 or
 * -errno; on failure the caller forgets the entry. */
static int entry_open(struct store *s, struct store_entry *e)
{
	struct stat sb;
	int fd = open_entry_file(s, e->name);
	if (fd < 0)
		return -errno;
	while (flock(fd, LOCK_SH) != 0 && errno == EINTR)
		;
	if (fstat(fd, &sb) != 0 || sb.st_nlink == 0 || sb.st_ino != e->ino ||
	    sb.st_dev != e->dev || (uint64_t)sb.st_size != e->file_bytes) {
		close(fd);
		return -ESTALE;
	}
	e->fd = fd;
	return 0;
}

/* The entry of key if its file is on disk (written by another process, or
 * by an earlier mount and evicted from our table meanwhile): loaded and put
 * in the table, unpinned. A file we dropped as corrupt is not taken back.
 * No lock held. */
static struct store_entry *discover(struct store *s, const char *key,
				    uint64_t h)
{
	char name[NAME_LEN + 1];
	struct store_entry *e, *known;
	struct stat sb;

	name_for_hash(h, name);
	if (fstatat(s->dirfd, name, &sb, AT_SYMLINK_NOFOLLOW) != 0)
		return NULL;
	pthread_mutex_lock(&s->lock);
	known = find_file(s, h, sb.st_dev, sb.st_ino);
	e = find(s, key, h);
	pthread_mutex_unlock(&s->lock);
	if (e || known)
		return e;
	if (!(e = load_entry(s, name, false)))
		return NULL;
	if (strcmp(e->key, key) != 0) { /* another key of the same hash */
		entry_free(e);
		return NULL;
	}
	pthread_mutex_lock(&s->lock);
	e = adopt(s, e);
	if (e->dropped)
		e = NULL;
	pthread_mutex_unlock(&s->lock);
	return e;
}

struct store_entry *store_get(struct store *s, const char *url,
			      const char *etag, uint64_t size)
{
	struct store_entry *e;
	struct timespec t[2] = {{0, UTIME_OMIT}, {0, 0}};
	uint64_t h;
	char *key;
	int fd = -1;

	if (!s)
		return NULL;
	key = make_key(url, etag, size);
	h = hash64(key, strlen(key), 0);
	pthread_mutex_lock(&s->lock);
	e = find(s, key, h);
	pthread_mutex_unlock(&s->lock);
	if (!e)
		discover(s, key, h);
	pthread_mutex_lock(&s->lock);
	e = find(s, key, h);
	if (e && e->pins == 0 && entry_open(s, e) != 0) {
		/* Gone or replaced: forget it. A damaged file is removed by the
		 * next load or rescan, which checks it. */
		entry_destroy(s, e, false);
		e = NULL;
	}
	if (e) {
		e->pins++;
		t[1] = now_real();
		if (ts_seconds(t[1]) - ts_seconds(e->ins) >= s->reuse_gap_s) {
			e->use = t[1];
			fd = e->fd;
		}
	}
	pthread_mutex_unlock(&s->lock);
	free(key);
	/* A use: recorded on the file, where every process's eviction sees it
	 * (the fd stays open while we hold the pin). */
	if (fd >= 0)
		futimens(fd, t);
	return e;
}

int store_contains(struct store *s, const char *url, const char *etag,
		   uint64_t size)
{
	char name[NAME_LEN + 1];
	struct store_entry *e;
	struct stat sb;
	uint64_t h;
	char *key;
	bool found;

	if (!s)
		return 0;
	key = make_key(url, etag, size);
	h = hash64(key, strlen(key), 0);
	pthread_mutex_lock(&s->lock);
	found = find(s, key, h) != NULL;
	pthread_mutex_unlock(&s->lock);
	free(key);
	if (found)
		return 1;
	/* Maybe written by another process: its name is there (a stat, no
	 * read), and it is not a file we dropped as corrupt. */
	name_for_hash(h, name);
	if (fstatat(s->dirfd, name, &sb, AT_SYMLINK_NOFOLLOW) != 0 ||
	    !S_ISREG(sb.st_mode))
		return 0;
	pthread_mutex_lock(&s->lock);
	e = find_file(s, h, sb.st_dev, sb.st_ino);
	found = !e || !e->dropped;
	pthread_mutex_unlock(&s->lock);
	return found;
}

void store_put(struct store_entry *e)
{
	struct store *s;
	if (!e)
		return;
	s = e->s;
	pthread_mutex_lock(&s->lock);
	if (--e->pins == 0) {
		close(e->fd);
		e->fd = -1;
		if (e->dropped)
			entry_destroy(s, e, true);
	}
	pthread_mutex_unlock(&s->lock);
}

void store_drop(struct store_entry *e)
{
	if (!e)
		return;
	pthread_mutex_lock(&e->s->lock);
	bool first = !e->dropped;
	if (entry_live(e))
		e->s->live_bytes -= e->file_bytes;
	if (!e->dropped) {
		e->dropped = true;
		e->s->st.entries--;
		e->s->st.corrupt++;
	}
	pthread_mutex_unlock(&e->s->lock);
	if (first)
		log_counted("cache_corrupt",
			    "cache: entry %s failed its "
			    "checksum; dropped, the shard is fetched again",
			    e->name);
}

static bool is_verified(const struct store_entry *e, uint32_t b)
{
	return __atomic_load_n(&e->verified[b], __ATOMIC_ACQUIRE) != 0;
}

/* Read block b whole into tmp and check it. Returns 0 or -EBADMSG / -errno. */
static int verify_block(struct store_entry *e, uint32_t b, uint8_t *tmp)
{
	size_t n = block_len(e->size, b);
	ssize_t r = read_full(e->fd, tmp, n, (uint64_t)b * STORE_BLOCK);
	if (r < 0)
		return (int)r;
	if ((size_t)r != n || crc_buf(0, tmp, n) != e->crcs[b])
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
		size_t n = block_len(e->size, b) - in;
		if (n > len - done)
			n = len - done;
		if (!is_verified(e, b)) {
			if (!tmp && !(tmp = malloc(STORE_BLOCK))) {
				r = -ENOMEM;
				break;
			}
			if ((r = verify_block(e, b, tmp)) != 0)
				break;
			memcpy(buf + done, tmp + in, n);
		} else if ((r = read_full(e->fd, buf + done, n, pos)) !=
			   (ssize_t)n) {
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
	r = read_full(e->fd, buf, len, off);
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
	pthread_mutex_lock(&s->lock);
	s->st.write_errors++;
	pthread_mutex_unlock(&s->lock);
	log_counted("cache_write", "cache: cannot write an entry in %s: %s",
		    s->shards_dir, strerror(-err));
}

static void lock_name(const char *name, char *out, size_t n)
{
	snprintf(out, n, "%.16s" LOCK_SUFFIX, name);
}

/* Wait for flock(LOCK_EX) on fd, polling so the wait is bounded and can be
 * interrupted. A wait is counted (st.waits) when it starts, once per
 * writer, so that it can be seen while it lasts. Returns 0, -EBUSY
 * (deadline), -ECANCELED or -errno. */
static int wait_flock(struct store *s, int fd, double deadline, bool *waited)
{
	while (flock(fd, LOCK_EX | LOCK_NB) != 0) {
		if (errno != EWOULDBLOCK && errno != EINTR)
			return -errno;
		if (!*waited) {
			pthread_mutex_lock(&s->lock);
			s->st.waits++;
			pthread_mutex_unlock(&s->lock);
		}
		*waited = true;
		if (__atomic_load_n(&s->interrupted, __ATOMIC_ACQUIRE))
			return -ECANCELED;
		if (now_mono() >= deadline)
			return -EBUSY;
		nanosleep(&(struct timespec){0, WAIT_POLL_NS}, NULL);
	}
	return 0;
}

/* Take "<name>.lock": one writer of an entry at a time, across processes.
 * Returns the descriptor holding the lock, or -errno. */
static int entry_lock(struct store *s, const char *name, bool *waited)
{
	char ln[32];
	double deadline = now_mono() + s->wait_s;

	lock_name(name, ln, sizeof(ln));
	for (;;) {
		struct stat a, b;
		int r, fd = openat(s->dirfd, ln,
				   O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW,
				   0600);
		if (fd < 0)
			return -errno;
		if ((r = wait_flock(s, fd, deadline, waited)) != 0) {
			close(fd);
			return r;
		}
		/* Its holder unlinks the file before letting go: a lock on an
		 * unlinked file guards nothing, so open the name again. */
		if (fstat(fd, &a) == 0 &&
		    fstatat(s->dirfd, ln, &b, AT_SYMLINK_NOFOLLOW) == 0 &&
		    a.st_ino == b.st_ino && a.st_dev == b.st_dev)
			return fd;
		close(fd);
	}
}

static void entry_unlock(struct store *s, const char *name, int fd)
{
	char ln[32];
	if (fd < 0)
		return;
	lock_name(name, ln, sizeof(ln));
	unlinkat(s->dirfd, ln, 0);
	close(fd);
}

/* Directory lock held. Create the temp file under a name no other writer,
 * in this process or another, can pick; lock it (the mark of a live writer
 * for other mounts' start-up sweeps) and claim its disk space up front, so
 * a full disk is found before the shard is streamed and other mounts count
 * the bytes at once. */
static int create_tmp(struct store_writer *w)
{
	struct store *s = w->s;
	size_t n = strlen(s->shards_dir) + 80;
	int fl;

	w->tmp_path = xmalloc(n);
	for (int i = 0; i < 16; i++) {
		uint64_t c =
			__atomic_add_fetch(&s->counter, 1, __ATOMIC_RELAXED);
		uint32_t rnd;
		if (getrandom(&rnd, sizeof(rnd), GRND_NONBLOCK) !=
		    (ssize_t)sizeof(rnd))
			rnd = (uint32_t)hash64(&c, sizeof(c),
					       (uint64_t)time(NULL));
		/* The entry's hash first: store_peer_open finds it by that. */
		snprintf(w->tmp_path, n,
			 "%s/" TMP_PREFIX "%016" PRIx64 "-%ld-%" PRIu64
			 "-%08" PRIx32,
			 s->shards_dir, w->hash, (long)getpid(), c, rnd);
		w->fd = open(w->tmp_path,
			     O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW,
			     0600);
		if (w->fd >= 0 || errno != EEXIST)
			break;
	}
	if (w->fd < 0) {
		int r = -errno;
		free(w->tmp_path);
		w->tmp_path = NULL;
		return r;
	}
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

/* fd of a temp file in the directory: is its writer still there (holding
 * LOCK_EX)? Probing with LOCK_SH | LOCK_NB and letting go at once. */
static bool writer_alive(int fd)
{
	if (flock(fd, LOCK_SH | LOCK_NB) == 0) {
		flock(fd, LOCK_UN);
		return false;
	}
	return errno == EWOULDBLOCK;
}

int store_peer_open(struct store *s, const char *url, const char *etag,
		    uint64_t size)
{
	char *key, want[64];
	struct dirent *d;
	DIR *dir;
	int fd = -ENOENT, dfd;

	if (!s)
		return -EINVAL;
	key = make_key(url, etag, size);
	snprintf(want, sizeof(want), TMP_PREFIX "%016" PRIx64 "-",
		 hash64(key, strlen(key), 0));
	free(key);
	dfd = openat(s->dirfd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (dfd < 0 || !(dir = fdopendir(dfd))) {
		if (dfd >= 0)
			close(dfd);
		return -errno;
	}
	while (fd < 0 && (d = readdir(dir)) != NULL) {
		if (strncmp(d->d_name, want, strlen(want)) != 0)
			continue;
		fd = openat(s->dirfd, d->d_name,
			    O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
		if (fd >= 0 && !writer_alive(fd)) {
			close(fd);
			fd = -ENOENT;
		} else if (fd < 0) {
			fd = -ENOENT; /* renamed or removed meanwhile */
		}
	}
	closedir(dir);
	return fd;
}

/* Room under the cap, counted over everything in the directory, then the
 * temp file: all under the directory lock so that no two processes admit
 * into the same room. */
static int admit(struct store_writer *w)
{
	struct store *s = w->s;
	uint64_t tmp_bytes;
	int r, lk = dir_lock(s);

	if (lk < 0)
		return lk;
	r = rescan(s, false, &tmp_bytes);
	if (r == 0) {
		pthread_mutex_lock(&s->lock);
		r = evict_for(s, tmp_bytes, w->file_bytes);
		pthread_mutex_unlock(&s->lock);
		if (r == 0 && (r = create_tmp(w)) != 0)
			count_write_error(s, r);
	}
	dir_unlock(lk);
	return r;
}

static void writer_free(struct store_writer *w)
{
	if (w->fd >= 0)
		close(w->fd);
	if (w->tmp_path)
		unlink(w->tmp_path);
	entry_unlock(w->s, w->name, w->lockfd);
	free(w->tmp_path);
	free(w->key);
	free(w->crcs);
	free(w);
}

/* Is the entry there already (complete, in memory or on disk)? */
static bool present(struct store *s, const char *key, uint64_t h)
{
	bool found;
	pthread_mutex_lock(&s->lock);
	found = find(s, key, h) != NULL;
	pthread_mutex_unlock(&s->lock);
	return found || discover(s, key, h) != NULL;
}

/* Take the entry lock (waiting for another writer of it), look again, and
 * admit. */
static int begin_locked(struct store_writer *w)
{
	struct store *s = w->s;
	bool waited = false;
	int r = entry_lock(s, w->name, &waited);

	if (r < 0) {
		if (r != -EBUSY && r != -ECANCELED)
			count_write_error(s, r);
		return r;
	}
	w->lockfd = r;
	if (present(s, w->key, w->hash))
		return -EEXIST;
	w->crcs = malloc(w->nblocks ? 4ULL * w->nblocks : 1);
	return w->crcs ? admit(w) : -ENOMEM;
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
	w->key = make_key(url, etag, size);
	w->hash = hash64(w->key, strlen(w->key), 0);
	name_for_hash(w->hash, w->name);
	w->size = size;
	w->nblocks = blocks_for(size);
	w->file_bytes = size + footer_bytes(w->nblocks, strlen(w->key));
	w->cur_crc = (uint32_t)crc32(0, NULL, 0);
	if (strlen(w->key) > KEY_MAX)
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

static void crc_update(struct store_writer *w, const uint8_t *p, size_t len,
		       uint64_t pos)
{
	while (len > 0) {
		size_t in = (size_t)(pos % STORE_BLOCK);
		size_t n = STORE_BLOCK - in;
		if (n > len)
			n = len;
		w->cur_crc = crc_buf(w->cur_crc, p, n);
		pos += n;
		p += n;
		len -= n;
		if (pos % STORE_BLOCK == 0 || pos == w->size) {
			w->crcs[(pos - 1) / STORE_BLOCK] = w->cur_crc;
			w->cur_crc = (uint32_t)crc32(0, NULL, 0);
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
	r = write_full(w->fd, data, len, pos);
	if (r) {
		w->err = r;
		count_write_error(w->s, r);
		return r;
	}
	crc_update(w, data, len, pos);
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
	r = read_full(w->fd, buf, len, off);
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
	size_t klen = strlen(w->key);
	size_t flen = (size_t)footer_bytes(w->nblocks, klen);
	uint8_t *f = malloc(flen), *t;
	int r;

	if (!f)
		return -ENOMEM;
	for (uint32_t i = 0; i < w->nblocks; i++)
		put_le(f + 4 * (size_t)i, w->crcs[i], 4);
	memcpy(f + 4 * (size_t)w->nblocks, w->key, klen);
	t = f + flen - TAIL_SIZE;
	memset(t, 0, MAGIC_LEN);
	memcpy(t, MAGIC, sizeof(MAGIC));
	put_le(t + MAGIC_LEN, w->size, 8);
	put_le(t + MAGIC_LEN + 8, w->nblocks, 8);
	put_le(t + MAGIC_LEN + 16, klen, 4);
	put_le(t + TAIL_SIZE - 4, crc_buf(0, f, flen - 4), 4);
	r = write_full(w->fd, f, flen, w->size);
	free(f);
	if (r == 0 && fsync(w->fd) != 0)
		r = -errno;
	return r;
}

/* s->lock held. The rename replaced any older file of that name: entries
 * of that name no longer own a file. */
static void supersede(struct store *s, uint64_t h)
{
	struct store_entry *e = *bucket(s, h), *next;
	for (; e; e = next) {
		next = e->hnext;
		if (e->hash != h || !e->owns_file)
			continue;
		if (entry_live(e))
			s->live_bytes -= e->file_bytes;
		e->owns_file = false;
		s->st.bytes -= e->file_bytes;
		if (!e->dropped) {
			e->dropped = true;
			s->st.entries--;
		}
		if (e->pins == 0)
			entry_destroy(s, e, false);
	}
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
	int r = 0, lk = dir_lock(s);

	if (lk < 0)
		return lk;
	t[0] = t[1] = now_real();
	if (futimens(w->fd, t) != 0 || fstat(w->fd, &sb) != 0 ||
	    renameat(AT_FDCWD, w->tmp_path, s->dirfd, w->name) != 0) {
		r = -errno;
		dir_unlock(lk);
		return r;
	}
	free(w->tmp_path);
	w->tmp_path = NULL;
	flock(w->fd, LOCK_SH);
	e->fd = w->fd; /* opened O_RDWR; now only read */
	w->fd = -1;
	e->ins = e->use = t[0];
	e->dev = sb.st_dev;
	e->ino = sb.st_ino;
	e->pins = 1;
	pthread_mutex_lock(&s->lock);
	supersede(s, e->hash);
	e->born = s->gen;
	table_insert(s, e);
	s->st.bytes += e->file_bytes;
	s->live_bytes += e->file_bytes;
	s->st.entries++;
	pthread_mutex_unlock(&s->lock);
	dir_unlock(lk);
	/* The rename is durable once the directory is. If it is not, the entry
	 * still serves now (its bytes were synced); a crash may lose its name,
	 * which costs a fetch: a disk error to count and say, not a failed
	 * commit. */
	if (fsync(s->dirfd) != 0)
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
		e = entry_new(w->s, w->key, w->hash, w->size, w->crcs);
		if ((r = write_footer(w)) == 0 && (r = publish(w, e)) == 0) {
			w->crcs = NULL; /* now the entry's */
			writer_free(w);
			*out = e;
			return 0;
		}
		e->crcs = NULL;
		entry_free(e);
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
