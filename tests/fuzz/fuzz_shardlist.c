/* fuzz_shardlist.c - libFuzzer target for shardlist_parse and
 * shardlist_expand: any input must give 0 or -EINVAL / -E2BIG, never a
 * crash, and every result must stay within the limit. */
#include "fetch/net/shardlist.h"

#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define FUZZ_MAX_URLS 4096

static void check(int rc, const struct shardlist *l)
{
	if (rc != 0 && rc != -EINVAL && rc != -E2BIG)
		abort();
	if (rc != 0 && (l->n != 0 || l->urls != NULL))
		abort(); /* errors leave an empty list */
	if (l->n > FUZZ_MAX_URLS)
		abort();
	for (size_t i = 0; i < l->n; i++)
		if (!l->urls[i])
			abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct shardlist l;
	size_t bad = 0;
	char *s;
	int rc;

	rc = shardlist_parse((const char *)data, size, FUZZ_MAX_URLS, &l, &bad);
	check(rc, &l);
	if (rc != 0 && bad == 0)
		abort(); /* a failure names its line */
	shardlist_clear(&l);

	s = malloc(size + 1);
	if (!s)
		return 0;
	memcpy(s, data, size);
	s[size] = '\0';
	rc = shardlist_expand(s, FUZZ_MAX_URLS, &l);
	check(rc, &l);
	shardlist_clear(&l);
	shardlist_is_url(s);
	free(s);
	return 0;
}
