/* sums.h - checksums of one shard while it streams: the XXH3-64 of the whole
 * shard and of every regular tar member, filled into an index (format 2).
 *
 * Runs its own tar parser beside the scanner (headers only: a few hundred
 * bytes per member), so member boundaries are known before their data goes
 * by and every byte is hashed once, as it arrives. Low-level: it reports,
 * it does not log. */
#ifndef ECHOFS_SUMS_H
#define ECHOFS_SUMS_H

#include "common/attrs.h"
#include <stddef.h>
#include <stdint.h>

struct index;
struct sums;

/* Caller frees with sums_free. Never NULL (aborts on out of memory, like
 * every small allocation). */
struct sums *sums_new(void);
/* Accepts NULL. */
void sums_free(struct sums *s);

/* Feed the shard's bytes in order (the same bytes the scanner gets).
 * Returns 0 or -EBADMSG (malformed tar: the scanner says why). */
MUST_CHECK
int sums_feed(struct sums *s, const void *buf, size_t len);

/* The whole shard's XXH3-64 of everything fed so far. */
uint64_t sums_shard(const struct sums *s);

/* End of the shard: record its sum in ix->shards[shard] and each of its
 * samples' and listed members' sums (matched by offset and size). The
 * shard's samples and members must be the last ones of ix (as the scanner
 * adds them). Returns 0, or
 * -EBADMSG when a sample names no member the stream had (ix->has_sums is left
 * to the caller). */
MUST_CHECK
int sums_fill(struct sums *s, struct index *ix, uint32_t shard);

/* XXH3-64 of a buffer: what the index records for a member. */
uint64_t sums_of(const void *buf, size_t len);

#endif
