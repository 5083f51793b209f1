/* bucket.h - object-store backends (s3://, gs://) behind one interface.
 *
 * A backend is one file that fills a struct bucket_ops (its URL scheme,
 * addressing, signing hooks, listing, last error) and one line in
 * bucket.c's registry; nothing above fetch/net names a backend. Callers
 * open the backends a set of URLs needs as one struct buckets, give its
 * chained hooks to http_open (http_opts.auth) and ask it for the services'
 * own reasons when something fails.
 *
 * URL forms, as the shard list and the index hold them:
 *   SCHEME://BUCKET/KEY    an object; KEY is raw (not percent-encoded)
 *   SCHEME://BUCKET?QUERY  a bucket-level request (a listing page)
 *   SCHEME://BUCKET/PREFIX/ or SCHEME://BUCKET/PREFIX/GLOB  a listing source
 *
 * Thread safety: after buckets_open, the hooks may be called from any
 * thread (each backend's own rules: s3.h, gcs.h). */
#ifndef ECHOFS_BUCKET_H
#define ECHOFS_BUCKET_H

#include "common/attrs.h"
#include <stddef.h>

struct http;
struct http_auth;
struct shardlist;

/* The mount's settings a backend may read (borrowed; NULL or 0: unset). */
struct bucket_conf {
	const char *endpoint; /* -o endpoint= */
	const char *region;   /* -o region= (S3) */
	const char *profile;  /* -o profile= (S3) */
	int path_style;	      /* -o path_style=1 (S3) */
	int requester_pays;   /* -o requester_pays=1 (S3) */
	int no_sign;	      /* -o no_sign=1: anonymous requests */
	/* CAs the credential requests trust, as the transfers do */
	const char *ca_file, *ca_path;
};

struct bucket_ops {
	const char *scheme; /* "s3": its URLs start "s3://" */
	/* 1 if url is one of ours with a valid bucket name */
	int (*is_url)(const char *url);
	/* 1 if source asks for a listing (PREFIX/ or a glob) */
	int (*is_listing)(const char *source);
	/* 1 if c sets an option only this backend takes (S3's region=...) */
	int (*takes)(const struct bucket_conf *c);
	/* Settles addressing and finds credentials now (unless no_sign).
	 * Returns 0 with *out set, or -errno with a one-line reason. */
	int (*open)(const struct bucket_conf *c, void **out, char *err,
		    size_t errlen);
	void (*free)(void *b); /* accepts NULL */
	/* The hooks for http_opts.auth (point into b). URLs this backend did
	 * not map, and mapped URLs that are not its own (sign, failed), go to
	 * next (copied; NULL: used as they are); header names no URL, so it
	 * reads only its service's headers and passes every one to next. */
	const struct http_auth *(*hooks)(void *b, const struct http_auth *next);
	/* Optional: called once after http_open with the hooks, before any
	 * other request, with each URL of the set (S3 finds its bucket's
	 * region from the first of its own). */
	void (*ready)(void *b, struct http *h, const char *url);
	/* Lists source (is_listing) through h, keys sorted byte-wise as
	 * "SCHEME://B/KEY"; at most max (-E2BIG); -ENODATA for none. */
	int (*list)(struct http *h, const char *source, size_t max,
		    struct shardlist *out, char *err, size_t errlen);
	/* The service's last refusal ("S3 AccessDenied: ...") into buf, ""
	 * if none. */
	const char *(*last_error)(void *b, char *buf, size_t buflen);
};

/* The backend whose scheme url has (case-insensitive), or NULL. */
const struct bucket_ops *bucket_of(const char *url);

/* The i-th registered backend, NULL past the last. */
const struct bucket_ops *bucket_at(size_t i);

/* 1 if source asks a backend for a listing. */
int bucket_is_listing(const char *source);

/* Lists source with its backend (see bucket_ops.list); -EINVAL when no
 * backend lists it. */
MUST_CHECK
int bucket_list_shards(struct http *h, const char *source, size_t max,
		       struct shardlist *out, char *err, size_t errlen);

struct buckets;

/* Opens every backend that urls[0..n) need (a URL of its scheme, or a
 * local shard list file with a line of that scheme; NULL entries are
 * skipped), every backend c sets an option of, and, when c sets endpoint=
 * or no_sign= while no URL needs any backend, the first registered (S3).
 * Returns 0 with *out set (perhaps with no backend open), or -errno with
 * the failing backend's one-line reason. */
MUST_CHECK
int buckets_open(const struct bucket_conf *c, const char *const *urls, size_t n,
		 struct buckets **out, char *err, size_t errlen);
/* Accepts NULL. Free after the http client that holds the hooks. */
void buckets_free(struct buckets *b);

/* The chained hooks of the open backends for http_opts.auth, or NULL when
 * none is open. Valid until buckets_free. */
const struct http_auth *buckets_hooks(struct buckets *b);

/* Every open backend's ready hook with each of urls[0..n) (see
 * bucket_ops.ready); accepts NULL b. */
void buckets_ready(struct buckets *b, struct http *h, const char *const *urls,
		   size_t n);

/* Appends " (REASON)" to err for each open backend's last refusal not
 * already in it. Accepts NULL b. */
void buckets_explain(struct buckets *b, char *err, size_t errlen);

#endif
