/* prepared_seen.c - the prepared tier's admission memory: samples prepared
 * before, kept across mounts (see prepared_seen.h). */
#include "cache/image/prepared_seen.h"

#include "common/file.h"
#include "common/util.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define SEEN_FILE "seen-v1"
#define SEEN_FIRST_SLOTS 4096u

struct prepared_seen {
	int fd;		      /* the file, O_APPEND */
	pthread_mutex_t lock; /* guards everything below */
	uint64_t *slots;      /* 0: empty */
	size_t nslots, count;
	uint64_t *pending; /* marked since the last flush */
	size_t npending, cappending;
};

/* 0 marks an empty slot: key 0 is stored as 1 (one more collision in
 * 2^64 changes only whether one sample is written a use early). */
static uint64_t norm(uint64_t key)
{
	return key ? key : 1;
}

/* s->lock held (or not yet shared). Adds key; 1 if added, 0 if known. */
static int insert(uint64_t *slots, size_t nslots, uint64_t key)
{
	size_t i = (size_t)(key ^ (key >> 29)) & (nslots - 1);
	while (slots[i]) {
		if (slots[i] == key)
			return 0;
		i = (i + 1) & (nslots - 1);
	}
	slots[i] = key;
	return 1;
}

/* Doubles the table when it is half full; false when at its cap. */
static bool room_for_one(struct prepared_seen *s)
{
	if ((s->count + 1) * 2 <= s->nslots)
		return true;
	if (s->count >= PREPARED_SEEN_MAX)
		return false;
	size_t n = s->nslots * 2;
	uint64_t *t = xcalloc(n, sizeof(*t));
	for (size_t i = 0; i < s->nslots; i++)
		if (s->slots[i])
			insert(t, n, s->slots[i]);
	free(s->slots);
	s->slots = t;
	s->nslots = n;
	return true;
}

/* The file's keys into the table; a file over the cap is emptied. */
static void load(struct prepared_seen *s)
{
	char *buf = NULL;
	size_t len = 0;
	int r = file_read_fd(s->fd, (size_t)PREPARED_SEEN_MAX * 8, &buf, &len);

	if (r == -EFBIG) {
		if (ftruncate(s->fd, 0) != 0)
			return;
	}
	if (r)
		return;
	/* A torn tail (a writer stopped mid-key): cut, so that later keys
	 * land whole again. */
	if (len % 8 && ftruncate(s->fd, (off_t)(len - len % 8)) != 0)
		len = 0;
	for (size_t off = 0; off + 8 <= len; off += 8) {
		uint64_t k;
		memcpy(&k, buf + off, 8);
		if (room_for_one(s))
			s->count +=
				(size_t)insert(s->slots, s->nslots, norm(k));
	}
	free(buf);
}

int prepared_seen_open(const char *dir, struct prepared_seen **out, char *err,
		       size_t errlen)
{
	char path[4096];
	struct stat sb;

	*out = NULL;
	if (snprintf(path, sizeof(path), "%s/%s", dir, SEEN_FILE) >=
	    (int)sizeof(path)) {
		snprintf(err, errlen, "cache_dir too long");
		return -ENAMETOOLONG;
	}
	int fd = open(path,
		      O_RDWR | O_CREAT | O_APPEND | O_CLOEXEC | O_NOFOLLOW |
			      O_NONBLOCK,
		      0600);
	if (fd < 0 || fstat(fd, &sb) != 0 || !S_ISREG(sb.st_mode)) {
		int e = fd < 0 ? errno : EINVAL;
		snprintf(err, errlen, "%s: %s", path,
			 fd < 0 ? strerror(e) : "not a regular file");
		if (fd >= 0)
			close(fd);
		return -e;
	}
	struct prepared_seen *s = xcalloc(1, sizeof(*s));
	s->fd = fd;
	s->nslots = SEEN_FIRST_SLOTS;
	s->slots = xcalloc(s->nslots, sizeof(*s->slots));
	pthread_mutex_init(&s->lock, NULL);
	load(s);
	*out = s;
	return 0;
}

void prepared_seen_close(struct prepared_seen *s)
{
	if (!s)
		return;
	(void)prepared_seen_flush(s); /* a key lost is one write later */
	close(s->fd);
	pthread_mutex_destroy(&s->lock);
	free(s->slots);
	free(s->pending);
	free(s);
}

enum prepared_seen_result prepared_seen_mark(struct prepared_seen *s,
					     uint64_t key)
{
	enum prepared_seen_result res = PREPARED_SEEN_AGAIN;

	key = norm(key);
	pthread_mutex_lock(&s->lock);
	if (!room_for_one(s)) {
		/* Full: only known keys can still say AGAIN. */
		size_t i = (size_t)(key ^ (key >> 29)) & (s->nslots - 1);
		res = PREPARED_SEEN_FULL;
		for (; s->slots[i]; i = (i + 1) & (s->nslots - 1))
			if (s->slots[i] == key)
				res = PREPARED_SEEN_AGAIN;
	} else if (insert(s->slots, s->nslots, key)) {
		res = PREPARED_SEEN_FIRST;
		s->count++;
		if (s->npending == s->cappending) {
			s->cappending = s->cappending ? s->cappending * 2 : 512;
			s->pending = xrealloc(s->pending, s->cappending * 8);
		}
		s->pending[s->npending++] = key;
	}
	pthread_mutex_unlock(&s->lock);
	return res;
}

/* Writes n keys at the file's end, whole keys only. */
static int append(int fd, const uint64_t *keys, size_t n)
{
	const char *p = (const char *)keys;
	size_t left = n * 8;

	while (left) {
		/* At most 512 keys a write: each write lands whole. */
		size_t chunk = left < 4096 ? left : 4096;
		ssize_t w = write(fd, p, chunk);
		if (w < 0 && errno == EINTR)
			continue;
		if (w < 0)
			return -errno;
		if ((size_t)w != chunk)
			return -EIO; /* a partial key at most: ignored on load
				      */
		p += w;
		left -= (size_t)w;
	}
	return 0;
}

int prepared_seen_flush(struct prepared_seen *s)
{
	pthread_mutex_lock(&s->lock);
	uint64_t *keys = s->pending;
	size_t n = s->npending;
	s->pending = NULL;
	s->npending = s->cappending = 0;
	pthread_mutex_unlock(&s->lock);
	int r = n ? append(s->fd, keys, n) : 0;
	free(keys);
	return r;
}

size_t prepared_seen_pending(struct prepared_seen *s)
{
	pthread_mutex_lock(&s->lock);
	size_t n = s->npending;
	pthread_mutex_unlock(&s->lock);
	return n;
}

size_t prepared_seen_count(struct prepared_seen *s)
{
	pthread_mutex_lock(&s->lock);
	size_t n = s->count;
	pthread_mutex_unlock(&s->lock);
	return n;
}
