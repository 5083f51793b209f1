/* demand.h - demand first on exact mounts: whether a reader waiting for a
 * sample whose shard is not local fetches just the sample's bytes with a
 * range GET now, or waits for the whole-shard download (a pure decision,
 * driven by cache/store/shards.c and by the unit tests).
 *
 * A range GET costs a round trip plus its bytes (the sample's and about
 * DEMAND_HEADER_BYTES of response headers) over the link's rate, and those
 * bytes are fetched twice: once now, once more in the whole shard that is
 * still downloaded for the readers that come next. So a range read is
 * taken when
 *   - the server takes ranges (a refusal turns them off for the mount),
 *   - the shard's download will not bring the sample sooner than the
 *     range GET would (a stream already past it, or near it, is waited
 *     for; a shard queued or not started is not),
 *   - the sample is small against its shard (DEMAND_MAX_SHARE): a reader
 *     of most of a shard gains nothing from a range,
 *   - and the mount's budget of range bytes holds: at most DEMAND_BUDGET
 *     of the shard bytes fetched so far or of the dataset, whichever is
 *     more, so that a shuffled first pass receives at most 1 +
 *     DEMAND_BUDGET times the dataset's bytes (whole shards once, plus the
 *     range reads) whatever the reader's order. */
#ifndef ECHOFS_DEMAND_H
#define ECHOFS_DEMAND_H

#include <stdbool.h>
#include <stdint.h>

/* Response headers of one 206 (status line, Content-Range, ETag, ...),
 * counted against the budget with each range read. */
#define DEMAND_HEADER_BYTES 400u
/* Share of the shard bytes that range reads may add. */
#define DEMAND_BUDGET 0.2
/* A sample over this share of its shard waits for the shard. */
#define DEMAND_MAX_SHARE 0.25
/* Round trip assumed before any range read has been timed. */
#define DEMAND_RTT0_S 0.05

/* What the link looks like now (estimates; 0: not known yet). */
struct demand_link {
	double rtt_s;	 /* a small range GET's duration (EWMA) */
	double rate_Bps; /* bytes/s the link brings (whole-shard streams) */
};

/* The sample a reader waits for and its shard. */
struct demand_case {
	uint64_t sample_bytes;
	uint64_t shard_bytes;
	/* seconds until the shard's download brings the sample's last byte:
	 * < 0 when the shard is not streaming (queued or not started) */
	double shard_eta_s;
	bool ranges_refused;	/* the server said no to a range before */
	uint64_t range_bytes;	/* range-read bytes received so far */
	uint64_t fetched_bytes; /* whole-shard bytes received so far */
	uint64_t dataset_bytes; /* every shard's size */
};

enum demand_choice {
	DEMAND_WAIT,  /* wait for the whole shard */
	DEMAND_RANGE, /* fetch the sample's bytes now */
};

/* Seconds a range GET of `bytes` takes on link l. */
double demand_range_cost(const struct demand_link *l, uint64_t bytes);

/* The decision described above. */
enum demand_choice demand_decide(const struct demand_case *c,
				 const struct demand_link *l);

#endif
