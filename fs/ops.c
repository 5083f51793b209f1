/* ops.c - the FUSE request handlers (low-level API).
 *
 * Each fs_op_<name> sends exactly one reply; the work is done by helpers
 * that return 0 or a negative errno.
 *
 * The tree is immutable and file bytes never change, so the kernel may
 * cache everything, and every request it does not send saves a round trip
 * (over 100 us on these VMs):
 * - Entries and attributes are cached for a day; directory listings are
 *   READDIRPLUS, so listing a class directory also answers the lookups of
 *   its files.
 * - Regular files are never opened: fs_op_open answers ENOSYS, after which
 *   the kernel stops sending OPEN, FLUSH and RELEASE for files (FUSE
 *   "no_open") and keeps their pages cached across opens. A warm read costs
 *   no request at all; a cold one costs one READ.
 * - Control files therefore cannot be snapshotted at open. They are
 *   rendered at every lookup (entry and attribute timeout 0, so every path
 *   walk asks) and read from the latest rendering; the kernel is told to
 *   drop the old rendering's pages (notify_inval_inode).
 *
 * Echo mounts (-o echo=E) differ: a file's content depends on the open, so
 * every lookup of a file goes to bindings.c (entry timeout 0), which binds
 * the path to a pool sample under an inode of its own; files are opened
 * for real, and READDIRPLUS returns their names without attributes so that
 * listing a directory binds nothing (except for paths served their own
 * sample, below). .echofs/config can be written there.
 * An echo lookup that must wait for data is parked in the pool (no FUSE
 * thread waits) and answered from the thread that makes a sample ready;
 * an INTERRUPT answers it EINTR at once. When every served file has one
 * size the open binds instead (bindings.h): entries are cached and the
 * OPEN is what may be parked.
 *
 * Exact when local: once an adaptive echo mount has nothing left to echo
 * for (dataset_echo_may_retire: every shard on local disk) and no binding
 * is left in the kernel, an OPEN of a path served its own sample is
 * answered ENOSYS. The kernel then opens files itself, as on an
 * exact mount, for the rest of the mount's life (no_open is per
 * connection and never cleared): no OPEN, FLUSH or RELEASE per file, and
 * a file's pages stay cached from one pass to the next. Lookups bind
 * nothing from then on. A lookup that may bind holds fs.binders while it
 * decides, and retire_now sets exact_now before it looks at binders, so
 * either the lookup sees exact_now or retire_now sees the lookup. Every
 * own path's lookup makes its output (dataset_echo_check_own), so a bad
 * image is found before the kernel can read its path unopened, and is
 * answered with a good file of its class (stand_in; before the mount is
 * exact too, when that file is local, as the pool may have none of the
 * class to give this pass). A path that its
 * listing already answered with its own inode (listed_with_entry, as an
 * exact mount's listing does, so the first pass costs no LOOKUP a file
 * either) is not looked up: its bad image is found at its READ, which
 * then returns the bytes of that good file (read_output). */
#include "fs/ops.h"

#include <errno.h>
#include <stdatomic.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>

#include "cache/dataset.h"
#include "common/log.h"
#include "common/util.h"
#include "fs/bindings.h"
#include "fs/errmap.h"
#include "fs/namespace.h"
#include "fs/ops_int.h"
#include "fs/push.h"

/* One rendering of a control file. Readers hold a reference while they
 * copy from it, so a newer rendering may replace it meanwhile. */
struct control_snapshot {
	char *buf;
	size_t len;
	struct timespec when;
	int refs; /* guarded by fs_ctx.snap_lock */
};

void fs_ctx_init(struct fs_ctx *fs)
{
	pthread_mutex_init(&fs->snap_lock, NULL);
}

static void snap_unref(struct fs_ctx *fs, struct control_snapshot *sn)
{
	int last;
	if (!sn)
		return;
	pthread_mutex_lock(&fs->snap_lock);
	last = --sn->refs == 0;
	pthread_mutex_unlock(&fs->snap_lock);
	if (last) {
		free(sn->buf);
		free(sn);
	}
}

void fs_ctx_destroy(struct fs_ctx *fs)
{
	for (size_t i = 0; i < ARRAY_SIZE(fs->snap); i++)
		snap_unref(fs, fs->snap[i]);
	pthread_mutex_destroy(&fs->snap_lock);
	free((void *)fs->read_failed);
	fs->read_failed = NULL;
}

/* errors.read counts files whose reads fail, once each, and says why. */
static void count_read_error(struct fs_ctx *fs, uint32_t file, int err)
{
	const struct ns_file *f = &fs->ns->files[file];
	if (fs->read_failed && atomic_exchange(&fs->read_failed[file], 1))
		return;
	fs->counters.read_errors++;
	log_counted("read", "read of %s/%s failed: %s",
		    ns_dir_name(fs->ns, f->cls), f->name, strerror(err));
}

/* Forget the rendering of control file ino (after a change). */
static void snap_drop(struct fs_ctx *fs, fuse_ino_t ino)
{
	struct control_snapshot *old;
	pthread_mutex_lock(&fs->snap_lock);
	old = fs->snap[ino - NS_INO_STATS];
	fs->snap[ino - NS_INO_STATS] = NULL;
	pthread_mutex_unlock(&fs->snap_lock);
	snap_unref(fs, old);
}

/* The current rendering of control file ino, with a reference the caller
 * drops with snap_unref. refresh (a lookup: every path walk makes one):
 * render anew; else reuse the last rendering. NULL on allocation failure. */
static struct control_snapshot *snap_get(struct fs_ctx *fs, fuse_ino_t ino,
					 int refresh)
{
	size_t k = ino - NS_INO_STATS;
	struct control_snapshot *sn, *old = NULL;
	struct timespec now;

	clock_gettime(CLOCK_REALTIME, &now);
	pthread_mutex_lock(&fs->snap_lock);
	sn = fs->snap[k];
	if (sn && !refresh) {
		sn->refs++;
		pthread_mutex_unlock(&fs->snap_lock);
		return sn;
	}
	pthread_mutex_unlock(&fs->snap_lock);

	/* Render without the lock: it reads other modules' statistics. */
	sn = xcalloc(1, sizeof(*sn));
	static const enum control_file which[] = {
		CONTROL_STATS_JSON, CONTROL_STATS_PROM, CONTROL_CONFIG};
	if (control_render(fs->ctl, which[k], &sn->buf, &sn->len) != 0) {
		free(sn);
		return NULL;
	}
	sn->when = now;
	sn->refs = 2; /* the table's and the caller's */
	pthread_mutex_lock(&fs->snap_lock);
	old = fs->snap[k];
	fs->snap[k] = sn;
	pthread_mutex_unlock(&fs->snap_lock);
	snap_unref(fs, old);
	/* The kernel may keep the old rendering's pages (the size and mtime
	 * change alone did not always drop them): drop them now. */
	if (old && fs->se)
		fuse_lowlevel_notify_inval_inode(fs->se, ino, 0, 0);
	return sn;
}

/* Size of a file: the sample's, or on a preprocessing mount the output's
 * (known in advance for PPM with a crop, else made and kept in outputs). */
static int file_size(struct fs_ctx *fs, uint32_t file, uint64_t *size)
{
	struct dataset_output *o;
	ssize_t fixed;
	int r;

	if (!dataset_converts(fs->ds)) {
		*size = ns_file_size(fs->ns, file);
		return 0;
	}
	fixed = dataset_output_fixed_size(fs->ds);
	if (fixed >= 0) {
		*size = (uint64_t)fixed;
		return 0;
	}
	r = dataset_output_get(fs->ds, fs->ns->files[file].sample, &o);
	if (r)
		return r; /* the reply's errno is errmap's choice */
	*size = dataset_output_len(o);
	dataset_output_put(fs->ds, o);
	return 0;
}

/* t plus ns nanoseconds. */
static struct timespec ts_add_ns(struct timespec t, uint64_t ns)
{
	t.tv_sec += (time_t)(ns / 1000000000u);
	t.tv_nsec += (long)(ns % 1000000000u);
	if (t.tv_nsec >= 1000000000L) {
		t.tv_sec++;
		t.tv_nsec -= 1000000000L;
	}
	return t;
}

/* What every inode's attributes share. */
static void base_stat(const struct fs_ctx *fs, fuse_ino_t ino, struct stat *st)
{
	memset(st, 0, sizeof(*st));
	st->st_ino = ino;
	st->st_uid = fs->uid;
	st->st_gid = fs->gid;
	st->st_atim = st->st_mtim = st->st_ctim = fs->mtime;
	st->st_blksize = 65536;
}

/* Attributes of an echo file bound as ba. */
static void binding_stat(const struct fs_ctx *fs, const struct binding_attr *ba,
			 struct stat *st)
{
	base_stat(fs, ba->ino, st);
	st->st_mode = S_IFREG | 0444;
	st->st_nlink = 1;
	st->st_size = (off_t)ba->size;
	st->st_blocks = (st->st_size + 511) / 512;
	/* Each sample bound to the inode gets its own mtime, so that the
	 * kernel drops the previous sample's pages even when the size stays
	 * (auto_inval_data; bindings.h, Rebinding). */
	st->st_mtim = st->st_ctim = ts_add_ns(fs->mtime, ba->gen);
}

/* Attributes of ino. refresh: re-render a control file (lookup, getattr). */
static int fill_attr(struct fs_ctx *fs, fuse_ino_t ino, struct stat *st,
		     int refresh)
{
	uint32_t num;

	base_stat(fs, ino, st);
	switch (ns_kind_of(fs->ns, ino, &num)) {
	case NS_ROOT:
		st->st_mode = S_IFDIR | 0555;
		st->st_nlink = 2 + fs->ns->root_dirs;
		return 0;
	case NS_CLASS: /* subdirectories: the samples layout's key dirs */
		st->st_mode = S_IFDIR | 0555;
		st->st_nlink = 2 + fs->ns->classes[num].sub_count;
		return 0;
	case NS_CONTROL_DIR:
		st->st_mode = S_IFDIR | 0555;
		st->st_nlink = 2;
		return 0;
	case NS_CONTROL_FILE: {
		struct control_snapshot *sn = snap_get(fs, ino, refresh);
		if (!sn)
			return -ENOMEM;
		st->st_mode = S_IFREG |
			      (ino == NS_INO_CONFIG && dataset_echoes(fs->ds) ? 0600
								     : 0444);
		st->st_nlink = 1;
		st->st_size = (off_t)sn->len;
		st->st_mtim = st->st_ctim = sn->when;
		snap_unref(fs, sn);
		return 0;
	}
	case NS_FILE: {
		uint64_t size;
		int r = file_size(fs, num, &size);
		if (r)
			return r;
		st->st_mode = S_IFREG | 0444;
		st->st_nlink = 1;
		st->st_size = (off_t)size;
		st->st_blocks = (st->st_size + 511) / 512;
		return 0;
	}
	default:
		break;
	}
	if (fs->bind && bindings_owns(fs->bind, ino)) {
		struct binding_attr ba;
		int r = bindings_getattr(fs->bind, ino, &ba);
		if (r)
			return r;
		binding_stat(fs, &ba, st);
		return 0;
	}
	return -ENOENT;
}

/* Entry for a lookup or a READDIRPLUS record; control files expire at
 * once so that each path walk re-renders them. */
static int fill_entry(struct fs_ctx *fs, fuse_ino_t ino,
		      struct fuse_entry_param *e, int refresh)
{
	uint32_t num;
	/* Control files change; echo files' paths rebind at every open. */
	int volatile_ = ns_kind_of(fs->ns, ino, &num) == NS_CONTROL_FILE;

	memset(e, 0, sizeof(*e));
	e->ino = ino;
	e->attr_timeout = volatile_ ? 0 : fs->timeout;
	e->entry_timeout = volatile_ ? 0 : fs->timeout;
	return fill_attr(fs, ino, &e->attr, refresh);
}

/* Answer an echo lookup with binding ba (or error r). A lookup whose
 * reply does not reach the kernel (interrupted, unmounted) was never
 * counted there: it is forgotten here, or its binding would leak. */
static void reply_echo_entry(fuse_req_t req, struct fs_ctx *fs, int r,
			     const struct binding_attr *ba)
{
	struct fuse_entry_param e;

	if (r == 0) {
		/* The attributes of the sample this lookup was answered with
		 * (the path may be bound anew meanwhile). */
		memset(&e, 0, sizeof(e));
		e.ino = ba->ino;
		e.attr_timeout = fs->timeout;
		/* A path binds anew at every open: the kernel asks each time,
		 * unless it binds at open (bindings.h). */
		e.entry_timeout = ba->stable ? fs->timeout : 0;
		binding_stat(fs, ba, &e.attr);
	}
	if (r)
		fuse_reply_err(req, errmap_reply(ERRMAP_LOOKUP, r));
	else if (fuse_reply_entry(req, &e) != 0)
		bindings_forget(fs->bind, ba->ino, 1);
	atomic_fetch_sub(&fs->binders, 1); /* taken by fs_op_lookup */
}

/* A parked echo lookup is answered (from the pool's threads). */
static void lookup_echo_done(void *ud, int err, const struct binding_attr *ba)
{
	fuse_req_t req = ud;

	reply_echo_entry(req, ctx_of(req), err, ba);
}

void fs_echo_interrupt(fuse_req_t req, void *data)
{
	bindings_cancel(data, req);
}

int fs_req_interrupted(const void *tag)
{
	return fuse_req_interrupted((fuse_req_t)tag);
}

/* On an echo mount, a file's entry is its path's current binding. A lookup
 * that must wait for data is parked and frees this FUSE thread; it is
 * answered later by lookup_echo_done. An INTERRUPT is never lost: the
 * handler is registered first, then the pool asks fs_req_interrupted under
 * its lock right before parking, so an INTERRUPT either is seen there
 * (EINTR now) or finds the lookup parked (bindings_cancel). The check
 * below only saves a trip to the pool. */
static void lookup_echo(fuse_req_t req, struct fs_ctx *fs, uint32_t num)
{
	struct binding_attr ba;
	int r;

	fuse_req_interrupt_func(req, fs_echo_interrupt, fs->bind);
	if (fuse_req_interrupted(req)) {
		reply_echo_entry(req, fs, -EINTR, NULL);
		return;
	}
	/* The requesting thread names the reader (whole-sample visits). */
	r = bindings_lookup_async(fs->bind, num,
				  (uint32_t)fuse_req_ctx(req)->pid, req,
				  lookup_echo_done, req, &ba);
	if (r == -EINPROGRESS)
		return; /* req now belongs to the pool: do not touch it */
	reply_echo_entry(req, fs, r, &ba);
}

/* The class's k-th file's sample, for dataset_echo_stand_in. */
static uint32_t class_sample(const void *ud, uint32_t k)
{
	const struct ns_file *first = ud;
	return first[k].sample;
}

/* The file that stands in for file num, a bad image: the dataset's choice
 * (dataset_echo_stand_in) among the files of its class. UINT32_MAX when
 * the class has no such file. */
static uint32_t good_neighbour(struct fs_ctx *fs, uint32_t num, int local,
			       uint32_t *skipped)
{
	const struct ns_file *f = &fs->ns->files[num];
	const struct ns_class *c;
	uint32_t k;

	if (skipped)
		*skipped = 0;
	if (f->cls == NS_NO_CLASS)
		return UINT32_MAX;
	c = &fs->ns->classes[f->cls];
	k = dataset_echo_stand_in(fs->ds, c->count, num - c->first,
				  class_sample, &fs->ns->files[c->first],
				  local, skipped);
	if (k == UINT32_MAX)
		return UINT32_MAX;
	log_debug("%s/%s is a bad image: answered with %s",
		  ns_dir_name(fs->ns, f->cls), f->name,
		  fs->ns->files[c->first + k].name);
	return c->first + k;
}

/* The path of a bad image is answered with the entry of its
 * good_neighbour, as a hard link would be: on a retired mount (exact when
 * local), which binds nothing and whose kernel opens files itself, and on
 * any echo mount whose neighbour is local, as the pool may have no sample
 * of the class to give until its next pass (every good one served by its
 * own path this pass). Returns 0 or err when there is none (*skipped:
 * good_neighbour's). */
static int stand_in(struct fs_ctx *fs, uint32_t num, struct fuse_entry_param *e,
		    int err, int local, uint32_t *skipped)
{
	uint32_t g = good_neighbour(fs, num, local, skipped);

	if (g == UINT32_MAX ||
	    fill_entry(fs, (fuse_ino_t)ns_file_ino(fs->ns, g), e, 1) != 0)
		return err;
	return 0;
}

/* The entry an echo mount's lookup of file num (inode ino) answers without
 * the pool: its own (exact first, dataset_echo_own, or any path once the
 * mount is exact), or its stand_in when its image is bad. 0 with e filled,
 * -errno to answer, or 1: the pool serves the path. */
static int own_entry(struct fs_ctx *fs, fuse_ino_t ino, uint32_t num,
		     struct fuse_entry_param *e)
{
	uint32_t sample = fs->ns->files[num].sample;
	int exact = atomic_load(&fs->exact_now);
	uint32_t skipped;
	int r = -EIO;

	/* A path bound and not yet opened keeps its binding: a stat and the
	 * open after it (cp) see one inode. */
	if (!exact && bindings_is_bound(fs->bind, num))
		return 1;
	if (exact || dataset_echo_own(fs->ds, sample)) {
		/* A bad image is found here, before the kernel may read the
		 * path (it opens files itself once retired). Any other
		 * failure (a fetch, a timeout) fails this lookup, counted as
		 * a read error, and the next one tries again (issue 50). */
		r = dataset_echo_check_own(fs->ds, sample);
		if (r == 0)
			r = fill_entry(fs, ino, e, 1);
		if (r == 0)
			return 0;
		if (!dataset_echo_known_bad(fs->ds, sample)) {
			count_read_error(fs, num, -r);
			return r;
		}
	} else if (!dataset_echo_known_bad(fs->ds, sample)) {
		return 1;
	}
	r = stand_in(fs, num, e, r, !exact, &skipped);
	/* No local good file of its class: the pool echoes one of the remote
	 * files; a class whose every file is a bad image fails here, as on an
	 * exact mount, instead of waiting for a pool that has none. */
	if (r && !exact && skipped)
		return 1;
	return r;
}

static void fs_op_lookup(fuse_req_t req, fuse_ino_t parent, const char *name)
{
	struct fs_ctx *fs = ctx_of(req);
	struct fuse_entry_param e;
	fuse_ino_t ino = ns_lookup(fs->ns, parent, name);
	uint32_t num;
	int r;

	fs->counters.lookups++;
	if (!ino) {
		/* ino 0: a negative entry, cached like a positive one. */
		memset(&e, 0, sizeof(e));
		e.entry_timeout = fs->timeout;
		fuse_reply_entry(req, &e);
		return;
	}
	/* Echo mounts bind a file to a pool sample, unless its own sample is
	 * on local disk and the mount serves it exactly then (exact first,
	 * dataset_echo_own): the tree's own inode, as on an exact mount, whose
	 * pages the kernel keeps from one epoch to the next. */
	if (fs->bind && ns_kind_of(fs->ns, ino, &num) == NS_FILE) {
		atomic_fetch_add(&fs->binders, 1);
		r = own_entry(fs, ino, num, &e);
		if (r <= 0) {
			atomic_fetch_sub(&fs->binders, 1);
			if (r)
				fuse_reply_err(req,
					       errmap_reply(ERRMAP_LOOKUP, r));
			else
				fuse_reply_entry(req, &e);
			return;
		}
		lookup_echo(req, fs, num);
		return;
	}
	r = fill_entry(fs, ino, &e, 1);
	if (r)
		fuse_reply_err(req, errmap_reply(ERRMAP_LOOKUP, r));
	else
		fuse_reply_entry(req, &e);
}

static void fs_op_getattr(fuse_req_t req, fuse_ino_t ino,
			  struct fuse_file_info *fi)
{
	struct fs_ctx *fs = ctx_of(req);
	struct fuse_entry_param e;
	int r;
	(void)fi;

	r = fill_entry(fs, ino, &e, 0); /* lookups refresh control files */
	if (r)
		fuse_reply_err(req, errmap_reply(ERRMAP_LOOKUP, r));
	else
		fuse_reply_attr(req, &e.attr, e.attr_timeout);
}

static void fs_op_opendir(fuse_req_t req, fuse_ino_t ino,
			  struct fuse_file_info *fi)
{
	struct fs_ctx *fs = ctx_of(req);
	uint32_t num;
	enum ns_kind k = ns_kind_of(fs->ns, ino, &num);

	if (k != NS_ROOT && k != NS_CLASS && k != NS_CONTROL_DIR) {
		fuse_reply_err(req, k == NS_NONE ? ENOENT : ENOTDIR);
		return;
	}
	fi->cache_readdir = 1;
	fi->keep_cache = 1;
	fuse_reply_open(req, fi);
}

/* How often exact when local asks the dataset. Its shard scan stops at the
 * first shard not on disk, so it costs little until nearly all are; 0.2 s
 * leaves a pass at 2,500 files/s (BENCHMARKS §24) about 500 opens. */

/* Whether listings may give own paths their entries (listed_with_entry):
 * dataset_echo_may_retire, asked at most every RETIRE_EVERY_S and the last
 * answer used in between, as it scans every shard and a listing of a
 * million files sends some 30,000 READDIRPLUS requests. */
static int listing_owns(struct fs_ctx *fs)
{
	double now = now_mono();

	if (now >= atomic_load(&fs->listing_next)) {
		atomic_store(&fs->listing_next, now + RETIRE_EVERY_S);
		atomic_store(&fs->listing_own,
			     dataset_echo_may_retire(fs->ds) != 0);
	}
	return atomic_load(&fs->listing_own);
}

/* Whether a READDIRPLUS record of file ino carries its entry, so that the
 * kernel does not look the path up: on an exact mount always; on an echo
 * mount once it is exact, or when it is about to be (own: every shard
 * local, exact when local on, dataset_echo_may_retire; its first OPEN
 * retires it) for a path not bound now. Such a path is served its own
 * sample, as its lookup would answer, but claims nothing in the pool
 * (dataset_echo_own): its open counts it. Listing binds nothing, and a bad
 * image is found at its OPEN (ESTALE: the lookup that follows echoes) or,
 * once the kernel opens files itself, at its READ (read_output). Not for
 * files whose converted size is not known in advance: a listing converts
 * nothing. */
static int listed_with_entry(struct fs_ctx *fs, fuse_ino_t ino, int own)
{
	uint32_t num;

	if (dataset_converts(fs->ds) && dataset_output_fixed_size(fs->ds) < 0)
		return 0;
	if (!fs->bind || atomic_load(&fs->exact_now))
		return 1;
	return own && ns_kind_of(fs->ns, ino, &num) == NS_FILE &&
	       !bindings_is_bound(fs->bind, num);
}

/* Fill buf with entries starting at off (0 ".", 1 "..", then the listing),
 * plain or "plus" (with attributes, counted as lookups by the kernel; the
 * static tree keeps no per-inode state, so its forgets are ignored).
 * Returns the bytes used. */
static size_t fill_dir(fuse_req_t req, struct fs_ctx *fs, fuse_ino_t ino,
		       off_t off, char *buf, size_t size, int plus)
{
	size_t used = 0;
	int own = plus && fs->bind && !atomic_load(&fs->exact_now) &&
		  listing_owns(fs);

	for (size_t j = (size_t)off;; j++) {
		struct fuse_entry_param e = {0};
		const char *name;
		int is_dir = 1;
		size_t need;

		if (j < 2) {
			name = j == 0 ? "." : "..";
			e.attr.st_ino = j == 0 ? ino : NS_INO_ROOT;
		} else {
			e.attr.st_ino = ns_list(fs->ns, ino, j - 2, &name, &is_dir);
			if (!e.attr.st_ino)
				break;
		}
		e.attr.st_mode = is_dir ? S_IFDIR : S_IFREG;
		/* Other files: a name only (ino 0). */
		if (plus && j >= 2 &&
		    (is_dir || listed_with_entry(fs, e.attr.st_ino, own)))
			fill_entry(fs, e.attr.st_ino, &e, 0);
		need = plus ? fuse_add_direntry_plus(req, buf + used, size - used,
						     name, &e, (off_t)(j + 1))
			    : fuse_add_direntry(req, buf + used, size - used,
						name, &e.attr, (off_t)(j + 1));
		if (need > size - used)
			break;
		used += need;
	}
	return used;
}

static void do_readdir(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off,
		       int plus)
{
	struct fs_ctx *fs = ctx_of(req);
	char *buf;

	if (size > 1 << 20)
		size = 1 << 20;
	buf = malloc(size);
	if (!buf) {
		fuse_reply_err(req, ENOMEM);
		return;
	}
	fuse_reply_buf(req, buf, fill_dir(req, fs, ino, off, buf, size, plus));
	free(buf);
}

static void fs_op_readdir(fuse_req_t req, fuse_ino_t ino, size_t size,
			  off_t off, struct fuse_file_info *fi)
{
	(void)fi;
	do_readdir(req, ino, size, off, 0);
}

static void fs_op_readdirplus(fuse_req_t req, fuse_ino_t ino, size_t size,
			      off_t off, struct fuse_file_info *fi)
{
	(void)fi;
	do_readdir(req, ino, size, off, 1);
}

/* Only the mounting user steers a mount: the daemon checks the caller
 * itself instead of trusting default_permissions alone. */
static void fs_op_open(fuse_req_t req, fuse_ino_t ino,
		       struct fuse_file_info *fi)
{
	struct fs_ctx *fs = ctx_of(req);
	uint32_t num;

	fs->counters.opens++;
	if (fs->bind) {
		fs_open_echo(req, fs, ino, fi);
		return;
	}
	if ((fi->flags & O_ACCMODE) != O_RDONLY) {
		fuse_reply_err(req, EROFS);
		return;
	}
	switch (ns_kind_of(fs->ns, ino, &num)) {
	case NS_FILE:
	case NS_CONTROL_FILE:
		/* No per-open state: let the kernel open files itself. */
		fuse_reply_err(req, ENOSYS);
		return;
	case NS_NONE:
		fuse_reply_err(req, ENOENT);
		return;
	default:
		fuse_reply_err(req, EISDIR);
		return;
	}
}

/* The last close of a config handle: its unfinished last line applies now
 * (RELEASE cannot fail the close: a bad one is logged). Not at FLUSH: a
 * flush handler would cost exact mounts a FLUSH round trip on every close
 * of a file the kernel opened itself (no_open sends no FOPEN_NOFLUSH). */
static void config_close(struct fs_ctx *fs, struct control_cfgbuf *b)
{
	char err[256];

	if (!b)
		return;
	if (control_configure_close(fs->ctl, b, err, sizeof(err)) != 0)
		log_warn(".echofs/config: last line at close: %s", err);
	else
		snap_drop(fs, NS_INO_CONFIG);
	control_cfgbuf_free(b);
}

static void fs_op_release(fuse_req_t req, fuse_ino_t ino,
			  struct fuse_file_info *fi)
{
	struct fs_ctx *fs = ctx_of(req);

	if (ino == NS_INO_CONFIG)
		config_close(fs, (struct control_cfgbuf *)(uintptr_t)fi->fh);
	else if (fs->bind && fi->fh)
		bindings_release(fs->bind, (struct binding *)(uintptr_t)fi->fh);
	fuse_reply_err(req, 0);
}

static void fs_op_forget(fuse_req_t req, fuse_ino_t ino, uint64_t nlookup)
{
	struct fs_ctx *fs = ctx_of(req);
	if (fs->bind && bindings_owns(fs->bind, ino))
		bindings_forget(fs->bind, ino, nlookup);
	fuse_reply_none(req);
}

static void fs_op_forget_multi(fuse_req_t req, size_t count,
			       struct fuse_forget_data *forgets)
{
	struct fs_ctx *fs = ctx_of(req);
	for (size_t i = 0; fs->bind && i < count; i++)
			bindings_forget(fs->bind, forgets[i].ino,
					forgets[i].nlookup);
	fuse_reply_none(req);
}

/* Only .echofs/config takes writes (echo mounts); O_TRUNC arrives as a
 * setattr of size 0, which changes nothing. */
static void fs_op_setattr(fuse_req_t req, fuse_ino_t ino, struct stat *attr,
			  int to_set, struct fuse_file_info *fi)
{
	struct fs_ctx *fs = ctx_of(req);
	struct fuse_entry_param e;
	(void)attr;
	(void)fi;

	if (!fs->bind || ino != NS_INO_CONFIG || (to_set & ~FUSE_SET_ATTR_SIZE)) {
		fuse_reply_err(req, EROFS);
		return;
	}
	if (fs_may_steer(req, fs) != 0) {
		fuse_reply_err(req, EACCES);
		return;
	}
	if (fill_entry(fs, ino, &e, 1) != 0) {
		fuse_reply_err(req, ENOMEM);
		return;
	}
	fuse_reply_attr(req, &e.attr, 0);
}

static void fs_op_write(fuse_req_t req, fuse_ino_t ino, const char *buf,
			size_t size, off_t off, struct fuse_file_info *fi)
{
	struct fs_ctx *fs = ctx_of(req);
	char err[256];
	int r;
	struct control_cfgbuf *cb = (struct control_cfgbuf *)(uintptr_t)fi->fh;
	(void)off;

	if (ino != NS_INO_CONFIG) {
		fuse_reply_err(req, EROFS);
		return;
	}
	if ((r = fs_may_steer(req, fs)) != 0) {
		fuse_reply_err(req, errmap_reply(ERRMAP_WRITE, r));
		return;
	}
	if (cb) /* an echo mount's handle: lines may be split over writes */
		r = control_configure_write(fs->ctl, cb, buf, size, err,
					    sizeof(err));
	else
		r = control_configure(fs->ctl, buf, size, err, sizeof(err));
	if (r) {
		log_warn(".echofs/config: %s", err);
		fuse_reply_err(req, errmap_reply(ERRMAP_WRITE, r));
		return;
	}
	size_t shown = size < 200 ? size : 200;
	while (shown && (buf[shown - 1] == '\n' || buf[shown - 1] == '\r'))
		shown--;
	log_info(".echofs/config: %.*s", (int)shown, buf);
	snap_drop(fs, NS_INO_CONFIG); /* the next read shows the change */
	fuse_reply_write(req, size);
}

/* Nothing can be created, removed or renamed. */
static void fs_op_mknod(fuse_req_t req, fuse_ino_t parent, const char *name,
			mode_t mode, dev_t rdev)
{
	(void)parent, (void)name, (void)mode, (void)rdev;
	fuse_reply_err(req, EROFS);
}

static void fs_op_mkdir(fuse_req_t req, fuse_ino_t parent, const char *name,
			mode_t mode)
{
	(void)parent, (void)name, (void)mode;
	fuse_reply_err(req, EROFS);
}

static void fs_op_unlink(fuse_req_t req, fuse_ino_t parent, const char *name)
{
	(void)parent, (void)name;
	fuse_reply_err(req, EROFS);
}

static void fs_op_rename(fuse_req_t req, fuse_ino_t parent, const char *name,
			 fuse_ino_t newparent, const char *newname,
			 unsigned int flags)
{
	(void)parent, (void)name, (void)newparent, (void)newname, (void)flags;
	fuse_reply_err(req, EROFS);
}

static void fs_op_create(fuse_req_t req, fuse_ino_t parent, const char *name,
			 mode_t mode, struct fuse_file_info *fi)
{
	(void)parent, (void)name, (void)mode, (void)fi;
	fuse_reply_err(req, EROFS);
}

#define XATTR_SOURCE "user.echofs.source"

/* The sample the tree's own inode of file num serves on an echo mount:
 * its own, or when its image is bad (found at a READ of a path listed
 * with its entry, listed_with_entry) its good_neighbour's: every output
 * has one size there, so those bytes fit the attributes the kernel holds.
 * 0, or the error of making its own output when the image is not bad (a
 * fetch, a timeout: it fails this READ only; *sample is its own). */
static int own_inode_sample(struct fs_ctx *fs, uint32_t num, uint32_t *sample)
{
	uint32_t g;
	int r;

	*sample = fs->ns->files[num].sample;
	if (!fs->bind || dataset_output_fixed_size(fs->ds) < 0)
		return 0;
	r = dataset_echo_check_own(fs->ds, *sample);
	if (r == 0 || !dataset_echo_known_bad(fs->ds, *sample))
		return r;
	g = good_neighbour(fs, num, 0, NULL);
	if (g != UINT32_MAX)
		*sample = fs->ns->files[g].sample;
	return 0;
}

/* The sample an echo mount's file ino serves: its binding's, or its own
 * inode's (own_inode_sample). 0 or -ENODATA. */
static int echo_source(struct fs_ctx *fs, fuse_ino_t ino, uint32_t *sample)
{
	uint32_t num;

	if (!fs->bind)
		return -ENODATA;
	if (ns_kind_of(fs->ns, ino, &num) == NS_FILE) {
		/* A failure of the moment names its own: the path's. */
		(void)own_inode_sample(fs, num, sample);
		return 0;
	}
	if (!bindings_owns(fs->bind, ino) ||
	    bindings_source(fs->bind, ino, sample) != 0)
		return -ENODATA;
	return 0;
}

/* user.echofs.source of an echo file: the source sample's key. */
static void fs_op_getxattr(fuse_req_t req, fuse_ino_t ino, const char *name,
			   size_t size)
{
	struct fs_ctx *fs = ctx_of(req);
	uint32_t sample;
	const char *key;
	size_t len;

	if (strcmp(name, XATTR_SOURCE) != 0 ||
	    echo_source(fs, ino, &sample) != 0) {
		fuse_reply_err(req, ENODATA);
		return;
	}
	key = dataset_key(fs->ds, sample);
	len = strlen(key);
	if (size == 0)
		fuse_reply_xattr(req, len);
	else if (size < len)
		fuse_reply_err(req, ERANGE);
	else
		fuse_reply_buf(req, key, len);
}

static void fs_op_listxattr(fuse_req_t req, fuse_ino_t ino, size_t size)
{
	struct fs_ctx *fs = ctx_of(req);
	static const char names[] = XATTR_SOURCE;
	uint32_t sample;
	size_t len = echo_source(fs, ino, &sample) == 0 ? sizeof(names) : 0;

	if (size == 0)
		fuse_reply_xattr(req, len);
	else if (size < len)
		fuse_reply_err(req, ERANGE);
	else
		fuse_reply_buf(req, names, len);
}

/* A READ of a preprocessed file: a slice of its output, or on an echo
 * mount its own_inode_sample's. */
static void read_output(fuse_req_t req, struct fs_ctx *fs, uint32_t file,
			size_t size, off_t off)
{
	struct dataset_output *o;
	uint32_t sample;
	int r = own_inode_sample(fs, file, &sample);

	if (r == 0)
		r = dataset_output_get(fs->ds, sample, &o);
	if (r) {
		count_read_error(fs, file, -r);
		fuse_reply_err(req, errmap_reply(ERRMAP_READ, r));
		return;
	}
	size_t len = dataset_output_len(o);
	size_t start = (uint64_t)off < len ? (size_t)off : len;
	size_t n = len - start < size ? len - start : size;
	fs->counters.bytes_served += n;
	fuse_reply_buf(req, (const char *)dataset_output_data(o) + start, n);
	dataset_output_put(fs->ds, o);
}

/* Read a sample's bytes into a new buffer. Returns the length or -errno. */
static ssize_t read_sample(struct fs_ctx *fs, uint32_t file, size_t size,
			   off_t off, char **out)
{
	uint32_t sample = fs->ns->files[file].sample;
	uint64_t len = dataset_size(fs->ds, sample);

	*out = NULL;
	if (off < 0 || (uint64_t)off >= len)
		return 0;
	if (size > len - (uint64_t)off)
		size = (size_t)(len - (uint64_t)off);
	*out = malloc(size);
	if (!*out)
		return -ENOMEM;
	return dataset_read(fs->ds, sample, (uint64_t)off, size, *out);
}

static void read_control(fuse_req_t req, struct fs_ctx *fs, fuse_ino_t ino,
			 size_t size, off_t off)
{
	struct control_snapshot *sn = snap_get(fs, ino, 0);
	size_t o, n;

	if (!sn) {
		fuse_reply_err(req, ENOMEM);
		return;
	}
	o = (size_t)off < sn->len ? (size_t)off : sn->len;
	n = sn->len - o < size ? sn->len - o : size;
	fuse_reply_buf(req, sn->buf + o, n);
	snap_unref(fs, sn);
}

/* A cold READ of a whole sample that sits in a verified cache file, or in
 * the temp file of a shard still downloading once its bytes arrived: the
 * reply splices it from that file (no copy through our memory when the
 * kernel takes splice, FUSE_CAP_SPLICE_WRITE). The bytes were hashed
 * against the index just before (dataset_read_span) and the file stays
 * pinned (or the download's commit waits) until the reply is written.
 * Returns 1 if it answered req. */
static int read_span(fuse_req_t req, struct fs_ctx *fs, uint32_t file,
		     size_t size, off_t off)
{
	uint32_t sample = fs->ns->files[file].sample;
	struct fuse_bufvec bv = FUSE_BUFVEC_INIT(0);
	struct dataset_span sp;
	int r;

	if (off != 0 || dataset_read_span(fs->ds, sample, 0, size, &sp) != 0)
		return 0;
	bv.buf[0].size = sp.len;
	bv.buf[0].flags = FUSE_BUF_IS_FD | FUSE_BUF_FD_SEEK;
	bv.buf[0].fd = sp.fd;
	bv.buf[0].pos = (off_t)sp.pos;
	/* libfuse falls back to copying when splice fails; what it still
	 * returns is a reply that could not be made or sent. ENOENT: the
	 * request was interrupted, the reader gone, no read error. */
	r = fuse_reply_data(req, &bv, 0);
	if (r == 0)
		fs->counters.bytes_served += sp.len;
	else if (r != -ENOENT)
		count_read_error(fs, file, -r);
	dataset_span_done(fs->ds, &sp);
	push_touch(fs->push, dataset_group(fs->ds, sample));
	return 1;
}

static void fs_op_read(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off,
		       struct fuse_file_info *fi)
{
	struct fs_ctx *fs = ctx_of(req);
	uint32_t num;
	char *buf;
	ssize_t r;

	fs->counters.reads++;
	switch (ns_kind_of(fs->ns, ino, &num)) {
	case NS_CONTROL_FILE:
		read_control(req, fs, ino, size, off);
		return;
	case NS_FILE:
		if (dataset_converts(fs->ds)) {
			read_output(req, fs, num, size, off);
			return;
		}
		break;
	default:
		if (fs->bind && fi->fh) {
			struct binding *h = (struct binding *)(uintptr_t)fi->fh;
			const void *data = NULL;
			r = bindings_read(fs->bind, h, (uint64_t)off, size, &data);
			if (r < 0) {
				fuse_reply_err(req, errmap_reply(ERRMAP_READ, (int)r));
				return;
			}
			fs->counters.bytes_served += (uint64_t)r;
			fuse_reply_buf(req, data, (size_t)r);
			bindings_read_done(fs->bind, h);
		} else {
			fuse_reply_err(req, EISDIR);
		}
		return;
	}
	if (read_span(req, fs, num, size, off))
		return;
	r = read_sample(fs, num, size, off, &buf);
	if (r < 0) {
		count_read_error(fs, num, (int)-r);
		fuse_reply_err(req, errmap_reply(ERRMAP_READ, (int)r));
	} else {
		fs->counters.bytes_served += (uint64_t)r;
		fuse_reply_buf(req, buf, (size_t)r);
		push_touch(fs->push,
			   dataset_group(fs->ds, fs->ns->files[num].sample));
	}
	free(buf);
}

static void fs_op_statfs(fuse_req_t req, fuse_ino_t ino)
{
	struct fs_ctx *fs = ctx_of(req);
	struct statvfs sv;
	uint64_t bytes = dataset_total_bytes(fs->ds);
	(void)ino;

	memset(&sv, 0, sizeof(sv));
	sv.f_bsize = sv.f_frsize = 4096;
	sv.f_blocks = (bytes + 4095) / 4096;
	sv.f_files = fs->ns->nfiles + fs->ns->nclasses + NS_INO_FIRST_CLASS;
	sv.f_namemax = 255;
	sv.f_flag = ST_RDONLY | ST_NOSUID | ST_NODEV;
	fuse_reply_statfs(req, &sv);
}

/* CPython 3.11 calls isatty() (ioctl TCGETS) on every open(), and the
 * kernel forwards every ioctl on a FUSE file as FUSE_IOCTL: it remembers
 * no answer (fs/fuse/ioctl.c turns ENOSYS into ENOTTY each time, no
 * no_ioctl flag) and no FOPEN_ or INIT flag keeps an ioctl local. So the
 * round trip stays; this answers it first thing: one atomic add, no lock,
 * no allocation (see BENCHMARKS.md, "The Python open"). */
static void fs_op_ioctl(fuse_req_t req, fuse_ino_t ino, unsigned int cmd,
			void *arg, struct fuse_file_info *fi, unsigned flags,
			const void *in_buf, size_t in_bufsz, size_t out_bufsz)
{
	(void)ino, (void)cmd, (void)arg, (void)fi, (void)flags;
	(void)in_buf, (void)in_bufsz, (void)out_bufsz;
	ctx_of(req)->counters.ioctls++; /* before the reply frees req */
	fuse_reply_err(req, ENOTTY);
}

static void fs_op_init(void *userdata, struct fuse_conn_info *conn)
{
	struct fs_ctx *fs = userdata;

	/* Zero-copy READ replies (read_span) splice from cache files. No
	 * SPLICE_MOVE: the kernel would try to steal the cache file's page
	 * cache pages, which must stay where they are. */
	if (fs->zerocopy && (conn->capable & FUSE_CAP_SPLICE_WRITE))
		conn->want |= FUSE_CAP_SPLICE_WRITE;
	/* Every listing as READDIRPLUS: it answers the lookups that follow. */
	if (conn->capable & FUSE_CAP_READDIRPLUS)
		conn->want |= FUSE_CAP_READDIRPLUS;
	conn->want &= ~(unsigned)FUSE_CAP_READDIRPLUS_AUTO;
	if (conn->capable & FUSE_CAP_AUTO_INVAL_DATA)
		conn->want |= FUSE_CAP_AUTO_INVAL_DATA;
	/* The kernel keeps min(this, the mount's read_ahead_kb), which main.c
	 * raises before this INIT is answered: one READ per file up to 1 MB. */
	conn->max_readahead = FS_READAHEAD;
	if (!(conn->capable & FUSE_CAP_NO_OPEN_SUPPORT))
		log_warn("kernel without FUSE no_open support: every open "
			 "costs a request");
}

const struct fuse_lowlevel_ops fs_ops = {
	.init = fs_op_init,
	.lookup = fs_op_lookup,
	.getattr = fs_op_getattr,
	.opendir = fs_op_opendir,
	.readdir = fs_op_readdir,
	.readdirplus = fs_op_readdirplus,
	.forget = fs_op_forget,
	.forget_multi = fs_op_forget_multi,
	.setattr = fs_op_setattr,
	.open = fs_op_open,
	.read = fs_op_read,
	.ioctl = fs_op_ioctl,
	.write = fs_op_write,
	.release = fs_op_release,
	.getxattr = fs_op_getxattr,
	.mknod = fs_op_mknod,
	.mkdir = fs_op_mkdir,
	.unlink = fs_op_unlink,
	.rmdir = fs_op_unlink,
	.rename = fs_op_rename,
	.create = fs_op_create,
	.listxattr = fs_op_listxattr,
	.statfs = fs_op_statfs,
};
