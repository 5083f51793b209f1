/* bindings_open.c - binding at open (bindings.h, DESIGN "Binding at
 * open"): when every served file has one size, a lookup binds nothing and
 * the OPEN takes the path's sample: the first OPEN of a binding takes it
 * (parked in the pool if it must wait, INTERRUPT-safe), stores its bytes
 * over the inode's page cache, then answers every OPEN that waited on it.
 * Lookups, READs, RELEASEs and forgets stay in bindings.c. */
#include "fs/bindings_int.h"

#include <errno.h>
#include <stdlib.h>

#include "cache/dataset.h"
#include "common/lockcheck.h"
#include "common/util.h"
#include "fs/namespace.h"

/* Unlink and return the OPENs waiting on x (all of them, or only the one
 * named tag when tag is not NULL). Caller holds the lock. */
static struct opener *unwait(struct bindings *b, const struct binding *x,
			     const void *tag)
{
	ASSERT_HELD(&b->lock);
	struct opener **pp = &b->waiting, *got = NULL, **tail = &got;

	while (*pp) {
		struct opener *w = *pp;
		if ((x && w->x != x) || (tag && w->tag != tag)) {
			pp = &w->next;
			continue;
		}
		*pp = w->next;
		w->next = NULL;
		*tail = w;
		tail = &w->next;
	}
	return got;
}

/* The first OPEN waiting on x, or NULL. Caller holds the lock. */
static struct opener *first_waiting(const struct bindings *b,
				    const struct binding *x)
{
	ASSERT_HELD(&b->lock);
	struct opener *w = b->waiting;
	while (w && w->x != x)
		w = w->next;
	return w;
}

/* Answer the OPENs of list w with r (0, 1 or -errno) and free them. */
static void answer(struct opener *w, int r, struct binding *h)
{
	while (w) {
		struct opener *n = w->next;
		w->done(w->ud, r, r < 0 ? NULL : h);
		free(w);
		w = n;
	}
}

struct open_take {
	struct bindings *b;
	struct binding *x;
};

static void open_taken(void *ud, int err, struct dataset_sample *s);

/* Take a sample for x on behalf of the OPEN named tag (x->taker). */
void bindings_take_for(struct bindings *b, struct binding *x, const void *tag)
{
	struct open_take *t = xmalloc(sizeof(*t));
	struct dataset_sample *s = NULL;
	int r;

	*t = (struct open_take){.b = b, .x = x};
	r = dataset_echo_take_async(b->ds, b->ns->files[x->file].cls, tag,
				    open_taken, t, &s);
	if (r != -EINPROGRESS)
		open_taken(t, r, s);
}

/* The size sample s's bytes have, or -errno. */
static ssize_t sample_size(struct bindings *b, struct dataset_sample *s)
{
	if (!b->render.size)
		return (ssize_t)dataset_sample_len(s);
	return b->render.size(b->render.ud, dataset_sample_data(s),
			      dataset_sample_len(s));
}

/* Decode taken sample s for x (bindings_set_decode): 0 with *made (the
 * binding's bytes, the fixed size) and its draw *rand, or -errno with s
 * given back, or -EAGAIN: s was bad (discarded) and a new take for x's
 * taker is under way. */
static int decode_taken(struct bindings *b, struct binding *x,
			struct dataset_sample *s, uint8_t **made,
			uint64_t *rand)
{
	const void *tag;
	size_t len;
	int r;

	pthread_mutex_lock(&b->lock);
	*rand = bindings_next_rand(b);
	tag = x->taker;
	pthread_mutex_unlock(&b->lock);
	r = bindings_make(b, s, *rand, made, &len);
	if (r == -EAGAIN) {
		bindings_take_for(b, x, tag);
		return r;
	}
	if (r == 0 && len != b->fixed) {
		free(*made);
		*made = NULL;
		dataset_echo_untake(b->ds, s);
		r = -EIO;
	}
	return r;
}

/* A take for x failed with err. An interrupted taker fails alone and the
 * next waiting OPEN takes anew; any other error fails them all. Caller
 * holds the lock, which this drops. */
static void take_failed(struct bindings *b, struct binding *x, int err)
{
	ASSERT_HELD(&b->lock);
	struct opener *failed, *next;
	const void *tag = NULL;

	int gone;

	failed = unwait(b, x, err == -EINTR ? x->taker : NULL);
	next = first_waiting(b, x);
	x->taking = next != NULL;
	if (next)
		tag = x->taker = next->tag;
	gone = bindings_maybe_unlink(b, x); /* forgotten while it took */
	pthread_mutex_unlock(&b->lock);
	answer(failed, err, NULL);
	if (tag)
		bindings_take_for(b, x, tag);
	if (gone)
		free(x);
}

/* Bind taken sample s to x, store its pages, then answer every OPEN
 * waiting on x (those that came during the store too). A parked take
 * runs this in the pool's thread that made the sample ready (a decoder
 * while the pool fills). Answering such opens without the store instead
 * (a READ renders the bytes in a FUSE thread) was measured: no better
 * first pass, and 0.02-0.08 READs per file (BENCHMARKS.md section 15). */
static void open_taken(void *ud, int err, struct dataset_sample *s)
{
	struct open_take t = *(struct open_take *)ud;
	struct bindings *b = t.b;
	struct binding *x = t.x;
	struct opener *w;
	uint8_t *made = NULL;
	uint64_t rand = 0;
	int r, n = 0, untake = 0, drop, gone;

	free(ud);
	if (err == 0 && b->decode) {
		err = decode_taken(b, x, s, &made, &rand);
		if (err == -EAGAIN)
			return; /* a bad sample: another take is under way */
	} else if (err == 0) {
		ssize_t size = sample_size(b, s);
		if (size != (ssize_t)b->fixed) {
			dataset_echo_untake(b->ds, s);
			err = size < 0 ? (int)size : -EIO;
		}
	}
	pthread_mutex_lock(&b->lock);
	x->taking = 0;
	if (err) {
		take_failed(b, x, err);
		return;
	}
	if (!first_waiting(b, x)) {
		/* Every OPEN was interrupted meanwhile. */
		int gone = bindings_maybe_unlink(b, x);
		pthread_mutex_unlock(&b->lock);
		free(made);
		dataset_echo_untake(b->ds, s);
		if (gone)
			free(x);
		return;
	}
	if (x->bound_once) {
		b->rebound++;
		x->rebound = 1;
	}
	bindings_set_sample(b, x, s, made, b->fixed,
			    made ? rand : bindings_next_rand(b));
	/* Counted as served now; the store below is the only one. */
	x->committed = x->bound_once = x->storing = x->stored = 1;
	pthread_mutex_unlock(&b->lock);
	dataset_echo_commit(b->ds, s);
	r = b->store ? b->store(b->store_ud, x->ino, x, x->size) : -ENOSYS;

	pthread_mutex_lock(&b->lock);
	x->storing = 0;
	x->unstored = r != 0;
	drop = x->unstored;
	w = unwait(b, x, NULL);
	for (struct opener *o = w; o; o = o->next)
		n++;
	x->opens += (uint32_t)n;
	b->open_handles += (uint64_t)n;
	s = n ? NULL : bindings_finish(x, &untake); /* all interrupted during the store */
	gone = bindings_maybe_unlink(b, x);          /* ... and the inode forgotten */
	pthread_mutex_unlock(&b->lock);
	bindings_drop_sample(b, s, untake);
	answer(w, drop, x);
	if (gone)
		free(x);
}

int bindings_would_take(struct bindings *b, uint64_t ino, uint32_t *file)
{
	struct binding *x;
	int r = 0;

	if (!b->fixed)
		return 0;
	pthread_mutex_lock(&b->lock);
	x = bindings_find(b, ino);
	if (x && !(x->s && !x->spent) && !x->taking && !x->storing &&
	    x->opens == 0) {
		*file = x->file;
		r = 1;
	}
	pthread_mutex_unlock(&b->lock);
	return r;
}

int bindings_open_async(struct bindings *b, uint64_t ino, const void *tag,
			bindings_opened_fn done, void *ud,
			struct binding **out)
{
	struct binding *x;
	struct opener *w;
	int start, r;

	if (!b->fixed)
		return bindings_open(b, ino, out);
	pthread_mutex_lock(&b->lock);
	x = bindings_find(b, ino);
	if (!x) {
		pthread_mutex_unlock(&b->lock);
		return -ENOENT;
	}
	if (x->s && !x->spent && !x->storing) {
		/* Open already, its pages stored: share its sample. */
		x->opens++;
		b->open_handles++;
		r = x->unstored;
		pthread_mutex_unlock(&b->lock);
		*out = x;
		return r;
	}
	w = xmalloc(sizeof(*w));
	*w = (struct opener){.x = x, .tag = tag, .done = done, .ud = ud,
			     .next = b->waiting};
	b->waiting = w;
	start = !x->taking && !x->storing;
	if (start) {
		x->taking = 1;
		x->taker = tag;
		/* The last READ reply of the old sample is still being sent:
		 * bindings_read_done takes when it is done. */
		x->deferred = x->s != NULL;
		start = !x->deferred;
	}
	pthread_mutex_unlock(&b->lock);
	if (start)
		bindings_take_for(b, x, tag);
	return -EINPROGRESS;
}

/* An OPEN waiting on another's take or store, named tag, is answered
 * EINTR. The taker's own request is cancelled in the pool instead (the
 * pool holds it as its tag), unless its take waits for a READ reply: then
 * the next waiting OPEN becomes the taker. 1 if one was waiting. */
int bindings_cancel_open(struct bindings *b, const void *tag)
{
	struct opener *w, *next;
	struct binding *x;
	int gone;

	pthread_mutex_lock(&b->lock);
	w = b->waiting;
	while (w && w->tag != tag)
		w = w->next;
	x = w ? w->x : NULL;
	if (!x || (x->taking && x->taker == tag && !x->deferred)) {
		pthread_mutex_unlock(&b->lock);
		return 0;
	}
	w = unwait(b, x, tag);
	if (x->taking && x->taker == tag) {
		next = first_waiting(b, x);
		x->taking = x->deferred = next != NULL;
		x->taker = next ? next->tag : NULL;
	}
	gone = bindings_maybe_unlink(b, x);
	pthread_mutex_unlock(&b->lock);
	answer(w, -EINTR, NULL);
	if (gone)
		free(x);
	return 1;
}

void bindings_cancel_all_opens(struct bindings *b)
{
	struct opener *w;

	pthread_mutex_lock(&b->lock);
	w = unwait(b, NULL, NULL);
	pthread_mutex_unlock(&b->lock);
	answer(w, -ESHUTDOWN, NULL);
}
