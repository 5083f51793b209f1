/* test_list.c - the intrusive list: order, removal, iteration, entry. */
#include <criterion/criterion.h>

#include "common/list.h"
#include "common/util.h"

struct elem {
	int v;
	struct list_node link;
};

/* The values on the list, front to back, into out; returns the count. */
static size_t values(struct list_node *head, int *out, size_t max)
{
	size_t n = 0;
	list_for_each (it, head) {
		if (n < max)
			out[n] = list_entry(it, struct elem, link)->v;
		n++;
	}
	return n;
}

Test(list, empty_head_has_no_first_or_last)
{
	struct list_node h = LIST_HEAD_INIT(h);
	cr_assert(list_empty(&h));
	cr_assert_null(list_first(&h));
	cr_assert_null(list_last(&h));
	cr_assert_null(list_pop_front(&h));
	cr_assert_eq(list_count(&h), 0);
}

Test(list, push_back_is_fifo_and_push_front_is_lifo)
{
	struct list_node h;
	struct elem e[4] = {{.v = 0}, {.v = 1}, {.v = 2}, {.v = 3}};
	int got[4];

	list_init(&h);
	list_push_back(&h, &e[1].link);
	list_push_back(&h, &e[2].link);
	list_push_front(&h, &e[0].link);
	list_push_back(&h, &e[3].link);
	cr_assert_eq(values(&h, got, 4), 4);
	for (int i = 0; i < 4; i++)
		cr_assert_eq(got[i], i);
	cr_assert_eq(list_entry(list_last(&h), struct elem, link), &e[3]);
	cr_assert_eq(list_entry(list_pop_front(&h), struct elem, link), &e[0]);
	cr_assert_eq(list_count(&h), 3);
	cr_assert_not(list_linked(&e[0].link), "popped node left linked");
}

Test(list, del_in_the_middle_and_twice_is_harmless)
{
	struct list_node h = LIST_HEAD_INIT(h);
	struct elem e[3] = {{.v = 0}, {.v = 1}, {.v = 2}};
	int got[3];

	for (int i = 0; i < 3; i++)
		list_push_back(&h, &e[i].link);
	list_del(&e[1].link);
	list_del(&e[1].link);
	cr_assert_eq(values(&h, got, 3), 2);
	cr_assert_eq(got[0], 0);
	cr_assert_eq(got[1], 2);
	cr_assert_eq(e[0].link.next, &e[2].link);
	cr_assert_eq(e[2].link.prev, &e[0].link);
}

Test(list, move_back_makes_an_lru_order)
{
	struct list_node h = LIST_HEAD_INIT(h);
	struct elem e[3] = {{.v = 0}, {.v = 1}, {.v = 2}};
	int got[3];

	for (int i = 0; i < 3; i++)
		list_push_back(&h, &e[i].link);
	list_move_back(&h, &e[0].link); /* 0 used last */
	list_move_back(&h, &e[2].link); /* already... now last again */
	cr_assert_eq(values(&h, got, 3), 3);
	cr_assert_eq(got[0], 1);
	cr_assert_eq(got[1], 0);
	cr_assert_eq(got[2], 2);
}

Test(list, for_each_safe_allows_deleting_the_current_node)
{
	struct list_node h = LIST_HEAD_INIT(h);
	struct elem e[6];
	int got[6];

	for (int i = 0; i < 6; i++) {
		e[i].v = i;
		list_push_back(&h, &e[i].link);
	}
	list_for_each_safe (it, &h) {
		if (list_entry(it, struct elem, link)->v % 2)
			list_del(it);
	}
	cr_assert_eq(values(&h, got, 6), 3);
	for (int i = 0; i < 3; i++)
		cr_assert_eq(got[i], 2 * i);
}

Test(list, many_nodes_survive_random_removal)
{
	enum { N = 1000 };
	struct list_node h = LIST_HEAD_INIT(h);
	struct elem *e = xcalloc(N, sizeof(*e));
	size_t left = N;
	uint64_t x = 12345;

	for (int i = 0; i < N; i++) {
		e[i].v = i;
		list_push_back(&h, &e[i].link);
	}
	for (int k = 0; k < N * 2; k++) {
		x = x * 6364136223846793005ULL + 1442695040888963407ULL;
		struct elem *p = &e[(x >> 33) % N];
		if (list_linked(&p->link)) {
			list_del(&p->link);
			left--;
		}
	}
	cr_assert_eq(list_count(&h), left);
	int prev = -1;
	list_for_each (it, &h) {
		int v = list_entry(it, struct elem, link)->v;
		cr_assert_gt(v, prev, "order broken");
		prev = v;
	}
	free(e);
}
