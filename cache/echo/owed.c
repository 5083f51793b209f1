/* owed.c - the echo pool's owed ledger: sample numbers given back (their
 * bytes dropped for memory) or deferred (an older copy still held), per
 * class, in pass order, read again when their class is wanted (see the
 * DESIGN in pool.c, "Demand"). Called with p->lock held. */
#include "cache/echo/pool_int.h"

#include "common/util.h"
#include "fetch/format/index.h"

#include <string.h>

/* counted: the sample was counted in fresh_in_pass when it first came
 * (is_owed 1); else it counts when it is read (is_owed 2). pass: the pass
 * it is owed for. The line is in pass order, oldest first within a pass:
 * a copy of pass N given back after pass N+1 began must not queue behind
 * pass N+1's samples, or a reader of the class would see one sample twice
 * before another once. */
void owed_add(struct pool *p, uint32_t sample, uint32_t cls, bool counted,
	      uint32_t pass)
{
	struct owed *o = &p->owed[cls];
	size_t k;

	if (o->n == o->cap && o->head > 0) {
		memmove(o->v, o->v + o->head, (o->n - o->head) * sizeof(*o->v));
		o->n -= o->head;
		o->head = 0;
	}
	if (o->n == o->cap) {
		o->cap = o->cap ? o->cap * 2 : 64;
		o->v = xrealloc(o->v, o->cap * sizeof(*o->v));
	}
	for (k = o->n; k > o->head && p->debt_pass[o->v[k - 1]] > pass; k--)
		;
	memmove(o->v + k + 1, o->v + k, (o->n - k) * sizeof(*o->v));
	o->v[k] = sample;
	o->n++;
	p->debt_pass[sample] = pass;
	p->in_line[sample] = 1;
	o->nfree += !p->held[sample];
	p->is_owed[sample] = counted ? 1 : 2;
	p->nowed++;
	p->given_back++;
}

/* Take a sample out of its class's line (O(line): give-backs only). */
void owed_line_remove(struct pool *p, uint32_t sample, uint32_t cls)
{
	struct owed *o = &p->owed[cls];
	size_t k = o->head;

	while (k < o->n && o->v[k] != sample)
		k++;
	if (k == o->n)
		return;
	memmove(o->v + k, o->v + k + 1, (o->n - k - 1) * sizeof(*o->v));
	if (--o->n == o->head)
		o->head = o->n = 0;
	p->in_line[sample] = 0;
	o->nfree -= !p->held[sample];
	p->nowed--;
	p->given_back--; /* owed_add() counts it again */
}

bool owed_any(const struct pool *p, uint32_t cls)
{
	return p->owed[cls].n > p->owed[cls].head;
}

/* The oldest owed sample of cls whose previous copy is no longer held
 * (held ones keep their place in line), or the oldest when the class
 * starves (a reader waits: a small class may have all its samples inside
 * the echo window). False if there is none; O(1) when all are held. */
bool owed_pop(struct pool *p, uint32_t cls, bool any, uint32_t *out)
{
	struct owed *o = &p->owed[cls];
	size_t k = o->head;

	if (o->head == o->n || (!any && o->nfree == 0))
		return false;
	while (!any && k < o->n && p->held[o->v[k]])
		k++;
	p->owed_looks += k - o->head + 1;
	if (k == o->n)
		return false; /* not reached: nfree > 0 */
	*out = o->v[k];
	memmove(o->v + o->head + 1, o->v + o->head,
		(k - o->head) * sizeof(*o->v));
	if (++o->head == o->n)
		o->head = o->n = 0;
	p->in_line[*out] = 0;
	o->nfree -= !p->held[*out];
	return true;
}

/* An owed sample to read again now: of a class someone waits for, else
 * (nobody waiting) any whose previous copy is gone, while it fits in
 * memory: the owed line is the rest of the stream, kept ahead of demand. */
bool owed_pick(struct pool *p, uint32_t *sample)
{
	for (int round = 0; round < 2; round++) {
		if (round == 1 && p->waiters)
			break;
		for (uint32_t k = 0; k < p->ncls; k++) {
			uint32_t c = (p->owed_next + k) % p->ncls;
			struct owed *o = &p->owed[c];
			if (!owed_any(p, c) || (round == 0 && !p->want[c]))
				continue;
			if (round == 1 &&
			    p->bytes + p->units[o->v[o->head]].size >
				    p->o.mem_size)
				continue;
			if (owed_pop(p, c, round == 0, sample)) {
				p->owed_next = c + 1;
				return true;
			}
		}
	}
	return false;
}
