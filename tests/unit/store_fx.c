/* store_fx.c - what the store suites (test_store.c, test_store_evict.c)
 * share: a scratch directory per test, entries of known bytes, and looks at
 * the shards directory. */
#include "store_fx.h"

#include "cache/store/store.h"

#include "common/util.h"
#include "fetch/format/index.h"

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
#include <sys/inotify.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <unistd.h>

char tdir[64];

static int rm_cb(const char *p, const struct stat *sb, int flag,
		 struct FTW *ftw)
{
	(void)sb;
	(void)flag;
	(void)ftw;
	return remove(p);
}

void store_fx_setup(void)
{
	snprintf(tdir, sizeof(tdir), "/tmp/echofs-store-XXXXXX");
	cr_assert_not_null(mkdtemp(tdir));
}

void store_fx_teardown(void)
{
	char m[128];
	/* A failed tmpfs test may leave its mount behind. */
	snprintf(m, sizeof(m), "%s/m", tdir);
	umount2(m, MNT_DETACH);
	nftw(tdir, rm_cb, 16, FTW_DEPTH | FTW_PHYS);
}

uint8_t pat(unsigned seed, uint64_t i)
{
	uint64_t x = (i + 1) * 0x9E3779B97F4A7C15ULL ^
		     (seed * 0xBF58476D1CE4E5B9ULL);
	x ^= x >> 29;
	return (uint8_t)(x ^ (x >> 17));
}

void fill(uint8_t *b, size_t n, unsigned seed, uint64_t off)
{
	for (size_t i = 0; i < n; i++)
		b[i] = pat(seed, off + i);
}

/* Write a whole entry in uneven chunks; returns it pinned. */
struct store_entry *add(struct store *s, const char *url, const char *etag,
			uint64_t size, unsigned seed)
{
	struct store_writer *w;
	struct store_entry *e;
	uint8_t *buf;
	uint64_t off = 0;
	int r = store_begin(s, url, etag, size, &w);

	if (r) {
		cr_assert_null(w);
		errno = -r; /* for the callers' messages */
		return NULL;
	}
	buf = malloc(300001);
	cr_assert_not_null(buf);
	while (off < size) {
		size_t n = (size_t)(size - off < 300001 ? size - off : 300001);
		fill(buf, n, seed, off);
		cr_assert_eq(store_write(w, buf, n), 0);
		off += n;
		cr_assert_eq(store_written(w), off);
	}
	free(buf);
	r = store_commit(w, &e);
	errno = -r;
	return e;
}

void add_put(struct store *s, const char *url, uint64_t size, unsigned seed)
{
	struct store_entry *e = add(s, url, "\"e\"", size, seed);
	cr_assert_not_null(e, "add %s: %s", url, strerror(errno));
	store_put(e);
}

void check_range(struct store_entry *e, uint64_t off, size_t len, unsigned seed,
		 ssize_t want)
{
	uint8_t *got = malloc(len + 1), *exp = malloc(len + 1);
	ssize_t r;

	cr_assert(got && exp);
	r = store_pread(e, got, len, off);
	cr_assert_eq(r, want, "pread off %llu len %zu: %zd want %zd",
		     (unsigned long long)off, len, r, want);
	if (r > 0) {
		fill(exp, (size_t)r, seed, off);
		cr_assert(memcmp(got, exp, (size_t)r) == 0, "bytes differ");
	}
	free(got);
	free(exp);
}

/* Lookups count as uses at once here (the tests run in microseconds). */
struct store *open_store(uint64_t cap)
{
	char err[256] = "";
	struct store *s;
	cr_assert_eq(store_open(tdir, cap, &s, err, sizeof(err)), 0);
	cr_assert_not_null(s, "store_open: %s", err);
	store_set_reuse_gap(s, 0);
	return s;
}

size_t count_files(const char *prefix)
{
	return count_files_in("shards", prefix);
}

size_t count_files_in(const char *sub, const char *prefix)
{
	char p[128];
	size_t n = 0;
	struct dirent *d;
	DIR *dir;

	snprintf(p, sizeof(p), "%s/%s", tdir, sub);
	dir = opendir(p);
	cr_assert_not_null(dir);
	while ((d = readdir(dir)) != NULL)
		if (strncmp(d->d_name, prefix, strlen(prefix)) == 0 &&
		    strcmp(d->d_name, ".") != 0 && strcmp(d->d_name, "..") != 0)
			n++;
	closedir(dir);
	return n;
}

/* The path of the only entry file in the store. */
void only_entry_path(char *out, size_t outlen)
{
	char p[128];
	struct dirent *d;
	DIR *dir;

	snprintf(p, sizeof(p), "%s/shards", tdir);
	dir = opendir(p);
	cr_assert_not_null(dir);
	out[0] = '\0';
	while ((d = readdir(dir)) != NULL)
		if (strstr(d->d_name, ".shard"))
			snprintf(out, outlen, "%s/%s", p, d->d_name);
	closedir(dir);
	cr_assert(out[0], "no entry file");
}

int dir_reads_watch(void)
{
	char path[128];
	int in = inotify_init1(IN_NONBLOCK | IN_CLOEXEC);
	DIR *d;

	snprintf(path, sizeof(path), "%s/shards", tdir);
	cr_assert_geq(in, 0);
	cr_assert_geq(inotify_add_watch(in, path, IN_ACCESS), 0);
	d = opendir(path); /* the watch sees directory reads */
	cr_assert_not_null(d);
	while (readdir(d))
		;
	closedir(d);
	cr_assert_gt(dir_reads(in), 0, "no IN_ACCESS for a readdir here");
	return in;
}

int dir_reads(int in)
{
	char ev[4096] __attribute__((aligned(8)));
	int n = 0;
	ssize_t len;

	while ((len = read(in, ev, sizeof(ev))) > 0)
		for (char *p = ev; p < ev + len;) {
			struct inotify_event *e = (struct inotify_event *)p;
			n += e->len == 0 && (e->mask & IN_ACCESS);
			p += sizeof(*e) + e->len;
		}
	return n;
}
