/* verify.h - what shards.c needs to check sample bytes against the index's
 * checksums (format 2): which sample a shard offset belongs to, a streaming
 * whole-shard checksum, and a small cache of members already checked.
 *
 * DESIGN
 * - Samples are looked up by (shard, offset) through a per-shard array of
 *   sample numbers sorted by offset, built once (8 bytes per sample).
 * - Checked members are kept (bytes, at most VERIFY_KEEP of them and
 *   VERIFY_KEEP_BYTES in all, least recently used dropped) so that a file
 *   read in several FUSE requests is fetched and hashed once; a member over
 *   64 MiB is read and hashed whole at every read instead. Kept bytes
 *   matched the index, so they stay right whatever happens to the shard's
 *   cache entry meanwhile.
 * - Locking: one mutex guards the kept members; it is a leaf (nothing else
 *   is locked under it) and is held only for a lookup and a memcpy. */
#ifndef ECHOFS_VERIFY_H
#define ECHOFS_VERIFY_H

#include "common/attrs.h"
#include <stddef.h>
#include <stdint.h>

struct index;
struct verify;
struct verify_stream;

#define VERIFY_NONE SIZE_MAX

/* ix is borrowed. Returns 0 with *out set, or with *out NULL when ix has no
 * checksums (format 1: nothing to verify), or -EOVERFLOW with *out NULL for
 * more than 2^32 - 1 samples. */
MUST_CHECK
int verify_open(const struct index *ix, struct verify **out);
/* Accepts NULL. */
void verify_free(struct verify *v);

/* The sample whose image member holds byte off of shard, or VERIFY_NONE;
 * *end is where that member ends, or (VERIFY_NONE) where the next member
 * begins (UINT64_MAX if none does). */
size_t verify_find(const struct verify *v, uint32_t shard, uint64_t off,
		   uint64_t *end);

/* Do these bytes match sample i's checksum? */
int verify_sample_ok(const struct verify *v, size_t i, const void *buf,
		     size_t len);

/* Do the len bytes at off in fd match sample i's checksum? Read with
 * pread in pieces (no mapping: a file that another process shortens makes
 * a short read here, not a SIGBUS). Returns 1 (they match), 0 (they do
 * not) or -errno (-EIO for a file shorter than off + len). */
MUST_CHECK
int verify_sample_fd(const struct verify *v, size_t i, int fd, uint64_t off,
		     size_t len);

/* Copy len bytes at rel of sample i's member into dst if it is kept.
 * Returns 0, or -ENOENT when it is not. */
MUST_CHECK
int verify_copy(struct verify *v, size_t i, uint64_t rel, size_t len,
		void *dst);
/* Keep sample i's checked bytes (takes ownership of buf, malloc'd). */
void verify_keep(struct verify *v, size_t i, void *buf, size_t len);

/* Whole-shard checksum of a stream. Never NULL (aborts on out of memory,
 * like every small allocation). */
struct verify_stream *verify_stream_new(void);
void verify_stream_feed(struct verify_stream *vs, const void *data, size_t len);
/* Does what was fed match shard n's checksum? */
int verify_stream_ok(const struct verify *v, const struct verify_stream *vs,
		     uint32_t n);
/* Accepts NULL. */
void verify_stream_free(struct verify_stream *vs);

#endif
