/* s3_list.c - shard lists from s3:// prefixes with ListObjectsV2: every page,
 * a minimal bounded XML reader, keys sorted. */
#include "fetch/net/s3.h"

#include "common/log.h"
#include "common/util.h"
#include "fetch/net/http.h"
#include "fetch/net/shardlist.h"
#include "fetch/net/sigv4.h"

#include <errno.h>
#include <fnmatch.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define KEY_MAX 1024
#define TOKEN_MAX 4096
#define PAGE_CAP (16u << 20)
#define PAGES_MAX 100000

struct listing {
	char bucket[256];
	char prefix[KEY_MAX + 1];
	char glob[KEY_MAX + 1]; /* "" for a trailing-slash source */
};

int s3_is_listing(const char *source)
{
	const char *last;

	if (!s3_is_url(source))
		return 0;
	last = strrchr(source, '/');
	if (!last || last < source + 5)
		return 0;
	return last[1] == '\0' || strchr(last + 1, '*') != NULL;
}

static int parse_source(const char *src, struct listing *l)
{
	const char *b = src + 5, *last = strrchr(src, '/');
	size_t bn = strcspn(b, "/");
	size_t pn;

	if (bn >= sizeof(l->bucket) || b[bn] != '/')
		return -EINVAL;
	memcpy(l->bucket, b, bn);
	l->bucket[bn] = '\0';
	pn = (size_t)(last + 1 - (b + bn + 1));
	if (pn > KEY_MAX || strlen(last + 1) > KEY_MAX)
		return -ENAMETOOLONG;
	memcpy(l->prefix, b + bn + 1, pn);
	l->prefix[pn] = '\0';
	snprintf(l->glob, sizeof(l->glob), "%s", last + 1);
	return 0;
}

/* Decodes XML text s[0..n) (the five entities and numeric references)
 * into out; -EINVAL on anything else or a control character. */
static int xml_text(const char *s, size_t n, char *out, size_t outlen)
{
	static const struct {
		const char *e;
		char c;
	} ents[] = {{"&amp;", '&'},
		    {"&lt;", '<'},
		    {"&gt;", '>'},
		    {"&quot;", '"'},
		    {"&apos;", '\''}};
	size_t at = 0, i = 0;

	while (i < n) {
		unsigned long cp = (unsigned char)s[i];
		size_t used = 1, k;
		if (s[i] == '&') {
			for (k = 0; k < ARRAY_SIZE(ents); k++) {
				size_t el = strlen(ents[k].e);
				if (n - i >= el &&
				    !memcmp(s + i, ents[k].e, el))
					break;
			}
			if (k < ARRAY_SIZE(ents)) {
				cp = (unsigned char)ents[k].c;
				used = strlen(ents[k].e);
			} else {
				char *end;
				const char *semi = memchr(s + i, ';', n - i);
				int hex = n - i > 2 && s[i + 2] == 'x';
				if (!semi || n - i < 4 || s[i + 1] != '#')
					return -EINVAL;
				cp = strtoul(s + i + 2 + hex, &end,
					     hex ? 16 : 10);
				if (end != semi || cp == 0 || cp > 0x10ffff)
					return -EINVAL;
				used = (size_t)(semi + 1 - (s + i));
			}
		}
		if (cp < 0x20 || cp == 0x7f)
			return -EINVAL; /* cannot be a shard URL line */
		if (at + 5 >= outlen)
			return -ENAMETOOLONG;
		if (cp < 0x80 || used == 1) {
			out[at++] = (char)cp; /* raw bytes pass as they are */
		} else if (cp < 0x800) {
			out[at++] = (char)(0xc0 | (cp >> 6));
			out[at++] = (char)(0x80 | (cp & 0x3f));
		} else if (cp < 0x10000) {
			out[at++] = (char)(0xe0 | (cp >> 12));
			out[at++] = (char)(0x80 | ((cp >> 6) & 0x3f));
			out[at++] = (char)(0x80 | (cp & 0x3f));
		} else {
			out[at++] = (char)(0xf0 | (cp >> 18));
			out[at++] = (char)(0x80 | ((cp >> 12) & 0x3f));
			out[at++] = (char)(0x80 | ((cp >> 6) & 0x3f));
			out[at++] = (char)(0x80 | (cp & 0x3f));
		}
		i += used;
	}
	out[at] = '\0';
	return 0;
}

/* The text of the first <tag> in [p, end), decoded. */
static int tag_text(const char *p, const char *end, const char *tag, char *out,
		    size_t outlen)
{
	char open[48], close[48];
	const char *a, *b;

	snprintf(open, sizeof(open), "<%s>", tag);
	snprintf(close, sizeof(close), "</%s>", tag);
	a = memmem(p, (size_t)(end - p), open, strlen(open));
	if (!a)
		return -ENOENT;
	a += strlen(open);
	b = memmem(a, (size_t)(end - a), close, strlen(close));
	if (!b)
		return -EINVAL;
	return xml_text(a, (size_t)(b - a), out, outlen);
}

static int wanted(const struct listing *l, const char *key)
{
	const char *rest = key + strlen(l->prefix);
	size_t n = strlen(key);

	if (strncmp(key, l->prefix, strlen(l->prefix)) != 0)
		return 0;
	if (!l->glob[0])
		return n > 4 && strcmp(key + n - 4, ".tar") == 0;
	return fnmatch(l->glob, rest, FNM_PATHNAME) == 0;
}

static void add_key(struct shardlist *out, const struct listing *l,
		    const char *key)
{
	size_t n = strlen(l->bucket) + strlen(key) + 7;
	char *u = xmalloc(n);

	snprintf(u, n, "s3://%s/%s", l->bucket, key);
	out->urls = xrealloc(out->urls, (out->n + 1) * sizeof(*out->urls));
	out->urls[out->n++] = u;
}

/* One page's keys into out; next continuation token into token ("" at
 * the end). */
static int read_page(const char *body, size_t len, const struct listing *l,
		     size_t max, struct shardlist *out, char *token,
		     size_t *skipped)
{
	const char *p = body, *end = body + len, *c, *ce;
	char key[3 * KEY_MAX + 8], trunc[16] = "";
	int rc;

	if (!memmem(body, len, "<ListBucketResult", 17))
		return -EPROTO;
	while ((c = memmem(p, (size_t)(end - p), "<Contents>", 10))) {
		ce = memmem(c, (size_t)(end - c), "</Contents>", 11);
		if (!ce)
			return -EPROTO;
		rc = tag_text(c, ce, "Key", key, sizeof(key));
		if (rc == -EINVAL || (rc == 0 && strlen(key) > KEY_MAX))
			++*skipped; /* control characters, bad XML, too long */
		else if (rc)
			return -EPROTO;
		else if (wanted(l, key)) {
			if (out->n >= max)
				return -E2BIG;
			add_key(out, l, key);
		}
		p = ce + 11;
	}
	token[0] = '\0';
	if (tag_text(body, end, "IsTruncated", trunc, sizeof(trunc)) == 0 &&
	    strcmp(trunc, "true") == 0 &&
	    tag_text(body, end, "NextContinuationToken", token, TOKEN_MAX))
		return -EPROTO; /* truncated without a way on */
	return 0;
}

static char *page_url(const struct listing *l, const char *token)
{
	size_t n = strlen(l->bucket) + 3 * strlen(l->prefix) +
		   3 * strlen(token) + 96;
	char *u = xmalloc(n);
	int at = snprintf(u, n, "s3://%s?list-type=2&prefix=", l->bucket);

	at += (int)sigv4_uri_encode(l->prefix, strlen(l->prefix), 0, u + at,
				    n - (size_t)at);
	if (token[0]) {
		at += snprintf(u + at, n - (size_t)at, "&continuation-token=");
		sigv4_uri_encode(token, strlen(token), 0, u + at,
				 n - (size_t)at);
	}
	return u;
}

static int cmp_str(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

/* A set of 64-bit hashes (open addressing, 0 stands for 0 and 1 alike):
 * the tokens and shard keys a listing has seen, so that a listing going
 * round in circles is told from one that moves on. */
struct seen {
	uint64_t *v;
	size_t cap, n;
};

/* Adds h; 1 when it was new. */
static int seen_add(struct seen *s, uint64_t h)
{
	h = h ? h : 1;
	if (2 * (s->n + 1) > s->cap) {
		struct seen big = {xcalloc(s->cap ? 2 * s->cap : 64, 8),
				   s->cap ? 2 * s->cap : 64, 0};
		for (size_t i = 0; i < s->cap; i++)
			if (s->v[i])
				seen_add(&big, s->v[i]);
		free(s->v);
		*s = big;
	}
	size_t i = h & (s->cap - 1);
	while (s->v[i] && s->v[i] != h)
		i = (i + 1) & (s->cap - 1);
	if (s->v[i])
		return 0;
	s->v[i] = h;
	s->n++;
	return 1;
}

struct walk {
	struct seen tokens, keys;
	double last_new; /* when a page last brought a shard not seen before */
	/* A listing that brings no new shard for this long is given up
	 * (http_stall_timeout, -o stall_timeout: 10 s by default, so the
	 * mount fails with one line within the README's 15 s). */
	double stall_s;
	size_t skipped;  /* keys that cannot be shard names */
	char why[160];   /* the reason a listing was given up, or "" */
};

/* A listing ends, or moves on: a continuation token seen before means it
 * goes round in circles (S3 never repeats one), and one that brings no new
 * shard for w->stall_s is given up too (pages of fresh tokens over the
 * same keys, or none). */
static int moves_on(struct walk *w, const struct shardlist *out, size_t from,
		    const char *token, int page)
{
	int fresh = 0;

	for (size_t i = from; i < out->n; i++)
		fresh |= seen_add(&w->keys, hash64(out->urls[i],
						   strlen(out->urls[i]), 0));
	if (fresh)
		w->last_new = now_mono();
	if (token[0] && !seen_add(&w->tokens, hash64(token, strlen(token), 0))) {
		snprintf(w->why, sizeof(w->why),
			 "page %d repeats an earlier continuation token (a "
			 "listing that never ends)", page);
		return -ELOOP;
	}
	if (token[0] && now_mono() - w->last_new > w->stall_s) {
		snprintf(w->why, sizeof(w->why),
			 "no new shard in %.0f s of listing (page %d)",
			 w->stall_s, page);
		return -ETIMEDOUT;
	}
	return 0;
}

static int list_all(struct http *h, const struct listing *l, size_t max,
		    struct shardlist *out, int *pages, struct walk *w)
{
	char *token = xcalloc(1, TOKEN_MAX), *body, *url;
	size_t len, from;
	int rc = 0;

	w->last_new = now_mono();
	w->stall_s = http_stall_timeout(h);
	for (*pages = 0; rc == 0 && *pages < PAGES_MAX; ++*pages) {
		url = page_url(l, token);
		rc = http_get_all(h, url, PAGE_CAP, &body, &len);
		free(url);
		if (rc)
			break;
		from = out->n;
		rc = read_page(body, len, l, max, out, token, &w->skipped);
		free(body);
		log_debug("s3: listing page %d: %zu shards so far%s",
			  *pages + 1, out->n, token[0] ? ", more to come" : "");
		if (rc == 0)
			rc = moves_on(w, out, from, token, *pages + 1);
		if (rc == 0 && !token[0]) {
			++*pages;
			break;
		}
	}
	if (rc == 0 && token[0])
		rc = -E2BIG;
	free(w->tokens.v);
	free(w->keys.v);
	free(token);
	return rc;
}

/* A listing never names a key twice: one that does is broken (sorted out). */
static int check_unique(const struct shardlist *out, struct walk *w)
{
	for (size_t i = 1; i < out->n; i++)
		if (strcmp(out->urls[i - 1], out->urls[i]) == 0) {
			snprintf(w->why, sizeof(w->why),
				 "the listing names one key twice");
			return -EPROTO;
		}
	return 0;
}

int s3_list_shards(struct http *h, const char *source, size_t max,
		   struct shardlist *out, char *err, size_t errlen)
{
	struct listing *l = xcalloc(1, sizeof(*l));
	struct walk w = {0};
	int rc = parse_source(source, l), pages = 0;

	out->urls = NULL;
	out->n = 0;
	if (rc == 0)
		rc = list_all(h, l, max, out, &pages, &w);
	if (rc == 0 && out->n == 0)
		rc = -ENODATA;
	if (rc == 0) {
		qsort(out->urls, out->n, sizeof(*out->urls), cmp_str);
		rc = check_unique(out, &w);
	}
	if (w.skipped) /* each a shard the tree cannot show: one line */
		log_warn("s3: skipped %zu keys that cannot be shard names "
			 "(control characters, bad XML or over %d bytes)",
			 w.skipped, KEY_MAX);
	if (rc == 0) {
		log_info("s3: listed %zu shards in %d pages", out->n, pages);
	} else {
		snprintf(err, errlen, "cannot list s3://%s/%s%s: %s", l->bucket,
			 l->prefix, l->glob,
			 w.why[0]	 ? w.why
			 : rc == -ENODATA ? "no matching objects"
			 : rc == -EPROTO ? "bad ListObjectsV2 reply"
			 : rc == -E2BIG	 ? "too many objects"
					 : strerror(-rc));
		shardlist_clear(out);
	}
	free(l);
	return rc;
}
