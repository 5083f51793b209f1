/* bigmap.h - large tables in transparent huge pages: the index's text and
 * sample array, the tree's names, files and class numbers (14 M samples:
 * hundreds of MB each). Faulting such tables in 4 KiB pages costs more than
 * filling them. Small ones come from malloc (*mapped = 0): a huge page per
 * tiny table would be waste. */
#ifndef ECHOFS_BIGMAP_H
#define ECHOFS_BIGMAP_H

#include <stddef.h>

/* n bytes (uninitialized unless mapped, where they read as zero), or NULL.
 * *mapped is the bytes mapped, 0 when the block came from malloc. Mapped
 * with MAP_NORESERVE: a region sized for the worst case costs only the
 * pages touched, and bigmap_trim gives back what stays unused. */
void *bigmap_alloc(size_t n, size_t *mapped);

/* Free a block of bigmap_alloc (mapped as it returned or bigmap_trim left
 * it). Accepts NULL. */
void bigmap_free(void *p, size_t mapped);

/* Unmap a mapped block's huge pages past used bytes; *mapped shrinks to
 * match. Does nothing to a malloc'd block (*mapped == 0). */
void bigmap_trim(void *p, size_t used, size_t *mapped);

#endif
