/* pack_write.h - write a user's samples (pack_input.h) as WebDataset tar
 * shards, shuffled across shards, on several threads, and the
 * .echofs-index beside them.
 *
 * DESIGN: the samples are shuffled once (seeded), then cut into shards
 * in that order (by count, by size or by samples per shard), and each
 * shard's exact size is known before it is written, since every member's
 * size was taken when the input was listed. So each shard is cut further
 * into chunks of about 4 MB whose offsets in the shard are known too:
 * worker threads take chunks from one atomic counter, assemble each in a
 * buffer (headers, file bytes read straight into it, padding) and pwrite
 * it at its place in the shard's temp file. One shard is written by all
 * threads at once, so a data set of one shard packs on every core. The
 * thread that writes a shard's last chunk finishes it: it reads the shard
 * back (from the page cache, one mmap) through a scanner and checksums
 * (fetch/format/scan.h, sums.h), so every shard's index is made from the
 * very bytes on disk, as echofs-index would make it, and renames it into
 * place. The main thread merges the shards' indexes in shard order
 * (ImageFolder labels renamed from class indexes to class names, so a
 * mount shows the classes' own names) and saves
 * <out>/<prefix>.echofs-index. The first error stops every worker, and no
 * temp file stays. */
#ifndef ECHOFS_PACK_WRITE_H
#define ECHOFS_PACK_WRITE_H

#include <stddef.h>
#include <stdint.h>

struct pack_input;

struct pack_write_opts {
	const char *out;      /* directory, made already */
	const char *prefix;   /* <prefix>-NNNNNN.tar, <prefix>.echofs-index */
	const char *base_url; /* index URLs: base_url/<shard>; NULL: paths */
	uint64_t shards;      /* this many shards, or 0 */
	uint64_t shard_size;  /* or shards of at most this many bytes */
	uint64_t per_shard;   /* or this many samples a shard */
	uint64_t seed;	      /* of the shuffle */
	unsigned threads;
};

struct pack_write_result {
	size_t shards;
	uint64_t samples, files, bytes; /* bytes: of the shards */
};

/* Returns 0, or -errno with a one-line reason in err. */
int pack_write(const struct pack_input *in, const struct pack_write_opts *o,
	       struct pack_write_result *res, char *err, size_t errlen);

#endif
