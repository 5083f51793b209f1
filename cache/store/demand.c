/* demand.c - the demand-first decision (see demand.h): range GET now, or
 * wait for the shard. Pure functions: no lock, no I/O. */
#include "cache/store/demand.h"

double demand_range_cost(const struct demand_link *l, uint64_t bytes)
{
	double rtt = l->rtt_s > 0 ? l->rtt_s : DEMAND_RTT0_S;
	double b = (double)bytes + DEMAND_HEADER_BYTES;

	return l->rate_Bps > 0 ? rtt + b / l->rate_Bps : rtt;
}

/* The range bytes a mount may still spend: a share of what whole shards
 * bring, never less than a share of the dataset (the first pass). */
static bool within_budget(const struct demand_case *c)
{
	uint64_t base = c->fetched_bytes > c->dataset_bytes ? c->fetched_bytes
							    : c->dataset_bytes;
	double cost = (double)c->sample_bytes + DEMAND_HEADER_BYTES;

	return (double)c->range_bytes + cost <= DEMAND_BUDGET * (double)base;
}

enum demand_choice demand_decide(const struct demand_case *c,
				 const struct demand_link *l)
{
	if (c->ranges_refused || c->sample_bytes == 0)
		return DEMAND_WAIT;
	if ((double)c->sample_bytes > DEMAND_MAX_SHARE * (double)c->shard_bytes)
		return DEMAND_WAIT;
	/* The stream gets there first (or about when a range would): the
	 * range's bytes would be fetched twice for nothing. */
	if (c->shard_eta_s >= 0 &&
	    c->shard_eta_s <= demand_range_cost(l, c->sample_bytes))
		return DEMAND_WAIT;
	return within_budget(c) ? DEMAND_RANGE : DEMAND_WAIT;
}
