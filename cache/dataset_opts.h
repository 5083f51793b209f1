/* dataset_opts.h - the settings of a dataset (cache/dataset.h), as plain
 * values: where the data is, how it is fetched and cached, how it is echoed
 * and converted, and which part of it this node shows. fs/options.c fills
 * them from the command line; this header pulls in nothing but <stdint.h>,
 * so fs/ sees no cache/ module behind the face through it. */
#ifndef ECHOFS_DATASET_OPTS_H
#define ECHOFS_DATASET_OPTS_H

#include <stdint.h>

/* Most nodes a dataset can be split among (cache/index/partition.h). */
#define DATASET_WORLD_MAX 65536

/* How an echo mount chooses between a fresh sample and an echo
 * (cache/echo/policy.h, governor.h): adaptive echoes only while the fresh
 * rate holds; greedy whenever no fresh one is ready; fixed always E serves
 * per fresh sample. */
enum dataset_echo_mode {
	DATASET_ECHO_ADAPTIVE = 0, /* governed: never slows the readers */
	DATASET_ECHO_FIXED = 1,
	DATASET_ECHO_GREEDY = 2,   /* echo whenever no fresh one is ready */
};

/* What the echo pool of a preprocessing mount holds of a sample, that is
 * where echoing happens in the pipeline (echo_stage=). */
enum dataset_echo_stage {
	DATASET_STAGE_AUTO = 0,	   /* encoded in adaptive mode, else
				    * before_augment */
	DATASET_STAGE_ENCODED,	   /* the sample's bytes: every serve,
				    * fresh or echo, is decoded anew */
	DATASET_STAGE_BEFORE_AUGMENT, /* decoded, resized pixels */
	DATASET_STAGE_AFTER_AUGMENT,  /* the final bytes */
};

/* Output format of a preprocessing mount (cache/image/transform.h). */
enum dataset_format {
	DATASET_FORMAT_SAME = 0, /* JPEG stays JPEG, PPM stays PPM */
	DATASET_FORMAT_JPEG,
	DATASET_FORMAT_PPM,
};

/* Echoing (an echo mount): the echo pool's settings. */
struct dataset_echo_opts {
	int on;	     /* an echo mount */
	double echo; /* E, 1 to 1000; 1 = exact */
	enum dataset_echo_mode mode;
	unsigned window;   /* echo_window; 0 = default */
	uint64_t mem_size; /* bytes held; 0 = default */
	int repartition;   /* a new part of the world every pass */
	enum dataset_echo_stage stage; /* echo_stage= */
	/* exact_first=0: an adaptive mount echoes even a path whose own
	 * sample is on local disk (dataset_echo_own). */
	int no_exact_first;
	/* exact_when_local=0: an adaptive mount keeps its opens even when
	 * nothing is left to echo for (dataset_echo_may_retire). */
	int no_exact_when_local;
	/* Optional: whether the lookup named tag was interrupted; asked right
	 * before a take parks (see pool_opts.interrupted). */
	int (*interrupted)(const void *tag);
};

/* Preprocessing (decode, resize, crop, flip, encode). */
struct dataset_image_opts {
	int on; /* any of size, crop, flip, format is set */
	unsigned size, crop, quality, threads;
	int flip, augment;
	int rrc; /* augment=rrc: RandomResizedCrop (cache/image/rrc.h) */
	double rrc_scale[2], rrc_ratio[2]; /* its ranges; 0, 0: defaults */
	/* The prepared-sample tier (cache/image/prepared.h) in cache_dir: on
	 * unless no_prepared; its cap (0: the cache_size). */
	int no_prepared;
	uint64_t prepared_size;
	enum dataset_format format;
	uint64_t max_pixels;
	uint64_t decode_mem; /* 0: the transform's default */
};

/* s3:// sources (fetch/net/s3.h): addressing, signing, credentials. The
 * dataset opens the backends the source, index= or a list file names (any
 * scheme fetch/net/bucket.c registers), those an option only one takes asks
 * for (region=, profile=, path_style=, requester_pays=: S3), and S3 for
 * endpoint= or no_sign= when nothing names a bucket. */
struct dataset_s3_opts {
	const char *endpoint, *region, *profile; /* or NULL */
	int path_style, requester_pays, no_sign;
};

/* gs:// sources (fetch/net/gcs.h): endpoint, anonymous requests. */
struct dataset_gcs_opts {
	const char *endpoint; /* or NULL */
	int no_sign;
};

struct dataset_opts {
	const char *source;	 /* SOURCE: URL pattern or list file */
	const char *index;	 /* index= option (URL or path), or NULL */
	const char *cache_dir;	 /* disk cache and cached index */
	uint64_t cache_size;	 /* disk cache cap in bytes */
	unsigned connections;	 /* HTTP transfers in flight at most */
	const char *header_file; /* extra request headers, or NULL */
	const char *ca_file; /* CA bundle instead of the system's, or NULL */
	const char *ca_path; /* CA directory instead of the system's */
	/* Retry budget of a request while the dataset opens (short, so a dead
	 * server fails the mount soon) and once it is open. */
	double boot_retry_budget_s, run_retry_budget_s;
	/* A read waiting this long for a whole-shard stream takes a range
	 * GET; the longest a read waits for its bytes. */
	double range_after_s;
	double read_timeout_s;
	/* Slowest body worth waiting for (http_opts.min_rate); 0: default. */
	double min_rate;
	/* A transfer receiving nothing this long is broken off and resumed
	 * (http_opts.low_speed_time_s); 0: default. */
	double stall_timeout_s;
	struct dataset_s3_opts s3;
	struct dataset_gcs_opts gcs;
	int progress; /* show index-building progress on stderr */
	/* Many nodes: show rank's part of world (0 of 0 or 1: everything);
	 * the partition is drawn from seed (cache/index/partition.h). */
	uint32_t rank, world;
	uint64_t seed;
	struct dataset_echo_opts echo;
	struct dataset_image_opts image;
};

#endif
