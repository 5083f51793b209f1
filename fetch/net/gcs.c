/* gcs.c - gs:// sources: path-style addressing, bearer tokens through
 * http's auth hooks, list-type=2 listing and GCS error codes. */
#include "fetch/net/gcs.h"

#include "common/log.h"
#include "common/util.h"
#include "fetch/net/bucket.h"
#include "fetch/net/cred_http.h"
#include "fetch/net/gcs_creds.h"
#include "fetch/net/http.h"
#include "fetch/net/s3.h"
#include "fetch/net/shardlist.h"
#include "fetch/net/sigv4.h"
#include "fetch/net/xml_tag.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#define BUCKET_MAX 222
#define KEY_MAX 1024 /* GCS's own limit */

struct gcs {
	char *base; /* scheme://authority[/path], without trailing '/' */
	int no_sign;
	struct gcs_creds *creds; /* NULL with no_sign */
	struct http_auth auth, next;
	pthread_mutex_t err_lock; /* guards last_err; leaf lock */
	char last_err[400];
};

/* Set while this thread lists through s3_list_shards: its bucket-level
 * "s3://B?list-type=2..." requests are then GCS's (the XML API speaks the
 * same listing), so the S3 page reader serves gs:// too. */
static _Thread_local int listing;

/* ---- addressing --------------------------------------------------------- */

static int bucket_ok(const char *b, size_t n)
{
	if (n < 3 || n > BUCKET_MAX)
		return 0;
	for (size_t i = 0; i < n; i++)
		if (!((b[i] >= 'a' && b[i] <= 'z') ||
		      (b[i] >= '0' && b[i] <= '9') || b[i] == '-' ||
		      b[i] == '_' || b[i] == '.'))
			return 0;
	return 1;
}

int gcs_is_url(const char *s)
{
	if (!s || strncasecmp(s, "gs://", 5) != 0)
		return 0;
	return bucket_ok(s + 5, strcspn(s + 5, "/?"));
}

int gcs_is_listing(const char *source)
{
	const char *last;

	if (!gcs_is_url(source))
		return 0;
	last = strrchr(source, '/');
	if (!last || last < source + 5)
		return 0;
	return last[1] == '\0' || strchr(last + 1, '*') != NULL;
}

/* ENDPOINT/BUCKET + rest (rest: "?query" or "/encoded-key") */
static char *bucket_url(const struct gcs *g, const char *b, size_t bn,
			const char *rest)
{
	size_t len = strlen(g->base) + bn + strlen(rest) + 3;
	char *u = xmalloc(len);

	snprintf(u, len, "%s/%.*s%s", g->base, (int)bn, b, rest);
	return u;
}

/* "scheme://B?QUERY" (after a 5-byte scheme) as ENDPOINT/B?QUERY */
static int map_bucket(struct gcs *g, const char *url, char **out)
{
	const char *b = url + 5;
	size_t bn = strcspn(b, "/?");

	for (const char *c = b + bn; *c; c++)
		if ((unsigned char)*c <= 0x20 || *c == 0x7f)
			return -EINVAL;
	*out = bucket_url(g, b, bn, b[bn] ? b + bn : "");
	return 0;
}

static int map_url(void *ud, const char *url, char **out)
{
	struct gcs *g = ud;
	const char *b, *p;
	size_t bn;
	char *key;
	long n;

	*out = NULL;
	if (listing && s3_is_url(url) && url[5 + strcspn(url + 5, "/?")] == '?')
		return map_bucket(g, url, out);
	if (!gcs_is_url(url))
		return g->next.map_url ? g->next.map_url(g->next.ud, url, out)
				       : 0;
	b = url + 5;
	bn = strcspn(b, "/?");
	p = b + bn;
	if (*p != '/')
		return map_bucket(g, url, out);
	if (strlen(p) > KEY_MAX + 1)
		return -ENAMETOOLONG;
	key = xmalloc(3 * KEY_MAX + 8);
	n = sigv4_uri_encode(p, strlen(p), 1, key, 3 * KEY_MAX + 8);
	if (n >= 0)
		*out = bucket_url(g, b, bn, key);
	free(key);
	return n < 0 ? (int)n : 0;
}

/* A mapped URL of ours (not of the next hooks'). */
static int ours(const struct gcs *g, const char *url)
{
	size_t n = strlen(g->base);

	return strncmp(url, g->base, n) == 0 && url[n] == '/';
}

/* ---- signing ------------------------------------------------------------ */

static int sign(void *ud, const struct http_req_info *ri, char *buf,
		size_t buflen)
{
	struct gcs *g = ud;
	struct gcs_token *t;
	int n;

	if (!ours(g, ri->url))
		return g->next.sign ? g->next.sign(g->next.ud, ri, buf, buflen)
				    : 0;
	buf[0] = '\0';
	if (g->no_sign)
		return 0;
	t = xmalloc(sizeof(*t));
	gcs_creds_get(g->creds, t);
	n = snprintf(buf, buflen, "Authorization: Bearer %s\n", t->token);
	explicit_bzero(t, sizeof(*t));
	free(t);
	if (n < 0 || (size_t)n >= buflen) {
		explicit_bzero(buf, buflen);
		return -ENAMETOOLONG;
	}
	return 0;
}

/* ---- errors ------------------------------------------------------------- */

/* 401: the token was refused (expired early, revoked): a new one, and the
 * request once more (http honours that once per call). */
static int on_unauthorized(struct gcs *g)
{
	struct gcs_token *t;
	int rc;

	if (g->no_sign)
		return 0;
	t = xmalloc(sizeof(*t));
	gcs_creds_get(g->creds, t);
	rc = gcs_creds_refresh(g->creds, t->token);
	explicit_bzero(t, sizeof(*t));
	free(t);
	log_info("gcs: a request was refused with 401: %s",
		 rc ? "no new token" : "trying once more with a new token");
	return rc == 0;
}

static void note_error(struct gcs *g, const char *url, long status,
		       const char *body)
{
	char code[64], msg[200], red[512];
	const char *why = NULL;

	if (xml_tag_text(body, "Code", code, sizeof(code)) != 0)
		code[0] = '\0'; /* no (readable) code: the status speaks */
	if (xml_tag_text(body, "Message", msg, sizeof(msg)) != 0)
		msg[0] = '\0';
	if (code[0])
		/* Only why is used here, for the message. */
		IGNORE_RESULT(s3_code_errno(code, &why));
	if (!why && status == 401)
		why = "the access token was refused (expired or revoked)";
	if (!why && !code[0] && status == 404)
		why = "not found (no such key or bucket)";
	if (!why && !code[0] && status == 403)
		why = "access denied (the account lacks storage.objects.get "
		      "or storage.objects.list)";
	log_msg(status == 404 || status >= 500 ? LOG_LEVEL_DEBUG
					       : LOG_LEVEL_WARN,
		"gcs: %s: HTTP %ld %s%s%s", http_redact(url, red, sizeof(red)),
		status, code[0] ? code : "(no error code)",
		why || msg[0] ? ": " : "", why ? why : msg);
	if (status == 404 && strstr(url, ".echofs-index"))
		return; /* an index missing beside the shards is normal */
	pthread_mutex_lock(&g->err_lock);
	snprintf(g->last_err, sizeof(g->last_err), "GCS %s%s%s",
		 code[0]	 ? code
		 : status == 401 ? "401"
				 : "error",
		 why || msg[0] ? ": " : "", why ? why : msg);
	pthread_mutex_unlock(&g->err_lock);
}

static int on_failed(void *ud, const char *url, long status, const char *body,
		     size_t len)
{
	struct gcs *g = ud;

	if (!ours(g, url))
		return g->next.failed ? g->next.failed(g->next.ud, url, status,
						       body, len)
				      : 0;
	if (status >= 300 && status < 400)
		return 0; /* redirects that http.c follows */
	if (status == 401 && on_unauthorized(g))
		return 1;
	note_error(g, url, status, body);
	return 0;
}

/* GCS reads no response header; the next hooks may (http.c gives every
 * mapped response's headers, naming no URL). */
static void on_header(void *ud, const char *name, size_t nlen,
		      const char *value, size_t vlen)
{
	struct gcs *g = ud;

	if (g->next.header)
		g->next.header(g->next.ud, name, nlen, value, vlen);
}

const char *gcs_last_error(struct gcs *g, char *buf, size_t buflen)
{
	pthread_mutex_lock(&g->err_lock);
	snprintf(buf, buflen, "%s", g->last_err);
	pthread_mutex_unlock(&g->err_lock);
	return buf;
}

/* ---- listing ------------------------------------------------------------ */

/* "s3://" -> "gs://" (or back) in place wherever it occurs in s. */
static void swap_scheme(char *s, const char *from, const char *to)
{
	for (char *p = s; (p = strstr(p, from)); p += 5)
		memcpy(p, to, 2);
}

int gcs_list_shards(struct http *h, const char *source, size_t max,
		    struct shardlist *out, char *err, size_t errlen)
{
	char *src = xstrdup(source);
	int rc;

	memcpy(src, "s3", 2);
	listing = 1;
	rc = s3_list_shards(h, src, max, out, err, errlen);
	listing = 0;
	free(src);
	if (rc) {
		swap_scheme(err, "s3://", "gs://");
		return rc;
	}
	for (size_t i = 0; i < out->n; i++)
		memcpy(out->urls[i], "gs", 2);
	return 0;
}

/* ---- set-up ------------------------------------------------------------- */

static int set_endpoint(struct gcs *g, const char *ep, char *err, size_t errlen)
{
	size_t skip = strncasecmp(ep, "https://", 8) == 0  ? 8
		      : strncasecmp(ep, "http://", 7) == 0 ? 7
							   : 0;
	size_t an = skip ? strcspn(ep + skip, "/?#") : 0, n;

	if (!an || memchr(ep + skip, '@', an) || strpbrk(ep + skip, "?#")) {
		snprintf(err, errlen,
			 "bad GCS endpoint (want "
			 "http(s)://host[:port][/path], without user or "
			 "query)");
		return -EINVAL;
	}
	n = strlen(ep);
	while (n > skip + an && ep[n - 1] == '/')
		n--;
	g->base = xstrndup(ep, n);
	return 0;
}

int gcs_open(const struct gcs_opts *o, struct gcs **out, char *err,
	     size_t errlen)
{
	struct gcs *g = xcalloc(1, sizeof(*g));
	const char *emu = getenv("STORAGE_EMULATOR_HOST");
	char ep[1024];
	int r;

	pthread_mutex_init(&g->err_lock, NULL);
	g->no_sign = o->no_sign;
	/* the option, else the emulator variable Google's libraries honour */
	if (o->endpoint && o->endpoint[0])
		snprintf(ep, sizeof(ep), "%s", o->endpoint);
	else if (emu && emu[0])
		snprintf(ep, sizeof(ep), "%s%s",
			 strstr(emu, "://") ? "" : "http://", emu);
	else
		snprintf(ep, sizeof(ep), "%s", GCS_ENDPOINT);
	*out = NULL;
	r = set_endpoint(g, ep, err, errlen);
	if (r)
		goto fail;
	if (!g->no_sign) {
		struct cred_tls tls = {o->ca_file, o->ca_path};

		r = gcs_creds_open(&tls, &g->creds, err, errlen);
		if (r)
			goto fail;
		log_info("gcs: token from %s", gcs_creds_source(g->creds));
	}
	g->auth = (struct http_auth){.map_url = map_url,
				     .sign = sign,
				     .failed = on_failed,
				     .header = on_header,
				     .ud = g};
	*out = g;
	return 0;
fail:
	gcs_free(g);
	return r;
}

void gcs_free(struct gcs *g)
{
	if (!g)
		return;
	gcs_creds_free(g->creds);
	free(g->base);
	pthread_mutex_destroy(&g->err_lock);
	free(g);
}

const struct http_auth *gcs_http_auth(struct gcs *g,
				      const struct http_auth *next)
{
	if (next)
		g->next = *next;
	return &g->auth;
}

/* ---- the bucket backend (bucket.h) -------------------------------------- */

static int b_takes(const struct bucket_conf *c)
{
	(void)c;
	return 0; /* endpoint= and no_sign= are everyone's */
}

static int b_open(const struct bucket_conf *c, void **out, char *err,
		  size_t errlen)
{
	struct gcs_opts o = {.endpoint = c->endpoint,
			     .no_sign = c->no_sign,
			     .ca_file = c->ca_file,
			     .ca_path = c->ca_path};
	struct gcs *g;
	int r = gcs_open(&o, &g, err, errlen);

	*out = g;
	return r;
}

static void b_free(void *b)
{
	gcs_free(b);
}

static const struct http_auth *b_hooks(void *b, const struct http_auth *next)
{
	return gcs_http_auth(b, next);
}

static const char *b_last_error(void *b, char *buf, size_t buflen)
{
	return gcs_last_error(b, buf, buflen);
}

const struct bucket_ops bucket_gs = {
	.scheme = "gs",
	.is_url = gcs_is_url,
	.is_listing = gcs_is_listing,
	.takes = b_takes,
	.open = b_open,
	.free = b_free,
	.hooks = b_hooks,
	.list = gcs_list_shards,
	.last_error = b_last_error,
};
