/* store_lock.c - the store's cross-process locking: the directory lock,
 * the per-entry writer lock and the probes of temp files' writers (see the
 * DESIGN note in store.c for who holds what, and the lock order). */
#include "cache/store/store_lock.h"

#include "cache/store/store_format.h"
#include "cache/store/store_int.h"
#include "common/log.h"
#include "common/util.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define WAIT_POLL_NS 20000000L /* 20 ms between looks at a busy entry lock */

/* Returns a descriptor holding the lock, or -errno. */
int store_dir_lock(struct store *s)
{
	/* Through the directory's descriptor, never its path: a directory
	 * recreated under that path while we run is another directory. */
	int fd, r = 0;

	pthread_mutex_lock(&s->dirmu);
	fd = openat(s->dirfd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (fd < 0)
		r = -errno;
	while (fd >= 0 && flock(fd, LOCK_EX) != 0) {
		if (errno != EINTR) {
			r = -errno;
			close(fd);
			fd = -1;
		}
	}
	if (r < 0) {
		pthread_mutex_unlock(&s->dirmu);
		return r;
	}
	return fd;
}

void store_dir_unlock(struct store *s, int fd)
{
	if (fd < 0)
		return;
	close(fd);
	pthread_mutex_unlock(&s->dirmu);
}

bool store_is_lock_name(const char *n)
{
	return strlen(n) == 16 + strlen(STORE_LOCK_SUFFIX) &&
	       strcmp(n + 16, STORE_LOCK_SUFFIX) == 0;
}

/* Remove a temp or lock file whose owner is gone: nobody holds its flock.
 * The lock taken may be on a file that is no longer under that name: a
 * writer unlinks its lock file before letting go, and the next writer of
 * the entry creates and locks a new one there. Unlink only if the name
 * still holds the file we locked. */
void store_remove_if_unlocked(struct store *s, const char *name)
{
	struct stat a, b;
	int fd = openat(s->dirfd, name, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
	if (fd < 0)
		return;
	if (flock(fd, LOCK_EX | LOCK_NB) == 0 && fstat(fd, &a) == 0 &&
	    fstatat(s->dirfd, name, &b, AT_SYMLINK_NOFOLLOW) == 0 &&
	    a.st_dev == b.st_dev && a.st_ino == b.st_ino)
		unlinkat(s->dirfd, name, 0);
	close(fd);
}

static void lock_name(const char *name, char *out, size_t n)
{
	snprintf(out, n, "%.16s" STORE_LOCK_SUFFIX, name);
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
		if (!*waited)
			store_acct_count(s, STORE_COUNT_WAITS);
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
int store_entry_lock(struct store *s, const char *name, bool *waited)
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

void store_entry_unlock(struct store *s, const char *name, int fd)
{
	char ln[32];
	if (fd < 0)
		return;
	lock_name(name, ln, sizeof(ln));
	unlinkat(s->dirfd, ln, 0);
	close(fd);
}

void store_entry_note_tmp(int lockfd, const char *tmp_name)
{
	size_t n = strlen(tmp_name);

	/* Best effort: without it peers wait for the commit instead. */
	if (lockfd >= 0 && pwrite(lockfd, tmp_name, n, 0) == (ssize_t)n)
		IGNORE_RESULT(ftruncate(lockfd, (off_t)n));
}

/* A temp file name read from a lock file: one of ours for hash h (no
 * slash, the prefix and hash that create_tmp writes). */
static bool tmp_name_ok(const char *name, uint64_t h)
{
	char want[64];
	int n = snprintf(want, sizeof(want), STORE_TMP_PREFIX "%016" PRIx64 "-",
			 h);
	return strncmp(name, want, (size_t)n) == 0 && !strchr(name, '/');
}

/* Was the temp file `name` made by this process? create_tmp writes our
 * pid after the prefix and the hash. */
static bool tmp_is_ours(const char *name)
{
	const char *p = name + strlen(STORE_TMP_PREFIX) + 17;
	char *end;
	long pid = strtol(p, &end, 10);

	return end != p && *end == '-' && pid == (long)getpid();
}

static int peer_open(struct store *s, const char *url, const char *etag,
		     uint64_t size, bool others_only)
{
	char name[STORE_FMT_NAME_LEN + 1], ln[32], tmp[128];
	struct stat sb;
	char *key;
	uint64_t h;
	ssize_t n;
	int fd;

	if (!s)
		return -EINVAL;
	key = store_fmt_key(url, etag, size);
	h = hash64(key, strlen(key), 0);
	free(key);
	store_fmt_name(h, name);
	lock_name(name, ln, sizeof(ln));
	/* One open and read, whatever the size of the directory: a reader
	 * looks here every little while as long as the peer's fetch lasts. */
	fd = openat(s->dirfd, ln, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
	if (fd < 0)
		return -ENOENT;
	n = pread(fd, tmp, sizeof(tmp) - 1, 0);
	close(fd);
	if (n <= 0)
		return -ENOENT;
	tmp[n] = '\0';
	if (!tmp_name_ok(tmp, h) || (others_only && tmp_is_ours(tmp)))
		return -ENOENT;
	fd = openat(s->dirfd, tmp, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
	if (fd < 0)
		return -ENOENT; /* renamed or removed meanwhile */
	if (fstat(fd, &sb) != 0 || !S_ISREG(sb.st_mode) ||
	    !store_writer_alive(fd)) {
		close(fd);
		return -ENOENT;
	}
	return fd;
}

int store_peer_open(struct store *s, const char *url, const char *etag,
		    uint64_t size)
{
	return peer_open(s, url, etag, size, false);
}

int store_peer_open_other(struct store *s, const char *url, const char *etag,
			  uint64_t size)
{
	return peer_open(s, url, etag, size, true);
}

/* fd of a temp file in the directory: is its writer still there (holding
 * LOCK_EX)? Probing with LOCK_SH | LOCK_NB and letting go at once. */
bool store_writer_alive(int fd)
{
	if (flock(fd, LOCK_SH | LOCK_NB) == 0) {
		flock(fd, LOCK_UN);
		return false;
	}
	return errno == EWOULDBLOCK;
}
