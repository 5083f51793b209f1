/* gcs_creds.c - the Google credential chain (key files, gcloud's ADC file,
 * metadata server), service-account JWTs and the token refresh thread; see
 * gcs_creds.h for the order and the DESIGN note. */
#include "fetch/net/gcs_creds.h"

#include "common/file.h"
#include "common/log.h"
#include "common/util.h"
#include "fetch/net/aws_creds.h"
#include "fetch/net/cred_http.h"
#include "fetch/net/gcs_json.h"
#include "fetch/net/http.h"
#include "fetch/net/refresher.h"

#include <curl/curl.h>
#include <errno.h>
#include <fcntl.h>
#include <openssl/bio.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

#define FILE_MAX (64 * 1024)
#define FIELD_MAX 8192
#define JWT_LIFE_S 3600
#define METADATA_DEFAULT "metadata.google.internal"
#define METADATA_PATH                                                          \
	"/computeMetadata/v1/instance/service-accounts/default/token"

struct gcs_creds {
	enum gcs_source src;
	char path[1024]; /* the key file (key sources) */
	char host[256];	 /* the metadata server (metadata source) */
	char source_name[1200];
	pthread_mutex_t
		fetch_lock;   /* one token request at a time; before lock */
	pthread_mutex_t lock; /* guards cur; leaf lock */
	struct gcs_token cur;
	struct refresher *refresher;
	struct cred_tls *tls; /* CAs of the token requests (owned) */
};

/* ---- the JWT ------------------------------------------------------------ */

/* base64url without padding of in[0..n) into a new string. */
static char *b64url(const unsigned char *in, size_t n)
{
	char *out = xmalloc(4 * ((n + 2) / 3) + 1);
	int len = EVP_EncodeBlock((unsigned char *)out, in, (int)n);

	while (len > 0 && out[len - 1] == '=')
		len--;
	out[len] = '\0';
	for (char *p = out; *p; p++)
		*p = *p == '+' ? '-' : *p == '/' ? '_' : *p;
	return out;
}

/* A value that may go between JSON quotes as it is. */
static int json_plain(const char *s)
{
	for (; *s; s++)
		if ((unsigned char)*s < 0x20 || *s == '"' || *s == '\\')
			return 0;
	return 1;
}

static int rs256(const char *pem, const char *data, unsigned char **sig,
		 size_t *siglen)
{
	BIO *bio = BIO_new_mem_buf(pem, -1);
	EVP_PKEY *key =
		bio ? PEM_read_bio_PrivateKey(bio, NULL, NULL, NULL) : NULL;
	EVP_MD_CTX *md = EVP_MD_CTX_new();
	int rc = -EINVAL;

	*sig = NULL;
	if (!key || !md || EVP_PKEY_base_id(key) != EVP_PKEY_RSA)
		goto out;
	if (EVP_DigestSignInit(md, NULL, EVP_sha256(), NULL, key) != 1 ||
	    EVP_DigestSign(md, NULL, siglen, (const unsigned char *)data,
			   strlen(data)) != 1)
		goto out;
	*sig = xmalloc(*siglen);
	if (EVP_DigestSign(md, *sig, siglen, (const unsigned char *)data,
			   strlen(data)) == 1)
		rc = 0;
out:
	if (rc) {
		free(*sig);
		*sig = NULL;
	}
	EVP_MD_CTX_free(md);
	EVP_PKEY_free(key);
	BIO_free(bio);
	return rc;
}

int gcs_jwt_make(const char *email, const char *pem, const char *aud,
		 time_t now, char **out)
{
	static const char hdr[] = "{\"alg\":\"RS256\",\"typ\":\"JWT\"}";
	char claims[4096], *h, *cl, *input, *s64;
	unsigned char *sig;
	size_t siglen, n;
	int rc;

	*out = NULL;
	if (!json_plain(email) || !json_plain(aud))
		return -EPROTO;
	n = (size_t)snprintf(claims, sizeof(claims),
			     "{\"iss\":\"%s\",\"scope\":\"%s\",\"aud\":\"%s\","
			     "\"iat\":%lld,\"exp\":%lld}",
			     email, GCS_SCOPE, aud, (long long)now,
			     (long long)now + JWT_LIFE_S);
	if (n >= sizeof(claims))
		return -EPROTO;
	h = b64url((const unsigned char *)hdr, strlen(hdr));
	cl = b64url((const unsigned char *)claims, n);
	n = strlen(h) + strlen(cl) + 2;
	input = xmalloc(n);
	snprintf(input, n, "%s.%s", h, cl);
	free(h);
	free(cl);
	rc = rs256(pem, input, &sig, &siglen);
	if (rc == 0) {
		s64 = b64url(sig, siglen);
		n = strlen(input) + strlen(s64) + 2;
		*out = xmalloc(n);
		snprintf(*out, n, "%s.%s", input, s64);
		free(s64);
		free(sig);
	}
	free(input);
	return rc;
}

/* ---- requests to the token endpoint and the metadata server ------------- */

/* GET (form NULL) or POST form to url; the body (any status) into *out
 * (caller frees), the status into *status; cred_http_no_answer says
 * whether an error means that nothing answered. */
static int call(const struct gcs_creds *c, const char *url, const char *hdr,
		const char *form, long *status, char **out)
{
	struct cred_http_req r = {.url = url,
				  .hdrs = &hdr,
				  .nhdrs = hdr ? 1 : 0,
				  .form = form,
				  .ca_file = c->tls->ca_file,
				  .ca_path = c->tls->ca_path};

	return cred_http_call(&r, status, out);
}

/* Printable text of member name of body into out ("" if none). */
static void reply_field(const char *body, const char *name, char *out,
			size_t outlen)
{
	if (gcs_json_get(body, strlen(body), name, out, outlen))
		out[0] = '\0';
	for (char *p = out; *p; p++)
		if ((unsigned char)*p < 0x20 || *p == 0x7f)
			*p = '?';
}

/* A 200 token reply into t. */
static int parse_token(const char *body, struct gcs_token *t)
{
	char exp[32], type[32];
	size_t n = strlen(body);
	long long in;
	char *end;

	memset(t, 0, sizeof(*t));
	if (gcs_json_get(body, n, "access_token", t->token, sizeof(t->token)) ||
	    !t->token[0] ||
	    gcs_json_get(body, n, "expires_in", exp, sizeof(exp)))
		return -EPROTO;
	if (gcs_json_get(body, n, "token_type", type, sizeof(type)) == 0 &&
	    strcasecmp(type, "Bearer") != 0)
		return -EPROTO;
	for (const char *p = t->token; *p; p++)
		if ((unsigned char)*p <= 0x20 || *p == 0x7f)
			return -EPROTO; /* must fit one header line */
	errno = 0;
	in = strtoll(exp, &end, 10);
	if (errno || *end || in <= 0 || in > 7 * 86400)
		return -EPROTO;
	t->expires = time(NULL) + (time_t)in;
	return 0;
}

/* The answer of a token request as 0 (t filled) or -errno + reason. */
static int token_reply(int rc, long status, const char *body, const char *who,
		       struct gcs_token *t, char *err, size_t errlen)
{
	char code[64], why[256];

	if (rc) {
		snprintf(err, errlen, "%s: %s", who,
			 cred_http_no_answer(rc) ? "unreachable"
						 : http_reason(rc));
		return rc;
	}
	if (status == 200) {
		rc = parse_token(body, t);
		if (rc)
			snprintf(err, errlen, "%s: bad token reply", who);
		return rc;
	}
	reply_field(body, "error", code, sizeof(code));
	reply_field(body, "error_description", why, sizeof(why));
	snprintf(err, errlen, "%s refused: HTTP %ld%s%s%s%s", who, status,
		 code[0] ? " " : "", code, why[0] ? ": " : "", why);
	return status == 400 || status == 401 || status == 403 ? -EACCES : -EIO;
}

/* ---- the sources -------------------------------------------------------- */

/* The key file, checked and read whole (caller wipes and frees). */
static int read_key(const char *path, char **out, char *err, size_t errlen)
{
	char *buf;
	size_t len;
	int rc = aws_secret_file_ok(path, err, errlen);

	if (rc == -ENOENT)
		snprintf(err, errlen, "%s: no such file", path);
	if (rc)
		return rc;
	rc = file_read_all(path, FILE_MAX, &buf, &len);
	if (rc) {
		snprintf(err, errlen, "cannot read %s: %s", path,
			 strerror(-rc));
		return rc;
	}
	if (gcs_json_check(buf, len)) {
		explicit_bzero(buf, len);
		free(buf);
		snprintf(err, errlen,
			 "%s is not a Google credentials file "
			 "(bad JSON)",
			 path);
		return -EPROTO;
	}
	*out = buf;
	return 0;
}

/* Field name of the key file into a new buffer of FIELD_MAX (wiped and
 * freed by the caller); NULL when absent or bad. */
static char *key_field(const char *key, const char *name)
{
	char *v = xmalloc(FIELD_MAX);

	if (gcs_json_get(key, strlen(key), name, v, FIELD_MAX) == 0 && v[0])
		return v;
	free(v);
	return NULL;
}

static void wipe_free(char *s)
{
	if (s) {
		explicit_bzero(s, strlen(s));
		free(s);
	}
}

/* The jwt-bearer grant of a service-account key as a form body. */
static int sa_form(const char *key, char **form, char **uri)
{
	char *email = key_field(key, "client_email");
	char *pem = key_field(key, "private_key"), *jwt = NULL;
	int rc = -EPROTO;

	*uri = key_field(key, "token_uri");
	if (!*uri)
		*uri = xstrdup(GCS_TOKEN_URI);
	if (email && pem)
		rc = gcs_jwt_make(email, pem, *uri, time(NULL), &jwt);
	if (rc == 0) {
		size_t n = strlen(jwt) + 96;
		*form = xmalloc(n);
		snprintf(*form, n,
			 "grant_type=urn%%3Aietf%%3Aparams%%3Aoauth"
			 "%%3Agrant-type%%3Ajwt-bearer&assertion=%s",
			 jwt);
	}
	free(email);
	wipe_free(pem);
	wipe_free(jwt);
	return rc;
}

/* The refresh_token grant of an authorized-user file as a form body. */
static int user_form(const char *key, char **form, char **uri)
{
	static const char *const names[] = {"client_id", "client_secret",
					    "refresh_token"};
	char *v[3], *e[3] = {0};
	int rc = 0;

	*uri = key_field(key, "token_uri");
	if (!*uri)
		*uri = xstrdup(GCS_TOKEN_URI);
	for (int i = 0; i < 3; i++) {
		v[i] = key_field(key, names[i]);
		e[i] = v[i] ? curl_easy_escape(NULL, v[i], 0) : NULL;
		if (!e[i])
			rc = -EPROTO;
	}
	if (rc == 0) {
		size_t n = strlen(e[0]) + strlen(e[1]) + strlen(e[2]) + 96;
		*form = xmalloc(n);
		snprintf(*form, n,
			 "grant_type=refresh_token&client_id=%s&"
			 "client_secret=%s&refresh_token=%s",
			 e[0], e[1], e[2]);
	}
	for (int i = 0; i < 3; i++) {
		wipe_free(v[i]);
		if (e[i])
			explicit_bzero(e[i], strlen(e[i]));
		curl_free(e[i]);
	}
	return rc;
}

/* A token from the key file at c->path. */
static int from_key(struct gcs_creds *c, struct gcs_token *t, char *err,
		    size_t errlen)
{
	char *key = NULL, *form = NULL, *uri = NULL, *body = NULL;
	char type[64], who[1400];
	long status = 0;
	int rc = read_key(c->path, &key, err, errlen);

	if (rc)
		return rc;
	reply_field(key, "type", type, sizeof(type));
	if (strcmp(type, "service_account") == 0)
		rc = sa_form(key, &form, &uri);
	else if (strcmp(type, "authorized_user") == 0)
		rc = user_form(key, &form, &uri);
	else
		rc = -EOPNOTSUPP;
	wipe_free(key);
	if (rc) {
		if (rc == -EOPNOTSUPP)
			snprintf(err, errlen,
				 "%s: credentials type \"%s\" is not "
				 "supported (want service_account or "
				 "authorized_user)",
				 c->path, type);
		else
			snprintf(err, errlen, "%s: %s key without a usable %s",
				 c->path, type,
				 rc == -EINVAL ? "RSA private_key"
					       : "client_email/private_key or "
						 "client_id/"
						 "client_secret/refresh_token");
		free(uri);
		return rc == -EOPNOTSUPP ? -EOPNOTSUPP : -EINVAL;
	}
	snprintf(who, sizeof(who), "the token endpoint %s (for the key %s)",
		 uri, c->path);
	rc = call(c, uri, NULL, form, &status, &body);
	rc = token_reply(rc, status, body, who, t, err, errlen);
	wipe_free(form);
	wipe_free(body);
	free(uri);
	return rc;
}

static const char *metadata_host(void)
{
	const char *h = getenv("GCE_METADATA_HOST");

	return h && h[0] ? h : METADATA_DEFAULT;
}

/* A token from the metadata server; -ENOENT when nothing answers there. */
static int from_metadata(struct gcs_creds *c, struct gcs_token *t, char *err,
			 size_t errlen)
{
	char url[512], who[400], *body = NULL;
	long status = 0;
	int rc;

	snprintf(url, sizeof(url), "http://%s%s", c->host, METADATA_PATH);
	snprintf(who, sizeof(who), "the metadata server %s", c->host);
	rc = call(c, url, "Metadata-Flavor: Google", NULL, &status, &body);
	rc = token_reply(rc, status, body, who, t, err, errlen);
	wipe_free(body);
	return rc;
}

/* ---- the chain ---------------------------------------------------------- */

static void adc_path(char *out, size_t outlen)
{
	const char *dir = getenv("CLOUDSDK_CONFIG"), *home = getenv("HOME");

	if (dir && dir[0])
		snprintf(out, outlen, "%s/application_default_credentials.json",
			 dir);
	else
		snprintf(out, outlen,
			 "%s/.config/gcloud/"
			 "application_default_credentials.json",
			 home && home[0] ? home : "/");
}

enum gcs_source gcs_creds_pick(char *path, size_t pathlen)
{
	const char *env = getenv("GOOGLE_APPLICATION_CREDENTIALS");
	struct stat st;

	if (env && env[0]) {
		snprintf(path, pathlen, "%s", env);
		return GCS_SRC_KEY_ENV; /* set: used even when missing */
	}
	adc_path(path, pathlen);
	if (stat(path, &st) == 0)
		return GCS_SRC_ADC;
	snprintf(path, pathlen, "%s", metadata_host());
	return GCS_SRC_METADATA;
}

static int fetch_token(struct gcs_creds *c, struct gcs_token *t, char *err,
		       size_t errlen)
{
	return c->src == GCS_SRC_METADATA ? from_metadata(c, t, err, errlen)
					  : from_key(c, t, err, errlen);
}

/* The first source there is; a configured but broken one fails. */
static int walk_chain(struct gcs_creds *c, struct gcs_token *t, char *err,
		      size_t errlen)
{
	char adc[1100];
	int rc;

	c->src = gcs_creds_pick(c->path, sizeof(c->path));
	if (c->src == GCS_SRC_METADATA) {
		snprintf(c->host, sizeof(c->host), "%.255s", c->path);
		c->path[0] = '\0';
	}
	snprintf(c->source_name, sizeof(c->source_name), "%s %s",
		 c->src == GCS_SRC_KEY_ENV ? "GOOGLE_APPLICATION_CREDENTIALS"
		 : c->src == GCS_SRC_ADC   ? "application default credentials"
					   : "the metadata server",
		 c->src == GCS_SRC_METADATA ? c->host : c->path);
	rc = fetch_token(c, t, err, errlen);
	if (!cred_http_no_answer(rc) || c->src != GCS_SRC_METADATA)
		return rc;
	adc_path(adc, sizeof(adc));
	snprintf(err, errlen,
		 "no Google credentials found (tried: GOOGLE_APPLICATION_"
		 "CREDENTIALS (unset), %s (absent), the metadata server %s "
		 "(unreachable)); use -o no_sign=1 for a public bucket",
		 adc, c->host);
	c->src = GCS_SRC_NONE;
	return -ENOKEY;
}

/* ---- refresh ------------------------------------------------------------ */

/* Fetch a token and install it unless the current one is no longer
 * `used` (someone refreshed meanwhile; used NULL: always). */
static int renew(struct gcs_creds *c, const char *used, char *err,
		 size_t errlen)
{
	struct gcs_token *t = xmalloc(sizeof(*t));
	int rc = 0, same;

	pthread_mutex_lock(&c->fetch_lock);
	pthread_mutex_lock(&c->lock);
	same = !used || strcmp(used, c->cur.token) == 0;
	pthread_mutex_unlock(&c->lock);
	if (same)
		rc = fetch_token(c, t, err, errlen);
	if (same && rc == 0) {
		pthread_mutex_lock(&c->lock);
		c->cur = *t;
		pthread_mutex_unlock(&c->lock);
		log_debug("gcs: token from %s refreshed", c->source_name);
	}
	pthread_mutex_unlock(&c->fetch_lock);
	explicit_bzero(t, sizeof(*t));
	free(t);
	return rc;
}

/* The refresher's renew. */
static int renew_ahead(void *ud, time_t *expires)
{
	struct gcs_creds *c = ud;
	char err[1024];
	int rc = renew(c, NULL, err, sizeof(err));

	if (rc) {
		log_warn("gcs: cannot refresh the token from %s: %s; "
			 "retrying in %d s",
			 c->source_name, err, REFRESHER_RETRY_S);
		return rc;
	}
	pthread_mutex_lock(&c->lock);
	*expires = c->cur.expires;
	pthread_mutex_unlock(&c->lock);
	return 0;
}

/* ---- public calls ------------------------------------------------------- */

int gcs_creds_open(const struct cred_tls *tls, struct gcs_creds **out,
		   char *err, size_t errlen)
{
	struct gcs_creds *c = xcalloc(1, sizeof(*c));
	int rc;

	*out = NULL;
	c->tls = cred_tls_dup(tls);
	pthread_mutex_init(&c->fetch_lock, NULL);
	pthread_mutex_init(&c->lock, NULL);
	err[0] = '\0';
	rc = walk_chain(c, &c->cur, err, errlen);
	if (rc) {
		if (!err[0])
			snprintf(err, errlen, "%s: %s", c->source_name,
				 strerror(-rc));
		gcs_creds_free(c);
		return rc;
	}
	rc = refresher_open(renew_ahead, c, c->cur.expires, &c->refresher);
	if (rc)
		log_warn("gcs: the token from %s will not be refreshed: %s",
			 c->source_name, strerror(-rc));
	*out = c;
	return 0;
}

void gcs_creds_free(struct gcs_creds *c)
{
	if (!c)
		return;
	refresher_free(c->refresher);
	explicit_bzero(&c->cur, sizeof(c->cur));
	pthread_mutex_destroy(&c->fetch_lock);
	pthread_mutex_destroy(&c->lock);
	cred_tls_free(c->tls);
	free(c);
}

void gcs_creds_get(struct gcs_creds *c, struct gcs_token *out)
{
	pthread_mutex_lock(&c->lock);
	*out = c->cur;
	pthread_mutex_unlock(&c->lock);
}

int gcs_creds_refresh(struct gcs_creds *c, const char *used)
{
	char err[1024];
	int rc = renew(c, used, err, sizeof(err));

	if (rc)
		log_warn("gcs: cannot refresh the token from %s: %s",
			 c->source_name, err);
	return rc;
}

const char *gcs_creds_source(const struct gcs_creds *c)
{
	return c->source_name;
}
