/* budget.h - a byte budget shared by threads (the decode memory of the image
 * workers): a taker waits until its bytes are free, in arrival order.
 *
 * DESIGN
 * - One mutex and one condition variable. Takers draw tickets and are
 *   served first come, first served, so a large request is not starved by
 *   a stream of small ones; a request larger than the whole budget is
 *   refused at once instead of waiting forever.
 */
#ifndef ECHOFS_BUDGET_H
#define ECHOFS_BUDGET_H

#include <stdint.h>

struct budget;

/* A budget of total bytes (> 0). Never NULL (aborts on OOM). */
struct budget *budget_new(uint64_t total);
/* Accepts NULL. No taker may be waiting. */
void budget_free(struct budget *b);

/* Reserve n bytes, waiting while fewer are free. Returns 0, or -E2BIG when
 * n alone exceeds the total (nothing reserved). A NULL budget grants all. */
int budget_take(struct budget *b, uint64_t n);
/* Give back n bytes taken before. */
void budget_give(struct budget *b, uint64_t n);
/* The total; 0 for NULL. */
uint64_t budget_total(const struct budget *b);
/* Bytes reserved now (for tests and stats). */
uint64_t budget_used(struct budget *b);
/* Takers waiting now (for tests and stats). A taker draws its ticket and
 * either is served or starts waiting under one hold of the lock, so a
 * taker counted here is blocked, not about to be served. */
uint64_t budget_waiters(struct budget *b);

#endif
