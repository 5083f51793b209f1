/* gcs.h - gs:// sources through the GCS XML API: path-style addressing on
 * https://storage.googleapis.com (or -o endpoint=), an OAuth bearer token on
 * every request through http's auth hooks, prefix listing with the XML
 * API's ListObjectsV2-style list-type=2, and GCS error codes as errno.
 *
 * URL forms, as the shard list and the index hold them:
 *   gs://BUCKET/KEY   an object; KEY is raw (not percent-encoded)
 *   gs://BUCKET?QUERY a bucket-level request; QUERY is sent as it is
 * map_url turns them into ENDPOINT/BUCKET/KEY (percent-encoded) and sign
 * adds "Authorization: Bearer TOKEN" (the token current at that moment) to
 * each attempt; a 401 fetches a new token once and the request is tried
 * again. URLs that are not gs:// go to the next hooks given (s3://), so a
 * list file may mix http(s)://, s3:// and gs:// shards.
 *
 * Thread safety: after gcs_open, every function may be called from any
 * thread; tokens come from gcs_creds (refreshed without blocking readers).
 * Tokens never reach a log line. */
#ifndef ECHOFS_GCS_H
#define ECHOFS_GCS_H

#include "common/attrs.h"
#include <stddef.h>

struct http;
struct http_auth;
struct shardlist;

#define GCS_ENDPOINT "https://storage.googleapis.com"

struct gcs_opts {
	/* -o endpoint=URL, or NULL: then STORAGE_EMULATOR_HOST (as Google's
	 * client libraries take it: "host:port" means http://host:port), else
	 * GCS_ENDPOINT */
	const char *endpoint;
	int no_sign; /* -o no_sign=1: anonymous requests */
	/* CA bundle and directory the token requests trust, as the transfers
	 * do; or NULL */
	const char *ca_file, *ca_path;
};

struct gcs;

/* Settles the endpoint and (unless no_sign) finds credentials and a first
 * token now, so a mount without any fails at once naming the sources
 * tried. Returns 0 with *out set, or -errno with *out NULL and a one-line
 * reason in err. */
MUST_CHECK
int gcs_open(const struct gcs_opts *o, struct gcs **out, char *err,
	     size_t errlen);
/* Accepts NULL. */
void gcs_free(struct gcs *g);

/* The hooks to put in http_opts.auth (points into g; valid until
 * gcs_free). URLs other than gs:// are handed to next (copied; NULL: used
 * as they are). */
const struct http_auth *gcs_http_auth(struct gcs *g,
				      const struct http_auth *next);

/* 1 if s is a gs:// URL with a valid bucket name; 0 otherwise (NULL too). */
int gcs_is_url(const char *s);

/* 1 if SOURCE asks for a listing: "gs://B/PREFIX/" (every object ending in
 * ".tar" under PREFIX) or a last component holding '*' (a glob on the names
 * directly under PREFIX), as for s3:// (s3.h). */
int gcs_is_listing(const char *source);

/* Lists SOURCE with list-type=2, following every continuation token; keys
 * sorted byte-wise, as "gs://B/KEY"; h must carry gcs_http_auth's hooks.
 * Returns 0 or -errno with a one-line reason in err (-ENODATA: nothing
 * matches; -E2BIG: more than max). */
MUST_CHECK
int gcs_list_shards(struct http *h, const char *source, size_t max,
		    struct shardlist *out, char *err, size_t errlen);

/* The last GCS error reason seen ("GCS AccessDenied: ...") into buf, ""
 * if none: appended to a failed mount's one-line message. */
const char *gcs_last_error(struct gcs *g, char *buf, size_t buflen);

#endif
