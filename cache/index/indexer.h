/* indexer.h - build a dataset index by streaming every shard once, keeping
 * each shard in the disk cache on the way so the first epoch need not fetch
 * it again. */
#ifndef ECHOFS_INDEXER_H
#define ECHOFS_INDEXER_H

#include "common/attrs.h"
#include <stddef.h>
#include <stdint.h>

struct http;
struct store;
struct index;
struct shardlist;

/* Called after each shard, serialized (never concurrently). */
typedef void (*indexer_progress_fn)(void *ud, size_t done, size_t total,
				    unsigned long long bytes);

/* What indexing skipped, by counter: tar_skipped and bad_label. */
struct indexer_skips {
	uint64_t members;   /* members and samples skipped (tar_skipped) */
	uint64_t bad_label; /* samples whose .cls is not a number */
};

/* For each URL of list: stat it (size, ETag), stream it through the tar
 * scanner and, when st is non-NULL, into the store. `jobs` shards at a time.
 * Skipped members and samples are counted (in *skipped when non-NULL: bad
 * .cls labels apart from the rest) and logged (log_warn, one line per
 * shard and reason). Any shard failing (404, unreachable, malformed tar) fails
 * the build: returns -errno with a one-line reason naming the (redacted)
 * shard URL in err. *out is caller-freed (index_free). */
MUST_CHECK
int indexer_build(struct http *h, struct store *st,
		  const struct shardlist *list, unsigned jobs,
		  indexer_progress_fn progress, void *ud, struct index **out,
		  struct indexer_skips *skipped, char *err, size_t errlen);

#endif
