/* control.c - the control files under MOUNTPOINT/.echofs: stats as JSON
 * (stats) and in Prometheus text format (stats.prom). */
#include "fs/control.h"

#include <assert.h>
#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cache/dataset.h"
#include "common/util.h"
#include "fs/bindings.h"
#include "fs/escape.h"
#include "fs/inval.h"
#include "fs/namespace.h"
#include "fs/push.h"

#define MAX_METRICS 128
#define MAX_ERRORS 16

/* Append to a table of cap rows. A row past cap is a bug of the code that
 * lists them: caught by the assertion in debug builds (the unit tests),
 * dropped in release builds rather than written past the array. */
#define TABLE_ADD(tab, n, cap, ...)                                       \
	do {                                                              \
		assert((n) < (cap));                                      \
		if ((n) < (cap))                                          \
			(tab)[(n)++] = (struct metric){__VA_ARGS__};      \
	} while (0)

/* The fetch rate is measured over the time since the previous sample taken
 * at least RATE_WINDOW_S ago, so frequent readers see a steady figure. */
#define RATE_WINDOW_S 2.0

struct control {
	struct control_sources src;
	double start;
	/* Held from reading the echo settings to setting them, so that two
	 * config writes (one echo=, one echo_mode=) do not undo each other. */
	pthread_mutex_t cfg_lock;
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
	pthread_mutex_init(&c->cfg_lock, NULL);
	return c;
}

void control_free(struct control *c)
{
	if (!c)
		return;
	pthread_mutex_destroy(&c->lock);
	pthread_mutex_destroy(&c->cfg_lock);
	free(c);
}

/* One flat snapshot of every figure, so both formats list the same. */
struct snapshot {
	struct dataset_read_stats sh;
	struct dataset_net_stats http;
	struct dataset_store_stats st;
	struct push_stats push;
	struct dataset_echo_stats pool;
	struct bindings_stats bind;
	struct inval_stats inval;
	struct dataset_output_stats out;
	struct dataset_prepared_stats prep;
	double echo;
	enum dataset_echo_mode mode;
	uint64_t cached_shards;
	double uptime, rate;
	struct dataset_part part;
	double rss_anon, rss_file; /* bytes (read_rss) */
};

/* HTTP transfers per sample read from the cache, a range GET or another
 * mount's download: what demand first costs the origin. */
static double requests_per_sample(const struct snapshot *s)
{
	double n = (double)(s->sh.hits + s->sh.misses + s->sh.range_reads +
			    s->sh.peer_reads);
	return n > 0 ? (double)s->http.requests / n : 0;
}

/* The daemon's resident memory in two parts (issue 48): anonymous pages
 * (heap: records, tables, buffers; only swap can take them back) and
 * pages of mapped files (a binary index, the page cache the kernel shares
 * between mounts and ranks and may drop under pressure). From the RssAnon
 * and RssFile lines of /proc/self/status; 0 where they cannot be read. */
static void read_rss(double *anon, double *file)
{
	char line[128];
	FILE *f = fopen("/proc/self/status", "re");

	*anon = *file = 0;
	if (!f)
		return;
	while (fgets(line, sizeof(line), f)) {
		if (strncmp(line, "RssAnon:", 8) == 0)
			*anon = strtod(line + 8, NULL) * 1024;
		else if (strncmp(line, "RssFile:", 8) == 0)
			*file = strtod(line + 8, NULL) * 1024;
	}
	fclose(f);
}

static void take_snapshot(struct control *c, struct snapshot *s)
{
	struct dataset_stats ds;
	double now = now_mono();

	memset(s, 0, sizeof(*s));
	dataset_get_stats(c->src.ds, &ds);
	s->sh = ds.reads;
	s->http = ds.net;
	s->cached_shards = ds.cached_groups;
	s->st = ds.store;
	s->pool = ds.echo;
	s->out = ds.outputs;
	s->prep = ds.prepared;
	dataset_get_part(c->src.ds, &s->part);
	push_get_stats(c->src.push, &s->push);
	dataset_echo_get(c->src.ds, &s->echo, &s->mode);
	bindings_get_stats(c->src.bind, &s->bind);
	inval_get_stats(c->src.inval, &s->inval);
	s->uptime = now - c->start;
	read_rss(&s->rss_anon, &s->rss_file);

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
	size_t n = 0;
#define M(nm, k, v, h) TABLE_ADD(m, n, MAX_METRICS, nm, k, (double)(v), h)
	M("samples", 'g', c->src.ns->nfiles, "files in the tree");
	M("shards", 'g', dataset_ngroups(c->src.ds), "shards in the index");
	M("classes", 'g', c->src.ns->nclasses, "class directories");
	M("shards_cached", 'g', s->cached_shards, "shards complete in the disk cache");
	M("bytes_fetched", 'c', s->http.bytes, "HTTP body bytes received");
	M("fetch_rate_bps", 'g', s->rate, "HTTP bytes/s over the last seconds");
	M("rss_anon_bytes", 'g', s->rss_anon,
	  "resident anonymous memory of the daemon (heap)");
	M("rss_file_bytes", 'g', s->rss_file,
	  "resident pages of files the daemon maps (a binary index)");
	M("cache_hits", 'c', s->sh.hits, "reads served from the disk cache");
	M("cache_misses", 'c', s->sh.misses, "reads that waited for a fetch");
	M("range_reads", 'c', s->sh.range_reads, "reads served by a range GET");
	M("read_timeouts", 'c', s->sh.read_timeouts,
	  "reads that waited read_timeout for their bytes and failed");
	M("admission_bypass", 'c', s->sh.bypassed,
	  "range GETs of shards not admitted, to keep what the pass needs");
	M("peer_reads", 'c', s->sh.peer_reads,
	  "samples served from another mount's download in progress");
	M("passes_read", 'c', s->sh.passes,
	  "passes over the tree the daemon saw complete (exact mounts)");
	/* Demand first (issue 46): what readers waited for and what it cost. */
	M("demand_ranges", 'c', s->sh.demand_ranges,
	  "samples a reader waited for, fetched by a range GET ahead of their shard");
	M("range_bytes", 'c', s->sh.range_bytes,
	  "bytes of those range GETs (response headers estimated)");
	M("ranges_refused", 'c', s->sh.ranges_refused,
	  "range GETs the server refused (whole shards only from then on)");
	M("net_wait_s", 'c', s->sh.net_wait_s,
	  "reader seconds spent waiting for the network");
	M("net_wait_pass_s", 'g', s->sh.net_wait_pass_s,
	  "reader seconds waiting for the network in the current pass");
	M("net_wait_last_pass_s", 'g', s->sh.net_wait_last_pass_s,
	  "reader seconds waiting for the network in the last complete pass");
	M("bytes_received", 'c', s->http.bytes + s->http.header_bytes,
	  "HTTP bytes received: bodies and response headers");
	M("requests_per_sample", 'g', requests_per_sample(s),
	  "HTTP requests per sample read (range GETs and whole shards)");
	M("retries", 'c', s->http.retries, "HTTP attempts repeated");
	M("resumes", 'c', s->http.resumes, "broken bodies resumed");
	M("stalls", 'c', s->http.stalls,
	  "transfers broken off for a stalled or too slow body");
	M("http_requests", 'c', s->http.requests, "HTTP transfers started");
	M("shards_fetched", 'c', s->sh.fetched_shards, "whole shards fetched");
	M("fetches_queued", 'g', s->sh.queued, "shards waiting for a connection");
	M("fetches_active", 'g', s->sh.active, "shard fetches in progress");
	M("open_handles", 'g', s->bind.open,
	  "echo files open now (exact mounts keep no handles)");
	M("reads", 'c', fc->reads, "read requests");
	M("bytes_served", 'c', fc->bytes_served, "bytes returned to readers");
	M("zerocopy_reads", 'c', s->sh.views,
	  "reads and page-cache pushes spliced from a verified cache file");
	M("zerocopy_streaming_reads", 'c', s->sh.views_streaming,
	  "of zerocopy_reads: spliced from a shard still downloading");
	M("zerocopy_refused", 'c', s->sh.views_refused,
	  "reads not spliced: the bytes did not match the index");
	M("ioctls", 'c', fc->ioctls, "ioctl requests (isatty), answered ENOTTY");
	M("lookups", 'c', fc->lookups, "lookup requests");
	M("opens", 'c', fc->opens,
	  "open requests (echo mounts; exact mounts are not asked)");
	M("echo_page_stores", 'c', fc->echo_stores,
	  "echo files stored into the page cache at their first open");
	M("page_cache_pushed", 'c', s->push.files,
	  "files pushed into the kernel page cache");
	M("page_cache_push_skipped", 'c', s->push.unknown,
	  "files not pushed (inode not known to the kernel yet)");
	M("cache_bytes", 'g', s->st.bytes, "bytes in the disk cache");
	M("cache_size", 'g', s->st.cap, "disk cache cap");
	M("cache_evictions", 'c', s->st.evictions, "cache entries evicted");
	M("cache_waits", 'c', s->st.waits,
	  "shard fetches that waited for another mount's download");
	M("uptime_s", 'g', s->uptime, "seconds since mount");
	M("rank", 'g', s->part.rank, "this node's rank (-o rank)");
	M("world", 'g', s->part.world, "nodes sharing the dataset (-o world)");
	M("part_shards", 'g', s->part.shards, "shards in this rank's part");
	M("part_samples", 'g', s->part.part_samples,
	  "samples in this rank's part, before the trim");
	M("trimmed", 'g', s->part.trimmed,
	  "samples of the part left out so every rank shows the same count");
	if (dataset_converts(c->src.ds)) {
		M("outputs_made", 'c', s->out.misses,
		  "files preprocessed for their own paths (decoded, resized, "
		  "encoded)");
		M("outputs_hits", 'c', s->out.hits,
		  "lookups and reads that found their file's output made");
	}
	if (s->prep.on) {
		M("prepared_hits", 'c', s->prep.hits,
		  "samples served from the prepared tier (no decode)");
		M("prepared_misses", 'c', s->prep.misses,
		  "samples decoded: not in the prepared tier");
		M("prepared_writes", 'c', s->prep.writes,
		  "prepared samples written to the tier");
		M("prepared_corrupt", 'c', s->prep.corrupt,
		  "prepared samples found corrupt, dropped and made again");
		M("prepared_bytes", 'g', s->prep.bytes,
		  "bytes in the prepared tier");
		M("prepared_evictions", 'c', s->prep.evictions,
		  "prepared samples evicted for prepared_size");
		M("prepared_queued", 'g', s->prep.queued,
		  "prepared samples waiting for the tier's writer");
		M("prepared_skipped", 'c', s->prep.skipped,
		  "prepared samples not kept: the writer's queue was full");
		M("prepared_skipped_first_use", 'c', s->prep.skipped_first,
		  "prepared samples not kept: their first use (kept at the second)");
		M("prepared_skipped_seen_full", 'c', s->prep.skipped_seen_full,
		  "prepared samples not kept: first use, the set of used samples full");
		M("prepared_seen", 'g', s->prep.seen,
		  "samples known to have been used once (a second use keeps them)");
		M("prepared_writer_s", 'c', s->prep.writer_s,
		  "seconds the tier's writer spent writing entries");
	}
	if (dataset_echoes(c->src.ds)) {
		M("echo", 'g', s->echo, "echo factor E in force");
		M("pass", 'g', s->pool.pass, "pass over the dataset, from 1");
		M("fresh_in_pass", 'g', s->pool.fresh_in_pass,
		  "samples streamed in this pass");
		M("fresh_served", 'c', s->pool.fresh_served, "fresh samples served");
		M("own_served", 'c', s->pool.own_served,
		  "fresh serves of a path's own sample from local disk (exact first)");
		M("echoes_served", 'c', s->pool.echoes_served, "echoed samples served");
		M("effective_echo", 'g', s->pool.effective_echo,
		  "served / fresh over the mount's life");
		M("stall_s", 'c', s->pool.stall_s, "seconds readers waited for fresh data");
		M("echo_factor", 'g', s->pool.echo_factor,
		  "echoes per fresh sample allowed now (adaptive: the governor's choice)");
		M("echo_fresh_rate", 'g', s->pool.fresh_rate,
		  "fresh samples/s the governor measured at that factor");
		M("echo_best_fresh_rate", 'g', s->pool.best_fresh_rate,
		  "best fresh samples/s the governor measured at any factor");
		M("echo_changes", 'c', s->pool.echo_changes,
		  "changes of the governor's echo factor");
		M("echo_age_p10", 'g', s->pool.echo_age_p10,
		  "10th percentile of echoes' age, opens of their class since the last serve");
		M("echo_age_p50", 'g', s->pool.echo_age_p50,
		  "median age of echoes, opens of their class since the last serve");
		M("pool_fresh_ready", 'g', s->pool.fresh_ready,
		  "samples read ahead and not served yet");
		M("pool_bytes", 'g', s->pool.pool_bytes, "bytes held by the echo pool");
		M("pool_samples", 'g', s->pool.pool_samples, "samples held by the echo pool");
		M("pool_dropped", 'c', s->pool.dropped, "samples dropped to fit mem_size");
		M("pool_given_back", 'c', s->pool.given_back,
		  "fresh samples given back for classes nobody waited for");
		M("pool_reread", 'c', s->pool.reread,
		  "given-back samples read again when asked for");
		M("pool_owed", 'g', s->pool.owed,
		  "given-back samples still owed a fresh serve");
		M("parked", 'g', s->pool.parked, "lookups waiting for a sample");
		M("timeouts", 'c', s->pool.timeouts,
		  "lookups that gave up waiting (ETIMEDOUT)");
		M("bindings", 'g', s->bind.live, "path bindings the kernel knows");
		M("bindings_expired", 'c', s->bind.expired,
		  "bindings given back unopened (stat only)");
		M("bindings_rebound", 'c', s->bind.rebound,
		  "samples bound at open to an inode the kernel kept");
		M("bindings_entries_dropped", 'c',
		  s->inval.sent + s->inval.absent,
		  "entries of done bindings the kernel was asked to drop");
		M("bindings_entries_kept", 'c', s->inval.skipped,
		  "entries of done bindings left cached: a take was parked");
	}
#undef M
	return n;
}

/* Fresh samples ready per class, as "name": count pairs. */
static void render_ready(const struct control *c, struct out *o, int prom)
{
	const struct namespace *ns = c->src.ns;
	if (!dataset_echoes(c->src.ds))
		return;
	if (prom)
		put(o, "# HELP echofs_ready fresh samples ready per class\n"
		       "# TYPE echofs_ready gauge\n");
	else
		put(o, ",\n  \"ready\": {");
	for (size_t i = 0; i < ns->nclasses; i++) {
		uint64_t n = dataset_echo_ready(c->src.ds, (uint32_t)i);
		/* Class names come from the data: escape them. */
		char *name = prom ? escape_prom(ns->classes[i].name)
				  : escape_json(ns->classes[i].name);
		if (prom)
			put(o, "echofs_ready{class=\"%s\"} %llu\n", name,
			    (unsigned long long)n);
		else
			put(o, "%s\"%s\": %llu", i ? ", " : "", name,
			    (unsigned long long)n);
		free(name);
	}
	if (!prom)
		put(o, "}");
}

static size_t errors(const struct control *c, const struct snapshot *s,
		     struct metric *m)
{
	size_t n = 0;
#define E(nm, v, h) TABLE_ADD(m, n, MAX_ERRORS, nm, 'c', (double)(v), h)
	E("http_4xx", s->http.errors_4xx, "HTTP 4xx replies");
	E("http_5xx", s->http.errors_5xx, "HTTP 5xx replies");
	E("connection", s->http.errors_conn, "connect, TLS, reset or timeout");
	E("verify", s->http.errors_verify + s->sh.verify_errors,
	  "ETag, length, range, encoding or checksum mismatches");
	E("shard_failed", s->sh.failed_shards, "shard fetches that failed");
	E("read", c->src.fc->read_errors, "reads that returned an error");
	E("cache_corrupt", s->st.corrupt, "corrupt cache entries dropped");
	E("cache_write", s->st.write_errors, "cache entries not written");
	E("tar_skipped", c->src.tar_skipped, "tar members skipped at indexing");
	E("image", s->pool.rejected + s->out.rejected,
	  "images that could not be preprocessed (skipped or EIO)");
	E("bad_label", c->src.ns->counts.skipped_bad_label + c->src.bad_label,
	  "samples whose label can't be a directory name");
	E("duplicate_key", c->src.ns->counts.duplicate_keys,
	  "samples renamed whole: an earlier sample has their name");
#undef E
	return n;
}

/* The governor's last reason; "none" outside the adaptive mode. */
static const char *reason_of(const struct snapshot *s)
{
	const char *r = s->pool.echo_reason;

	return r && *r ? r : "none";
}

static void render_json(const struct control *c, const struct snapshot *s,
			struct out *o, const struct metric *m, size_t n,
			const struct metric *e, size_t ne)
{
	put(o, "{\n  \"version\": \"%s\"", ECHOFS_VERSION);
	if (dataset_echoes(c->src.ds))
		put(o, ",\n  \"echo_mode\": \"%s\",\n  \"echo_stage\": \"%s\","
		       "\n  \"echo_reason\": \"%s\"",
		    dataset_echo_mode_name(s->mode),
		    dataset_echo_stage_name(c->src.ds), reason_of(s));
	for (size_t i = 0; i < n; i++)
		put(o, ",\n  \"%s\": %.17g", m[i].name, m[i].value);
	render_ready(c, o, 0);
	put(o, ",\n  \"errors\": {");
	for (size_t i = 0; i < ne; i++)
		put(o, "%s\n    \"%s\": %.17g", i ? "," : "", e[i].name,
		    e[i].value);
	put(o, "\n  }\n}\n");
}

static void render_prom(const struct control *c, const struct snapshot *s,
			struct out *o, const struct metric *m, size_t n,
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
	if (dataset_echoes(c->src.ds))
		put(o, "# HELP echofs_echo_reason why the echo factor last changed\n"
		       "# TYPE echofs_echo_reason gauge\n"
		       "echofs_echo_reason{reason=\"%s\"} 1\n",
		    reason_of(s));
	render_ready(c, o, 1);
}

static void render_config(const struct control *c, struct out *o)
{
	double echo = 1.0;
	enum dataset_echo_mode mode = DATASET_ECHO_ADAPTIVE;
	if (!dataset_echoes(c->src.ds)) {
		put(o, "# exact mount: remount with -o echo=E to echo\n"
		       "echo=1\n");
		return;
	}
	dataset_echo_get(c->src.ds, &echo, &mode);
	put(o, "echo=%g\necho_mode=%s\n", echo, dataset_echo_mode_name(mode));
}

int control_render(struct control *c, enum control_file which, char **out,
		   size_t *len)
{
	struct metric m[MAX_METRICS], e[MAX_ERRORS];
	struct snapshot s;
	struct out o = {xmalloc(4096), 0, 4096};

	if (which == CONTROL_CONFIG) {
		render_config(c, &o);
		*out = o.buf;
		*len = o.len;
		return 0;
	}
	take_snapshot(c, &s);
	size_t n = metrics(c, &s, m);
	size_t ne = errors(c, &s, e);
	if (which == CONTROL_STATS_PROM)
		render_prom(c, &s, &o, m, n, e, ne);
	else
		render_json(c, &s, &o, m, n, e, ne);
	*out = o.buf;
	*len = o.len;
	return 0;
}

/* One "key=value" setting into *echo / *mode. */
static int config_line(const char *line, size_t len, double *echo,
		       enum dataset_echo_mode *mode, char *err, size_t errlen)
{
	char buf[128], *eq, *end;

	while (len && (line[len - 1] == ' ' || line[len - 1] == '\t' ||
		       line[len - 1] == '\r'))
		len--;
	while (len && (*line == ' ' || *line == '\t'))
		line++, len--;
	if (len == 0 || line[0] == '#')
		return 0;
	if (len >= sizeof(buf)) {
		snprintf(err, errlen, "line too long");
		return -EINVAL;
	}
	memcpy(buf, line, len);
	buf[len] = '\0';
	eq = strchr(buf, '=');
	if (!eq) {
		snprintf(err, errlen, "'%s': want key=value", buf);
		return -EINVAL;
	}
	*eq++ = '\0';
	if (strcmp(buf, "echo") == 0) {
		errno = 0;
		double v = strtod(eq, &end);
		if (errno || end == eq || *end || !(v >= 1.0) || v > 1000.0) {
			snprintf(err, errlen, "bad echo '%s' (1 to 1000)", eq);
			return -EINVAL;
		}
		*echo = v;
		return 0;
	}
	if (strcmp(buf, "echo_mode") == 0) {
		if (dataset_echo_mode_parse(eq, mode) == 0)
			return 0;
		snprintf(err, errlen, "bad echo_mode '%s' (adaptive or fixed)", eq);
		return -EINVAL;
	}
	snprintf(err, errlen, "unknown setting '%s' (echo, echo_mode)", buf);
	return -EINVAL;
}

int control_configure(struct control *c, const char *text, size_t len,
		      char *err, size_t errlen)
{
	double echo;
	enum dataset_echo_mode mode;
	int r = 0;

	if (!dataset_echoes(c->src.ds)) {
		snprintf(err, errlen, "exact mount: remount with -o echo=E");
		return -EROFS;
	}
	pthread_mutex_lock(&c->cfg_lock);
	dataset_echo_get(c->src.ds, &echo, &mode);
	while (len && r == 0) {
		const char *nl = memchr(text, '\n', len);
		size_t n = nl ? (size_t)(nl - text) : len;
		r = config_line(text, n, &echo, &mode, err, errlen);
		text += n + (nl ? 1 : 0);
		len -= n + (nl ? 1 : 0);
	}
	if (r == 0)
		r = dataset_echo_set(c->src.ds, echo, mode);
	if (r == -EBUSY)
		snprintf(err, errlen,
			 "the mount serves exactly for good "
			 "(exact_when_local: every shard is local); remount "
			 "to echo again");
	pthread_mutex_unlock(&c->cfg_lock);
	return r;
}

struct control_cfgbuf {
	size_t len;
	char buf[CONTROL_LINE_MAX];
};

struct control_cfgbuf *control_cfgbuf_new(void)
{
	return xcalloc(1, sizeof(struct control_cfgbuf));
}

void control_cfgbuf_free(struct control_cfgbuf *b)
{
	free(b);
}

int control_configure_write(struct control *c, struct control_cfgbuf *b,
			    const char *text, size_t len, char *err,
			    size_t errlen)
{
	const char *nl = len ? memrchr(text, '\n', len) : NULL;
	size_t head = nl ? (size_t)(nl - text) + 1 : 0; /* complete lines */
	size_t tail = len - head, have = nl ? 0 : b->len;
	char *joined;
	int r;

	/* Checked first, so that a refused write applies nothing. */
	if (tail > CONTROL_LINE_MAX - have) {
		snprintf(err, errlen, "line too long (over %d bytes)",
			 CONTROL_LINE_MAX);
		return -EINVAL;
	}
	if (nl) {
		joined = xmalloc(b->len + head);
		memcpy(joined, b->buf, b->len);
		memcpy(joined + b->len, text, head);
		r = control_configure(c, joined, b->len + head, err, errlen);
		free(joined);
		if (r)
			return r;
		b->len = 0;
	}
	memcpy(b->buf + b->len, text + head, tail);
	b->len += tail;
	return 0;
}

int control_configure_close(struct control *c, struct control_cfgbuf *b,
			    char *err, size_t errlen)
{
	size_t n = b->len;

	b->len = 0;
	return n ? control_configure(c, b->buf, n, err, errlen) : 0;
}
