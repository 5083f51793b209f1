/* prepared.c - the prepared-sample tier over a store instance (see
 * prepared.h). */
#include "cache/image/prepared.h"

#include "cache/image/prep.h"
#include "cache/image/resample.h"
#include "cache/store/store.h"
#include "common/log.h"
#include "common/util.h"

/* Admission rescans of the tier at most this often (store_set_lazy). */
#define PREPARED_RESCAN_S 1.0

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

struct prepared {
	struct store *st;
	char url[512]; /* the recipe, the key's url part */
	uint64_t hits, misses, writes, corrupt; /* atomic */
};

int prepared_applies(const struct transform_opts *o)
{
	return o->size && (o->format == TF_JPEG || o->format == TF_PPM);
}

/* The recipe: what the prepared bytes depend on besides the sample. */
static void recipe(const struct transform_opts *o, char *buf, size_t len)
{
	char libs[256];
	transform_versions(libs, sizeof(libs));
	snprintf(buf, len,
		 "echofs-prepared://v1/s%u-c%u%s-mp%" PRIu64 "-r%d-%016" PRIx64,
		 o->size, o->crop, transform_prepared_is_cut(o) ? "-cut" : "",
		 o->max_pixels, RESAMPLE_VERSION,
		 hash64(libs, strlen(libs), 0));
}

int prepared_open(const char *cache_dir, uint64_t cap,
		  const struct transform_opts *opts, struct prepared **out,
		  char *err, size_t errlen)
{
	char dir[4096], serr[256];
	struct prepared *p;

	*out = NULL;
	if (snprintf(dir, sizeof(dir), "%s/prepared", cache_dir) >=
	    (int)sizeof(dir)) {
		snprintf(err, errlen, "cache_dir too long");
		return -ENAMETOOLONG;
	}
	p = xcalloc(1, sizeof(*p));
	int r = store_open(dir, cap, &p->st, serr, sizeof(serr));
	if (r) {
		snprintf(err, errlen, "%s", serr);
		free(p);
		return r;
	}
	/* Another mount writing the same sample: skip ours, never wait. */
	store_set_wait(p->st, 0);
	/* Many small entries, each checked at its first read: rescan at most
	 * every PREPARED_RESCAN_S and commit without fsync (store.h). */
	store_set_lazy(p->st, PREPARED_RESCAN_S);
	recipe(opts, p->url, sizeof(p->url));
	*out = p;
	return 0;
}

void prepared_close(struct prepared *p)
{
	if (!p)
		return;
	store_close(p->st);
	free(p);
}

static void etag_of(const void *in, size_t len, char *etag, size_t n)
{
	snprintf(etag, n, "%016" PRIx64 "-%zu", (uint64_t)XXH3_64bits(in, len),
		 len);
}

/* The entry's bytes into a new buffer: 1 read and intact, 0 absent, -1
 * corrupt (dropped). */
static int lookup(struct prepared *p, const char *etag, size_t n,
		  uint8_t **out)
{
	struct store_entry *e = store_get(p->st, p->url, etag, n);
	if (!e)
		return 0;
	uint8_t *b = malloc(n);
	ssize_t r = b ? store_pread(e, b, n, 0) : -ENOMEM;
	if (r == (ssize_t)n) {
		store_put(e);
		*out = b;
		return 1;
	}
	free(b);
	if (r == -EBADMSG || r >= 0) {
		store_drop(e);
		store_put(e);
		return -1;
	}
	store_put(e);
	return 0;
}

/* Writes buf as the entry; failures only logged (the tier is a cache). */
static void save(struct prepared *p, const char *etag, const uint8_t *buf,
		 size_t n)
{
	struct store_writer *w;
	struct store_entry *e;
	int r = store_begin(p->st, p->url, etag, n, &w);
	if (r) {
		if (r != -EEXIST && r != -EBUSY)
			log_debug("prepared sample not kept: %s", strerror(-r));
		return;
	}
	r = store_write(w, buf, n);
	if (r) {
		store_abort(w);
		log_debug("prepared sample not kept: %s", strerror(-r));
		return;
	}
	if (store_commit(w, &e) == 0) {
		store_put(e);
		__atomic_add_fetch(&p->writes, 1, __ATOMIC_RELAXED);
	}
}

int prepared_make(struct prepared *p, struct prep *prep, const void *in,
		  size_t len, uint8_t **out, size_t *outlen, char *why,
		  size_t whylen)
{
	char etag[64];
	ssize_t n = prep_prepared_len(prep, in, len);

	if (n < 0) /* unusable header: prep_prepare says why */
		return prep_prepare(prep, in, len, out, outlen, why, whylen);
	etag_of(in, len, etag, sizeof(etag));
	int hit = lookup(p, etag, (size_t)n, out);
	if (hit > 0) {
		__atomic_add_fetch(&p->hits, 1, __ATOMIC_RELAXED);
		*outlen = (size_t)n;
		return 0;
	}
	if (hit < 0) {
		__atomic_add_fetch(&p->corrupt, 1, __ATOMIC_RELAXED);
		log_warn("a prepared sample was corrupt: dropped, made again");
	}
	__atomic_add_fetch(&p->misses, 1, __ATOMIC_RELAXED);
	int r = prep_prepare(prep, in, len, out, outlen, why, whylen);
	if (r == 0 && *outlen == (size_t)n)
		save(p, etag, *out, *outlen);
	return r;
}

void prepared_get_stats(struct prepared *p, struct prepared_stats *out)
{
	struct store_stats s;

	memset(out, 0, sizeof(*out));
	if (!p)
		return;
	out->hits = __atomic_load_n(&p->hits, __ATOMIC_RELAXED);
	out->misses = __atomic_load_n(&p->misses, __ATOMIC_RELAXED);
	out->writes = __atomic_load_n(&p->writes, __ATOMIC_RELAXED);
	out->corrupt = __atomic_load_n(&p->corrupt, __ATOMIC_RELAXED);
	store_get_stats(p->st, &s);
	out->bytes = s.bytes;
	out->entries = s.entries;
	out->evictions = s.evictions;
}
