/* store_journal.h - the store's change journal: names changed in the
 * shards directory, in order, so that an admission learns what other
 * processes did without reading the directory (DESIGN in store.c). The
 * directory lock (store_dir_lock) is held for every call. */
#ifndef ECHOFS_STORE_JOURNAL_H
#define ECHOFS_STORE_JOURNAL_H

struct store;

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
