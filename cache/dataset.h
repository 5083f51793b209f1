/* dataset.h - the data as fs/ sees it: numbered samples (key, label, image
 * extension, size, bytes) grouped into groups that are fetched and cached
 * together, plus the figures the stats show. fs/ includes nothing from
 * fetch/; this face is the one place where the index, the shard readers,
 * the disk store and the HTTP client meet.
 *
 * Samples are numbered 0 .. dataset_nsamples() - 1 in index order; groups
 * (today: shards) 0 .. dataset_ngroups() - 1. Every sample belongs to one
 * group. Strings returned by the accessors are owned by the dataset and
 * live as long as it does. The accessors take no lock: the sample table
 * never changes after dataset_open. dataset_read and the stats are thread
 * safe (they call into the shard readers, which lock for themselves).
 *
 * Errors: dataset_open returns 0 or -errno with a one-line reason in err
 * (URLs redacted); sample or group numbers out of range are -EINVAL (read)
 * or 0 / "" (accessors, which callers use only on numbers they got from
 * the dataset). */
#ifndef ECHOFS_DATASET_H
#define ECHOFS_DATASET_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "cache/store/shards.h"

struct index;
struct store;

/* s3:// sources (fetch/net/s3.h): addressing, signing, credentials. */
struct dataset_s3_opts {
	int on; /* SOURCE or index= is s3://, or any option below is given */
	const char *endpoint, *region, *profile; /* or NULL */
	int path_style, requester_pays, no_sign;
};

/* gs:// sources (fetch/net/gcs.h): endpoint, anonymous requests. */
struct dataset_gcs_opts {
	int on; /* SOURCE or index= is gs:// (a list file naming gs:// URLs
		 * turns it on too) */
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
	const char *ca_file;     /* CA bundle instead of the system's, or NULL */
	const char *ca_path;     /* CA directory instead of the system's */
	/* Retry budget of a request while the dataset opens (short, so a dead
	 * server fails the mount soon) and once it is open. */
	double boot_retry_budget_s, run_retry_budget_s;
	/* See shards_opts.range_after_s and read_timeout_s. */
	double range_after_s;
	double read_timeout_s;
	/* Slowest body worth waiting for (http_opts.min_rate); 0: default. */
	double min_rate;
	struct dataset_s3_opts s3;
	struct dataset_gcs_opts gcs;
	int progress; /* show index-building progress on stderr */
	/* Many nodes: show rank's part of world (0 of 0 or 1: everything);
	 * the partition is drawn from seed (cache/index/partition.h). */
	uint32_t rank, world;
	uint64_t seed;
};

/* Network figures (what the HTTP client counted). */
struct dataset_net_stats {
	uint64_t requests, bytes, retries, resumes;
	uint64_t errors_4xx, errors_5xx, errors_conn, errors_verify;
};

struct dataset_stats {
	struct shards_stats reads; /* see cache/store/shards.h */
	struct dataset_net_stats net;
	uint64_t cached_groups; /* groups complete in the disk cache */
};

struct dataset;

/* Once per process, before any thread starts (the HTTP library's global
 * state). Returns 0 or -EIO. */
int dataset_global_init(void);

/* url with its userinfo and query string replaced by "***" (see
 * http_redact), into buf; returns buf. For anything shown to a user. */
const char *dataset_redact(const char *url, char *buf, size_t buflen);

/* The network library's version line (libcurl, its TLS backend; static). */
const char *dataset_net_version(void);

/* Open the dataset of o->source: the HTTP client, the disk store under
 * o->cache_dir (without one, with a logged warning, when it can't be
 * opened), the index (given, cached, beside the shards or built; see
 * cache/index/resolve.h) and the shard readers with their fetch threads.
 * Returns 0 with *out set (free with dataset_close) or -errno with a reason
 * in err. */
int dataset_open(const struct dataset_opts *o, struct dataset **out, char *err,
		 size_t errlen);
/* What echofs --check reports: SOURCE read, an index looked for (never
 * built), the first shard fetched whole and timed. */
struct dataset_check {
	size_t shards;          /* shards SOURCE lists */
	const char *index_from; /* "option", "cache", "beside" or "none" */
	size_t samples;         /* in the index, 0 without one */
	uint64_t shard_bytes;   /* of the first shard */
	double shard_s;         /* seconds to fetch it */
};

/* Check o->source without mounting and without writing the cache: the
 * shard list, the index (given, cached or beside the shards), one whole
 * shard. Returns 0, or -errno with a one-line reason in err (URLs
 * redacted; out holds what was found before the failure). */
int dataset_check(const struct dataset_opts *o, struct dataset_check *out,
		  char *err, size_t errlen);

/* A dataset over parts that exist already, all borrowed and outliving it:
 * ix is required; sh may be NULL (then reads fail with -ENXIO and nothing
 * is cached). For tests and tools. Returns NULL with errno set. */
struct dataset *dataset_wrap(const struct index *ix, struct shards *sh);
/* Shutdown, first step, from any thread: reads waiting for data,
 * shard streams, transfers and backoffs end now (with -ECANCELED). Accepts
 * NULL. */
void dataset_cancel(struct dataset *ds);
/* Stops the fetch threads and frees what dataset_open made. No read may be
 * in progress. Accepts NULL. */
void dataset_close(struct dataset *ds);

size_t dataset_nsamples(const struct dataset *ds);
size_t dataset_ngroups(const struct dataset *ds);
const char *dataset_key(const struct dataset *ds, uint32_t sample);
/* The class label: one path component, never empty. */
const char *dataset_label(const struct dataset *ds, uint32_t sample);
/* Extension of the image member, lower case, without the dot. */
const char *dataset_ext(const struct dataset *ds, uint32_t sample);
uint64_t dataset_size(const struct dataset *ds, uint32_t sample);
uint32_t dataset_group(const struct dataset *ds, uint32_t sample);
/* Bytes of every group together (the remote data's size). */
uint64_t dataset_total_bytes(const struct dataset *ds);
/* Where the index came from ("option", "cache", "beside", "built", or
 * "given" for dataset_wrap; static) and how many tar members were skipped
 * while building it (0 unless built). */
const char *dataset_index_from(const struct dataset *ds);
uint64_t dataset_tar_skipped(const struct dataset *ds);
/* Samples whose .cls was not a usable label, met while building the index. */
uint64_t dataset_bad_label(const struct dataset *ds);

/* Read up to len bytes at off of the sample's bytes into buf, blocking
 * until they are there (fetching the sample's group in the background).
 * Returns the byte count (0 at or past the end, less than len only at the
 * end) or -errno: -EIO (fetch failed; logged), -ETIMEDOUT, -ECANCELED
 * (stopping), -EINVAL (bad sample), -ENXIO (no shard readers). */
ssize_t dataset_read(struct dataset *ds, uint32_t sample, uint64_t off,
		     size_t len, void *buf);
/* A sample's bytes as a place in an open file, for replies that splice
 * them instead of copying (see shards_view in cache/store/shards.h). */
struct dataset_span {
	int fd;
	uint64_t pos; /* in fd */
	size_t len;
	struct shards_view view;
};

/* The sample's bytes from off, at most len, as a span of a verified cache
 * file, when they can be served without a copy: the whole sample is asked
 * for (off 0, len at least its size) and its group is cached, or still
 * downloading with the sample's bytes already written (a span of the
 * download's temp file). The bytes were checked against the index just now
 * and the file stays pinned (or the download's commit waits) until
 * dataset_span_done. Returns 0, -EAGAIN (use dataset_read) or -EINVAL. */
int dataset_read_span(struct dataset *ds, uint32_t sample, uint64_t off,
		      size_t len, struct dataset_span *out);
void dataset_span_done(struct dataset *ds, struct dataset_span *sp);
/* Spans on (the default) or off (-o zerocopy=0: dataset_read_span always
 * -EAGAIN). Before any read. */
void dataset_set_zerocopy(struct dataset *ds, int on);
/* Samples under this size are never spans: libfuse copies fd buffers
 * under two pages instead of splicing them (fuse_send_data_iov), and a
 * plain copy of so little costs less than a view. */
#define DATASET_SPAN_MIN 8192
/* 1 if the group is complete in the disk cache. */
int dataset_is_cached(struct dataset *ds, uint32_t group);
/* Start fetching a group in the background if it is not cached or queued. */
void dataset_prefetch(struct dataset *ds, uint32_t group);
/* The cache policy for exact mounts (shards_track): samples (n, borrowed)
 * are every sample the tree shows; reads through dataset_read and
 * dataset_read_span count toward the current pass. Once, before the first
 * read. 0 or -EINVAL. */
int dataset_track_pass(struct dataset *ds, const uint32_t *samples, size_t n);

void dataset_get_stats(struct dataset *ds, struct dataset_stats *out);

/* Many nodes (cache/index/partition.h). A rank's part is a set of whole
 * shards; its view is the part's first `samples` samples in index order,
 * the same count on every rank (the rest is trimmed). Sample numbers stay
 * the index's: accessors answer for every sample, and fs/ shows a file
 * only for samples in the view (class directories for all). */
struct dataset_part {
	uint32_t rank, world;  /* 0 of 1 without a partition */
	size_t shards;         /* shards in this rank's part */
	uint64_t part_samples; /* samples in them */
	uint64_t samples;      /* in the view: the smallest part's count */
	uint64_t trimmed;      /* part_samples - samples */
	uint64_t seed;
};

/* Make the view rank's part of world (dataset_open does this from its
 * options; for dataset_wrap it is world 1 until called). Call before any
 * reader or pool uses the dataset. Returns 0, or -EINVAL with a one-line
 * reason in err (world larger than the shard count, rank >= world). */
int dataset_set_part(struct dataset *ds, uint32_t rank, uint32_t world,
		     uint64_t seed, char *err, size_t errlen);
/* 1 if the sample is in this rank's view (always, with world 1). */
int dataset_in_view(const struct dataset *ds, uint32_t sample);
/* 1 if the sample's shard is in this rank's part (trimmed samples
 * included; always, with world 1). */
int dataset_in_part(const struct dataset *ds, uint32_t sample);
void dataset_get_part(const struct dataset *ds, struct dataset_part *out);
/* Samples per shard (the partition's weights), nshards long; caller
 * frees. */
uint64_t *dataset_group_counts(const struct dataset *ds);

/* The parts, for cache/ modules built on top of the dataset (the echo pool
 * and the converted outputs take the index and the shard readers). fs/
 * passes them on and never looks inside. store may be NULL (no disk
 * cache). */
const struct index *dataset_index(const struct dataset *ds);
struct shards *dataset_shards(struct dataset *ds);
struct store *dataset_store(struct dataset *ds);

#endif
