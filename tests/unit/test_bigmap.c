/* test_bigmap.c - large tables in huge-page mappings: small ones from
 * malloc, big ones mapped and trimmed, every byte usable. */
#include <criterion/criterion.h>
#include <stdint.h>
#include <string.h>

#include "common/bigmap.h"

#define MIB ((size_t)1 << 20)

Test(bigmap, small_tables_come_from_malloc)
{
	size_t mapped = 123;
	char *p = bigmap_alloc(0, &mapped);

	cr_assert_not_null(p);
	cr_assert_eq(mapped, 0);
	bigmap_free(p, mapped);
	p = bigmap_alloc(4 * MIB - 1, &mapped);
	cr_assert_not_null(p);
	cr_assert_eq(mapped, 0, "under two huge pages is malloc'd");
	memset(p, 7, 4 * MIB - 1);
	bigmap_trim(p, 10, &mapped); /* nothing to give back */
	cr_assert_eq(mapped, 0);
	bigmap_free(p, mapped);
	bigmap_free(NULL, 0);
}

Test(bigmap, big_tables_are_mapped_in_whole_huge_pages_and_trimmed)
{
	size_t n = 9 * MIB + 5, mapped;
	unsigned char *p = bigmap_alloc(n, &mapped);

	cr_assert_not_null(p);
	cr_assert_eq(mapped, 10 * MIB, "rounded up to 2 MiB: %zu", mapped);
	cr_assert_eq(p[0] | p[n - 1], 0, "a fresh mapping reads as zero");
	memset(p, 0xa5, n);
	bigmap_trim(p, 3 * MIB + 1, &mapped);
	cr_assert_eq(mapped, 4 * MIB, "kept the pages under 'used': %zu",
		     mapped);
	cr_assert_eq(p[3 * MIB], 0xa5, "what is kept keeps its bytes");
	p[4 * MIB - 1] = 1; /* the last kept byte is still writable */
	bigmap_trim(p, 8 * MIB, &mapped);
	cr_assert_eq(mapped, 4 * MIB, "trimming never grows a mapping");
	bigmap_free(p, mapped);
}

Test(bigmap, sizes_that_cannot_be_rounded_fail)
{
	size_t mapped = 1;

	cr_assert_null(bigmap_alloc(SIZE_MAX - 1, &mapped));
	cr_assert_eq(mapped, 0);
}
