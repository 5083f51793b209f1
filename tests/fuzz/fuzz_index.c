/* fuzz_index.c - libFuzzer target for index_parse: any input is accepted or
 * rejected with -EBADMSG and a "line N: ..." reason, never a crash; whatever
 * is accepted writes back to text that parses to the same bytes again. */
#include "fetch/format/index.h"

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

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct index *ix, *again;
	char err[256], *t1, *t2;
	size_t l1, l2;
	int r;

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
	t1 = write_text(ix, &l1);
	if (index_parse(t1, l1, &again, err, sizeof(err)))
		abort();
	t2 = write_text(again, &l2);
	if (l1 != l2 || memcmp(t1, t2, l1) != 0)
		abort();
	free(t1);
	free(t2);
	index_free(again);
	index_free(ix);
	return 0;
}
