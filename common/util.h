/* util.h - small helpers every layer may use: allocation, strict number
 * parsing, time. */
#ifndef ECHOFS_UTIL_H
#define ECHOFS_UTIL_H

#include "common/attrs.h"
#include <stddef.h>
#include <stdint.h>

/* Small allocations abort on OOM through these. Large buffers (shard data,
 * bodies, images) must use plain malloc and check the result. */
void *xmalloc(size_t n);
void *xcalloc(size_t n, size_t size);
void *xrealloc(void *p, size_t n);
char *xstrdup(const char *s);
char *xstrndup(const char *s, size_t n);
/* p from a library's own allocator: returned as is, or the same abort as
 * above (naming `what`) when NULL. */
void *xnonnull(void *p, const char *what);

/* Strict unsigned decimal: digits only, no sign, no spaces, no overflow.
 * Returns 0 or -EINVAL / -ERANGE. */
MUST_CHECK
int parse_u64(const char *s, uint64_t *out);
/* Same on a length-delimited string (need not be NUL-terminated). */
int parse_u64_n(const char *s, size_t len, uint64_t *out);
/* A size: decimal with optional K, M, G, T suffix (powers of 1024, optional
 * trailing "B" or "iB"). Returns 0 or -EINVAL / -ERANGE. */
MUST_CHECK
int parse_size(const char *s, uint64_t *out);

/* Monotonic clock in seconds. */
double now_mono(void);

/* 64-bit FNV-1a style hash, for cache keys and hash tables (not for
 * security). Its offset basis is 1469598103934665603, FNV's with the last
 * digit missing, so it does not match FNV-1a's published vectors; kept
 * as is because cache file names on disk are made from it. */
uint64_t hash64(const void *data, size_t len, uint64_t seed);

#define ARRAY_SIZE(a) (sizeof(a) / sizeof((a)[0]))

#endif
