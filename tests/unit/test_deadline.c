/* test_deadline.c - monotonic deadlines and timed condition waits. */
#include <criterion/criterion.h>
#include <errno.h>
#include <math.h>
#include <string.h>

#include "common/deadline.h"
#include "common/util.h"

Test(deadline, remaining_counts_down_and_expires)
{
	struct deadline d = deadline_in(0.2);
	double left = deadline_remaining(&d);

	cr_assert(left > 0.1 && left <= 0.2, "left %f", left);
	cr_assert_not(deadline_expired(&d));
	nanosleep(&(struct timespec){0, 250000000L}, NULL);
	cr_assert(deadline_expired(&d));
	cr_assert_eq(deadline_remaining(&d), 0.0);
}

Test(deadline, zero_negative_nan_are_now_and_huge_saturates)
{
	struct deadline z = deadline_in(0), n = deadline_in(-5);
	struct deadline q = deadline_in(NAN), h = deadline_in(1e30);

	cr_assert(deadline_expired(&z));
	cr_assert(deadline_expired(&n));
	cr_assert(deadline_expired(&q));
	cr_assert_not(deadline_expired(&h));
	cr_assert(deadline_remaining(&h) > 1e9, "huge deadline wrapped");
}

Test(deadline, fractions_carry_into_seconds)
{
	/* Whatever the current nanoseconds, tv_nsec stays normalised. */
	for (int i = 0; i < 50; i++) {
		struct deadline d = deadline_in(0.999999999);
		cr_assert(d.at.tv_nsec >= 0 && d.at.tv_nsec < 1000000000L);
	}
}

Test(deadline, min_picks_the_earlier)
{
	struct deadline a = deadline_in(1), b = deadline_in(2);
	struct deadline m = deadline_min(b, a);
	cr_assert_eq(m.at.tv_sec, a.at.tv_sec);
	cr_assert_eq(m.at.tv_nsec, a.at.tv_nsec);
}

Test(deadline, cond_wait_until_times_out_on_the_monotonic_clock)
{
	pthread_mutex_t m = PTHREAD_MUTEX_INITIALIZER;
	pthread_cond_t c;
	pthread_condattr_t ca;
	clockid_t clk;
	struct deadline d = deadline_in(0.1);
	double t0 = now_mono(), el;
	int r;

	cr_assert_eq(cond_init_monotonic(&c), 0);
	pthread_mutex_lock(&m);
	r = cond_wait_until(&c, &m, &d);
	pthread_mutex_unlock(&m);
	el = now_mono() - t0;
	cr_assert_eq(r, -ETIMEDOUT);
	/* On CLOCK_REALTIME a monotonic deadline lies decades in the past
	 * (or future): the wait would return at once or never. */
	cr_assert(el >= 0.09 && el < 5, "waited %f s", el);
	pthread_cond_destroy(&c);

	/* And the attribute really is monotonic. */
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_condattr_getclock(&ca, &clk);
	cr_assert_eq(clk, CLOCK_MONOTONIC);
	pthread_condattr_destroy(&ca);
}

struct poke {
	pthread_mutex_t m;
	pthread_cond_t c;
	int flag;
};

static void *poker(void *arg)
{
	struct poke *p = arg;
	nanosleep(&(struct timespec){0, 50000000L}, NULL);
	pthread_mutex_lock(&p->m);
	p->flag = 1;
	pthread_cond_signal(&p->c);
	pthread_mutex_unlock(&p->m);
	return NULL;
}

Test(deadline, cond_wait_until_returns_0_when_signalled)
{
	struct poke p;
	struct deadline d = deadline_in(10);
	pthread_t t;
	int r = 0;

	memset(&p, 0, sizeof(p));
	pthread_mutex_init(&p.m, NULL);
	cr_assert_eq(cond_init_monotonic(&p.c), 0);
	pthread_create(&t, NULL, poker, &p);
	pthread_mutex_lock(&p.m);
	while (!p.flag && r == 0)
		r = cond_wait_until(&p.c, &p.m, &d);
	pthread_mutex_unlock(&p.m);
	pthread_join(t, NULL);
	cr_assert_eq(r, 0);
	cr_assert_eq(p.flag, 1);
	cr_assert(deadline_remaining(&d) > 5);
	pthread_cond_destroy(&p.c);
}
