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

#include "common/attrs.h"
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "cache/dataset_opts.h"

/* Network figures (what the HTTP client counted). */
struct dataset_net_stats {
	uint64_t requests, bytes, retries, resumes, stalls;
	uint64_t errors_4xx, errors_5xx, errors_conn, errors_verify;
	uint64_t header_bytes; /* response header bytes received */
};

/* What the shard readers counted (cache/store/shards.h, shards_stats). */
struct dataset_read_stats {
	uint64_t hits;          /* reads served from a complete cache entry */
	uint64_t misses;        /* reads that waited for a fetch */
	uint64_t range_reads;   /* reads served by a range GET */
	uint64_t fetched_shards;
	uint64_t fetched_bytes; /* shard body bytes streamed */
	uint64_t failed_shards; /* fetches that failed for good */
	uint64_t refetches;     /* corrupt cache entries fetched again */
	uint64_t read_errors;   /* reads that returned an error */
	uint64_t read_timeouts; /* of read_errors: waited read_timeout */
	uint64_t verify_errors; /* samples or shards not matching the index */
	uint64_t queued;        /* shards waiting for a worker now */
	uint64_t active;        /* shard fetches in progress now */
	uint64_t views;         /* reads answered as zero-copy spans (all) */
	uint64_t views_streaming; /* of views: from a shard still streaming */
	uint64_t views_refused; /* views not made: bytes unlike the index */
	uint64_t bypassed;      /* range reads of shards not admitted */
	uint64_t peer_reads;    /* samples from another mount's download */
	uint64_t passes;        /* passes over the tracked view completed */
	uint64_t pass_left;     /* samples this pass has not read */
	/* Demand first (issue 46, cache/store/shards.h): a reader's sample
	 * fetched by a range GET ahead of its shard, their bytes, refusals;
	 * reader time waiting for the network, all, this pass, last pass. */
	uint64_t demand_ranges, range_bytes, ranges_refused;
	double net_wait_s, net_wait_pass_s, net_wait_last_pass_s;
};

/* The disk store's figures (cache/store/store.h); all 0 without one. */
struct dataset_store_stats {
	uint64_t entries;
	uint64_t bytes;        /* on disk, data + footers */
	uint64_t cap;
	uint64_t evictions;
	uint64_t corrupt;      /* entries found corrupt and dropped */
	uint64_t write_errors; /* entries that could not be written */
	uint64_t waits;        /* writers that waited for another mount's */
};

/* The echo pool's figures (cache/echo/pool.h, pool_stats); all 0 unless
 * echoing. */
struct dataset_echo_stats {
	uint64_t pass;          /* current pass, from 1 */
	uint64_t fresh_in_pass; /* samples that entered the pool this pass */
	uint64_t fresh_served;  /* own_served included */
	uint64_t own_served;    /* paths served their own sample (exact first) */
	uint64_t echoes_served;
	double effective_echo;  /* served / fresh, 0 if none */
	double stall_s;         /* time readers waited for a sample */
	uint64_t pool_bytes;
	uint64_t pool_samples;
	uint64_t dropped;       /* dropped to stay within mem_size */
	uint64_t read_errors;   /* samples whose bytes could not be read */
	uint64_t timeouts;      /* takes that gave up waiting */
	uint64_t rejected;      /* samples the decoder refused */
	uint64_t given_back;    /* fresh samples given back, unwanted */
	uint64_t reread;        /* given-back samples read again */
	uint64_t owed;          /* given-back samples owed a fresh serve */
	uint64_t parked;        /* takes waiting now */
	/* The adaptive mode's governor (cache/echo/governor.h). */
	double echo_factor;     /* echoes per fresh sample allowed now */
	double fresh_rate;      /* fresh/s measured at that factor */
	double best_fresh_rate; /* best fresh/s at any factor */
	const char *echo_reason; /* why it last changed ("" in other modes) */
	uint64_t echo_changes;
	/* Echoes served by opens of their class since their last serve. */
	uint64_t echo_age_p10, echo_age_p50;
	uint64_t fresh_ready;   /* read, never served yet */
};

/* The converted outputs' figures (preprocessing exact mounts). */
struct dataset_output_stats {
	uint64_t hits, misses, rejected;
};

/* The prepared-sample tier's figures (cache/image/prepared.h); on: in use. */
struct dataset_prepared_stats {
	int on;
	uint64_t hits, misses, writes, corrupt, bytes, entries, evictions;
	uint64_t queued, skipped; /* waiting for the writer; not kept */
	/* Not kept because it was the sample's first use (issue 47: the tier
	 * fills from second uses), or first use with the seen set full. */
	uint64_t skipped_first, skipped_seen_full;
	uint64_t seen;	 /* samples known to have been used */
	double writer_s; /* seconds the writer spent writing entries */
};

struct dataset_stats {
	struct dataset_read_stats reads;
	struct dataset_net_stats net;
	struct dataset_store_stats store;
	struct dataset_echo_stats echo;
	struct dataset_output_stats outputs;
	struct dataset_prepared_stats prepared;
	uint64_t cached_groups; /* groups complete in the disk cache */
};

struct dataset;

/* Once per process, before any thread starts (the HTTP library's global
 * state). Returns 0 or -EIO. */
MUST_CHECK
int dataset_global_init(void);

/* url with its userinfo and query string replaced by "***" (see
 * http_redact), into buf; returns buf. For anything shown to a user. */
const char *dataset_redact(const char *url, char *buf, size_t buflen);

/* The network library's version line (libcurl, its TLS backend; static). */
const char *dataset_net_version(void);

/* Open the dataset of o->source: the HTTP client, the disk store under
 * o->cache_dir (without one, with a logged warning, when it can't be
 * opened), the index (given, cached, beside the shards or built; see
 * cache/index/resolve.h), the shard readers with their fetch threads, the
 * partition (o->rank of o->world), and with o->image.on the decode workers
 * (and, unless o->echo.on, the converted outputs of an exact mount). The
 * echo pool starts later, with dataset_echo_start, once the caller has
 * classed the samples. o is copied; its strings are borrowed for the
 * dataset's life. Returns 0 with *out set (free with dataset_close) or the
 * -errno of what failed with a one-line reason in err. */
MUST_CHECK
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
MUST_CHECK
int dataset_check(const struct dataset_opts *o, struct dataset_check *out,
		  char *err, size_t errlen);

/* Shutdown, first step, from any thread: reads waiting for data,
 * shard streams, transfers and backoffs end now (with -ECANCELED). Accepts
 * NULL. */
void dataset_cancel(struct dataset *ds);
/* Stops the echo pool, the decode workers and the fetch threads and frees
 * what dataset_open made. No read may be in progress and every echo sample
 * must have been released. Accepts NULL. */
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
/* Group g's URL (its shard's) redacted as dataset_redact does, for log
 * lines: the index holds SOURCE's own URL, credentials and all. Into buf,
 * truncated to fit; returns buf, "" for g out of range. */
const char *dataset_group_url(const struct dataset *ds, uint32_t g, char *buf,
			      size_t buflen);
/* Bytes of every group together (the remote data's size). */
uint64_t dataset_total_bytes(const struct dataset *ds);
/* Where the index came from ("option", "cache", "beside", "built", or
 * "given" for dataset_wrap of cache/dataset_parts.h; static) and how many tar members were skipped
 * while building it (0 unless built). */
const char *dataset_index_from(const struct dataset *ds);
uint64_t dataset_tar_skipped(const struct dataset *ds);
/* Samples whose .cls was not a usable label, met while building the index. */
uint64_t dataset_bad_label(const struct dataset *ds);

/* Members (a format 3 index; the samples layout): every tar member of
 * every sample, labelled or not, numbered after the samples, from
 * dataset_nsamples() to dataset_nsamples() + dataset_nmembers() - 1.
 * dataset_key, dataset_ext (for a member its whole extension as in the
 * tar, "seg.PNG"), dataset_size, dataset_group, dataset_in_part,
 * dataset_read and dataset_read_span take these numbers as they take
 * samples; dataset_label of a member is "". A member that is also a
 * sample's image is listed under both numbers. dataset_has_members: 1 when
 * the index lists them (format 3), even if there are none. */
int dataset_has_members(const struct dataset *ds);
size_t dataset_nmembers(const struct dataset *ds);
/* For each member k (nmembers of them), into out[k]: the number of the
 * sample whose image it is (same shard, offset and size), so that reads of
 * it are checked against the sample's sum, spliced and counted in passes
 * like the imagefolder layout's, else its own member number. */
void dataset_member_samples(const struct dataset *ds, uint32_t *out);

/* Read up to len bytes at off of the sample's bytes into buf, blocking
 * until they are there (fetching the sample's group in the background).
 * Returns the byte count (0 at or past the end, less than len only at the
 * end) or -errno: -EIO (fetch failed; logged), -ETIMEDOUT, -ECANCELED
 * (stopping), -EINVAL (bad sample), -ENXIO (no shard readers). */
MUST_CHECK
ssize_t dataset_read(struct dataset *ds, uint32_t sample, uint64_t off,
		     size_t len, void *buf);
/* A sample's bytes as a place in an open file, for replies that splice
 * them instead of copying (cache/store/shards.h has the details). */
struct dataset_span {
	int fd;
	uint64_t pos; /* in fd */
	size_t len;
	/* The dataset's own, for dataset_span_done: the pinned file. */
	struct {
		void *ref;
		uint32_t group;
		int streaming;
	} pin;
};

/* The sample's bytes from off, at most len, as a span of a verified cache
 * file, when they can be served without a copy: the whole sample is asked
 * for (off 0, len at least its size) and its group is cached, or still
 * downloading with the sample's bytes already written (a span of the
 * download's temp file). The bytes were checked against the index just now
 * and the file stays pinned (or the download's commit waits) until
 * dataset_span_done. Returns 0, -EAGAIN (use dataset_read) or -EINVAL. */
MUST_CHECK
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
MUST_CHECK
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
 * options; a wrapped dataset is world 1 until called). Call before any
 * reader or pool uses the dataset. Returns 0, or -EINVAL with a one-line
 * reason in err (world larger than the shard count, rank >= world). */
MUST_CHECK
int dataset_set_part(struct dataset *ds, uint32_t rank, uint32_t world,
		     uint64_t seed, char *err, size_t errlen);
/* 1 if the sample is in this rank's view (always, with world 1). */
int dataset_in_view(const struct dataset *ds, uint32_t sample);
/* 1 if the sample's (or member's) shard is in this rank's part (trimmed
 * samples included; always, with world 1). */
int dataset_in_part(const struct dataset *ds, uint32_t sample);
void dataset_get_part(const struct dataset *ds, struct dataset_part *out);
/* Samples per shard (the partition's weights), nshards long; caller
 * frees. */
uint64_t *dataset_group_counts(const struct dataset *ds);

/* Echo mounts (cache/echo/pool.h has the design): samples handed out
 * fresh or echoed, per class. A dataset_sample is one held sample:
 * immutable bytes, reference counted, opaque; its accessors take no lock.
 * All of these accept a dataset without an echo pool: takes fail with
 * -ENXIO, the others do nothing. */
#define DATASET_NO_CLASS UINT32_MAX

struct dataset_sample;

const uint8_t *dataset_sample_data(const struct dataset_sample *s);
size_t dataset_sample_len(const struct dataset_sample *s);
/* The source sample's number (for user.echofs.source). */
uint32_t dataset_sample_id(const struct dataset_sample *s);

/* Start the echo pool with the echo options given to dataset_open.
 * class_of[i] (nsamples long, copied) is sample i's class (< nclasses) or
 * DATASET_NO_CLASS; samples outside this rank's part are left out here
 * unless the options repartition every pass. Returns 0, or the pool's
 * -errno with a one-line reason in err (-EBUSY: started already). */
MUST_CHECK
int dataset_echo_start(struct dataset *ds, const uint32_t *class_of,
		       uint32_t nclasses, char *err, size_t errlen);
/* The samples layout's whole-sample echo (fs/visits.c): the pool streams
 * the index's members instead of its samples, one member per key classed
 * (class_of is dataset_nmembers() long, DATASET_NO_CLASS for the rest),
 * and a taken sample's number (dataset_sample_id) is a member number
 * (from dataset_nsamples()). No preprocessing, no repartition (-EINVAL);
 * otherwise as dataset_echo_start. */
MUST_CHECK
int dataset_echo_start_members(struct dataset *ds, const uint32_t *class_of,
			       uint32_t nclasses, char *err, size_t errlen);
/* Another reference to taken sample s, for another binding serving the
 * same take (the members of one visit): the take counts as one serve,
 * committed by the first dataset_echo_commit of any of its references and
 * given back only by the dataset_echo_untake of the last, if none was
 * committed. Each reference is let go of on its own. */
struct dataset_sample *dataset_echo_share(struct dataset *ds,
					  struct dataset_sample *s);
/* 1 once dataset_echo_start succeeded. */
int dataset_echoes(const struct dataset *ds);
/* Stop and free the echo pool (every sample released; no take parked),
 * so that it can be started again. Accepts NULL. */
void dataset_echo_end(struct dataset *ds);

/* Reserve a sample of class cls for one binding: fresh if the policy can,
 * else an echo; blocks up to the pool's wait. 0 with a reference in *out,
 * or -ETIMEDOUT, -EIO (every sample of the class is bad), -EINVAL (bad
 * class), -ESHUTDOWN (stopping), -ENXIO. */
MUST_CHECK
int dataset_echo_take(struct dataset *ds, uint32_t cls,
		      struct dataset_sample **out);
/* Completion of a parked take: err 0 with a reference in s, or
 * -ETIMEDOUT, -EIO, -EINTR or -ESHUTDOWN with s NULL; called exactly once,
 * from another thread. */
typedef void (*dataset_echo_done_fn)(void *ud, int err,
				     struct dataset_sample *s);
/* dataset_echo_take without blocking: 0 with *out now, -EINPROGRESS when
 * parked (done(ud, ...) is called later), -EINTR (interrupted before it
 * parked), or -errno. tag (not NULL) names it for dataset_echo_cancel. */
MUST_CHECK
int dataset_echo_take_async(struct dataset *ds, uint32_t cls, const void *tag,
			    dataset_echo_done_fn done, void *ud,
			    struct dataset_sample **out);
/* Answer the parked take named tag with -EINTR; 1 if it was parked. */
MUST_CHECK
int dataset_echo_cancel(struct dataset *ds, const void *tag);
/* Answer every parked take with -ESHUTDOWN. */
void dataset_echo_cancel_all(struct dataset *ds);
/* Shutdown, first step: takes return -ESHUTDOWN, the stream stops. */
void dataset_echo_stop(struct dataset *ds);
/* The reserved sample was opened: count the serve. Once per take. */
void dataset_echo_commit(struct dataset *ds, struct dataset_sample *s);
/* Give back a take never committed (fresh again if it was fresh); releases
 * the reference. */
void dataset_echo_untake(struct dataset *ds, struct dataset_sample *s);
/* Drop the reference of a take. Accepts NULL. */
void dataset_echo_release(struct dataset *ds, struct dataset_sample *s);

/* The echo factor and mode in force, and a change of them at run time
 * (.echofs/config): 0, -EINVAL (echo outside 1..1000, unknown mode) or
 * -EBUSY (dataset_echo_retire was called). */
void dataset_echo_get(struct dataset *ds, double *echo,
		      enum dataset_echo_mode *mode);
int dataset_echo_set(struct dataset *ds, double echo,
		     enum dataset_echo_mode mode);
/* Fresh samples of class cls ready now. */
uint64_t dataset_echo_ready(struct dataset *ds, uint32_t cls);
/* Takes (lookups, opens) parked in the pool now. */
uint64_t dataset_echo_parked(struct dataset *ds);

/* Exact when local (issue 29): 1 when an adaptive mount with exact first
 * has nothing left to echo for. Every shard is on local disk, so no open
 * will wait for the network (unless another mount sharing the cache
 * directory evicts one), and exact first serves every path its own sample;
 * the pool has no parked request. The mount (fs/) may then stop asking for
 * opens and serve exactly for good (dataset_echo_retire), provided it
 * checks each own path at its lookup (dataset_echo_check_own), so that a
 * bad image is still found before the kernel reads it. Scans every shard:
 * call it seldom. */
int dataset_echo_may_retire(struct dataset *ds);
/* The mount serves every path its own sample from now on: the reason in
 * the statistics says "retired", and dataset_echo_set refuses with
 * -EBUSY (the mount can no longer see its opens). */
void dataset_echo_retire(struct dataset *ds);
/* 1 if every shard is in the disk cache (shards_all_local). */
int dataset_all_local(struct dataset *ds);

/* Exact first (issue 29): 1 when the open of sample's own path on this echo
 * mount should be served the sample itself, as an exact mount serves it
 * (dataset_read, or dataset_output_get when converting), not a take from
 * the pool. True on an adaptive mount (unless exact_first=0) whose
 * rendering has no random part (no augment=) for a sample whose shard is on
 * local disk: serving it waits for no network, so there is no idle time an
 * echo could fill, and on a CPU-bound node an echo costs what the fresh
 * serve does (a decode) and takes its place. Echoes fill the opens that
 * would wait for a fetch. A sample the pool took in its current or last pass
 * stays the pool's (pool_claim_own): a sample is served by its path or by
 * the pool, never both, so echo=1 serves each once a pass. 0 on other
 * mounts. */
int dataset_echo_own(struct dataset *ds, uint32_t sample);
/* The lookup of a path served its own sample (dataset_echo_own, or any
 * own path once retired): on a converting mount its output is made at the
 * first such lookup (kept for the READs; later ones trust it), and one
 * that cannot be because the image is bad (the transform refused its
 * bytes, read whole) marks the sample, so that dataset_echo_own says no
 * from now on and the path is echoed instead (the pool skips bad samples).
 * Any other failure (the fetch failed, the read timed out, no memory) is
 * returned and marks nothing: the next call tries again. 0 (also on mounts
 * that do not convert) or -errno (-EIO for a sample marked bad before). */
MUST_CHECK
int dataset_echo_check_own(struct dataset *ds, uint32_t sample);
/* The open of a path served its own sample: dataset_echo_check_own, and 0
 * is counted as a fresh serve for the governor and the statistics. */
MUST_CHECK
int dataset_echo_open_own(struct dataset *ds, uint32_t sample);
/* 1 when exact first knows the sample for a bad image: its output could
 * not be made at a lookup because the image is bad, or the pool's ingest
 * failed it. A failure of dataset_echo_check_own that leaves this 0 was
 * not the image's: the caller fails with it, and does not stand in. */
int dataset_echo_known_bad(struct dataset *ds, uint32_t sample);
/* The stand-in for a bad image on an echo mount that serves its path as
 * its own (a retired mount, or exact first): among the candidates, the
 * samples of its class in the tree's order (at(ud, k) for k < count; the
 * bad one is k = self), the first after it, in a circle, whose image is
 * good (dataset_echo_check_own). local: only candidates whose shard is on
 * local disk; *skipped (if not NULL) counts the others. Returns the
 * candidate's k, or UINT32_MAX when none is. */
typedef uint32_t (*dataset_candidate_fn)(const void *ud, uint32_t k);
uint32_t dataset_echo_stand_in(struct dataset *ds, uint32_t count,
			       uint32_t self, dataset_candidate_fn at,
			       const void *ud, int local, uint32_t *skipped);
/* "adaptive" / "fixed" / "greedy" <-> mode: 0 or -EINVAL; the name is
 * static. */
MUST_CHECK
int dataset_echo_mode_parse(const char *s, enum dataset_echo_mode *out);
const char *dataset_echo_mode_name(enum dataset_echo_mode m);

/* The echo stage in force (echo_stage=auto resolved): "encoded",
 * "before_augment" or "after_augment"; static. */
const char *dataset_echo_stage_name(const struct dataset *ds);

/* What an echo binding serves of its sample (echo_stage, format). */
enum dataset_echo_serve {
	DATASET_SERVE_HELD,    /* the held bytes as they are */
	DATASET_SERVE_AUGMENT, /* a new crop/flip made per binding */
	DATASET_SERVE_RENDER,  /* PPM crop/flip rendered at each READ */
	DATASET_SERVE_DECODE,  /* held bytes decoded and augmented per
				* binding (echo_stage=encoded) */
};
enum dataset_echo_serve dataset_echo_serving(const struct dataset *ds);
/* SERVE_DECODE: the binding's bytes decoded and transformed from taken
 * sample s's held bytes, a different crop/flip for every rand. 0 with a
 * malloc'd *out, or -errno (a bad image: logged, rate-limited). */
MUST_CHECK
int dataset_echo_decode(struct dataset *ds, const struct dataset_sample *s,
			uint64_t rand, uint8_t **out, size_t *outlen);
/* A take whose bytes are bad (dataset_echo_decode failed): undone, and the
 * sample leaves the pool for good, counted once in errors.image; releases
 * the reference. */
void dataset_echo_discard(struct dataset *ds, struct dataset_sample *s);
/* SERVE_AUGMENT: the binding's bytes made from held bytes, a different
 * crop/flip for every rand. 0 with a malloc'd *out, or -errno (logged). */
MUST_CHECK
int dataset_echo_augment(struct dataset *ds, const uint8_t *data, size_t len,
			 uint64_t rand, uint8_t **out, size_t *outlen);
/* SERVE_RENDER: the rendering's length, and bytes [off, off + n) of it
 * for rand written to dst (count or -errno, logged). */
MUST_CHECK
ssize_t dataset_echo_render_size(struct dataset *ds, const uint8_t *data,
				 size_t len);
ssize_t dataset_echo_render_range(struct dataset *ds, const uint8_t *data,
				  size_t len, uint64_t rand, uint64_t off,
				  uint8_t *dst, size_t n);

/* Preprocessing exact mounts: each file is its sample converted (decoded,
 * resized, re-encoded) once and kept a while (cache/image/outputs.h). */
struct dataset_output;

/* 1 on a preprocessing exact mount. */
int dataset_converts(const struct dataset *ds);
/* The size every converted file has (PPM with a crop), or -1 when each
 * must be converted to be known. */
ssize_t dataset_output_fixed_size(const struct dataset *ds);
/* The sample converted: 0 with a reference in *out, or -errno (-EIO for
 * an image that cannot be converted, counted; -ENXIO when not
 * converting). */
MUST_CHECK
int dataset_output_get(struct dataset *ds, uint32_t sample,
		       struct dataset_output **out);
const uint8_t *dataset_output_data(const struct dataset_output *o);
size_t dataset_output_len(const struct dataset_output *o);
void dataset_output_put(struct dataset *ds, struct dataset_output *o);

/* The image libraries' versions (static buffer filled in buf). */
void dataset_image_versions(char *buf, size_t len);

#endif
