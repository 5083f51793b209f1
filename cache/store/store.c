/* store.c - the on-disk shard cache: atomic, checksummed entry files with an
 * LRU size cap, found again by later mounts.
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
 * Locking: one mutex (s->lock) guards the LRU list, every entry's pins, fd,
 * flags, and the byte accounting. It is held for list work and for the
 * metadata calls that must agree with the list (opening and unlinking entry
 * files), never for data reads or writes. The rename that publishes a new
 * entry file (store_commit) runs before the lock is taken; under the lock
 * right after, the new entry joins the list and supersedes any older entry
 * whose file that rename replaced. Block checksums are immutable once an
 * entry exists; the per-block "verified" flags are atomics.
 *
 * File descriptors: an entry's file is open only while it is pinned (opened by
 * the first store_get, closed by the last store_put), so a cache of thousands
 * of entries costs descriptors only for those in use. Callers that read an
 * entry often should keep it pinned.
 *
 * Temp files ("<dir>/shards/.tmp-XXXXXX") left by a crash are removed by
 * store_open; two live mounts must therefore not share one cache dir. */
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
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#define MAGIC "ECHOFS-STORE-1"
#define MAGIC_LEN 16
#define TAIL_SIZE (MAGIC_LEN + 8 + 8 + 4 + 4)
#define KEY_MAX 16384
#define NAME_LEN 22 /* 16 hex digits + ".shard" */
#define TMP_PREFIX ".tmp-"

struct store_entry {
	struct store *s;
	struct store_entry *prev, *next; /* LRU list; s->lock */
	char *key;
	char name[NAME_LEN + 1];
	uint64_t size;	     /* data bytes */
	uint64_t file_bytes; /* data + footer */
	uint32_t nblocks;
	uint32_t *crcs;	       /* immutable */
	uint8_t *verified;     /* per block; atomic loads/stores */
	struct timespec mtime; /* only used to order entries at open */
	int fd;		       /* open while pins > 0; s->lock */
	unsigned pins;	       /* s->lock */
	bool dropped;	/* corrupt: never returned, unlinked at last put */
	bool owns_file; /* the name on disk is still this entry's file */
};

struct store_writer {
	struct store *s;
	char *key;
	char name[NAME_LEN + 1];
	char *tmp_path;
	uint64_t size, file_bytes;
	uint64_t written; /* atomic: read by store_writer_pread callers */
	uint32_t nblocks;
	uint32_t *crcs;
	uint32_t cur_crc; /* running crc of the block being filled */
	int fd;
	int err; /* first write error, sticky */
};

struct store {
	pthread_mutex_t lock;
	char *shards_dir;
	int dirfd;
	/* All below guarded by lock. mru..lru is the LRU list of every live
	 * entry, dropped ones included until their last put. */
	struct store_entry *mru, *lru;
	uint64_t reserved; /* file bytes promised to writers in progress */
	struct store_stats st;
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

/* ---- LRU list (s->lock held) ---- */

static void lru_remove(struct store *s, struct store_entry *e)
{
	if (e->prev)
		e->prev->next = e->next;
	else
		s->mru = e->next;
	if (e->next)
		e->next->prev = e->prev;
	else
		s->lru = e->prev;
	e->prev = e->next = NULL;
}

static void lru_push_front(struct store *s, struct store_entry *e)
{
	e->prev = NULL;
	e->next = s->mru;
	if (s->mru)
		s->mru->prev = e;
	else
		s->lru = e;
	s->mru = e;
}

static void entry_free(struct store_entry *e)
{
	if (!e)
		return;
	if (e->fd >= 0)
		close(e->fd);
	free(e->key);
	free(e->crcs);
	free(e->verified);
	free(e);
}

/* Forget an unpinned entry, removing its file if it still owns the name. */
static void entry_destroy(struct store *s, struct store_entry *e)
{
	lru_remove(s, e);
	if (e->owns_file) {
		unlinkat(s->dirfd, e->name, 0);
		s->st.bytes -= e->file_bytes;
	}
	if (!e->dropped)
		s->st.entries--;
	entry_free(e);
}

/* Evict unpinned entries, least recently used first, until `need` more bytes
 * fit under the cap. Returns 0 or -ENOSPC. */
static int evict_for(struct store *s, uint64_t need)
{
	struct store_entry *e = s->lru;
	while (s->st.bytes + s->reserved + need > s->st.cap && e) {
		struct store_entry *prev = e->prev;
		if (e->pins == 0) {
			entry_destroy(s, e);
			s->st.evictions++;
		}
		e = prev;
	}
	return s->st.bytes + s->reserved + need > s->st.cap ? -ENOSPC : 0;
}

/* ---- opening: scan existing entries ---- */

static struct store_entry *entry_new(struct store *s, const char *key,
				     const char *name, uint64_t size,
				     uint32_t *crcs)
{
	struct store_entry *e = xcalloc(1, sizeof(*e));
	e->s = s;
	e->key = xstrdup(key);
	snprintf(e->name, sizeof(e->name), "%s", name);
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

static struct store_entry *load_entry(struct store *s, const char *name)
{
	struct store_entry *e = NULL;
	struct stat sb;
	uint64_t size = 0;
	uint32_t *crcs = NULL;
	char *key = NULL;
	int fd = openat(s->dirfd, name, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);

	if (fd < 0)
		return NULL;
	if (fstat(fd, &sb) == 0 && S_ISREG(sb.st_mode))
		crcs = read_footer(fd, (uint64_t)sb.st_size, name, &size, &key);
	close(fd);
	if (!crcs) {
		/* Not ours, truncated or corrupt: treat as absent, but say so
		 * (store_open runs before any thread: no lock). */
		unlinkat(s->dirfd, name, 0);
		s->st.corrupt++;
		log_counted("cache_corrupt", "cache: entry %s is truncated or "
			    "corrupt; dropped at start-up", name);
		return NULL;
	}
	e = entry_new(s, key, name, size, crcs);
	e->mtime = sb.st_mtim;
	free(key);
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

static int cmp_mtime(const void *a, const void *b)
{
	const struct store_entry *x = *(struct store_entry *const *)a;
	const struct store_entry *y = *(struct store_entry *const *)b;
	if (x->mtime.tv_sec != y->mtime.tv_sec)
		return x->mtime.tv_sec < y->mtime.tv_sec ? -1 : 1;
	if (x->mtime.tv_nsec != y->mtime.tv_nsec)
		return x->mtime.tv_nsec < y->mtime.tv_nsec ? -1 : 1;
	return strcmp(x->name, y->name);
}

/* Load every valid entry, oldest first into the LRU list; remove temp files
 * left by a crash. Files with other names are not ours and are left alone. */
static int scan_entries(struct store *s)
{
	struct store_entry **v = NULL, *e;
	size_t n = 0, cap = 0;
	struct dirent *d;
	int fd = dup(s->dirfd);
	DIR *dir = fd >= 0 ? fdopendir(fd) : NULL;

	if (!dir) {
		if (fd >= 0)
			close(fd);
		return -errno;
	}
	while ((d = readdir(dir)) != NULL) {
		if (strncmp(d->d_name, TMP_PREFIX, strlen(TMP_PREFIX)) == 0) {
			unlinkat(s->dirfd, d->d_name, 0);
			continue;
		}
		if (!is_entry_name(d->d_name) ||
		    !(e = load_entry(s, d->d_name)))
			continue;
		if (n == cap) {
			cap = cap ? 2 * cap : 64;
			v = xrealloc(v, cap * sizeof(*v));
		}
		v[n++] = e;
	}
	closedir(dir);
	if (n)
		qsort(v, n, sizeof(*v), cmp_mtime);
	for (size_t i = 0; i < n; i++) {
		lru_push_front(s, v[i]);
		s->st.entries++;
		s->st.bytes += v[i]->file_bytes;
	}
	free(v);
	return 0;
}

static int make_dir(const char *path)
{
	if (mkdir(path, 0700) == 0 || errno == EEXIST)
		return 0;
	return -errno;
}

struct store *store_open(const char *dir, uint64_t cap, char *err,
			 size_t errlen)
{
	struct store *s = xcalloc(1, sizeof(*s));
	size_t n = strlen(dir) + sizeof("/shards");
	int r;

	s->dirfd = -1;
	s->shards_dir = xmalloc(n);
	snprintf(s->shards_dir, n, "%s/shards", dir);
	s->st.cap = cap;
	pthread_mutex_init(&s->lock, NULL);
	if ((r = make_dir(dir)) != 0 || (r = make_dir(s->shards_dir)) != 0) {
		snprintf(err, errlen, "cache dir %s: %s", dir, strerror(-r));
		goto fail;
	}
	s->dirfd = open(s->shards_dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (s->dirfd < 0 || (r = scan_entries(s)) != 0) {
		snprintf(err, errlen, "cache dir %s: %s", s->shards_dir,
			 strerror(s->dirfd < 0 ? errno : -r));
		goto fail;
	}
	evict_for(s, 0);
	return s;
fail:
	store_close(s);
	return NULL;
}

/* All entries must have been put and all writers finished. */
void store_close(struct store *s)
{
	if (!s)
		return;
	while (s->mru) {
		struct store_entry *e = s->mru;
		lru_remove(s, e);
		entry_free(e);
	}
	if (s->dirfd >= 0)
		close(s->dirfd);
	pthread_mutex_destroy(&s->lock);
	free(s->shards_dir);
	free(s);
}

/* ---- readers ---- */

/* A linear scan: entries number in the hundreds or thousands and lookups are
 * rare, since readers keep entries pinned while they use them. */
static struct store_entry *find(struct store *s, const char *key)
{
	char name[NAME_LEN + 1];
	name_for_key(key, strlen(key), name);
	for (struct store_entry *e = s->mru; e; e = e->next)
		if (!e->dropped && strcmp(e->name, name) == 0 &&
		    strcmp(e->key, key) == 0)
			return e;
	return NULL;
}

/* Open the file of an entry being pinned for the first time (s->lock held;
 * a metadata operation, not a data read). Returns 0 or -errno; on failure the
 * file is gone or replaced and the caller forgets the entry. */
static int entry_open(struct store *s, struct store_entry *e)
{
	struct stat sb;
	int fd = openat(s->dirfd, e->name, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
	if (fd < 0)
		return -errno;
	if (fstat(fd, &sb) != 0 || (uint64_t)sb.st_size != e->file_bytes) {
		close(fd);
		return -ESTALE;
	}
	e->fd = fd;
	return 0;
}

struct store_entry *store_get(struct store *s, const char *url,
			      const char *etag, uint64_t size)
{
	struct store_entry *e;
	char *key;
	bool opened = false;

	if (!s)
		return NULL;
	key = make_key(url, etag, size);
	pthread_mutex_lock(&s->lock);
	e = find(s, key);
	if (e && e->pins == 0) {
		if (entry_open(s, e) != 0) {
			entry_destroy(s, e);
			e = NULL;
		} else {
			opened = true;
		}
	}
	if (e) {
		e->pins++;
		lru_remove(s, e);
		lru_push_front(s, e);
	}
	pthread_mutex_unlock(&s->lock);
	free(key);
	/* Record the use on disk so the next mount's LRU order keeps it. */
	if (opened)
		futimens(e->fd, NULL);
	return e;
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
			entry_destroy(s, e);
	}
	pthread_mutex_unlock(&s->lock);
}

void store_drop(struct store_entry *e)
{
	if (!e)
		return;
	pthread_mutex_lock(&e->s->lock);
	bool first = !e->dropped;
	if (!e->dropped) {
		e->dropped = true;
		e->s->st.entries--;
		e->s->st.corrupt++;
	}
	pthread_mutex_unlock(&e->s->lock);
	if (first)
		log_counted("cache_corrupt", "cache: entry %s failed its "
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

/* ---- writers ---- */

static void count_write_error(struct store *s, int err)
{
	pthread_mutex_lock(&s->lock);
	s->st.write_errors++;
	pthread_mutex_unlock(&s->lock);
	log_counted("cache_write", "cache: cannot write an entry in %s: %s",
		    s->shards_dir, strerror(-err));
}

static void unreserve(struct store *s, uint64_t n)
{
	pthread_mutex_lock(&s->lock);
	s->reserved -= n;
	pthread_mutex_unlock(&s->lock);
}

/* Make room and promise the bytes to this writer. Returns 0 or -ENOSPC. */
static int reserve(struct store *s, uint64_t n)
{
	int r;
	pthread_mutex_lock(&s->lock);
	r = n > s->st.cap ? -ENOSPC : evict_for(s, n);
	if (r == 0)
		s->reserved += n;
	pthread_mutex_unlock(&s->lock);
	return r;
}

/* Create the temp file and claim its disk space up front, so a full disk is
 * found before the shard is streamed rather than half way through. */
static int create_tmp(struct store_writer *w)
{
	size_t n = strlen(w->s->shards_dir) + sizeof("/" TMP_PREFIX "XXXXXX");

	w->tmp_path = xmalloc(n);
	snprintf(w->tmp_path, n, "%s/" TMP_PREFIX "XXXXXX", w->s->shards_dir);
	w->fd = mkostemp(w->tmp_path, O_CLOEXEC);
	if (w->fd < 0) {
		free(w->tmp_path);
		w->tmp_path = NULL;
		return -errno;
	}
	if (fallocate(w->fd, 0, 0, (off_t)w->file_bytes) != 0 &&
	    errno != EOPNOTSUPP && errno != ENOSYS)
		return -errno;
	return 0;
}

static void writer_free(struct store_writer *w)
{
	if (w->fd >= 0)
		close(w->fd);
	if (w->tmp_path)
		unlink(w->tmp_path);
	free(w->tmp_path);
	free(w->key);
	free(w->crcs);
	free(w);
}

struct store_writer *store_begin(struct store *s, const char *url,
				 const char *etag, uint64_t size)
{
	struct store_writer *w;
	int r;

	if (!s) {
		errno = EINVAL;
		return NULL;
	}
	w = xcalloc(1, sizeof(*w));
	w->s = s;
	w->fd = -1;
	w->key = make_key(url, etag, size);
	name_for_key(w->key, strlen(w->key), w->name);
	w->size = size;
	w->nblocks = blocks_for(size);
	w->file_bytes = size + footer_bytes(w->nblocks, strlen(w->key));
	w->cur_crc = (uint32_t)crc32(0, NULL, 0);
	if (strlen(w->key) > KEY_MAX) {
		r = -ENAMETOOLONG;
	} else if (w->nblocks == UINT32_MAX) {
		r = -EFBIG;
	} else if ((r = reserve(s, w->file_bytes)) == 0) {
		w->crcs = malloc(w->nblocks ? 4ULL * w->nblocks : 1);
		r = w->crcs ? create_tmp(w) : -ENOMEM;
		if (r) {
			count_write_error(s, r);
			unreserve(s, w->file_bytes);
		}
	}
	if (r) {
		writer_free(w);
		errno = -r;
		return NULL;
	}
	return w;
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

/* Footer bytes and tail, then durable: fsync file, rename, fsync dir. */
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
	if (r == 0 && renameat(AT_FDCWD, w->tmp_path, w->s->dirfd, w->name))
		r = -errno;
	if (r == 0) {
		free(w->tmp_path);
		w->tmp_path = NULL;
		fsync(w->s->dirfd);
	}
	return r;
}

/* The rename replaced any older file of that name: older entries of the same
 * name no longer own a file (s->lock held). */
static void supersede(struct store *s, const char *name)
{
	struct store_entry *e = s->mru;
	while (e) {
		struct store_entry *next = e->next;
		if (strcmp(e->name, name) == 0 && e->owns_file) {
			e->owns_file = false;
			s->st.bytes -= e->file_bytes;
			if (!e->dropped) {
				e->dropped = true;
				s->st.entries--;
			}
			if (e->pins == 0)
				entry_destroy(s, e);
		}
		e = next;
	}
}

struct store_entry *store_commit(struct store_writer *w)
{
	struct store *s;
	struct store_entry *e;
	int r;

	if (!w) {
		errno = EINVAL;
		return NULL;
	}
	s = w->s;
	r = w->err ? w->err : w->written != w->size ? -EPROTO : 0;
	if (r == 0 && (r = write_footer(w)) != 0)
		count_write_error(s, r);
	if (r) {
		store_abort(w);
		errno = -r;
		return NULL;
	}
	e = entry_new(s, w->key, w->name, w->size, w->crcs);
	w->crcs = NULL;
	e->fd = w->fd; /* opened O_RDWR by mkostemp; now only read */
	w->fd = -1;
	e->pins = 1;
	pthread_mutex_lock(&s->lock);
	supersede(s, e->name);
	s->reserved -= w->file_bytes;
	s->st.bytes += e->file_bytes;
	s->st.entries++;
	lru_push_front(s, e);
	pthread_mutex_unlock(&s->lock);
	writer_free(w);
	return e;
}

void store_abort(struct store_writer *w)
{
	if (!w)
		return;
	unreserve(w->s, w->file_bytes);
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
