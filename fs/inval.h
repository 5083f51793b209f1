/* inval.h - on echo mounts, ask the kernel to drop the entry of a path
 * whose binding is done (released, or expired unopened), so that it
 * forgets the binding's inode soon and the binding lets its sample go.
 *
 * DESIGN
 * - A binding keeps its sample until the kernel forgets its inode
 *   (fs/bindings.h): an OPEN that the kernel sends for an inode it looked
 *   up earlier always finds the sample it was told about, whatever other
 *   opens of the path did meanwhile. The kernel keeps a path's entry (and
 *   with it the inode) until the path is walked again or memory runs
 *   short; dropping the entry of a done binding bounds what is held to the
 *   bindings in use and those done a moment ago.
 * - fuse_lowlevel_notify_inval_entry takes the directory's lock in the
 *   kernel, which a LOOKUP in that directory may hold while it waits for a
 *   FUSE worker: it is never called from a request handler. One thread
 *   (a one-worker common/workq) sends them; inval_path only queues.
 * - An entry dropped while another reader is between its LOOKUP and OPEN
 *   does not hurt that reader: it holds the inode, the binding keeps its
 *   sample, and the FORGET comes after its last use.
 * - Locking: only the work queue's mutex.
 */
#ifndef ECHOFS_INVAL_H
#define ECHOFS_INVAL_H

#include "common/attrs.h"
#include <stdint.h>

struct fuse_session;
struct namespace;
struct inval;

struct inval_stats {
	uint64_t sent;   /* entries the kernel dropped */
	uint64_t absent; /* entries the kernel no longer had */
};

/* se and ns borrowed; must outlive the result. Starts the thread. 0 with
 * *out set, or -errno with *out NULL. */
MUST_CHECK
int inval_open(struct fuse_session *se, const struct namespace *ns,
	       struct inval **out);
/* Drops what is queued and stops the thread: nothing is sent from now on
 * (before the session goes); inval_path may still be called. Accepts
 * NULL. */
void inval_stop(struct inval *v);
/* inval_stop, then frees, once nothing can call inval_path. Accepts NULL. */
void inval_free(struct inval *v);

/* Queue the dropping of namespace file `file`'s entry. Never blocks; a
 * call that cannot queue (memory, shutdown) does nothing: the entry then
 * goes the kernel's usual way. ud is a struct inval (the bindings hook). */
void inval_path(void *ud, uint32_t file);

void inval_get_stats(struct inval *v, struct inval_stats *out);

#endif
