/* resolve.c - from SOURCE to an index: the shard list, then the index that
 * was given, or the one cached from an earlier mount, or the one published
 * beside the shards, or one built by streaming every shard once. */
#include "cache/index/resolve.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cache/index/indexer.h"
#include "cache/store/store.h"
#include "common/file.h"
#include "common/log.h"
#include "common/util.h"
#include "fetch/format/index.h"
#include "fetch/format/index_bin.h"
#include "fetch/net/bucket.h"
#include "fetch/net/http.h"
#include "fetch/net/scheme.h"
#include "fetch/net/shardlist.h"

#define MAX_SHARDS 10000000
#define LIST_CAP (256u << 20)

/* URL or local path into memory. */
static int read_any(struct http *h, const char *where, size_t cap, char **out,
		    size_t *len)
{
	if (shardlist_is_url(where))
		return http_get_all(h, where, cap, out, len);
	return file_read_all(where, cap, out, len);
}

static const char *last_component(const char *s)
{
	const char *q = strpbrk(s, "?#");
	const char *end = q ? q : s + strlen(s);
	const char *p = end;
	while (p > s && p[-1] != '/')
		p--;
	return p;
}

/* A source names shards when its last component holds ".tar". */
static int is_shard_pattern(const char *source)
{
	return shardlist_is_url(source) &&
	       strstr(last_component(source), ".tar");
}

static int shard_list(const struct resolve_opts *o, struct http *h,
		      struct shardlist *l, char *err, size_t errlen)
{
	char red[512], *text = NULL;
	size_t len, bad = 0;
	int r;

	if (bucket_is_listing(o->source))
		return bucket_list_shards(h, o->source, MAX_SHARDS, l, err,
					  errlen);
	if (is_shard_pattern(o->source)) {
		r = shardlist_expand(o->source, MAX_SHARDS, l);
		if (r)
			snprintf(err, errlen, "bad shard pattern %s (%s)",
				 http_redact(o->source, red, sizeof(red)),
				 strerror(-r));
		return r;
	}
	r = read_any(h, o->source, LIST_CAP, &text, &len);
	if (r) {
		snprintf(err, errlen, "cannot read shard list %s: %s",
			 http_redact(o->source, red, sizeof(red)),
			 shardlist_is_url(o->source) ? http_reason(r)
						     : strerror(-r));
		return r;
	}
	r = shardlist_parse(text, len, MAX_SHARDS, l, &bad);
	free(text);
	if (!r && l->n == 0)
		r = -ENODATA;
	for (size_t i = 0; !r && i < l->n; i++)
		if (!shardlist_is_url(l->urls[i]))
			r = -EPROTONOSUPPORT, bad = i + 1;
	if (r)
		snprintf(err, errlen, "bad shard list %s (line %zu): %s",
			 http_redact(o->source, red, sizeof(red)), bad,
			 r == -EPROTONOSUPPORT ? "not an http(s), s3 or gs URL"
			 : r == -ENODATA       ? "no shards listed"
					       : strerror(-r));
	return r;
}

struct url_at {
	uint64_t hash; /* of the stored form */
	size_t i;
};

static int cmp_url_at(const void *a, const void *b)
{
	const struct url_at *x = a, *y = b;
	if (x->hash != y->hash)
		return x->hash < y->hash ? -1 : 1;
	return x->i < y->i ? -1 : x->i > y->i;
}

/* The compared form of a list entry: normal (shardlist_normalise: "/./",
 * "%30", "HTTP://H:80" are spellings of one shard), then without its
 * credentials (the same object signed twice is one shard). */
static char *compared_form(const char *url)
{
	char *n = shardlist_normalise(url), *s = http_strip_secrets(n);

	explicit_bzero(n, strlen(n)); /* it holds url's credentials */
	free(n);
	return s;
}

/* Why entries a and b, of one compared form, differ as written. */
static const char *how_alike(const char *a, const char *b, char *buf,
			     size_t buflen)
{
	char *sa, *sb, red[512];
	int creds;

	if (strcmp(a, b) == 0)
		return "";
	sa = http_strip_secrets(a);
	sb = http_strip_secrets(b);
	creds = strcmp(sa, sb) == 0;
	free(sa);
	free(sb);
	if (creds)
		return ", the same once credentials are left out";
	snprintf(buf, buflen, ", the second spelled %s",
		 http_redact(b, red, sizeof(red)));
	return buf;
}

/* Two entries naming one shard (compared_form) fail the mount: a list that
 * names a shard twice is a mistake (lists concatenated, a glob overlapping
 * another), and quietly reading it once or twice would change the dataset
 * either way. Failing also keeps a false match of the normal form (a
 * server that tells "a/./x" from "a/x") from dropping a shard unseen. */
static int check_unique(const struct resolve_opts *o, const struct shardlist *l,
			char *err, size_t errlen)
{
	struct url_at *at = xmalloc((l->n ? l->n : 1) * sizeof(*at));
	char **s = xcalloc(l->n ? l->n : 1, sizeof(*s)), red[512], red2[512];
	char how[600];
	int r = 0;

	for (size_t i = 0; i < l->n; i++) {
		s[i] = compared_form(l->urls[i]);
		at[i] = (struct url_at){hash64(s[i], strlen(s[i]), 0), i};
	}
	qsort(at, l->n, sizeof(*at), cmp_url_at);
	for (size_t k = 1; k < l->n && !r; k++) {
		size_t a = at[k - 1].i, b = at[k].i;
		if (at[k].hash != at[k - 1].hash || strcmp(s[a], s[b]) != 0)
			continue;
		snprintf(err, errlen,
			 "%s names shard %s twice (shards %zu and %zu%s): "
			 "list it once",
			 http_redact(o->source, red, sizeof(red)),
			 http_redact(l->urls[a], red2, sizeof(red2)), a + 1,
			 b + 1,
			 how_alike(l->urls[a], l->urls[b], how, sizeof(how)));
		r = -EINVAL;
	}
	for (size_t i = 0; i < l->n; i++)
		free(s[i]);
	free(s);
	free(at);
	return r;
}

/* Empty shards add nothing: one line says how many, naming the first. */
static void warn_empty(const struct index *ix)
{
	size_t n = 0, first = 0;
	char red[512];

	for (size_t i = ix->nshards; i-- > 0;)
		if (ix->shards[i].size == 0)
			n++, first = i;
	if (n)
		log_warn("%zu shard%s empty (0 bytes), adding no samples: "
			 "shard %zu (%s)%s",
			 n, n == 1 ? " is" : "s are", first + 1,
			 http_redact(ix->shards[first].url, red, sizeof(red)),
			 n > 1 ? " and more" : "");
}

/* The last non-empty path component before comp (a prefix's own name),
 * not the host or bucket; *len 0 when comp is at the root. */
static const char *dir_name(const char *source, const char *comp, size_t *len)
{
	const char *root = fetch_url_authority(source), *end = comp, *p;

	root += strcspn(root, "/"); /* past host or bucket */
	while (end > root && end[-1] == '/')
		end--;
	p = end;
	while (p > root && p[-1] != '/')
		p--;
	*len = end > root ? (size_t)(end - p) : 0;
	return p;
}

int resolve_beside_index(const char *source, char *buf, size_t buflen)
{
	const char *comp = last_component(source), *name = comp;
	size_t dirlen = (size_t)(comp - source), stem;
	const char *brace = strpbrk(comp, "{*"), *dot; /* '*': s3 listing */

	if (brace) {
		stem = (size_t)(brace - comp);
	} else {
		dot = strrchr(comp, '.');
		stem = dot && dot != comp ? (size_t)(dot - comp)
					  : strcspn(comp, "?#");
	}
	while (stem > 0 && strchr("-_.", comp[stem - 1]))
		stem--;
	/* a prefix ("s3://B/ds/train/", ".../train/GLOB") is named after its
	 * last component, inside it; the root after nothing: "shards" */
	if (stem == 0)
		name = dir_name(source, comp, &stem);
	if (stem == 0)
		name = "shards", stem = 6;
	int n = snprintf(buf, buflen, "%.*s%.*s.echofs-index", (int)dirlen,
			 source, (int)stem, name);
	return n < 0 || (size_t)n >= buflen ? -ENAMETOOLONG : 0;
}

/* cache_dir/index/<hash of the shard URLs>.echofs-index */
static void cached_index_path(const char *cache_dir, const struct shardlist *l,
			      char *buf, size_t buflen)
{
	uint64_t hsh = hash64("echofs-index", 12, l->n);
	/* Without credentials: a new token finds the same cached index. */
	for (size_t i = 0; i < l->n; i++) {
		char *u = http_strip_secrets(l->urls[i]);
		hsh = hash64(u, strlen(u) + 1, hsh);
		free(u);
	}
	snprintf(buf, buflen, "%s/index/%016llx.echofs-index", cache_dir,
		 (unsigned long long)hsh);
}

/* Is the index's URL ix the list's URL u? Equal once the secrets are
 * stripped from u (a kept index holds them stripped), and from ix too (a
 * published one may hold other credentials). A published index (given, or
 * beside the shards: echofs-index writes no query) may also name it
 * without its query: its place in the list tells such shards apart. */
static int same_shard_url(const char *ix, const char *u, int published)
{
	char *sx, *su;
	int same;

	if (strcmp(ix, u) == 0)
		return 1;
	su = http_strip_secrets(u);
	same = strcmp(ix, su) == 0;
	if (!same) {
		sx = http_strip_secrets(ix);
		same = strcmp(sx, su) == 0;
		free(sx);
	}
	free(su);
	if (!same && published) {
		su = http_strip_query(u);
		same = strcmp(ix, su) == 0;
		free(su);
	}
	return same;
}

/* The index must describe exactly SOURCE's shards, in order. Indexes are
 * stored without credentials: a match takes SOURCE's URL, which the
 * daemon keeps in memory only. */
static int check_matches(struct index *ix, const struct shardlist *l,
			 const char *what, int published, char *err,
			 size_t errlen)
{
	char red[512];
	if (ix->nshards != l->n) {
		snprintf(err, errlen, "%s lists %zu shards but SOURCE has %zu",
			 what, ix->nshards, l->n);
		return -EINVAL;
	}
	for (size_t i = 0; i < l->n; i++) {
		if (strcmp(ix->shards[i].url, l->urls[i]) != 0 &&
		    same_shard_url(ix->shards[i].url, l->urls[i], published)) {
			index_set_url(ix, (uint32_t)i, l->urls[i]);
			continue;
		}
		if (strcmp(ix->shards[i].url, l->urls[i]) != 0) {
			snprintf(err, errlen,
				 "%s does not match SOURCE at shard %zu (%s)",
				 what, i,
				 http_redact(l->urls[i], red, sizeof(red)));
			return -EINVAL;
		}
	}
	return 0;
}

/* Load and parse an index from a URL or path. -ENOENT when it is absent. */
static int load_index(struct http *h, const char *where, struct index **out,
		      char *err, size_t errlen)
{
	char perr[256], red[512], *text = NULL;
	size_t len;
	int r;

	/* A local file is read once, at its size (index_load); a fetched one
	 * is parsed in the buffer it arrived in. */
	if (!shardlist_is_url(where)) {
		r = index_load(where, out, perr, sizeof(perr));
		if (r && r != -EBADMSG) {
			snprintf(err, errlen, "cannot read index %s: %s", where,
				 strerror(-r));
			return r;
		}
		goto parsed;
	}
	r = http_get_all(h, where, INDEX_FILE_MAX - 1, &text, &len);
	if (r) {
		snprintf(err, errlen, "cannot read index %s: %s",
			 http_redact(where, red, sizeof(red)), http_reason(r));
		return r;
	}
	r = index_parse_owned(text, len, out, perr, sizeof(perr));
parsed:
	if (r)
		snprintf(err, errlen, "corrupt index %s: %s",
			 http_redact(where, red, sizeof(red)), perr);
	else if ((*out)->skipped.first_line)
		log_warn("index %s: skipped %llu samples with unsafe names, "
			 "%llu with bad labels and %llu members with unsafe "
			 "names (first at line %zu: %s)",
			 http_redact(where, red, sizeof(red)),
			 (unsigned long long)(*out)->skipped.names,
			 (unsigned long long)(*out)->skipped.labels,
			 (unsigned long long)(*out)->skipped.members,
			 (*out)->skipped.first_line, (*out)->skipped.first_why);
	return r;
}

static void show_progress(void *ud, size_t done, size_t total,
			  unsigned long long bytes)
{
	int tty = *(int *)ud;
	if (tty || done == total)
		fprintf(stderr, "%sechofs: indexing %zu/%zu shards, %.1f MB%s",
			tty ? "\r" : "", done, total, (double)bytes / 1e6,
			done == total || !tty ? "\n" : "");
}

static int build_index(const struct resolve_opts *o, struct http *h,
		       struct store *st, const struct shardlist *l,
		       struct index **out, struct indexer_skips *skipped,
		       char *err, size_t errlen)
{
	int tty = isatty(STDERR_FILENO);
	double t0 = now_mono();
	int r = indexer_build(h, st, l, o->jobs ? o->jobs : 4,
			      o->progress ? show_progress : NULL, &tty, out,
			      skipped, err, errlen);
	if (!r)
		log_info("indexed %zu shards, %zu samples in %.1f s",
			 (*out)->nshards, (*out)->nsamples, now_mono() - t0);
	return r;
}

static void save_cached(const char *path, struct index *ix)
{
	char dir[4096];
	struct stat sb;

	snprintf(dir, sizeof(dir), "%s", path);
	char *slash = strrchr(dir, '/');
	if (slash)
		*slash = '\0';
	if (mkdir(dir, 0700) != 0 &&
	    (errno != EEXIST || stat(dir, &sb) != 0 || !S_ISDIR(sb.st_mode))) {
		log_warn("cannot keep the index: cannot make %s: %s", dir,
			 errno == EEXIST ? "not a directory" : strerror(errno));
		return;
	}
	/* The copy on disk holds no credential: URLs stripped for the write
	 * (nothing else uses the index yet), and only its owner reads it,
	 * from its first byte on. */
	const char **kept = xmalloc((ix->nshards + 1) * sizeof(*kept));
	for (size_t i = 0; i < ix->nshards; i++) {
		kept[i] = ix->shards[i].url;
		ix->shards[i].url = http_strip_secrets(kept[i]);
	}
	int r = index_bin_save_mode(ix, path, 0600);
	for (size_t i = 0; i < ix->nshards; i++) {
		free((char *)ix->shards[i].url);
		ix->shards[i].url = kept[i];
	}
	free(kept);
	if (r)
		log_warn("cannot keep the index in %s: %s", dir, strerror(-r));
}

/* Fail now when a shard is not cached and its server can't be reached. */
static int probe(struct http *h, struct store *st, const struct index *ix,
		 char *err, size_t errlen)
{
	for (size_t i = 0; i < ix->nshards; i++) {
		const struct index_shard *s = &ix->shards[i];
		struct store_entry *e =
			st ? store_get(st, s->url, s->etag, s->size) : NULL;
		if (e) {
			store_put(e);
			continue;
		}
		char etag[HTTP_ETAG_MAX], red[512];
		uint64_t size;
		int r = http_stat(h, s->url, &size, etag, sizeof(etag));
		http_redact(s->url, red, sizeof(red));
		if (r == -ENOENT || r == -EACCES) {
			/* The server answers: this shard's files will fail
			 * with EIO, the others work. */
			log_warn("shard %s: %s", red, http_reason(r));
			return 0;
		}
		if (r) {
			snprintf(err, errlen, "cannot reach shard %s: %s", red,
				 http_reason(r));
			return r;
		}
		if (size != s->size || (s->etag[0] && strcmp(etag, s->etag)))
			log_warn("shard %s changed since it was indexed: its "
				 "files "
				 "will fail with EIO; index it again",
				 red);
		return 0;
	}
	return 0;
}

/* The key that keeps query strings off the disk (http_strip_secrets): the
 * cache_dir's own, so a later mount finds what this one kept. Without it
 * the process's random key still keeps them off, but nothing kept for a URL
 * with a query is found again. */
static void use_url_key(const struct resolve_opts *o)
{
	int r = http_url_key_use(o->cache_dir, !o->look_only);

	if (r && !(r == -ENOENT && o->look_only))
		log_warn("cache dir %s: no key for URL digests (%s): shards "
			 "with "
			 "a query string are not found again by later mounts",
			 o->cache_dir, strerror(-r));
}

/* Where the binary copy of a text index given by index= is kept: under
 * cache_dir/index/, keyed by the text's XXH3 (a local file) or by its URL
 * (without secrets), size and ETag. -ENOENT when none is kept for it: no
 * cache_dir, a look-only run, a binary index already, a URL without an
 * ETag (a change could not be told) or one that cannot be reached (the
 * load then says why). */
static int given_copy_path(const struct resolve_opts *o, struct http *h,
			   char *buf, size_t buflen)
{
	char etag[HTTP_ETAG_MAX], head[INDEX_BIN_MAGIC_LEN];
	uint64_t key, size;
	int fd;

	buf[0] = '\0';
	if (!o->cache_dir || o->look_only)
		return -ENOENT;
	if (shardlist_is_url(o->index)) {
		char *u;
		if (http_stat(h, o->index, &size, etag, sizeof(etag)) ||
		    !etag[0])
			return -ENOENT;
		u = http_strip_secrets(o->index);
		key = hash64(u, strlen(u) + 1, size);
		key = hash64(etag, strlen(etag), key);
		free(u);
	} else {
		fd = open(o->index, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
		if (fd < 0)
			return -ENOENT;
		size = pread(fd, head, sizeof(head), 0) == sizeof(head) &&
		       index_bin_is(head, sizeof(head));
		close(fd);
		if (size || index_bin_file_sum(o->index, &key))
			return -ENOENT;
	}
	snprintf(buf, buflen, "%s/index/given-%016llx.echofs-index",
		 o->cache_dir, (unsigned long long)key);
	return 0;
}

/* The kept binary copy of a given index, when there is one that loads and
 * matches SOURCE; a broken one is removed (and made again). */
static bool load_copy(struct http *h, const char *copy,
		      const struct shardlist *l, struct index **out)
{
	char err[512];

	if (access(copy, R_OK) != 0)
		return false;
	if (load_index(h, copy, out, err, sizeof(err)) == 0 &&
	    check_matches(*out, l, "kept copy of the index", 1, err,
			  sizeof(err)) == 0) {
		log_info("index from option: its binary copy %s", copy);
		return true;
	}
	log_warn("ignoring the kept copy of the index %s: %s", copy, err);
	index_free(*out);
	*out = NULL;
	unlink(copy);
	return false;
}

/* Index from option, cache or beside the shards; -ENOENT when none of them
 * has one (then the caller builds it). */
static int find_index(const struct resolve_opts *o, struct http *h,
		      const struct shardlist *l, const char *cached, char *copy,
		      size_t copylen, struct index **out,
		      struct resolve_info *info, char *err, size_t errlen)
{
	char beside[4096];
	int r;

	if (o->index) {
		info->index_from = "option";
		r = given_copy_path(o, h, copy, copylen);
		if (r == 0 && load_copy(h, copy, l, out)) {
			copy[0] = '\0'; /* kept already */
			return 0;
		}
		r = load_index(h, o->index, out, err, errlen);
		return r == -ENOENT ? -EINVAL : r; /* given but missing: fail */
	}
	if (cached[0] && access(cached, R_OK) == 0) {
		info->index_from = "cache";
		r = load_index(h, cached, out, err, errlen);
		if (r == 0 &&
		    check_matches(*out, l, "cached index", 0, err, errlen) == 0)
			return 0;
		log_warn("ignoring cached index %s: %s", cached, err);
		index_free(*out);
		*out = NULL;
		unlink(cached);
	}
	if (resolve_beside_index(o->source, beside, sizeof(beside)) != 0)
		return -ENOENT;
	info->index_from = "beside";
	r = load_index(h, beside, out, err, errlen);
	if (r == -ENOENT)
		log_info("no index beside the shards; building one");
	return r;
}

int resolve_open(const struct resolve_opts *o, struct http *h, struct store *st,
		 struct index **out, struct resolve_info *info, char *err,
		 size_t errlen)
{
	struct shardlist l = {0};
	char cached[4096] = "", copy[4096] = "";
	int r;

	*out = NULL;
	memset(info, 0, sizeof(*info));
	r = shard_list(o, h, &l, err, errlen);
	if (!r && o->cache_dir)
		use_url_key(o); /* before any stored form is made */
	if (!r)
		r = check_unique(o, &l, err, errlen);
	if (r)
		goto out;
	info->nshards = l.n;
	snprintf(info->first_shard, sizeof(info->first_shard), "%s", l.urls[0]);
	if (o->cache_dir)
		cached_index_path(o->cache_dir, &l, cached, sizeof(cached));
	r = find_index(o, h, &l, cached, copy, sizeof(copy), out, info, err,
		       errlen);
	if (r == -ENOENT && o->look_only) {
		info->index_from = "none";
		goto out;
	}
	if (r == 0) { /* counted like the tar path's skips */
		info->tar_skipped = (*out)->skipped.names;
		info->bad_label = (*out)->skipped.labels;
	}
	if (r == -ENOENT) {
		info->index_from = "built";
		struct indexer_skips sk = {0};
		r = build_index(o, h, st, &l, out, &sk, err, errlen);
		info->tar_skipped = sk.members;
		info->bad_label = sk.bad_label;
	}
	if (r)
		goto out;
	r = check_matches(*out, &l,
			  o->index ? "index" : "index beside the shards", 1,
			  err, errlen);
	if (r)
		goto out;
	warn_empty(*out);
	/* Keep a copy for later mounts, unless it came from there or the
	 * user names it each time. */
	if (cached[0] && !o->look_only &&
	    (strcmp(info->index_from, "built") == 0 ||
	     strcmp(info->index_from, "beside") == 0))
		save_cached(cached, *out);
	/* A text index given by index= is converted once; later mounts map
	 * the copy (find_index). */
	if (copy[0] && strcmp(info->index_from, "option") == 0)
		save_cached(copy, *out);
	r = probe(h, st, *out, err, errlen);
out:
	if (r) {
		index_free(*out);
		*out = NULL;
	}
	shardlist_clear(&l);
	return r;
}
