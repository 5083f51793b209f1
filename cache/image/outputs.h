/* outputs.h - on preprocessing exact mounts, the transformed bytes of the
 * files looked up or read lately, so that a lookup (which needs the size)
 * and the READs that follow transform each file once.
 *
 * DESIGN
 * - A small LRU of OUTPUTS_SLOTS files, kept on an intrusive list
 *   (common/list.h) in order of use. A miss reads the sample from the
 *   shards and transforms it on the decode workers (cache/image/prep.h) without
 *   the lock; exact mounts are deterministic (centre crop, no flip), so a
 *   file evicted and made again has the same bytes and size.
 * - Handed-out outputs are reference counted; eviction skips held ones.
 * - Locking: one mutex guards the slots; no I/O or decoding under it.
 */
#ifndef ECHOFS_OUTPUTS_H
#define ECHOFS_OUTPUTS_H

#include "common/attrs.h"
#include <stddef.h>
#include <stdint.h>

#include "common/list.h"

struct index;
struct shards;
struct prep;
struct prepared;

#define OUTPUTS_SLOTS 64
/* Largest sample read for preprocessing: the index gives the size, so it
 * is capped before the read buffer is allocated. The same 256 MB as the
 * echo pool's cap; a PPM of the default max_pixels (64 MP) is 192 MB. */
#define OUTPUTS_SAMPLE_MAX (256ULL << 20)

struct output {
	uint32_t sample; /* number of the sample in the index */
	uint8_t *data;
	size_t len;
	/* Private to outputs.c, guarded by the outputs lock. */
	int refs;
	struct list_node lru; /* on the LRU list while cached */
	int cached;	      /* 0: not on the list, freed at the last put */
};

struct outputs_stats {
	uint64_t hits, misses, rejected;
};

struct outputs;

/* All borrowed. */
struct outputs *outputs_new(const struct index *ix, struct shards *sh,
			    struct prep *prep);
void outputs_free(struct outputs *o);

/* Makes outputs from the prepared-sample tier (borrowed; NULL: none): a
 * sample prepared once is cropped and encoded from its prepared image, the
 * same bytes as a decode. Before any outputs_get. */
void outputs_set_prepared(struct outputs *o, struct prepared *tier);

/* The transformed bytes of sample `sample`, held until outputs_put.
 * Returns 0, or the error of the read (-EIO: the shard failed,
 * -ETIMEDOUT...) or of the transform (-EBADMSG and the like: a bad image,
 * logged with its reason and counted in `rejected` once per file, see
 * outputs_bad; -ENOMEM, -ESHUTDOWN: not the image's fault, neither logged
 * nor counted here); -EFBIG (a bad image too) for a sample the index says
 * is above OUTPUTS_SAMPLE_MAX, refused before reading it. Nothing failed
 * is kept: the next get of the sample tries again. */
MUST_CHECK
int outputs_get(struct outputs *o, uint32_t sample, struct output **out);
void outputs_put(struct outputs *o, struct output *out);

/* 1 when a get of sample failed because its image is bad (its bytes were
 * read whole, and checked when the index has sums, and the transform
 * refused them: the same bytes fail again), 0 when it never did (a read
 * that failed, a timeout or memory running short makes no sample bad).
 * Accepts NULL. */
int outputs_bad(struct outputs *o, uint32_t sample);

void outputs_get_stats(struct outputs *o, struct outputs_stats *out);

#endif
