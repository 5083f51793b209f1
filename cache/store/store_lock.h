/* store_lock.h - the store's cross-process locking: flock(2) on the shards
 * directory, on "<name>.lock" per entry being written, and the probes of
 * other writers' temp files (the protocol is the DESIGN note in store.c). */
#ifndef ECHOFS_STORE_LOCK_H
#define ECHOFS_STORE_LOCK_H

#include "common/attrs.h"
#include <stdbool.h>

struct store;

#define STORE_LOCK_SUFFIX ".lock"
#define STORE_TMP_PREFIX ".tmp-"

/* flock(LOCK_EX) on a fresh descriptor of the shards directory (threads of
 * one process exclude each other too). Returns the descriptor holding it,
 * or -errno; store_dir_unlock(fd) lets go (accepts -1). */
MUST_CHECK
int store_dir_lock(struct store *s);
void store_dir_unlock(int fd);
/* Take "<name>.lock" (name: an entry's file name), waiting up to the
 * store's wait for another writer of the entry, in any process; a wait is
 * counted when it starts and *waited set. Returns the descriptor holding
 * it, or -EBUSY (waited too long), -ECANCELED (store_interrupt), -errno. */
MUST_CHECK
int store_entry_lock(struct store *s, const char *name, bool *waited);
/* Write the writer's temp file name into its held lock file, for
 * store_peer_open (best effort). */
void store_entry_note_tmp(int lockfd, const char *tmp_name);
/* Unlink "<name>.lock" and let go of it (fd < 0: nothing). */
void store_entry_unlock(struct store *s, const char *name, int fd);
/* Is n named like an entry's lock file? */
bool store_is_lock_name(const char *n);
/* Remove a temp or lock file whose owner is gone: nobody holds its flock. */
void store_remove_if_unlocked(struct store *s, const char *name);
/* fd of a temp file: does its writer still hold it (LOCK_EX)? */
bool store_writer_alive(int fd);

/* ---- the change journal ("<cache_dir>/shards.journal", DESIGN in
 * store.c): names changed in the shards directory, in order, so that an
 * admission learns what other processes did without reading the
 * directory. Directory lock held for all. ---- */

#define STORE_JNL_NAME "shards.journal"

/* Record that `name` (an entry or temp file) is about to be created,
 * replaced or removed: called before the change, under the same hold of
 * the directory lock. When the record cannot be written the journal is
 * removed, so that every process rescans instead of trusting it. */
void store_jnl_note(struct store *s, const char *name);
/* fn(s, name) for every record since s->jseq, which then moves to the
 * end. Returns 0, or -ESTALE when the journal cannot say what changed
 * (none, replaced, damaged, or more than it keeps): then a rescan must. */
int store_jnl_replay(struct store *s, void (*fn)(struct store *, const char *));
/* After a rescan: the journal opened (made if missing) and s->jseq at its
 * end. Without one (it cannot be made), admissions keep rescanning. */
void store_jnl_sync(struct store *s);
/* Close the journal (accepts a store without one). */
void store_jnl_close(struct store *s);

#endif
