/* inval.h - on echo mounts, ask the kernel to drop the entry of a path
 * whose binding is done (released, or expired unopened), so that the next
 * open of the path costs one LOOKUP.
 *
 * DESIGN
 * - A done binding's inode is not the path's any more (fs/bindings.h):
 *   with the entry still cached, the next walk of the path revalidates it
 *   (a LOOKUP that finds another node id) and looks it up again (a second
 *   LOOKUP). Dropping the entry when the binding is done makes that one
 *   plain LOOKUP. It is an economy, not a rule: readers see the same
 *   files whether the entry is dropped or not.
 * - fuse_lowlevel_notify_inval_entry takes the directory's lock in the
 *   kernel, which a LOOKUP in that directory holds while it waits for a
 *   FUSE worker or for the pool: it is never called from a request
 *   handler, and not while a take is parked in the pool (the notification
 *   would wait for that lookup, and every new lookup of the directory
 *   behind it: a whole class stalled on one parked lookup). One thread (a
 *   one-worker common/workq) sends them; inval_path only queues.
 * - An entry dropped while another reader is between its LOOKUP and OPEN
 *   does not hurt that reader: it holds the inode, and the binding keeps
 *   its sample while a lookup may still open it.
 * - Locking: only the work queue's mutex.
 */
#ifndef ECHOFS_INVAL_H
#define ECHOFS_INVAL_H

#include "common/attrs.h"
#include <stdint.h>

struct dataset;
struct fuse_session;
struct namespace;
struct inval;

struct inval_stats {
	uint64_t sent;   /* entries the kernel dropped */
	uint64_t absent; /* entries the kernel no longer had */
	uint64_t skipped; /* not sent: a lookup was parked (see inval.c) */
};

/* se and ns borrowed; must outlive the result. Starts the thread. 0 with
 * *out set, or -errno with *out NULL. */
MUST_CHECK
int inval_open(struct fuse_session *se, const struct namespace *ns,
	       struct dataset *ds, struct inval **out);
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
