/* sums.c - XXH3-64 of a streaming shard and of each of its members (see
 * sums.h). Members arrive in archive order and never overlap, so one
 * running hash state follows the member in progress. */
#include "fetch/format/sums.h"

#include <errno.h>
#include <stdbool.h>
#include <stdlib.h>
#include <xxhash.h>

#include "common/util.h"
#include "fetch/format/index.h"
#include "fetch/format/tar.h"

struct member {
	uint64_t off, size, sum;
	bool done;
};

struct sums {
	struct tar_parser *tp;
	XXH3_state_t *whole, *cur;
	uint64_t pos;	     /* bytes fed so far */
	struct member *m;    /* in archive order */
	size_t n, cap, next; /* next: first member not yet hashed */
	bool cur_open;	     /* cur holds a partial hash of m[next] */
	int err;
};

static int on_entry(void *ud, const struct tar_entry *e)
{
	struct sums *s = ud;
	struct member *m;

	if (e->reject)
		return 0; /* never a sample: the scanner skips it too */
	if (s->n == s->cap) {
		s->cap = s->cap ? 2 * s->cap : 256;
		s->m = xrealloc(s->m, s->cap * sizeof(*s->m));
	}
	m = &s->m[s->n++];
	*m = (struct member){e->data_offset, e->size, 0, false};
	/* A small member's callback comes after its data went by (maybe in
	 * an earlier chunk): the parser hands the bytes over instead. */
	if (e->small_data) {
		m->sum = XXH3_64bits(e->small_data, (size_t)e->size);
		m->done = true;
	}
	return 0;
}

struct sums *sums_new(void)
{
	struct sums *s = xcalloc(1, sizeof(*s));

	s->tp = tar_parser_new(on_entry, s);
	s->whole = xnonnull(XXH3_createState(), "an XXH3 state");
	s->cur = xnonnull(XXH3_createState(), "an XXH3 state");
	XXH3_64bits_reset(s->whole);
	return s;
}

void sums_free(struct sums *s)
{
	if (!s)
		return;
	tar_parser_free(s->tp);
	XXH3_freeState(s->whole);
	XXH3_freeState(s->cur);
	free(s->m);
	free(s);
}

/* Hash the part of chunk [base, base + len) that belongs to members. */
static void hash_members(struct sums *s, const uint8_t *p, uint64_t base,
			 size_t len)
{
	uint64_t end = base + len;

	while (s->next < s->n) {
		struct member *m = &s->m[s->next];
		uint64_t from, to;

		if (m->done) {
			s->next++;
			continue;
		}
		if (m->off >= end)
			return; /* its data starts in a later chunk */
		from = m->off > base ? m->off : base;
		to = m->off + m->size < end ? m->off + m->size : end;
		if (!s->cur_open) {
			XXH3_64bits_reset(s->cur);
			s->cur_open = true;
		}
		XXH3_64bits_update(s->cur, p + (from - base),
				   (size_t)(to - from));
		if (to < m->off + m->size)
			return; /* continues in the next chunk */
		m->sum = XXH3_64bits_digest(s->cur);
		m->done = true;
		s->cur_open = false;
		s->next++;
	}
}

int sums_feed(struct sums *s, const void *buf, size_t len)
{
	if (s->err)
		return s->err;
	XXH3_64bits_update(s->whole, buf, len);
	/* Headers first: a member whose header is in this chunk may have
	 * data in it too. */
	if (tar_parser_feed(s->tp, buf, len)) {
		s->err = -EBADMSG;
		return s->err;
	}
	hash_members(s, buf, s->pos, len);
	s->pos += len;
	return 0;
}

uint64_t sums_shard(const struct sums *s)
{
	return XXH3_64bits_digest(s->whole);
}

static const struct member *find(const struct sums *s, uint64_t off)
{
	size_t lo = 0, hi = s->n;

	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;
		if (s->m[mid].off < off)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo < s->n && s->m[lo].off == off ? &s->m[lo] : NULL;
}

/* The shard's members (format 3) are the tail of ix->members, as its
 * samples are of ix->samples. */
static int fill_members(const struct sums *s, struct index *ix, uint32_t shard)
{
	for (size_t i = ix->nmembers; i-- > 0;) {
		struct index_sample *mem = &ix->members[i];
		const struct member *m;

		if (mem->shard != shard)
			break;
		m = find(s, mem->offset);
		if (!m || !m->done || m->size != mem->size)
			return -EBADMSG;
		mem->sum = m->sum;
	}
	return 0;
}

int sums_fill(struct sums *s, struct index *ix, uint32_t shard)
{
	if (shard >= ix->nshards)
		return -EINVAL;
	ix->shards[shard].sum = sums_shard(s);
	/* The shard's samples are the index's tail: the scanner just added
	 * them. Stopping at the first other shard keeps a many-shard index
	 * linear. */
	for (size_t i = ix->nsamples; i-- > 0;) {
		struct index_sample *smp = &ix->samples[i];
		const struct member *m;

		if (smp->shard != shard)
			break;
		m = find(s, smp->offset);
		if (!m || !m->done || m->size != smp->size)
			return -EBADMSG;
		smp->sum = m->sum;
	}
	return fill_members(s, ix, shard);
}

uint64_t sums_of(const void *buf, size_t len)
{
	return XXH3_64bits(buf, len);
}
