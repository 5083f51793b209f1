/* ops_open.c - OPEN on echo mounts: control files, paths served their own
 * sample, bindings (bound at lookup or at open, fs/bindings.h), and going
 * exact for good once every shard is local ("Exact when local" at the top
 * of fs/ops.c). */
#include "fs/ops_int.h"

#include <errno.h>
#include <fcntl.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>

#include "cache/dataset.h"
#include "common/log.h"
#include "common/util.h"
#include "fs/bindings.h"
#include "fs/errmap.h"
#include "fs/namespace.h"

int fs_may_steer(fuse_req_t req, const struct fs_ctx *fs)
{
	const struct fuse_ctx *c = fuse_req_ctx(req);
	if (c->uid == fs->uid)
		return 0;
	log_warn(".echofs/config: write by uid %u refused (mount of uid %u)",
		 (unsigned)c->uid, (unsigned)fs->uid);
	return -EACCES;
}

/* Fill a binding's page cache before its first OPEN is answered, so that
 * the reader's read() finds the pages and no READ reaches the daemon: one
 * round trip fewer per echo serve. The bytes are the binding's own
 * (bindings_read: the rendering or the sample, the same a READ gets), and
 * keep_cache stops the kernel from dropping them at this open. Not at
 * lookup: the kernel makes the inode only when the looking-up task wakes
 * after the entry reply, so a store sent right behind that reply races
 * with it and finds no inode (ENOENT); at OPEN the inode is held. Up to
 * FS_READAHEAD bytes: what the first read() would fetch ahead anyway. A
 * failed or refused store costs nothing but the READs it would have saved. */
int fs_store_binding(void *ud, uint64_t ino, struct binding *h, uint64_t size)
{
	struct fs_ctx *fs = ud;
	const void *data = NULL;
	ssize_t n;
	int r;

	if (!fs->se || atomic_load(&fs->no_store))
		return -ENOSYS;
	n = bindings_read(fs->bind, h, 0, (size_t)size, &data);
	if (n < 0)
		return (int)n; /* the READ that follows reports it */
	struct fuse_bufvec bv = FUSE_BUFVEC_INIT((size_t)n);
	bv.buf[0].mem = (void *)data;
	/* No splice: a store of a binding at open may run in the echo pool's
	 * thread that made the sample ready, and libfuse keeps a splice pipe
	 * per calling thread, freed only by a thread-key destructor that
	 * never runs for threads outliving the session (two fds and 24 bytes
	 * each, found by LeakSanitizer). From memory, writev copies once, as
	 * the splice path would. */
	r = fuse_lowlevel_notify_store(fs->se, ino, 0, &bv, FUSE_BUF_NO_SPLICE);
	bindings_read_done(fs->bind, h);
	if (r == 0)
		fs->counters.echo_stores++;
	else if (r == -ENOSYS)
		atomic_store(&fs->no_store, 1);
	return r;
}

static void store_echo(struct fs_ctx *fs, fuse_ino_t ino, struct binding *h)
{
	uint64_t size;

	if (bindings_take_store(fs->bind, h, FS_READAHEAD, &size))
		fs_store_binding(fs, ino, h, size);
}

/* Answer the open of binding h: r 0 (its pages are its own: keep them), 1
 * (drop them) or -errno. */
static void reply_binding_open(fuse_req_t req, struct fs_ctx *fs,
			       struct fuse_file_info *fi, int r,
			       struct binding *h)
{
	if (r < 0) {
		fuse_reply_err(req, errmap_reply(ERRMAP_OPEN, r));
		return;
	}
	fi->fh = (uint64_t)(uintptr_t)h;
	fi->keep_cache = r == 0;
	fi->noflush = 1;
	if (fuse_reply_open(req, fi) == -ENOENT)
		/* The opener was interrupted: no release will come. */
		bindings_release(fs->bind, h);
}

/* A parked echo open (binding at open): its request and open flags. */
struct echo_open {
	fuse_req_t req;
	struct fuse_file_info fi;
};

/* A parked echo open is answered (from the pool's threads). */
static void open_echo_done(void *ud, int r, struct binding *h)
{
	struct echo_open *eo = ud;

	reply_binding_open(eo->req, ctx_of(eo->req), &eo->fi, r, h);
	free(eo);
}

/* Open binding ino: at once, or parked when the open binds a sample that
 * is not ready (bindings.h, binding at open); the INTERRUPT rule of
 * lookup_echo holds here too. */
static void open_binding(fuse_req_t req, struct fs_ctx *fs, fuse_ino_t ino,
			 struct fuse_file_info *fi)
{
	struct echo_open *eo;
	struct binding *h = NULL;
	uint32_t file;
	int r;

	fuse_req_interrupt_func(req, fs_echo_interrupt, fs->bind);
	if (fuse_req_interrupted(req)) {
		fuse_reply_err(req, EINTR);
		return;
	}
	if (!bindings_binds_at_open(fs->bind)) {
		/* Bound at lookup: never waits; the first open stores the
		 * pages. */
		r = bindings_open(fs->bind, ino, &h);
		if (r == 0)
			store_echo(fs, ino, h);
		reply_binding_open(req, fs, fi, r, h);
		return;
	}
	/* The path was looked up while its sample was remote, and the kernel
	 * keeps that entry: once the sample is local (exact first), the open
	 * answers ESTALE instead of taking, the kernel looks the path up
	 * again, and the lookup answers the tree's own inode. */
	if (bindings_would_take(fs->bind, ino, &file) &&
	    dataset_echo_own(fs->ds, fs->ns->files[file].sample)) {
		fuse_reply_err(req, ESTALE);
		return;
	}
	eo = xmalloc(sizeof(*eo));
	*eo = (struct echo_open){.req = req, .fi = *fi};
	r = bindings_open_async(fs->bind, ino, req, open_echo_done, eo, &h);
	if (r == -EINPROGRESS)
		return; /* req and eo belong to the pool now */
	free(eo);
	reply_binding_open(req, fs, fi, r, h);
}

/* Exact when local (see the top of this file): 1 when this open of a path
 * served its own sample may be answered ENOSYS. Asked at most every
 * RETIRE_EVERY_S, by one open at a time, until it says yes; then always
 * yes (OPENs already on their way when the kernel set no_open). Only
 * `retired` says yes to other opens: exact_now is set while an open asks
 * and cleared when the answer is no, so an open that saw it set must not
 * conclude anything. */
static int retire_now(struct fs_ctx *fs)
{
	struct bindings_stats bs;
	double now = now_mono();
	int yes = 0;

	if (atomic_load(&fs->retired))
		return 1;
	if (now < atomic_load(&fs->retire_next) ||
	    atomic_exchange(&fs->asking, 1))
		return 0;
	atomic_store(&fs->retire_next, now + RETIRE_EVERY_S);
	if (dataset_echo_may_retire(fs->ds)) {
		atomic_store(&fs->exact_now, 1);
		bindings_get_stats(fs->bind, &bs);
		yes = atomic_load(&fs->binders) == 0 && bs.live == 0 &&
		      bs.open == 0;
		if (yes) {
			dataset_echo_retire(fs->ds);
			atomic_store(&fs->retired, 1);
			log_info(
				"every shard is on local disk: the mount "
				"serves every path its own sample from now on, "
				"as an exact mount (exact_when_local)");
		} else {
			atomic_store(&fs->exact_now, 0);
		}
	}
	atomic_store(&fs->asking, 0);
	return yes;
}

/* Echo mounts open files for real: control files here, bindings in
 * open_binding. The bytes of an open binding do not change while it is
 * open; its pages are its own (keep_cache) unless bindings_open says to
 * drop them. */
void fs_open_echo(fuse_req_t req, struct fs_ctx *fs, fuse_ino_t ino,
		  struct fuse_file_info *fi)
{
	uint32_t num;
	int r = 0;

	if (ns_kind_of(fs->ns, ino, &num) == NS_CONTROL_FILE) {
		if ((fi->flags & O_ACCMODE) != O_RDONLY && ino != NS_INO_CONFIG)
			r = -EACCES;
		else if ((fi->flags & O_ACCMODE) != O_RDONLY)
			r = fs_may_steer(req, fs);
		fi->direct_io = 1;
		if (r == 0 && (fi->flags & O_ACCMODE) != O_RDONLY)
			/* Lines split over writes join here (control.h). */
			fi->fh = (uint64_t)(uintptr_t)control_cfgbuf_new();
	} else if (ns_kind_of(fs->ns, ino, &num) == NS_FILE) {
		/* A path served its own sample (exact first): its bytes never
		 * change, so its pages are kept, as an exact mount's are. */
		if ((fi->flags & O_ACCMODE) != O_RDONLY) {
			r = -EROFS;
		} else if (dataset_echo_open_own(fs->ds,
						 fs->ns->files[num].sample)) {
			/* A bad image: the kernel looks the path up again
			 * (ESTALE), and that lookup takes from the pool. */
			r = -ESTALE;
		} else if (retire_now(fs)) {
			/* see "Exact when local" at the top of ops.c */
			fuse_reply_err(req, ENOSYS);
			return;
		} else {
			fi->keep_cache = 1;
			fi->noflush = 1;
		}
	} else if (!bindings_owns(fs->bind, ino)) {
		r = -EISDIR;
	} else if ((fi->flags & O_ACCMODE) != O_RDONLY) {
		r = -EROFS;
	} else {
		open_binding(req, fs, ino, fi);
		return;
	}
	if (r)
		fuse_reply_err(req, errmap_reply(ERRMAP_OPEN, r));
	else if (fuse_reply_open(req, fi) == -ENOENT && ino == NS_INO_CONFIG)
		/* The opener was interrupted: no release will come. */
		control_cfgbuf_free((struct control_cfgbuf *)(uintptr_t)fi->fh);
}
