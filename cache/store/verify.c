/* verify.c - sample lookup by offset, whole-shard stream checksums and the
 * kept checked members for shards.c (see verify.h). */
#include "cache/store/verify.h"

#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <xxhash.h>

#include "common/lockcheck.h"
#include "common/util.h"
#include "fetch/format/index.h"

#define VERIFY_KEEP 32
#define VERIFY_KEEP_BYTES ((size_t)64 << 20)
/* Larger members are checked on every read instead of kept (each read
 * then costs the whole member: far beyond any image echofs can decode). */
#define VERIFY_KEEP_MAX VERIFY_KEEP_BYTES

struct kept {
	size_t sample; /* VERIFY_NONE: empty */
	uint8_t *buf;
	size_t len;
	uint64_t use;
};

struct verify {
	const struct index *ix;
	uint32_t *order; /* sample numbers by (shard, offset) */
	/* reach[k]: of order[first..k] of its shard, the sample reaching
	 * furthest, so overlapping members are found too. */
	uint32_t *reach;
	size_t *first; /* nshards + 1 starts into order */
	pthread_mutex_t lock;
	struct kept kept[VERIFY_KEEP];
	size_t kept_bytes;
	uint64_t clock;
};

static int by_offset(const void *a, const void *b, void *ud)
{
	const struct index *ix = ud;
	uint64_t x = ix->samples[*(const uint32_t *)a].offset;
	uint64_t y = ix->samples[*(const uint32_t *)b].offset;
	return x < y ? -1 : x > y;
}

static uint64_t end_of(const struct index *ix, uint32_t i)
{
	return ix->samples[i].offset + ix->samples[i].size;
}

/* Group by shard (counting sort), then sort each shard by offset (usually
 * already sorted: the scanner adds samples in archive order). */
static void build_order(struct verify *v)
{
	const struct index *ix = v->ix;
	size_t *at = xcalloc(ix->nshards + 1, sizeof(*at));

	for (size_t i = 0; i < ix->nsamples; i++)
		v->first[ix->samples[i].shard + 1]++;
	for (size_t s = 0; s < ix->nshards; s++)
		v->first[s + 1] += v->first[s];
	memcpy(at, v->first, (ix->nshards + 1) * sizeof(*at));
	for (size_t i = 0; i < ix->nsamples; i++)
		v->order[at[ix->samples[i].shard]++] = (uint32_t)i;
	free(at);
	for (size_t s = 0; s < ix->nshards; s++) {
		size_t a = v->first[s], n = v->first[s + 1] - a;
		bool sorted = true;
		for (size_t k = 1; k < n && sorted; k++)
			sorted = by_offset(&v->order[a + k - 1],
					   &v->order[a + k], (void *)ix) <= 0;
		if (!sorted)
			qsort_r(v->order + a, n, sizeof(*v->order), by_offset,
				(void *)ix);
	}
	for (size_t s = 0; s < ix->nshards; s++)
		for (size_t k = v->first[s]; k < v->first[s + 1]; k++)
			v->reach[k] =
				k > v->first[s] &&
						end_of(ix, v->reach[k - 1]) >
							end_of(ix, v->order[k])
					? v->reach[k - 1]
					: v->order[k];
}

int verify_open(const struct index *ix, struct verify **out)
{
	struct verify *v;

	*out = NULL;
	if (!ix->has_sums)
		return 0;
	if (ix->nsamples >= UINT32_MAX)
		return -EOVERFLOW; /* sample numbers are kept in 32 bits */
	v = xcalloc(1, sizeof(*v));
	v->ix = ix;
	v->order = xcalloc(ix->nsamples + 1, sizeof(*v->order));
	v->reach = xcalloc(ix->nsamples + 1, sizeof(*v->reach));
	v->first = xcalloc(ix->nshards + 1, sizeof(*v->first));
	for (size_t k = 0; k < VERIFY_KEEP; k++)
		v->kept[k].sample = VERIFY_NONE;
	pthread_mutex_init(&v->lock, NULL);
	build_order(v);
	*out = v;
	return 0;
}

void verify_free(struct verify *v)
{
	if (!v)
		return;
	for (size_t k = 0; k < VERIFY_KEEP; k++)
		free(v->kept[k].buf);
	pthread_mutex_destroy(&v->lock);
	free(v->order);
	free(v->reach);
	free(v->first);
	free(v);
}

size_t verify_find(const struct verify *v, uint32_t shard, uint64_t off,
		   uint64_t *end)
{
	const struct index *ix = v->ix;
	size_t lo = v->first[shard], hi = v->first[shard + 1], a = lo;

	/* First sample starting after off... */
	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;
		if (ix->samples[v->order[mid]].offset <= off)
			lo = mid + 1;
		else
			hi = mid;
	}
	*end = lo < v->first[shard + 1] ? ix->samples[v->order[lo]].offset
					: UINT64_MAX;
	/* ...and of those before it, the one reaching furthest. */
	if (lo > a && end_of(ix, v->reach[lo - 1]) > off) {
		*end = end_of(ix, v->reach[lo - 1]);
		return v->reach[lo - 1];
	}
	return VERIFY_NONE;
}

int verify_sample_ok(const struct verify *v, size_t i, const void *buf,
		     size_t len)
{
	const struct index_sample *s = &v->ix->samples[i];
	return len == s->size && XXH3_64bits(buf, len) == s->sum;
}

/* Bytes hashed per pread: the page cache copies them once more, cheap
 * beside the splice that follows, and a buffer of this size on the stack
 * keeps the check allocation-free. */
#define VERIFY_PIECE (16u << 10)

int verify_sample_fd(const struct verify *v, size_t i, int fd, uint64_t off,
		     size_t len)
{
	const struct index_sample *s = &v->ix->samples[i];
	uint8_t piece[VERIFY_PIECE];
	XXH3_state_t *st;
	size_t done = 0;
	int r = 0;

	if (len != s->size)
		return 0;
	st = xnonnull(XXH3_createState(), "an XXH3 state");
	XXH3_64bits_reset(st);
	while (done < len && r == 0) {
		size_t want = len - done < VERIFY_PIECE ? len - done : VERIFY_PIECE;
		ssize_t n = pread(fd, piece, want, (off_t)(off + done));

		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			r = n < 0 ? -errno : -EIO; /* 0: the file was shortened */
		else
			XXH3_64bits_update(st, piece, (size_t)n);
		done += n > 0 ? (size_t)n : 0;
	}
	if (r == 0)
		r = XXH3_64bits_digest(st) == s->sum;
	XXH3_freeState(st);
	return r;
}

int verify_copy(struct verify *v, size_t i, uint64_t rel, size_t len, void *dst)
{
	int r = -ENOENT;

	pthread_mutex_lock(&v->lock);
	for (size_t k = 0; k < VERIFY_KEEP; k++) {
		struct kept *e = &v->kept[k];
		if (e->sample != i || rel > e->len || len > e->len - rel)
			continue;
		memcpy(dst, e->buf + rel, len);
		e->use = ++v->clock;
		r = 0;
		break;
	}
	pthread_mutex_unlock(&v->lock);
	return r;
}

/* Lock held. The slot to reuse: an empty one, else the least recent. */
static struct kept *victim(struct verify *v, bool empty_ok)
{
	ASSERT_HELD(&v->lock);
	struct kept *best = NULL;
	for (size_t k = 0; k < VERIFY_KEEP; k++) {
		struct kept *e = &v->kept[k];
		if (e->sample == VERIFY_NONE && empty_ok)
			return e;
		if (e->sample != VERIFY_NONE && (!best || e->use < best->use))
			best = e;
	}
	return best;
}

static void drop(struct verify *v, struct kept *e)
{
	v->kept_bytes -= e->len;
	free(e->buf);
	*e = (struct kept){.sample = VERIFY_NONE};
}

void verify_keep(struct verify *v, size_t i, void *buf, size_t len)
{
	struct kept *e;

	if (len > VERIFY_KEEP_MAX) {
		free(buf);
		return;
	}
	pthread_mutex_lock(&v->lock);
	for (size_t k = 0; k < VERIFY_KEEP; k++)
		if (v->kept[k].sample == i)
			drop(v, &v->kept[k]); /* two readers checked it */
	while (v->kept_bytes + len > VERIFY_KEEP_BYTES)
		drop(v, victim(v, false)); /* kept_bytes > 0: one is full */
	e = victim(v, true);
	if (e->sample != VERIFY_NONE)
		drop(v, e);
	*e = (struct kept){i, buf, len, ++v->clock};
	v->kept_bytes += len;
	pthread_mutex_unlock(&v->lock);
}

struct verify_stream {
	XXH3_state_t *st;
};

struct verify_stream *verify_stream_new(void)
{
	struct verify_stream *vs = xcalloc(1, sizeof(*vs));

	vs->st = xnonnull(XXH3_createState(), "an XXH3 state");
	XXH3_64bits_reset(vs->st);
	return vs;
}

void verify_stream_feed(struct verify_stream *vs, const void *data, size_t len)
{
	XXH3_64bits_update(vs->st, data, len);
}

int verify_stream_ok(const struct verify *v, const struct verify_stream *vs,
		     uint32_t n)
{
	return XXH3_64bits_digest(vs->st) == v->ix->shards[n].sum;
}

void verify_stream_free(struct verify_stream *vs)
{
	if (!vs)
		return;
	XXH3_freeState(vs->st);
	free(vs);
}
