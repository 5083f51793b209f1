/* test_prepared.c - the prepared-sample tier's admission (issue 47): a
 * sample's entry is written at its second use, in this mount or a later
 * one on the same cache_dir, never its first; what is not written is
 * counted by reason; a read never waits for the tier's writer. */
#include <criterion/criterion.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cache/image/prep.h"
#include "cache/image/prepared.h"
#include "cache/image/prepared_seen.h"
#include "common/util.h"
#include "fixtures.h"

static const struct transform_opts opts = {
	.size = 64, .crop = 56, .format = TF_PPM};
static const char *const imgs[] = {"photo.jpg", "photo444.jpg", "gray.jpg",
				   "progressive.jpg"};
#define NIMG (sizeof(imgs) / sizeof(imgs[0]))

static char tdir[FX_TDIR_MAX], root[FX_PATH_MAX], cdir[FX_PATH_MAX];
static uint8_t *in[NIMG];
static size_t inlen[NIMG];
static struct prep *prep;

static void setup(void)
{
	fx_tree_make("prepared", tdir, root, cdir);
	cr_assert_eq(mkdir(cdir, 0700), 0); /* the shard store's, in a mount */
	for (size_t i = 0; i < NIMG; i++)
		in[i] = fx_load_img(imgs[i], &inlen[i]);
	cr_assert_eq(prep_open(&opts, 1, &prep), 0);
}

static void teardown(void)
{
	prep_free(prep);
	for (size_t i = 0; i < NIMG; i++)
		free(in[i]);
	fx_rm_tree(tdir);
}

static struct prepared *tier_open(void)
{
	struct prepared *p;
	char err[256] = "";
	cr_assert_eq(prepared_open(cdir, 1u << 30, &opts, &p, err, sizeof(err)),
		     0, "%s", err);
	return p;
}

/* Sample i through the tier; its bytes must be a decode's. */
static void use(struct prepared *p, size_t i)
{
	uint8_t *out, *ref;
	size_t n, refn;
	char why[160] = "";
	cr_assert_eq(prepared_make(p, prep, in[i], inlen[i], &out, &n, why,
				   sizeof(why)),
		     0, "%s: %s", imgs[i], why);
	cr_assert_eq(prep_prepare(prep, in[i], inlen[i], &ref, &refn, why,
				  sizeof(why)),
		     0);
	cr_assert_eq(n, refn);
	cr_assert(memcmp(out, ref, n) == 0, "%s: other bytes", imgs[i]);
	free(out);
	free(ref);
}

/* Entry files in the tier's directory. */
static int entries_on_disk(void)
{
	char d[FX_PATH_MAX + 32];
	snprintf(d, sizeof(d), "%s/prepared/shards", cdir);
	DIR *dir = opendir(d);
	int n = 0;
	cr_assert_not_null(dir, "%s", d);
	for (struct dirent *e; (e = readdir(dir));)
		n += strstr(e->d_name, ".shard") != NULL;
	closedir(dir);
	return n;
}

TestSuite(prepared, .init = setup, .fini = teardown, .timeout = 60);

/* Before issue 47 each of these was written at once: 4 entries. */
Test(prepared, a_first_use_writes_nothing_and_is_counted)
{
	struct prepared *p = tier_open();
	struct prepared_stats s;
	for (size_t i = 0; i < NIMG; i++)
		use(p, i);
	prepared_get_stats(p, &s);
	cr_assert_eq(s.misses, NIMG);
	cr_assert_eq(s.skipped_first, NIMG);
	cr_assert_eq(s.skipped, 0);
	cr_assert_eq(s.seen, NIMG);
	prepared_close(p); /* writes what is queued: nothing */
	cr_assert_eq(entries_on_disk(), 0);
}

Test(prepared, a_second_use_in_the_same_mount_writes)
{
	struct prepared *p = tier_open();
	struct prepared_stats s;
	use(p, 0);
	use(p, 1);
	use(p, 0);
	prepared_close(p);
	cr_assert_eq(entries_on_disk(), 1);
	p = tier_open();
	use(p, 0);
	use(p, 1); /* its second use: written now */
	prepared_get_stats(p, &s);
	cr_assert_eq(s.hits, 1);
	cr_assert_eq(s.skipped_first, 0);
	prepared_close(p);
	cr_assert_eq(entries_on_disk(), 2);
}

/* The samples a mount used once are remembered in the cache_dir: the
 * next mount writes them at their first use there. */
Test(prepared, a_use_in_an_earlier_mount_counts)
{
	struct prepared *p = tier_open();
	struct prepared_stats s;
	for (size_t i = 0; i < NIMG; i++)
		use(p, i);
	prepared_close(p);
	cr_assert_eq(entries_on_disk(), 0);

	p = tier_open();
	prepared_get_stats(p, &s);
	cr_assert_eq(s.seen, NIMG);
	for (size_t i = 0; i < NIMG; i++)
		use(p, i);
	prepared_close(p);
	cr_assert_eq(entries_on_disk(), (int)NIMG);

	p = tier_open();
	for (size_t i = 0; i < NIMG; i++)
		use(p, i);
	prepared_get_stats(p, &s);
	cr_assert_eq(s.hits, NIMG);
	cr_assert_eq(s.misses, 0);
	prepared_close(p);
}

/* A recipe of its own: a sample used under one recipe is new to another. */
Test(prepared, seen_is_per_recipe)
{
	struct prepared *p = tier_open(), *q;
	struct transform_opts o2 = opts;
	struct prepared_stats s;
	char err[256] = "";
	use(p, 0);
	prepared_close(p);
	o2.size = 72;
	cr_assert_eq(prepared_open(cdir, 1u << 30, &o2, &q, err, sizeof(err)),
		     0, "%s", err);
	struct prep *prep2;
	uint8_t *out;
	size_t n;
	cr_assert_eq(prep_open(&o2, 1, &prep2), 0);
	cr_assert_eq(
		prepared_make(q, prep2, in[0], inlen[0], &out, &n, NULL, 0), 0);
	free(out);
	prepared_get_stats(q, &s);
	cr_assert_eq(s.skipped_first, 1);
	prepared_close(q);
	prep_free(prep2);
	cr_assert_eq(entries_on_disk(), 0);
}

struct reader {
	struct prepared *p;
	size_t i;
	int done;
};

static void *read_one(void *arg)
{
	struct reader *r = arg;
	use(r->p, r->i);
	__atomic_store_n(&r->done, 1, __ATOMIC_RELEASE);
	return NULL;
}

/* The writer stuck (another process holds the tier's directory lock, as
 * it does while it admits an entry): reads that queue entries and reads
 * that hit still return. */
Test(prepared, a_read_never_waits_for_the_writer)
{
	struct prepared *p = tier_open();
	use(p, 0);
	use(p, 0); /* written: a hit below */
	use(p, 1);
	prepared_close(p);
	p = tier_open();

	char d[FX_PATH_MAX + 32];
	snprintf(d, sizeof(d), "%s/prepared/shards", cdir);
	int fd = open(d, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	cr_assert_geq(fd, 0);
	cr_assert_eq(flock(fd, LOCK_EX), 0);
	struct reader rs[3] = {{p, 1, 0}, {p, 0, 0}, {p, 1, 0}};
	for (size_t k = 0; k < 3; k++) {
		pthread_t t;
		cr_assert_eq(pthread_create(&t, NULL, read_one, &rs[k]), 0);
		/* Joined with the lock held: a read that waited for the
		 * writer would hang here (the suite's timeout fails it). */
		pthread_join(t, NULL);
		cr_assert(__atomic_load_n(&rs[k].done, __ATOMIC_ACQUIRE));
	}
	struct prepared_stats s;
	prepared_get_stats(p, &s);
	cr_assert_eq(s.hits, 1);
	cr_assert_geq(s.queued, 1, "the writer wrote under a held lock?");
	flock(fd, LOCK_UN);
	close(fd);
	prepared_close(p);
	cr_assert_eq(entries_on_disk(), 2);
}

/* The seen file: a torn tail (a key cut short) is ignored, the keys
 * before it are kept. */
Test(prepared, seen_file_with_a_torn_tail)
{
	char d[FX_PATH_MAX + 32], f[FX_PATH_MAX + 48], err[128];
	struct prepared_seen *s;
	snprintf(d, sizeof(d), "%s/prepared", cdir);
	cr_assert_eq(mkdir(d, 0700), 0);
	cr_assert_eq(prepared_seen_open(d, &s, err, sizeof(err)), 0, "%s", err);
	cr_assert_eq(prepared_seen_mark(s, 7), PREPARED_SEEN_FIRST);
	cr_assert_eq(prepared_seen_mark(s, 0), PREPARED_SEEN_FIRST);
	cr_assert_eq(prepared_seen_mark(s, 7), PREPARED_SEEN_AGAIN);
	prepared_seen_close(s);
	snprintf(f, sizeof(f), "%s/seen-v1", d);
	int fd = open(f, O_WRONLY | O_APPEND);
	cr_assert_geq(fd, 0);
	cr_assert_eq(write(fd, "abc", 3), 3);
	close(fd);
	cr_assert_eq(prepared_seen_open(d, &s, err, sizeof(err)), 0, "%s", err);
	cr_assert_eq(prepared_seen_count(s), 2);
	cr_assert_eq(prepared_seen_mark(s, 7), PREPARED_SEEN_AGAIN);
	cr_assert_eq(prepared_seen_mark(s, 0), PREPARED_SEEN_AGAIN);
	cr_assert_eq(prepared_seen_mark(s, 8), PREPARED_SEEN_FIRST);
	prepared_seen_close(s);
	/* Appended after the cut: whole, found again. */
	cr_assert_eq(prepared_seen_open(d, &s, err, sizeof(err)), 0, "%s", err);
	cr_assert_eq(prepared_seen_count(s), 3);
	cr_assert_eq(prepared_seen_mark(s, 8), PREPARED_SEEN_AGAIN);
	prepared_seen_close(s);
}

/* The exact mount's way in (outputs.c): a first use is left to the caller
 * at once, before any decode, so that it makes its output in one job as
 * without the tier; a second use is made and kept; then a hit. */
Test(prepared, take_leaves_a_first_use_to_the_caller)
{
	struct prepared *p = tier_open();
	struct prepared_stats s;
	uint8_t *out = NULL, *ref;
	size_t n = 0, refn;
	char why[160] = "";

	cr_assert_eq(prepared_take_named(p, prep, "k", in[0], inlen[0], &out,
					 &n, why, sizeof(why)),
		     0, "%s", why);
	cr_assert_null(out);
	cr_assert_eq(prep_prepare(prep, in[0], inlen[0], &ref, &refn, why,
				  sizeof(why)),
		     0);
	for (int k = 0; k < 2; k++) { /* made and kept; then read back */
		prepared_close(p);
		p = tier_open();
		cr_assert_eq(prepared_take_named(p, prep, "k", in[0], inlen[0],
						 &out, &n, why, sizeof(why)),
			     1, "%s", why);
		cr_assert_eq(n, refn);
		cr_assert(memcmp(out, ref, n) == 0);
		free(out);
		prepared_get_stats(p, &s);
		cr_assert_eq(s.hits, (uint64_t)k);
	}
	prepared_close(p);
	free(ref);
	cr_assert_eq(entries_on_disk(), 1);
}
