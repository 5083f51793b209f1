/* governor.c - the adaptive echo mode's controller: measures the fresh rate
 * at each echo factor and keeps the highest factor that holds it (see
 * governor.h). */
#include "cache/echo/governor.h"

#include "common/util.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>

/* Windows a level's estimate is made of: its last GOV_KEEP while it
 * lives, so that a level the governor stays at follows a change of the
 * readers within GOV_KEEP windows. */
#define GOV_KEEP 8

/* A level's last windows' fresh rates, their mean and the squared
 * standard error of the mean. */
struct level {
	double factor;
	double rate[GOV_KEEP];
	unsigned n, next;
	double mean, se2;
	uint64_t seen; /* window number of its last measurement, 0: none */
};

struct echo_gov {
	struct echo_gov_opts o;
	struct level lv[GOV_MAX_LEVELS];
	unsigned nlv, cur;
	/* The open window, and the time of the last tick. */
	double ws, last;
	uint64_t fresh, served;
	/* Fresh samples read ahead and not served (echo_gov_backlog), now
	 * and when the window opened. */
	uint64_t backlog, backlog0;
	/* Windows closed at the current level (the first, a transition, is
	 * not measured) and since the last probe down. */
	unsigned at_level;
	/* Stepping down after a fall: goes on while each step pays. */
	bool descend;
	/* The level the last step up left, and the lowest level found below
	 * since the climb last held there (nlv: none; see decide). */
	unsigned from, ceil;
	uint64_t windows, idle, changes;
	enum gov_reason reason;
};

static int settle_opts(struct echo_gov_opts *o, const struct echo_gov_opts *in)
{
	*o = *in;
	if (!isfinite(o->echo) || o->echo < 1.0 || !isfinite(o->window_s) ||
	    o->window_s < 0 || !isfinite(o->keep) || o->keep < 0 ||
	    o->keep > 1)
		return -EINVAL;
	if (o->window_s == 0)
		o->window_s = 1.0;
	if (o->min_serves == 0)
		o->min_serves = 32;
	if (o->keep == 0)
		o->keep = 0.95;
	if (o->settle == 0)
		o->settle = 3;
	if (o->stale == 0)
		o->stale = 30;
	if (o->probe == 0)
		o->probe = 15;
	return 0;
}

/* Factors 1 .. E: fine steps below 2 (1, 1.125, 1.25, 1.5), where a
 * CPU-bound node finds the most echo that keeps its fresh rate (each echo
 * a reader takes costs a fraction of a decode), then sqrt(2) apart
 * (2, 2.83, 4, ...); E exactly last. */
static void build_levels(struct echo_gov *g)
{
	static const double fine[] = {1.0, 1.125, 1.25, 1.5, 2.0};
	double e = g->o.echo;
	unsigned n = 0;

	for (size_t i = 0; i < sizeof(fine) / sizeof(fine[0]); i++)
		if (fine[i] < e * 0.98 || i == 0)
			g->lv[n++] = (struct level){.factor = fine[i]};
	for (double f = 2.0 * M_SQRT2; f < e * 0.98 && n < GOV_MAX_LEVELS - 1;
	     f *= M_SQRT2)
		g->lv[n++] = (struct level){.factor = f};
	if (e > 1.0)
		g->lv[n++] = (struct level){.factor = e};
	g->nlv = g->ceil = n;
	g->cur = g->from = 0;
	g->at_level = 0;
	g->reason = GOV_START;
}

int echo_gov_open(const struct echo_gov_opts *o, double now,
		  struct echo_gov **out)
{
	struct echo_gov *g;
	struct echo_gov_opts s;

	*out = NULL;
	if (!o || settle_opts(&s, o) != 0)
		return -EINVAL;
	g = xcalloc(1, sizeof(*g));
	g->o = s;
	g->ws = g->last = now;
	build_levels(g);
	*out = g;
	return 0;
}

void echo_gov_free(struct echo_gov *g)
{
	free(g);
}

void echo_gov_serve(struct echo_gov *g, bool fresh)
{
	g->served++;
	g->fresh += fresh;
}

void echo_gov_backlog(struct echo_gov *g, uint64_t ready)
{
	g->backlog = ready;
}

void echo_gov_unserve(struct echo_gov *g, bool fresh)
{
	/* A take given back after its window closed is not worth undoing. */
	if (g->served == 0 || (fresh && g->fresh == 0))
		return;
	g->served--;
	g->fresh -= fresh;
}

static bool live(const struct echo_gov *g, const struct level *l)
{
	return l->seen && g->windows - l->seen < g->o.stale;
}

/* Add a window's rate and recompute the mean and its squared standard
 * error (a level with one window is taken to vary by its whole mean: it
 * proves nothing yet). */
static void level_add(struct level *l, double rate)
{
	double sum = 0, ss = 0;

	l->rate[l->next] = rate;
	l->next = (l->next + 1) % GOV_KEEP;
	if (l->n < GOV_KEEP)
		l->n++;
	for (unsigned i = 0; i < l->n; i++)
		sum += l->rate[i];
	l->mean = sum / l->n;
	for (unsigned i = 0; i < l->n; i++)
		ss += (l->rate[i] - l->mean) * (l->rate[i] - l->mean);
	l->se2 = l->n < 2 ? l->mean * l->mean : ss / (l->n - 1) / l->n;
}

static const struct level *best_level(const struct echo_gov *g)
{
	const struct level *best = NULL;

	for (unsigned i = 0; i < g->nlv; i++)
		if (live(g, &g->lv[i]) &&
		    (!best || g->lv[i].mean > best->mean))
			best = &g->lv[i];
	return best;
}

/* Is a's fresh rate below keep x b's, beyond the noise? Serves come in
 * bursts (a shard's samples at once, a DataLoader's batch), so one window
 * can be far off: the gap must exceed twice the standard error of the
 * difference of the two means. */
static bool below_by(double keep, const struct level *a, const struct level *b)
{
	double gap = keep * b->mean - a->mean;

	return gap > 0 && gap * gap > 4.0 * (a->se2 + b->se2);
}

static bool below(const struct echo_gov *g, const struct level *a,
		  const struct level *b)
{
	return below_by(g->o.keep, a, b);
}

static void go(struct echo_gov *g, unsigned level, enum gov_reason why)
{
	if (why == GOV_DOWN) {
		g->descend = true;
	} else if (why == GOV_UP) {
		g->descend = false;
		g->from = g->cur;
	}
	g->cur = level;
	g->at_level = 0;
	g->reason = why;
	g->changes++;
}

/* The one decision after a level has settled (see governor.h). */
static bool decide(struct echo_gov *g)
{
	const struct level *l = &g->lv[g->cur], *best = best_level(g);
	unsigned k = g->cur;

	if (g->o.no_probing || g->at_level < g->o.settle + 1 || !best)
		return false;
	if (k > 0 && below(g, l, best)) {
		if (k < g->ceil)
			g->ceil = k;
		/* Straight back below a stride that overshot: the level it
		 * left held. */
		go(g, g->reason == GOV_UP && g->from < k - 1 ? g->from : k - 1,
		   GOV_DOWN);
		return true;
	}
	/* After a fall (the readers changed), the step down paid if the
	 * level left is below this one: try one more at once rather than at
	 * the next probe, so the way down takes a few windows a level. */
	if (g->descend && k > 0 && k + 1 < g->nlv && live(g, &g->lv[k + 1]) &&
	    below(g, &g->lv[k + 1], l)) {
		go(g, k - 1, GOV_DOWN);
		return true;
	}
	g->descend = false;
	if (k >= g->ceil)
		g->ceil = g->nlv; /* a level found below holds now */
	/* Up one level; or, when the step up that led here cost no fresh
	 * samples at all (its rate not below the best's beyond the noise,
	 * with keep 1 rather than 0.95), twice as many levels as that step
	 * took: a network-bound mount's climb doubles its stride (1, 2, 4
	 * levels) and reaches E = 4 in 3 steps rather than 6, while on a
	 * CPU-bound node, where each step costs fresh samples, it stays 1.
	 * A stride stops below the lowest level found below (the re-check of
	 * a stale verdict goes one level, as before) and never goes onto or
	 * past a level whose live estimate is below. */
	unsigned stride = 1, up = 0;
	if (g->reason == GOV_UP && !below_by(1.0, l, best))
		stride = 2 * (k - g->from);
	while (up < stride && k + up + 1 < g->nlv &&
	       (up == 0 || k + up + 1 < g->ceil) &&
	       (!live(g, &g->lv[k + up + 1]) ||
		!below(g, &g->lv[k + up + 1], best)))
		up++;
	if (up > 0) {
		go(g, k + up, GOV_UP);
		return true;
	}
	if (k > 0 && g->at_level >= g->o.probe) {
		go(g, k - 1, GOV_PROBE);
		return true;
	}
	return false;
}

/* A window with data at the current level; its first after a change is a
 * transition (the echo credit and the readers adjust) and only counted.
 * A level's windows add up while its estimate lives. */
static bool close_window(struct echo_gov *g, double dur)
{
	struct level *l = &g->lv[g->cur];

	g->windows++;
	if (g->at_level++ > 0) {
		if (!live(g, l))
			l->n = l->next = 0;
		/* What the source supplied, not what readers took: a read-ahead
		 * drained in one window is not a faster link (issue 45: a burst
		 * of 1,000 buffered samples made the best rate 824/s on a
		 * 465/s link, and the next levels "fell" below it). */
		double made = (double)g->fresh + (double)g->backlog -
			      (double)g->backlog0;
		level_add(l, fmax(made, 0.0) / dur);
		l->seen = g->windows;
	}
	return decide(g);
}

bool echo_gov_tick(struct echo_gov *g, double now)
{
	double dur = now - g->ws, gap = now - g->last;
	bool changed = false;

	g->last = now;
	if (gap > g->o.window_s) {
		/* Nobody read for a window or more (a trainer evaluating, an
		 * epoch boundary): the open window would measure the pause,
		 * not the echo factor. */
		g->idle++;
		g->ws = now;
		g->served = g->fresh = 0;
		g->backlog0 = g->backlog;
		return false;
	}
	if (dur < g->o.window_s)
		return false;
	if (g->served < g->o.min_serves && dur < 8 * g->o.window_s)
		return false; /* too few serves to measure: extend */
	if (g->served < 4)
		g->idle++; /* nobody reads: no information */
	else
		changed = close_window(g, dur);
	g->ws = now;
	g->served = g->fresh = 0;
	g->backlog0 = g->backlog;
	return changed;
}

int echo_gov_set_top(struct echo_gov *g, double echo, double now)
{
	if (!isfinite(echo) || echo < 1.0)
		return -EINVAL;
	g->o.echo = echo;
	build_levels(g);
	g->reason = GOV_SET;
	g->changes++;
	g->ws = g->last = now;
	g->served = g->fresh = 0;
	return 0;
}

double echo_gov_factor(const struct echo_gov *g)
{
	return g->lv[g->cur].factor;
}

void echo_gov_get(const struct echo_gov *g, struct echo_gov_state *out)
{
	const struct level *l = &g->lv[g->cur], *best = best_level(g);

	*out = (struct echo_gov_state){
		.factor = l->factor,
		.level = g->cur,
		.nlevels = g->nlv,
		.fresh_rate = live(g, l) ? l->mean : 0,
		.best_rate = best ? best->mean : 0,
		.best_factor = best ? best->factor : 0,
		.reason = g->reason,
		.windows = g->windows,
		.idle = g->idle,
		.changes = g->changes,
	};
}

const char *echo_gov_reason_name(enum gov_reason r)
{
	switch (r) {
	case GOV_UP:
		return "up";
	case GOV_DOWN:
		return "down";
	case GOV_PROBE:
		return "probe";
	case GOV_SET:
		return "set";
	default:
		return "start";
	}
}
