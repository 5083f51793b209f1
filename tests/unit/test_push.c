/* test_push.c - the page-cache pusher (fs/push.c) against a real FUSE
 * mount: a minimal low-level filesystem in this test answers LOOKUP and
 * GETATTR from a real namespace and fails every READ, so bytes read back
 * through the mount can only come from what push stored in the kernel's
 * page cache. Shards come from the fault server through a real store.
 * Covered here: grouping files by shard, the wait for a shard still
 * arriving, files the kernel does not know, one push per shard, and a
 * prompt push_free. The real handlers (fs/ops.c calling push_touch) are
 * exercised by the integration tests' exact mounts. */
#define FUSE_USE_VERSION 314
#include <criterion/criterion.h>
#include <errno.h>
#include <fcntl.h>
#include <fuse_lowlevel.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "cache/dataset_parts.h"
#include "cache/store/shards.h"
#include "cache/store/store.h"
#include "common/util.h"
#include "fetch/format/index.h"
#include "fetch/net/http.h"
#include "fixtures.h"
#include "fs/namespace.h"
#include "fs/push.h"

#define NSHARDS 3
#define PER_SHARD 5

static char tdir[64], root[96], cdir[96], mnt[96];
static struct fx_server srv;
static struct http *h;
static struct index *ix;
static struct store *st;
static struct shards *sh;
static struct dataset *ds;
static struct namespace *ns;
static struct fuse_session *se;
static pthread_t loop_thread;
static bool mounted;
static atomic_int reads; /* READ requests that reached the daemon */
/* Sample bytes by shard and member, to compare with. */
static uint8_t *data[NSHARDS][PER_SHARD];
static size_t len[NSHARDS][PER_SHARD];

/* ---- the minimal filesystem ---- */

static void fill_attr(uint64_t ino, struct stat *a)
{
	uint32_t num;
	memset(a, 0, sizeof(*a));
	a->st_ino = ino;
	if (ns_kind_of(ns, ino, &num) == NS_FILE) {
		a->st_mode = S_IFREG | 0444;
		a->st_nlink = 1;
		a->st_size = (off_t)ns_file_size(ns, num);
	} else {
		a->st_mode = S_IFDIR | 0555;
		a->st_nlink = 2;
	}
}

static void t_lookup(fuse_req_t req, fuse_ino_t parent, const char *name)
{
	struct fuse_entry_param e = {0};
	e.ino = ns_lookup(ns, parent, name);
	if (!e.ino) {
		fuse_reply_err(req, ENOENT);
		return;
	}
	e.attr_timeout = e.entry_timeout = 3600;
	fill_attr(e.ino, &e.attr);
	fuse_reply_entry(req, &e);
}

static void t_getattr(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	struct stat a;
	(void)fi;
	fill_attr(ino, &a);
	fuse_reply_attr(req, &a, 3600);
}

static void t_open(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	(void)ino;
	fi->keep_cache = 1; /* what fs/ops.c does: keep pushed pages */
	fuse_reply_open(req, fi);
}

static void t_read(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off,
		   struct fuse_file_info *fi)
{
	(void)ino, (void)size, (void)off, (void)fi;
	reads++;
	fuse_reply_err(req, EIO);
}

static const struct fuse_lowlevel_ops t_ops = {
	.lookup = t_lookup,
	.getattr = t_getattr,
	.open = t_open,
	.read = t_read,
};

static void *loop_main(void *arg)
{
	(void)arg;
	fuse_session_loop(se);
	return NULL;
}

static void mount_fs(void)
{
	char *argv[] = {"test_push", NULL};
	struct fuse_args args = FUSE_ARGS_INIT(1, argv);

	if (access("/dev/fuse", R_OK | W_OK) != 0)
		cr_skip_test("no usable /dev/fuse: push needs a real mount");
	se = fuse_session_new(&args, &t_ops, sizeof(t_ops), NULL);
	fuse_opt_free_args(&args); /* the session may have grown them */
	cr_assert_not_null(se);
	if (fuse_session_mount(se, mnt) != 0) {
		fuse_session_destroy(se);
		se = NULL;
		cr_skip_test("cannot mount FUSE here (not root / no fuse3?)");
	}
	mounted = true;
	cr_assert_eq(pthread_create(&loop_thread, NULL, loop_main, NULL), 0);
}

/* ---- data ---- */

static void make_shards(void)
{
	unsigned seed = 777;
	char url[128];

	for (int s = 0; s < NSHARDS; s++) {
		struct tarw t = {0};
		uint64_t off[PER_SHARD];
		char name[64], path[160];
		for (int k = 0; k < PER_SHARD; k++) {
			len[s][k] = 3000 + (size_t)(rand_r(&seed) % 20000);
			data[s][k] = xmalloc(len[s][k]);
			for (size_t i = 0; i < len[s][k]; i++)
				data[s][k][i] = (uint8_t)rand_r(&seed);
			snprintf(name, sizeof(name), "s%dk%d.jpg", s, k);
			off[k] = tarw_add(&t, name, data[s][k], len[s][k]);
		}
		tarw_end(&t);
		snprintf(path, sizeof(path), "%s/s%d.tar", root, s);
		fx_write_file(path, t.buf, t.len);
		snprintf(url, sizeof(url), "http://127.0.0.1:%d/s%d.tar",
			 srv.port ? srv.port : 1, s);
		index_add_shard(ix, url, t.len, "");
		for (int k = 0; k < PER_SHARD; k++) {
			snprintf(name, sizeof(name), "s%dk%d", s, k);
			cr_assert_eq(index_add_sample(ix, (uint32_t)s, off[k],
						      len[s][k], "cls", name,
						      "jpg"),
				     0);
		}
		tarw_free(&t);
	}
}

static void setup(void)
{
	char err[256];
	struct http_opts ho = {.connections = 4,
			       .retry_budget_s = 8,
			       .backoff_base_s = 0.05,
			       .low_speed_time_s = 3};

	snprintf(tdir, sizeof(tdir), "/tmp/echofs-push-XXXXXX");
	cr_assert_not_null(mkdtemp(tdir));
	snprintf(root, sizeof(root), "%s/www", tdir);
	snprintf(cdir, sizeof(cdir), "%s/cache", tdir);
	snprintf(mnt, sizeof(mnt), "%s/mnt", tdir);
	cr_assert_eq(mkdir(root, 0700), 0);
	cr_assert_eq(mkdir(mnt, 0700), 0);
	fx_server_start(&srv, root, tdir, NULL);
	cr_assert_eq(http_global_init(), 0);
	cr_assert_eq(http_open(&ho, &h, err, sizeof(err)), 0, "http_open: %s",
		     err);
	ix = index_new();
	make_shards();
	cr_assert_eq(store_open(cdir, 1ULL << 30, &st, err, sizeof(err)), 0);
	cr_assert_not_null(st, "store_open: %s", err);
	cr_assert_eq(shards_open(ix, h, st, NULL, &sh), 0);
	cr_assert_not_null(sh);
	ds = dataset_wrap(ix, sh);
	cr_assert_not_null(ds);
	cr_assert_eq(ns_open(ds, NULL, &ns), 0);
	mount_fs();
}

static void teardown(void)
{
	if (mounted) {
		/* End the loop first (its read fails with ENODEV once the
		 * mount is gone), then let libfuse close the descriptor: it
		 * must not be closed while the loop still reads it. */
		fuse_session_exit(se);
		umount2(mnt, MNT_DETACH);
		pthread_join(loop_thread, NULL);
		fuse_session_unmount(se);
		mounted = false;
	}
	fuse_session_destroy(se);
	se = NULL;
	ns_free(ns);
	dataset_close(ds);
	shards_free(sh);
	store_close(st);
	index_free(ix);
	http_free(h);
	fx_server_stop(&srv);
	for (int s = 0; s < NSHARDS; s++)
		for (int k = 0; k < PER_SHARD; k++)
			free(data[s][k]);
	fx_rm_tree(tdir);
}

TestSuite(push, .init = setup, .fini = teardown, .timeout = 90);

/* ---- helpers ---- */

static void path_of(int s, int k, char *out, size_t n)
{
	snprintf(out, n, "%s/cls/s%dk%d.jpg", mnt, s, k);
}

/* A lookup, so the kernel knows the file's inode. */
static void look(int s, int k)
{
	char p[160];
	struct stat a;
	path_of(s, k, p, sizeof(p));
	cr_assert_eq(stat(p, &a), 0, "%s: %s", p, strerror(errno));
	cr_assert_eq((size_t)a.st_size, len[s][k]);
}

/* Wait (bounded) until push has pushed `n` shards. */
static struct push_stats wait_pushed(struct push *p, uint64_t n)
{
	struct push_stats ps;
	double until = now_mono() + 20;
	do {
		push_get_stats(p, &ps);
		if (ps.shards >= n)
			return ps;
		usleep(10000);
	} while (now_mono() < until);
	cr_assert_fail("push never pushed %lu shards (at %lu)",
		       (unsigned long)n, (unsigned long)ps.shards);
	return ps;
}

/* Read a file through the mount; returns 0 when its bytes match. */
static int read_back(int s, int k)
{
	char p[160];
	uint8_t *buf = xmalloc(len[s][k] + 1);
	ssize_t got;
	int fd, same;

	path_of(s, k, p, sizeof(p));
	fd = open(p, O_RDONLY);
	cr_assert_geq(fd, 0, "%s: %s", p, strerror(errno));
	got = pread(fd, buf, len[s][k] + 1, 0);
	close(fd);
	same = got == (ssize_t)len[s][k] &&
	       memcmp(buf, data[s][k], len[s][k]) == 0;
	free(buf);
	return same ? 0 : -1;
}

/* ---- tests ---- */

static struct push *open_push(void)
{
	struct push *p = (struct push *)&p; /* must be set */
	int r = push_open(se, ns, ds, &p);

	cr_assert_eq(r, 0, "push_open: %s", strerror(-r));
	cr_assert_not_null(p);
	return p;
}

Test(push, a_shard_still_arriving_is_pushed_once_cached)
{
	struct push *p = open_push();
	struct push_stats ps;
	uint64_t bytes = 0;

	for (int k = 0; k < PER_SHARD; k++)
		look(1, k);
	push_touch(p, 1); /* not cached yet: push waits for it */
	usleep(200000);
	push_get_stats(p, &ps);
	cr_assert_eq(ps.shards, 0, "pushed a shard not in the cache");
	shards_prefetch(sh, 1);
	ps = wait_pushed(p, 1);
	for (int k = 0; k < PER_SHARD; k++)
		bytes += len[1][k];
	cr_assert_eq(ps.files, PER_SHARD);
	cr_assert_eq(ps.bytes, bytes);
	cr_assert_eq(ps.unknown, 0);
	/* Every file's bytes come back with no READ reaching the daemon. */
	for (int k = 0; k < PER_SHARD; k++)
		cr_assert_eq(read_back(1, k), 0, "file %d of shard 1", k);
	cr_assert_eq(reads, 0, "%d READs: pages were not pushed", reads);
	push_free(p);
}

Test(push, only_the_touched_shards_files_and_only_known_inodes)
{
	struct push *p = open_push();
	struct push_stats ps;

	for (int s = 0; s < NSHARDS; s++)
		for (int k = 0; k < PER_SHARD - 1;
		     k++) /* k = 4 never looked up */
			look(s, k);
	for (int s = 0; s < NSHARDS; s++)
		shards_prefetch(sh, (uint32_t)s);
	for (int s = 0; s < NSHARDS; s++)
		for (int i = 0; i < 500 && !shards_is_cached(sh, (uint32_t)s);
		     i++)
			usleep(10000);
	push_touch(p, 2);
	push_touch(p, 2); /* once per shard */
	ps = wait_pushed(p, 1);
	usleep(200000);
	push_get_stats(p, &ps);
	cr_assert_eq(ps.shards, 1);
	cr_assert_eq(ps.files, PER_SHARD - 1);
	cr_assert_eq(ps.unknown, 1, "the file never looked up");
	cr_assert_eq(read_back(2, 0), 0);
	cr_assert_eq(reads, 0);
	/* Shard 0 was not touched: its files are not in the page cache. */
	cr_assert_neq(read_back(0, 0), 0);
	cr_assert_gt(reads, 0);
	push_touch(p, 2);
	push_touch(p, NSHARDS); /* out of range: ignored */
	push_touch(NULL, 0);
	usleep(100000);
	push_get_stats(p, &ps);
	cr_assert_eq(ps.shards, 1);
	push_free(p);
}

static void *free_push(void *p)
{
	push_free(p);
	return NULL;
}

/* A push_free that waited for the shard's retries would take PUSH_WAIT_S
 * (60 s): a 30 s timed join is the hang guard (a per-test Criterion
 * .timeout leaks 48 bytes under LeakSanitizer), the counter shows that the
 * shard really was in its retry loop when push_free came. */
Test(push, free_is_prompt_while_a_shard_waits)
{
	struct push *p = open_push();
	struct push_stats ps;
	struct timespec until;
	pthread_t t;

	push_touch(p, 0); /* never fetched: push keeps retrying */
	do {
		usleep(10000);
		push_get_stats(p, &ps);
	} while (ps.waits < 3);
	cr_assert_eq(ps.shards, 0);
	cr_assert_eq(pthread_create(&t, NULL, free_push, p), 0);
	clock_gettime(CLOCK_REALTIME, &until);
	until.tv_sec += 30;
	cr_assert_eq(pthread_timedjoin_np(t, NULL, &until), 0,
		     "push_free waited out the shard's retries");
	push_free(NULL);
	push_get_stats(NULL, &ps);
	cr_assert_eq(ps.shards, 0);
}
