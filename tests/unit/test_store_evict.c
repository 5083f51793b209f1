/* test_store_evict.c - the on-disk shard store's eviction and accounting
 * (cache/store/store_evict.c): the order under the cap, pins, the readers'
 * "needed" hint, the shared cap across stores, store_fits's running sum. */
#include "cache/store/store.h"

#include "cache/store/shards.h"
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
#include <sys/mount.h>
#include <sys/stat.h>
#include <unistd.h>

/* Make unlink of an entry fail (linked with --wrap=unlinkat, see
 * tests/meson.build): a file that stays must not count as evicted. */
int __real_unlinkat(int dirfd, const char *path, int flags);
int __wrap_unlinkat(int dirfd, const char *path, int flags);
static int fail_unlink;

int __wrap_unlinkat(int dirfd, const char *path, int flags)
{
	if (fail_unlink && strstr(path, ".shard")) {
		errno = EPERM;
		return -1;
	}
	return __real_unlinkat(dirfd, path, flags);
}

TestSuite(store_evict, .init = store_fx_setup, .fini = store_fx_teardown,
	  .timeout = 60);

/* Eviction order: ops are letters; upper case adds an entry, lower case
 * reads it (a use, which protects it). The cap holds `fit` entries; `left`
 * lists the survivors. Entries never used again go newest first, except the
 * two newest of all, which go last of them; used ones least recently used
 * first, after the others, but first while they fill over 3/4 of the cap. */
struct lru_case {
	unsigned fit;
	const char *ops;
	const char *left;
	unsigned evictions;
};

static const struct lru_case lru_cases[] = {
	{3, "ABC", "ABC", 0},	     {3, "ABCD", "BCD", 1},
	{3, "ABCaD", "ACD", 1},	     {3, "ABCbaDE", "ABE", 2},
	{2, "ABcCD", "CD", 2},	     {1, "ABCD", "D", 3},
	{4, "ABCDdcbaE", "ABCE", 1}, {2, "ABabCDdEF", "DF", 4},
	{5, "ABCDEF", "ABDEF", 1},   {5, "ABCDEFG", "ABEFG", 2},
};

static void url_of(char c, char *url, size_t n)
{
	snprintf(url, n, "http://h/%c.tar", c & ~0x20);
}

static void run_lru_case(const struct lru_case *c, uint64_t unit)
{
	struct store *s = open_store(unit * c->fit + unit / 2);
	struct store_stats st;
	char url[64];

	for (const char *p = c->ops; *p; p++) {
		url_of(*p, url, sizeof(url));
		if (*p >= 'A' && *p <= 'Z') {
			add_put(s, url, 1000, (unsigned)*p);
		} else {
			struct store_entry *e =
				store_get(s, url, "\"e\"", 1000);
			if (e)
				store_put(e);
		}
		store_get_stats(s, &st);
		cr_assert_leq(st.bytes, st.cap);
		cr_assert_eq(st.bytes, st.entries * unit);
	}
	for (char ch = 'A'; ch <= 'Z'; ch++) {
		struct store_entry *e;
		url_of(ch, url, sizeof(url));
		e = store_get(s, url, "\"e\"", 1000);
		cr_assert_eq(e != NULL, strchr(c->left, ch) != NULL,
			     "case %s: %c present=%d", c->ops, ch, e != NULL);
		store_put(e);
	}
	store_get_stats(s, &st);
	cr_assert_eq(st.evictions, c->evictions, "case %s: evictions %llu",
		     c->ops, (unsigned long long)st.evictions);
	cr_assert_eq(st.entries, strlen(c->left));
	cr_assert_eq(count_files(""), strlen(c->left));
	store_close(s);
}

Test(store_evict, lru_eviction_table)
{
	struct store *s = open_store(1ULL << 30);
	struct store_stats st;
	uint64_t unit;

	/* One entry's size on disk: data plus footer. */
	add_put(s, "http://h/Z.tar", 1000, 1);
	store_get_stats(s, &st);
	unit = st.bytes;
	cr_assert_gt(unit, 1000);
	store_close(s);
	for (size_t i = 0; i < sizeof(lru_cases) / sizeof(lru_cases[0]); i++) {
		store_fx_teardown();
		store_fx_setup();
		run_lru_case(&lru_cases[i], unit);
	}
}

/* Set the times of the entry file holding url (found by the key in its
 * footer): atime records when it was written, mtime its last use. */
static void set_times_of(const char *url, time_t written, time_t used)
{
	char path[128], fp[512];
	struct dirent *d;
	DIR *dir;
	int found = 0;

	snprintf(path, sizeof(path), "%s/shards", tdir);
	dir = opendir(path);
	cr_assert_not_null(dir);
	while ((d = readdir(dir)) != NULL) {
		char blob[4096];
		ssize_t n;
		int fd;
		if (!strstr(d->d_name, ".shard"))
			continue;
		snprintf(fp, sizeof(fp), "%s/%s", path, d->d_name);
		/* O_NOATIME: reading must not move the times set so far. */
		fd = open(fp, O_RDONLY | O_NOATIME);
		cr_assert_geq(fd, 0);
		n = read(fd, blob, sizeof(blob));
		close(fd);
		cr_assert_gt(n, 0);
		if (memmem(blob, (size_t)n, url, strlen(url))) {
			struct timespec ts[2] = {{written, 0}, {used, 0}};
			cr_assert_eq(utimensat(AT_FDCWD, fp, ts, 0), 0);
			found = 1;
		}
	}
	closedir(dir);
	cr_assert(found, "no file for %s", url);
}

Test(store_evict, reopen_keeps_eviction_order)
{
	struct store *s = open_store(1ULL << 30);
	struct store_stats st;
	uint64_t unit;

	for (char c = 'A'; c <= 'E'; c++) {
		char url[32];
		url_of(c, url, sizeof(url));
		add_put(s, url, 1000, (unsigned)c);
	}
	store_get_stats(s, &st);
	unit = st.bytes / 5;
	store_close(s);
	/* Written in the order E A B C D; only E was used again since. */
	set_times_of("http://h/A.tar", 1000, 1000);
	set_times_of("http://h/B.tar", 2000, 2000);
	set_times_of("http://h/C.tar", 3000, 3000);
	set_times_of("http://h/D.tar", 4000, 4000);
	set_times_of("http://h/E.tar", 500, 6000);
	/* Room for four: the newest unused one but the two newest (C, D)
	 * goes: B. */
	s = open_store(4 * unit + unit / 2);
	store_get_stats(s, &st);
	cr_assert_eq(st.entries, 4);
	cr_assert_eq(st.evictions, 1);
	cr_assert_not(store_contains(s, "http://h/B.tar", "\"e\"", 1000));
	/* Adding F evicts A, never used again, not the used E. */
	add_put(s, "http://h/F.tar", 1000, 6);
	cr_assert_not(store_contains(s, "http://h/A.tar", "\"e\"", 1000));
	for (char c = 'C'; c <= 'F'; c++) {
		char url[32];
		url_of(c, url, sizeof(url));
		cr_assert(store_contains(s, url, "\"e\"", 1000), "%c gone", c);
	}
	store_close(s);
}

Test(store_evict, pinned_never_evicted)
{
	struct store *s = open_store(1ULL << 30);
	struct store_entry *a, *b;
	struct store_stats st;
	struct store_writer *w;
	uint64_t unit;

	add_put(s, "http://h/Z.tar", 1000, 1);
	store_get_stats(s, &st);
	unit = st.bytes;
	store_close(s);
	store_fx_teardown();
	store_fx_setup();
	s = open_store(2 * unit + 10);
	a = add(s, "http://h/A.tar", "\"e\"", 1000, 'A');
	cr_assert_not_null(a);
	for (char c = 'B'; c <= 'F'; c++) {
		char url[32];
		url_of(c, url, sizeof(url));
		add_put(s, url, 1000, (unsigned)c);
	}
	check_range(a, 0, 1000, 'A', 1000);
	b = store_get(s, "http://h/F.tar", "\"e\"", 1000);
	cr_assert_not_null(b);
	/* Both pinned, cap full: nothing can be written. */
	cr_assert_eq(store_begin(s, "http://h/G.tar", "", 1000, &w), -ENOSPC);
	cr_assert_null(w);
	store_put(b);
	add_put(s, "http://h/G.tar", 1000, 'G');
	cr_assert_null(store_get(s, "http://h/F.tar", "\"e\"", 1000));
	check_range(a, 0, 1000, 'A', 1000);
	store_put(a);
	store_get_stats(s, &st);
	cr_assert_eq(st.entries, 2);
	cr_assert_eq(st.write_errors, 0);
	store_close(s);
}

Test(store_evict, larger_than_cap_refused)
{
	struct store_writer *w;
	struct store *s = open_store(4096);
	struct store_stats st;
	cr_assert_eq(store_begin(s, "http://h/big", "", 5000, &w), -ENOSPC);
	cr_assert_null(w);
	store_get_stats(s, &st);
	cr_assert_eq(st.write_errors, 0);
	cr_assert_eq(count_files(".tmp-"), 0);
	store_close(s);
}

/* ---- side effects, a cap shared by stores, sweeps ---- */

/* One entry's size on disk (data plus footer) for `size` data bytes. */
static uint64_t unit_of(uint64_t size)
{
	struct store *s = open_store(1ULL << 30);
	struct store_stats st;
	add_put(s, "http://h/Z.tar", size, 1);
	store_get_stats(s, &st);
	store_close(s);
	store_fx_teardown();
	store_fx_setup();
	return st.bytes;
}

static const char *const abc[] = {"http://h/A.tar", "http://h/B.tar",
				  "http://h/C.tar"};

/* Closes s and ix, and leaves a new empty store directory for the next
 * case. */
static void close_fresh(struct store *s, struct index *ix)
{
	store_close(s);
	index_free(ix);
	store_fx_teardown();
	store_fx_setup();
}

/* A shards layer over ix and s, with its HTTP client in *h (nothing is
 * fetched: every shard asked about is in s or answered from it). */
static struct shards *shards_over(struct index *ix, struct store *s,
				  struct http **h)
{
	char err[256] = "";
	struct http_opts ho = {.connections = 1};
	struct shards_opts so = {.workers = 1};
	struct shards *sh;

	cr_assert_eq(http_open(&ho, h, err, sizeof(err)), 0, "http_open: %s",
		     err);
	cr_assert_eq(shards_open(ix, *h, s, &so, &sh), 0);
	cr_assert_not_null(sh);
	return sh;
}

/* Which of A, B, C is gone after D is added to a store that holds three,
 * A being the most recently used. With `stats`, the shard statistics are
 * read first, the way .echofs/stats renders them (shards_is_cached). */
static char victim_after(bool stats, uint64_t unit)
{
	struct store *s = open_store(3 * unit + unit / 2);
	struct index *ix = index_new();
	char gone = 0;

	for (int i = 0; i < 3; i++) {
		index_add_shard(ix, abc[i], 1000, "\"e\"");
		add_put(s, abc[i], 1000, (unsigned)i);
	}
	store_put(store_get(s, abc[0], "\"e\"", 1000));
	if (stats) {
		struct http *h;
		struct shards *sh = shards_over(ix, s, &h);
		for (uint32_t i = 0; i < 3; i++)
			cr_assert_eq(shards_is_cached(sh, i), 1);
		shards_free(sh);
		http_free(h);
	}
	add_put(s, "http://h/D.tar", 1000, 4);
	for (int i = 0; i < 3; i++) {
		struct store_entry *e = store_get(s, abc[i], "\"e\"", 1000);
		if (!e)
			gone = (char)('A' + i);
		store_put(e);
	}
	close_fresh(s, ix);
	return gone;
}

Test(store_evict, stats_read_leaves_eviction_alone)
{
	uint64_t unit = unit_of(1000);
	char plain = victim_after(false, unit);
	char read = victim_after(true, unit);

	cr_assert_neq(plain, 0, "nothing evicted");
	cr_assert_eq(read, plain,
		     "reading the stats made %c the victim instead of %c", read,
		     plain);
}

Test(store_evict, contains_touches_nothing)
{
	struct store *s = open_store(1ULL << 30);
	struct store_entry *e;
	struct stat a, b;
	char path[512];

	add_put(s, "http://h/A.tar", 1000, 1);
	only_entry_path(path, sizeof(path));
	cr_assert_eq(stat(path, &a), 0);
	nanosleep(&(struct timespec){0, 20000000L}, NULL);
	cr_assert_eq(store_contains(s, "http://h/A.tar", "\"e\"", 1000), 1);
	cr_assert_eq(store_contains(s, "http://h/A.tar", "\"f\"", 1000), 0);
	cr_assert_eq(store_contains(s, "http://h/B.tar", "\"e\"", 1000), 0);
	cr_assert_eq(stat(path, &b), 0);
	cr_assert(a.st_mtim.tv_sec == b.st_mtim.tv_sec &&
			  a.st_mtim.tv_nsec == b.st_mtim.tv_nsec,
		  "mtime moved");
	cr_assert(a.st_atim.tv_sec == b.st_atim.tv_sec &&
			  a.st_atim.tv_nsec == b.st_atim.tv_nsec,
		  "atime moved");
	/* A dropped (corrupt) entry is not contained, though its file is
	 * still there while pinned. */
	e = store_get(s, "http://h/A.tar", "\"e\"", 1000);
	store_drop(e);
	cr_assert_eq(store_contains(s, "http://h/A.tar", "\"e\"", 1000), 0);
	store_put(e);
	cr_assert_eq(store_contains(NULL, "http://h/A.tar", "\"e\"", 1000), 0);
	store_close(s);
}

/* Bytes of entry and temp files in the shards directory. */
static uint64_t dir_bytes(void)
{
	char p[128], fp[512];
	struct dirent *d;
	struct stat sb;
	uint64_t n = 0;
	DIR *dir;

	snprintf(p, sizeof(p), "%s/shards", tdir);
	dir = opendir(p);
	cr_assert_not_null(dir);
	while ((d = readdir(dir)) != NULL) {
		snprintf(fp, sizeof(fp), "%s/%s", p, d->d_name);
		if (stat(fp, &sb) == 0 && S_ISREG(sb.st_mode))
			n += (uint64_t)sb.st_size;
	}
	closedir(dir);
	return n;
}

Test(store_evict, cap_kept_across_stores)
{
	uint64_t unit = unit_of(1000), cap = 3 * unit + unit / 2;
	struct store *a = open_store(cap), *b = open_store(cap);
	const char *who = "aabbabab";

	for (int i = 0; i < 8; i++) {
		char url[32];
		snprintf(url, sizeof(url), "http://h/%d.tar", i);
		add_put(who[i] == 'a' ? a : b, url, 1000, (unsigned)i);
		cr_assert_leq(dir_bytes(), cap,
			      "after %d: %" PRIu64 " > cap %" PRIu64, i,
			      dir_bytes(), cap);
	}
	cr_assert_eq(count_files(""), 3);
	store_close(a);
	store_close(b);
}

Test(store_evict, eviction_spares_entry_pinned_by_other_store)
{
	uint64_t unit = unit_of(1000);
	struct store *a = open_store(2 * unit + unit / 2), *b, *c;
	struct store_entry *pa;

	add_put(a, "http://h/A.tar", 1000, 1);
	add_put(a, "http://h/B.tar", 1000, 2);
	b = open_store(2 * unit + unit / 2);
	/* B used again; A, pinned by a, is b's first choice to evict. */
	store_put(store_get(a, "http://h/B.tar", "\"e\"", 1000));
	pa = store_get(a, "http://h/A.tar", "\"e\"", 1000);
	cr_assert_not_null(pa);
	add_put(b, "http://h/C.tar", 1000, 3);
	check_range(pa, 0, 1000, 1, 1000);
	store_put(pa);
	c = open_store(1ULL << 30);
	cr_assert(store_contains(c, "http://h/A.tar", "\"e\"", 1000),
		  "an entry pinned by another store was evicted");
	cr_assert(store_contains(c, "http://h/C.tar", "\"e\"", 1000));
	cr_assert_not(store_contains(c, "http://h/B.tar", "\"e\"", 1000));
	store_close(c);
	store_close(b);
	store_close(a);
}

/* Entries "http://h/m<i>.tar" for i in [from, to), added by s. */
static void fill_store(struct store *s, int from, int to)
{
	for (int i = from; i < to; i++) {
		char url[32];
		snprintf(url, sizeof(url), "http://h/m%d.tar", i);
		add_put(s, url, 1000, (unsigned)i);
	}
}

static uint64_t rescans_of(struct store *a, struct store *b)
{
	struct store_stats x, y;
	store_get_stats(a, &x);
	store_get_stats(b, &y);
	return x.rescans + y.rescans;
}

/* Admit 8 entries, alternately by stores a and b of one directory (each
 * admission must count what the other did), each checked against the
 * cap. Returns the directory reads meanwhile; *rescans, theirs. */
static int reads_admitting(struct store *a, struct store *b, int from,
			   uint64_t cap, uint64_t *rescans)
{
	uint64_t r0 = rescans_of(a, b);
	int in = dir_reads_watch(), reads = 0;

	for (int i = from; i < from + 8; i++) {
		char url[32];
		snprintf(url, sizeof(url), "http://h/n%d.tar", i);
		add_put(i % 2 ? b : a, url, 1000, (unsigned)i);
		reads += dir_reads(in);
		cr_assert_leq(dir_bytes(), cap,
			      "after %d: %" PRIu64 " > %" PRIu64, i,
			      dir_bytes(), cap);
		dir_reads(in); /* dir_bytes's own */
	}
	close(in);
	*rescans = rescans_of(a, b) - r0;
	return reads;
}

/* Issue 50: every admission rescanned the directory under its lock (a
 * readdir and a stat per entry): CPU that grew with the cache. Admitting 8
 * entries into a cache of 4, then of 60 entries, by two stores sharing it,
 * must not read the directory at all. */
Test(store_evict, admission_reads_do_not_grow_with_the_cache)
{
	uint64_t cap = 1ULL << 30, small_rs, large_rs;
	struct store *a = open_store(cap), *b = open_store(cap);
	int small, large;

	fill_store(a, 0, 4);
	small = reads_admitting(a, b, 0, cap, &small_rs);
	fill_store(b, 4, 60);
	large = reads_admitting(a, b, 100, cap, &large_rs);
	cr_assert_leq(large, small,
		      "%d directory reads with 60 entries, %d "
		      "with 4",
		      large, small);
	cr_assert_eq(small + large, 0,
		     "admissions read the directory (%d "
		     "times with 4 entries, %d with 60; %" PRIu64
		     " and %" PRIu64 " rescans)",
		     small, large, small_rs, large_rs);
	cr_assert_eq(small_rs + large_rs, 0);
	store_close(b);
	store_close(a);
}

/* The same under a full cap: every admission evicts one of the 60 entries
 * (the other store's too), still without reading the directory, and the
 * cap holds after each. */
Test(store_evict, admission_under_a_full_cap_reads_no_directory)
{
	uint64_t unit = unit_of(1000), cap = 60 * unit + unit / 2, rs;
	struct store *a = open_store(cap), *b = open_store(cap);
	struct store_stats sa, sb;
	int reads;

	fill_store(a, 0, 30);
	fill_store(b, 30, 60);
	reads = reads_admitting(a, b, 0, cap, &rs);
	store_get_stats(a, &sa);
	store_get_stats(b, &sb);
	cr_assert_eq(reads, 0, "%d directory reads, %" PRIu64 " rescans", reads,
		     rs);
	cr_assert_eq(sa.evictions + sb.evictions, 8);
	cr_assert_eq(count_files(""), 60);
	store_close(b);
	store_close(a);
}

/* A journal that cannot say what changed (a crash of the machine tore a
 * write, someone removed it): the next admission of each store rescans
 * once, counts what the other added meanwhile (the cap holds), and the
 * journal is trusted again after that. {offset, length} of the garbage
 * written over it; length 0: removed. */
static const struct {
	off_t off;
	size_t len;
} jnl_damage[] = {{0, 24}, {128, 2048 * 128}, {0, 0}};

Test(store_evict, a_journal_that_cannot_say_makes_admission_rescan)
{
	uint64_t unit = unit_of(1000), cap = 4 * unit + unit / 2;
	struct store *a = open_store(cap), *b = open_store(cap);
	char jp[128], junk[4096];
	int n = 0;

	snprintf(jp, sizeof(jp), "%s/shards.journal", tdir);
	memset(junk, 0xa5, sizeof(junk));
	for (size_t d = 0; d < sizeof(jnl_damage) / sizeof(*jnl_damage); d++) {
		struct store_stats s0, s1, s2;
		int fd = open(jp, O_WRONLY);
		cr_assert_geq(fd, 0);
		fill_store(b, n, n + 2);
		n += 2;
		for (size_t o = 0; o < jnl_damage[d].len; o += sizeof(junk))
			cr_assert_eq(pwrite(fd, junk,
					    sizeof(junk) < jnl_damage[d].len - o
						    ? sizeof(junk)
						    : jnl_damage[d].len - o,
					    jnl_damage[d].off + (off_t)o) > 0,
				     1);
		close(fd);
		if (!jnl_damage[d].len)
			cr_assert_eq(unlink(jp), 0);
		store_get_stats(a, &s0);
		fill_store(a, n, n + 1);
		store_get_stats(a, &s1);
		fill_store(a, n + 1, n + 2);
		store_get_stats(a, &s2);
		n += 2;
		cr_assert_eq(s1.rescans, s0.rescans + 1, "damage %zu", d);
		cr_assert_eq(s2.rescans, s1.rescans,
			     "damage %zu: the journal "
			     "was not trusted again",
			     d);
		cr_assert_leq(dir_bytes(), cap, "damage %zu", d);
		cr_assert_eq(count_files(""), 4, "damage %zu", d);
	}
	store_close(b);
	store_close(a);
}

/* Two passes over 8 entries through a store that holds 6: plain LRU hits
 * nothing in the second pass; keeping part of the sweep hits that part. */
Test(store_evict, sweep_larger_than_cap_keeps_part)
{
	uint64_t unit = unit_of(1000);
	struct store *s = open_store(6 * unit + unit / 2);
	unsigned hits = 0;

	for (int pass = 0; pass < 2; pass++)
		for (int i = 0; i < 8; i++) {
			char url[32];
			struct store_entry *e;
			snprintf(url, sizeof(url), "http://h/%d.tar", i);
			e = store_get(s, url, "\"e\"", 1000);
			if (e && pass == 1)
				hits++;
			if (e)
				store_put(e);
			else
				add_put(s, url, 1000, (unsigned)i);
		}
	cr_assert_geq(hits, 2, "second pass hit %u of 8", hits);
	store_close(s);
}

/* A lookup right after an entry was written (the reader of that very fetch
 * coming back) is no use again: it does not protect the entry. */
Test(store_evict, lookup_soon_after_write_does_not_protect)
{
	uint64_t unit = unit_of(1000);
	struct store *s = open_store(3 * unit + unit / 2);

	store_set_reuse_gap(s, 1.0);
	for (int i = 0; i < 3; i++)
		add_put(s, abc[i], 1000, (unsigned)i);
	store_put(store_get(s, abc[0], "\"e\"", 1000));
	add_put(s, "http://h/D.tar", 1000, 4);
	/* Never used again, older than the two newest: A goes. */
	cr_assert_not(store_contains(s, abc[0], "\"e\"", 1000));
	cr_assert(store_contains(s, abc[1], "\"e\"", 1000));
	cr_assert(store_contains(s, abc[2], "\"e\"", 1000));
	store_close(s);
}

/* ---- the reader's "needed" hint (store_set_needed) ---- */

static uint64_t needed_hash[4];
static int n_needed;

static int is_needed(void *ud, uint64_t hash)
{
	(void)ud;
	for (int i = 0; i < n_needed; i++)
		if (needed_hash[i] == hash)
			return 1;
	return 0;
}

static void need(const char *url)
{
	needed_hash[n_needed++] = store_key_hash(url, "\"e\"", 1000);
}

/* A, B, C in a store of three, B used again: without a hint A would go
 * (test above); with A and C needed, B goes instead, whatever the order. */
Test(store_evict, needed_entries_evicted_last)
{
	uint64_t unit = unit_of(1000);
	struct store *s = open_store(3 * unit + unit / 2);

	for (int i = 0; i < 3; i++)
		add_put(s, abc[i], 1000, (unsigned)i);
	store_put(store_get(s, abc[1], "\"e\"", 1000));
	n_needed = 0;
	need(abc[0]);
	need(abc[2]);
	store_set_needed(s, is_needed, NULL);
	cr_assert(store_fits(s, 1000));
	add_put(s, "http://h/D.tar", 1000, 4);
	cr_assert(store_contains(s, abc[0], "\"e\"", 1000), "needed A evicted");
	cr_assert_not(store_contains(s, abc[1], "\"e\"", 1000));
	cr_assert(store_contains(s, abc[2], "\"e\"", 1000), "needed C evicted");
	store_set_needed(s, NULL, NULL);
	store_close(s);
}

/* When only needed entries could make room, a new entry is refused with
 * EDQUOT and nothing is evicted; once one is no longer needed it goes. */
Test(store_evict, admission_refused_rather_than_evict_needed)
{
	uint64_t unit = unit_of(1000);
	struct store *s = open_store(3 * unit + unit / 2);
	struct store_stats st;
	struct store_writer *w;
	int r;

	for (int i = 0; i < 3; i++)
		add_put(s, abc[i], 1000, (unsigned)i);
	n_needed = 0;
	for (int i = 0; i < 3; i++)
		need(abc[i]);
	store_set_needed(s, is_needed, NULL);
	cr_assert_not(store_fits(s, 1000));
	/* Larger than the cap: not the hint's business; store_begin says. */
	cr_assert(store_fits(s, 4 * unit));
	r = store_begin(s, "http://h/D.tar", "\"e\"", 1000, &w);
	cr_assert_null(w, "admitted by evicting a needed entry");
	cr_assert_eq(r, -EDQUOT, "%s", strerror(-r));
	store_get_stats(s, &st);
	cr_assert_eq(st.evictions, 0);
	cr_assert_eq(st.write_errors, 0, "a policy refusal is no write error");
	for (int i = 0; i < 3; i++)
		cr_assert(store_contains(s, abc[i], "\"e\"", 1000));
	n_needed = 2; /* C is done with */
	cr_assert(store_fits(s, 1000));
	add_put(s, "http://h/D.tar", 1000, 4);
	cr_assert_not(store_contains(s, abc[2], "\"e\"", 1000));
	cr_assert(store_contains(s, abc[0], "\"e\"", 1000));
	cr_assert(store_contains(s, abc[1], "\"e\"", 1000));
	/* Without the hint the old policy applies again: room is made. */
	store_set_needed(s, NULL, NULL);
	add_put(s, "http://h/E.tar", 1000, 5);
	store_close(s);
}

/* ---- store_fits's running sum of live bytes ---- */

#define FS_URLS 10
#define FS_PINS 3

struct fits_run {
	struct store *s[2]; /* two stores on one directory: two processes */
	struct store_entry *pin[FS_PINS];
	uint64_t size[FS_URLS];
	bool needed[FS_URLS];
	unsigned seed;
	bool hint_on; /* store 0 has fs_needed as its hint */
	int walks[2]; /* answers only a walk gave: no, yes */
};

static struct fits_run fr;

static void fs_url(int i, char *url, size_t n)
{
	snprintf(url, n, "http://h/fits-%02d.tar", i);
}

static int fs_needed(void *ud, uint64_t hash)
{
	char url[64];
	(void)ud;
	for (int i = 0; i < FS_URLS; i++) {
		fs_url(i, url, sizeof(url));
		if (fr.needed[i] &&
		    store_key_hash(url, "\"e\"", fr.size[i]) == hash)
			return 1;
	}
	return 0;
}

/* The sum agrees with a walk, and store_fits with the walked answer, for
 * sizes from a sliver to more than the cap. */
static void fs_check(uint64_t unit, int step)
{
	const uint64_t sizes[] = {100,	1000,	  2000,	    3000,
				  unit, 2 * unit, 5 * unit, 9 * unit};
	for (int k = 0; k < 2; k++) {
		for (size_t j = 0; j < sizeof(sizes) / sizeof(sizes[0]); j++) {
			uint64_t sum, walk;
			int want, got = store_fits(fr.s[k], sizes[j]);
			store_debug_fits_walk(fr.s[k], sizes[j], &want, &sum,
					      &walk);
			cr_assert_eq(sum, walk,
				     "step %d store %d: sum %" PRIu64
				     " walk %" PRIu64,
				     step, k, sum, walk);
			cr_assert_eq(got, want,
				     "step %d store %d size %" PRIu64
				     ": fits %d, walk says %d",
				     step, k, sizes[j], got, want);
		}
	}
}

/* Counts the calls on store 0 that only the hint's walk could answer: full
 * store, hint set, live bytes enough to make room for 3000 bytes (2 units
 * above the need, clear of store_fits's footer guess). */
static void fs_count_walk(uint64_t unit, uint64_t cap)
{
	struct store_stats st;
	uint64_t sum, walk;
	int want;

	if (!fr.hint_on)
		return;
	store_get_stats(fr.s[0], &st);
	store_debug_fits_walk(fr.s[0], 3000, &want, &sum, &walk);
	if (st.bytes + unit <= cap || sum + cap < st.bytes + 2 * unit)
		return;
	fr.walks[want]++;
}

/* One random step: write (maybe over a pinned entry of that key, or
 * refused), pin, unpin, drop as corrupt, or change the hint. */
static void fs_step(void)
{
	int op = rand_r(&fr.seed) % 7, i = rand_r(&fr.seed) % FS_URLS;
	int k = rand_r(&fr.seed) % 2, p = rand_r(&fr.seed) % FS_PINS;
	char url[64];
	struct store_entry *e;

	fs_url(i, url, sizeof(url));
	if (op <= 1) {
		e = add(fr.s[k], url, "\"e\"", fr.size[i], (unsigned)i);
		store_put(e);
	} else if (op == 2 && !fr.pin[p]) {
		fr.pin[p] = store_get(fr.s[k], url, "\"e\"", fr.size[i]);
	} else if (op == 3 && fr.pin[p]) {
		store_put(fr.pin[p]);
		fr.pin[p] = NULL;
	} else if (op == 4 && fr.pin[p]) {
		store_drop(fr.pin[p]);
		store_put(fr.pin[p]);
		fr.pin[p] = NULL;
	} else if (op == 5) {
		fr.needed[i] = !fr.needed[i];
	} else if (op == 6) {
		fr.hint_on = rand_r(&fr.seed) % 4 != 0;
		store_set_needed(fr.s[0], fr.hint_on ? fs_needed : NULL, NULL);
	}
}

/* Store 0 reads fits-00 while store 1 drops its copy as corrupt and writes
 * it again: store 0's next rescan finds its pinned entry's file replaced
 * (it no longer counts), and store 1's rewrite supersedes its own. */
static void fs_rewrite_under_pin(uint64_t unit)
{
	char url[64];
	struct store_entry *a, *b;

	fs_url(0, url, sizeof(url));
	a = add(fr.s[0], url, "\"e\"", fr.size[0], 0);
	cr_assert_not_null(a);
	b = store_get(fr.s[1], url, "\"e\"", fr.size[0]);
	cr_assert_not_null(b);
	fs_check(unit, -3);
	store_drop(b);
	store_put(add(fr.s[1], url, "\"e\"", fr.size[0], 0));
	store_put(b);
	fs_check(unit, -2);
	fs_url(1, url, sizeof(url));
	store_put(add(fr.s[0], url, "\"e\"", fr.size[1], 1));
	fs_check(unit, -1);
	store_put(a);
}

/* After 400 random steps over two stores of one directory (admissions,
 * evictions, rewrites of pinned keys, drops, the other store's changes
 * found by rescans), the running sum store_fits uses equals a walk of the
 * table after every step, and so do its answers; the hint's walk was taken
 * with both outcomes. */
Test(store_evict, fits_sum_matches_walk)
{
	uint64_t unit = unit_of(3000);
	uint64_t cap = 5 * unit + unit / 2;

	memset(&fr, 0, sizeof(fr));
	fr.seed = 20261203;
	for (int i = 0; i < FS_URLS; i++)
		fr.size[i] = 1000 * (uint64_t)(1 + i % 3);
	fr.s[0] = open_store(cap);
	fr.s[1] = open_store(cap);
	store_set_wait(fr.s[0], 0);
	store_set_wait(fr.s[1], 0);
	store_set_needed(fr.s[0], fs_needed, NULL);
	fr.hint_on = true;
	fs_rewrite_under_pin(unit);
	for (int step = 0; step < 400; step++) {
		fs_step();
		fs_check(unit, step);
		fs_count_walk(unit, cap);
	}
	cr_assert_gt(fr.walks[0], 0, "the hint never kept an entry out");
	cr_assert_gt(fr.walks[1], 0, "the hint never let one in by a walk");
	for (int p = 0; p < FS_PINS; p++)
		store_put(fr.pin[p]);
	store_set_needed(fr.s[0], NULL, NULL);
	store_close(fr.s[0]);
	store_close(fr.s[1]);
}

/* Review store_evict.c:113: the unlinkat result was ignored, so an entry
 * whose file could not be removed counted as evicted while its bytes
 * stayed (the directory over the cap, the accounting under it). */
Test(store_evict, failed_unlink_is_not_an_eviction)
{
	uint64_t unit = unit_of(1000);
	struct store *s = open_store(unit * 2 + unit / 2);
	struct store_entry *e;
	struct store_stats st;

	add_put(s, "http://h/A.tar", 1000, 1);
	add_put(s, "http://h/B.tar", 1000, 2);
	fail_unlink = 1;
	e = add(s, "http://h/C.tar", "\"e\"", 1000, 3);
	fail_unlink = 0;
	store_put(e);
	store_get_stats(s, &st);
	cr_assert_eq(st.evictions, 0, "%llu evictions, no file removed",
		     (unsigned long long)st.evictions);
	cr_assert_eq(count_files(""), st.entries,
		     "%zu files, %llu entries counted", count_files(""),
		     (unsigned long long)st.entries);
	cr_assert_leq(dir_bytes(), st.cap, "the directory is over the cap");
	store_close(s);
}

/* shards_all_local (exact when local, issue 29): 1 only when every shard
 * is in the store. */
static int all_local(uint64_t cap, int put)
{
	struct store *s = open_store(cap);
	struct index *ix = index_new();
	struct http *h;
	struct shards *sh;
	int r;

	for (int i = 0; i < 3; i++) {
		index_add_shard(ix, abc[i], 1000, "\"e\"");
		if (i < put)
			add_put(s, abc[i], 1000, (unsigned)i);
	}
	sh = shards_over(ix, s, &h);
	r = shards_all_local(sh);
	shards_free(sh);
	http_free(h);
	close_fresh(s, ix);
	return r;
}

Test(store_evict, all_local_needs_every_shard)
{
	uint64_t unit = unit_of(1000);

	cr_assert_eq(all_local(1ULL << 30, 3), 1, "all three stored");
	cr_assert_eq(all_local(1ULL << 30, 2), 0, "C is not stored");
	/* Room for two: the third put evicted one. */
	cr_assert_eq(all_local(2 * unit + unit / 2, 3), 0, "one evicted");
}

/* ---- the cache's own directories (issue 50; here for test_store.c's
 * length) ---- */

/* A directory of the cache that is a symlink, not ours, or writable by
 * others is refused, with one line naming it. */
static void refused(const char *dir, int want, const char *says)
{
	char err[512] = "";
	struct store *s = (struct store *)1;
	int r = store_open(dir, 1 << 20, &s, err, sizeof(err));
	cr_assert_eq(r, want, "store_open: %d (%s)", r, err);
	cr_assert_null(s);
	cr_assert(strstr(err, says) && !strchr(err, '\n'), "err: %s", err);
}

Test(store_evict, a_symlinked_subdirectory_is_refused)
{
	char dir[256], elsewhere[256], link[256];

	snprintf(elsewhere, sizeof(elsewhere), "%s/elsewhere", tdir);
	cr_assert_eq(mkdir(elsewhere, 0700), 0);
	snprintf(dir, sizeof(dir), "%s/c", tdir);
	cr_assert_eq(mkdir(dir, 0700), 0);
	snprintf(link, sizeof(link), "%s/c/shards", tdir);
	cr_assert_eq(symlink(elsewhere, link), 0);
	refused(dir, -ELOOP, "c/shards is a symlink");
	cr_assert_eq(unlink(link), 0);
	snprintf(link, sizeof(link), "%s/c/prepared", tdir);
	cr_assert_eq(symlink(elsewhere, link), 0);
	refused(dir, -ELOOP, "c/prepared is a symlink");
	refused(link, -ELOOP, "c/prepared is a symlink"); /* its own store */
	cr_assert_eq(count_files_in("elsewhere", ""), 0,
		     "a file was written through the link");
}

Test(store_evict, a_cache_root_others_can_steer_is_refused)
{
	char dir[256], link[256];

	snprintf(dir, sizeof(dir), "%s/c", tdir);
	cr_assert_eq(mkdir(dir, 0700), 0);
	cr_assert_eq(chmod(dir, 0770), 0);
	refused(dir, -EPERM, "writable by group or others (mode 770)");
	cr_assert_eq(chmod(dir, 0700), 0);
	snprintf(link, sizeof(link), "%s/l", tdir);
	cr_assert_eq(symlink(dir, link), 0);
	refused(link, -ELOOP, "/l is a symlink");
	if (geteuid() != 0)
		cr_skip_test("needs root to give the directory away");
	cr_assert_eq(chown(dir, 12345, 0), 0);
	refused(dir, -EPERM, "owned by uid 12345, not by this mount's uid 0");
}
