/* store_lock.c - the store's cross-process locking: the directory lock,
 * the per-entry writer lock and the probes of temp files' writers (see the
 * DESIGN note in store.c for who holds what, and the lock order). */
#include "cache/store/store_lock.h"

#include "cache/store/store_int.h"
#include "common/util.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define WAIT_POLL_NS 20000000L /* 20 ms between looks at a busy entry lock */

/* Returns a descriptor holding the lock, or -errno. */
int store_dir_lock(struct store *s)
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

void store_dir_unlock(int fd)
{
	if (fd >= 0)
		close(fd);
}

bool store_is_lock_name(const char *n)
{
	return strlen(n) == 16 + strlen(STORE_LOCK_SUFFIX) &&
	       strcmp(n + 16, STORE_LOCK_SUFFIX) == 0;
}

/* Remove a temp or lock file whose owner is gone: nobody holds its flock. */
void store_remove_if_unlocked(struct store *s, const char *name)
{
	int fd = openat(s->dirfd, name, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
	if (fd < 0)
		return;
	if (flock(fd, LOCK_EX | LOCK_NB) == 0)
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
