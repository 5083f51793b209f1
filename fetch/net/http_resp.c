/* http_resp.c - libcurl's header and body callbacks for one response: parse
 * the headers, pass the body to the call's sink exactly once and in order. */

#include "fetch/net/http_int.h"

#include "common/util.h"

#include <errno.h>
#include <string.h>
#include <strings.h>

#define RETRY_AFTER_MAX_S 3600

#define RESUME_LIE                                                             \
	"resumed body differs from the bytes already received (the server "    \
	"answered the Range request from another offset)"

void http_trim(const char **s, size_t *len)
{
	while (*len && (**s == ' ' || **s == '\t')) {
		(*s)++;
		(*len)--;
	}
	while (*len && strchr(" \t\r\n", (*s)[*len - 1]))
		(*len)--;
}

/* Content-Range "bytes A-B/T", T may be a star */
static int parse_content_range(const char *v, size_t n, struct resp *r)
{
	const char *dash, *slash, *end = v + n;

	if (n < 6 || strncasecmp(v, "bytes ", 6) != 0)
		return -EPROTO;
	v += 6;
	dash = memchr(v, '-', (size_t)(end - v));
	slash = dash ? memchr(dash, '/', (size_t)(end - dash)) : NULL;
	if (!slash || parse_u64_n(v, (size_t)(dash - v), &r->cr_first) ||
	    parse_u64_n(dash + 1, (size_t)(slash - dash - 1), &r->cr_last))
		return -EPROTO;
	if (end - slash == 2 && slash[1] == '*')
		r->cr_total = NO_SIZE;
	else if (parse_u64_n(slash + 1, (size_t)(end - slash - 1),
			     &r->cr_total))
		return -EPROTO;
	if (r->cr_last < r->cr_first ||
	    (r->cr_total != NO_SIZE && r->cr_last >= r->cr_total))
		return -EPROTO;
	r->has_cr = 1;
	return 0;
}

static void parse_header(struct resp *r, const char *name, size_t nlen,
			 const char *v, size_t vlen)
{
	uint64_t u;

#define IS(s) (nlen == sizeof(s) - 1 && strncasecmp(name, s, nlen) == 0)
	if (IS("content-length")) {
		r->has_clen = parse_u64_n(v, vlen, &r->clen) == 0;
	} else if (IS("content-range")) {
		if (parse_content_range(v, vlen, r))
			r->has_cr = -1; /* present but garbage */
	} else if (IS("etag")) {
		r->etag_bad = vlen >= sizeof(r->etag);
		if (!r->etag_bad) {
			memcpy(r->etag, v, vlen);
			r->etag[vlen] = '\0';
		}
	} else if (IS("content-encoding")) {
		/* We ask for identity: anything else is not the object's
		 * bytes (curl decodes nothing unless told to). */
		r->encoded = !(vlen == 8 && strncasecmp(v, "identity", 8) == 0);
	} else if (IS("retry-after")) {
		if (parse_u64_n(v, vlen, &u) == 0)
			r->retry_after = u > RETRY_AFTER_MAX_S
						 ? RETRY_AFTER_MAX_S
						 : (long)u;
	}
#undef IS
}

size_t http_on_header(char *buf, size_t size, size_t n, void *ud)
{
	struct xfer *x = ud;
	size_t len = size * n, nlen;
	const char *v, *colon, *name;

	STAT_ADD(x->h, header_bytes, len);
	if (len >= 5 && strncmp(buf, "HTTP/", 5) == 0) {
		/* a new response (after 1xx): forget the previous one */
		const char *sp = memchr(buf, ' ', len);
		uint64_t code = 0;
		memset(&x->r, 0, sizeof(x->r));
		x->r.retry_after = -1;
		if (sp && buf + len - sp > 3)
			parse_u64_n(sp + 1, 3, &code);
		x->r.status = (long)code;
		return len;
	}
	v = buf;
	http_trim(&v, &len);
	if (len == 0) {
		if (x->r.status >= 200)
			x->r.err = http_check_headers(x);
		return x->r.err ? 0 : size * n;
	}
	colon = memchr(v, ':', len);
	if (!colon)
		return size * n;
	name = v;
	nlen = (size_t)(colon - v);
	len -= nlen + 1;
	v = colon + 1;
	http_trim(&v, &len);
	parse_header(&x->r, name, nlen, v, len);
	if (x->sign && x->h->auth.header)
		x->h->auth.header(x->h->auth.ud, name, nlen, v, len);
	return size * n;
}

static void keep_error_body(struct xfer *x, const char *buf, size_t len)
{
	size_t room = ERROR_BODY_MAX - x->errlen;

	if (!x->sign || x->r.status < 300)
		return;
	if (len > room)
		len = room;
	memcpy(x->errbody + x->errlen, buf, len);
	x->errlen += len;
	x->errbody[x->errlen] = '\0';
}

size_t http_on_body(char *buf, size_t size, size_t n, void *ud)
{
	struct xfer *x = ud;
	struct want *w = x->w;
	struct resp *r = &x->r;
	size_t len = size * n, left = len;
	int rc;

	STAT_ADD(x->h, bytes, len);
	if (!r->accept) {
		keep_error_body(x, buf, len);
		return len; /* error or redirect body: not the object */
	}
	if (r->skip) {
		size_t k = r->skip < left ? (size_t)r->skip : left;
		buf += k;
		left -= k;
		r->skip -= k;
	}
	if (r->cmp && left) {
		size_t k = r->cmp < left ? r->cmp : left;
		if (memcmp(buf, x->tail + x->tail_len - r->cmp, k) != 0) {
			STAT_ADD(x->h, errors_verify, 1);
			r->err = http_note_why(-EPROTO, RESUME_LIE);
			return 0;
		}
		buf += k;
		left -= k;
		r->cmp -= k;
	}
	if (r->status == 200 && w->end != NO_SIZE && left >= w->end - w->pos) {
		r->done = 1;
		left = (size_t)(w->end - w->pos);
	}
	if (w->total != NO_SIZE && left > w->total - w->pos) {
		STAT_ADD(x->h, errors_verify, 1);
		r->err = -EPROTO; /* longer than announced */
		return 0;
	}
	if (left) {
		rc = w->sink(w->ud, buf, left);
		if (rc) {
			r->err = rc < 0 ? rc : -ECANCELED;
			r->done = 0;
			return 0;
		}
		w->pos += left;
		http_keep_tail(x, buf, left);
	}
	return r->done ? 0 : len; /* a 200 past our range: stop it early */
}
