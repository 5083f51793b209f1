/* s3.c - s3:// sources: addressing, per-request SigV4 signing through
 * http's auth hooks, ListObjectsV2 listing and S3 error codes. */
#include "fetch/net/s3.h"

#include "common/log.h"
#include "common/util.h"
#include "fetch/net/aws_creds.h"
#include "fetch/net/bucket.h"
#include "fetch/net/cred_http.h"
#include "fetch/net/http.h"
#include "fetch/net/shardlist.h"
#include "fetch/net/sigv4.h"
#include "fetch/net/xml_tag.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#define BUCKET_MAX 255
#define KEY_MAX 1024 /* S3's own limit */

struct s3 {
	char *scheme;	 /* "https://" */
	char *authority; /* host[:port] */
	char *base;	 /* endpoint path without trailing '/', often "" */
	int host_is_ip;	 /* IP literal or localhost: no virtual hosting */
	int path_style, requester_pays, no_sign;
	int region_auto;   /* none given: found from the bucket (see below) */
	int endpoint_auto; /* AWS's own, named after the region */
	int region_asked;  /* s3_find_region has run */
	char region[64];   /* changes only under err_lock (region_auto) */
	char seen_region[64];	 /* last x-amz-bucket-region; under err_lock */
	struct aws_creds *creds; /* NULL with no_sign */
	struct http_auth auth;
	struct http_auth next; /* hooks for URLs that are not ours */
	_Atomic long
		skew_s; /* server clock minus ours (RequestTimeTooSkewed) */
	pthread_mutex_t err_lock; /* guards last_err, region; leaf lock */
	char last_err[320];
};

/* ---- error codes -------------------------------------------------------- */

struct code_map {
	const char *code;
	int err;
	const char *why;
};

static const struct code_map codes[] = {
	{"AccessDenied", -EACCES,
	 "access denied (check the policy or "
	 "requester_pays=1)"},
	{"AllAccessDisabled", -EACCES, "all access to this object is disabled"},
	{"SignatureDoesNotMatch", -EACCES,
	 "signature does not match: wrong secret key"},
	{"InvalidAccessKeyId", -EACCES, "unknown access key id"},
	{"ExpiredToken", -EACCES, "the session token has expired"},
	{"InvalidToken", -EACCES, "the session token is malformed or invalid"},
	{"TokenRefreshRequired", -EACCES,
	 "the session token must be refreshed"},
	{"RequestTimeTooSkewed", -EACCES,
	 "the clock differs from the server's by more than 15 minutes"},
	{"AuthorizationHeaderMalformed", -EINVAL,
	 "wrong region for this bucket (set -o region=)"},
	{"PermanentRedirect", -EINVAL, "the bucket is in another region"},
	{"NoSuchBucket", -ENOENT, "no such bucket"},
	{"NoSuchKey", -ENOENT, "no such key"},
	{"InvalidBucketName", -EINVAL, "invalid bucket name"},
	{"SlowDown", -EAGAIN, "throttled by the server (retried)"},
	{"InternalError", -EIO, "server error (retried)"},
};

int s3_code_errno(const char *code, const char **why)
{
	for (size_t i = 0; i < ARRAY_SIZE(codes); i++)
		if (strcmp(code, codes[i].code) == 0) {
			if (why)
				*why = codes[i].why;
			return codes[i].err;
		}
	if (why)
		*why = NULL;
	return -EIO;
}

/* http's failed hook: one line naming S3's reason (never a header). */
/* RequestTimeTooSkewed names the server's time: sign with its clock from
 * now on. Returns 1 (another attempt, signed now) whenever the server's
 * time could be read: the refused request may have been signed before
 * another transfer's correction, or before a step of this machine's clock
 * or the server's, when the skew it finds now is the old one. http tries
 * once more per call, so a server that refuses every time costs one
 * request more. */
static int correct_skew(struct s3 *s, const char *body)
{
	char st[64];
	struct tm tm = {0};
	long skew;

	if (xml_tag_text(body, "ServerTime", st, sizeof(st)) ||
	    !strptime(st, "%Y-%m-%dT%H:%M:%S", &tm))
		return 0;
	skew = (long)(timegm(&tm) - time(NULL));
	atomic_store(&s->skew_s, skew);
	log_warn("s3: the server's clock is %+ld s from ours: signing with "
		 "the server's time",
		 skew);
	return 1;
}

/* ExpiredToken / TokenRefreshRequired: the refresher renews ahead of the
 * expiry on this machine's clock, which the server's may not share (or
 * this clock was stepped back). New credentials now, and the request once
 * more (http honours that once per call). */
static int on_expired(struct s3 *s)
{
	struct aws_creds_value *v;
	int rc;

	if (!s->creds)
		return 0;
	v = xmalloc(sizeof(*v));
	aws_creds_get(s->creds, v);
	rc = aws_creds_refresh(s->creds, v);
	explicit_bzero(v, sizeof(*v));
	free(v);
	return rc == 0;
}

/* ---- the bucket's region ------------------------------------------------
 * Without -o region=, AWS_REGION, AWS_DEFAULT_REGION or a profile region,
 * echofs does what the AWS SDKs do: one HEAD on the bucket at mount time
 * (s3_find_region) and the x-amz-bucket-region header of its reply, which
 * AWS sends on 200, 301, 400 and 403 alike. A request later refused with
 * AuthorizationHeaderMalformed or PermanentRedirect naming another region
 * switches the signing region and is tried once more. A region the user
 * set is never changed: a mismatch fails naming the right one. */

static int region_ok(const char *r)
{
	size_t n = strlen(r);

	if (n == 0 || n >= 64)
		return 0;
	for (size_t i = 0; i < n; i++)
		if (!((r[i] >= 'a' && r[i] <= 'z') ||
		      (r[i] >= '0' && r[i] <= '9') || r[i] == '-'))
			return 0;
	return 1;
}

static void region_copy(struct s3 *s, char out[64])
{
	pthread_mutex_lock(&s->err_lock);
	memcpy(out, s->region, 64);
	pthread_mutex_unlock(&s->err_lock);
}

/* Signs for want from now on; 1 if that changed the region. */
static int region_switch(struct s3 *s, const char *want)
{
	int changed = 0;

	if (!region_ok(want))
		return 0;
	pthread_mutex_lock(&s->err_lock);
	if (strcmp(s->region, want) != 0) {
		snprintf(s->region, sizeof(s->region), "%s", want);
		changed = 1;
	}
	pthread_mutex_unlock(&s->err_lock);
	if (changed)
		log_info("s3: the bucket is in region %s: signing for it",
			 want);
	return changed;
}

static void on_header(void *ud, const char *name, size_t nlen,
		      const char *value, size_t vlen)
{
	struct s3 *s = ud;
	char r[64];

	/* every mapped response's headers come here (http.c names no URL):
	 * the next hooks see them too */
	if (s->next.header)
		s->next.header(s->next.ud, name, nlen, value, vlen);
	if (nlen != 19 || strncasecmp(name, "x-amz-bucket-region", 19) != 0 ||
	    vlen == 0 || vlen >= sizeof(r))
		return;
	memcpy(r, value, vlen);
	r[vlen] = '\0';
	if (!region_ok(r))
		return;
	pthread_mutex_lock(&s->err_lock);
	memcpy(s->seen_region, r, vlen + 1);
	pthread_mutex_unlock(&s->err_lock);
}

/* A wrong-region refusal: the region from its body, else its header. */
static int correct_region(struct s3 *s, long status, const char *code,
			  const char *body)
{
	char want[64] = "";

	if (!s->region_auto ||
	    !(strcmp(code, "AuthorizationHeaderMalformed") == 0 ||
	      strcmp(code, "PermanentRedirect") == 0 ||
	      (!code[0] && (status == 301 || status == 400))))
		return 0;
	if (xml_tag_text(body, "Region", want, sizeof(want))) {
		pthread_mutex_lock(&s->err_lock);
		memcpy(want, s->seen_region, sizeof(want));
		pthread_mutex_unlock(&s->err_lock);
	}
	return region_switch(s, want);
}

static int ours(const struct s3 *s, const char *url);

static int on_failed(void *ud, const char *url, long status, const char *body,
		     size_t len)
{
	struct s3 *s = ud;
	char code[64] = "", msg[256] = "", where[128] = "", red[512];
	const char *why = NULL;
	enum log_level lvl = LOG_LEVEL_WARN;

	/* url may be a redirect target elsewhere: without next hooks, the
	 * refusal is ours to read */
	if (!ours(s, url) && s->next.failed)
		return s->next.failed(s->next.ud, url, status, body, len);
	if (status >= 300 && status < 400 && status != 301)
		return 0; /* redirects that http.c follows */
	if (xml_tag_text(body, "Code", code, sizeof(code)) != 0)
		code[0] = '\0'; /* no (readable) code: the status speaks */
	if (strcmp(code, "RequestTimeTooSkewed") == 0 && correct_skew(s, body))
		return 1;
	if ((strcmp(code, "ExpiredToken") == 0 ||
	     strcmp(code, "TokenRefreshRequired") == 0) &&
	    on_expired(s))
		return 1;
	if (correct_region(s, status, code, body))
		return 1;
	if (xml_tag_text(body, "Message", msg, sizeof(msg)) != 0)
		msg[0] = '\0';
	if (xml_tag_text(body, "Region", where, sizeof(where)) &&
	    xml_tag_text(body, "Endpoint", where, sizeof(where)))
		where[0] = '\0';
	if (code[0])
		/* Only why is used here, for the message. */
		IGNORE_RESULT(s3_code_errno(code, &why));
	if (!code[0] && status == 404)
		why = "not found (no such key or bucket)";
	if (status == 404 || status == 503 || status >= 500)
		lvl = LOG_LEVEL_DEBUG; /* absent index; retried errors */
	/* an index missing beside the shards is normal: not a reason */
	if (status == 404 && strstr(url, ".echofs-index"))
		goto log;
	pthread_mutex_lock(&s->err_lock);
	snprintf(s->last_err, sizeof(s->last_err), "S3 %s%s%s%s%s%s",
		 code[0] ? code : "error", why || msg[0] ? ": " : "",
		 why ? why : msg, where[0] ? " (server says: " : "", where,
		 where[0] ? ")" : "");
	pthread_mutex_unlock(&s->err_lock);
log:
	log_msg(lvl, "s3: %s: HTTP %ld %s%s%s%s%s%s",
		http_redact(url, red, sizeof(red)), status,
		code[0] ? code : "(no error code)", why || msg[0] ? ": " : "",
		why ? why : msg, where[0] ? " (server says: " : "", where,
		where[0] ? ")" : "");
	return 0;
}

const char *s3_last_error(struct s3 *s, char *buf, size_t buflen)
{
	pthread_mutex_lock(&s->err_lock);
	snprintf(buf, buflen, "%s", s->last_err);
	pthread_mutex_unlock(&s->err_lock);
	return buf;
}

/* ---- addressing --------------------------------------------------------- */

static int bucket_char_ok(char c)
{
	return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
	       (c >= '0' && c <= '9') || c == '-' || c == '.' || c == '_';
}

/* Virtual hosting needs a DNS label-safe name (and no dot under TLS: the
 * wildcard certificate covers one label). */
static int virtual_ok(const struct s3 *s, const char *b, size_t n)
{
	if (s->path_style || s->host_is_ip || n < 3 || n > 63)
		return 0;
	for (size_t i = 0; i < n; i++)
		if (!((b[i] >= 'a' && b[i] <= 'z') ||
		      (b[i] >= '0' && b[i] <= '9') || b[i] == '-' ||
		      (b[i] == '.' && strcmp(s->scheme, "http://") == 0)))
			return 0;
	return b[0] != '-' && b[n - 1] != '-';
}

int s3_is_url(const char *s)
{
	size_t n;

	if (!s || strncasecmp(s, "s3://", 5) != 0)
		return 0;
	n = strcspn(s + 5, "/?");
	if (n == 0 || n > BUCKET_MAX)
		return 0;
	for (size_t i = 0; i < n; i++)
		if (!bucket_char_ok(s[5 + i]))
			return 0;
	return 1;
}

/* "scheme authority base" + bucket part + rest */
static char *bucket_url(const struct s3 *s, const char *b, size_t bn,
			const char *rest)
{
	size_t len = strlen(s->scheme) + strlen(s->authority) +
		     strlen(s->base) + bn + strlen(rest) + 4;
	char *u = xmalloc(len);

	if (virtual_ok(s, b, bn))
		snprintf(u, len, "%s%.*s.%s%s%s", s->scheme, (int)bn, b,
			 s->authority, s->base, rest[0] == '?' ? "/" : "");
	else
		snprintf(u, len, "%s%s%s/%.*s", s->scheme, s->authority,
			 s->base, (int)bn, b);
	/* rest is "?query" or "/encoded-key" */
	memcpy(u + strlen(u), rest, strlen(rest) + 1);
	return u;
}

static int map_url(void *ud, const char *url, char **out)
{
	struct s3 *s = ud;
	const char *b, *p;
	size_t bn;
	char *key;
	long n;

	*out = NULL;
	if (!s3_is_url(url))
		return s->next.map_url ? s->next.map_url(s->next.ud, url, out)
				       : 0;
	b = url + 5;
	bn = strcspn(b, "/?");
	p = b + bn;
	if (*p == '?' || *p == '\0') {
		for (const char *c = p; *c; c++)
			if ((unsigned char)*c <= 0x20 || *c == 0x7f)
				return -EINVAL;
		*out = bucket_url(s, b, bn, *p ? p : "/");
		return 0;
	}
	if (strlen(p) > KEY_MAX + 1)
		return -ENAMETOOLONG;
	key = xmalloc(3 * KEY_MAX + 8);
	n = sigv4_uri_encode(p, strlen(p), 1, key, 3 * KEY_MAX + 8);
	if (n >= 0)
		*out = bucket_url(s, b, bn, key);
	free(key);
	return n < 0 ? (int)n : 0;
}

/* A mapped URL of ours: the endpoint's scheme, its authority (after a
 * bucket label when virtual-hosted) and its base path. */
static int ours(const struct s3 *s, const char *url)
{
	size_t n = strlen(s->scheme), an = strlen(s->authority), hn;
	const char *host = url + n;

	if (strncasecmp(url, s->scheme, n) != 0)
		return 0;
	hn = strcspn(host, "/?");
	if (hn < an || strncasecmp(host + hn - an, s->authority, an) != 0 ||
	    (hn > an && host[hn - an - 1] != '.'))
		return 0;
	return strncmp(host + hn, s->base, strlen(s->base)) == 0;
}

/* ---- signing ------------------------------------------------------------ */

static int put_line(char *buf, size_t buflen, size_t *at, const char *name,
		    const char *value)
{
	int n = snprintf(buf + *at, buflen - *at, "%s: %s\n", name, value);

	if (n < 0 || (size_t)n >= buflen - *at)
		return -ENAMETOOLONG;
	*at += (size_t)n;
	return 0;
}

static int sign_into(struct s3 *s, const struct http_req_info *ri,
		     const struct aws_creds_value *v, char *buf, size_t buflen)
{
	struct sigv4_header hs[2];
	struct sigv4_creds c = {v->access_key, v->secret_key, v->token};
	char region[64];
	struct sigv4_req r = {.method = ri->method,
			      .url = ri->url,
			      .region = region,
			      .headers = hs};
	struct sigv4_result res;
	char date[SIGV4_DATE_LEN + 1];
	size_t at = 0;
	int rc;

	region_copy(s, region);
	if (ri->range)
		hs[r.nheaders++] = (struct sigv4_header){"range", ri->range};
	if (s->requester_pays)
		hs[r.nheaders++] = (struct sigv4_header){"x-amz-request-payer",
							 "requester"};
	sigv4_now(date, atomic_load(&s->skew_s));
	r.amz_date = date;
	rc = sigv4_sign(&r, &c, &res);
	if (rc == 0)
		rc = put_line(buf, buflen, &at, "x-amz-date", res.amz_date);
	if (rc == 0)
		rc = put_line(buf, buflen, &at, "x-amz-content-sha256",
			      res.payload_hash);
	if (rc == 0 && v->token[0])
		rc = put_line(buf, buflen, &at, "x-amz-security-token",
			      v->token);
	if (rc == 0 && s->requester_pays)
		rc = put_line(buf, buflen, &at, "x-amz-request-payer",
			      "requester");
	if (rc == 0)
		rc = put_line(buf, buflen, &at, "Authorization",
			      res.authorization);
	explicit_bzero(&res, sizeof(res));
	return rc;
}

static int sign(void *ud, const struct http_req_info *ri, char *buf,
		size_t buflen)
{
	struct s3 *s = ud;
	struct aws_creds_value *v;
	int rc;

	buf[0] = '\0';
	if (!ours(s, ri->url))
		return s->next.sign ? s->next.sign(s->next.ud, ri, buf, buflen)
				    : 0;
	if (s->no_sign) {
		size_t at = 0;
		return s->requester_pays
			       ? put_line(buf, buflen, &at,
					  "x-amz-request-payer", "requester")
			       : 0;
	}
	v = xmalloc(sizeof(*v));
	aws_creds_get(s->creds, v);
	rc = sign_into(s, ri, v, buf, buflen);
	explicit_bzero(v, sizeof(*v));
	free(v);
	return rc;
}

/* ---- set-up ------------------------------------------------------------- */

static int is_ip_host(const char *a, size_t n)
{
	if (n && a[0] == '[')
		return 1;
	if (n >= 9 && strncasecmp(a, "localhost", 9) == 0 &&
	    (n == 9 || a[9] == ':'))
		return 1;
	for (size_t i = 0; i < n && a[i] != ':'; i++)
		if (!((a[i] >= '0' && a[i] <= '9') || a[i] == '.'))
			return 0;
	return 1;
}

static int set_endpoint(struct s3 *s, const char *ep, char *err, size_t errlen)
{
	const char *a;
	size_t an, bl;

	if (strncasecmp(ep, "https://", 8) == 0)
		s->scheme = xstrdup("https://"), a = ep + 8;
	else if (strncasecmp(ep, "http://", 7) == 0)
		s->scheme = xstrdup("http://"), a = ep + 7;
	else
		goto bad;
	an = strcspn(a, "/?#");
	if (an == 0 || memchr(a, '@', an) || a[an] == '?' || a[an] == '#')
		goto bad;
	s->authority = xstrndup(a, an);
	bl = strlen(a + an);
	while (bl && a[an + bl - 1] == '/')
		bl--;
	s->base = xstrndup(a + an, bl);
	s->host_is_ip = is_ip_host(a, an);
	return 0;
bad:
	snprintf(err, errlen,
		 "bad S3 endpoint (want http(s)://host[:port][/path], "
		 "without user or query)");
	return -EINVAL;
}

/* option, then the environment, then the profile */
static void pick(const char *opt, const char *env1, const char *env2,
		 const char *profile, const char *key, char *out, size_t outlen)
{
	const char *v = opt && opt[0] ? opt : NULL;

	if (!v && env1 && getenv(env1) && getenv(env1)[0])
		v = getenv(env1);
	if (!v && env2 && getenv(env2) && getenv(env2)[0])
		v = getenv(env2);
	out[0] = '\0';
	if (v)
		snprintf(out, outlen, "%s", v);
	else if (aws_profile_setting(profile, key, out, outlen) != 0)
		out[0] = '\0';
}

int s3_open(const struct s3_opts *o, struct s3 **out, char *err, size_t errlen)
{
	struct s3 *s = xcalloc(1, sizeof(*s));
	char ep[1024];
	int r;

	pthread_mutex_init(&s->err_lock, NULL);
	s->path_style = o->path_style;
	s->requester_pays = o->requester_pays;
	s->no_sign = o->no_sign;
	pick(o->region, "AWS_REGION", "AWS_DEFAULT_REGION", o->profile,
	     "region", s->region, sizeof(s->region));
	s->region_auto = !s->region[0];
	if (!s->region[0])
		snprintf(s->region, sizeof(s->region), "us-east-1");
	pick(o->endpoint, "AWS_ENDPOINT_URL_S3", "AWS_ENDPOINT_URL", o->profile,
	     "endpoint_url", ep, sizeof(ep));
	s->endpoint_auto = !ep[0];
	if (!ep[0])
		snprintf(ep, sizeof(ep), "https://s3.%s.amazonaws.com",
			 s->region);
	*out = NULL;
	r = set_endpoint(s, ep, err, errlen);
	if (r)
		goto fail;
	for (const char *c = s->region; *c; c++)
		if (!bucket_char_ok(*c) || *c == '.') {
			snprintf(err, errlen, "bad S3 region");
			r = -EINVAL;
			goto fail;
		}
	if (!s->no_sign) {
		struct cred_tls tls = {o->ca_file, o->ca_path};

		r = aws_creds_open(o->profile, &tls, &s->creds, err, errlen);
		if (r)
			goto fail;
		log_info("s3: credentials from %s, region %s%s",
			 aws_creds_source(s->creds), s->region,
			 s->region_auto ? " until the bucket names its own"
					: "");
	}
	s->auth = (struct http_auth){.map_url = map_url,
				     .sign = sign,
				     .failed = on_failed,
				     .header = on_header,
				     .ud = s};
	*out = s;
	return 0;
fail:
	s3_free(s);
	return r;
}

void s3_free(struct s3 *s)
{
	if (!s)
		return;
	aws_creds_free(s->creds);
	free(s->scheme);
	free(s->authority);
	free(s->base);
	pthread_mutex_destroy(&s->err_lock);
	free(s);
}

const struct http_auth *s3_http_auth(struct s3 *s)
{
	return &s->auth;
}

/* The endpoint AWS gives region (only while it is AWS's own). */
static void endpoint_follow(struct s3 *s)
{
	char ep[128], err[160];

	if (!s->endpoint_auto)
		return;
	snprintf(ep, sizeof(ep), "https://s3.%s.amazonaws.com", s->region);
	free(s->scheme);
	free(s->authority);
	free(s->base);
	if (set_endpoint(s, ep, err, sizeof(err)))
		log_warn("s3: %s", err); /* region_ok names make none */
}

int s3_find_region(struct s3 *s, struct http *h, const char *url)
{
	char head[BUCKET_MAX + 8], etag[HTTP_ETAG_MAX], seen[64];
	uint64_t size;
	int rc;

	if (!s->region_auto || s->region_asked || !s3_is_url(url))
		return 0;
	s->region_asked = 1;
	snprintf(head, sizeof(head), "s3://%.*s", (int)strcspn(url + 5, "/?"),
		 url + 5);
	rc = http_stat(h, head, &size, etag, sizeof(etag));
	pthread_mutex_lock(&s->err_lock);
	memcpy(seen, s->seen_region, sizeof(seen));
	s->last_err[0] = '\0'; /* the HEAD's refusal is not the mount's */
	pthread_mutex_unlock(&s->err_lock);
	if (!seen[0]) {
		log_info("s3: %s: no x-amz-bucket-region in the reply (%s): "
			 "signing for %s",
			 head, rc ? http_reason(rc) : "HTTP 200", s->region);
		return 0;
	}
	region_switch(s, seen);
	endpoint_follow(s);
	log_info("s3: %s is in region %s (x-amz-bucket-region)", head, seen);
	return 1;
}

/* ---- the bucket backend (bucket.h) -------------------------------------- */

static int b_takes(const struct bucket_conf *c)
{
	return c->region || c->profile || c->path_style || c->requester_pays;
}

static int b_open(const struct bucket_conf *c, void **out, char *err,
		  size_t errlen)
{
	struct s3_opts o = {.endpoint = c->endpoint,
			    .region = c->region,
			    .profile = c->profile,
			    .path_style = c->path_style,
			    .requester_pays = c->requester_pays,
			    .no_sign = c->no_sign,
			    .ca_file = c->ca_file,
			    .ca_path = c->ca_path};
	struct s3 *s;
	int r = s3_open(&o, &s, err, errlen);

	*out = s;
	return r;
}

static void b_free(void *b)
{
	s3_free(b);
}

static const struct http_auth *b_hooks(void *b, const struct http_auth *next)
{
	struct s3 *s = b;

	if (next)
		s->next = *next;
	return &s->auth;
}

static void b_ready(void *b, struct http *h, const char *url)
{
	s3_find_region(b, h, url);
}

static const char *b_last_error(void *b, char *buf, size_t buflen)
{
	return s3_last_error(b, buf, buflen);
}

const struct bucket_ops bucket_s3 = {
	.scheme = "s3",
	.is_url = s3_is_url,
	.is_listing = s3_is_listing,
	.takes = b_takes,
	.open = b_open,
	.free = b_free,
	.hooks = b_hooks,
	.ready = b_ready,
	.list = s3_list_shards,
	.last_error = b_last_error,
};
