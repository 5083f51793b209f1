/* visits.c - whole-sample echo for the samples layout (see visits.h). */
#include "fs/visits.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/lockcheck.h"
#include "common/log.h"
#include "common/util.h"
#include "fs/namespace.h"

#define NONE UINT32_MAX

#define BUCKETS 1024 /* readers' hash table */

/* A take waiting on a visit whose first take is parked in the pool. */
struct waiter {
	uint32_t file;
	const void *tag;
	dataset_echo_done_fn done;
	void *ud;
	struct waiter *next;
};

/* One reader's visit: the run of its takes for files of one key. */
struct visit {
	uint32_t reader, key;
	struct dataset_sample *s; /* the visit's take (its files get shares) */
	int taking;		  /* the first take is parked in the pool */
	int current;		  /* in the readers' table (not left behind) */
	struct waiter *waiters;
	struct visit *hnext;	   /* readers' hash chain */
	struct visit *prev, *next; /* every visit, least recently used first */
};

struct visits {
	struct dataset *ds;
	const struct namespace *ns;
	uint32_t nsamples; /* member numbers start here */
	uint32_t nkeys;
	uint32_t *file_key;  /* per file: its key */
	uint32_t *key_first; /* key k's files: files[key_first[k] ..
			      * key_first[k + 1]) */
	uint32_t *files;
	uint32_t *key_unit;  /* per key: the file whose member is pooled */
	uint32_t *key_cls;   /* per key: its echo class */
	uint32_t *unit_key;  /* per member: the key it is the unit of, or NONE */

	pthread_mutex_t lock;	   /* guards what follows */
	struct visit *by_reader[BUCKETS]; /* each reader's current visit */
	struct visit *head, *tail; /* every visit, least recently used first */
	size_t count;		   /* visits in that list */
};

/* The initiator of a visit's first take. */
struct first_take {
	struct visits *v;
	struct visit *x;
	dataset_echo_done_fn done;
	void *ud;
};

/* ---- building: keys and classes ---- */

static uint32_t read_no(const struct visits *v, uint32_t file)
{
	return v->ns->files[file].sample;
}

/* An open-addressing table of strings to dense ids, used twice: keys
 * (key and shard) and classes (label and extensions). */
struct ids {
	char **s;
	uint32_t *slot; /* id + 1, 0 empty */
	size_t n, cap, nslots;
};

static uint32_t ids_get(struct ids *t, char *s)
{
	size_t j;

	if (2 * (t->n + 1) > t->nslots) {
		size_t ns = t->nslots ? 2 * t->nslots : 1024;
		uint32_t *slot = xcalloc(ns, sizeof(*slot));
		for (size_t i = 0; i < t->n; i++) {
			j = hash64(t->s[i], strlen(t->s[i]), 0) & (ns - 1);
			while (slot[j])
				j = (j + 1) & (ns - 1);
			slot[j] = (uint32_t)i + 1;
		}
		free(t->slot);
		t->slot = slot;
		t->nslots = ns;
	}
	for (j = hash64(s, strlen(s), 0) & (t->nslots - 1); t->slot[j];
	     j = (j + 1) & (t->nslots - 1))
		if (strcmp(t->s[t->slot[j] - 1], s) == 0) {
			free(s);
			return t->slot[j] - 1;
		}
	if (t->n == t->cap) {
		t->cap = t->cap ? 2 * t->cap : 1024;
		t->s = xrealloc(t->s, t->cap * sizeof(*t->s));
	}
	t->s[t->n] = s;
	t->slot[j] = (uint32_t)t->n + 1;
	return (uint32_t)t->n++;
}

static void ids_free(struct ids *t)
{
	for (size_t i = 0; i < t->n; i++)
		free(t->s[i]);
	free(t->s);
	free(t->slot);
}

/* Every file into its key ("<shard>/<key>": two shards may hold one key)
 * and the keys' file runs. */
static void group_keys(struct visits *v)
{
	size_t nfiles = v->ns->nfiles;
	struct ids keys = {0};
	uint32_t *fill;

	v->file_key = xmalloc((nfiles + 1) * sizeof(uint32_t));
	for (size_t f = 0; f < nfiles; f++) {
		uint32_t r = read_no(v, (uint32_t)f);
		const char *key = dataset_key(v->ds, r);
		char *s = xmalloc(strlen(key) + 12);
		sprintf(s, "%u/%s", dataset_group(v->ds, r), key);
		v->file_key[f] = ids_get(&keys, s);
	}
	v->nkeys = (uint32_t)keys.n;
	ids_free(&keys);
	v->key_first = xcalloc(v->nkeys + 2, sizeof(uint32_t));
	v->files = xmalloc((nfiles + 1) * sizeof(uint32_t));
	for (size_t f = 0; f < nfiles; f++)
		v->key_first[v->file_key[f] + 1]++;
	for (uint32_t k = 0; k < v->nkeys; k++)
		v->key_first[k + 1] += v->key_first[k];
	fill = xmalloc((v->nkeys + 1) * sizeof(uint32_t));
	memcpy(fill, v->key_first, v->nkeys * sizeof(uint32_t));
	for (size_t f = 0; f < nfiles; f++)
		v->files[fill[v->file_key[f]]++] = (uint32_t)f;
	free(fill);
}

static int str_cmp(const void *a, const void *b)
{
	return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* "<label>/<ext>/<ext>..." of key k, the extensions sorted: keys with one
 * such string can stand in for each other. */
static char *class_name(const struct visits *v, uint32_t k)
{
	uint32_t a = v->key_first[k], n = v->key_first[k + 1] - a;
	const char **ext = xmalloc((n + 1) * sizeof(*ext));
	const char *label = "";
	size_t len = 1;
	char *s, *p;

	for (uint32_t i = 0; i < n; i++) {
		uint32_t r = read_no(v, v->files[a + i]);
		ext[i] = dataset_ext(v->ds, r);
		len += strlen(ext[i]) + 1;
		if (r < v->nsamples)
			label = dataset_label(v->ds, r);
	}
	qsort(ext, n, sizeof(*ext), str_cmp);
	p = s = xmalloc(len + strlen(label) + 1);
	p += sprintf(p, "%s", label);
	for (uint32_t i = 0; i < n; i++)
		p += sprintf(p, "/%s", ext[i]);
	free(ext);
	return s;
}

/* The member number (index of dataset members) a file reads: its own, or
 * for a sample's image the member at the same place. */
static uint32_t member_of(const struct visits *v, const uint32_t *img_member,
			  uint32_t file)
{
	uint32_t r = read_no(v, file);
	return r >= v->nsamples ? r - v->nsamples : img_member[r];
}

/* Each key's unit (its largest file's member), class, and the pool's
 * classes of the members: the units' classes, DATASET_NO_CLASS else. */
static uint32_t *class_units(struct visits *v, uint32_t *ncls)
{
	size_t nm = dataset_nmembers(v->ds);
	uint32_t *as = xmalloc((nm + 1) * sizeof(*as));
	uint32_t *img = xmalloc((v->nsamples + 1) * sizeof(*img));
	uint32_t *class_of = xmalloc((nm + 1) * sizeof(*class_of));
	struct ids cls = {0};

	dataset_member_samples(v->ds, as);
	for (size_t i = 0; i < v->nsamples; i++)
		img[i] = NONE;
	for (size_t j = 0; j < nm; j++) {
		class_of[j] = DATASET_NO_CLASS;
		v->unit_key[j] = NONE;
		if (as[j] < v->nsamples)
			img[as[j]] = (uint32_t)j;
	}
	for (uint32_t k = 0; k < v->nkeys; k++) {
		uint32_t best = v->files[v->key_first[k]], m;
		for (uint32_t i = v->key_first[k]; i < v->key_first[k + 1];
		     i++) {
			uint32_t f = v->files[i];
			if (dataset_size(v->ds, read_no(v, f)) >
			    dataset_size(v->ds, read_no(v, best)))
				best = f;
		}
		v->key_unit[k] = best;
		v->key_cls[k] = ids_get(&cls, class_name(v, k));
		m = member_of(v, img, best);
		if (m != NONE) {
			class_of[m] = v->key_cls[k];
			v->unit_key[m] = k;
		}
	}
	*ncls = (uint32_t)cls.n;
	ids_free(&cls);
	free(as);
	free(img);
	return class_of;
}

int visits_start(struct dataset *ds, const struct namespace *ns,
		 struct visits **out, char *err, size_t errlen)
{
	struct visits *v = xcalloc(1, sizeof(*v));
	uint32_t *class_of, ncls = 0;
	int r;

	*out = NULL;
	v->ds = ds;
	v->ns = ns;
	v->nsamples = (uint32_t)dataset_nsamples(ds);
	pthread_mutex_init(&v->lock, NULL);
	group_keys(v);
	v->key_unit = xmalloc((v->nkeys + 1) * sizeof(uint32_t));
	v->key_cls = xmalloc((v->nkeys + 1) * sizeof(uint32_t));
	v->unit_key = xmalloc((dataset_nmembers(ds) + 1) * sizeof(uint32_t));
	class_of = class_units(v, &ncls);
	r = dataset_echo_start_members(ds, class_of, ncls ? ncls : 1, err,
				       errlen);
	free(class_of);
	if (r) {
		visits_free(v);
		return r;
	}
	log_info("whole-sample echo: %u keys in %u echo classes", v->nkeys,
		 ncls);
	*out = v;
	return 0;
}

/* ---- visits ---- */

static size_t bucket(uint32_t reader)
{
	return (size_t)((reader * 0x9E3779B1u) >> 22) & (BUCKETS - 1);
}

static struct visit *find(const struct visits *v, uint32_t reader)
{
	struct visit *x = v->by_reader[bucket(reader)];
	while (x && x->reader != reader)
		x = x->hnext;
	return x;
}

/* Take x out of the readers' table (it stays in the list). */
static void leave(struct visits *v, struct visit *x)
{
	ASSERT_HELD(&v->lock);
	struct visit **pp = &v->by_reader[bucket(x->reader)];

	while (*pp && *pp != x)
		pp = &(*pp)->hnext;
	if (*pp)
		*pp = x->hnext;
	x->hnext = NULL;
	x->current = 0;
}

static void list_remove(struct visits *v, struct visit *x)
{
	if (x->prev)
		x->prev->next = x->next;
	else
		v->head = x->next;
	if (x->next)
		x->next->prev = x->prev;
	else
		v->tail = x->prev;
	x->prev = x->next = NULL;
	v->count--;
}

static void list_append(struct visits *v, struct visit *x)
{
	x->next = NULL;
	x->prev = v->tail;
	if (v->tail)
		v->tail->next = x;
	else
		v->head = x;
	v->tail = x;
	v->count++;
}

/* End visit x (not taking): freed, its take returned for the caller to
 * give back unlocked (dataset_echo_untake: undone if none of its files was
 * served and no share is left). */
static struct dataset_sample *end_visit(struct visits *v, struct visit *x)
{
	ASSERT_HELD(&v->lock);
	struct dataset_sample *s = x->s;

	if (x->current)
		leave(v, x);
	list_remove(v, x);
	free(x);
	return s;
}

static void drop_all(struct visits *v, struct dataset_sample **drop, size_t n)
{
	for (size_t i = 0; i < n; i++)
		if (drop[i])
			dataset_echo_untake(v->ds, drop[i]);
}

/* Reader's visit of key k, begun (lock held): it is the reader's current
 * one from now on. The least recently used visit beyond VISITS_MAX is
 * ended (its take to *drop). */
static struct visit *begin_visit(struct visits *v, uint32_t reader,
				 uint32_t k, struct dataset_sample **drop)
{
	ASSERT_HELD(&v->lock);
	struct visit *x = xcalloc(1, sizeof(*x));
	size_t b = bucket(reader);

	*drop = NULL;
	if (v->count >= VISITS_MAX) {
		struct visit *old = v->head;
		while (old && old->taking)
			old = old->next;
		if (old)
			*drop = end_visit(v, old);
	}
	x->reader = reader;
	x->key = k;
	x->taking = 1;
	x->current = 1;
	x->hnext = v->by_reader[b];
	v->by_reader[b] = x;
	list_append(v, x);
	return x;
}

/* The answer to visit x's first take (err, s): x holds s, or ends (err);
 * a visit its reader left meanwhile ends too (its take to *drop).
 * Returns its waiters, for the caller to answer unlocked. */
static struct waiter *settle(struct visits *v, struct visit *x, int err,
			     struct dataset_sample *s,
			     struct dataset_sample **drop)
{
	ASSERT_HELD(&v->lock);
	struct waiter *w = x->waiters;

	x->waiters = NULL;
	x->taking = 0;
	x->s = err ? NULL : s;
	*drop = NULL;
	if (err || !x->current)
		*drop = end_visit(v, x);
	return w;
}

/* Answer waiters w of a visit whose first take ended with err, with the
 * shares made for them (err 0). */
static void answer(struct visits *v, struct waiter *w, uint32_t reader,
		   int err, struct dataset_sample **shares)
{
	for (size_t i = 0; w; i++) {
		struct waiter *n = w->next;
		struct dataset_sample *got = NULL;
		int r = err;
		if (err == 0) {
			got = shares[i];
		} else if (err == -EINTR) {
			/* The first taker's request was interrupted, not
			 * theirs: each takes anew. */
			r = visits_take_async(v, w->file, reader, w->tag,
					      w->done, w->ud, &got);
		}
		if (r != -EINPROGRESS)
			w->done(w->ud, r, r ? NULL : got);
		free(w);
		w = n;
	}
}

/* Settle visit x's first take; the initiator's share in *mine (err 0).
 * Everything is answered unlocked. */
static void finish_first(struct visits *v, struct visit *x, int err,
			 struct dataset_sample *s, struct dataset_sample **mine)
{
	struct dataset_sample *drop = NULL, **shares = NULL;
	uint32_t reader = x->reader;
	struct waiter *w;
	size_t n = 0;

	pthread_mutex_lock(&v->lock);
	if (err == 0) {
		for (struct waiter *y = x->waiters; y; y = y->next)
			n++;
		shares = xmalloc((n + 1) * sizeof(*shares));
		for (size_t i = 0; i < n; i++)
			shares[i] = dataset_echo_share(v->ds, s);
		*mine = dataset_echo_share(v->ds, s);
	}
	w = settle(v, x, err, s, &drop); /* may free x */
	pthread_mutex_unlock(&v->lock);
	answer(v, w, reader, err, shares);
	free(shares);
	drop_all(v, &drop, 1);
}

static void first_taken(void *ud, int err, struct dataset_sample *s)
{
	struct first_take *ft = ud;
	struct dataset_sample *mine = NULL;

	finish_first(ft->v, ft->x, err, s, &mine);
	ft->done(ft->ud, err, err ? NULL : mine);
	free(ft);
}

/* Join visit x (lock held): a share now (0), or a waiter (-EINPROGRESS). */
static int join(struct visits *v, struct visit *x, uint32_t file,
		const void *tag, dataset_echo_done_fn done, void *ud,
		struct dataset_sample **out)
{
	ASSERT_HELD(&v->lock);
	struct waiter *w;

	list_remove(v, x); /* most recently used */
	list_append(v, x);
	if (x->s) {
		*out = dataset_echo_share(v->ds, x->s);
		return 0;
	}
	w = xmalloc(sizeof(*w));
	*w = (struct waiter){file, tag, done, ud, x->waiters};
	x->waiters = w;
	return -EINPROGRESS;
}

int visits_take_async(struct visits *v, uint32_t file, uint32_t reader,
		      const void *tag, dataset_echo_done_fn done, void *ud,
		      struct dataset_sample **out)
{
	struct dataset_sample *drop[2] = {NULL, NULL}, *s = NULL;
	struct first_take *ft;
	struct visit *x;
	uint32_t k;
	int r;

	*out = NULL;
	if (file >= v->ns->nfiles)
		return -EINVAL;
	k = v->file_key[file];
	pthread_mutex_lock(&v->lock);
	x = find(v, reader);
	if (x && x->key == k) {
		/* Another file of the key this reader is on, or the same one
		 * again: the visit's substitute. */
		r = join(v, x, file, tag, done, ud, out);
		pthread_mutex_unlock(&v->lock);
		return r;
	}
	if (x) {
		/* The reader moved on to another key: its visit ends (once
		 * its first take is answered, if that is still parked). */
		leave(v, x);
		if (!x->taking)
			drop[0] = end_visit(v, x);
	}
	x = begin_visit(v, reader, k, &drop[1]);
	pthread_mutex_unlock(&v->lock);
	drop_all(v, drop, 2);
	ft = xmalloc(sizeof(*ft));
	*ft = (struct first_take){v, x, done, ud};
	r = dataset_echo_take_async(v->ds, v->key_cls[k], tag, first_taken,
				    ft, &s);
	if (r == -EINPROGRESS)
		return r; /* ft belongs to the pool until first_taken */
	free(ft);
	finish_first(v, x, r, s, out);
	return r;
}

/* ---- serving, cancelling ---- */

uint32_t visits_unit(struct visits *v, uint32_t reader, uint32_t file)
{
	uint32_t unit = VISITS_NONE;
	struct visit *x;

	if (file >= v->ns->nfiles)
		return unit;
	pthread_mutex_lock(&v->lock);
	x = find(v, reader);
	if (x && x->key == v->file_key[file] && x->s)
		unit = dataset_sample_id(x->s);
	pthread_mutex_unlock(&v->lock);
	return unit;
}

uint32_t visits_member(const struct visits *v, uint32_t file,
		       const struct dataset_sample *s)
{
	uint32_t id = dataset_sample_id(s), k, r = read_no(v, file);
	const char *ext = dataset_ext(v->ds, r);

	k = id >= v->nsamples ? v->unit_key[id - v->nsamples] : NONE;
	if (k == NONE)
		return r; /* cannot happen: the pool streams units only */
	for (uint32_t i = v->key_first[k]; i < v->key_first[k + 1]; i++) {
		uint32_t f = v->files[i];
		if (strcmp(dataset_ext(v->ds, read_no(v, f)), ext) == 0)
			return f == v->key_unit[k] ? VISITS_HELD
						   : read_no(v, f);
	}
	/* Cannot happen either: a class's keys have the same extensions. */
	log_counted("visit_member", "no %s member in echoed key %s", ext,
		    dataset_key(v->ds, id));
	return r;
}

/* Take the waiters named tag (all with tag NULL) off every visit. */
static struct waiter *unwait(struct visits *v, const void *tag)
{
	struct waiter *out = NULL;

	pthread_mutex_lock(&v->lock);
	for (struct visit *x = v->head; x; x = x->next) {
		struct waiter **pw = &x->waiters;
		while (*pw) {
			struct waiter *w = *pw;
			if (tag && w->tag != tag) {
				pw = &w->next;
				continue;
			}
			*pw = w->next;
			w->next = out;
			out = w;
		}
	}
	pthread_mutex_unlock(&v->lock);
	return out;
}

static int fail_all(struct waiter *w, int err)
{
	int n = 0;

	for (struct waiter *x; w; w = x, n++) {
		x = w->next;
		w->done(w->ud, err, NULL);
		free(w);
	}
	return n;
}

int visits_cancel(struct visits *v, const void *tag)
{
	if (!v || !tag)
		return 0;
	return fail_all(unwait(v, tag), -EINTR) > 0;
}

void visits_cancel_all(struct visits *v)
{
	if (v)
		IGNORE_RESULT(fail_all(unwait(v, NULL), -ESHUTDOWN));
}

void visits_free(struct visits *v)
{
	if (!v)
		return;
	/* A visit's first take parked in the pool holds v (first_taken):
	 * answered now, it ends its visit if its reader left it and answers
	 * the visit's waiters, rather than later, into freed memory. The pool
	 * serves the visits only (visits_start started it). */
	dataset_echo_cancel_all(v->ds);
	visits_cancel_all(v);
	pthread_mutex_lock(&v->lock);
	while (v->head) {
		struct dataset_sample *s = end_visit(v, v->head);
		pthread_mutex_unlock(&v->lock);
		if (s)
			dataset_echo_untake(v->ds, s);
		pthread_mutex_lock(&v->lock);
	}
	pthread_mutex_unlock(&v->lock);
	pthread_mutex_destroy(&v->lock);
	free(v->file_key);
	free(v->key_first);
	free(v->files);
	free(v->key_unit);
	free(v->key_cls);
	free(v->unit_key);
	free(v);
}
