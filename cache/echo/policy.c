/* policy.c - the data-echoing policy: per-class fresh samples and echo
 * candidates, seeded draws, serve accounting (see policy.h). */
#include "cache/echo/policy.h"

#include "common/util.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>

enum { ITEM_OUT = 0, ITEM_FIFO, ITEM_BAG };

/* Per class. The FIFO holds never-served samples in ECHO_ADAPTIVE; the bag
 * holds the echo candidates (ECHO_ADAPTIVE) or every sample with copies
 * left, served or not (ECHO_FIXED). */
struct eclass {
	struct echo_item **fifo; /* ring */
	size_t fhead, flen, fcap;
	struct echo_item **bag;
	size_t nbag, bcap;
	uint64_t nfresh; /* never-served samples, FIFO or bag */
	uint64_t tick;	 /* opens served in this class */
};

struct echo_policy {
	struct eclass *cls;
	uint32_t ncls;
	double echo;
	enum echo_mode mode;
	unsigned window;
	bool fresh_first;
	struct echo_rng rng;
	/* Served samples still held, oldest first serve first. */
	struct echo_item *head, *tail;
	uint64_t served, fresh, items, ready;
	/* The cap and the serves counted when it was set (echo_policy_set_cap). */
	double cap;
	uint64_t served0, fresh0;
};

/* ---- generator ---- */

static uint64_t splitmix64(uint64_t *x)
{
	uint64_t z = (*x += 0x9e3779b97f4a7c15ULL);
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
	return z ^ (z >> 31);
}

void echo_rng_seed(struct echo_rng *r, uint64_t seed)
{
	for (int i = 0; i < 4; i++)
		r->s[i] = splitmix64(&seed);
}

static uint64_t rotl(uint64_t x, int k)
{
	return (x << k) | (x >> (64 - k));
}

uint64_t echo_rng_next(struct echo_rng *r)
{
	uint64_t *s = r->s;
	uint64_t out = rotl(s[1] * 5, 7) * 9, t = s[1] << 17;

	s[2] ^= s[0];
	s[3] ^= s[1];
	s[1] ^= s[2];
	s[0] ^= s[3];
	s[2] ^= t;
	s[3] = rotl(s[3], 45);
	return out;
}

uint64_t echo_rng_below(struct echo_rng *r, uint64_t n)
{
	uint64_t x, lim;

	if (n == 0)
		return 0;
	/* Reject the top partial range so every residue is equally likely. */
	lim = UINT64_MAX - UINT64_MAX % n;
	do
		x = echo_rng_next(r);
	while (x >= lim);
	return x % n;
}

double echo_rng_unit(struct echo_rng *r)
{
	return (double)(echo_rng_next(r) >> 11) * 0x1.0p-53;
}

/* ---- containers ---- */

static void fifo_grow(struct eclass *c)
{
	size_t ncap = c->fcap ? c->fcap * 2 : 16;
	struct echo_item **n = xmalloc(ncap * sizeof(*n));

	for (size_t i = 0; i < c->flen; i++)
		n[i] = c->fifo[(c->fhead + i) % c->fcap];
	free(c->fifo);
	c->fifo = n;
	c->fcap = ncap;
	c->fhead = 0;
}

static void fifo_push(struct eclass *c, struct echo_item *it, bool front)
{
	if (c->flen == c->fcap)
		fifo_grow(c);
	if (front) {
		c->fhead = (c->fhead + c->fcap - 1) % c->fcap;
		c->fifo[c->fhead] = it;
	} else {
		c->fifo[(c->fhead + c->flen) % c->fcap] = it;
	}
	c->flen++;
	it->state = ITEM_FIFO;
}

static struct echo_item *fifo_pop(struct eclass *c)
{
	struct echo_item *it = c->fifo[c->fhead];

	c->fhead = (c->fhead + 1) % c->fcap;
	c->flen--;
	it->state = ITEM_OUT;
	return it;
}

static void bag_add(struct eclass *c, struct echo_item *it)
{
	if (c->nbag == c->bcap) {
		c->bcap = c->bcap ? c->bcap * 2 : 16;
		c->bag = xrealloc(c->bag, c->bcap * sizeof(*c->bag));
	}
	it->pos = c->nbag;
	c->bag[c->nbag++] = it;
	it->state = ITEM_BAG;
}

static void bag_remove(struct eclass *c, struct echo_item *it)
{
	struct echo_item *last = c->bag[--c->nbag];

	c->bag[it->pos] = last;
	last->pos = it->pos;
	it->state = ITEM_OUT;
}

static void list_append(struct echo_policy *ep, struct echo_item *it)
{
	it->next = NULL;
	it->prev = ep->tail;
	if (ep->tail)
		ep->tail->next = it;
	else
		ep->head = it;
	ep->tail = it;
}

static void list_remove(struct echo_policy *ep, struct echo_item *it)
{
	if (it->prev)
		it->prev->next = it->next;
	else
		ep->head = it->next;
	if (it->next)
		it->next->prev = it->prev;
	else
		ep->tail = it->prev;
	it->prev = it->next = NULL;
}

/* ---- options ---- */

static bool echo_ok(double echo, enum echo_mode mode)
{
	return isfinite(echo) && echo >= 1.0 && echo <= ECHO_MAX &&
	       (mode == ECHO_ADAPTIVE || mode == ECHO_FIXED ||
		mode == ECHO_GREEDY);
}

static uint32_t max_uses(const struct echo_policy *ep)
{
	return (uint32_t)ceil(ep->echo);
}

/* floor(E) or ceil(E) copies, mean E. */
static uint32_t draw_copies(struct echo_policy *ep)
{
	double fl = floor(ep->echo);
	uint32_t k = (uint32_t)fl;

	if (ep->echo > fl && echo_rng_unit(&ep->rng) < ep->echo - fl)
		k++;
	return k;
}

int echo_policy_open(uint32_t nclasses, const struct echo_policy_opts *o,
		     struct echo_policy **out)
{
	struct echo_policy *ep;

	*out = NULL;
	if (!o || nclasses == 0 || !echo_ok(o->echo, o->mode))
		return -EINVAL;
	ep = xcalloc(1, sizeof(*ep));
	ep->cls = xcalloc(nclasses, sizeof(*ep->cls));
	ep->ncls = nclasses;
	ep->echo = o->echo;
	ep->mode = o->mode;
	ep->window = o->window;
	ep->fresh_first = o->fresh_first;
	ep->cap = o->echo;
	echo_rng_seed(&ep->rng, o->seed);
	*out = ep;
	return 0;
}

void echo_policy_free(struct echo_policy *ep)
{
	if (!ep)
		return;
	for (uint32_t i = 0; i < ep->ncls; i++) {
		free(ep->cls[i].fifo);
		free(ep->cls[i].bag);
	}
	free(ep->cls);
	free(ep);
}

int echo_policy_add(struct echo_policy *ep, struct echo_item *it, uint32_t cls)
{
	struct eclass *c;

	if (cls >= ep->ncls)
		return -EINVAL;
	c = &ep->cls[cls];
	*it = (struct echo_item){.cls = cls};
	if (ep->mode == ECHO_FIXED) {
		it->copies = draw_copies(ep);
		bag_add(c, it);
	} else {
		fifo_push(c, it, false);
	}
	c->nfresh++;
	ep->ready++;
	ep->items++;
	return 0;
}

int echo_policy_add_served(struct echo_policy *ep, struct echo_item *it,
			   uint32_t cls)
{
	struct eclass *c;

	if (cls >= ep->ncls || ep->mode == ECHO_FIXED)
		return -EINVAL;
	if (max_uses(ep) <= 1)
		return -ENOSPC;
	c = &ep->cls[cls];
	*it = (struct echo_item){.cls = cls, .uses = 1, .last_tick = c->tick};
	bag_add(c, it);
	list_append(ep, it);
	ep->items++;
	return 0;
}

bool echo_policy_holds_served(const struct echo_policy *ep)
{
	return ep->mode != ECHO_FIXED && max_uses(ep) > 1;
}

void echo_policy_count_own(struct echo_policy *ep)
{
	ep->served++;
	ep->fresh++;
}

/* ---- decisions ---- */

/* The window in force for the class's next open: echo_window, but never
 * more than half the samples the class holds. A window wider than what
 * exists would keep every candidate inside it, so the first samples of a
 * mount (or of a small class) could not be echoed until 2 * window + 1 had
 * arrived: at a mount's start every open then waited for a decode (issue
 * 19: no echo before ~17 fresh samples per class, the first 0.5 s of a
 * decode-bound mount at the exact mount's rate). */
static unsigned window_now(const struct echo_policy *ep, const struct eclass *c)
{
	uint64_t half = (c->nbag + c->flen) / 2;

	return half < ep->window ? (unsigned)half : ep->window;
}

/* Outside the window at the class's next open (tick + 1). */
static bool eligible(const struct echo_policy *ep, const struct eclass *c,
		     const struct echo_item *it)
{
	return it->uses == 0 || c->tick + 1 - it->last_tick > window_now(ep, c);
}

/* Count the serve of it as open number ++tick of its class. */
static void serve(struct echo_policy *ep, struct eclass *c,
		  struct echo_item *it, unsigned window, struct echo_take *t)
{
	*t = (struct echo_take){.item = it,
				.window = window,
				.tick = ++c->tick,
				.prev_tick = it->last_tick,
				.fresh = it->uses == 0};
	it->uses++;
	it->last_tick = t->tick;
	ep->served++;
	if (t->fresh) {
		ep->fresh++;
		c->nfresh--;
		ep->ready--;
	}
}

/* Leaves the policy: fully used. */
static void retire(struct echo_policy *ep, struct eclass *c,
		   struct echo_item *it, struct echo_take *t)
{
	if (it->state == ITEM_BAG) {
		bag_remove(c, it);
		list_remove(ep, it);
	}
	ep->items--;
	t->retired = true;
}

/* Serves a candidate has left: its drawn copies (fixed), or up to ceil(E)
 * uses (adaptive). */
static uint64_t copies_left(const struct echo_policy *ep,
			    const struct echo_item *it)
{
	if (ep->mode == ECHO_FIXED)
		return it->copies;
	return it->uses < max_uses(ep) ? max_uses(ep) - it->uses : 0;
}

/* Serves left of the candidates outside the window: what echoes the class
 * can still give now. */
static uint64_t echo_weight(const struct echo_policy *ep,
			    const struct eclass *c)
{
	uint64_t total = 0;

	for (size_t i = 0; i < c->nbag; i++)
		if (eligible(ep, c, c->bag[i]))
			total += copies_left(ep, c->bag[i]);
	return total;
}

/* One serve from the class's bag, uniformly over the serves left of the
 * candidates outside the window (r < echo_weight): a sample's echoes
 * spread over the time it is held, not one after another (issue 11:
 * adaptive mode picked the least used, i.e. the samples just served, and a
 * trainer learned less per step from copies a few batches apart). */
static struct echo_item *pick_nth(struct echo_policy *ep, struct eclass *c,
				  uint64_t r)
{
	for (size_t i = 0; i < c->nbag; i++) {
		struct echo_item *it = c->bag[i];
		uint64_t n;
		if (!eligible(ep, c, it))
			continue;
		n = copies_left(ep, it);
		if (r < n)
			return it;
		r -= n;
	}
	return NULL; /* not reached: r < echo_weight */
}

static struct echo_item *pick_copy(struct echo_policy *ep, struct eclass *c)
{
	uint64_t total = echo_weight(ep, c);

	if (total == 0)
		return NULL;
	return pick_nth(ep, c, echo_rng_below(&ep->rng, total));
}

/* Serve the oldest never-served sample of the class. */
static void take_fresh(struct echo_policy *ep, struct eclass *c,
		       struct echo_take *t)
{
	unsigned w = window_now(ep, c); /* before it leaves the FIFO */
	struct echo_item *it = fifo_pop(c);

	serve(ep, c, it, w, t);
	if (it->uses < max_uses(ep)) {
		bag_add(c, it);
		list_append(ep, it);
	} else {
		retire(ep, c, it, t);
	}
}

/* The candidate outside the window whose last serve is oldest, and the
 * serves left of all those outside it (*weight): issue 29, an echo of a
 * sample served one or two batches ago taught a trainer almost nothing;
 * the oldest makes the pool a shuffle buffer for echoes, copies as far
 * apart as what it holds allows. */
static struct echo_item *oldest_echo(const struct echo_policy *ep,
				     const struct eclass *c, uint64_t *weight)
{
	struct echo_item *pick = NULL;

	*weight = 0;
	for (size_t i = 0; i < c->nbag; i++) {
		struct echo_item *it = c->bag[i];
		uint64_t n;
		if (!eligible(ep, c, it) || (n = copies_left(ep, it)) == 0)
			continue;
		*weight += n;
		if (!pick || it->last_tick < pick->last_tick)
			pick = it;
	}
	return pick;
}

/* served + 1 <= cap * fresh, counted since the cap was set, with a little
 * slack for rounding. */
static bool echo_allowed(const struct echo_policy *ep)
{
	double cap = ep->cap < ep->echo ? ep->cap : ep->echo;
	double served = (double)ep->served - (double)ep->served0;
	double fresh = (double)ep->fresh - (double)ep->fresh0;

	return served + 1 <= cap * fresh + 1e-9;
}

/* Adaptive: fresh samples and echoes drawn together, each fresh sample
 * weighing ceil(E) serves against the candidates' serves left, so fresh
 * samples wait among the echoes as fixed mode's do (issue 19: serving each
 * the moment it arrived left a trainer learning from copies of the few
 * samples just decoded; drawn together it reached its target 1.65x sooner
 * than echo=1, fresh-first 0.9x). Fresh first, as before, when
 *  - no echo is allowed (served/fresh would pass the cap, or every
 *    candidate is inside the window): fresh samples are never held back
 *    for echoes the ratio forbids;
 *  - the upstream keeps up: the class's fresh samples outweigh its echoes
 *    (ceil(E) * ready >= serves left). The backlog then grows with every
 *    arrival, and serving it first keeps it at most that weight: a fast
 *    upstream is served fresh, echoes fill only the gaps;
 *  - fresh_first (echo_stage=encoded): always.
 * The echo served is the oldest candidate (oldest_echo). */
static int take_adaptive(struct echo_policy *ep, struct eclass *c,
			 struct echo_take *t)
{
	uint64_t echoes = 0;
	struct echo_item *it =
		echo_allowed(ep) ? oldest_echo(ep, c, &echoes) : NULL;
	uint64_t fresh = (uint64_t)c->flen * max_uses(ep);

	if (c->flen && (echoes == 0 || fresh >= echoes ||
			(ep->fresh_first && ep->mode == ECHO_ADAPTIVE) ||
			echo_rng_below(&ep->rng, fresh + echoes) < fresh)) {
		take_fresh(ep, c, t);
		return 0;
	}
	if (!it)
		return -EAGAIN;
	serve(ep, c, it, window_now(ep, c), t);
	if (it->uses >= max_uses(ep))
		retire(ep, c, it, t);
	return 0;
}

static int take_fixed(struct echo_policy *ep, struct eclass *c,
		      struct echo_take *t)
{
	struct echo_item *it = pick_copy(ep, c);

	if (!it)
		return -EAGAIN;
	serve(ep, c, it, window_now(ep, c), t);
	it->copies--;
	if (t->fresh)
		list_append(ep, it);
	if (it->copies == 0)
		retire(ep, c, it, t);
	return 0;
}

int echo_policy_take(struct echo_policy *ep, uint32_t cls, struct echo_take *t)
{
	if (cls >= ep->ncls)
		return -EINVAL;
	if (ep->mode == ECHO_FIXED)
		return take_fixed(ep, &ep->cls[cls], t);
	return take_adaptive(ep, &ep->cls[cls], t);
}

/* Back into the bag (and the served list) after a retire. */
static void rejoin(struct echo_policy *ep, struct eclass *c,
		   struct echo_item *it)
{
	if (it->state != ITEM_OUT)
		return;
	bag_add(c, it);
	list_append(ep, it);
	ep->items++;
}

/* The untaken serve was its only one: the sample is fresh again. */
static void make_fresh(struct echo_policy *ep, struct eclass *c,
		       struct echo_item *it)
{
	if (it->state == ITEM_BAG) {
		bag_remove(c, it);
		list_remove(ep, it);
	} else {
		ep->items++; /* it had retired */
	}
	it->uses = 0;
	it->last_tick = 0;
	if (ep->mode == ECHO_FIXED)
		bag_add(c, it);
	else
		fifo_push(c, it, true);
	c->nfresh++;
	ep->ready++;
	ep->fresh--;
}

bool echo_policy_untake(struct echo_policy *ep, const struct echo_take *t)
{
	struct echo_item *it = t->item;
	struct eclass *c = &ep->cls[it->cls];

	ep->served--;
	if (ep->mode == ECHO_FIXED)
		it->copies++;
	if (it->uses == 1) {
		/* Its only serve left, fresh or the echo that became its first
		 * when the fresh one was untaken: never served, fresh again
		 * (else it would sit in the served list with no uses, and its
		 * next serve, fresh, would join the list a second time). */
		make_fresh(ep, c, it);
		return true;
	}
	/* An echo, or a fresh serve echoed since (that echo becomes the
	 * first serve): give one use back. */
	it->uses--;
	if (it->last_tick == t->tick)
		it->last_tick = t->prev_tick;
	if (it->state == ITEM_OUT &&
	    (ep->mode == ECHO_FIXED || it->uses < max_uses(ep)))
		rejoin(ep, c, it);
	return it->state != ITEM_OUT;
}

void echo_policy_discard(struct echo_policy *ep, const struct echo_take *t)
{
	struct echo_item *it = t->item;
	struct eclass *c = &ep->cls[it->cls];

	if (!echo_policy_untake(ep, t))
		return; /* retired: already out of the policy */
	if (it->state == ITEM_FIFO) {
		/* Fresh again: make_fresh put it at the front. */
		(void)fifo_pop(c);
	} else {
		bag_remove(c, it);
		if (it->uses)
			list_remove(ep, it); /* a served candidate */
	}
	if (it->uses == 0) {
		c->nfresh--;
		ep->ready--;
	}
	ep->items--;
}

/* ---- memory pressure ---- */

/* True when a is less useful than b (a worse candidate to keep). */
static bool less_useful(const struct echo_policy *ep, const struct echo_item *a,
			const struct echo_item *b)
{
	if (ep->mode == ECHO_FIXED)
		return a->copies < b->copies;
	return a->uses > b->uses;
}

struct echo_item *
echo_policy_evict(struct echo_policy *ep,
		  bool (*can_drop)(struct echo_item *it, void *ud), void *ud)
{
	struct echo_item *pick = NULL;
	unsigned seen = 0;

	for (struct echo_item *it = ep->head; it && seen < ECHO_EVICT_SCAN;
	     it = it->next) {
		if (can_drop && !can_drop(it, ud))
			continue;
		seen++;
		if (!pick || less_useful(ep, it, pick))
			pick = it;
	}
	if (!pick)
		return NULL;
	bag_remove(&ep->cls[pick->cls], pick);
	list_remove(ep, pick);
	ep->items--;
	return pick;
}

bool echo_policy_drop_served(struct echo_policy *ep, struct echo_item *it)
{
	if (it->uses == 0 || it->state != ITEM_BAG)
		return false;
	bag_remove(&ep->cls[it->cls], it);
	list_remove(ep, it);
	ep->items--;
	return true;
}

struct echo_item *echo_policy_give_back(struct echo_policy *ep, uint32_t cls)
{
	struct eclass *c;
	struct echo_item *it = NULL;

	if (cls >= ep->ncls || ep->cls[cls].nfresh == 0)
		return NULL;
	c = &ep->cls[cls];
	if (c->flen) {
		/* The newest: the FIFO order of the others is kept. */
		it = c->fifo[(c->fhead + c->flen - 1) % c->fcap];
		c->flen--;
		it->state = ITEM_OUT;
	} else {
		for (size_t i = c->nbag; i-- > 0 && !it;)
			if (c->bag[i]->uses == 0)
				it = c->bag[i];
		if (!it)
			return NULL;
		bag_remove(c, it);
	}
	c->nfresh--;
	ep->ready--;
	ep->items--;
	return it;
}

/* ---- run-time changes ---- */

/* Adaptive -> fixed: fresh samples join the bag; every sample gets copies
 * drawn for the new E, net of the uses it already had. */
static void refile_to_fixed(struct echo_policy *ep, struct eclass *c)
{
	for (size_t i = 0; i < c->nbag; i++) {
		struct echo_item *it = c->bag[i];
		uint32_t k = draw_copies(ep);
		it->copies = k > it->uses ? k - it->uses : 0;
	}
	while (c->flen) {
		struct echo_item *it = fifo_pop(c);
		it->copies = draw_copies(ep);
		bag_add(c, it);
	}
}

/* Fixed -> adaptive: never-served samples move to the FIFO. */
static void refile_to_adaptive(struct eclass *c)
{
	for (size_t i = 0; i < c->nbag;) {
		struct echo_item *it = c->bag[i];
		if (it->uses == 0) {
			bag_remove(c, it);
			fifo_push(c, it, false);
		} else {
			i++;
		}
	}
}

int echo_policy_set_cap(struct echo_policy *ep, double cap)
{
	if (!isfinite(cap) || cap < 1.0)
		return -EINVAL;
	ep->cap = cap;
	ep->served0 = ep->served;
	ep->fresh0 = ep->fresh;
	return 0;
}

int echo_policy_set(struct echo_policy *ep, double echo, enum echo_mode mode)
{
	enum echo_mode old = ep->mode;

	if (!echo_ok(echo, mode))
		return -EINVAL;
	ep->echo = echo;
	ep->cap = echo;
	ep->mode = mode;
	if (old == mode)
		return 0;
	for (uint32_t i = 0; i < ep->ncls; i++) {
		if (mode == ECHO_FIXED)
			refile_to_fixed(ep, &ep->cls[i]);
		else
			refile_to_adaptive(&ep->cls[i]);
	}
	return 0;
}

void echo_policy_get(const struct echo_policy *ep, double *echo,
		     enum echo_mode *mode)
{
	if (echo)
		*echo = ep->echo;
	if (mode)
		*mode = ep->mode;
}

uint64_t echo_policy_ready(const struct echo_policy *ep, uint32_t cls)
{
	return cls < ep->ncls ? ep->cls[cls].nfresh : 0;
}

void echo_policy_get_stats(const struct echo_policy *ep,
			   struct echo_policy_stats *out)
{
	out->served = ep->served;
	out->fresh = ep->fresh;
	out->items = ep->items;
	out->ready = ep->ready;
}
