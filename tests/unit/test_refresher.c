/* test_refresher.c - the credential renewal thread: when it renews, that it
 * renews again and again, ends for credentials that stop expiring, and
 * stops at once when freed. */
#include <criterion/criterion.h>
#include <pthread.h>
#include <stdatomic.h>
#include <time.h>
#include <unistd.h>

#include "common/deadline.h"
#include "fetch/net/refresher.h"

Test(refresher, delay_table)
{
	static const struct {
		long fetched, expires, now;
		double want;
	} cases[] = {
		{0, 3600, 0, 3300},   /* 5 min ahead of an hour's life */
		{0, 3600, 600, 2700}, /* counted from now */
		{0, 60, 0, 30},	      /* short life: at half of it */
		{0, 2, 0, 1},	      /* never sooner than 1 s */
		{0, 100, 500, 1},     /* already expired */
	};
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++)
		cr_expect_float_eq(refresher_delay((time_t)cases[i].fetched,
						   (time_t)cases[i].expires,
						   (time_t)cases[i].now),
				   cases[i].want, 1e-9, "case %zu", i);
}

struct counter {
	atomic_int calls;
	int life; /* seconds the renewed credentials live; 0: forever */
};

static int renew(void *ud, time_t *expires)
{
	struct counter *c = ud;
	atomic_fetch_add(&c->calls, 1);
	*expires = c->life ? time(NULL) + c->life : 0;
	return 0;
}

static void wait_calls(struct counter *c, int n, double s)
{
	struct deadline d = deadline_in(s);

	while (atomic_load(&c->calls) < n && !deadline_expired(&d))
		usleep(20000);
}

Test(refresher, renews_short_lived_credentials_repeatedly, .timeout = 20)
{
	struct counter c = {.life = 2};
	struct refresher *r;

	/* life 2 s: renewed 1 s before expiry, every second */
	cr_assert_eq(refresher_open(renew, &c, time(NULL) + 2, &r), 0);
	wait_calls(&c, 3, 8);
	refresher_free(r);
	cr_expect_geq(atomic_load(&c.calls), 3, "renewed %d times",
		      atomic_load(&c.calls));
}

Test(refresher, ends_when_credentials_stop_expiring, .timeout = 20)
{
	struct counter c = {.life = 0};
	struct refresher *r;

	cr_assert_eq(refresher_open(renew, &c, time(NULL) + 2, &r), 0);
	wait_calls(&c, 1, 5);
	sleep(2); /* a live thread would renew again within 1 s */
	cr_expect_eq(atomic_load(&c.calls), 1);
	refresher_free(r);
}

Test(refresher, free_cuts_the_wait_short, .timeout = 20)
{
	struct counter c = {.life = 3600};
	struct refresher *r;
	struct deadline d;

	cr_assert_eq(refresher_open(renew, &c, time(NULL) + 3600, &r), 0);
	usleep(100000);
	d = deadline_in(1);
	refresher_free(r); /* the thread sleeps for 55 min */
	cr_expect_not(deadline_expired(&d), "refresher_free waited");
	cr_expect_eq(atomic_load(&c.calls), 0);
	refresher_free(NULL);
}
