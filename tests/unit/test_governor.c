/* test_governor.c - unit tests for the adaptive echo mode's governor
 * (cache/echo/governor.c) on a simulated clock: readers whose fresh rate
 * does or does not depend on the echo factor, with noise.
 *
 * ECHOFS_GOV_NO_PROBING=1 in the environment runs every case with probing
 * off (the governor never leaves factor 1): the cases that need it fail,
 * which shows they test the probing (issue 29's "fail when its probing is
 * disabled"). */
#include "cache/echo/governor.h"

#include "cache/echo/policy.h" /* echo_rng */

#include <criterion/criterion.h>
#include <errno.h>
#include <math.h>
#include <stdlib.h>

/* How a simulated node turns the echo factor e into fresh samples per
 * second. */
enum node_kind {
	NET_BOUND, /* the link sets the fresh rate, whatever e */
	CPU_BOUND, /* every echo a reader takes costs CPU the decoder needs */
	KNEE,	   /* the link's 100 fresh/s, a trainer that takes 200/s */
};

/* Network: 100 fresh/s. CPU: a fresh sample costs 10 ms of the shared
 * cores (decode, serve, the reader's work), an echo 8 ms (the reader's work
 * and the serve): fresh(e) = 1 / (0.010 + 0.008 (e - 1)), 100/s at e = 1,
 * 29/s at e = 4. */
static double fresh_rate(enum node_kind k, double e)
{
	if (k == KNEE) /* echo is free up to e = 2, then takes fresh serves */
		return fmin(100.0, 200.0 / e);
	return k == NET_BOUND ? 100.0 : 1.0 / (0.010 + 0.008 * (e - 1.0));
}

struct run {
	double t_end, t_switch; /* the node changes kind at t_switch */
	enum node_kind before, after;
	double noise;		/* relative noise of each 0.1 s of serves */
	double burst;		/* > 0: fresh serves come in the first 30% of
				 * every burst seconds (a shard's samples at
				 * once), echoes fill the rest */
	uint64_t seed;
	/* Results over [t_from, t_end): */
	double t_from;
	double mean_factor, at_top, at_bottom, fresh_per_s;
	double first_top, first_bottom_after_switch;
};

static struct echo_gov_opts gov_opts(double echo)
{
	struct echo_gov_opts o = {.echo = echo};
	const char *np = getenv("ECHOFS_GOV_NO_PROBING");

	o.no_probing = np && *np == '1';
	return o;
}

/* Feed the governor the serves the node makes at its factor, 1 ms a step,
 * serves one at a time (each a tick, as pool_commit does). */
static void simulate(struct run *r, double echo)
{
	struct echo_gov_opts o = gov_opts(echo);
	struct echo_gov *g;
	struct echo_rng rng;
	double fresh_acc = 0, echo_acc = 0, mult = 1;
	double sum_f = 0, n = 0, top = 0, bottom = 0, fresh = 0;
	const double dt = 0.001;

	echo_rng_seed(&rng, r->seed);
	cr_assert_eq(echo_gov_open(&o, 0, &g), 0);
	r->first_top = r->first_bottom_after_switch = -1;
	for (long i = 0; i * dt < r->t_end; i++) {
		double t = (double)i * dt, e = echo_gov_factor(g);
		enum node_kind k = t < r->t_switch ? r->before : r->after;
		double f = fresh_rate(k, e);
		if (i % 100 == 0)
			mult = 1 + r->noise * (2 * echo_rng_unit(&rng) - 1);
		if (r->burst > 0) {
			bool on = fmod(t, r->burst) < 0.3 * r->burst;
			fresh_acc += on ? f * mult * dt / 0.3 : 0;
			echo_acc += f * mult * (e - 1) * dt;
		} else {
			fresh_acc += f * mult * dt;
			echo_acc += f * mult * (e - 1) * dt;
		}
		for (; fresh_acc >= 1; fresh_acc -= 1) {
			echo_gov_serve(g, true);
			echo_gov_tick(g, t);
			if (t >= r->t_from)
				fresh++;
		}
		for (; echo_acc >= 1; echo_acc -= 1) {
			echo_gov_serve(g, false);
			echo_gov_tick(g, t);
		}
		if (e == echo && r->first_top < 0)
			r->first_top = t;
		if (t >= r->t_switch && e == 1 && r->first_bottom_after_switch < 0)
			r->first_bottom_after_switch = t;
		if (t >= r->t_from) {
			sum_f += e;
			n++;
			top += e == echo;
			bottom += e == 1;
		}
	}
	r->mean_factor = sum_f / n;
	r->at_top = top / n;
	r->at_bottom = bottom / n;
	r->fresh_per_s = fresh / (r->t_end - r->t_from);
	echo_gov_free(g);
}

/* Network-bound: echo costs no fresh sample, so the governor climbs to E
 * and stays there but for its probes. */
Test(governor, network_bound_climbs_to_e)
{
	for (uint64_t seed = 1; seed <= 5; seed++) {
		/* Odd seeds: the fresh samples come in bursts (bench_echo.sh's
		 * capped link: a 1 MB shard of 1,000 samples every 0.8 s). */
		struct run r = {.t_end = 300, .t_switch = 1e9,
				.before = NET_BOUND, .noise = 0.1,
				.burst = seed % 2 ? 0.8 : 0,
				.seed = seed, .t_from = 60};
		simulate(&r, 4.0);
		cr_assert_geq(r.first_top, 0, "seed %llu: never reached E",
			      (unsigned long long)seed);
		/* 12-13 s: 3 steps up of 4 windows (1, 2, then 4 levels);
		 * one level a step took 24-25. */
		cr_assert_lt(r.first_top, 20, "seed %llu: E after %.1f s",
			     (unsigned long long)seed, r.first_top);
		cr_assert_geq(r.mean_factor, 3.4,
			      "seed %llu: mean factor %.2f (%.0f%% at E)",
			      (unsigned long long)seed, r.mean_factor,
			      100 * r.at_top);
	}
}

/* A trainer that takes twice the link's fresh rate: echo is free up to a
 * factor of 2 and costs fresh samples above. A climb whose stride doubled
 * overshoots (1.5 to 4 at once), falls back to where it jumped from and
 * settles at 2 all the same. */
Test(governor, a_knee_is_found_after_an_overshoot)
{
	for (uint64_t seed = 1; seed <= 5; seed++) {
		struct run r = {.t_end = 300,
				.t_switch = 1e9,
				.before = KNEE,
				.noise = 0.1,
				.seed = seed,
				.t_from = 60};
		simulate(&r, 4.0);
		cr_assert(r.mean_factor >= 1.7 && r.mean_factor <= 2.3,
			  "seed %llu: mean factor %.2f",
			  (unsigned long long)seed, r.mean_factor);
		/* 96.4-96.7: the probes' cost (97.0 with one level a
		 * step); 93.2-94.2 when a stride jumps past a level found
		 * below. */
		cr_assert_geq(r.fresh_per_s, 0.95 * 100,
			      "seed %llu: %.1f fresh/s of 100",
			      (unsigned long long)seed, r.fresh_per_s);
	}
}

/* CPU-bound: every step up costs fresh samples, so the governor settles
 * at 1 and keeps at least 0.95 of the fresh rate without echo, its
 * periodic re-checks of the next level included. */
Test(governor, cpu_bound_settles_near_one)
{
	for (uint64_t seed = 1; seed <= 5; seed++) {
		struct run r = {.t_end = 300, .t_switch = 1e9,
				.before = CPU_BOUND, .noise = 0.1,
				.seed = seed, .t_from = 30};
		simulate(&r, 4.0);
		cr_assert_geq(r.at_bottom, 0.8, "seed %llu: %.0f%% at 1",
			      (unsigned long long)seed, 100 * r.at_bottom);
		cr_assert_geq(r.fresh_per_s, 0.95 * fresh_rate(CPU_BOUND, 1),
			      "seed %llu: %.1f fresh/s of %.1f without echo",
			      (unsigned long long)seed, r.fresh_per_s,
			      fresh_rate(CPU_BOUND, 1));
	}
}

/* The reader changes half-way: the governor follows within a bounded
 * number of windows (1 s each), both ways. */
Test(governor, follows_a_change_half_way)
{
	struct run up = {.t_end = 240, .t_switch = 120, .before = CPU_BOUND,
			 .after = NET_BOUND, .noise = 0.1, .seed = 7,
			 .t_from = 180};
	struct run down = {.t_end = 240, .t_switch = 120, .before = NET_BOUND,
			   .after = CPU_BOUND, .noise = 0.1, .seed = 8,
			   .t_from = 180};

	/* CPU-bound, then the network: the next level's verdict goes stale
	 * after 30 windows and is tried again; from then on it climbs. */
	simulate(&up, 4.0);
	cr_assert_geq(up.mean_factor, 3.4, "after the change: mean %.2f",
		      up.mean_factor);
	/* Network, then CPU-bound: a probe down (every 15 windows at a
	 * level) shows the fresh rate with less echo, and it steps down. */
	simulate(&down, 4.0);
	cr_assert_geq(down.first_bottom_after_switch, 120);
	cr_assert_lt(down.first_bottom_after_switch, 120 + 60,
		     "factor 1 only %.1f s after the change",
		     down.first_bottom_after_switch - 120);
	cr_assert_geq(down.at_bottom, 0.8, "after the change: %.0f%% at 1",
		      100 * down.at_bottom);
}

/* Windows with almost no serves (a trainer evaluating, an epoch boundary)
 * are dropped, not measured as a fall of the fresh rate. */
Test(governor, idle_windows_are_not_measured)
{
	struct echo_gov_opts o = gov_opts(4.0);
	struct echo_gov_state st;
	struct echo_gov *g;
	double t = 0;

	cr_assert_eq(echo_gov_open(&o, 0, &g), 0);
	for (int w = 0; w < 12; w++) /* 12 busy windows: it climbs */
		for (int i = 0; i < 100; i++, t += 0.01) {
			echo_gov_serve(g, i % 2 == 0);
			echo_gov_tick(g, t);
		}
	echo_gov_get(g, &st);
	cr_assert_gt(st.level, 0, "no climb in 12 busy windows");
	unsigned level = st.level;
	uint64_t windows = st.windows;
	t += 20; /* 20 s of nothing, then one serve */
	echo_gov_serve(g, true);
	echo_gov_tick(g, t);
	echo_gov_get(g, &st);
	cr_assert_eq(st.level, level);
	cr_assert_eq(st.windows, windows, "an idle window was measured");
	cr_assert_geq(st.idle, 1);
	echo_gov_free(g);
}

Test(governor, levels_and_options)
{
	struct echo_gov *g;
	struct echo_gov_state st;
	struct echo_gov_opts o = {.echo = 4.0};

	cr_assert_eq(echo_gov_open(&o, 0, &g), 0);
	echo_gov_get(g, &st);
	cr_assert_eq(st.nlevels, 7); /* 1, 1.125, 1.25, 1.5, 2, 2.83, 4 */
	cr_assert_eq(st.factor, 1.0);
	cr_assert_str_eq(echo_gov_reason_name(st.reason), "start");
	cr_assert_eq(echo_gov_set_top(g, 2.0, 1), 0);
	echo_gov_get(g, &st);
	cr_assert_eq(st.nlevels, 5);
	cr_assert_eq(st.factor, 1.0);
	cr_assert_str_eq(echo_gov_reason_name(st.reason), "set");
	cr_assert_eq(echo_gov_set_top(g, 0.5, 1), -EINVAL);
	cr_assert_eq(echo_gov_set_top(g, NAN, 1), -EINVAL);
	echo_gov_free(g);
	o.echo = 0.9;
	cr_assert_eq(echo_gov_open(&o, 0, &g), -EINVAL);
	cr_assert_null(g);
	o = (struct echo_gov_opts){.echo = 4, .keep = 1.5};
	cr_assert_eq(echo_gov_open(&o, 0, &g), -EINVAL);
	o = (struct echo_gov_opts){.echo = 1.2};
	cr_assert_eq(echo_gov_open(&o, 0, &g), 0);
	echo_gov_get(g, &st);
	cr_assert_eq(st.nlevels, 3); /* 1, 1.125, 1.2 */
	echo_gov_free(g);
}

/* A read-ahead drained at once is not a faster source (issue 45): the link
 * supplies 100 fresh/s throughout; for 8 s the readers take 10/s and the
 * other 90/s pile up ahead of them (720 samples), which they then take in
 * one second, while the governor climbs, before taking 100/s. Measured by
 * serves, that second made the best rate 272/s and kept the factor below
 * E a fifth of the time after 20 s (probes down take a fifth too); by
 * what the source supplied (serves plus the read-ahead's growth, as
 * pool.c reports it) the governor climbs to E and stays there. */
Test(governor, a_drained_read_ahead_is_not_a_faster_source)
{
	struct echo_gov_opts o = gov_opts(4.0);
	struct echo_gov *g;
	struct echo_gov_state st;
	double made = 0, taken = 0, echoes = 0, top = 0, n = 0, best = 0;
	const double dt = 0.001;
	uint64_t backlog = 0, changes = 0, downs = 0;

	cr_assert_eq(echo_gov_open(&o, 0, &g), 0);
	for (long i = 0; i * dt < 60; i++) {
		double t = (double)i * dt, e = echo_gov_factor(g);
		double want = t < 8 ? 10 : t < 9 ? 800 : 100;

		for (made += 100 * dt; made >= 1; made -= 1)
			backlog++;
		taken += want * dt;
		echoes += want * (e - 1) * dt;
		for (; taken >= 1 && backlog > 0; taken -= 1) {
			backlog--;
			echo_gov_serve(g, true);
			echo_gov_backlog(g, backlog);
			echo_gov_tick(g, t);
		}
		for (; echoes >= 1; echoes -= 1) {
			echo_gov_serve(g, false);
			echo_gov_backlog(g, backlog);
			echo_gov_tick(g, t);
		}
		echo_gov_get(g, &st);
		best = fmax(best, st.best_rate);
		downs += st.reason == GOV_DOWN && st.changes != changes;
		changes = st.changes;
		if (t >= 20) {
			top += e == 4.0;
			n++;
		}
	}
	cr_expect_lt(best, 150, "best rate %.0f/s on a 100/s source", best);
	cr_expect_eq(downs, 0, "%llu steps down on a network-bound source",
		     (unsigned long long)downs);
	cr_expect_geq(top / n, 0.7, "at E only %.0f%% of the time after 20 s",
		      100 * top / n);
	echo_gov_free(g);
}
