/* test_demand.c - the demand-first decision (cache/store/demand.c): when
 * a reader's sample is worth a range GET, and the budget that bounds a
 * shuffled first pass to 1 + DEMAND_BUDGET times the dataset. */
#include "cache/store/demand.h"

#include <criterion/criterion.h>

#define MB (1024.0 * 1024.0)

struct row {
	const char *what;
	struct demand_case c;
	struct demand_link l;
	enum demand_choice want;
};

/* Fashion-MNIST-like: 600-byte samples in 1.5 MB shards of a 90 MB
 * dataset, a 2.5 Mbit link (312 kB/s) with a 5 ms round trip. */
#define SAMPLE 600
#define SHARD ((uint64_t)(1.5 * MB))
#define DATA ((uint64_t)(90 * MB))
#define LINK                                                                   \
	{                                                                      \
		.rtt_s = 0.005, .rate_Bps = 312500                             \
	}

static const struct row rows[] = {
	{"shard not started: range now",
	 {SAMPLE, SHARD, -1, false, 0, 0, DATA},
	 LINK,
	 DEMAND_RANGE},
	{"stream 4 s away from the sample: range now",
	 {SAMPLE, SHARD, 4.0, false, 0, 0, DATA},
	 LINK,
	 DEMAND_RANGE},
	{"stream 1 ms away: wait for it",
	 {SAMPLE, SHARD, 0.001, false, 0, 0, DATA},
	 LINK,
	 DEMAND_WAIT},
	{"stream as near as a range GET: wait",
	 {SAMPLE, SHARD, 0.006, false, 0, 0, DATA},
	 LINK,
	 DEMAND_WAIT},
	{"nothing known of the link: range now",
	 {SAMPLE, SHARD, -1, false, 0, 0, DATA},
	 {0, 0},
	 DEMAND_RANGE},
	{"server refused a range before: wait",
	 {SAMPLE, SHARD, -1, true, 0, 0, DATA},
	 LINK,
	 DEMAND_WAIT},
	{"sample is most of its shard: wait",
	 {SHARD / 2, SHARD, -1, false, 0, 0, DATA},
	 LINK,
	 DEMAND_WAIT},
	{"empty sample: nothing to fetch",
	 {0, SHARD, -1, false, 0, 0, DATA},
	 LINK,
	 DEMAND_WAIT},
	{"budget spent (a fifth of the dataset): wait",
	 {SAMPLE, SHARD, -1, false, (uint64_t)(0.2 * DATA), 0, DATA},
	 LINK,
	 DEMAND_WAIT},
	{"budget nearly spent, one more fits",
	 {SAMPLE, SHARD, -1, false,
	  (uint64_t)(0.2 * DATA) - SAMPLE - DEMAND_HEADER_BYTES, 0, DATA},
	 LINK,
	 DEMAND_RANGE},
	{"later passes: budget grows with the shard bytes fetched",
	 {SAMPLE, SHARD, -1, false, (uint64_t)(0.2 * DATA), 2 * DATA, DATA},
	 LINK,
	 DEMAND_RANGE},
};

Test(demand, table)
{
	for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++) {
		const struct row *r = &rows[i];
		cr_expect_eq(demand_decide(&r->c, &r->l), r->want, "%s",
			     r->what);
	}
}

Test(demand, cost_is_round_trip_plus_bytes_over_rate)
{
	struct demand_link l = {.rtt_s = 0.01, .rate_Bps = 1000};

	cr_expect_float_eq(demand_range_cost(&l, 600), 0.01 + 1.0, 1e-9);
	l.rate_Bps = 0; /* unknown rate: the round trip alone */
	cr_expect_float_eq(demand_range_cost(&l, 600), 0.01, 1e-9);
	l.rtt_s = 0; /* nothing timed yet */
	cr_expect_float_eq(demand_range_cost(&l, 600), DEMAND_RTT0_S, 1e-9);
}

/* Whatever the order, range reads never add more than the budget: a
 * shuffled pass that asks for every sample before any shard arrives. */
Test(demand, shuffled_pass_stays_within_budget)
{
	struct demand_link l = LINK;
	struct demand_case c = {SAMPLE, SHARD, -1, false, 0, 0, DATA};
	uint64_t samples = DATA / 1500, ranged = 0;

	for (uint64_t i = 0; i < samples; i++) {
		if (demand_decide(&c, &l) == DEMAND_RANGE) {
			c.range_bytes += SAMPLE + DEMAND_HEADER_BYTES;
			ranged++;
		}
	}
	cr_expect(ranged > 0);
	cr_expect_leq((double)(DATA + c.range_bytes), 1.25 * (double)DATA);
}
