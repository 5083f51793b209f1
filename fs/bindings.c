/* bindings.c - on echo mounts, every path that is looked up is bound to a
 * sample from the echo pool, under an inode whose size and bytes do not
 * change while the binding lasts. */
#include "fs/bindings_int.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cache/dataset.h"
#include "common/deadline.h"
#include "common/lockcheck.h"
#include "common/util.h"
#include "fs/namespace.h"
#include "fs/visits.h"

#define REAP_EVERY_MS 250
#define REAP_BATCH 256

static size_t slot(const struct bindings *b, uint64_t ino)
{
	return (size_t)(ino * 0x9E3779B97F4A7C15ULL >> 20) & (b->tsize - 1);
}

struct binding *bindings_find(const struct bindings *b, uint64_t ino)
{
	struct binding *x = b->table[slot(b, ino)];
	while (x && x->ino != ino)
		x = x->hnext;
	return x;
}

static void grow(struct bindings *b)
{
	size_t old = b->tsize;
	struct binding **t = b->table;

	b->tsize *= 2;
	b->table = xcalloc(b->tsize, sizeof(*b->table));
	for (size_t i = 0; i < old; i++) {
		struct binding *x = t[i], *n;
		for (; x; x = n) {
			n = x->hnext;
			size_t k = slot(b, x->ino);
			x->hnext = b->table[k];
			b->table[k] = x;
		}
	}
	free(t);
}

static void insert(struct bindings *b, struct binding *x)
{
	if (b->count + 1 > b->tsize)
		grow(b);
	size_t k = slot(b, x->ino);
	x->hnext = b->table[k];
	b->table[k] = x;
	b->count++;
}

static void unlist(struct bindings *b, struct binding *x)
{
	if (x->uprev)
		x->uprev->unext = x->unext;
	else if (b->uhead == x)
		b->uhead = x->unext;
	else
		return; /* not listed */
	if (x->unext)
		x->unext->uprev = x->uprev;
	else
		b->utail = x->uprev;
	x->uprev = x->unext = NULL;
}

static void unhash(struct bindings *b, struct binding *x)
{
	struct binding **pp = &b->table[slot(b, x->ino)];
	while (*pp && *pp != x)
		pp = &(*pp)->hnext;
	if (*pp) {
		*pp = x->hnext;
		b->count--;
	}
}

/* The sample a binding still holds, detached, and whether it must be given
 * back (never served) rather than released. Caller holds the lock. */
static struct dataset_sample *detach(struct binding *x, int *untake)
{
	struct dataset_sample *s = x->s;
	x->s = NULL;
	free(x->out);
	x->out = NULL;
	*untake = !x->committed;
	return s;
}

void bindings_drop_sample(struct bindings *b, struct dataset_sample *s,
			  int untake)
{
	if (!s)
		return;
	if (untake)
		dataset_echo_untake(b->ds, s);
	else
		dataset_echo_release(b->ds, s);
}

static void fill(const struct bindings *b, const struct binding *x,
		 struct binding_attr *out)
{
	out->ino = x->ino;
	out->size = x->size;
	out->gen = x->gen;
	out->stable = b->fixed != 0;
}

int bindings_owns(const struct bindings *b, uint64_t ino)
{
	return ino >= b->first_ino;
}

/* The path's live binding (holding a sample, not done), or NULL. Caller
 * holds the lock. */
static struct binding *live(const struct bindings *b, uint32_t file)
{
	ASSERT_HELD(&b->lock);
	struct binding *x = b->cur[file];
	return x && x->s && !x->spent && !x->expired ? x : NULL;
}

/* live() for reader: with visits, only the reader's own binding (another
 * reader's serves another visit's substitute) made from the take of its
 * current visit of the key, whose number is unit (visits_unit): one made
 * in an earlier visit (the reader stat'ed the file, or kept it open, read
 * another key and came back) may serve another substitute than the
 * files it looks up now. Caller holds the lock. */
static struct binding *live_for(const struct bindings *b, uint32_t file,
				uint32_t reader, uint32_t unit)
{
	struct binding *x = live(b, file);

	if (x && b->visits &&
	    (x->reader != reader || dataset_sample_id(x->s) != unit))
		return NULL;
	return x;
}

int bindings_is_bound(struct bindings *b, uint32_t file)
{
	int r;

	pthread_mutex_lock(&b->lock);
	r = live(b, file) != NULL;
	pthread_mutex_unlock(&b->lock);
	return r;
}

/* Put x at the tail of the held list, its last lookup now. Caller holds
 * the lock. */
static void hold(struct bindings *b, struct binding *x)
{
	ASSERT_HELD(&b->lock);
	unlist(b, x);
	x->created = now_mono();
	x->uprev = b->utail;
	x->unext = NULL;
	if (b->utail)
		b->utail->unext = x;
	else
		b->uhead = x;
	b->utail = x;
}

/* The path's current binding for reader (and with visits its current
 * visit's take, numbered unit), counting one kernel lookup; 1 if there is
 * none. */
static int current(struct bindings *b, uint32_t file, uint32_t reader,
		   uint32_t unit, struct binding_attr *out)
{
	struct binding *x;

	pthread_mutex_lock(&b->lock);
	x = live_for(b, file, reader, unit);
	if (x) {
		x->nlookup++;
		x->looked++;
		x->lookups++;
		if (!x->opens)
			hold(b, x); /* unopened: its expire_s start again */
		fill(b, x, out);
	}
	pthread_mutex_unlock(&b->lock);
	return x ? 0 : 1;
}

/* Put sample s (bytes made: made, outlen; the render hook's draw: rand)
 * into binding x. Caller holds the lock. */
void bindings_set_sample(struct bindings *b, struct binding *x,
			 struct dataset_sample *s, uint8_t *made, size_t outlen,
			 uint64_t rand)
{
	ASSERT_HELD(&b->lock);
	x->s = s;
	x->out = made;
	x->size = outlen;
	x->rand = rand;
	x->sample = dataset_sample_id(s);
	/* Bound at open, the mtime stays: the store replaces the pages. */
	x->gen = b->fixed ? 0 : ++b->gens;
	x->committed = x->expired = x->stored = x->spent = 0;
	x->by_member = 0;
}

/* set_sample for a lookup: one kernel reference, listed as unopened.
 * Caller holds the lock. */
static void load(struct bindings *b, struct binding *x,
		 struct dataset_sample *s, uint8_t *made, size_t outlen,
		 uint64_t rand)
{
	ASSERT_HELD(&b->lock);
	bindings_set_sample(b, x, s, made, outlen, rand);
	x->nlookup++;
	x->looked = 1;
	x->lookups = 1;
	x->opened = 0;
	x->forgot = 0;
	hold(b, x); /* unopened */
}

/* A new draw for the make or render hook. Caller holds the lock. */
uint64_t bindings_next_rand(struct bindings *b)
{
	ASSERT_HELD(&b->lock);
	uint64_t rand = hash64(&b->made, sizeof(b->made), b->first_ino);
	b->made++;
	return rand;
}

int bindings_make(struct bindings *b, struct dataset_sample *s, uint64_t rand,
		  uint8_t **made, size_t *outlen)
{
	int r;

	*made = NULL;
	*outlen = dataset_sample_len(s);
	if (b->decode) {
		r = dataset_echo_decode(b->ds, s, rand, made, outlen);
		if (r == 0 || r == -ENOMEM || r == -ESHUTDOWN) {
			if (r)
				dataset_echo_untake(b->ds, s);
			return r;
		}
		dataset_echo_discard(b->ds, s); /* bad for good */
		return -EAGAIN;
	}
	if (!b->make)
		return 0;
	r = b->make(b->make_ud, dataset_sample_data(s), dataset_sample_len(s),
		    rand, made, outlen);
	if (r)
		dataset_echo_untake(b->ds, s);
	return r;
}

/* A take for path `file`: of its class, or of the reader's visit. */
static int take_async(struct bindings *b, uint32_t file, uint32_t reader,
		      const void *tag, dataset_echo_done_fn done, void *ud,
		      struct dataset_sample **s)
{
	if (b->visits)
		return visits_take_async(b->visits, file, reader, tag, done,
					 ud, s);
	return dataset_echo_take_async(b->ds, b->ns->files[file].cls, tag,
				       done, ud, s);
}

/* Bind path `file` to the taken sample s (made first). The sample is
 * given back on failure or when another lookup won the race; -EAGAIN: it
 * was bad (discarded), take another. */
static int bind_sample(struct bindings *b, uint32_t file, uint32_t reader,
		       struct dataset_sample *s, struct binding_attr *out)
{
	uint8_t *made = NULL;
	size_t outlen = dataset_sample_len(s);
	uint32_t member = b->visits ? visits_member(b->visits, file, s)
				    : VISITS_HELD;
	uint32_t unit = dataset_sample_id(s); /* s is the visit's take */
	struct binding *x;
	int r;

	uint64_t rand = 0;

	if (b->make || b->decode || b->render.range) {
		pthread_mutex_lock(&b->lock);
		rand = bindings_next_rand(b);
		pthread_mutex_unlock(&b->lock);
	}
	if (b->render.range) {
		/* Rendered at each READ: only the length is needed now. */
		ssize_t n = b->render.size(b->render.ud, dataset_sample_data(s),
					   dataset_sample_len(s));
		if (n < 0) {
			dataset_echo_untake(b->ds, s);
			return (int)n;
		}
		outlen = (size_t)n;
	} else {
		r = bindings_make(b, s, rand, &made, &outlen);
		if (r)
			return r;
	}
	if (member != VISITS_HELD) /* no hooks with visits: nothing made */
		outlen = (size_t)dataset_size(b->ds, member);
	if (current(b, file, reader, unit, out) == 0) {
		/* Another lookup of this path won the race: use its binding. */
		free(made);
		dataset_echo_untake(b->ds, s);
		return 0;
	}
	pthread_mutex_lock(&b->lock);
	x = live_for(b, file, reader, unit);
	if (x) {
		/* Bound meanwhile (between current() and here). */
		x->nlookup++;
		x->looked++;
		x->lookups++;
		if (!x->opens)
			hold(b, x);
		fill(b, x, out);
		pthread_mutex_unlock(&b->lock);
		free(made);
		dataset_echo_untake(b->ds, s);
		return 0;
	}
	/* Always a new inode: a node id the kernel was told about never
	 * changes its sample, size and bytes (see bindings.h). */
	x = xcalloc(1, sizeof(*x));
	x->ino = b->next_ino++;
	x->file = file;
	x->reader = reader;
	insert(b, x);
	b->cur[file] = x;
	load(b, x, s, made, outlen, rand);
	if (member != VISITS_HELD) {
		x->by_member = 1;
		x->member = x->sample = member;
	}
	fill(b, x, out);
	pthread_mutex_unlock(&b->lock);
	return 0;
}

/* Binding at open: a lookup returns the path's inode, made if the kernel
 * holds none, and takes no sample. */
static void lookup_fixed(struct bindings *b, uint32_t file,
			 struct binding_attr *out)
{
	struct binding *x;

	pthread_mutex_lock(&b->lock);
	x = b->cur[file];
	if (!x) {
		x = xcalloc(1, sizeof(*x));
		x->ino = b->next_ino++;
		x->file = file;
		x->size = b->fixed;
		insert(b, x);
		b->cur[file] = x;
	}
	x->nlookup++;
	fill(b, x, out);
	pthread_mutex_unlock(&b->lock);
}

/* A parked lookup. */
struct parked {
	struct bindings *b;
	uint32_t file, reader;
	const void *tag;
	bindings_done_fn done;
	void *ud;
};

static void parked_done(void *ud, int err, struct dataset_sample *s)
{
	struct parked *pk = ud;
	struct binding_attr attr = {0};

	if (err == 0)
		err = bind_sample(pk->b, pk->file, pk->reader, s, &attr);
	while (err == -EAGAIN) {
		/* The sample was bad (discarded): take the class's next. */
		err = take_async(pk->b, pk->file, pk->reader, pk->tag,
				 parked_done, pk, &s);
		if (err == -EINPROGRESS)
			return; /* pk belongs to the pool again */
		if (err == 0)
			err = bind_sample(pk->b, pk->file, pk->reader, s,
					  &attr);
	}
	pk->done(pk->ud, err, err ? NULL : &attr);
	free(pk);
}

int bindings_lookup_async(struct bindings *b, uint32_t file, uint32_t reader,
			  const void *tag, bindings_done_fn done, void *ud,
			  struct binding_attr *out)
{
	struct dataset_sample *s;
	struct parked *pk;
	int r;

	if (b->fixed) {
		lookup_fixed(b, file, out);
		return 0;
	}
	do {
		uint32_t unit =
			b->visits ? visits_unit(b->visits, reader, file) : 0;
		if (current(b, file, reader, unit, out) == 0)
			return 0;
		pk = xmalloc(sizeof(*pk));
		*pk = (struct parked){.b = b, .file = file, .reader = reader,
				      .tag = tag, .done = done, .ud = ud};
		r = take_async(b, file, reader, tag, parked_done, pk, &s);
		if (r == -EINPROGRESS)
			return r; /* pk belongs to the pool until parked_done */
		free(pk);
		if (r == 0)
			r = bind_sample(b, file, reader, s, out);
	} while (r == -EAGAIN); /* a bad sample, discarded: the next */
	return r;
}

int bindings_getattr(struct bindings *b, uint64_t ino, struct binding_attr *out)
{
	struct binding *x;
	pthread_mutex_lock(&b->lock);
	x = bindings_find(b, ino);
	if (x) {
		fill(b, x, out);
		x->looked++; /* this reply also carries the sample's attributes */
	}
	pthread_mutex_unlock(&b->lock);
	return x ? 0 : -ENOENT;
}

int bindings_open(struct bindings *b, uint64_t ino, struct binding **out)
{
	struct binding *x;
	int commit = 0;

	pthread_mutex_lock(&b->lock);
	x = bindings_find(b, ino);
	if (!x || !x->s) {
		pthread_mutex_unlock(&b->lock);
		/* Given back: no lookup of it was left to open it within
		 * expire_s. The kernel looks the path up again. */
		return x ? -ESTALE : -ENOENT;
	}
	/* Open, or spent while this open's lookup was on its way: the
	 * sample the kernel was told about. */
	if (!x->committed) {
		x->committed = 1;
		commit = 1;
	}
	unlist(b, x);
	x->opened++;
	x->opens++;
	b->open_handles++;
	pthread_mutex_unlock(&b->lock);
	if (commit)
		dataset_echo_commit(b->ds, x->s);
	*out = x;
	return 0;
}

int bindings_cancel(struct bindings *b, const void *tag)
{
	if (!b)
		return 0;
	return dataset_echo_cancel(b->ds, tag) ||
	       visits_cancel(b->visits, tag) || bindings_cancel_open(b, tag);
}

int bindings_take_store(struct bindings *b, struct binding *h, uint64_t max,
			uint64_t *size)
{
	int yes;

	pthread_mutex_lock(&b->lock);
	yes = !h->stored && h->s && h->size > 0 && h->size <= max;
	h->stored = 1;
	*size = h->size;
	pthread_mutex_unlock(&b->lock);
	return yes;
}

/* Each thread's render buffer (grown to the largest READ it answered),
 * freed when the thread exits: no allocation per echo serve. */
struct render_buf {
	uint8_t *p;
	size_t cap;
};

static pthread_key_t render_key;
static pthread_once_t render_once = PTHREAD_ONCE_INIT;

static void render_buf_free(void *v)
{
	struct render_buf *rb = v;
	free(rb->p);
	free(rb);
}

static void render_key_make(void)
{
	pthread_key_create(&render_key, render_buf_free);
}

static uint8_t *render_buf_get(size_t n)
{
	struct render_buf *rb;

	pthread_once(&render_once, render_key_make);
	rb = pthread_getspecific(render_key);
	if (!rb) {
		rb = xcalloc(1, sizeof(*rb));
		pthread_setspecific(render_key, rb);
	}
	if (n > rb->cap) {
		free(rb->p);
		rb->p = malloc(n);
		rb->cap = rb->p ? n : 0;
	}
	return rb->p;
}

/* Render bytes [off, off + size) of pinned binding h for bindings_read. */
static ssize_t render_read(struct bindings *b, struct binding *h, uint64_t off,
			   size_t size, const void **data)
{
	uint8_t *buf = render_buf_get(size ? size : 1);
	ssize_t r = -ENOMEM;

	if (buf)
		r = b->render.range(b->render.ud, dataset_sample_data(h->s),
				    dataset_sample_len(h->s), h->rand, off,
				    buf, size);
	if (r >= 0 && (size_t)r != size)
		r = -EIO; /* the rendering must have the length it was bound with */
	if (r < 0) {
		bindings_read_done(b, h);
		return r;
	}
	*data = buf;
	return r;
}

/* Bytes [off, off + size) of pinned binding h's member (a visit's other
 * file) for bindings_read. */
static ssize_t member_read(struct bindings *b, struct binding *h, uint64_t off,
			   size_t size, const void **data)
{
	uint8_t *buf = render_buf_get(size ? size : 1);
	ssize_t r = buf ? dataset_read(b->ds, h->member, off, size, buf)
			: -ENOMEM;

	if (r >= 0 && (size_t)r != size)
		r = -EIO; /* the member must have the size the index says */
	if (r < 0) {
		bindings_read_done(b, h);
		return r;
	}
	*data = buf;
	return r;
}

ssize_t bindings_read(struct bindings *b, struct binding *h, uint64_t off,
		      size_t size, const void **data)
{
	ssize_t r = -ESTALE;
	int render = 0, member = 0;

	pthread_mutex_lock(&b->lock);
	if (h->s) {
		h->reading++;
		if (off >= h->size)
			size = 0;
		else if (size > h->size - off)
			size = (size_t)(h->size - off);
		render = b->render.range != NULL && !h->out;
		*data = h->out ? h->out + (off < h->size ? off : 0)
		      : render ? NULL
			       : dataset_sample_data(h->s) + (off < h->size ? off : 0);
		render = render && size > 0;
		member = h->by_member && size > 0;
		r = (ssize_t)size;
	}
	pthread_mutex_unlock(&b->lock);
	/* Pinned (reading), so h->s stays: render without the lock. */
	if (member)
		return member_read(b, h, off, size, data);
	return render ? render_read(b, h, off, size, data) : r;
}

/* Free x if neither the kernel, a handle nor a reply refers to it. Caller
 * holds the lock; returns 1 if x was unlinked (the caller frees it
 * unlocked). */
int bindings_maybe_unlink(struct bindings *b, struct binding *x)
{
	ASSERT_HELD(&b->lock);
	if (x->nlookup || x->opens || x->reading || x->taking || x->storing)
		return 0;
	unhash(b, x);
	unlist(b, x);
	if (b->cur[x->file] == x)
		b->cur[x->file] = NULL;
	return 1;
}

/* After the last handle: the path's next lookup binds anew (the reader
 * closed the file, so a reply still being sent cannot be for a new open);
 * after the last reply too, the bytes go back to the pool. Caller holds the
 * lock; returns the sample to drop (unlocked) or NULL. */
struct dataset_sample *bindings_finish(struct binding *h, int *untake)
{
	if (h->opens)
		return NULL;
	h->spent = 1;
	if (h->reading)
		return NULL;
	return detach(h, untake);
}

/* Whether done binding h must keep its sample: a lookup answered with it
 * may still be followed by its OPEN (lookups > opened) while the kernel
 * holds it. Such a binding waits on the held list and is given back
 * expire_s after its last lookup unless opened again. */
static int awaited(const struct binding *h)
{
	return h->lookups > h->opened && h->nlookup > 0;
}

/* After h's last handle, or its last reply. Bound at open, the sample
 * goes and the inode takes the next one at its next OPEN. Bound at a
 * lookup, the path's next lookup binds anew under a new inode, and the
 * sample goes unless a lookup may still open h (awaited); 1 is returned,
 * once, when the path's entry may be dropped (inval hook) so that the next
 * walk costs one LOOKUP. Caller holds the lock; *s is the sample to drop
 * unlocked, or NULL. */
static int spend(struct bindings *b, struct binding *h,
		 struct dataset_sample **s, int *untake)
{
	int first;

	*s = NULL;
	if (b->fixed) {
		*s = bindings_finish(h, untake);
		return 0;
	}
	if (h->opens || !h->committed)
		return 0;
	first = !h->spent;
	h->spent = 1;
	if (!h->reading) { /* else the last reply lets the bytes go */
		if (awaited(h))
			hold(b, h);
		else if (h->s)
			*s = detach(h, untake);
	}
	return first && b->cur[h->file] == h && b->inval != NULL;
}

static void inval(struct bindings *b, uint32_t file)
{
	b->inval(b->inval_ud, file);
}

void bindings_read_done(struct bindings *b, struct binding *h)
{
	struct dataset_sample *s;
	const void *taker = NULL;
	int untake = 0, gone;

	pthread_mutex_lock(&b->lock);
	h->reading--;
	/* The kernel may send RELEASE while a READ is still being answered:
	 * only the later of the two lets the bytes go. */
	s = NULL;
	if (b->fixed && h->committed && !h->opens && !h->storing)
		s = bindings_finish(h, &untake);
	else if (!b->fixed && h->spent && !h->opens && !h->reading && h->s) {
		if (awaited(h))
			hold(b, h);
		else
			s = detach(h, &untake);
	}
	if (h->deferred && !h->s) {
		/* An OPEN waited for this reply to bind the next sample. */
		h->deferred = 0;
		taker = h->taker;
	}
	gone = bindings_maybe_unlink(b, h);
	pthread_mutex_unlock(&b->lock);
	bindings_drop_sample(b, s, untake);
	if (taker)
		bindings_take_for(b, h, taker);
	if (gone)
		free(h);
}

void bindings_release(struct bindings *b, struct binding *h)
{
	struct dataset_sample *s = NULL;
	uint32_t file = h->file;
	int untake = 0, gone, drop_entry;

	pthread_mutex_lock(&b->lock);
	h->opens--;
	b->open_handles--;
	drop_entry = spend(b, h, &s, &untake);
	gone = bindings_maybe_unlink(b, h);
	pthread_mutex_unlock(&b->lock);
	bindings_drop_sample(b, s, untake);
	if (drop_entry)
		inval(b, file);
	if (gone)
		free(h);
}

void bindings_forget(struct bindings *b, uint64_t ino, uint64_t n)
{
	struct dataset_sample *s = NULL;
	struct binding *x;
	int untake = 0, gone = 0;

	pthread_mutex_lock(&b->lock);
	x = bindings_find(b, ino);
	if (x) {
		x->nlookup -= n < x->nlookup ? n : x->nlookup;
		x->forgot += n;
		gone = bindings_maybe_unlink(b, x);
		if (gone)
			s = detach(x, &untake);
	}
	pthread_mutex_unlock(&b->lock);
	bindings_drop_sample(b, s, untake);
	if (gone)
		free(x);
}

int bindings_source(struct bindings *b, uint64_t ino, uint32_t *sample)
{
	struct binding *x;
	pthread_mutex_lock(&b->lock);
	x = bindings_find(b, ino);
	if (x && b->fixed && !x->bound_once)
		x = NULL; /* bound at open, never opened */
	if (x)
		*sample = x->sample;
	pthread_mutex_unlock(&b->lock);
	return x ? 0 : -ENOENT;
}

void bindings_get_stats(struct bindings *b, struct bindings_stats *out)
{
	memset(out, 0, sizeof(*out));
	if (!b)
		return;
	pthread_mutex_lock(&b->lock);
	out->live = b->count;
	out->open = b->open_handles;
	out->expired = b->expired;
	out->rebound = b->rebound;
	pthread_mutex_unlock(&b->lock);
}

/* Give back what the held list kept expire_s after its last lookup:
 * bindings nobody opened (expired: no longer the path's; their entries
 * go to out, at most max, for the inval hook) and spent ones no lookup
 * opened since. Their samples go to drop[], dropping[] says how. */
struct reaped {
	struct dataset_sample *s;
	int untake;
	uint32_t file; /* the entry to drop, or UINT32_MAX */
};

static size_t reap(struct bindings *b, struct reaped *out, size_t max)
{
	double limit = now_mono() - b->expire_s;
	size_t n = 0;

	while (n < max && b->uhead && b->uhead->created < limit) {
		struct binding *x = b->uhead;
		unlist(b, x);
		out[n].file = UINT32_MAX;
		if (!x->committed) {
			x->expired = 1;
			b->expired++;
			if (b->cur[x->file] == x && b->inval)
				out[n].file = x->file;
		}
		out[n].s = detach(x, &out[n].untake);
		n++;
	}
	return n;
}

static void *reaper_main(void *arg)
{
	struct bindings *b = arg;
	struct reaped batch[REAP_BATCH];

	pthread_mutex_lock(&b->lock);
	while (!b->stop) {
		struct deadline d = deadline_in(REAP_EVERY_MS / 1000.0);
		cond_wait_until(&b->cond, &b->lock, &d);
		size_t n = reap(b, batch, REAP_BATCH);
		pthread_mutex_unlock(&b->lock);
		for (size_t i = 0; i < n; i++) {
			bindings_drop_sample(b, batch[i].s, batch[i].untake);
			if (batch[i].file != UINT32_MAX)
				inval(b, batch[i].file);
		}
		pthread_mutex_lock(&b->lock);
	}
	pthread_mutex_unlock(&b->lock);
	return NULL;
}

int bindings_start(struct dataset *ds, const struct namespace *ns,
		   uint64_t first_ino, double expire_s, bindings_make_fn make,
		   void *make_ud, struct bindings **out)
{
	struct bindings *b = xcalloc(1, sizeof(*b));
	int r;

	*out = NULL;
	b->make = make;
	b->make_ud = make_ud;
	b->ds = ds;
	b->ns = ns;
	b->first_ino = b->next_ino = first_ino;
	b->expire_s = expire_s;
	b->cur = xcalloc(ns->nfiles ? ns->nfiles : 1, sizeof(*b->cur));
	b->tsize = 1024;
	b->table = xcalloc(b->tsize, sizeof(*b->table));
	pthread_mutex_init(&b->lock, NULL);
	r = cond_init_monotonic(&b->cond);
	if (r == 0) {
		r = -pthread_create(&b->reaper, NULL, reaper_main, b);
		if (r)
			pthread_cond_destroy(&b->cond);
	}
	if (r) {
		pthread_mutex_destroy(&b->lock);
		free(b->table);
		free(b->cur);
		free(b);
		return r;
	}
	*out = b;
	return 0;
}

void bindings_set_decode(struct bindings *b)
{
	b->decode = 1;
}

void bindings_set_render(struct bindings *b, const struct bindings_render *r)
{
	b->render = *r;
}

void bindings_set_inval(struct bindings *b, bindings_inval_fn fn, void *ud)
{
	b->inval = fn;
	b->inval_ud = ud;
}

void bindings_set_visits(struct bindings *b, struct visits *v)
{
	b->visits = v;
}

int bindings_binds_at_open(const struct bindings *b)
{
	return b->fixed != 0;
}

void bindings_bind_at_open(struct bindings *b, uint64_t size,
			   bindings_store_fn store, void *ud)
{
	b->fixed = size;
	b->store = store;
	b->store_ud = ud;
}

void bindings_free(struct bindings *b)
{
	if (!b)
		return;
	dataset_echo_cancel_all(b->ds); /* no parked lookup may outlive b */
	visits_cancel_all(b->visits);
	bindings_cancel_all_opens(b); /* nor a waiting open */
	pthread_mutex_lock(&b->lock);
	b->stop = 1;
	pthread_cond_broadcast(&b->cond);
	pthread_mutex_unlock(&b->lock);
	pthread_join(b->reaper, NULL);
	for (size_t i = 0; i < b->tsize; i++) {
		struct binding *x = b->table[i], *n;
		for (; x; x = n) {
			int untake = 0;
			n = x->hnext;
			bindings_drop_sample(b, detach(x, &untake), untake);
			free(x);
		}
	}
	visits_free(b->visits); /* after the bindings' shares of its takes */
	pthread_cond_destroy(&b->cond);
	pthread_mutex_destroy(&b->lock);
	free(b->table);
	free(b->cur);
	free(b);
}
