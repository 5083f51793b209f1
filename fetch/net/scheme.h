/* scheme.h - which transport a source, index or shard URL needs: the one
 * place above the backends that knows URL schemes (fs/options.c,
 * cache/dataset.c and cache/index/resolve.c should ask here). */
#ifndef ECHOFS_SCHEME_H
#define ECHOFS_SCHEME_H

enum fetch_scheme {
	FETCH_SCHEME_FILE,  /* a local path (a shard list file) */
	FETCH_SCHEME_HTTP,  /* http:// or https:// */
	FETCH_SCHEME_S3,    /* s3://BUCKET/... (fetch/net/s3.c) */
	FETCH_SCHEME_GS,    /* gs://BUCKET/... (fetch/net/gcs.c) */
	FETCH_SCHEME_OTHER, /* another scheme, or a bucket URL that is not
			       valid: refused by the transfers */
};

/* The scheme of url (case-insensitive); NULL is FETCH_SCHEME_FILE. */
enum fetch_scheme fetch_scheme_of(const char *url);

/* 1 if source is a URL of scheme s, or a local shard list file with a line
 * of that scheme (so a mount of it needs that backend); 0 otherwise. */
int fetch_source_has(const char *source, enum fetch_scheme s);

/* Where the host (or bucket) of url starts: past "scheme://", or url
 * itself for a path. */
const char *fetch_url_authority(const char *url);

#endif
