/* shardlist.c - the list of shard URLs: brace expansion, list files, and
 * the normal form that tells two spellings of one shard apart. */
#include "fetch/net/shardlist.h"

#include "common/file.h"
#include "common/util.h"
#include "fetch/net/scheme.h"

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#define MAX_GROUPS 16
#define MAX_PATTERN 4096		/* longer lines are not shard URLs */
#define HARD_MAX_URLS ((size_t)1 << 24) /* whatever max_urls says */

/* One brace group: a numeric range or a comma list. */
struct group {
	const char *start; /* the '{' */
	const char *end;   /* just past the '}' */
	int is_range;
	uint64_t lo, hi; /* range: first and last value as written */
	int width;	 /* range: zero-pad to this many digits, or 0 */
	size_t count;	 /* values in the group */
};

static int parse_range(struct group *g, const char *s, size_t len)
{
	const char *dots = NULL;
	size_t alen, blen;

	for (size_t i = 0; i + 1 < len; i++)
		if (s[i] == '.' && s[i + 1] == '.') {
			dots = s + i;
			break;
		}
	if (!dots)
		return -EINVAL;
	alen = (size_t)(dots - s);
	blen = len - alen - 2;
	if (parse_u64_n(s, alen, &g->lo) || parse_u64_n(dots + 2, blen, &g->hi))
		return -EINVAL;
	/* bash's rule: a bound written with a leading zero pads every value
	 * to the width of the wider bound */
	if ((alen > 1 && s[0] == '0') || (blen > 1 && dots[2] == '0'))
		g->width = (int)(alen > blen ? alen : blen);
	g->is_range = 1;
	g->count = g->lo <= g->hi ? g->hi - g->lo + 1 : g->lo - g->hi + 1;
	if (g->count == 0) /* 0..UINT64_MAX wraps */
		g->count = SIZE_MAX;
	return 0;
}

/* The group opening at s[0] == '{'; Returns 0 or -EINVAL. */
static int parse_group(struct group *g, const char *s, const char *end)
{
	const char *body = s + 1, *close;
	size_t len;

	memset(g, 0, sizeof(*g));
	g->start = s;
	close = memchr(body, '}', (size_t)(end - body));
	if (!close)
		return -EINVAL;
	len = (size_t)(close - body);
	if (len == 0 || memchr(body, '{', len))
		return -EINVAL; /* empty or nested */
	g->end = close + 1;
	if (memchr(body, ',', len)) {
		g->count = 1;
		for (size_t i = 0; i < len; i++)
			g->count += body[i] == ',';
		return 0;
	}
	return parse_range(g, body, len);
}

/* Finds the groups of s[0..len) and the number of results (capped). */
static int scan(const char *s, size_t len, struct group *g, size_t *ng,
		size_t limit, size_t *total)
{
	const char *p = s, *end = s + len;
	size_t n = 0, t = 1;

	while (p < end) {
		const char *b = p;
		while (b < end && *b != '{' && *b != '}')
			b++;
		if (b == end)
			break;
		if (*b == '}' || n == MAX_GROUPS || parse_group(&g[n], b, end))
			return -EINVAL;
		if (g[n].count > limit || t > limit / g[n].count)
			return -E2BIG;
		t *= g[n].count;
		p = g[n++].end;
	}
	if (t > limit)
		return -E2BIG;
	*ng = n;
	*total = t;
	return 0;
}

/* Writes value number idx of group g at buf (room for the group's text or
 * 20 digits, whichever is more); returns its length. */
static size_t put_value(char *buf, const struct group *g, size_t idx)
{
	const char *item = g->start + 1, *close = g->end - 1, *comma;

	if (g->is_range) {
		uint64_t v = g->lo <= g->hi ? g->lo + idx : g->lo - idx;
		int n = snprintf(buf, 24 + (size_t)g->width, "%0*llu", g->width,
				 (unsigned long long)v);
		return n > 0 ? (size_t)n : 0;
	}
	for (size_t i = 0; i < idx; i++)
		item = (const char *)memchr(item, ',', (size_t)(close - item)) +
		       1;
	comma = memchr(item, ',', (size_t)(close - item));
	memcpy(buf, item, (size_t)((comma ? comma : close) - item));
	return (size_t)((comma ? comma : close) - item);
}

/* Builds result number k (groups vary right-most fastest, as in bash). */
static char *build(const char *s, size_t len, const struct group *g, size_t ng,
		   size_t k, char *buf)
{
	size_t idx[MAX_GROUPS], at = 0;
	const char *p = s;

	for (size_t i = ng; i-- > 0;) {
		idx[i] = k % g[i].count;
		k /= g[i].count;
	}
	for (size_t i = 0; i < ng; i++) {
		memcpy(buf + at, p, (size_t)(g[i].start - p));
		at += (size_t)(g[i].start - p);
		at += put_value(buf + at, &g[i], idx[i]);
		p = g[i].end;
	}
	memcpy(buf + at, p, (size_t)(s + len - p));
	at += (size_t)(s + len - p);
	return xstrndup(buf, at);
}

/* Appends the expansion of s[0..len) to l; at most limit new entries. */
static int expand_append(const char *s, size_t len, size_t limit,
			 struct shardlist *l)
{
	struct group g[MAX_GROUPS];
	size_t ng = 0, total = 0;
	char *buf;
	int rc;

	if (len > MAX_PATTERN || memchr(s, '\0', len))
		return -EINVAL;
	if (limit > HARD_MAX_URLS)
		limit = HARD_MAX_URLS;
	rc = scan(s, len, g, &ng, limit, &total);
	if (rc)
		return rc;
	/* each group's text (at least 3 bytes) becomes at most
	 * max(its text, 20 digits) */
	buf = xmalloc(len + ng * 24 + 1);
	l->urls = xrealloc(l->urls, (l->n + total) * sizeof(*l->urls));
	for (size_t k = 0; k < total; k++)
		l->urls[l->n++] = build(s, len, g, ng, k, buf);
	free(buf);
	return 0;
}

int shardlist_expand(const char *pattern, size_t max_urls,
		     struct shardlist *out)
{
	int rc;

	out->urls = NULL;
	out->n = 0;
	rc = expand_append(pattern, strlen(pattern), max_urls, out);
	if (rc)
		shardlist_clear(out);
	return rc;
}

static int bad_char(const char *s, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		unsigned char c = (unsigned char)s[i];
		if (c <= 0x20 || c == 0x7f)
			return 1;
	}
	return 0;
}

int shardlist_parse(const char *text, size_t len, size_t max_urls,
		    struct shardlist *out, size_t *bad_line)
{
	const char *p = text, *end = text + len;
	size_t lineno = 0;
	int rc = 0;

	out->urls = NULL;
	out->n = 0;
	if (bad_line)
		*bad_line = 0;
	while (p < end && rc == 0) {
		const char *nl = memchr(p, '\n', (size_t)(end - p));
		const char *s = p, *e = nl ? nl : end;

		lineno++;
		p = nl ? nl + 1 : end;
		while (s < e && (*s == ' ' || *s == '\t'))
			s++;
		while (e > s &&
		       (e[-1] == ' ' || e[-1] == '\t' || e[-1] == '\r'))
			e--;
		if (s == e || *s == '#')
			continue;
		if (bad_char(s, (size_t)(e - s)))
			rc = -EINVAL; /* one URL a line: no spaces or controls
				       */
		else
			rc = expand_append(s, (size_t)(e - s),
					   max_urls - out->n, out);
	}
	if (rc) {
		if (bad_line)
			*bad_line = lineno;
		shardlist_clear(out);
	}
	return rc;
}

void shardlist_clear(struct shardlist *l)
{
	if (!l)
		return;
	for (size_t i = 0; i < l->n; i++)
		free(l->urls[i]);
	free(l->urls);
	l->urls = NULL;
	l->n = 0;
}

int shardlist_is_url(const char *s)
{
	if (!s)
		return 0;
	if (strncasecmp(s, "http://", 7) == 0)
		return s[7] != '\0' && s[7] != '/';
	if (strncasecmp(s, "https://", 8) == 0)
		return s[8] != '\0' && s[8] != '/';
	return fetch_scheme_of(s) == FETCH_SCHEME_BUCKET;
}

int shardlist_file_has(const char *path, const char *scheme)
{
	char *text;
	size_t len;
	int hit = 0;

	if (!path || strstr(path, "://") ||
	    file_read_all(path, 64u << 20, &text, &len))
		return 0;
	for (const char *p = text; p && !hit; p = strchr(p, '\n')) {
		p += *p == '\n';
		p += strspn(p, " \t");
		hit = strncasecmp(p, scheme, strlen(scheme)) == 0;
	}
	free(text);
	return hit;
}

/* ---- the normal form (RFC 3986 section 6.2.2) ---- */

static int hex_val(char c)
{
	if (c >= '0' && c <= '9')
		return c - '0';
	c = (char)(c | 0x20);
	return c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
}

static int unreserved(int c)
{
	return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
	       (c >= '0' && c <= '9') || c == '-' || c == '.' || c == '_' ||
	       c == '~';
}

static char lower_c(char c)
{
	return c >= 'A' && c <= 'Z' ? (char)(c | 0x20) : c;
}

/* s[0 .. n) to out with its percent-encodings normal, every byte lower
 * case when lower (a host); returns the bytes written (at most n). */
static size_t pct_normal(const char *s, size_t n, char *out, int lower)
{
	static const char hex[] = "0123456789ABCDEF";
	size_t o = 0;

	for (size_t i = 0; i < n; i++) {
		int hi = i + 2 < n ? hex_val(s[i + 1]) : -1;
		int lo = i + 2 < n ? hex_val(s[i + 2]) : -1;
		char c = s[i];
		if (c == '%' && hi >= 0 && lo >= 0) {
			i += 2;
			c = (char)(hi * 16 + lo);
			if (!unreserved((unsigned char)c)) {
				out[o++] = '%';
				out[o++] = hex[hi];
				out[o++] = hex[lo];
				continue;
			}
		}
		out[o++] = lower ? lower_c(c) : c;
	}
	return o;
}

/* RFC 3986 section 5.2.4 on the path p[0 .. n) (normal already), in place;
 * returns its new length. Input and output share the buffer: the output
 * never grows past what the input consumed. */
static size_t remove_dots(char *p, size_t n)
{
	size_t in = 0, out = 0;

	while (in < n) {
		const char *s = p + in;
		size_t left = n - in;
		if (left >= 3 && memcmp(s, "../", 3) == 0) {
			in += 3;
		} else if (left >= 2 && memcmp(s, "./", 2) == 0) {
			in += 2;
		} else if (left >= 3 && memcmp(s, "/./", 3) == 0) {
			in += 2;
		} else if (left == 2 && memcmp(s, "/.", 2) == 0) {
			p[++in] = '/'; /* "/." becomes "/" */
		} else if ((left >= 4 && memcmp(s, "/../", 4) == 0) ||
			   (left == 3 && memcmp(s, "/..", 3) == 0)) {
			in += left == 3 ? 2 : 3; /* both become "/" */
			p[in] = '/';
			while (out > 0 && p[--out] != '/')
				;
		} else if ((left == 1 && s[0] == '.') ||
			   (left == 2 && memcmp(s, "..", 2) == 0)) {
			in = n;
		} else {
			const char *slash = memchr(s + 1, '/', left - 1);
			size_t seg = slash ? (size_t)(slash - s) : left;
			memmove(p + out, s, seg);
			out += seg;
			in += seg;
		}
	}
	return out;
}

/* The port after host[:port] with its ':' when it is not the scheme's
 * default (80 for http, 443 for https) nor empty; else "". */
static size_t port_kept(const char *port, size_t n, int https)
{
	uint64_t v;

	if (n <= 1 || parse_u64_n(port + 1, n - 1, &v))
		return n <= 1 ? 0 : n;
	return v == (https ? 443u : 80u) ? 0 : n;
}

/* "host[:port]" of an http(s) URL, normal, at out; returns its length. */
static size_t authority(const char *a, size_t n, int https, char *out)
{
	const char *at = NULL, *colon;
	size_t o = 0, host;

	for (const char *q = a; q < a + n; q++)
		if (*q == '@')
			at = q; /* the last '@' ends the userinfo */
	if (at) {
		o = (size_t)(at - a) + 1;
		memcpy(out, a, o);
	}
	a += o;
	n -= o;
	colon = memrchr(a, ':', n);
	if (colon && memchr(colon, ']', (size_t)(a + n - colon)))
		colon = NULL; /* inside an IPv6 literal */
	host = colon ? (size_t)(colon - a) : n;
	o += pct_normal(a, host, out + o, 1);
	if (port_kept(a + host, n - host, https)) {
		memcpy(out + o, a + host, n - host);
		o += n - host;
	}
	return o;
}

char *shardlist_normalise(const char *url)
{
	const char *sep = strstr(url, "://"), *auth, *rest;
	size_t slen, len = strlen(url), o, plen;
	char *out = xmalloc(len + 2); /* + "/" for an empty path */
	int https;

	if (!sep || strcspn(url, "/?#") < (size_t)(sep - url)) {
		memcpy(out, url, len + 1);
		return out; /* a path, not a URL */
	}
	slen = (size_t)(sep - url);
	for (o = 0; o < slen; o++)
		out[o] = lower_c(url[o]);
	https = slen == 5 && memcmp(out, "https", 5) == 0;
	if (!https && !(slen == 4 && memcmp(out, "http", 4) == 0)) {
		memcpy(out + o, sep, len - slen + 1);
		return out;
	}
	memcpy(out + o, "://", 3);
	o += 3;
	auth = sep + 3;
	rest = auth + strcspn(auth, "/?#");
	o += authority(auth, (size_t)(rest - auth), https, out + o);
	plen = pct_normal(rest, strcspn(rest, "?#"), out + o, 0);
	plen = remove_dots(out + o, plen);
	if (plen == 0)
		out[o + plen++] = '/';
	o += plen;
	rest += strcspn(rest, "?#");
	o += pct_normal(rest, strlen(rest), out + o, 0);
	out[o] = '\0';
	return out;
}
