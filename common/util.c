/* util.c - small helpers every layer may use: allocation, strict number
 * parsing, time. */
#include "common/util.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static void oom(size_t n)
{
	fprintf(stderr, "echofs: out of memory allocating %zu bytes\n", n);
	abort();
}

void *xmalloc(size_t n)
{
	void *p = malloc(n ? n : 1);
	if (!p)
		oom(n);
	return p;
}

void *xcalloc(size_t n, size_t size)
{
	void *p = calloc(n ? n : 1, size ? size : 1);
	if (!p)
		oom(n * size);
	return p;
}

void *xnonnull(void *p, const char *what)
{
	if (!p) {
		fprintf(stderr, "echofs: out of memory allocating %s\n", what);
		abort();
	}
	return p;
}

void *xrealloc(void *p, size_t n)
{
	void *q = realloc(p, n ? n : 1);
	if (!q)
		oom(n);
	return q;
}

char *xstrdup(const char *s)
{
	return xstrndup(s, strlen(s));
}

char *xstrndup(const char *s, size_t n)
{
	size_t len = strnlen(s, n);
	char *p = xmalloc(len + 1);
	memcpy(p, s, len);
	p[len] = '\0';
	return p;
}

int parse_u64_n(const char *s, size_t len, uint64_t *out)
{
	uint64_t v = 0;
	if (len == 0)
		return -EINVAL;
	for (size_t i = 0; i < len; i++) {
		unsigned d = (unsigned char)s[i] - '0';
		if (d > 9)
			return -EINVAL;
		if (v > (UINT64_MAX - d) / 10)
			return -ERANGE;
		v = v * 10 + d;
	}
	*out = v;
	return 0;
}

int parse_u64(const char *s, uint64_t *out)
{
	return parse_u64_n(s, strlen(s), out);
}

int parse_size(const char *s, uint64_t *out)
{
	static const char units[] = "KMGT";
	size_t digits = strspn(s, "0123456789");
	const char *suf = s + digits;
	unsigned shift = 0;
	uint64_t v;
	int r;

	if (*suf) {
		const char *u = strchr(units, suf[0] & ~0x20);
		if (u && suf[0] != '\0') {
			shift = 10 * (unsigned)(u - units + 1);
			suf++;
		}
		/* Accept an optional "B" or "iB" (the latter only after a unit). */
		if (strcmp(suf, "B") == 0 || (shift && strcmp(suf, "iB") == 0))
			suf += strlen(suf);
		if (*suf)
			return -EINVAL;
	}
	r = parse_u64_n(s, digits, &v);
	if (r)
		return r;
	if (shift && v > (UINT64_MAX >> shift))
		return -ERANGE;
	*out = v << shift;
	return 0;
}

double now_mono(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

uint64_t hash64(const void *data, size_t len, uint64_t seed)
{
	const unsigned char *p = data;
	uint64_t h = 1469598103934665603ULL ^ seed;
	for (size_t i = 0; i < len; i++) {
		h ^= p[i];
		h *= 1099511628211ULL;
	}
	return h;
}
