/* resolve.h - from SOURCE to an index: the shard list, then the index that
 * was given, or the one cached from an earlier mount, or the one published
 * beside the shards, or one built by streaming every shard once. */
#ifndef ECHOFS_RESOLVE_H
#define ECHOFS_RESOLVE_H

#include "common/attrs.h"
#include <stddef.h>
#include <stdint.h>

struct http;
struct store;
struct index;

struct resolve_opts {
	const char *source;    /* URL pattern, or path/URL of a list file */
	const char *index;     /* index= option (URL or path), or NULL */
	const char *cache_dir; /* for the cached index; NULL: none */
	unsigned jobs;         /* shards indexed at a time */
	int progress;          /* show a progress line on stderr */
	/* Look only (echofs --check): never build or save an index; -ENOENT
	 * (with info filled) when none is found. */
	int look_only;
};

struct resolve_info {
	const char *index_from; /* "option", "cache", "beside", "built" (static) */
	uint64_t tar_skipped;   /* members skipped while building, else 0 */
	size_t nshards;         /* shards SOURCE lists */
	char first_shard[1024]; /* the first of them (with its credentials) */
	uint64_t bad_label;     /* samples with a bad .cls, idem */
};

/* The index for SOURCE. Its shard list must equal SOURCE's. Unless every
 * shard is already in st, one uncached shard is probed so that an
 * unreachable server fails the mount now rather than the first read. A
 * built or fetched index is saved under cache_dir/index/ for later mounts.
 * Returns 0 or -errno with a one-line reason in err (URLs redacted). */
MUST_CHECK
int resolve_open(const struct resolve_opts *o, struct http *h,
		 struct store *st, struct index **out,
		 struct resolve_info *info, char *err, size_t errlen);

/* The URL or path where the index beside the shards of SOURCE is looked
 * for: the last path component up to its first '{' (or without ".tar"),
 * trailing '-', '_' and '.' removed, plus ".echofs-index". E.g.
 * "http://h/ds/train-{000000..000059}.tar" -> "http://h/ds/train.echofs-index";
 * a list file "http://h/ds/train.txt" -> "http://h/ds/train.echofs-index".
 * A source without a stem (an s3 prefix "s3://B/ds/train/" or
 * "s3://B/ds/train/GLOB") is named after the prefix's last component,
 * inside the prefix: "s3://B/ds/train/train.echofs-index"; at the root of
 * a bucket or host, "shards.echofs-index".
 * Writes into buf; returns 0 or -ENAMETOOLONG. */
int resolve_beside_index(const char *source, char *buf, size_t buflen);

#endif
