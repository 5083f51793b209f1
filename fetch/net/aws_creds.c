/* aws_creds.c - the AWS credential chain (environment, shared files,
 * credential_process, web identity, ECS, IMDSv2) and its refresh thread;
 * see aws_creds.h for the order and the DESIGN note. */
#include "fetch/net/aws_creds.h"

#include "common/file.h"
#include "common/lockcheck.h"
#include "common/log.h"
#include "common/util.h"
#include "fetch/net/cred_http.h"
#include "fetch/net/http.h"
#include "fetch/net/refresher.h"
#include "fetch/net/xml_tag.h"

#include <curl/curl.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define FILE_MAX (256 * 1024)
#define BODY_MAX (64 * 1024)
#define IMDS_DEFAULT "http://169.254.169.254"
#define ECS_HOST "http://169.254.170.2"

enum source {
	SRC_NONE,
	SRC_ENV,
	SRC_PROFILE,
	SRC_PROCESS,
	SRC_WEB_IDENTITY,
	SRC_ECS,
	SRC_IMDS
};

struct aws_creds {
	enum source src;
	char *profile; /* the profile name in use (owned) */
	char *process; /* credential_process command (owned) */
	char source_name[160];
	/* Lock order: refresh_lock, then lock. refresh_lock makes one fetch
	 * at a time (the refresher's and those asked by a refused request);
	 * it is held across the fetch's I/O, lock never is. */
	pthread_mutex_t refresh_lock;
	pthread_mutex_t lock; /* guards cur; leaf lock */
	struct aws_creds_value cur;
	struct refresher *refresher; /* NULL: the credentials never expire */
	struct cred_tls *tls;	     /* CAs of the HTTP sources (owned) */
};

/* ---- files -------------------------------------------------------------- */

int aws_secret_file_ok(const char *path, char *err, size_t errlen)
{
	struct stat st;

	if (stat(path, &st) != 0)
		return -errno;
	if (!S_ISREG(st.st_mode)) {
		snprintf(err, errlen, "%s is not a regular file", path);
		return -EPERM;
	}
	if (st.st_uid != geteuid()) {
		snprintf(err, errlen,
			 "%s holds secrets but is owned by uid %u, not by "
			 "you (uid %u): refusing it",
			 path, (unsigned)st.st_uid, (unsigned)geteuid());
		return -EPERM;
	}
	if (st.st_mode & 077) {
		snprintf(err, errlen,
			 "permissions %04o for %s are too open: it holds "
			 "secrets, so it must not be accessible by others "
			 "(chmod 600 %s)",
			 (unsigned)(st.st_mode & 07777), path, path);
		return -EPERM;
	}
	return 0;
}

/* Why file_read_all refused, in words: it says -EINVAL for a FIFO, a
 * socket or a device, which strerror would call "Invalid argument". */
static const char *read_error(int rc)
{
	if (rc == -EFBIG)
		return "too large";
	return rc == -EINVAL ? "not a regular file" : strerror(-rc);
}

/* Whole small file, NUL-terminated, after the permission check. */
static int read_secret_file(const char *path, char **out, char *err,
			    size_t errlen)
{
	int rc = aws_secret_file_ok(path, err, errlen);
	size_t len;

	if (rc)
		return rc;
	rc = file_read_all(path, FILE_MAX - 1, out, &len);
	if (rc == -ENOENT)
		return rc;
	if (rc) {
		snprintf(err, errlen, "cannot read %s: %s", path,
			 read_error(rc));
		return -EIO;
	}
	return 0;
}

static void home_path(const char *env, const char *rel, char *out,
		      size_t outlen)
{
	const char *v = getenv(env), *home = getenv("HOME");

	if (v && v[0])
		snprintf(out, outlen, "%s", v);
	else
		snprintf(out, outlen, "%s/%s", home ? home : "/", rel);
}

static void trim(char **s, char **e)
{
	while (*s < *e && (**s == ' ' || **s == '\t'))
		(*s)++;
	while (*e > *s && strchr(" \t\r", (*e)[-1]))
		(*e)--;
}

/* Value of key in [section] of an INI text; -ENOENT when absent. */
static int ini_get(const char *text, const char *section, const char *key,
		   char *out, size_t outlen)
{
	int in = 0;

	for (const char *p = text; *p;) {
		const char *nl = strchr(p, '\n');
		char *s = (char *)p, *e = (char *)(nl ? nl : p + strlen(p));
		p = nl ? nl + 1 : e;
		trim(&s, &e);
		if (s == e || *s == '#' || *s == ';')
			continue;
		if (*s == '[') {
			char *c = memchr(s, ']', (size_t)(e - s)), *a = s + 1;
			if (!c)
				continue;
			trim(&a, &c);
			in = (size_t)(c - a) == strlen(section) &&
			     !strncmp(a, section, (size_t)(c - a));
			continue;
		}
		char *eq = memchr(s, '=', (size_t)(e - s)), *k = s, *ke = eq;
		if (!in || !eq)
			continue;
		trim(&k, &ke);
		if ((size_t)(ke - k) != strlen(key) ||
		    strncmp(k, key, (size_t)(ke - k)))
			continue;
		char *v = eq + 1;
		trim(&v, &e);
		if ((size_t)(e - v) >= outlen)
			return -ENAMETOOLONG;
		memcpy(out, v, (size_t)(e - v));
		out[e - v] = '\0';
		return 0;
	}
	return -ENOENT;
}

static const char *profile_name(const char *profile)
{
	const char *p = profile && profile[0] ? profile : getenv("AWS_PROFILE");
	return p && p[0] ? p : "default";
}

/* key from the config file ([profile NAME] / [default]) or, when
 * from_creds, the credentials file ([NAME]) */
static int file_setting(const char *profile, int from_creds, const char *key,
			char *out, size_t outlen, char *err, size_t errlen)
{
	char path[4096], section[300], *text = NULL;
	const char *name = profile_name(profile);
	int rc;

	if (from_creds) {
		home_path("AWS_SHARED_CREDENTIALS_FILE", ".aws/credentials",
			  path, sizeof(path));
		snprintf(section, sizeof(section), "%s", name);
	} else {
		home_path("AWS_CONFIG_FILE", ".aws/config", path, sizeof(path));
		snprintf(section, sizeof(section), "%s%s",
			 strcmp(name, "default") ? "profile " : "", name);
	}
	rc = read_secret_file(path, &text, err, errlen);
	if (rc == -ENOENT)
		return -ENOENT;
	if (rc)
		return rc == -EPERM ? -EACCES : rc;
	rc = ini_get(text, section, key, out, outlen);
	explicit_bzero(text, strlen(text));
	free(text);
	return rc;
}

int aws_profile_setting(const char *profile, const char *key, char *out,
			size_t outlen)
{
	char err[512];
	int rc = file_setting(profile, 0, key, out, outlen, err, sizeof(err));

	if (rc == -ENOENT)
		rc = file_setting(profile, 1, key, out, outlen, err,
				  sizeof(err));
	if (rc == -EACCES)
		log_warn("%s", err);
	return rc;
}

/* ---- JSON and XML fields ------------------------------------------------ */

/* "name": "value" in a flat JSON object (no escapes in these values). */
static int json_str(const char *body, const char *name, char *out,
		    size_t outlen)
{
	char pat[64];
	const char *p, *q;

	snprintf(pat, sizeof(pat), "\"%s\"", name);
	p = strstr(body, pat);
	if (!p)
		return -ENOENT;
	p += strlen(pat);
	while (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r')
		p++;
	if (*p++ != ':')
		return -EINVAL;
	while (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r')
		p++;
	if (*p++ != '"')
		return -EINVAL;
	q = strchr(p, '"');
	if (!q || memchr(p, '\\', (size_t)(q - p)))
		return -EINVAL;
	if ((size_t)(q - p) >= outlen)
		return -ENAMETOOLONG;
	memcpy(out, p, (size_t)(q - p));
	out[q - p] = '\0';
	return 0;
}

/* ISO 8601 "2024-01-02T03:04:05Z" (fractions allowed) as time_t */
static time_t parse_iso(const char *s)
{
	struct tm tm = {0};
	const char *end = strptime(s, "%Y-%m-%dT%H:%M:%S", &tm);

	if (!end)
		return 0;
	return timegm(&tm);
}

typedef int (*field_fn)(const char *, const char *, char *, size_t);

/* Fills v from a JSON (credential_process, ECS, IMDS) or XML (STS) body. */
static int parse_creds(const char *body, field_fn get, const char *token_name,
		       struct aws_creds_value *v)
{
	char exp[64];

	memset(v, 0, sizeof(*v));
	if (get(body, "AccessKeyId", v->access_key, sizeof(v->access_key)) ||
	    get(body, "SecretAccessKey", v->secret_key, sizeof(v->secret_key)))
		return -EPROTO;
	if (get(body, token_name, v->token, sizeof(v->token)) == -ENAMETOOLONG)
		return -EPROTO;
	if (get(body, "Expiration", exp, sizeof(exp)) == 0) {
		v->expires = parse_iso(exp);
		if (!v->expires)
			return -EPROTO;
	}
	return 0;
}

/* ---- small HTTP calls (metadata endpoints, STS) ---------------------------
 */

/* method, url, header lines; 2xx body into *out (caller frees). Trusts the
 * CAs the mount's transfers trust. */
static int http_call(const struct aws_creds *c, const char *method,
		     const char *url, const char *const *hdrs, size_t nh,
		     char **out)
{
	struct cred_http_req r = {.method = method,
				  .url = url,
				  .hdrs = hdrs,
				  .nhdrs = nh,
				  .ca_file = c->tls->ca_file,
				  .ca_path = c->tls->ca_path};
	long status;
	int rc = cred_http_call(&r, &status, out);

	if (rc || (status >= 200 && status <= 299))
		return rc;
	free(*out);
	*out = NULL;
	return status == 404			? -ENOENT
	       : status == 401 || status == 403 ? -EACCES
						: -EIO;
}

/* ---- the sources -------------------------------------------------------- */

static int env_copy(const char *name, char *out, size_t outlen)
{
	const char *v = getenv(name);

	if (!v || !v[0])
		return -ENOENT;
	if (strlen(v) >= outlen)
		return -ENAMETOOLONG;
	memcpy(out, v, strlen(v) + 1);
	return 0;
}

static int from_env(struct aws_creds_value *v, char *err, size_t errlen)
{
	int a = env_copy("AWS_ACCESS_KEY_ID", v->access_key,
			 sizeof(v->access_key));
	int s = env_copy("AWS_SECRET_ACCESS_KEY", v->secret_key,
			 sizeof(v->secret_key));

	if (a == -ENOENT && s == -ENOENT)
		return -ENOENT;
	if (a || s) {
		snprintf(err, errlen,
			 "AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_"
			 "KEY must both be set (and not too long)");
		return -EINVAL;
	}
	if (env_copy("AWS_SESSION_TOKEN", v->token, sizeof(v->token)) ==
	    -ENAMETOOLONG)
		return -EINVAL;
	return 0;
}

static int from_profile(struct aws_creds *c, struct aws_creds_value *v,
			char *err, size_t errlen)
{
	char cmd[4096];
	int a, s;

	a = file_setting(c->profile, 1, "aws_access_key_id", v->access_key,
			 sizeof(v->access_key), err, errlen);
	if (a == -ENOENT)
		a = file_setting(c->profile, 0, "aws_access_key_id",
				 v->access_key, sizeof(v->access_key), err,
				 errlen);
	if (a == -EACCES)
		return -EACCES;
	if (a == 0) {
		s = file_setting(c->profile, 1, "aws_secret_access_key",
				 v->secret_key, sizeof(v->secret_key), err,
				 errlen);
		if (s == -ENOENT)
			s = file_setting(c->profile, 0, "aws_secret_access_key",
					 v->secret_key, sizeof(v->secret_key),
					 err, errlen);
		if (s) {
			if (s != -EACCES)
				snprintf(err, errlen,
					 "profile %s has "
					 "aws_access_key_id but no aws_secret_"
					 "access_key",
					 c->profile);
			return s == -EACCES ? s : -EINVAL;
		}
		if (file_setting(c->profile, 1, "aws_session_token", v->token,
				 sizeof(v->token), err, errlen) != 0 &&
		    file_setting(c->profile, 0, "aws_session_token", v->token,
				 sizeof(v->token), err, errlen) != 0)
			v->token[0] = '\0';
		return 0;
	}
	if (file_setting(c->profile, 0, "credential_process", cmd, sizeof(cmd),
			 err, errlen) == 0) {
		c->process = xstrdup(cmd);
		return 1; /* fetched by the process source */
	}
	return -ENOENT;
}

/* credential_process: run through sh, read its JSON (Version 1). */
static int from_process(struct aws_creds *c, struct aws_creds_value *v,
			char *err, size_t errlen)
{
	FILE *f = popen(c->process, "re");
	char *buf = xmalloc(BODY_MAX + 1);
	size_t n;
	int st, rc;

	if (!f) {
		free(buf);
		snprintf(err, errlen, "credential_process: cannot run it");
		return -EIO;
	}
	n = fread(buf, 1, BODY_MAX, f);
	buf[n] = '\0';
	st = pclose(f);
	rc = (st == -1 || !WIFEXITED(st) || WEXITSTATUS(st) != 0)
		     ? -EIO
		     : parse_creds(buf, json_str, "SessionToken", v);
	explicit_bzero(buf, BODY_MAX + 1);
	free(buf);
	if (rc)
		snprintf(err, errlen, "credential_process of profile %s %s",
			 c->profile,
			 rc == -EIO ? "failed"
				    : "printed no "
				      "usable credentials (Version 1 JSON)");
	return rc;
}

/* A small file read whole; secret files go through the permission check. */
static int read_token_file(const char *path, int check, char **out, char *err,
			   size_t errlen)
{
	size_t n;
	int rc;

	if (check)
		return read_secret_file(path, out, err, errlen);
	rc = file_read_all(path, BODY_MAX, out, &n);
	if (rc) {
		snprintf(err, errlen, "cannot read %s: %s", path,
			 read_error(rc));
		return rc;
	}
	while (n && strchr(" \t\r\n", (*out)[n - 1]))
		(*out)[--n] = '\0';
	return 0;
}

static int from_web_identity(const struct aws_creds *c,
			     struct aws_creds_value *v, char *err,
			     size_t errlen)
{
	const char *file = getenv("AWS_WEB_IDENTITY_TOKEN_FILE");
	const char *role = getenv("AWS_ROLE_ARN");
	const char *name = getenv("AWS_ROLE_SESSION_NAME");
	const char *ep = getenv("AWS_ENDPOINT_URL_STS");
	char *tok = NULL, *etok, *erole, *ename, *url, *body = NULL;
	size_t n;
	int rc;

	if (!file || !file[0] || !role || !role[0])
		return -ENOENT;
	/* Kubernetes projects this token readable by the pod's group:
	 * refusing such files would break EKS, so it is not checked. */
	rc = read_token_file(file, 0, &tok, err, errlen);
	if (rc)
		return rc;
	/* NULL when out of memory or over libcurl's input cap (8 MB) */
	etok = curl_easy_escape(NULL, tok, 0);
	erole = curl_easy_escape(NULL, role, 0);
	ename = curl_easy_escape(NULL, name && name[0] ? name : "echofs", 0);
	if (!etok || !erole || !ename) {
		snprintf(err, errlen,
			 "web identity: cannot encode the %s for STS (too long "
			 "or out of memory)",
			 !etok ? "token" : !erole ? "role ARN" : "session name");
		rc = -ENOMEM;
		goto out;
	}
	n = strlen(etok) + strlen(erole) + strlen(ename) + 512;
	url = xmalloc(n);
	snprintf(url, n,
		 "%s/?Action=AssumeRoleWithWebIdentity&Version="
		 "2011-06-15&RoleArn=%s&RoleSessionName=%s&"
		 "WebIdentityToken=%s",
		 ep && ep[0] ? ep : "https://sts.amazonaws.com", erole, ename,
		 etok);
	rc = http_call(c, "GET", url, NULL, 0, &body);
	if (rc == 0)
		rc = parse_creds(body, xml_tag_copy, "SessionToken", v);
	if (rc)
		snprintf(err, errlen,
			 "web identity: STS "
			 "AssumeRoleWithWebIdentity for %s failed (%s)",
			 role, http_reason(rc));
	explicit_bzero(url, n);
	free(url);
out:
	explicit_bzero(tok, strlen(tok));
	if (etok)
		explicit_bzero(etok, strlen(etok));
	curl_free(etok);
	curl_free(erole);
	curl_free(ename);
	free(tok);
	free(body);
	return rc;
}

static int from_ecs(const struct aws_creds *c, struct aws_creds_value *v,
		    char *err, size_t errlen)
{
	const char *rel = getenv("AWS_CONTAINER_CREDENTIALS_RELATIVE_URI");
	const char *full = getenv("AWS_CONTAINER_CREDENTIALS_FULL_URI");
	const char *tfile = getenv("AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE");
	const char *tenv = getenv("AWS_CONTAINER_AUTHORIZATION_TOKEN");
	char url[2048], hdr[BODY_MAX + 32], *tok = NULL, *body = NULL;
	const char *hdrs[1] = {hdr};
	int rc = 0;

	if (rel && rel[0])
		snprintf(url, sizeof(url), "%s%s", ECS_HOST, rel);
	else if (full && full[0])
		snprintf(url, sizeof(url), "%s", full);
	else
		return -ENOENT;
	hdr[0] = '\0';
	if (tfile && tfile[0])
		rc = read_token_file(tfile, 1, &tok, err, errlen);
	if (rc)
		return rc;
	if (tok || (tenv && tenv[0]))
		snprintf(hdr, sizeof(hdr), "Authorization: %s",
			 tok ? tok : tenv);
	rc = http_call(c, "GET", url, hdrs, hdr[0] ? 1 : 0, &body);
	if (rc == 0)
		rc = parse_creds(body, json_str, "Token", v);
	if (rc)
		snprintf(err, errlen,
			 "container credentials endpoint failed "
			 "(%s)",
			 http_reason(rc));
	explicit_bzero(hdr, sizeof(hdr));
	free(tok);
	free(body);
	return rc;
}

static int imds_role_creds(const struct aws_creds *c, const char *ep,
			   const char *tok, struct aws_creds_value *v)
{
	char url[1200], hdr[512], *roles = NULL, *body = NULL;
	const char *hdrs[1] = {hdr};
	int rc, n;

	snprintf(hdr, sizeof(hdr), "X-aws-ec2-metadata-token: %s", tok);
	n = snprintf(url, sizeof(url),
		     "%.1024s/latest/meta-data/iam/"
		     "security-credentials/",
		     ep);
	if (n < 0 || (size_t)n >= sizeof(url))
		return -ENAMETOOLONG;
	rc = http_call(c, "GET", url, hdrs, 1, &roles);
	if (rc)
		return rc;
	roles[strcspn(roles, "\r\n")] = '\0';
	if (!roles[0] || strlen(url) + strlen(roles) >= sizeof(url) ||
	    strchr(roles, '/')) {
		free(roles);
		return -EPROTO;
	}
	strcat(url, roles);
	free(roles);
	rc = http_call(c, "GET", url, hdrs, 1, &body);
	if (rc == 0)
		rc = parse_creds(body, json_str, "Token", v);
	free(body);
	explicit_bzero(hdr, sizeof(hdr));
	return rc;
}

static int from_imds(const struct aws_creds *c, struct aws_creds_value *v,
		     char *err, size_t errlen)
{
	const char *off = getenv("AWS_EC2_METADATA_DISABLED");
	const char *ep = getenv("AWS_EC2_METADATA_SERVICE_ENDPOINT");
	const char *ttl[1] = {"X-aws-ec2-metadata-token-ttl-seconds: 21600"};
	char url[1024], *tok = NULL;
	size_t n;
	int rc;

	if (off && strcasecmp(off, "true") == 0)
		return -ENOENT;
	if (!ep || !ep[0])
		ep = IMDS_DEFAULT;
	n = strlen(ep);
	while (n && ep[n - 1] == '/')
		n--;
	snprintf(url, sizeof(url), "%.*s/latest/api/token", (int)n, ep);
	rc = http_call(c, "PUT", url, ttl, 1, &tok);
	if (rc && cred_http_no_answer(rc))
		return -ENOENT; /* not on EC2 */
	if (rc) {
		snprintf(err, errlen,
			 "instance metadata (IMDSv2): the token "
			 "request failed (%s)",
			 http_reason(rc));
		return rc;
	}
	snprintf(url, sizeof(url), "%.*s", (int)n, ep);
	rc = imds_role_creds(c, url, tok, v);
	explicit_bzero(tok, strlen(tok));
	free(tok);
	if (rc)
		snprintf(err, errlen,
			 "instance metadata (IMDSv2) gave no "
			 "credentials (%s)",
			 http_reason(rc));
	return rc;
}

/* ---- the chain ---------------------------------------------------------- */

/* Fetch again from the source found by the chain (refresh). */
static int fetch_from(struct aws_creds *c, struct aws_creds_value *v, char *err,
		      size_t errlen)
{
	memset(v, 0, sizeof(*v));
	switch (c->src) {
	case SRC_ENV:
		return from_env(v, err, errlen);
	case SRC_PROFILE:
		return from_profile(c, v, err, errlen) == 0 ? 0 : -EIO;
	case SRC_PROCESS:
		return from_process(c, v, err, errlen);
	case SRC_WEB_IDENTITY:
		return from_web_identity(c, v, err, errlen);
	case SRC_ECS:
		return from_ecs(c, v, err, errlen);
	case SRC_IMDS:
		return from_imds(c, v, err, errlen);
	default:
		return -ENOENT;
	}
}

/* First source that has credentials; a configured but broken one fails. */
static int walk_chain(struct aws_creds *c, struct aws_creds_value *v, char *err,
		      size_t errlen)
{
	int rc = from_env(v, err, errlen);

	c->src = SRC_ENV;
	snprintf(c->source_name, sizeof(c->source_name), "environment");
	if (rc != -ENOENT)
		return rc;
	rc = from_profile(c, v, err, errlen);
	c->src = rc == 1 ? SRC_PROCESS : SRC_PROFILE;
	snprintf(c->source_name, sizeof(c->source_name), "%sprofile %s",
		 rc == 1 ? "credential_process of " : "", c->profile);
	if (rc == 1)
		return from_process(c, v, err, errlen);
	if (rc != -ENOENT)
		return rc;
	c->src = SRC_WEB_IDENTITY;
	snprintf(c->source_name, sizeof(c->source_name), "web identity");
	rc = from_web_identity(c, v, err, errlen);
	if (rc != -ENOENT)
		return rc;
	c->src = SRC_ECS;
	snprintf(c->source_name, sizeof(c->source_name),
		 "container "
		 "credentials");
	rc = from_ecs(c, v, err, errlen);
	if (rc != -ENOENT)
		return rc;
	c->src = SRC_IMDS;
	snprintf(c->source_name, sizeof(c->source_name), "instance metadata");
	rc = from_imds(c, v, err, errlen);
	if (rc != -ENOENT)
		return rc;
	c->src = SRC_NONE;
	snprintf(err, errlen,
		 "no AWS credentials found (tried: environment AWS_ACCESS_"
		 "KEY_ID, profile %s in the shared credentials and config "
		 "files, web identity AWS_WEB_IDENTITY_TOKEN_FILE, container "
		 "credentials AWS_CONTAINER_CREDENTIALS_*, instance metadata"
		 "%s); use -o no_sign=1 for a public bucket",
		 c->profile,
		 getenv("AWS_EC2_METADATA_DISABLED") ? " (disabled)" : "");
	return -ENOKEY;
}

/* ---- refresh ------------------------------------------------------------ */

/* A fetch from the source that gave the credentials, installed. Called
 * with refresh_lock held. */
static int refetch(struct aws_creds *c, time_t *expires, char *err,
		   size_t errlen)
{
	ASSERT_HELD(&c->refresh_lock);
	struct aws_creds_value *v = xmalloc(sizeof(*v));
	int rc = fetch_from(c, v, err, errlen);

	if (rc == 0) {
		pthread_mutex_lock(&c->lock);
		c->cur = *v;
		pthread_mutex_unlock(&c->lock);
		*expires = v->expires;
	}
	explicit_bzero(v, sizeof(*v));
	free(v);
	return rc;
}

/* The refresher's renew. */
static int renew(void *ud, time_t *expires)
{
	struct aws_creds *c = ud;
	char err[512];
	int rc;

	pthread_mutex_lock(&c->refresh_lock);
	rc = refetch(c, expires, err, sizeof(err));
	pthread_mutex_unlock(&c->refresh_lock);
	if (rc == 0)
		log_debug("aws: credentials from %s refreshed", c->source_name);
	else
		log_warn("aws: cannot refresh credentials from %s: %s; "
			 "retrying in %d s",
			 c->source_name, err, REFRESHER_RETRY_S);
	return rc;
}

static bool same_creds(const struct aws_creds_value *a,
		       const struct aws_creds_value *b)
{
	return strcmp(a->access_key, b->access_key) == 0 &&
	       strcmp(a->token, b->token) == 0;
}

int aws_creds_refresh(struct aws_creds *c, const struct aws_creds_value *used)
{
	char err[512] = "";
	time_t expires;
	bool moved, fetched = false;
	int rc = 0;

	pthread_mutex_lock(&c->refresh_lock);
	pthread_mutex_lock(&c->lock);
	moved = !same_creds(&c->cur, used);
	pthread_mutex_unlock(&c->lock);
	if (moved)
		goto out; /* another request or the refresher got new ones */
	if (c->src == SRC_ENV) {
		rc = -EKEYEXPIRED; /* the environment cannot change */
		snprintf(err, sizeof(err), "the environment's are fixed");
		goto out;
	}
	rc = refetch(c, &expires, err, sizeof(err));
	fetched = rc == 0;
	if (rc == 0) {
		pthread_mutex_lock(&c->lock);
		moved = !same_creds(&c->cur, used);
		pthread_mutex_unlock(&c->lock);
		if (!moved) {
			rc = -EKEYEXPIRED;
			snprintf(err, sizeof(err), "the source gave the same");
		}
	}
out:
	pthread_mutex_unlock(&c->refresh_lock);
	if (rc)
		log_warn("aws: refused credentials from %s not renewed: %s",
			 c->source_name, err);
	else if (fetched)
		log_info("aws: credentials from %s renewed after a refusal",
			 c->source_name);
	return rc;
}

/* ---- public calls ------------------------------------------------------- */

int aws_creds_open(const char *profile, const struct cred_tls *tls,
		   struct aws_creds **out, char *err, size_t errlen)
{
	struct aws_creds *c = xcalloc(1, sizeof(*c));
	int rc;

	*out = NULL;
	c->profile = xstrdup(profile_name(profile));
	pthread_mutex_init(&c->refresh_lock, NULL);
	c->tls = cred_tls_dup(tls);
	pthread_mutex_init(&c->lock, NULL);
	err[0] = '\0';
	rc = walk_chain(c, &c->cur, err, errlen);
	if (rc == 0 && (!c->cur.access_key[0] || !c->cur.secret_key[0]))
		rc = -EPROTO;
	if (rc) {
		if (!err[0])
			snprintf(err, errlen, "%s: %s", c->source_name,
				 strerror(-rc));
		aws_creds_free(c);
		return rc;
	}
	if (c->cur.expires &&
	    (rc = refresher_open(renew, c, c->cur.expires, &c->refresher)))
		log_warn("aws: credentials from %s will not be refreshed: %s",
			 c->source_name, strerror(-rc));
	*out = c;
	return 0;
}

void aws_creds_free(struct aws_creds *c)
{
	if (!c)
		return;
	refresher_free(c->refresher);
	explicit_bzero(&c->cur, sizeof(c->cur));
	pthread_mutex_destroy(&c->lock);
	pthread_mutex_destroy(&c->refresh_lock);
	free(c->profile);
	free(c->process);
	cred_tls_free(c->tls);
	free(c);
}

void aws_creds_get(struct aws_creds *c, struct aws_creds_value *out)
{
	pthread_mutex_lock(&c->lock);
	*out = c->cur;
	pthread_mutex_unlock(&c->lock);
}

const char *aws_creds_source(const struct aws_creds *c)
{
	return c->source_name;
}
