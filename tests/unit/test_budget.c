/* test_budget.c - the decode memory budget: grants, refusals, waiting and
 * first-come order. */
#include <criterion/criterion.h>
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <unistd.h>

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

Test(budget, waits_for_room_in_arrival_order)
{
	struct budget *b = budget_new(100);
	struct taker big = {b, 90, 0}, small = {b, 10, 0};
	pthread_t t1, t2;

	cr_assert_eq(budget_take(b, 50), 0);
	pthread_create(&t1, NULL, take_main, &big);
	usleep(50000); /* big is waiting by then (or the check below fails) */
	cr_expect_eq(big.done, 0, "90 more than the 50 left: must wait");
	/* 10 would fit now, but the 90 came first. */
	pthread_create(&t2, NULL, take_main, &small);
	usleep(50000);
	cr_expect_eq(small.done, 0, "a later taker must not overtake");
	budget_give(b, 50);
	pthread_join(t1, NULL);
	pthread_join(t2, NULL);
	cr_expect_eq(budget_used(b), 100);
	budget_give(b, 100);
	budget_free(b);
}
