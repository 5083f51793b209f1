/* sigv4.c - AWS Signature Version 4 for S3 requests, as botocore's
 * S3SigV4Auth computes it (see sigv4.h for what is signed). */
#include "fetch/net/sigv4.h"

#include <errno.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#define URL_MAX 8192
#define QUERY_PAIRS_MAX 64
#define VALUE_MAX 4096 /* session tokens run to about 2 KiB */
#define NAME_MAX_LEN 64
#define CANON_MAX (3 * URL_MAX + 16 * VALUE_MAX)

/* ---- a bounded string builder ------------------------------------------- */

struct sb {
	char *buf;
	size_t len, cap;
	int err;
};

static void sb_put(struct sb *b, const char *s, size_t n)
{
	if (b->err)
		return;
	if (n > CANON_MAX - b->len) {
		b->err = -EINVAL;
		return;
	}
	if (b->len + n + 1 > b->cap) {
		size_t want = b->cap ? b->cap * 2 : 1024;
		char *p;
		while (want < b->len + n + 1)
			want *= 2;
		p = realloc(b->buf, want);
		if (!p) {
			b->err = -ENOMEM;
			return;
		}
		b->buf = p;
		b->cap = want;
	}
	memcpy(b->buf + b->len, s, n);
	b->len += n;
	b->buf[b->len] = '\0';
}

static void sb_str(struct sb *b, const char *s)
{
	sb_put(b, s, strlen(s));
}

/* ---- crypto ------------------------------------------------------------- */

static void to_hex(const unsigned char *d, size_t n, char *out)
{
	static const char hex[] = "0123456789abcdef";
	for (size_t i = 0; i < n; i++) {
		out[2 * i] = hex[d[i] >> 4];
		out[2 * i + 1] = hex[d[i] & 15];
	}
	out[2 * n] = '\0';
}

static int sha256_hex(const char *s, size_t n, char out[SIGV4_HEX_LEN + 1])
{
	unsigned char md[EVP_MAX_MD_SIZE];
	unsigned int mdlen = 0;

	if (!EVP_Digest(s, n, md, &mdlen, EVP_sha256(), NULL) || mdlen != 32)
		return -EIO;
	to_hex(md, mdlen, out);
	return 0;
}

static int hmac(const void *key, size_t keylen, const char *msg,
		unsigned char out[32])
{
	unsigned int len = 0;

	if (!HMAC(EVP_sha256(), key, (int)keylen, (const unsigned char *)msg,
		  strlen(msg), out, &len) ||
	    len != 32)
		return -EIO;
	return 0;
}

/* ---- parts of the URL --------------------------------------------------- */

struct url_parts {
	const char *host; /* after "://", host[:port] */
	size_t host_len;
	const char *path; /* up to '?' or '#' */
	size_t path_len;
	const char *query; /* after '?', up to '#' */
	size_t query_len;
	int https;
};

static int split_url(const char *url, struct url_parts *u)
{
	const char *p, *q;

	memset(u, 0, sizeof(*u));
	if (strlen(url) > URL_MAX)
		return -EINVAL;
	if (strncasecmp(url, "https://", 8) == 0)
		u->https = 1, p = url + 8;
	else if (strncasecmp(url, "http://", 7) == 0)
		p = url + 7;
	else
		return -EINVAL;
	u->host = p;
	u->host_len = strcspn(p, "/?#");
	if (u->host_len == 0 || memchr(p, '@', u->host_len))
		return -EINVAL; /* no host, or userinfo: not ours to sign */
	p += u->host_len;
	u->path = p;
	u->path_len = strcspn(p, "?#");
	q = p + u->path_len;
	if (*q == '?') {
		u->query = q + 1;
		u->query_len = strcspn(q + 1, "#");
	}
	for (const char *c = url; *c; c++)
		if ((unsigned char)*c <= 0x20 || *c == 0x7f)
			return -EINVAL;
	return 0;
}

/* The host header botocore derives: lower case, default port dropped. */
static int host_header(const struct url_parts *u, char *out, size_t outlen)
{
	const char *h = u->host, *end = h + u->host_len, *colon = NULL;
	size_t n;

	if (*h == '[') { /* IPv6 literal */
		const char *rb = memchr(h, ']', u->host_len);
		if (!rb)
			return -EINVAL;
		if (rb + 1 < end)
			colon = rb + 1;
	} else {
		colon = memchr(h, ':', u->host_len);
	}
	n = colon ? (size_t)(colon - h) : u->host_len;
	if (colon) {
		const char *port = colon + 1;
		size_t plen = (size_t)(end - port);
		if (*colon != ':' || plen == 0 ||
		    strspn(port, "0123456789") < plen)
			return -EINVAL;
		if (!((u->https && plen == 3 && !memcmp(port, "443", 3)) ||
		      (!u->https && plen == 2 && !memcmp(port, "80", 2))))
			n = u->host_len;
	}
	if (n + 1 > outlen)
		return -EINVAL;
	for (size_t i = 0; i < n; i++)
		out[i] =
			(h[i] >= 'A' && h[i] <= 'Z') ? (char)(h[i] + 32) : h[i];
	out[n] = '\0';
	return 0;
}

/* ---- canonical query string --------------------------------------------- */

struct qpair {
	const char *k, *v;
	size_t kl, vl;
};

static int cmp_span(const char *a, size_t al, const char *b, size_t bl)
{
	int c = memcmp(a, b, al < bl ? al : bl);
	if (c)
		return c;
	return al < bl ? -1 : al > bl;
}

/* botocore sorts (key, value) tuples: key first, then value */
static int cmp_pair(const void *pa, const void *pb)
{
	const struct qpair *a = pa, *b = pb;
	int c = cmp_span(a->k, a->kl, b->k, b->kl);
	return c ? c : cmp_span(a->v, a->vl, b->v, b->vl);
}

static int canonical_query(const struct url_parts *u, struct sb *b)
{
	struct qpair pairs[QUERY_PAIRS_MAX];
	size_t n = 0;
	const char *p = u->query, *end;

	if (!u->query || u->query_len == 0)
		return 0;
	end = u->query + u->query_len;
	for (;;) {
		const char *amp = memchr(p, '&', (size_t)(end - p));
		const char *stop = amp ? amp : end, *eq;
		if (n == QUERY_PAIRS_MAX)
			return -EINVAL;
		eq = memchr(p, '=', (size_t)(stop - p));
		pairs[n].k = p;
		pairs[n].kl = (size_t)((eq ? eq : stop) - p);
		pairs[n].v = eq ? eq + 1 : stop;
		pairs[n].vl = (size_t)(stop - pairs[n].v);
		n++;
		if (!amp)
			break;
		p = amp + 1;
	}
	qsort(pairs, n, sizeof(pairs[0]), cmp_pair);
	for (size_t i = 0; i < n; i++) {
		if (i)
			sb_put(b, "&", 1);
		sb_put(b, pairs[i].k, pairs[i].kl);
		sb_put(b, "=", 1);
		sb_put(b, pairs[i].v, pairs[i].vl);
	}
	return 0;
}

/* ---- canonical headers -------------------------------------------------- */

struct hdr {
	char name[NAME_MAX_LEN];
	const char *value;
};

static int cmp_hdr(const void *pa, const void *pb)
{
	return strcmp(((const struct hdr *)pa)->name,
		      ((const struct hdr *)pb)->name);
}

static int add_hdr(struct hdr *h, size_t *n, const char *name,
		   const char *value)
{
	size_t len = strlen(name);

	if (len == 0 || len >= NAME_MAX_LEN || strlen(value) > VALUE_MAX)
		return -EINVAL;
	for (size_t i = 0; i < len; i++) {
		char c = name[i];
		if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
		      (c >= '0' && c <= '9') || c == '-' || c == '_'))
			return -EINVAL;
		h[*n].name[i] = (c >= 'A' && c <= 'Z') ? (char)(c + 32) : c;
	}
	h[*n].name[len] = '\0';
	for (const char *v = value; *v; v++)
		if (((unsigned char)*v < 0x20 && *v != '\t') ||
		    (unsigned char)*v >= 0x7f)
			return -EINVAL; /* folding rules differ beyond ASCII */
	for (size_t i = 0; i < *n; i++)
		if (strcmp(h[i].name, h[*n].name) == 0)
			return -EINVAL; /* one value per name */
	h[*n].value = value;
	(*n)++;
	return 0;
}

/* "Trimall": outer white space dropped, inner runs folded to one space. */
static void put_trimmed(struct sb *b, const char *v)
{
	int gap = 0, any = 0;

	for (; *v; v++) {
		if (*v == ' ' || *v == '\t') {
			gap = any;
			continue;
		}
		if (gap)
			sb_put(b, " ", 1);
		gap = 0;
		any = 1;
		sb_put(b, v, 1);
	}
}

/* ---- the request -------------------------------------------------------- */

struct parts {
	struct url_parts u;
	char host[512];
	struct hdr h[SIGV4_MAX_HEADERS + 4];
	size_t nh;
	const char *service;
};

static int valid_date(const char *d)
{
	if (strlen(d) != SIGV4_DATE_LEN || d[8] != 'T' || d[15] != 'Z')
		return 0;
	for (int i = 0; i < 15; i++)
		if (i != 8 && (d[i] < '0' || d[i] > '9'))
			return 0;
	return 1;
}

static int valid_token(const char *s, size_t max)
{
	size_t n = s ? strlen(s) : 0;

	if (n == 0 || n > max)
		return 0;
	for (size_t i = 0; i < n; i++)
		if ((unsigned char)s[i] <= 0x20 || (unsigned char)s[i] >= 0x7f)
			return 0;
	return 1;
}

static int gather(const struct sigv4_req *r, const struct sigv4_creds *c,
		  const struct sigv4_result *res, struct parts *p)
{
	int rc;

	p->service = r->service ? r->service : "s3";
	if (!r->method || !valid_token(r->method, 16) ||
	    !valid_token(r->region, 64) || !valid_token(p->service, 64) ||
	    !valid_token(c->access_key, 128) ||
	    !valid_token(c->secret_key, 256) ||
	    (c->token && c->token[0] && !valid_token(c->token, VALUE_MAX)) ||
	    r->nheaders > SIGV4_MAX_HEADERS || strchr(c->access_key, '/') ||
	    strchr(r->region, '/'))
		return -EINVAL;
	rc = split_url(r->url, &p->u);
	if (rc == 0)
		rc = host_header(&p->u, p->host, sizeof(p->host));
	p->nh = 0;
	if (rc == 0)
		rc = add_hdr(p->h, &p->nh, "host", p->host);
	if (rc == 0)
		rc = add_hdr(p->h, &p->nh, "x-amz-date", res->amz_date);
	if (rc == 0)
		rc = add_hdr(p->h, &p->nh, "x-amz-content-sha256",
			     res->payload_hash);
	if (rc == 0 && c->token && c->token[0])
		rc = add_hdr(p->h, &p->nh, "x-amz-security-token", c->token);
	for (size_t i = 0; rc == 0 && i < r->nheaders; i++)
		rc = add_hdr(p->h, &p->nh, r->headers[i].name,
			     r->headers[i].value);
	if (rc == 0)
		qsort(p->h, p->nh, sizeof(p->h[0]), cmp_hdr);
	return rc;
}

static void put_signed_headers(struct sb *b, const struct parts *p)
{
	for (size_t i = 0; i < p->nh; i++) {
		if (i)
			sb_put(b, ";", 1);
		sb_str(b, p->h[i].name);
	}
}

static int build_canonical(const struct sigv4_req *r, const struct parts *p,
			   const struct sigv4_result *res, struct sb *b)
{
	int rc;

	sb_str(b, r->method);
	sb_put(b, "\n", 1);
	sb_put(b, p->u.path, p->u.path_len);
	sb_put(b, "\n", 1);
	rc = canonical_query(&p->u, b);
	if (rc)
		return rc;
	sb_put(b, "\n", 1);
	for (size_t i = 0; i < p->nh; i++) {
		sb_str(b, p->h[i].name);
		sb_put(b, ":", 1);
		put_trimmed(b, p->h[i].value);
		sb_put(b, "\n", 1);
	}
	sb_put(b, "\n", 1);
	put_signed_headers(b, p);
	sb_put(b, "\n", 1);
	sb_str(b, res->payload_hash);
	return b->err;
}

static int build_sts(const struct sigv4_req *r, const struct parts *p,
		     const struct sigv4_result *res, const struct sb *canon,
		     struct sb *b)
{
	char hash[SIGV4_HEX_LEN + 1];
	int rc = sha256_hex(canon->buf, canon->len, hash);

	if (rc)
		return rc;
	sb_str(b, "AWS4-HMAC-SHA256\n");
	sb_str(b, res->amz_date);
	sb_put(b, "\n", 1);
	sb_put(b, res->amz_date, 8);
	sb_put(b, "/", 1);
	sb_str(b, r->region);
	sb_put(b, "/", 1);
	sb_str(b, p->service);
	sb_str(b, "/aws4_request\n");
	sb_str(b, hash);
	return b->err;
}

/* date, payload hash: from the request or defaults */
static int fill_result(const struct sigv4_req *r, struct sigv4_result *res)
{
	if (r->amz_date) {
		if (!valid_date(r->amz_date))
			return -EINVAL;
		memcpy(res->amz_date, r->amz_date, SIGV4_DATE_LEN + 1);
	} else {
		sigv4_now(res->amz_date, 0);
	}
	if (r->payload_hash && strlen(r->payload_hash) != SIGV4_HEX_LEN &&
	    strcmp(r->payload_hash, "UNSIGNED-PAYLOAD") != 0)
		return -EINVAL;
	snprintf(res->payload_hash, sizeof(res->payload_hash), "%s",
		 r->payload_hash ? r->payload_hash : SIGV4_EMPTY_SHA256);
	return 0;
}

/* canonical request and string to sign into two builders */
static int prepare(const struct sigv4_req *r, const struct sigv4_creds *c,
		   struct sigv4_result *res, struct parts *p, struct sb *canon,
		   struct sb *sts)
{
	int rc = fill_result(r, res);

	if (rc == 0)
		rc = gather(r, c, res, p);
	if (rc == 0)
		rc = build_canonical(r, p, res, canon);
	if (rc == 0)
		rc = build_sts(r, p, res, canon, sts);
	return rc;
}

int sigv4_canonical(const struct sigv4_req *req,
		    const struct sigv4_creds *creds, char **canonical,
		    char **string_to_sign)
{
	struct sigv4_result res;
	struct parts p;
	struct sb canon = {0}, sts = {0};
	int rc = prepare(req, creds, &res, &p, &canon, &sts);

	if (rc == 0 && canonical) {
		*canonical = canon.buf;
		canon.buf = NULL;
	}
	if (rc == 0 && string_to_sign) {
		*string_to_sign = sts.buf;
		sts.buf = NULL;
	}
	free(canon.buf);
	free(sts.buf);
	return rc;
}

/* kSigning = HMAC chain over date, region, service, "aws4_request" */
static int signature(const struct sigv4_req *r, const struct parts *p,
		     const struct sigv4_creds *c, const char *date8,
		     const char *sts, char out[SIGV4_HEX_LEN + 1])
{
	char secret[4 + 256 + 1], day[9];
	unsigned char k[32], k2[32];
	int rc;

	snprintf(secret, sizeof(secret), "AWS4%s", c->secret_key);
	snprintf(day, sizeof(day), "%.8s", date8);
	rc = hmac(secret, strlen(secret), day, k);
	if (rc == 0)
		rc = hmac(k, 32, r->region, k2);
	if (rc == 0)
		rc = hmac(k2, 32, p->service, k);
	if (rc == 0)
		rc = hmac(k, 32, "aws4_request", k2);
	if (rc == 0)
		rc = hmac(k2, 32, sts, k);
	if (rc == 0)
		to_hex(k, 32, out);
	OPENSSL_cleanse(secret, sizeof(secret));
	OPENSSL_cleanse(k2, sizeof(k2));
	OPENSSL_cleanse(k, sizeof(k));
	return rc;
}

int sigv4_sign(const struct sigv4_req *req, const struct sigv4_creds *creds,
	       struct sigv4_result *out)
{
	struct parts p;
	struct sb canon = {0}, sts = {0}, auth = {0};
	char sig[SIGV4_HEX_LEN + 1];
	int rc = prepare(req, creds, out, &p, &canon, &sts);

	if (rc == 0)
		rc = signature(req, &p, creds, out->amz_date, sts.buf, sig);
	if (rc == 0) {
		sb_str(&auth, "AWS4-HMAC-SHA256 Credential=");
		sb_str(&auth, creds->access_key);
		sb_put(&auth, "/", 1);
		sb_put(&auth, out->amz_date, 8);
		sb_put(&auth, "/", 1);
		sb_str(&auth, req->region);
		sb_put(&auth, "/", 1);
		sb_str(&auth, p.service);
		sb_str(&auth, "/aws4_request, SignedHeaders=");
		put_signed_headers(&auth, &p);
		sb_str(&auth, ", Signature=");
		sb_str(&auth, sig);
		rc = auth.err;
	}
	if (rc == 0 && auth.len >= sizeof(out->authorization))
		rc = -EINVAL;
	if (rc == 0)
		memcpy(out->authorization, auth.buf, auth.len + 1);
	free(canon.buf);
	free(sts.buf);
	free(auth.buf);
	return rc;
}

long sigv4_uri_encode(const char *s, size_t len, int keep_slash, char *out,
		      size_t outlen)
{
	static const char hex[] = "0123456789ABCDEF";
	size_t at = 0;

	for (size_t i = 0; i < len; i++) {
		unsigned char c = (unsigned char)s[i];
		int plain = (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') ||
			    (c >= '0' && c <= '9') || c == '-' || c == '_' ||
			    c == '.' || c == '~' || (keep_slash && c == '/');
		if (at + (plain ? 1 : 3) >= outlen)
			return -ENAMETOOLONG;
		if (plain) {
			out[at++] = (char)c;
		} else {
			out[at++] = '%';
			out[at++] = hex[c >> 4];
			out[at++] = hex[c & 15];
		}
	}
	if (at >= outlen)
		return -ENAMETOOLONG;
	out[at] = '\0';
	return (long)at;
}

void sigv4_now(char out[SIGV4_DATE_LEN + 1], long skew_s)
{
	time_t t = time(NULL) + skew_s;
	struct tm tm;

	gmtime_r(&t, &tm);
	strftime(out, SIGV4_DATE_LEN + 1, "%Y%m%dT%H%M%SZ", &tm);
}
