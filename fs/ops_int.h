/* ops_int.h - what fs/ops.c (the request handlers) and fs/ops_open.c
 * (OPEN on echo mounts) share. Internal: only those two include it. */
#ifndef ECHOFS_OPS_INT_H
#define ECHOFS_OPS_INT_H

#include "fs/ops.h"

/* How often an echo mount asks dataset_echo_may_retire, at most. */
#define RETIRE_EVERY_S 0.2

static inline struct fs_ctx *ctx_of(fuse_req_t req)
{
	return fuse_req_userdata(req);
}

/* INTERRUPT for a lookup or an open: answered EINTR at once if it is
 * parked (libfuse keeps req alive while this runs, so it can name it). */
void fs_echo_interrupt(fuse_req_t req, void *data);

/* 0 if the request's user may write .echofs/config (the mount's owner),
 * else -EACCES, logged. */
int fs_may_steer(fuse_req_t req, const struct fs_ctx *fs);

/* OPEN on an echo mount: replies exactly once, maybe later (a parked
 * open, binding at open). */
void fs_open_echo(fuse_req_t req, struct fs_ctx *fs, fuse_ino_t ino,
		  struct fuse_file_info *fi);

#endif
