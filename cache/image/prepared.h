/* prepared.h - the prepared-sample tier: the decoded and resized image of a
 * sample (prep.h's prepared buffer: the stage before crop, flip and
 * encoding, what the echo pool holds with echo_stage=before_augment),
 * written once to cache_dir and read back instead of decoding the sample
 * again, by exact and echo mounts and by every mount and process on the
 * cache_dir.
 *
 * DESIGN
 * - Storage is the shard store's machinery (cache/store/store.h), a second
 *   instance over "<cache_dir>/prepared" (files
 *   "<cache_dir>/prepared/shards/<16 hex>.shard"): atomic writes (temp
 *   file + rename), per-block checksums checked on first read, the flock
 *   protocol between processes (one writer of an entry, readers pinned),
 *   scan-resistant eviction under its own cap (prepared_size=). Its own
 *   directory, so that thousands of per-sample files neither crowd the
 *   shards' directory nor compete with shards under one cap.
 * - Key: (url, etag, size) of the store with url "echofs-prepared://v1/"
 *   plus the recipe (size, crop, "-cut" when the prepared stage is the
 *   centre crop alone (transform_prepared_is_cut: options that draw
 *   nothing, 1.74x fewer bytes at size=256,crop=224), max_pixels, the
 *   decoders' versions, the resampler's version), etag the XXH3-64 and length
 * of the sample's encoded bytes, size the prepared buffer's length (known from
 * the header: prep_prepared_len). A changed sample, recipe or library has
 *   another key.
 * - Integrity: a read checks every block's checksum (store_pread); a corrupt
 *   entry is dropped (store_drop, unlinked once unpinned) and the sample is
 *   decoded again and rewritten; a truncated file is not a valid entry and
 *   is removed by the store. The prepared buffer's own header (magic, w, h)
 *   must agree with the key's size too. Nothing unchecked is served.
 * - Form: raw pixels (lossless, so exact mounts serve the same bytes as a
 *   decode; zstd and lz4 were measured and not taken: BENCHMARKS §21).
 * - When: a sample's entry is written at its second use, never its first
 *   (prepared_seen.h remembers the samples used, across mounts), so that
 *   a pass that reads each sample once costs what it costs without the
 *   tier, and the tier fills during the second pass over a dataset, in
 *   this mount or a later one (issue 47).
 * - Writes: by one writer thread at nice 19 from a bounded queue (see
 *   prepared_make), off the path of the read that made the sample; a
 *   read never waits for the writer (a full queue drops the entry).
 *   Threads: any; the store locks itself; `lock` guards the queue and the
 *   flags. */
#ifndef ECHOFS_PREPARED_H
#define ECHOFS_PREPARED_H

#include "common/attrs.h"
#include <stddef.h>
#include <stdint.h>

#include "cache/image/transform.h"

struct prep;
struct prepared;

struct prepared_stats {
	uint64_t hits, misses; /* lookups served from the tier / not */
	uint64_t writes;       /* entries written */
	uint64_t queued;       /* made, waiting for the writer now */
	uint64_t skipped;      /* made, not kept: the writer's queue was full */
	uint64_t skipped_first;	    /* made, not kept: its first use */
	uint64_t skipped_seen_full; /* made, not kept: first use, and the
				     * seen set is full (PREPARED_SEEN_MAX) */
	uint64_t seen;		    /* samples known to have been used */
	double writer_s;       /* seconds the writer spent writing entries */
	uint64_t corrupt;      /* entries found corrupt, dropped, remade */
	uint64_t bytes;	       /* on disk now (the store's count) */
	uint64_t entries;      /* on disk now */
	uint64_t evictions;    /* entries evicted for the cap */
	uint64_t write_errors; /* entries not written: disk errors (the
				* store's count; logged as "cache_write") */
};

/* Whether a mount with opts would use the tier: a resize (size=) and an
 * output format that is not the input's own (jpeg or ppm), so that every
 * output is made from the prepared stage. */
int prepared_applies(const struct transform_opts *opts);

/* Opens (creates) the tier under cache_dir with a cap of cap bytes for the
 * recipe of opts. Returns 0 with *out set, or -errno with a reason. */
MUST_CHECK
int prepared_open(const char *cache_dir, uint64_t cap,
		  const struct transform_opts *opts, struct prepared **out,
		  char *err, size_t errlen);
/* Accepts NULL. */
void prepared_close(struct prepared *p);

/* The prepared buffer of the sample whose encoded bytes are in[0, len):
 * read from the tier when there and intact, else made with prep_prepare on
 * prep's workers and, when this is not the sample's first use (or its
 * entry was corrupt), queued for the tier's writer (a thread at nice 19;
 * what a full queue, 64 MB, cannot take is not kept, and a
 * failed write is logged, not an error; prepared_close writes what is
 * queued). Each sample not kept is counted by reason. *out is malloc'd; the
 * caller frees it. Returns 0 or prep_prepare's -errno with the reason in why.
 */
MUST_CHECK
int prepared_make(struct prepared *p, struct prep *prep, const void *in,
		  size_t len, uint8_t **out, size_t *outlen, char *why,
		  size_t whylen);
/* prepared_make for the sample `key` (borrowed; NULL: unknown), which the
 * log names when its entry is found corrupt. Corrupt entries are logged
 * with log_counted("cache_corrupt"), naming the sample and what was
 * wrong (a block's checksum, a short file). */
MUST_CHECK
int prepared_make_named(struct prepared *p, struct prep *prep, const char *key,
			const void *in, size_t len, uint8_t **out,
			size_t *outlen, char *why, size_t whylen);

/* prepared_make_named for a caller that can make its output from the
 * encoded bytes in one step (an exact mount's prep_apply): a miss that
 * will not be kept (the sample's first use) returns 0 at once, before any
 * decode, and the caller makes its output itself (one decode job, not a
 * prepare and then an augment: issue 47, the first run's cost). Returns 1
 * with *out set (read from the tier, or made and queued), 0, or -errno. */
MUST_CHECK
int prepared_take_named(struct prepared *p, struct prep *prep, const char *key,
			const void *in, size_t len, uint8_t **out,
			size_t *outlen, char *why, size_t whylen);

void prepared_get_stats(struct prepared *p, struct prepared_stats *out);

#endif
