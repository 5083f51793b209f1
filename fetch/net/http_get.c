/* http_get.c - the GET calls of the public API (size, stream, range, whole
 * body), each a struct want run by the transfer engine. */

#include "fetch/net/http_int.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int want_etag(struct want *w, const char *etag)
{
	size_t n = etag ? strlen(etag) : 0;

	if (n >= sizeof(w->etag))
		return -EINVAL;
	memcpy(w->etag, etag ? etag : "", n + 1);
	return 0;
}

static int discard_sink(void *ud, const void *data, size_t len)
{
	(void)ud;
	(void)data;
	(void)len;
	return 0;
}

int http_stat(struct http *h, const char *url, uint64_t *size, char *etag,
	      size_t etaglen)
{
	struct want w = {.end = NO_SIZE, .total = NO_SIZE, .head = 1};
	int rc = http_run(h, url, &w);

	if ((rc == 0 && w.total == NO_SIZE) || w.status == 405 ||
	    w.status == 501) {
		/* no length in HEAD (or HEAD refused): ask for one byte */
		struct want g = {
			.end = 1, .total = NO_SIZE, .sink = discard_sink};
		rc = http_run(h, url, &g);
		w = g;
	}
	if (rc)
		return rc;
	if (w.total == NO_SIZE)
		return -EPROTO;
	*size = w.total;
	if (etaglen)
		snprintf(etag, etaglen, "%s", w.etag);
	return 0;
}

int http_stream(struct http *h, const char *url, const char *etag,
		uint64_t expected_size, http_sink_fn sink, void *ud)
{
	struct want w = {
		.end = NO_SIZE, .total = expected_size, .sink = sink, .ud = ud};

	if (want_etag(&w, etag))
		return -EINVAL;
	return http_run(h, url, &w);
}

struct into_buf {
	char *buf;
	size_t got;
};

static int buf_sink(void *ud, const void *data, size_t len)
{
	struct into_buf *b = ud;
	memcpy(b->buf + b->got, data, len);
	b->got += len;
	return 0;
}

int http_get_range(struct http *h, const char *url, const char *etag,
		   uint64_t off, size_t len, void *buf)
{
	return http_get_range_of(h, url, etag, UINT64_MAX, off, len, buf);
}

static int get_range(struct http *h, const char *url, const char *etag,
		     uint64_t total, uint64_t off, size_t len, void *buf,
		     int strict)
{
	struct into_buf b = {.buf = buf};
	struct want w = {.pos = off,
			 .end = off + len,
			 .total = total,
			 .strict = strict,
			 .sink = buf_sink,
			 .ud = &b};

	if (len == 0)
		return 0;
	if (off > NO_SIZE - 1 - len || want_etag(&w, etag))
		return -EINVAL;
	return http_run(h, url, &w);
}

int http_get_range_of(struct http *h, const char *url, const char *etag,
		      uint64_t total, uint64_t off, size_t len, void *buf)
{
	return get_range(h, url, etag, total, off, len, buf, 0);
}

int http_get_part(struct http *h, const char *url, const char *etag,
		  uint64_t total, uint64_t off, size_t len, void *buf)
{
	return get_range(h, url, etag, total, off, len, buf, 1);
}

int http_grow_sink(void *ud, const void *data, size_t len)
{
	struct growbuf *g = ud;

	if (len > g->cap - g->len)
		return -EFBIG;
	if (g->len + len + 1 > g->alloc) {
		size_t want = g->alloc ? g->alloc * 2 : 64 * 1024;
		char *p;
		if (want < g->len + len + 1)
			want = g->len + len + 1;
		if (want > g->cap + 1)
			want = g->cap + 1;
		p = realloc(g->buf, want);
		if (!p)
			return -ENOMEM;
		g->buf = p;
		g->alloc = want;
	}
	memcpy(g->buf + g->len, data, len);
	g->len += len;
	return 0;
}

int http_get_all(struct http *h, const char *url, size_t cap, char **out,
		 size_t *outlen)
{
	struct growbuf g = {.cap = cap};
	int rc = http_stream(h, url, NULL, NO_SIZE, http_grow_sink, &g);

	if (rc == 0 && !g.buf) {
		g.buf = malloc(1);
		if (!g.buf)
			rc = -ENOMEM;
	}
	if (rc) {
		free(g.buf);
		return rc;
	}
	g.buf[g.len] = '\0';
	*out = g.buf;
	*outlen = g.len;
	return 0;
}
