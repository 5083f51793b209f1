/* bigmap.c - large tables in transparent huge pages (see bigmap.h). */
#include "common/bigmap.h"

#include <stdint.h>
#include <stdlib.h>
#include <sys/mman.h>

#define HUGE_PAGE ((size_t)2 << 20)

static size_t round_huge(size_t n)
{
	return (n + HUGE_PAGE - 1) & ~(HUGE_PAGE - 1);
}

void *bigmap_alloc(size_t n, size_t *mapped)
{
	size_t len;
	void *p;

	*mapped = 0;
	if (n < 2 * HUGE_PAGE)
		return malloc(n ? n : 1);
	if (n > SIZE_MAX - HUGE_PAGE)
		return NULL;
	len = round_huge(n);
	p = mmap(NULL, len, PROT_READ | PROT_WRITE,
		 MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
	if (p == MAP_FAILED)
		return NULL;
	madvise(p, len, MADV_HUGEPAGE); /* a hint: failure is harmless */
	*mapped = len;
	return p;
}

void bigmap_free(void *p, size_t mapped)
{
	if (mapped)
		munmap(p, mapped);
	else
		free(p);
}

void bigmap_trim(void *p, size_t used, size_t *mapped)
{
	size_t keep = round_huge(used);

	if (*mapped > keep) {
		munmap((char *)p + keep, *mapped - keep);
		*mapped = keep;
	}
}
