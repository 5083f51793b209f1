/* bindings.c - on echo mounts, every path that is looked up is bound to a
 * sample from the echo pool, under an inode whose size and bytes do not
 * change while the binding lasts. */
#include "fs/bindings.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cache/dataset.h"
#include "common/deadline.h"
#include "common/util.h"
#include "fs/namespace.h"

#define REAP_EVERY_MS 250
#define REAP_BATCH 256

struct binding {
	uint64_t ino;
	uint32_t file;          /* the path: namespace file number */
	struct dataset_sample *s;  /* NULL once given back (expired or done) */
	uint8_t *out;           /* bytes made by the make hook, or NULL */
	uint64_t size;
	uint64_t rand;          /* the render hook's draw for this binding */
	uint32_t sample;        /* source sample, kept after s is dropped */
	uint64_t nlookup;       /* references the kernel holds */
	uint32_t opens;         /* open handles */
	uint32_t reading;       /* READ replies in progress */
	uint32_t looked;        /* lookups and getattrs answered with this sample */
	uint64_t forgot;        /* references the kernel dropped meanwhile */
	unsigned committed : 1; /* opened at least once: counted as served */
	unsigned expired : 1;   /* given back unopened */
	unsigned stored : 1;    /* bindings_take_store said yes once */
	unsigned rebound : 1;   /* the sample was bound to an inode the kernel kept */
	unsigned spent : 1;     /* released: the path binds anew (the bytes stay
				 * while a reply is being sent) */
	/* Binding at open only: */
	unsigned taking : 1;    /* an OPEN's take is under way (taker) */
	unsigned deferred : 1;  /* ... waiting for the last READ reply first */
	unsigned storing : 1;   /* the new sample's pages are being stored */
	unsigned unstored : 1;  /* the store failed: opens drop the pages */
	unsigned bound_once : 1; /* a sample was bound before */
	const void *taker;      /* tag of the OPEN whose take is under way */
	uint64_t gen;           /* serial of the sample bound: the mtime */
	double created;
	struct binding *hnext;            /* hash chain */
	struct binding *uprev, *unext;    /* unopened list, oldest first */
};

struct bindings {
	struct dataset *ds;
	const struct namespace *ns;
	uint64_t first_ino;
	double expire_s;
	bindings_make_fn make;
	void *make_ud;
	struct bindings_render render; /* set before serving; read-only then */
	uint64_t fixed;         /* binding at open: every binding's size, or 0 */
	bindings_store_fn store; /* with fixed: the page-cache store */
	void *store_ud;
	pthread_t reaper;

	pthread_mutex_t lock; /* guards everything below and every binding */
	pthread_cond_t cond;
	int stop;
	uint64_t next_ino;
	uint64_t gens;          /* samples bound so far: each binding's gen */
	uint64_t made;          /* bindings made, seeds each one's rand */
	struct binding **cur;   /* current binding of each path, or NULL */
	struct binding **table; /* by inode */
	size_t tsize, count;
	struct binding *uhead, *utail;
	struct opener *waiting; /* OPENs waiting for a binding's sample */
	uint64_t open_handles, expired, rebound;
};

/* An OPEN waiting for its binding's sample (binding at open). */
struct opener {
	struct binding *x;
	const void *tag;
	bindings_opened_fn done;
	void *ud;
	struct opener *next;
};

static size_t slot(const struct bindings *b, uint64_t ino)
{
	return (size_t)(ino * 0x9E3779B97F4A7C15ULL >> 20) & (b->tsize - 1);
}

static struct binding *find(const struct bindings *b, uint64_t ino)
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

static void drop_sample(struct bindings *b, struct dataset_sample *s,
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

/* The path's live binding (holding a sample), or NULL. Caller holds the
 * lock. */
static struct binding *live(const struct bindings *b, uint32_t file)
{
	struct binding *x = b->cur[file];
	return x && x->s && !x->spent ? x : NULL;
}

/* The path's current binding, counting one kernel lookup; 1 if there is
 * none. */
static int current(struct bindings *b, uint32_t file, struct binding_attr *out)
{
	struct binding *x;

	pthread_mutex_lock(&b->lock);
	x = live(b, file);
	if (x) {
		x->nlookup++;
		x->looked++;
		fill(b, x, out);
	}
	pthread_mutex_unlock(&b->lock);
	return x ? 0 : 1;
}

/* Put sample s (bytes made: made, outlen; the render hook's draw: rand)
 * into binding x. Caller holds the lock. */
static void set_sample(struct bindings *b, struct binding *x,
		       struct dataset_sample *s, uint8_t *made, size_t outlen,
		       uint64_t rand)
{
	x->s = s;
	x->out = made;
	x->size = outlen;
	x->rand = rand;
	x->sample = dataset_sample_id(s);
	/* Bound at open, the mtime stays: the store replaces the pages. */
	x->gen = b->fixed ? 0 : ++b->gens;
	x->committed = x->expired = x->stored = x->spent = 0;
}

/* set_sample for a lookup: one kernel reference, listed as unopened.
 * Caller holds the lock. */
static void load(struct bindings *b, struct binding *x,
		 struct dataset_sample *s, uint8_t *made, size_t outlen,
		 uint64_t rand)
{
	set_sample(b, x, s, made, outlen, rand);
	x->created = now_mono();
	x->nlookup++;
	x->looked = 1;
	x->forgot = 0;
	/* Append to the unopened list. */
	x->uprev = b->utail;
	x->unext = NULL;
	if (b->utail)
		b->utail->unext = x;
	else
		b->uhead = x;
	b->utail = x;
}

/* Whether spent binding x may take the path's next sample under its node
 * id. The kernel applies the attributes of a lookup reply only if no other
 * reply for the inode was applied since the request was sent (its
 * attr_version), so a reply about the old sample applied late could hide
 * the new size and mtime, and with them the dropping of the old pages.
 * That cannot happen when the old sample was answered to exactly one
 * lookup (or getattr) and then opened: every open is preceded by its
 * task's own lookup of the binding it opens, so the one looker is the one
 * opener, whose reply was applied before it opened. A reply the kernel
 * threw away is forgotten at once and never applied: when a new inode
 * replaces a path's old one, the kernel's revalidating lookup finds
 * another node id, forgets it and looks the path up again, so such a
 * binding is answered twice and forgotten once. Bindings that were
 * looked at more than that, or expired unopened, or still sending a reply
 * when the path was looked up again, are replaced by a new inode. Caller
 * holds the lock. */
static int rebindable(const struct binding *x)
{
	return x && !x->s && x->committed && x->nlookup && !x->opens &&
	       !x->reading && x->forgot < x->looked &&
	       x->looked - x->forgot == 1;
}

/* A new draw for the make or render hook. Caller holds the lock. */
static uint64_t next_rand(struct bindings *b)
{
	uint64_t rand = hash64(&b->made, sizeof(b->made), b->first_ino);
	b->made++;
	return rand;
}

/* Bind path `file` to the taken sample s (made by the hook first). The
 * sample is given back on failure or when another lookup won the race. */
static int bind_sample(struct bindings *b, uint32_t file,
		       struct dataset_sample *s, struct binding_attr *out)
{
	uint8_t *made = NULL;
	size_t outlen = dataset_sample_len(s);
	struct binding *x;
	int r;

	uint64_t rand = 0;

	if (b->make || b->render.range) {
		pthread_mutex_lock(&b->lock);
		rand = next_rand(b);
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
	} else if (b->make) {
		r = b->make(b->make_ud, dataset_sample_data(s),
			    dataset_sample_len(s), rand, &made, &outlen);
		if (r) {
			dataset_echo_untake(b->ds, s);
			return r;
		}
	}
	if (current(b, file, out) == 0) {
		/* Another lookup of this path won the race: use its binding. */
		free(made);
		dataset_echo_untake(b->ds, s);
		return 0;
	}
	pthread_mutex_lock(&b->lock);
	x = b->cur[file];
	if (live(b, file)) {
		/* Bound meanwhile (between current() and here). */
		x->nlookup++;
		x->looked++;
		fill(b, x, out);
		pthread_mutex_unlock(&b->lock);
		free(made);
		dataset_echo_untake(b->ds, s);
		return 0;
	}
	if (rebindable(x)) {
		/* The kernel still holds the path's spent inode: bind the new
		 * sample to it (see bindings.h, Rebinding). */
		b->rebound++;
		x->rebound = 1;
	} else {
		x = xcalloc(1, sizeof(*x));
		x->ino = b->next_ino++;
		x->file = file;
		insert(b, x);
		b->cur[file] = x;
	}
	load(b, x, s, made, outlen, rand);
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

int bindings_lookup(struct bindings *b, uint32_t file, struct binding_attr *out)
{
	struct dataset_sample *s;
	int r;

	if (b->fixed) {
		lookup_fixed(b, file, out);
		return 0;
	}
	if (current(b, file, out) == 0)
		return 0;
	r = dataset_echo_take(b->ds, b->ns->files[file].cls, &s);
	return r ? r : bind_sample(b, file, s, out);
}

/* A parked lookup. */
struct parked {
	struct bindings *b;
	uint32_t file;
	bindings_done_fn done;
	void *ud;
};

static void parked_done(void *ud, int err, struct dataset_sample *s)
{
	struct parked *pk = ud;
	struct binding_attr attr = {0};

	if (err == 0)
		err = bind_sample(pk->b, pk->file, s, &attr);
	pk->done(pk->ud, err, err ? NULL : &attr);
	free(pk);
}

int bindings_lookup_async(struct bindings *b, uint32_t file, const void *tag,
			  bindings_done_fn done, void *ud,
			  struct binding_attr *out)
{
	struct dataset_sample *s;
	struct parked *pk;
	int r;

	if (b->fixed) {
		lookup_fixed(b, file, out);
		return 0;
	}
	if (current(b, file, out) == 0)
		return 0;
	pk = xmalloc(sizeof(*pk));
	*pk = (struct parked){.b = b, .file = file, .done = done, .ud = ud};
	r = dataset_echo_take_async(b->ds, b->ns->files[file].cls, tag, parked_done,
			    pk, &s);
	if (r == -EINPROGRESS)
		return r; /* pk belongs to the pool until parked_done */
	free(pk);
	return r ? r : bind_sample(b, file, s, out);
}

int bindings_getattr(struct bindings *b, uint64_t ino, struct binding_attr *out)
{
	struct binding *x;
	pthread_mutex_lock(&b->lock);
	x = find(b, ino);
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
	int commit = 0, drop;

	pthread_mutex_lock(&b->lock);
	x = find(b, ino);
	if (!x || !x->s || x->spent) {
		pthread_mutex_unlock(&b->lock);
		/* Expired or finished: the kernel will look the path up again. */
		return x ? -ESTALE : -ENOENT;
	}
	if (!x->committed) {
		x->committed = 1;
		commit = 1;
		unlist(b, x);
	}
	x->opens++;
	b->open_handles++;
	/* A rebound sample looked up more than once: another looker's reply
	 * may have been applied first, and the pages of the old sample may
	 * still be being dropped by it. This open drops them itself. */
	drop = x->rebound && x->looked > 1;
	pthread_mutex_unlock(&b->lock);
	if (commit)
		dataset_echo_commit(b->ds, x->s);
	*out = x;
	return drop;
}

/* ---- binding at open (see bindings.h, DESIGN) ---- */

static struct dataset_sample *finish(struct binding *h, int *untake);
static int maybe_unlink(struct bindings *b, struct binding *x);

/* Unlink and return the OPENs waiting on x (all of them, or only the one
 * named tag when tag is not NULL). Caller holds the lock. */
static struct opener *unwait(struct bindings *b, const struct binding *x,
			     const void *tag)
{
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
static void take_for(struct bindings *b, struct binding *x, const void *tag)
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

/* A take for x failed with err. An interrupted taker fails alone and the
 * next waiting OPEN takes anew; any other error fails them all. Caller
 * holds the lock, which this drops. */
static void take_failed(struct bindings *b, struct binding *x, int err)
{
	struct opener *failed, *next;
	const void *tag = NULL;

	int gone;

	failed = unwait(b, x, err == -EINTR ? x->taker : NULL);
	next = first_waiting(b, x);
	x->taking = next != NULL;
	if (next)
		tag = x->taker = next->tag;
	gone = maybe_unlink(b, x); /* forgotten while it took */
	pthread_mutex_unlock(&b->lock);
	answer(failed, err, NULL);
	if (tag)
		take_for(b, x, tag);
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
	int r, n = 0, untake = 0, drop, gone;

	free(ud);
	if (err == 0) {
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
		int gone = maybe_unlink(b, x);
		pthread_mutex_unlock(&b->lock);
		dataset_echo_untake(b->ds, s);
		if (gone)
			free(x);
		return;
	}
	if (x->bound_once) {
		b->rebound++;
		x->rebound = 1;
	}
	set_sample(b, x, s, NULL, b->fixed, next_rand(b));
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
	s = n ? NULL : finish(x, &untake); /* all interrupted during the store */
	gone = maybe_unlink(b, x);          /* ... and the inode forgotten */
	pthread_mutex_unlock(&b->lock);
	drop_sample(b, s, untake);
	answer(w, drop, x);
	if (gone)
		free(x);
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
	x = find(b, ino);
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
		take_for(b, x, tag);
	return -EINPROGRESS;
}

/* An OPEN waiting on another's take or store, named tag, is answered
 * EINTR. The taker's own request is cancelled in the pool instead (the
 * pool holds it as its tag), unless its take waits for a READ reply: then
 * the next waiting OPEN becomes the taker. 1 if one was waiting. */
static int cancel_open(struct bindings *b, const void *tag)
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
	gone = maybe_unlink(b, x);
	pthread_mutex_unlock(&b->lock);
	answer(w, -EINTR, NULL);
	if (gone)
		free(x);
	return 1;
}

int bindings_cancel(struct bindings *b, const void *tag)
{
	if (!b)
		return 0;
	return dataset_echo_cancel(b->ds, tag) || cancel_open(b, tag);
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

ssize_t bindings_read(struct bindings *b, struct binding *h, uint64_t off,
		      size_t size, const void **data)
{
	ssize_t r = -ESTALE;
	int render = 0;

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
		r = (ssize_t)size;
	}
	pthread_mutex_unlock(&b->lock);
	/* Pinned (reading), so h->s stays: render without the lock. */
	return render ? render_read(b, h, off, size, data) : r;
}

/* Free x if neither the kernel, a handle nor a reply refers to it. Caller
 * holds the lock; returns 1 if x was unlinked (the caller frees it
 * unlocked). */
static int maybe_unlink(struct bindings *b, struct binding *x)
{
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
static struct dataset_sample *finish(struct binding *h, int *untake)
{
	if (h->opens)
		return NULL;
	h->spent = 1;
	if (h->reading)
		return NULL;
	return detach(h, untake);
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
	s = h->committed && !h->opens && !h->storing ? finish(h, &untake)
						     : NULL;
	if (h->deferred && !h->s) {
		/* An OPEN waited for this reply to bind the next sample. */
		h->deferred = 0;
		taker = h->taker;
	}
	gone = maybe_unlink(b, h);
	pthread_mutex_unlock(&b->lock);
	drop_sample(b, s, untake);
	if (taker)
		take_for(b, h, taker);
	if (gone)
		free(h);
}

void bindings_release(struct bindings *b, struct binding *h)
{
	struct dataset_sample *s = NULL;
	int untake = 0, gone;

	pthread_mutex_lock(&b->lock);
	h->opens--;
	b->open_handles--;
	s = finish(h, &untake);
	gone = maybe_unlink(b, h);
	pthread_mutex_unlock(&b->lock);
	drop_sample(b, s, untake);
	if (gone)
		free(h);
}

void bindings_forget(struct bindings *b, uint64_t ino, uint64_t n)
{
	struct dataset_sample *s = NULL;
	struct binding *x;
	int untake = 0, gone = 0;

	pthread_mutex_lock(&b->lock);
	x = find(b, ino);
	if (x) {
		x->nlookup -= n < x->nlookup ? n : x->nlookup;
		x->forgot += n;
		gone = maybe_unlink(b, x);
		if (gone)
			s = detach(x, &untake);
	}
	pthread_mutex_unlock(&b->lock);
	drop_sample(b, s, untake);
	if (gone)
		free(x);
}

int bindings_source(struct bindings *b, uint64_t ino, uint32_t *sample)
{
	struct binding *x;
	pthread_mutex_lock(&b->lock);
	x = find(b, ino);
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

/* Give back bindings nobody opened within expire_s. */
static size_t reap(struct bindings *b, struct dataset_sample **out, size_t max)
{
	double limit = now_mono() - b->expire_s;
	size_t n = 0;
	int untake = 0;

	while (n < max && b->uhead && b->uhead->created < limit) {
		struct binding *x = b->uhead;
		unlist(b, x);
		x->expired = 1;
		out[n] = detach(x, &untake);
		if (out[n])
			n++;
		b->expired++;
	}
	return n;
}

static void *reaper_main(void *arg)
{
	struct bindings *b = arg;
	struct dataset_sample *batch[REAP_BATCH];

	pthread_mutex_lock(&b->lock);
	while (!b->stop) {
		struct deadline d = deadline_in(REAP_EVERY_MS / 1000.0);
		cond_wait_until(&b->cond, &b->lock, &d);
		size_t n = reap(b, batch, REAP_BATCH);
		pthread_mutex_unlock(&b->lock);
		for (size_t i = 0; i < n; i++)
			dataset_echo_untake(b->ds, batch[i]);
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
	r = cond_init_monotonic(&b->cond); /* the reaper's timed wait */
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

void bindings_set_render(struct bindings *b, const struct bindings_render *r)
{
	b->render = *r;
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
	answer(unwait(b, NULL, NULL), -ESHUTDOWN, NULL); /* nor a waiting open */
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
			drop_sample(b, detach(x, &untake), untake);
			free(x);
		}
	}
	pthread_cond_destroy(&b->cond);
	pthread_mutex_destroy(&b->lock);
	free(b->table);
	free(b->cur);
	free(b);
}
