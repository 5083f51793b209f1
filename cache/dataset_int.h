/* dataset_int.h - the dataset's own state, shared by the files that make
 * up the face (dataset.c: index, readers, partition; dataset_echo.c: echo
 * pool, decode workers, converted outputs). Nothing else includes it. */
#ifndef ECHOFS_DATASET_INT_H
#define ECHOFS_DATASET_INT_H

#include "common/attrs.h"
#include <stdatomic.h>
#include <stdint.h>

#include "cache/dataset.h"

struct index;
struct shards;
struct http;
struct buckets;
struct store;
struct pool;
struct prep;
struct outputs;

enum { OWN_UNKNOWN, OWN_BAD, OWN_OK }; /* dataset.own_state */

struct dataset {
	const struct index *ix; /* owned when `own` */
	struct shards *sh;	/* owned when `own`; may be NULL */
	struct http *http;	/* owned; NULL for dataset_wrap */
	struct buckets *bk;	/* owned; the bucket backends (s3://...) */
	struct store *store;	/* owned; NULL: no disk cache */
	int own;
	const char *index_from; /* static */
	uint64_t tar_skipped;
	uint64_t bad_label;
	uint64_t total_bytes;
	/* The partition (dataset_set_part); NULL arrays: world 1. */
	uint32_t *rank_of; /* per shard */
	uint8_t *in_view;  /* per sample */
	struct dataset_part part;
	int no_span; /* -o zerocopy=0 */
	/* Echoing and converting (dataset_echo.c). */
	struct dataset_echo_opts echo_opts;
	struct dataset_image_opts image_opts;
	uint64_t seed;
	struct pool *pool;	   /* after dataset_echo_start, else NULL */
	int own_pool;		   /* 0: dataset_wrap_pool's */
	/* Exact first (dataset_echo_own): per sample, OWN_BAD once its own
	 * output failed, OWN_OK once it was made (later opens need not make
	 * it again); NULL when exact first does not apply. */
	_Atomic uint8_t *own_state;
	struct prep *prep;	   /* preprocessing only */
	struct outputs *outputs;   /* preprocessing exact mounts only */
	struct prepared *prepared; /* the prepared-sample tier, or NULL */
	_Atomic uint64_t ingested; /* samples decoded for the pool */
	atomic_bool echo_retired;  /* dataset_echo_retire was called */
};

/* dataset_echo.c: the decode workers and converted outputs of o->image
 * (none without it), after the readers opened. 0 or -errno with err. */
MUST_CHECK
int dataset_start_image(struct dataset *ds, const struct dataset_opts *o,
			char *err, size_t errlen);
/* The echo pool's and the outputs' figures into out. */
void dataset_echo_fill_stats(struct dataset *ds, struct dataset_stats *out);
/* Frees the pool, outputs and decode workers (before the readers). */
void dataset_stop_image(struct dataset *ds);

#endif
