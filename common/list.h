/* list.h - an intrusive, circular, doubly linked list (static inline): embed
 * a struct list_node in each element and get the element back with
 * list_entry. No allocation; every operation is O(1) except list_count.
 *
 * A list is a head node linked to itself when empty. A node not on any list
 * should be list_init'ed so list_linked() tells the truth. No locking: the
 * owner of the list guards it. */
#ifndef ECHOFS_LIST_H
#define ECHOFS_LIST_H

#include <stdbool.h>
#include <stddef.h>

struct list_node {
	struct list_node *prev, *next;
};

/* The element that embeds node `ptr` as member `member`. */
#define list_entry(ptr, type, member)                                          \
	((type *)(void *)((char *)(ptr)-offsetof(type, member)))

#define LIST_HEAD_INIT(name)                                                   \
	{                                                                      \
		&(name), &(name)                                               \
	}

static inline void list_init(struct list_node *n)
{
	n->prev = n->next = n;
}

static inline bool list_empty(const struct list_node *head)
{
	return head->next == head;
}

/* Is n on a list (after list_init, list_del leaves it unlinked)? */
static inline bool list_linked(const struct list_node *n)
{
	return n->next != n;
}

static inline void list_insert_between(struct list_node *n,
				       struct list_node *prev,
				       struct list_node *next)
{
	n->prev = prev;
	n->next = next;
	prev->next = n;
	next->prev = n;
}

/* At the front (stack order) or the back (FIFO order). */
static inline void list_push_front(struct list_node *head, struct list_node *n)
{
	list_insert_between(n, head, head->next);
}

static inline void list_push_back(struct list_node *head, struct list_node *n)
{
	list_insert_between(n, head->prev, head);
}

/* Unlink n and leave it list_init'ed (so deleting twice is harmless). */
static inline void list_del(struct list_node *n)
{
	n->prev->next = n->next;
	n->next->prev = n->prev;
	list_init(n);
}

/* First / last node, or NULL when the list is empty. */
static inline struct list_node *list_first(const struct list_node *head)
{
	return list_empty(head) ? NULL : head->next;
}

static inline struct list_node *list_last(const struct list_node *head)
{
	return list_empty(head) ? NULL : head->prev;
}

/* Unlink and return the first node, or NULL. */
static inline struct list_node *list_pop_front(struct list_node *head)
{
	struct list_node *n = list_first(head);
	if (n)
		list_del(n);
	return n;
}

/* Move n to the back (e.g. "most recently used" in an LRU). */
static inline void list_move_back(struct list_node *head, struct list_node *n)
{
	list_del(n);
	list_push_back(head, n);
}

static inline size_t list_count(const struct list_node *head)
{
	size_t k = 0;
	for (const struct list_node *n = head->next; n != head; n = n->next)
		k++;
	return k;
}

/* Iterate; list_for_each_safe allows list_del(it) inside the loop. */
#define list_for_each(it, head)                                                \
	for (struct list_node *it = (head)->next; it != (head); it = it->next)
#define list_for_each_safe(it, head)                                           \
	for (struct list_node *it = (head)->next, *it##_next = it->next;       \
	     it != (head); it = it##_next, it##_next = it->next)

#endif
