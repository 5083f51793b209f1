/* store_table.c - the store's table of known entries (a hash table keyed
 * by the key's hash) and their pins: lookups, store_get / store_put /
 * store_drop, and forgetting entries (s->lock guards all of it; see the
 * DESIGN note in store.c). */
#include "cache/store/store_int.h"

#include "cache/store/store_format.h"
#include "cache/store/store_lock.h"
#include "common/lockcheck.h"
#include "common/log.h"
#include "common/util.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

/* ---- the hash table (s->lock held) ---- */

struct store_entry **store_tab_bucket(struct store *s, uint64_t h)
{
	ASSERT_HELD(&s->lock);
	return &s->tab[h & (s->nbuckets - 1)];
}

void store_tab_grow(struct store *s)
{
	ASSERT_HELD(&s->lock);
	size_t old = s->nbuckets;
	struct store_entry **ot = s->tab;

	s->nbuckets = old ? 2 * old : 64;
	s->tab = xcalloc(s->nbuckets, sizeof(*s->tab));
	for (size_t i = 0; i < old; i++) {
		struct store_entry *e = ot[i], *next;
		for (; e; e = next) {
			struct store_entry **b = store_tab_bucket(s, e->hash);
			next = e->hnext;
			e->hnext = *b;
			*b = e;
		}
	}
	free(ot);
}

void store_tab_insert(struct store *s, struct store_entry *e)
{
	ASSERT_HELD(&s->lock);
	struct store_entry **b;
	if (s->nentries >= s->nbuckets)
		store_tab_grow(s);
	b = store_tab_bucket(s, e->hash);
	e->hnext = *b;
	*b = e;
	s->nentries++;
}

void store_tab_remove(struct store *s, struct store_entry *e)
{
	ASSERT_HELD(&s->lock);
	struct store_entry **p = store_tab_bucket(s, e->hash);
	while (*p && *p != e)
		p = &(*p)->hnext;
	if (*p) {
		*p = e->hnext;
		s->nentries--;
	}
	e->hnext = NULL;
}

/* The live (not dropped) entry of key, in constant time. */
struct store_entry *store_tab_find(struct store *s, const char *key, uint64_t h)
{
	ASSERT_HELD(&s->lock);
	if (!s->nbuckets)
		return NULL;
	for (struct store_entry *e = *store_tab_bucket(s, h); e; e = e->hnext)
		if (e->hash == h && !e->dropped && strcmp(e->key, key) == 0)
			return e;
	return NULL;
}

/* The entry, live or dropped, that describes the file (h, dev, ino). */
struct store_entry *store_tab_find_file(struct store *s, uint64_t h, dev_t dev,
					ino_t ino)
{
	ASSERT_HELD(&s->lock);
	if (!s->nbuckets)
		return NULL;
	for (struct store_entry *e = *store_tab_bucket(s, h); e; e = e->hnext)
		if (e->hash == h && e->owns_file && e->dev == dev &&
		    e->ino == ino)
			return e;
	return NULL;
}

struct store_entry *store_ent_new(struct store *s, const char *key,
				  uint64_t hash, uint64_t size, uint32_t *sums)
{
	struct store_entry *e = xcalloc(1, sizeof(*e));
	e->s = s;
	e->key = xstrdup(key);
	e->hash = hash;
	store_fmt_name(hash, e->name);
	e->size = size;
	e->nblocks = store_fmt_blocks(size);
	e->file_bytes = size + store_fmt_footer_bytes(e->nblocks, strlen(key));
	e->sums = sums;
	e->sum_kind = STORE_SUM_XXH3; /* load_entry sets a file's own */
	e->verified = xcalloc(e->nblocks ? e->nblocks : 1, 1);
	e->fd = -1;
	e->owns_file = true;
	return e;
}

void store_ent_free(struct store_entry *e)
{
	if (!e)
		return;
	if (e->fd >= 0)
		close(e->fd); /* releases its LOCK_SH */
	free(e->key);
	free(e->sums);
	free(e->verified);
	free(e);
}

/* Forget an unpinned entry; `unlink_file`: remove its file too, if the name
 * still holds that very file (another process may have put a new one
 * there). */
void store_ent_destroy(struct store *s, struct store_entry *e, bool unlink_file)
{
	struct stat sb;
	store_tab_remove(s, e);
	if (e->owns_file && unlink_file &&
	    fstatat(s->dirfd, e->name, &sb, AT_SYMLINK_NOFOLLOW) == 0 &&
	    sb.st_dev == e->dev && sb.st_ino == e->ino)
		unlinkat(s->dirfd, e->name, 0);
	store_acct_remove(s, e);
	store_ent_free(e);
}

/* s->lock held. Add a loaded entry unless the table already describes that
 * file (another thread loaded it meanwhile). Returns the entry in the table.
 */
struct store_entry *store_tab_adopt(struct store *s, struct store_entry *e)
{
	ASSERT_HELD(&s->lock);
	struct store_entry *have =
		store_tab_find_file(s, e->hash, e->dev, e->ino);
	if (have) {
		store_ent_free(e);
		return have;
	}
	e->born = s->gen;
	store_tab_insert(s, e);
	store_acct_add(s, e);
	return e;
}

/* ---- pins ---- */

static double ts_seconds(struct timespec t)
{
	return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

/* Open the file of an entry being pinned for the first time (s->lock held;
 * metadata only). The shared flock keeps other processes from evicting it;
 * an evictor holds LOCK_EX only around its unlink, so this waits at most
 * that long, and a file unlinked meanwhile has no links left. Returns 0 or
 * -errno; on failure the caller forgets the entry. */
static int entry_open(struct store *s, struct store_entry *e)
{
	ASSERT_HELD(&s->lock);
	struct stat sb;
	int fd = store_fmt_open(s->dirfd, e->name);
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
	key = store_fmt_key(url, etag, size);
	h = hash64(key, strlen(key), 0);
	pthread_mutex_lock(&s->lock);
	e = store_tab_find(s, key, h);
	pthread_mutex_unlock(&s->lock);
	if (!e)
		store_discover(s, key, h);
	pthread_mutex_lock(&s->lock);
	e = store_tab_find(s, key, h);
	if (e && e->pins == 0 && entry_open(s, e) != 0) {
		/* Gone or replaced: forget it. A damaged file is removed by the
		 * next load or rescan, which checks it. */
		store_ent_destroy(s, e, false);
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
	char name[STORE_FMT_NAME_LEN + 1];
	struct store_entry *e;
	struct stat sb;
	uint64_t h;
	char *key;
	bool found;

	if (!s)
		return 0;
	key = store_fmt_key(url, etag, size);
	h = hash64(key, strlen(key), 0);
	pthread_mutex_lock(&s->lock);
	found = store_tab_find(s, key, h) != NULL;
	pthread_mutex_unlock(&s->lock);
	free(key);
	if (found)
		return 1;
	/* Maybe written by another process: its name is there (a stat, no
	 * read), and it is not a file we dropped as corrupt. */
	store_fmt_name(h, name);
	if (fstatat(s->dirfd, name, &sb, AT_SYMLINK_NOFOLLOW) != 0 ||
	    !S_ISREG(sb.st_mode))
		return 0;
	pthread_mutex_lock(&s->lock);
	e = store_tab_find_file(s, h, sb.st_dev, sb.st_ino);
	found = !e || !e->dropped;
	pthread_mutex_unlock(&s->lock);
	return found;
}

/* A dropped entry's file, removed at its last put: under the directory
 * lock (taken after s->lock is let go: the lock order) and noted in the
 * journal, so other processes stop counting it. */
static void unlink_dropped(struct store *s, const char *name, dev_t dev,
			   ino_t ino)
{
	int lk = store_dir_lock(s);
	if (lk < 0)
		return; /* the next rescan or lookup finds it damaged */
	store_unlink_same(s, name, dev, ino);
	store_dir_unlock(s, lk);
}

void store_put(struct store_entry *e)
{
	char name[STORE_FMT_NAME_LEN + 1];
	struct store *s;
	bool unlink_it = false;
	dev_t dev = 0;
	ino_t ino = 0;

	if (!e)
		return;
	s = e->s;
	pthread_mutex_lock(&s->lock);
	if (--e->pins == 0) {
		close(e->fd);
		e->fd = -1;
		if (e->dropped) {
			unlink_it = e->owns_file;
			memcpy(name, e->name, sizeof(name));
			dev = e->dev;
			ino = e->ino;
			store_ent_destroy(s, e, false);
		}
	}
	pthread_mutex_unlock(&s->lock);
	if (unlink_it)
		unlink_dropped(s, name, dev, ino);
}

void store_drop(struct store_entry *e)
{
	store_drop_said(e, NULL);
}

void store_drop_said(struct store_entry *e, const char *what)
{
	if (!e)
		return;
	bool first;

	pthread_mutex_lock(&e->s->lock);
	first = store_acct_drop(e->s, e);
	pthread_mutex_unlock(&e->s->lock);
	if (first && what)
		log_counted("cache_corrupt", "cache: entry %s: %s", e->name,
			    what);
	else if (first)
		log_counted("cache_corrupt",
			    "cache: entry %s failed its "
			    "checksum; dropped, the shard is fetched again",
			    e->name);
}
