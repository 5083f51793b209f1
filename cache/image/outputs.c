/* outputs.c - on preprocessing exact mounts, the transformed bytes of the
 * files looked up or read lately (see outputs.h). */
#include "cache/image/outputs.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cache/image/prep.h"
#include "cache/image/prepared.h"
#include "cache/store/shards.h"
#include "common/lockcheck.h"
#include "common/log.h"
#include "common/util.h"
#include "fetch/format/index.h"

struct outputs {
	const struct index *ix;
	struct shards *sh;
	struct prep *prep;
	struct prepared *tier; /* or NULL; set before any get */
	pthread_mutex_t lock;  /* guards everything below */
	struct list_node lru;  /* cached outputs, least recently used first */
	size_t ncached;
	struct outputs_stats st;
	uint8_t *failed; /* per sample: its image error is counted and logged */
};

void outputs_set_prepared(struct outputs *o, struct prepared *tier)
{
	if (o)
		o->tier = tier;
}

/* The output of raw: through the prepared stage when there is a tier
 * (exact mounts draw rand 0: the centre crop, the bytes of a decode),
 * else the whole pipeline at once. */
static int transform(struct outputs *o, const uint8_t *raw, size_t len,
		     struct output *x, char *why, size_t whylen)
{
	uint8_t *pb;
	size_t pl;

	if (!o->tier)
		return prep_apply(o->prep, raw, len, 0, &x->data, &x->len, why,
				  whylen);
	/* Named, so that a corrupt prepared entry's line says whose. */
	const char *key = index_key(o->ix, &o->ix->samples[x->sample]);
	int r = prepared_take_named(o->tier, o->prep, key, raw, len, &pb, &pl,
				    why, whylen);
	if (r == 0) /* not kept: made in one step, as without the tier */
		return prep_apply(o->prep, raw, len, 0, &x->data, &x->len, why,
				  whylen);
	if (r < 0)
		return r;
	r = prep_augment(o->prep, pb, pl, 0, &x->data, &x->len, why, whylen);
	free(pb);
	return r;
}

struct outputs *outputs_new(const struct index *ix, struct shards *sh,
			    struct prep *prep)
{
	struct outputs *o = xcalloc(1, sizeof(*o));
	o->ix = ix;
	o->sh = sh;
	o->prep = prep;
	o->failed = xcalloc(ix->nsamples ? ix->nsamples : 1, 1);
	list_init(&o->lru);
	pthread_mutex_init(&o->lock, NULL);
	return o;
}

static void output_free(struct output *x)
{
	if (x) {
		free(x->data);
		free(x);
	}
}

void outputs_free(struct outputs *o)
{
	struct list_node *n;
	if (!o)
		return;
	while ((n = list_pop_front(&o->lru)) != NULL)
		output_free(list_entry(n, struct output, lru));
	pthread_mutex_destroy(&o->lock);
	free(o->failed);
	free(o);
}

static struct output *find(struct outputs *o, uint32_t sample)
{
	list_for_each (n, &o->lru) {
		struct output *x = list_entry(n, struct output, lru);
		if (x->sample == sample)
			return x;
	}
	return NULL;
}

/* An image that cannot be preprocessed fails every read (the kernel retries
 * a failed read once more): it is counted and logged once. Lock held. */
static void count_rejected(struct outputs *o, uint32_t sample, const char *why)
{
	ASSERT_HELD(&o->lock);
	if (o->failed[sample])
		return;
	o->failed[sample] = 1;
	o->st.rejected++;
	log_counted("image", "sample %s: cannot preprocess: %s",
		    index_key(o->ix, &o->ix->samples[sample]), why);
}

/* Read the sample and transform it (no lock held). A bad image
 * (transform_image_fault), or a sample too large to read, leaves its reason in
 * why; any other failure (the read failed or timed out, memory) leaves why
 * empty: the reader counts those, and the next get tries again. */
static int make(struct outputs *o, uint32_t sample, struct output **out,
		char *why, size_t whylen)
{
	const struct index_sample *s = &o->ix->samples[sample];
	uint8_t *raw;
	struct output *x;
	ssize_t n;
	int r;

	if (s->size > OUTPUTS_SAMPLE_MAX) {
		snprintf(why, whylen, "%llu bytes, above the %llu MB cap",
			 (unsigned long long)s->size,
			 (unsigned long long)(OUTPUTS_SAMPLE_MAX >> 20));
		return -EFBIG;
	}
	raw = malloc(s->size ? (size_t)s->size : 1);
	why[0] = '\0';
	if (!raw)
		return -ENOMEM;
	n = shards_read(o->sh, s->shard, s->offset, (size_t)s->size, raw);
	if (n != (ssize_t)s->size) {
		free(raw);
		return n < 0 ? (int)n : -EIO;
	}
	x = xcalloc(1, sizeof(*x));
	x->sample = sample;
	list_init(&x->lru);
	r = transform(o, raw, (size_t)s->size, x, why, whylen);
	free(raw);
	if (r) {
		if (!transform_image_fault(r))
			why[0] = '\0';
		else if (!why[0])
			snprintf(why, whylen, "%s", strerror(-r));
		free(x);
		return r;
	}
	*out = x;
	return 0;
}

/* Cache x, evicting the least recently used output nobody holds when all
 * OUTPUTS_SLOTS are taken; x stays uncached when every one is held.
 * Caller holds the lock. */
static void insert(struct outputs *o, struct output *x)
{
	ASSERT_HELD(&o->lock);
	if (o->ncached >= OUTPUTS_SLOTS) {
		struct output *victim = NULL;
		list_for_each (n, &o->lru) {
			struct output *y = list_entry(n, struct output, lru);
			if (y->refs == 0) {
				victim = y;
				break;
			}
		}
		if (!victim)
			return;
		list_del(&victim->lru);
		o->ncached--;
		output_free(victim);
	}
	list_push_back(&o->lru, &x->lru);
	o->ncached++;
	x->cached = 1;
}

/* Caller holds the lock. A use: x becomes the most recently used. */
static void hold(struct outputs *o, struct output *x)
{
	ASSERT_HELD(&o->lock);
	x->refs++;
	if (x->cached)
		list_move_back(&o->lru, &x->lru);
}

int outputs_get(struct outputs *o, uint32_t sample, struct output **out)
{
	struct output *x, *other;
	int r;

	pthread_mutex_lock(&o->lock);
	x = find(o, sample);
	if (x) {
		hold(o, x);
		o->st.hits++;
		pthread_mutex_unlock(&o->lock);
		*out = x;
		return 0;
	}
	o->st.misses++;
	pthread_mutex_unlock(&o->lock);

	char why[200];
	r = make(o, sample, &x, why, sizeof(why));
	pthread_mutex_lock(&o->lock);
	if (r) {
		if (why[0])
			count_rejected(o, sample, why);
		pthread_mutex_unlock(&o->lock);
		return r;
	}
	other = find(o, sample); /* made twice at once: keep the first */
	if (other) {
		output_free(x);
		x = other;
	} else {
		insert(o, x);
	}
	hold(o, x);
	pthread_mutex_unlock(&o->lock);
	*out = x;
	return 0;
}

int outputs_bad(struct outputs *o, uint32_t sample)
{
	int bad;

	if (!o || sample >= o->ix->nsamples)
		return 0;
	pthread_mutex_lock(&o->lock);
	bad = o->failed[sample];
	pthread_mutex_unlock(&o->lock);
	return bad;
}

void outputs_put(struct outputs *o, struct output *x)
{
	int gone;
	pthread_mutex_lock(&o->lock);
	gone = --x->refs == 0 && !x->cached;
	pthread_mutex_unlock(&o->lock);
	if (gone)
		output_free(x);
}

void outputs_get_stats(struct outputs *o, struct outputs_stats *out)
{
	memset(out, 0, sizeof(*out));
	if (!o)
		return;
	pthread_mutex_lock(&o->lock);
	*out = o->st;
	pthread_mutex_unlock(&o->lock);
}
