/* outputs.c - on preprocessing exact mounts, the transformed bytes of the
 * files looked up or read lately (see outputs.h). */
#include "cache/image/outputs.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cache/image/prep.h"
#include "cache/store/shards.h"
#include "common/log.h"
#include "common/util.h"
#include "fetch/format/index.h"

struct outputs {
	const struct index *ix;
	struct shards *sh;
	struct prep *prep;
	pthread_mutex_t lock; /* guards everything below */
	struct output *slot[OUTPUTS_SLOTS];
	uint64_t clock;
	struct outputs_stats st;
	uint8_t *failed; /* per sample: its image error is counted and logged */
};

struct outputs *outputs_new(const struct index *ix, struct shards *sh,
			    struct prep *prep)
{
	struct outputs *o = xcalloc(1, sizeof(*o));
	o->ix = ix;
	o->sh = sh;
	o->prep = prep;
	o->failed = xcalloc(ix->nsamples ? ix->nsamples : 1, 1);
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
	if (!o)
		return;
	for (size_t i = 0; i < OUTPUTS_SLOTS; i++)
		output_free(o->slot[i]);
	pthread_mutex_destroy(&o->lock);
	free(o->failed);
	free(o);
}

static struct output *find(struct outputs *o, uint32_t sample)
{
	for (size_t i = 0; i < OUTPUTS_SLOTS; i++)
		if (o->slot[i] && o->slot[i]->sample == sample)
			return o->slot[i];
	return NULL;
}

/* An image that cannot be preprocessed fails every read (the kernel retries
 * a failed read once more): it is counted and logged once. Lock held. */
static void count_rejected(struct outputs *o, uint32_t sample, const char *why)
{
	if (o->failed[sample])
		return;
	o->failed[sample] = 1;
	o->st.rejected++;
	log_counted("image", "sample %s: cannot preprocess: %s",
		    o->ix->samples[sample].key, why);
}

/* Read the sample and transform it (no lock held). A failure to transform
 * leaves its reason in why (a read failure leaves why empty: the reader
 * counts those). */
static int make(struct outputs *o, uint32_t sample, struct output **out,
		char *why, size_t whylen)
{
	const struct index_sample *s = &o->ix->samples[sample];
	uint8_t *raw = malloc(s->size ? (size_t)s->size : 1);
	struct output *x;
	ssize_t n;
	int r;

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
	r = prep_apply(o->prep, raw, (size_t)s->size, 0, &x->data, &x->len, why,
		       whylen);
	free(raw);
	if (r) {
		if (!why[0])
			snprintf(why, whylen, "%s", strerror(-r));
		free(x);
		return r;
	}
	*out = x;
	return 0;
}

/* Put x in the least recently used free slot; x stays uncached when every
 * slot is held. Caller holds the lock. */
static void insert(struct outputs *o, struct output *x)
{
	size_t victim = OUTPUTS_SLOTS;
	for (size_t i = 0; i < OUTPUTS_SLOTS; i++) {
		if (!o->slot[i]) {
			victim = i;
			break;
		}
		if (o->slot[i]->refs == 0 &&
		    (victim == OUTPUTS_SLOTS || o->slot[i]->used < o->slot[victim]->used))
			victim = i;
	}
	if (victim == OUTPUTS_SLOTS)
		return;
	if (o->slot[victim])
		output_free(o->slot[victim]);
	o->slot[victim] = x;
	x->cached = 1;
}

int outputs_get(struct outputs *o, uint32_t sample, struct output **out)
{
	struct output *x, *other;
	int r;

	pthread_mutex_lock(&o->lock);
	x = find(o, sample);
	if (x) {
		x->refs++;
		x->used = ++o->clock;
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
	x->refs++;
	x->used = ++o->clock;
	pthread_mutex_unlock(&o->lock);
	*out = x;
	return 0;
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
