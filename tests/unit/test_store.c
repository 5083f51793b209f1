/* test_store.c - unit tests for the on-disk shard store (cache/store/store.c):
 * writers and readers, damage and foreign files, sharing one directory; its
 * eviction is in test_store_evict.c. */
#include "cache/store/store.h"

#include "cache/store/shards.h"
#include "cache/store/store_format.h"
#include "common/util.h"
#include "fetch/format/index.h"
#include "fetch/net/http.h"
#include "store_fx.h"

#include <criterion/criterion.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <inttypes.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <unistd.h>

/* fsync, wrapped at link time for this suite (tests/meson.build): while
 * `fail_dir_fsync` is set, a directory's fsync fails with EIO. */
int __real_fsync(int fd);
int __wrap_fsync(int fd);
static int fail_dir_fsync;
static atomic_int fsyncs; /* calls, for the lazy store's test */

int __wrap_fsync(int fd)
{
	struct stat sb;
	atomic_fetch_add(&fsyncs, 1);
	if (fail_dir_fsync && fstat(fd, &sb) == 0 && S_ISDIR(sb.st_mode)) {
		errno = EIO;
		return -1;
	}
	return __real_fsync(fd);
}

/* flock(LOCK_SH) on a writer's descriptor (publish turning its LOCK_EX
 * into a pin) fails as a signal would make it: the kernel drops the old
 * lock first, then the wait is interrupted (EINTR), `flock_eintr` times;
 * with `flock_enolck` it fails for good. */
int __real_flock(int fd, int op);
int __wrap_flock(int fd, int op);
static int flock_eintr, flock_enolck;

/* Set by a test: runs once, at the next flock(LOCK_EX | LOCK_NB), before
 * it (the start-up sweep's probe of a lock file). */
static void (*before_nb_lock)(int fd);

int __wrap_flock(int fd, int op)
{
	if (op == (LOCK_EX | LOCK_NB) && before_nb_lock) {
		void (*fn)(int) = before_nb_lock;
		before_nb_lock = NULL;
		fn(fd);
	}
	if (op == LOCK_SH && (flock_eintr > 0 || flock_enolck)) {
		__real_flock(fd, LOCK_UN);
		errno = flock_enolck ? ENOLCK : EINTR;
		flock_eintr--;
		return -1;
	}
	return __real_flock(fd, op);
}

TestSuite(store, .init = store_fx_setup, .fini = store_fx_teardown,
	  .timeout = 60);

Test(store, round_trip_sizes)
{
	static const uint64_t sizes[] = {0,
					 1,
					 4095,
					 STORE_BLOCK - 1,
					 STORE_BLOCK,
					 STORE_BLOCK + 1,
					 3 * STORE_BLOCK + 17};
	struct store *s = open_store(1ULL << 30);
	struct stat sb;
	char p[128];

	snprintf(p, sizeof(p), "%s/shards", tdir);
	cr_assert_eq(stat(p, &sb), 0);
	cr_assert_eq(sb.st_mode & 0777, 0700);
	for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++) {
		char url[64];
		uint64_t z = sizes[i];
		struct store_entry *e;
		snprintf(url, sizeof(url), "http://h/s-%zu.tar", i);
		e = add(s, url, "", z, (unsigned)i);
		cr_assert_not_null(e);
		check_range(e, 0, (size_t)z, (unsigned)i, (ssize_t)z);
		check_range(e, z, 10, (unsigned)i, 0);
		if (z > 10) {
			check_range(e, z - 5, 10, (unsigned)i, 5);
			check_range(e, z / 2, 7, (unsigned)i, 7);
		}
		if (z > STORE_BLOCK + 3)
			check_range(e, STORE_BLOCK - 3, 6, (unsigned)i, 6);
		store_put(e);
		e = store_get(s, url, "", z);
		cr_assert_not_null(e);
		check_range(e, 0, (size_t)z, (unsigned)i, (ssize_t)z);
		store_put(e);
	}
	cr_assert_eq(count_files(".tmp-"), 0);
	store_close(s);
}

Test(store, writer_pread_serves_partial)
{
	struct store *s = open_store(1ULL << 30);
	struct store_writer *w;
	uint8_t buf[5000], got[5000];
	struct store_entry *e;

	cr_assert_eq(store_begin(s, "http://h/a", "x", 5000, &w), 0);
	cr_assert_not_null(w);
	fill(buf, sizeof(buf), 7, 0);
	cr_assert_eq(store_write(w, buf, 1000), 0);
	cr_assert_eq(store_writer_pread(w, got, 500, 200), 500);
	cr_assert(memcmp(got, buf + 200, 500) == 0);
	cr_assert_eq(store_writer_pread(w, got, 500, 900), 100);
	cr_assert_eq(store_writer_pread(w, got, 10, 1000), 0);
	cr_assert_eq(store_write(w, buf + 1000, 4001), -EFBIG);
	cr_assert_eq(store_write(w, buf + 1000, 4000), 0);
	/* Not yet committed: invisible to readers. */
	cr_assert_null(store_get(s, "http://h/a", "x", 5000));
	cr_assert_eq(store_commit(w, &e), 0);
	cr_assert_not_null(e);
	check_range(e, 0, 5000, 7, 5000);
	store_put(e);
	store_close(s);
}

Test(store, commit_incomplete_fails)
{
	struct store *s = open_store(1ULL << 30);
	struct store_writer *w;
	struct store_entry *e = (struct store_entry *)&w; /* not NULL */
	uint8_t buf[50] = {0};
	struct store_stats st;

	cr_assert_eq(store_begin(s, "http://h/a", "", 100, &w), 0);
	cr_assert_eq(store_write(w, buf, 50), 0);
	cr_assert_eq(store_commit(w, &e), -EPROTO);
	cr_assert_null(e);
	cr_assert_null(store_get(s, "http://h/a", "", 100));
	cr_assert_eq(count_files(".tmp-"), 0);
	cr_assert_eq(store_begin(s, "http://h/b", "", 100, &w), 0);
	store_abort(w);
	store_abort(NULL);
	cr_assert_eq(count_files(".tmp-"), 0);
	store_get_stats(s, &st);
	cr_assert_eq(st.entries, 0);
	cr_assert_eq(st.bytes, 0);
	store_close(s);
}

Test(store, reopen_finds_entries)
{
	struct store *s = open_store(1ULL << 30);
	struct store_stats a, b;
	struct store_entry *e;

	add_put(s, "http://h/0.tar", 2 * STORE_BLOCK + 5, 1);
	add_put(s, "http://h/1.tar", 10, 2);
	store_get_stats(s, &a);
	store_close(s);

	s = open_store(1ULL << 30);
	store_get_stats(s, &b);
	cr_assert_eq(b.entries, 2);
	cr_assert_eq(b.bytes, a.bytes);
	e = store_get(s, "http://h/0.tar", "\"e\"", 2 * STORE_BLOCK + 5);
	cr_assert_not_null(e);
	check_range(e, 0, 2 * STORE_BLOCK + 5, 1, 2 * STORE_BLOCK + 5);
	store_put(e);
	/* Another version of the object is another key. */
	cr_assert_null(
		store_get(s, "http://h/0.tar", "\"f\"", 2 * STORE_BLOCK + 5));
	cr_assert_null(
		store_get(s, "http://h/0.tar", "\"e\"", 2 * STORE_BLOCK + 4));
	cr_assert_null(store_get(s, "http://h/2.tar", "\"e\"", 10));
	store_close(s);
}

static void flip_byte(const char *path, off_t off)
{
	int fd = open(path, O_RDWR);
	uint8_t b;
	cr_assert_geq(fd, 0);
	cr_assert_eq(pread(fd, &b, 1, off), 1);
	b ^= 0x40;
	cr_assert_eq(pwrite(fd, &b, 1, off), 1);
	close(fd);
}

Test(store, corrupt_block_detected_and_dropped)
{
	uint64_t size = 3 * STORE_BLOCK + 100;
	struct store *s = open_store(1ULL << 30);
	struct store_entry *e;
	struct store_stats st;
	char path[512];
	uint8_t buf[64];

	add_put(s, "http://h/c.tar", size, 9);
	store_close(s);
	only_entry_path(path, sizeof(path));
	flip_byte(path, STORE_BLOCK + 12345);

	s = open_store(1ULL << 30);
	e = store_get(s, "http://h/c.tar", "\"e\"", size);
	cr_assert_not_null(e);
	check_range(e, 10, 50, 9, 50);		    /* block 0 fine */
	check_range(e, 2 * STORE_BLOCK, 64, 9, 64); /* block 2 fine */
	cr_assert_eq(store_pread(e, buf, 10, STORE_BLOCK + 1), -EBADMSG);
	/* The bad byte is never handed out, however it is asked for. */
	cr_assert_eq(store_pread(e, buf, 64, STORE_BLOCK - 32), -EBADMSG);
	store_drop(e);
	cr_assert_null(store_get(s, "http://h/c.tar", "\"e\"", size));
	cr_assert_eq(access(path, F_OK),
		     0); /* still pinned: not unlinked yet */
	store_put(e);
	cr_assert_neq(access(path, F_OK), 0);
	store_get_stats(s, &st);
	cr_assert_eq(st.corrupt, 1);
	cr_assert_eq(st.entries, 0);
	cr_assert_eq(st.bytes, 0);
	store_close(s);
}

/* A read of a whole block checks it in the caller's buffer (no copy):
 * a damaged block is refused there as well. */
Test(store, whole_block_read_is_checked_in_place)
{
	uint64_t size = 2 * STORE_BLOCK + 10;
	struct store *s = open_store(1ULL << 30);
	struct store_entry *e;
	uint8_t *buf = malloc(STORE_BLOCK);
	char path[512];

	add_put(s, "http://h/w.tar", size, 4);
	store_close(s);
	only_entry_path(path, sizeof(path));
	flip_byte(path, STORE_BLOCK + STORE_BLOCK / 2);
	s = open_store(1ULL << 30);
	e = store_get(s, "http://h/w.tar", "\"e\"", size);
	cr_assert_not_null(e);
	check_range(e, 0, STORE_BLOCK, 4, STORE_BLOCK); /* block 0 whole */
	check_range(e, 2 * STORE_BLOCK, 10, 4, 10);	/* the short last */
	cr_assert_eq(store_pread(e, buf, STORE_BLOCK, STORE_BLOCK), -EBADMSG);
	store_drop(e);
	store_put(e);
	store_close(s);
	free(buf);
}

/* Rewrites the entry file at path as version 1 (zlib crc32 per block, as
 * every file was before ECHOFS-STORE-2). */
static void make_version_1(const char *path, const char *url, uint64_t size)
{
	uint32_t nb = store_fmt_blocks(size);
	uint32_t *sums = calloc(nb ? nb : 1, 4);
	uint8_t *b = malloc(STORE_BLOCK);
	char *key = store_fmt_key(url, "\"e\"", size);
	int fd = open(path, O_RDWR);

	cr_assert_geq(fd, 0);
	for (uint32_t i = 0; i < nb; i++) {
		size_t n = store_fmt_block_len(size, i);
		cr_assert_eq(pread(fd, b, n, (off_t)i * STORE_BLOCK),
			     (ssize_t)n);
		sums[i] = store_fmt_block_sum(STORE_SUM_CRC32, b, n);
		/* The two versions' sums differ: the file is really v1. */
		cr_assert_neq(sums[i],
			      store_fmt_block_sum(STORE_SUM_XXH3, b, n));
	}
	cr_assert_eq(store_fmt_write_footer(fd, key, size, nb, sums,
					    STORE_SUM_CRC32),
		     0);
	close(fd);
	free(key);
	free(b);
	free(sums);
}

/* Caches written before version 2 are still read, and still checked. */
Test(store, version_1_files_are_read_and_checked)
{
	uint64_t size = STORE_BLOCK + 500;
	struct store *s = open_store(1ULL << 30);
	struct store_entry *e;
	struct store_stats st;
	uint8_t buf[16];
	char path[512];

	add_put(s, "http://h/v1.tar", size, 7);
	store_close(s);
	only_entry_path(path, sizeof(path));
	make_version_1(path, "http://h/v1.tar", size);
	s = open_store(1ULL << 30);
	store_get_stats(s, &st);
	cr_assert_eq(st.entries, 1);
	e = store_get(s, "http://h/v1.tar", "\"e\"", size);
	cr_assert_not_null(e);
	check_range(e, 0, (size_t)size, 7, (ssize_t)size);
	store_put(e);
	store_close(s);

	flip_byte(path, STORE_BLOCK + 3);
	s = open_store(1ULL << 30);
	e = store_get(s, "http://h/v1.tar", "\"e\"", size);
	cr_assert_not_null(e);
	check_range(e, 0, 100, 7, 100);
	cr_assert_eq(store_pread(e, buf, sizeof(buf), STORE_BLOCK), -EBADMSG);
	store_drop(e);
	store_put(e);
	store_close(s);
}

/* Damage to the footer or tail, or a truncated file: gone at open. */
struct damage_case {
	const char *what;
	int from_end; /* byte offset from the end to flip; 0 = truncate */
};

static const struct damage_case damage_cases[] = {
	{"tail crc", 1}, {"key length", 6}, {"size field", 30}, {"magic", 40},
	{"key", 45},	 {"block crc", 60}, {"truncated", 0},
};

Test(store, damaged_footer_removed_at_open)
{
	for (size_t i = 0; i < sizeof(damage_cases) / sizeof(damage_cases[0]);
	     i++) {
		const struct damage_case *c = &damage_cases[i];
		struct store *s = open_store(1ULL << 30);
		struct store_stats st;
		struct stat sb;
		char path[512];

		add_put(s, "http://h/d.tar", 20000, 3);
		store_close(s);
		only_entry_path(path, sizeof(path));
		cr_assert_eq(stat(path, &sb), 0);
		if (c->from_end)
			flip_byte(path, sb.st_size - c->from_end);
		else
			cr_assert_eq(truncate(path, sb.st_size - 7), 0);
		s = open_store(1ULL << 30);
		store_get_stats(s, &st);
		cr_assert_eq(st.entries, 0, "%s: entry kept", c->what);
		cr_assert_null(store_get(s, "http://h/d.tar", "\"e\"", 20000));
		cr_assert_neq(access(path, F_OK), 0, "%s: not removed",
			      c->what);
		store_close(s);
	}
}

Test(store, foreign_files_ignored_temp_removed)
{
	char p[256], keep[256], bad[256], moved[256], tmp[256], sub[256];
	struct store *s = open_store(1ULL << 30);
	struct store_stats st;
	FILE *f;

	add_put(s, "http://h/ok.tar", 3000, 5);
	store_close(s);
	snprintf(keep, sizeof(keep), "%s/shards/README", tdir);
	snprintf(bad, sizeof(bad), "%s/shards/0123456789abcdef.shard", tdir);
	snprintf(tmp, sizeof(tmp), "%s/shards/.tmp-AbC123", tdir);
	snprintf(sub, sizeof(sub), "%s/shards/fedcba9876543210.shard", tdir);
	only_entry_path(p, sizeof(p));
	/* A valid entry under the wrong name: its key does not match. */
	snprintf(moved, sizeof(moved), "%s/shards/00000000000000aa.shard",
		 tdir);
	cr_assert_eq(link(p, moved), 0);
	f = fopen(keep, "w");
	fputs("not a shard\n", f);
	fclose(f);
	f = fopen(bad, "w");
	fputs("garbage garbage garbage garbage garbage garbage\n", f);
	fclose(f);
	f = fopen(tmp, "w");
	fputs("half written", f);
	fclose(f);
	cr_assert_eq(mkdir(sub, 0700), 0);

	s = open_store(1ULL << 30);
	store_get_stats(s, &st);
	cr_assert_eq(st.entries, 1);
	cr_assert_eq(access(keep, F_OK), 0, "foreign file removed");
	cr_assert_neq(access(bad, F_OK), 0, "garbage .shard kept");
	cr_assert_neq(access(moved, F_OK), 0, "misnamed entry kept");
	cr_assert_neq(access(tmp, F_OK), 0, "temp file kept");
	cr_assert_eq(access(sub, F_OK), 0);
	store_put(store_get(s, "http://h/ok.tar", "\"e\"", 3000));
	cr_assert_not_null(store_get(s, "http://h/ok.tar", "\"e\"", 3000));
	store_close(s);
	rmdir(sub);
}

Test(store, same_key_rewritten_while_pinned)
{
	struct store *s = open_store(1ULL << 30);
	struct store_entry *old, *neu, *again;
	struct store_stats st;
	char path[512];
	struct store_writer *w;

	old = add(s, "http://h/k.tar", "\"e\"", 5000, 1);
	cr_assert_not_null(old);
	store_drop(old);
	/* Fetched again while a reader still holds the dropped copy. */
	neu = add(s, "http://h/k.tar", "\"e\"", 5000, 1);
	cr_assert_not_null(neu);
	store_put(neu);
	store_put(old);
	only_entry_path(path, sizeof(path));
	cr_assert_eq(access(path, F_OK), 0, "new file unlinked by old put");
	again = store_get(s, "http://h/k.tar", "\"e\"", 5000);
	cr_assert_not_null(again);
	check_range(again, 0, 5000, 1, 5000);
	/* A live key is not written twice: the writer is told it is there. */
	cr_assert_eq(store_begin(s, "http://h/k.tar", "\"e\"", 5000, &w),
		     -EEXIST);
	cr_assert_null(w);
	check_range(again, 0, 5000, 1, 5000);
	store_put(again);
	store_get_stats(s, &st);
	cr_assert_eq(st.entries, 1);
	cr_assert_eq(count_files(""), 1);
	store_close(s);
	s = open_store(1ULL << 30);
	store_get_stats(s, &st);
	cr_assert_eq(st.entries, 1);
	store_close(s);
}

Test(store, open_fails_cleanly)
{
	char err[256] = "", path[256];
	FILE *f;

	snprintf(path, sizeof(path), "%s/file", tdir);
	f = fopen(path, "w");
	fclose(f);
	snprintf(path, sizeof(path), "%s/file/cache", tdir);
	struct store *s = (struct store *)1;
	cr_assert_eq(store_open(path, 1 << 20, &s, err, sizeof(err)), -ENOTDIR);
	cr_assert_null(s);
	cr_assert(strstr(err, "cache"), "err: %s", err);
	store_close(NULL);
	store_put(NULL);
	store_drop(NULL);
	cr_assert_null(store_get(NULL, "u", "", 1));
}

/* Mount a small tmpfs at <tdir>/m; skips the test when that is impossible. */
static void mount_small(char *m, size_t mlen, const char *opts)
{
	snprintf(m, mlen, "%s/m", tdir);
	cr_assert_eq(mkdir(m, 0700), 0);
	if (geteuid() != 0)
		cr_skip_test("needs root to mount a small tmpfs");
	if (mount("tmpfs", m, "tmpfs", 0, opts) != 0)
		cr_skip_test("mount tmpfs failed: %s", strerror(errno));
}

Test(store, disk_full_is_an_error_not_a_crash)
{
	char m[128], err[256];
	struct store *s;
	struct store_stats st;
	struct store_entry *e;
	struct store_writer *w;
	int r;

	mount_small(m, sizeof(m), "size=256k");
	cr_assert_eq(store_open(m, 64ULL << 20, &s, err, sizeof(err)), 0);
	cr_assert_not_null(s, "%s", err);
	e = add(s, "http://h/small", "", 10000, 1);
	cr_assert_not_null(e);
	store_put(e);
	r = store_begin(s, "http://h/big", "", 1 << 20, &w);
	cr_assert_eq(r, -ENOSPC, "%s", strerror(-r));
	cr_assert_null(w);
	store_get_stats(s, &st);
	cr_assert_eq(st.write_errors, 1);
	e = store_get(s, "http://h/small", "", 10000);
	cr_assert_not_null(e);
	check_range(e, 0, 10000, 1, 10000);
	store_put(e);
	store_close(s);
	{
		char sh[160];
		DIR *d;
		struct dirent *de;
		snprintf(sh, sizeof(sh), "%s/shards", m);
		d = opendir(sh);
		while (d && (de = readdir(d)) != NULL)
			cr_assert(strncmp(de->d_name, ".tmp-", 5) != 0);
		if (d)
			closedir(d);
	}
	cr_assert_eq(umount(m), 0);
}

Test(store, unwritable_dir)
{
	char m[128], err[256];
	struct store *s;
	struct store_stats st;
	struct store_entry *e;
	struct store_writer *w;
	int r;

	mount_small(m, sizeof(m), "size=1m");
	cr_assert_eq(store_open(m, 64ULL << 20, &s, err, sizeof(err)), 0);
	cr_assert_not_null(s, "%s", err);
	add_put(s, "http://h/a", 4000, 2);
	store_close(s);
	if (mount("tmpfs", m, "tmpfs", MS_REMOUNT | MS_RDONLY, "size=1m")) {
		umount(m);
		cr_skip_test("remount ro failed: %s", strerror(errno));
	}
	/* Existing entries still serve; new ones fail with an errno. */
	cr_assert_eq(store_open(m, 64ULL << 20, &s, err, sizeof(err)), 0);
	cr_assert_not_null(s, "%s", err);
	e = store_get(s, "http://h/a", "\"e\"", 4000);
	cr_assert_not_null(e);
	check_range(e, 0, 4000, 2, 4000);
	store_put(e);
	r = store_begin(s, "http://h/b", "", 100, &w);
	cr_assert_eq(r, -EROFS, "%s", strerror(-r));
	cr_assert_null(w);
	store_get_stats(s, &st);
	cr_assert_eq(st.write_errors, 1);
	store_close(s);
	cr_assert_eq(umount(m), 0);
}

/* Readers and a writer at once: readers always see correct bytes or a
 * missing entry, never a torn one; the cap holds throughout. */
struct conc {
	struct store *s;
	int id;
	int errors;
};

static void *reader_thread(void *arg)
{
	struct conc *c = arg;
	uint8_t buf[4096], exp[4096];
	for (int i = 0; i < 400; i++) {
		char url[32];
		int k = (i * 7 + c->id) % 12;
		struct store_entry *e;
		snprintf(url, sizeof(url), "http://h/%d", k);
		e = store_get(c->s, url, "", 3 * STORE_BLOCK / 2);
		if (!e)
			continue;
		uint64_t off =
			(uint64_t)(i * 40503) % (3 * STORE_BLOCK / 2 - 4096);
		if (store_pread(e, buf, sizeof(buf), off) != sizeof(buf))
			c->errors++;
		fill(exp, sizeof(exp), (unsigned)k, off);
		if (memcmp(buf, exp, sizeof(buf)) != 0)
			c->errors++;
		store_put(e);
	}
	return NULL;
}

static void *writer_thread(void *arg)
{
	struct conc *c = arg;
	for (int k = 0; k < 12; k++) {
		char url[32];
		struct store_entry *e;
		snprintf(url, sizeof(url), "http://h/%d", k);
		e = add(c->s, url, "", 3 * STORE_BLOCK / 2, (unsigned)k);
		if (!e)
			c->errors++;
		store_put(e);
	}
	return NULL;
}

Test(store, concurrent_readers_and_writer)
{
	struct store *s = open_store(5ULL * STORE_BLOCK);
	pthread_t t[5];
	struct conc c[5];
	struct store_stats st;

	for (int i = 0; i < 5; i++) {
		c[i] = (struct conc){.s = s, .id = i};
		pthread_create(&t[i], NULL, i ? reader_thread : writer_thread,
			       &c[i]);
	}
	for (int i = 0; i < 5; i++) {
		pthread_join(t[i], NULL);
		cr_assert_eq(c[i].errors, 0, "thread %d: %d errors", i,
			     c[i].errors);
	}
	store_get_stats(s, &st);
	cr_assert_leq(st.bytes, st.cap);
	cr_assert_geq(st.evictions, 9);
	store_close(s);
}

/* ---- two stores on one directory ---- */

/* Two stores on one directory behave as two processes would: flock locks
 * belong to open file descriptions, not to processes. */
Test(store, second_open_keeps_live_writer_temp)
{
	struct store *a = open_store(1ULL << 30), *b;
	struct store_writer *w;
	struct store_entry *e;
	int r;
	uint8_t buf[3000];

	cr_assert_eq(store_begin(a, "http://h/X.tar", "", 3000, &w), 0);
	fill(buf, sizeof(buf), 5, 0);
	cr_assert_eq(store_write(w, buf, 1000), 0);
	b = open_store(1ULL << 30);
	cr_assert_eq(count_files(".tmp-"), 1,
		     "another mount's start-up removed a live temp file");
	cr_assert_eq(store_write(w, buf + 1000, 2000), 0);
	r = store_commit(w, &e);
	cr_assert_eq(r, 0, "commit after another open: %s", strerror(-r));
	store_put(e);
	e = store_get(b, "http://h/X.tar", "", 3000);
	cr_assert_not_null(e, "the other mount does not find the new entry");
	check_range(e, 0, 3000, 5, 3000);
	store_put(e);
	store_close(b);
	store_close(a);
}

struct waiter {
	struct store *s;
	struct store_writer *w;
	int err;
	double took;
};

static void *begin_thread(void *arg)
{
	struct waiter *x = arg;
	double t0 = now_mono();
	x->err = -store_begin(x->s, "http://h/X.tar", "", 3000, &x->w);
	x->took = now_mono() - t0;
	return NULL;
}

Test(store, second_writer_waits_and_finds_entry)
{
	struct store *a = open_store(1ULL << 30), *b = open_store(1ULL << 30);
	struct store_writer *w;
	int r = store_begin(a, "http://h/X.tar", "", 3000, &w);
	struct waiter x = {.s = b};
	struct store_entry *e;
	struct store_stats st;
	uint8_t buf[3000];
	pthread_t t;

	cr_assert_eq(r, 0, "%s", strerror(-r));
	pthread_create(&t, NULL, begin_thread, &x);
	/* Commit only once b is seen waiting (a wait counts when it starts),
	 * whatever the machine's load: an event, not a sleep. */
	do {
		nanosleep(&(struct timespec){0, 1000000L}, NULL);
		store_get_stats(b, &st);
	} while (st.waits == 0);
	fill(buf, sizeof(buf), 6, 0);
	cr_assert_eq(store_write(w, buf, sizeof(buf)), 0);
	cr_assert_eq(store_commit(w, &e), 0);
	store_put(e);
	pthread_join(t, NULL);
	cr_assert_null(x.w, "the same shard was written twice");
	cr_assert_eq(x.err, EEXIST, "errno %s", strerror(x.err));
	e = store_get(b, "http://h/X.tar", "", 3000);
	cr_assert_not_null(e);
	check_range(e, 0, 3000, 6, 3000);
	store_put(e);
	store_get_stats(b, &st);
	cr_assert_eq(st.waits, 1);
	cr_assert_eq(st.write_errors, 0);
	cr_assert_eq(count_files(".tmp-"), 0);
	store_close(a);
	store_close(b);
}

/* A wait that ignored its bound or the interrupt would wait for a writer
 * that never finishes: the test's timeout turns that hang into a failure,
 * so no assert bounds the time from above (the suite has .timeout). */
Test(store, writer_wait_is_bounded_and_interruptible)
{
	struct store *a = open_store(1ULL << 30), *b = open_store(1ULL << 30);
	struct store_writer *w;
	int r = store_begin(a, "http://h/X.tar", "", 3000, &w);
	struct waiter x = {.s = b};
	pthread_t t;

	cr_assert_eq(r, 0, "%s", strerror(-r));
	store_set_wait(b, 0.3);
	begin_thread(&x);
	cr_assert_null(x.w);
	cr_assert_eq(x.err, EBUSY, "errno %s", strerror(x.err));
	/* Never shorter than the wait set (a monotonic deadline). */
	cr_assert(x.took >= 0.29, "waited %.2f s", x.took);
	store_set_wait(b, 3600);
	pthread_create(&t, NULL, begin_thread, &x);
	nanosleep(&(struct timespec){0, 100000000L}, NULL);
	store_interrupt(b);
	pthread_join(t, NULL);
	cr_assert_null(x.w);
	cr_assert_eq(x.err, ECANCELED, "errno %s", strerror(x.err));
	/* The wait set is an hour: ECANCELED at all shows the interrupt ended
	 * it. */
	store_abort(w);
	/* The lock is free again: a writer of the entry goes ahead. */
	cr_assert_eq(store_begin(a, "http://h/X.tar", "", 3000, &w), 0);
	store_abort(w);
	store_close(a);
	store_close(b);
}

/* ---- another writer's partial file (store_peer_open) ---- */

/* A live writer's temp file is found by key and shows the bytes written so
 * far; nothing is found for another key, after the commit, or for a temp
 * file whose writer is gone. */
Test(store, peer_open_finds_live_writer_only)
{
	struct store *s = open_store(1ULL << 30);
	struct store_writer *w;
	int r = store_begin(s, "http://h/P.tar", "\"e\"", 5000, &w);
	uint8_t want[3000], got[3000];
	struct store_entry *e;
	char dead[128];
	int fd;

	cr_assert_eq(r, 0, "%s", strerror(-r));
	fill(want, sizeof(want), 7, 0);
	cr_assert_eq(store_write(w, want, sizeof(want)), 0);
	fd = store_peer_open(s, "http://h/P.tar", "\"e\"", 5000);
	cr_assert_geq(fd, 0, "live writer not found: %s", strerror(-fd));
	cr_assert_eq(pread(fd, got, sizeof(got), 0), (ssize_t)sizeof(got));
	cr_assert(memcmp(got, want, sizeof(got)) == 0);
	close(fd);
	cr_assert_eq(store_peer_open(s, "http://h/Q.tar", "\"e\"", 5000),
		     -ENOENT);
	fill(want, 2000, 7, 3000);
	cr_assert_eq(store_write(w, want, 2000), 0);
	cr_assert_eq(store_commit(w, &e), 0);
	store_put(e);
	cr_assert_eq(store_peer_open(s, "http://h/P.tar", "\"e\"", 5000),
		     -ENOENT);
	/* A temp file of that key nobody holds (its writer died). */
	snprintf(dead, sizeof(dead), "%s/shards/.tmp-%016" PRIx64 "-1-1-0",
		 tdir, store_key_hash("http://h/R.tar", "\"e\"", 5000));
	fd = open(dead, O_CREAT | O_WRONLY, 0600);
	cr_assert_geq(fd, 0);
	close(fd);
	cr_assert_eq(store_peer_open(s, "http://h/R.tar", "\"e\"", 5000),
		     -ENOENT);
	store_close(s);
}

/* ---- invalid entry files found by a lookup or a rescan ---- */

/* Between finding a file invalid and removing it, another process renames
 * a good entry over that name (its publish): the good file must stay. The
 * hook stands in for that process, at the point between the two steps. */
struct swap {
	char keep[512], path[512];
	int calls;
};

static void swap_in_good(void *ud, const char *name)
{
	struct swap *x = ud;
	(void)name;
	if (x->calls++ == 0)
		cr_assert_eq(rename(x->keep, x->path), 0);
}

static void write_garbage(const char *path, size_t n)
{
	FILE *f = fopen(path, "w");
	cr_assert_not_null(f);
	for (size_t i = 0; i < n; i++)
		fputc((int)(i * 7 % 251), f);
	cr_assert_eq(fclose(f), 0);
}

/* by_rescan: the invalid file is met by an admission's rescan; else by a
 * lookup of its key (store_get's discovery of another process's file). */
static void replaced_invalid_case(bool by_rescan)
{
	struct store *a = open_store(1ULL << 30), *b = open_store(1ULL << 30);
	struct swap x = {.calls = 0};
	struct store_entry *e;
	struct store_writer *w;
	struct stat good, now;

	/* b opened before the entry existed: only discovery or a rescan
	 * shows it the file. */
	add_put(a, "http://h/R.tar", 5000, 4);
	only_entry_path(x.path, sizeof(x.path));
	snprintf(x.keep, sizeof(x.keep), "%s/shards/good.keep", tdir);
	cr_assert_eq(rename(x.path, x.keep), 0);
	cr_assert_eq(stat(x.keep, &good), 0);
	write_garbage(x.path, 3000);
	store_debug_on_invalid(b, swap_in_good, &x);
	if (by_rescan) {
		cr_assert_eq(store_begin(b, "http://h/other", "", 10, &w), 0);
		store_abort(w);
	} else {
		cr_assert_null(store_get(b, "http://h/R.tar", "\"e\"", 5000));
	}
	cr_assert_eq(x.calls, 1, "the invalid file was not found");
	cr_assert_eq(stat(x.path, &now), 0,
		     "the good entry renamed over the invalid one was "
		     "unlinked");
	cr_assert(now.st_ino == good.st_ino && now.st_dev == good.st_dev);
	e = store_get(b, "http://h/R.tar", "\"e\"", 5000);
	cr_assert_not_null(e);
	check_range(e, 0, 5000, 4, 5000);
	store_put(e);
	store_close(a);
	store_close(b);
}

Test(store, invalid_file_replaced_meanwhile_is_kept_lookup)
{
	replaced_invalid_case(false);
}

Test(store, invalid_file_replaced_meanwhile_is_kept_rescan)
{
	replaced_invalid_case(true);
}

/* A rescan meets an invalid file while another thread drops a corrupt
 * entry: both count in the same statistic. The hook holds the rescan at the
 * moment it has found the file invalid until the other thread's drop is
 * done. The two threads meet through relaxed atomics, which order nothing
 * for ThreadSanitizer, so under tools/dev/tsan.sh a count made outside the
 * store's lock is a race report; everywhere, every invalid file and every
 * drop is counted exactly once. */
#define RACE_N 20

struct race {
	struct store_entry *e[RACE_N];
	atomic_int found, dropped;
};

static void hold_for_drop(void *ud, const char *name)
{
	struct race *x = ud;
	int k = atomic_load_explicit(&x->found, memory_order_relaxed) + 1;
	(void)name;
	atomic_store_explicit(&x->found, k, memory_order_relaxed);
	while (atomic_load_explicit(&x->dropped, memory_order_relaxed) < k)
		sched_yield();
}

static void *drop_thread(void *arg)
{
	struct race *x = arg;
	for (int i = 0; i < RACE_N; i++) {
		while (atomic_load_explicit(&x->found, memory_order_relaxed) <=
		       i)
			sched_yield();
		store_drop(x->e[i]);
		atomic_store_explicit(&x->dropped, i + 1, memory_order_relaxed);
	}
	return NULL;
}

Test(store, rescan_and_drop_count_corrupt_once_each)
{
	struct store *s = open_store(1ULL << 30);
	struct race x = {.found = 0, .dropped = 0};
	struct store_stats st;
	pthread_t t;

	for (int i = 0; i < RACE_N; i++) {
		char url[64];
		snprintf(url, sizeof(url), "http://h/drop%d", i);
		x.e[i] = add(s, url, "", 1000, (unsigned)i);
		cr_assert_not_null(x.e[i]);
	}
	store_debug_on_invalid(s, hold_for_drop, &x);
	pthread_create(&t, NULL, drop_thread, &x);
	for (int i = 0; i < RACE_N; i++) {
		char p[512], url[64];
		struct store_writer *w;
		snprintf(p, sizeof(p), "%s/shards/%016x.shard", tdir,
			 0xbad000 + i);
		write_garbage(p, 100 + (size_t)i);
		/* Files put there by hand are met by rescans; with no journal
		 * to say what changed, the admission rescans. */
		snprintf(p, sizeof(p), "%s/shards.journal", tdir);
		cr_assert_eq(unlink(p), 0);
		snprintf(url, sizeof(url), "http://h/new%d", i);
		cr_assert_eq(store_begin(s, url, "", 10, &w), 0);
		store_abort(w);
	}
	pthread_join(t, NULL);
	for (int i = 0; i < RACE_N; i++)
		store_put(x.e[i]);
	store_get_stats(s, &st);
	cr_assert_eq(st.corrupt, 2 * RACE_N, "corrupt %" PRIu64, st.corrupt);
	cr_assert_eq(count_files("0000000000bad"), 0);
	store_close(s);
}

/* The directory's fsync after the rename failing: the entry serves (its
 * bytes were synced), and the disk error is counted, not ignored. */
Test(store, directory_fsync_failure_is_counted)
{
	struct store *s = open_store(1ULL << 30);
	struct store_entry *e;
	struct store_stats st;

	fail_dir_fsync = 1;
	e = add(s, "http://h/F.tar", "\"e\"", 3000, 8);
	fail_dir_fsync = 0;
	cr_assert_not_null(e, "commit: %s", strerror(errno));
	check_range(e, 0, 3000, 8, 3000);
	store_put(e);
	store_get_stats(s, &st);
	cr_assert_eq(st.write_errors, 1, "write_errors %" PRIu64,
		     st.write_errors);
	cr_assert_eq(st.entries, 1);
	store_close(s);
}

/* Review store.c:819: publish's flock(LOCK_SH) was unchecked. Interrupted
 * (EINTR) the entry was left with no lock at all: other stores saw it
 * unpinned and could evict it under its reader. Now retried; a lasting
 * failure fails the commit and leaves no temp file. */
Test(store, commit_pin_survives_eintr)
{
	struct store *s = open_store(1 << 30);
	struct store_entry *e;
	uint64_t size;
	int fd, other;
	char path[600];

	flock_eintr = 2;
	e = add(s, "http://h/pin.tar", "\"e\"", 5000, 7);
	flock_eintr = 0;
	cr_assert_not_null(e, "commit: %s", strerror(errno));
	fd = store_entry_fd(e, &size);
	cr_assert_geq(fd, 0);
	snprintf(path, sizeof(path), "/proc/self/fd/%d", fd);
	other = open(path, O_RDONLY | O_CLOEXEC);
	cr_assert_geq(other, 0);
	cr_assert_neq(flock(other, LOCK_EX | LOCK_NB), 0,
		      "the committed entry is not pinned (no LOCK_SH)");
	close(other);
	store_put(e);
	store_close(s);
}

Test(store, commit_fails_cleanly_when_the_pin_cannot_be_taken)
{
	struct store *s = open_store(1 << 30);
	struct store_entry *e;

	flock_enolck = 1;
	e = add(s, "http://h/nolock.tar", "\"e\"", 5000, 7);
	flock_enolck = 0;
	cr_assert_null(e);
	cr_assert_eq(count_files(".tmp-"), 0);
	cr_assert_eq(count_files(""), 0);
	store_close(s);
}

/* The prepared tier's store (store_set_lazy): before, every admission
 * rescanned the directory (a stat per entry: 2 million for a pass of
 * 2,000 samples, the tier's first pass 0.13 of a mount without it) and
 * every commit made two fsyncs. Lazy: no fsync, and the cap still holds.
 * A durable store here: two fsyncs a commit. Neither rescans at an
 * admission since the journal (issue 50). */
static void lazy_case(bool lazy, uint64_t cap, int n, struct store_stats *st,
		      int *syncs)
{
	struct store *s = open_store(cap);
	char url[64];

	if (lazy)
		store_set_lazy(s, 1000);
	atomic_store(&fsyncs, 0);
	for (int i = 0; i < n; i++) {
		snprintf(url, sizeof(url), "http://h/%s-%d",
			 lazy ? "lazy" : "durable", i);
		struct store_entry *e = add(s, url, "\"e\"", 3000, (uint8_t)i);
		cr_assert_not_null(e, "commit %d: %s", i, strerror(errno));
		check_range(e, 0, 3000, (uint8_t)i, 3000);
		store_put(e);
	}
	*syncs = atomic_load(&fsyncs);
	store_get_stats(s, st);
	store_close(s);
}

Test(store, a_lazy_store_admits_without_rescans_or_fsyncs)
{
	struct store_stats lazy, durable;
	int lazy_syncs, durable_syncs;

	lazy_case(true, 1ULL << 30, 40, &lazy, &lazy_syncs);
	cr_assert_eq(lazy.entries, 40);
	cr_assert_leq(lazy.rescans, 2, "%" PRIu64 " rescans", lazy.rescans);
	cr_assert_eq(lazy_syncs, 0);
	lazy_case(false, 1ULL << 30, 40, &durable, &durable_syncs);
	cr_assert_leq(durable.rescans, 2, "%" PRIu64 " rescans",
		      durable.rescans);
	cr_assert_geq(durable_syncs, 80);
}

Test(store, a_lazy_store_keeps_its_cap)
{
	struct store_stats st;
	int syncs;

	/* Room for about 10 entries of 3,000 bytes and their footers. */
	lazy_case(true, 10 * 3200, 30, &st, &syncs);
	cr_assert_leq(st.bytes, st.cap, "%" PRIu64 " > %" PRIu64, st.bytes,
		      st.cap);
	cr_assert_geq(st.evictions, 20);
}

/* ---- the cache's directories (issue 50) ---- */

/* A lock file's holder unlinks it before letting go, and the next writer
 * of the entry makes and locks a new one under the name. The start-up
 * sweep that opened the old file and then gets its lock must not unlink
 * the name: it is the live writer's lock now. */
static char sweep_lock[256];
static int live_lock = -1;

static void new_writer_takes_the_name(int fd)
{
	char tmp[300];
	(void)fd;
	snprintf(tmp, sizeof(tmp), "%s.new", sweep_lock);
	live_lock = open(tmp, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
	cr_assert_geq(live_lock, 0);
	cr_assert_eq(__real_flock(live_lock, LOCK_EX | LOCK_NB), 0);
	cr_assert_eq(rename(tmp, sweep_lock), 0);
}

Test(store, sweep_keeps_a_lock_file_a_new_writer_holds)
{
	struct store *s = open_store(1ULL << 30);
	int fd;

	store_close(s);
	snprintf(sweep_lock, sizeof(sweep_lock),
		 "%s/shards/0123456789abcdef.lock", tdir);
	fd = open(sweep_lock, O_RDWR | O_CREAT, 0600); /* a dead writer's */
	cr_assert_geq(fd, 0);
	close(fd);
	before_nb_lock = new_writer_takes_the_name;
	s = open_store(1ULL << 30);
	cr_assert_geq(live_lock, 0, "the sweep never probed the lock file");
	cr_assert_eq(access(sweep_lock, F_OK), 0,
		     "the sweep unlinked a live writer's lock file");
	close(live_lock);
	store_close(s);
}

/* The cache directory recreated under its path while a store is open: the
 * store keeps using the directory it opened, for temp and lock files as
 * for entries. */
Test(store, a_recreated_directory_is_not_used)
{
	struct store *s = open_store(1ULL << 30);
	char path[256], moved[256];
	struct store_writer *w;
	struct store_entry *e;
	uint8_t buf[3000];

	snprintf(path, sizeof(path), "%s/shards", tdir);
	snprintf(moved, sizeof(moved), "%s/moved", tdir);
	cr_assert_eq(rename(path, moved), 0);
	cr_assert_eq(mkdir(path, 0700), 0);
	cr_assert_eq(store_begin(s, "http://h/D.tar", "", 3000, &w), 0);
	cr_assert_eq(count_files_in("moved", ".tmp-"), 1,
		     "the temp file is not beside the entries");
	cr_assert_eq(count_files_in("shards", ""), 0,
		     "a file went to the new directory");
	fill(buf, sizeof(buf), 3, 0);
	cr_assert_eq(store_write(w, buf, sizeof(buf)), 0);
	cr_assert_eq(store_commit(w, &e), 0);
	store_put(e);
	cr_assert_eq(count_files_in("moved", ""), 1);
	cr_assert_eq(count_files_in("shards", ""), 0);
	store_close(s);
}

/* A reader waiting for another mount's fetch looks for its temp file every
 * 50 ms: each look must cost the same however big the cache is, so it
 * must not read the directory. */
Test(store, peer_open_does_not_read_the_directory)
{
	struct store *s = open_store(1ULL << 30);
	struct store_writer *w;
	int in, fd, reads;

	for (unsigned i = 0; i < 20; i++) {
		char url[64];
		snprintf(url, sizeof(url), "http://h/%u.tar", i);
		add_put(s, url, 1000, i);
	}
	cr_assert_eq(store_begin(s, "http://h/P.tar", "", 3000, &w), 0);
	in = dir_reads_watch();
	for (int i = 0; i < 10; i++) {
		fd = store_peer_open(s, "http://h/P.tar", "", 3000);
		cr_assert_geq(fd, 0, "live writer not found: %s",
			      strerror(-fd));
		close(fd);
	}
	reads = dir_reads(in);
	cr_assert_eq(reads, 0, "10 looks read the directory (%d events)",
		     reads);
	close(in);
	store_abort(w);
	store_close(s);
}
