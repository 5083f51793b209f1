/* bucket.c - the registry of object-store backends and the set of them a
 * source opens (see bucket.h). */
#include "fetch/net/bucket.h"

#include "common/util.h"
#include "fetch/net/scheme.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Each backend's file defines its ops; registering one is a line here. The
 * first is the one endpoint= and no_sign= open when no URL names any. */
extern const struct bucket_ops bucket_s3, bucket_gs;

static const struct bucket_ops *const registry[] = {&bucket_s3, &bucket_gs};

#define NREG (sizeof(registry) / sizeof(*registry))

struct buckets {
	void *b[NREG]; /* open backends by registry slot, or NULL */
	const struct http_auth *hooks;
};

const struct bucket_ops *bucket_at(size_t i)
{
	return i < NREG ? registry[i] : NULL;
}

const struct bucket_ops *bucket_of(const char *url)
{
	for (size_t i = 0; i < NREG; i++)
		if (fetch_has_scheme(url, registry[i]->scheme))
			return registry[i];
	return NULL;
}

int bucket_is_listing(const char *source)
{
	const struct bucket_ops *ops = bucket_of(source);

	return ops && ops->is_listing(source);
}

int bucket_list_shards(struct http *h, const char *source, size_t max,
		       struct shardlist *out, char *err, size_t errlen)
{
	const struct bucket_ops *ops = bucket_of(source);

	if (!ops || !ops->is_listing(source)) {
		snprintf(err, errlen, "not a bucket listing");
		return -EINVAL;
	}
	return ops->list(h, source, max, out, err, errlen);
}

/* Whether slot i is needed by urls (or a list file among them). */
static int needed(size_t i, const char *const *urls, size_t n)
{
	for (size_t u = 0; u < n; u++)
		if (urls[u] && fetch_source_has(urls[u], registry[i]->scheme))
			return 1;
	return 0;
}

/* Which slots to open into want[]; returns how many. */
static size_t choose(const struct bucket_conf *c, const char *const *urls,
		     size_t n, int want[NREG])
{
	size_t k = 0;

	for (size_t i = 0; i < NREG; i++) {
		want[i] = needed(i, urls, n) || registry[i]->takes(c);
		k += (size_t)want[i];
	}
	if (k == 0 && (c->endpoint || c->no_sign)) {
		want[0] = 1;
		k = 1;
	}
	return k;
}

int buckets_open(const struct bucket_conf *c, const char *const *urls, size_t n,
		 struct buckets **out, char *err, size_t errlen)
{
	struct buckets *b = xcalloc(1, sizeof(*b));
	int want[NREG];
	int r;

	*out = NULL;
	choose(c, urls, n, want);
	/* chained so the last registered sees a URL first */
	for (size_t i = 0; i < NREG; i++) {
		if (!want[i])
			continue;
		r = registry[i]->open(c, &b->b[i], err, errlen);
		if (r) {
			buckets_free(b);
			return r;
		}
		b->hooks = registry[i]->hooks(b->b[i], b->hooks);
	}
	*out = b;
	return 0;
}

void buckets_free(struct buckets *b)
{
	if (!b)
		return;
	for (size_t i = 0; i < NREG; i++)
		registry[i]->free(b->b[i]);
	free(b);
}

const struct http_auth *buckets_hooks(struct buckets *b)
{
	return b ? b->hooks : NULL;
}

void buckets_ready(struct buckets *b, struct http *h, const char *const *urls,
		   size_t n)
{
	for (size_t i = 0; b && i < NREG; i++)
		for (size_t u = 0; b->b[i] && registry[i]->ready && u < n; u++)
			if (urls[u])
				registry[i]->ready(b->b[i], h, urls[u]);
}

void buckets_explain(struct buckets *b, char *err, size_t errlen)
{
	char why[400];
	size_t len;

	for (size_t i = 0; b && i < NREG; i++) {
		if (!b->b[i] ||
		    !registry[i]->last_error(b->b[i], why, sizeof(why))[0] ||
		    strstr(err, why))
			continue;
		len = strlen(err);
		snprintf(err + len, errlen - len, " (%s)", why);
	}
}
