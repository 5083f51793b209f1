/* scheme.h - which transport a source, index or shard URL needs: the one
 * place above the backends that reads URL schemes (cache/dataset.c,
 * cache/index/resolve.c and fetch/net/bucket.c ask here; the bucket schemes
 * themselves are the ones fetch/net/bucket.c registers). */
#ifndef ECHOFS_SCHEME_H
#define ECHOFS_SCHEME_H

enum fetch_scheme {
	FETCH_SCHEME_FILE,   /* a local path (a shard list file) */
	FETCH_SCHEME_HTTP,   /* http:// or https:// */
	FETCH_SCHEME_BUCKET, /* a registered bucket backend's (s3://, gs://)
				with a valid bucket name (fetch/net/bucket.h) */
	FETCH_SCHEME_OTHER,  /* another scheme, or a bucket URL that is not
				valid: refused by the transfers */
};

/* The scheme of url (case-insensitive); NULL is FETCH_SCHEME_FILE. */
enum fetch_scheme fetch_scheme_of(const char *url);

/* 1 if url starts "SCHEME://" (scheme case-insensitive, e.g. "s3"). */
int fetch_has_scheme(const char *url, const char *scheme);

/* 1 if source is a SCHEME:// URL, or a local shard list file with a line of
 * that scheme (so a mount of it needs that backend); 0 otherwise. */
int fetch_source_has(const char *source, const char *scheme);

/* Where the host (or bucket) of url starts: past "scheme://", or url
 * itself for a path. */
const char *fetch_url_authority(const char *url);

#endif
