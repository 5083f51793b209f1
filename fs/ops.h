/* ops.h - the FUSE request handlers (low-level API). */
#ifndef ECHOFS_OPS_H
#define ECHOFS_OPS_H

#define FUSE_USE_VERSION 314
#include <fuse_lowlevel.h>

#include <pthread.h>
#include <stdatomic.h>

#include "fs/control.h"

struct namespace;
struct dataset;
struct control_snapshot;
struct push;
struct bindings;

/* The filesystem's state, passed as the session's userdata. Everything is
 * borrowed; the tree never changes and the counters are atomics, so
 * handlers take no lock of their own except snap_lock, which guards the
 * control files' cached renderings (held only to swap or reference one,
 * never while rendering or replying). */
struct fs_ctx {
	const struct namespace *ns;
	struct dataset *ds;
	struct control *ctl;
	struct push *push; /* page-cache pusher, or NULL */
	struct bindings *bind; /* echo mounts: path bindings, else NULL */
	struct fuse_session *se; /* for page-cache invalidations */
	struct fs_counters counters;
	/* per file of ns: its read error is counted already (the kernel
	 * retries a failed read); NULL counts every failed read */
	_Atomic unsigned char *read_failed;
	int zerocopy; /* cold reads spliced from cache files (-o zerocopy) */
	atomic_bool no_store; /* the kernel refused a notify_store */
	/* Echo mounts, exact when local (see ops.c): retired once an OPEN
	 * was answered ENOSYS; exact_now while an open asks and from then
	 * on (lookups bind nothing); asking: an open is asking (one at a
	 * time); binders counts lookups that may bind a path (until
	 * answered); retire_next: when to ask again (now_mono);
	 * listing_own: the last answer for listings (listing_owns), asked
	 * again from listing_next. */
	atomic_bool retired;
	atomic_bool exact_now;
	atomic_bool asking;
	atomic_int binders;
	_Atomic double retire_next;
	atomic_bool listing_own;
	_Atomic double listing_next;
	double timeout;       /* entry and attribute cache timeout, seconds */
	struct timespec mtime; /* of every inode: the mount time */
	uid_t uid;
	gid_t gid;
	/* The latest rendering of each control file; see ops.c. */
	pthread_mutex_t snap_lock;
	struct control_snapshot *snap[3]; /* guarded by snap_lock */
};

/* Read-ahead asked for the mount (bytes): FUSE's largest request, 256
 * pages, so a whole file up to 1 MB comes in one READ. */
#define FS_READAHEAD (1u << 20)

void fs_ctx_init(struct fs_ctx *fs);
void fs_ctx_destroy(struct fs_ctx *fs);

extern const struct fuse_lowlevel_ops fs_ops;

struct binding;
/* bindings_store_fn of echo mounts that bind at open (ud: the fs_ctx):
 * notify_store of the binding's bytes. */
int fs_store_binding(void *ud, uint64_t ino, struct binding *h, uint64_t size);

/* dataset_echo_opts.interrupted for echo lookups, whose tag is their fuse_req_t. */
int fs_req_interrupted(const void *tag);

#endif
