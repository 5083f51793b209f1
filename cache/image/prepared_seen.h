/* prepared_seen.h - the prepared tier's admission memory: which samples
 * (of one recipe) a mount on this cache_dir has prepared before, so that
 * the tier writes a sample's entry at its second use, never its first
 * (issue 47: writing at the first use made a decode-bound first run 1.16-
 * 1.50x slower, and a sample read once is not worth the write).
 *
 * DESIGN
 * - A set of 64-bit keys (the caller's hash of the recipe and the sample's
 *   encoded bytes) in an open-addressing table, grown by doubling up to
 *   PREPARED_SEEN_MAX keys; past that new keys are not remembered (their
 *   samples stay unwritten; prepared_seen_mark says so).
 * - Kept across mounts in one file, "<dir>/seen-v1": raw u64 keys in
 *   the machine's byte order, appended (O_APPEND, whole keys per write, so that
 * several processes may append at once; a torn tail of less than a key is
 *   ignored on load). Loaded at open; keys marked since are appended by
 *   prepared_seen_flush, which the tier's writer thread calls, never a
 *   reader. A file of more than PREPARED_SEEN_MAX keys is emptied at open.
 * - Threads: any; `lock` guards the table and the pending keys. The file is
 *   written outside the lock. */
#ifndef ECHOFS_PREPARED_SEEN_H
#define ECHOFS_PREPARED_SEEN_H

#include "common/attrs.h"
#include <stddef.h>
#include <stdint.h>

/* Keys remembered at most (a table of twice as many slots, 8 bytes each). */
#define PREPARED_SEEN_MAX (1u << 21)

struct prepared_seen;

/* Opens (creates) dir/seen-v1 and loads its keys. Returns 0 with *out set,
 * or -errno with a reason in err. */
MUST_CHECK
int prepared_seen_open(const char *dir, struct prepared_seen **out, char *err,
		       size_t errlen);
/* Flushes what is pending, then frees. Accepts NULL. */
void prepared_seen_close(struct prepared_seen *s);

enum prepared_seen_result {
	PREPARED_SEEN_FIRST, /* not seen before: remembered now */
	PREPARED_SEEN_AGAIN, /* seen before (this mount or an earlier one) */
	PREPARED_SEEN_FULL,  /* not seen before and the set is full */
};

/* Marks key seen; says whether it was. */
enum prepared_seen_result prepared_seen_mark(struct prepared_seen *s,
					     uint64_t key);

/* Appends the keys marked since the last flush to the file. Returns 0 or
 * -errno (the keys are then dropped: a later mount sees them as new). */
int prepared_seen_flush(struct prepared_seen *s);

/* Keys pending a flush now, and keys known (loaded and marked). */
size_t prepared_seen_pending(struct prepared_seen *s);
size_t prepared_seen_count(struct prepared_seen *s);

#endif
