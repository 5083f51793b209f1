/* test_budget.c - the decode memory budget: grants, refusals, waiting and
 * first-come order. */
#include <criterion/criterion.h>
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>

#include "cache/image/budget.h"

Test(budget, grants_and_refuses)
{
	struct budget *b = budget_new(100);
	cr_expect_eq(budget_take(b, 60), 0);
	cr_expect_eq(budget_take(b, 40), 0);
	cr_expect_eq(budget_used(b), 100);
	cr_expect_eq(budget_take(b, 101), -E2BIG); /* never fits: no wait */
	budget_give(b, 60);
	budget_give(b, 40);
	cr_expect_eq(budget_used(b), 0);
	cr_expect_eq(budget_total(b), 100);
	cr_expect_eq(budget_take(NULL, 1u << 30), 0);
	cr_expect_eq(budget_waiters(NULL), 0);
	budget_free(b);
	budget_free(NULL);
}

struct taker {
	struct budget *b;
	uint64_t n;
	_Atomic int done;
};

static void *take_main(void *arg)
{
	struct taker *t = arg;
	budget_take(t->b, t->n);
	t->done = 1;
	return NULL;
}

/* Until n takers are blocked in b or t got its bytes (the check after
 * this then fails with a reason). No time bound of its own. */
static void until_waiting(struct budget *b, uint64_t n, struct taker *t)
{
	while (budget_waiters(b) != n && !t->done)
		sched_yield();
}

/* Synchronised by state, not by sleeping: budget_waiters counts a taker
 * only once it is blocked (ticket drawn and not served under one lock
 * hold), so each check below sees a taker that is really waiting. */
Test(budget, waits_for_room_in_arrival_order, .timeout = 60)
{
	struct budget *b = budget_new(100);
	struct taker big = {b, 90, 0}, small = {b, 10, 0};
	pthread_t t1, t2;

	cr_assert_eq(budget_take(b, 50), 0);
	cr_assert_eq(budget_waiters(b), 0);
	pthread_create(&t1, NULL, take_main, &big);
	until_waiting(b, 1, &big);
	cr_expect_eq(big.done, 0, "90 more than the 50 left: must wait");
	/* 10 would fit now, but the 90 came first. */
	pthread_create(&t2, NULL, take_main, &small);
	until_waiting(b, 2, &small);
	cr_expect_eq(small.done, 0, "a later taker must not overtake");
	cr_expect_eq(budget_used(b), 50);
	/* 40 back: exactly the 90 fits, so the first in line is served and
	 * the budget is full again; the 10 still waits. */
	budget_give(b, 40);
	pthread_join(t1, NULL);
	until_waiting(b, 1, &small);
	cr_expect_eq(small.done, 0, "served before the budget had room");
	cr_expect_eq(budget_used(b), 100);
	budget_give(b, 10);
	pthread_join(t2, NULL);
	cr_expect_eq(budget_waiters(b), 0);
	cr_expect_eq(budget_used(b), 100);
	budget_give(b, 100);
	budget_free(b);
}
