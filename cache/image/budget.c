/* budget.c - a byte budget shared by threads, served in arrival order. */
#include "cache/image/budget.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>

#include "common/util.h"

struct budget {
	uint64_t total;
	pthread_mutex_t lock; /* guards everything below */
	pthread_cond_t changed;
	uint64_t used;
	uint64_t next_ticket, serving;
};

struct budget *budget_new(uint64_t total)
{
	struct budget *b = xcalloc(1, sizeof(*b));
	b->total = total;
	pthread_mutex_init(&b->lock, NULL);
	pthread_cond_init(&b->changed, NULL);
	return b;
}

void budget_free(struct budget *b)
{
	if (!b)
		return;
	pthread_cond_destroy(&b->changed);
	pthread_mutex_destroy(&b->lock);
	free(b);
}

int budget_take(struct budget *b, uint64_t n)
{
	if (!b)
		return 0;
	if (n > b->total)
		return -E2BIG;
	pthread_mutex_lock(&b->lock);
	uint64_t me = b->next_ticket++;
	while (me != b->serving || b->used + n > b->total)
		pthread_cond_wait(&b->changed, &b->lock);
	b->used += n;
	b->serving++;
	/* The next in line may fit too. */
	pthread_cond_broadcast(&b->changed);
	pthread_mutex_unlock(&b->lock);
	return 0;
}

void budget_give(struct budget *b, uint64_t n)
{
	if (!b || !n)
		return;
	pthread_mutex_lock(&b->lock);
	b->used -= n < b->used ? n : b->used;
	pthread_cond_broadcast(&b->changed);
	pthread_mutex_unlock(&b->lock);
}

uint64_t budget_total(const struct budget *b)
{
	return b ? b->total : 0;
}

uint64_t budget_used(struct budget *b)
{
	uint64_t u;
	if (!b)
		return 0;
	pthread_mutex_lock(&b->lock);
	u = b->used;
	pthread_mutex_unlock(&b->lock);
	return u;
}

uint64_t budget_waiters(struct budget *b)
{
	uint64_t n;
	if (!b)
		return 0;
	pthread_mutex_lock(&b->lock);
	n = b->next_ticket - b->serving;
	pthread_mutex_unlock(&b->lock);
	return n;
}
