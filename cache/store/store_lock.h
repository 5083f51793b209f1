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

/* flock(LOCK_EX) on a fresh descriptor of the shards directory, with
 * s->dirmu held for threads of this process. Returns the descriptor
 * holding it, or -errno; store_dir_unlock(s, fd) lets go (accepts -1). */
MUST_CHECK
int store_dir_lock(struct store *s);
void store_dir_unlock(struct store *s, int fd);
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

#endif
