/* fuzz_index.c - libFuzzer target for index_parse (formats 1 and 2): any
 * input is accepted or rejected with -EBADMSG and a "line N: ..." reason,
 * never a crash; whatever is accepted writes back to text that parses to the
 * same bytes and checksums again; the sample lookup that checksum checks use
 * (cache/store/verify.c) agrees with a brute-force search, overlapping
 * members included. */
#include "cache/store/verify.h"
#include "fetch/format/index.h"
#include "fetch/format/index_bin.h"

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static char *write_text(const struct index *ix, size_t *len)
{
	char *buf = NULL;
	FILE *f = open_memstream(&buf, len);

	if (!f || index_write(ix, f))
		abort();
	fclose(f);
	return buf;
}

/* The samples of shard holding off (any will do), else the nearest start
 * after off: what verify_find must agree with. */
static void check_find(const struct index *ix, const struct verify *v,
		       uint32_t shard, uint64_t off)
{
	uint64_t end, next = UINT64_MAX;
	size_t got = verify_find(v, shard, off, &end);
	int holds = 0;

	for (size_t i = 0; i < ix->nsamples; i++) {
		const struct index_sample *s = &ix->samples[i];
		if (s->shard != shard)
			continue;
		if (s->offset <= off && off - s->offset < s->size)
			holds = 1;
		if (s->offset > off && s->offset < next)
			next = s->offset;
	}
	if (holds != (got != VERIFY_NONE))
		abort();
	if (got == VERIFY_NONE) {
		if (end != next)
			abort();
		return;
	}
	if (ix->samples[got].shard != shard || ix->samples[got].offset > off ||
	    end != ix->samples[got].offset + ix->samples[got].size ||
	    end <= off)
		abort();
}

static void check_lookup(const struct index *ix)
{
	struct verify *v;

	if (verify_open(ix, &v) != 0 || (ix->has_sums != (v != NULL)))
		abort(); /* fuzzed indexes stay far below 2^32 samples */
	if (!ix->has_sums || ix->nsamples > 200) {
		verify_free(v);
		return;
	}
	for (size_t i = 0; i < ix->nsamples; i++) {
		const struct index_sample *s = &ix->samples[i];
		check_find(ix, v, s->shard, s->offset);
		check_find(ix, v, s->shard, s->offset + s->size);
		if (s->offset)
			check_find(ix, v, s->shard, s->offset - 1);
	}
	verify_free(v);
}

static void same_sums(const struct index *a, const struct index *b)
{
	if (a->has_sums != b->has_sums || a->nshards != b->nshards ||
	    a->nsamples != b->nsamples)
		abort();
	for (size_t i = 0; i < a->nshards; i++)
		if (a->shards[i].sum != b->shards[i].sum)
			abort();
	for (size_t i = 0; i < a->nsamples; i++)
		if (a->samples[i].sum != b->samples[i].sum)
			abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct index *ix, *again;
	char err[256], *t1, *t2;
	size_t l1, l2;
	int r;

	/* binary indexes are fuzz_index_bin's */
	if (index_bin_is(data, size))
		return 0;
	r = index_parse((const char *)data, size, &ix, err, sizeof(err));
	if (r) {
		if (r != -EBADMSG || ix || strncmp(err, "line ", 5) != 0)
			abort();
		return 0;
	}
	for (size_t i = 0; i < ix->nsamples; i++) {
		const struct index_sample *s = &ix->samples[i];
		if (s->shard >= ix->nshards ||
		    s->size > ix->shards[s->shard].size ||
		    s->offset > ix->shards[s->shard].size - s->size)
			abort();
	}
	/* Formats 2 and 3 (3 adds members) carry checksums; 1 does not. */
	if (ix->has_sums !=
	    (size >= 14 && (memcmp(data, "echofs-index 2", 14) == 0 ||
			    memcmp(data, "echofs-index 3", 14) == 0)))
		abort();
	check_lookup(ix);
	t1 = write_text(ix, &l1);
	if (index_parse(t1, l1, &again, err, sizeof(err)))
		abort();
	same_sums(ix, again);
	t2 = write_text(again, &l2);
	if (l1 != l2 || memcmp(t1, t2, l1) != 0)
		abort();
	free(t1);
	free(t2);
	index_free(again);
	index_free(ix);
	return 0;
}
