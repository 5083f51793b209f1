/* control.c - the control files under MOUNTPOINT/.echofs: stats as JSON
 * (stats) and in Prometheus text format (stats.prom). */
#include "fs/control.h"

#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cache/shards.h"
#include "cache/store.h"
#include "common/util.h"
#include "fetch/http.h"
#include "fetch/index.h"
#include "fs/namespace.h"
#include "fs/push.h"

/* The fetch rate is measured over the time since the previous sample taken
 * at least RATE_WINDOW_S ago, so frequent readers see a steady figure. */
#define RATE_WINDOW_S 2.0

struct control {
	struct control_sources src;
	double start;
	pthread_mutex_t lock; /* guards the rate samples below */
	double rate_t;
	uint64_t rate_bytes;
	double rate;
};

struct control *control_new(const struct control_sources *src)
{
	struct control *c = xcalloc(1, sizeof(*c));
	c->src = *src;
	c->start = now_mono();
	c->rate_t = c->start;
	pthread_mutex_init(&c->lock, NULL);
	return c;
}

void control_free(struct control *c)
{
	if (!c)
		return;
	pthread_mutex_destroy(&c->lock);
	free(c);
}

/* One flat snapshot of every figure, so both formats list the same. */
struct snapshot {
	struct shards_stats sh;
	struct http_stats http;
	struct store_stats st;
	struct push_stats push;
	uint64_t cached_shards;
	double uptime, rate;
};

static void take_snapshot(struct control *c, struct snapshot *s)
{
	const struct index *ix = c->src.ns->ix;
	double now = now_mono();

	memset(s, 0, sizeof(*s));
	shards_get_stats(c->src.sh, &s->sh);
	http_get_stats(c->src.http, &s->http);
	if (c->src.store)
		store_get_stats(c->src.store, &s->st);
	push_get_stats(c->src.push, &s->push);
	for (size_t i = 0; i < ix->nshards; i++)
		s->cached_shards += (uint64_t)shards_is_cached(c->src.sh, (uint32_t)i);
	s->uptime = now - c->start;

	pthread_mutex_lock(&c->lock);
	if (now - c->rate_t >= RATE_WINDOW_S) {
		c->rate = (double)(s->http.bytes - c->rate_bytes) /
			  (now - c->rate_t);
		c->rate_t = now;
		c->rate_bytes = s->http.bytes;
	}
	s->rate = c->rate;
	pthread_mutex_unlock(&c->lock);
}

/* A growing text buffer for the renderers. */
struct out {
	char *buf;
	size_t len, cap;
};

static void put(struct out *o, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));
static void put(struct out *o, const char *fmt, ...)
{
	va_list ap;
	for (;;) {
		va_start(ap, fmt);
		int n = vsnprintf(o->buf + o->len, o->cap - o->len, fmt, ap);
		va_end(ap);
		if (n < 0)
			return;
		if ((size_t)n < o->cap - o->len) {
			o->len += (size_t)n;
			return;
		}
		o->cap = o->cap * 2 + (size_t)n;
		o->buf = xrealloc(o->buf, o->cap);
	}
}

/* name, value pairs shared by both formats; kind 'c' counter, 'g' gauge */
struct metric {
	const char *name;
	char kind;
	double value;
	const char *help;
};

static size_t metrics(const struct control *c, const struct snapshot *s,
		      struct metric *m)
{
	const struct fs_counters *fc = c->src.fc;
	const struct index *ix = c->src.ns->ix;
	size_t n = 0;
#define M(nm, k, v, h) m[n++] = (struct metric){nm, k, (double)(v), h}
	M("samples", 'g', c->src.ns->nfiles, "files in the tree");
	M("shards", 'g', ix->nshards, "shards in the index");
	M("classes", 'g', c->src.ns->nclasses, "class directories");
	M("shards_cached", 'g', s->cached_shards, "shards complete in the disk cache");
	M("bytes_fetched", 'c', s->http.bytes, "HTTP body bytes received");
	M("fetch_rate_bps", 'g', s->rate, "HTTP bytes/s over the last seconds");
	M("cache_hits", 'c', s->sh.hits, "reads served from the disk cache");
	M("cache_misses", 'c', s->sh.misses, "reads that waited for a fetch");
	M("range_reads", 'c', s->sh.range_reads, "reads served by a range GET");
	M("retries", 'c', s->http.retries, "HTTP attempts repeated");
	M("resumes", 'c', s->http.resumes, "broken bodies resumed");
	M("http_requests", 'c', s->http.requests, "HTTP transfers started");
	M("shards_fetched", 'c', s->sh.fetched_shards, "whole shards fetched");
	M("fetches_queued", 'g', s->sh.queued, "shards waiting for a connection");
	M("fetches_active", 'g', s->sh.active, "shard fetches in progress");
	M("open_handles", 'g', fc->open_handles,
	  "echofs file handles open now (exact mounts use none)");
	M("reads", 'c', fc->reads, "read requests");
	M("bytes_served", 'c', fc->bytes_served, "bytes returned to readers");
	M("page_cache_pushed", 'c', s->push.files,
	  "files pushed into the kernel page cache");
	M("page_cache_push_skipped", 'c', s->push.unknown,
	  "files not pushed (inode not known to the kernel yet)");
	M("cache_bytes", 'g', s->st.bytes, "bytes in the disk cache");
	M("cache_size", 'g', s->st.cap, "disk cache cap");
	M("cache_evictions", 'c', s->st.evictions, "cache entries evicted");
	M("uptime_s", 'g', s->uptime, "seconds since mount");
#undef M
	return n;
}

static size_t errors(const struct control *c, const struct snapshot *s,
		     struct metric *m)
{
	size_t n = 0;
#define E(nm, v, h) m[n++] = (struct metric){nm, 'c', (double)(v), h}
	E("http_4xx", s->http.errors_4xx, "HTTP 4xx replies");
	E("http_5xx", s->http.errors_5xx, "HTTP 5xx replies");
	E("connection", s->http.errors_conn, "connect, TLS, reset or timeout");
	E("verify", s->http.errors_verify, "ETag, length or range mismatches");
	E("shard_failed", s->sh.failed_shards, "shard fetches that failed");
	E("read", c->src.fc->read_errors, "reads that returned an error");
	E("cache_corrupt", s->st.corrupt, "corrupt cache entries dropped");
	E("cache_write", s->st.write_errors, "cache entries not written");
	E("tar_skipped", c->src.tar_skipped, "tar members skipped at indexing");
	E("bad_label", c->src.ns->counts.skipped_bad_label,
	  "samples whose label can't be a directory name");
#undef E
	return n;
}

static void render_json(struct out *o, const struct metric *m, size_t n,
			const struct metric *e, size_t ne)
{
	put(o, "{\n  \"version\": \"%s\"", ECHOFS_VERSION);
	for (size_t i = 0; i < n; i++)
		put(o, ",\n  \"%s\": %.17g", m[i].name, m[i].value);
	put(o, ",\n  \"errors\": {");
	for (size_t i = 0; i < ne; i++)
		put(o, "%s\n    \"%s\": %.17g", i ? "," : "", e[i].name,
		    e[i].value);
	put(o, "\n  }\n}\n");
}

static void render_prom(struct out *o, const struct metric *m, size_t n,
			const struct metric *e, size_t ne)
{
	for (size_t i = 0; i < n; i++) {
		const char *type = m[i].kind == 'c' ? "counter" : "gauge";
		put(o, "# HELP echofs_%s %s\n# TYPE echofs_%s %s\n",
		    m[i].name, m[i].help, m[i].name, type);
		put(o, "echofs_%s %.17g\n", m[i].name, m[i].value);
	}
	put(o, "# HELP echofs_errors_total errors by kind\n"
	       "# TYPE echofs_errors_total counter\n");
	for (size_t i = 0; i < ne; i++)
		put(o, "echofs_errors_total{kind=\"%s\"} %.17g\n", e[i].name,
		    e[i].value);
}

int control_render(struct control *c, enum control_file which, char **out,
		   size_t *len)
{
	struct metric m[32], e[16];
	struct snapshot s;
	struct out o = {xmalloc(4096), 0, 4096};

	take_snapshot(c, &s);
	size_t n = metrics(c, &s, m);
	size_t ne = errors(c, &s, e);
	if (which == CONTROL_STATS_PROM)
		render_prom(&o, m, n, e, ne);
	else
		render_json(&o, m, n, e, ne);
	*out = o.buf;
	*len = o.len;
	return 0;
}
