/* store_journal.c - the store's change journal ("<cache_dir>/shards.journal"):
 * the names changed in the shards directory, in order, so that an admission
 * learns what other processes did without reading the directory (issue 50;
 * the DESIGN note in store.c says who writes and who replays).
 *
 * A ring of JNL_SLOTS records after a header: the header holds the number
 * of records ever written (head), record n sits in slot n % JNL_SLOTS and
 * carries n and a checksum, so a reader knows a record it may use from a
 * slot overwritten since or never written. Plain pread/pwrite under the
 * directory lock; no fsync: only live processes read it, and a mount
 * starting up rescans and begins at the end. */
#include "cache/store/store_journal.h"

#include "cache/store/store_int.h"
#include "common/log.h"
#include "common/util.h"

#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define JNL_MAGIC 0x314c4e4a53464345ULL /* "ECFSJNL1" */
#define JNL_SLOTS 2048
#define JNL_REC 128

struct jnl_head {
	uint64_t magic, head, check;
};

struct jnl_rec {
	uint64_t seq, check;
	char name[JNL_REC - 16];
};

static uint64_t head_check(uint64_t head)
{
	return hash64(&head, sizeof(head), JNL_MAGIC);
}

static off_t slot_off(uint64_t seq)
{
	return (off_t)JNL_REC * (off_t)(1 + seq % JNL_SLOTS);
}

/* The head, or -ESTALE if the header is not one. */
static int read_head(struct store *s, uint64_t *head)
{
	struct jnl_head h;

	if (pread(s->jfd, &h, sizeof(h), 0) != (ssize_t)sizeof(h) ||
	    h.magic != JNL_MAGIC || h.check != head_check(h.head))
		return -ESTALE;
	*head = h.head;
	return 0;
}

static int write_head(struct store *s, uint64_t head)
{
	struct jnl_head h = {JNL_MAGIC, head, head_check(head)};
	return pwrite(s->jfd, &h, sizeof(h), 0) == (ssize_t)sizeof(h) ? 0
								      : -EIO;
}

/* Is jfd still the file under the journal's name? */
static bool jnl_current(struct store *s)
{
	struct stat sb;
	return s->jfd >= 0 &&
	       fstatat(s->rootfd, STORE_JNL_NAME, &sb, AT_SYMLINK_NOFOLLOW) ==
		       0 &&
	       sb.st_dev == s->jdev && sb.st_ino == s->jino;
}

void store_jnl_close(struct store *s)
{
	if (s->jfd >= 0)
		close(s->jfd);
	s->jfd = -1;
	s->jstale = true;
}

/* Open the journal, making it when missing, or remaking it when what is
 * there is not one (a header that does not check: a crash of the machine
 * half way through a write). Like the directories (store.c, open_own_dir),
 * it must be ours and written by nobody else. s->jstale is set: the
 * records before now are unknown to this process. */
static int jnl_open(struct store *s)
{
	struct stat sb;
	uint64_t head;

	store_jnl_close(s);
	for (int tries = 0; tries < 2; tries++) {
		s->jfd =
			openat(s->rootfd, STORE_JNL_NAME,
			       O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
		if (s->jfd < 0)
			return -errno;
		if (fstat(s->jfd, &sb) != 0 || !S_ISREG(sb.st_mode) ||
		    sb.st_uid != geteuid() || (sb.st_mode & 022)) {
			store_jnl_close(s);
			return -EPERM;
		}
		s->jdev = sb.st_dev;
		s->jino = sb.st_ino;
		if (sb.st_size == 0 && write_head(s, 0) == 0)
			return 0;
		if (read_head(s, &head) == 0)
			return 0;
		store_jnl_close(s);
		unlinkat(s->rootfd, STORE_JNL_NAME, 0);
	}
	return -ESTALE;
}

/* The record cannot be written: nobody may trust this journal any more.
 * Its name goes, so every process rescans at its next admission and the
 * next rescan makes a new one. */
static void jnl_poison(struct store *s)
{
	if (unlinkat(s->rootfd, STORE_JNL_NAME, 0) != 0 && errno != ENOENT)
		log_counted("cache_write",
			    "cache: cannot write or remove %s in the cache "
			    "dir: other mounts may miss a change until they "
			    "restart",
			    STORE_JNL_NAME);
	store_jnl_close(s);
}

void store_jnl_note(struct store *s, const char *name)
{
	struct jnl_rec rec;
	uint64_t head;

	if (!jnl_current(s) && jnl_open(s) != 0) {
		jnl_poison(s);
		return;
	}
	if (read_head(s, &head) != 0) {
		jnl_poison(s);
		return;
	}
	memset(&rec, 0, sizeof(rec));
	snprintf(rec.name, sizeof(rec.name), "%s", name);
	rec.seq = head;
	rec.check = hash64(rec.name, sizeof(rec.name), head);
	if (strlen(name) >= sizeof(rec.name) ||
	    pwrite(s->jfd, &rec, sizeof(rec), slot_off(head)) !=
		    (ssize_t)sizeof(rec) ||
	    write_head(s, head + 1) != 0)
		jnl_poison(s);
}

int store_jnl_replay(struct store *s, void (*fn)(struct store *, const char *))
{
	struct jnl_rec rec;
	uint64_t head;

	if (s->jstale || !jnl_current(s) || read_head(s, &head) != 0 ||
	    head < s->jseq || head - s->jseq > JNL_SLOTS)
		return -ESTALE;
	for (; s->jseq < head; s->jseq++) {
		if (pread(s->jfd, &rec, sizeof(rec), slot_off(s->jseq)) !=
			    (ssize_t)sizeof(rec) ||
		    rec.seq != s->jseq ||
		    rec.check != hash64(rec.name, sizeof(rec.name), rec.seq) ||
		    !memchr(rec.name, '\0', sizeof(rec.name)))
			return -ESTALE;
		fn(s, rec.name);
		if (s->jstale) /* fn met a replaced journal */
			return -ESTALE;
	}
	return 0;
}

void store_jnl_sync(struct store *s)
{
	uint64_t head;

	/* A header that does not check: made again (jnl_open). */
	if ((!jnl_current(s) || read_head(s, &head) != 0) &&
	    (jnl_open(s) != 0 || read_head(s, &head) != 0)) {
		store_jnl_close(s);
		return;
	}
	s->jseq = head;
	s->jstale = false;
}
