/* dataset.c - the data as fs/ sees it: the index's samples, read through the
 * shard readers, with the HTTP client and the disk store behind them, and
 * the partition (the echo pool and the image work: dataset_echo.c). */
#include "cache/dataset.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cache/dataset_int.h"
#include "cache/dataset_parts.h"
#include "cache/image/prepared.h"
#include "cache/index/partition.h"
#include "cache/index/resolve.h"
#include "cache/store/shards.h"
#include "cache/store/store.h"
#include "common/log.h"
#include "common/util.h"
#include "fetch/format/index.h"
#include "fetch/net/bucket.h"
#include "fetch/net/http.h"

int dataset_global_init(void)
{
	return http_global_init() == 0 ? 0 : -EIO;
}

const char *dataset_redact(const char *url, char *buf, size_t buflen)
{
	return http_redact(url, buf, buflen);
}

const char *dataset_net_version(void)
{
	return http_version();
}

/* The bucket backends (s3://, gs://...) the source, the index or a list
 * file names, or that an option of one asks for. */
static int open_buckets(const struct dataset_opts *o, struct buckets **out,
			char *err, size_t errlen)
{
	const struct dataset_s3_opts *d = &o->s3;
	const struct dataset_gcs_opts *g = &o->gcs;
	struct bucket_conf c = {
		.endpoint = d->endpoint ? d->endpoint : g->endpoint,
		.region = d->region, .profile = d->profile,
		.path_style = d->path_style,
		.requester_pays = d->requester_pays,
		.no_sign = d->no_sign || g->no_sign,
		.ca_file = o->ca_file, .ca_path = o->ca_path,
	};
	const char *urls[] = {o->source, o->index};

	return buckets_open(&c, urls, 2, out, err, errlen);
}

static int open_http(const struct dataset_opts *o, struct buckets *bk,
		     double budget, struct http **out, char *err, size_t errlen)
{
	struct http_opts ho = {
		.auth = buckets_hooks(bk),
		.connections = o->connections,
		.header_file = o->header_file,
		.ca_file = o->ca_file,
		.ca_path = o->ca_path,
		.min_rate = o->min_rate,
		.low_speed_time_s = o->stall_timeout_s,
		.retry_budget_s = budget,
	};
	int r = http_open(&ho, out, err, errlen);

	if (r == 0) /* e.g. S3 with no region given asks the bucket (once) */
		buckets_ready(bk, *out, &o->source, 1);
	return r;
}

static uint64_t sum_sizes(const struct index *ix)
{
	uint64_t bytes = 0;
	for (size_t i = 0; i < ix->nshards; i++)
		bytes += ix->shards[i].size;
	return bytes;
}

/* The index, resolved with the short retry budget of ds->http (a dead
 * server fails the mount soon); the client is then replaced by one with the
 * run budget. */
static int open_index(struct dataset *ds, const struct dataset_opts *o,
		      struct index **ix, char *err, size_t errlen)
{
	struct resolve_opts ro = {
		.source = o->source,
		.index = o->index,
		.cache_dir = o->cache_dir,
		.jobs = o->connections,
		.progress = o->progress,
	};
	struct resolve_info info;
	int r;

	r = resolve_open(&ro, ds->http, ds->store, ix, &info, err, errlen);
	if (r)
		return r;
	ds->index_from = info.index_from;
	ds->tar_skipped = info.tar_skipped;
	ds->bad_label = info.bad_label;
	log_info("index from %s: %zu shards, %zu samples", info.index_from,
		 (*ix)->nshards, (*ix)->nsamples);
	http_free(ds->http);
	return open_http(o, ds->bk, o->run_retry_budget_s, &ds->http, err,
			 errlen);
}

int dataset_open(const struct dataset_opts *o, struct dataset **out, char *err,
		 size_t errlen)
{
	struct dataset *ds = xcalloc(1, sizeof(*ds));
	struct index *ix = NULL;
	char serr[512];
	int r;

	ds->own = 1;
	ds->echo_opts = o->echo;
	ds->image_opts = o->image;
	ds->seed = o->seed;
	r = open_buckets(o, &ds->bk, err, errlen);
	if (r)
		goto fail;
	r = open_http(o, ds->bk, o->boot_retry_budget_s, &ds->http, err,
		      errlen);
	if (r)
		goto fail;
	r = store_open(o->cache_dir, o->cache_size, &ds->store, serr,
		       sizeof(serr));
	if (r == -ELOOP || r == -EPERM) {
		/* A cache directory others could steer: refuse the mount. */
		snprintf(err, errlen, "%s", serr);
		goto fail;
	}
	if (r)
		log_warn("serving without a disk cache: %s", serr);
	r = open_index(ds, o, &ix, err, errlen);
	ds->ix = ix;
	if (r)
		goto fail;
	/* A quarter of the connections (at least one, when there are two or
	 * more) stay free of whole-shard streams for readers' range GETs. */
	unsigned c = o->connections;
	struct shards_opts so = {.workers = c > 1 ? c - (c + 3) / 4 : 1,
				 .range_after_s = o->range_after_s,
				 .read_timeout_s = o->read_timeout_s};
	r = shards_open(ix, ds->http, ds->store, &so, &ds->sh);
	if (r) {
		snprintf(err, errlen, "cannot start the fetchers: %s",
			 strerror(-r));
		goto fail;
	}
	ds->total_bytes = sum_sizes(ix);
	r = dataset_set_part(ds, o->rank, o->world, o->seed, err, errlen);
	if (!r)
		r = dataset_start_image(ds, o, err, errlen);
	if (r)
		goto fail;
	*out = ds;
	return 0;
fail:
	buckets_explain(ds->bk, err, errlen);
	dataset_close(ds);
	return r;
}

static int count_bytes(void *ud, const void *data, size_t len)
{
	(void)data;
	*(uint64_t *)ud += len;
	return 0;
}

/* Stat and stream url, timing the body. */
static int time_shard(struct http *h, const char *url, struct dataset_check *c,
		      char *err, size_t errlen)
{
	char etag[HTTP_ETAG_MAX], red[512];
	uint64_t size, got = 0;
	double t0 = now_mono();
	int r = http_stat(h, url, &size, etag, sizeof(etag));

	if (!r)
		r = http_stream(h, url, etag, size, count_bytes, &got);
	c->shard_s = now_mono() - t0;
	c->shard_bytes = got;
	if (r)
		snprintf(err, errlen, "cannot fetch shard %s: %s",
			 http_redact(url, red, sizeof(red)), strerror(-r));
	return r;
}

int dataset_check(const struct dataset_opts *o, struct dataset_check *out,
		  char *err, size_t errlen)
{
	struct resolve_opts ro = {
		.source = o->source, .index = o->index,
		.cache_dir = o->cache_dir, .jobs = o->connections,
		.look_only = 1,
	};
	struct resolve_info info;
	struct index *ix = NULL;
	struct http *h = NULL;
	struct buckets *bk;
	int r;

	memset(out, 0, sizeof(*out));
	r = open_buckets(o, &bk, err, errlen);
	if (r)
		return r;
	r = open_http(o, bk, o->boot_retry_budget_s, &h, err, errlen);
	if (r) {
		buckets_free(bk);
		return r;
	}
	r = resolve_open(&ro, h, NULL, &ix, &info, err, errlen);
	out->shards = info.nshards;
	out->index_from = info.index_from;
	if (r == 0 || r == -ENOENT) {
		out->samples = ix ? ix->nsamples : 0;
		r = time_shard(h, ix ? ix->shards[0].url : info.first_shard, out,
			       err, errlen);
	}
	if (r)
		buckets_explain(bk, err, errlen);
	index_free(ix);
	http_free(h);
	buckets_free(bk);
	return r;
}

struct dataset *dataset_wrap(const struct index *ix, struct shards *sh)
{
	struct dataset *ds;

	if (!ix) {
		errno = EINVAL;
		return NULL;
	}
	ds = xcalloc(1, sizeof(*ds));
	ds->ix = ix;
	ds->sh = sh;
	ds->index_from = "given";
	ds->total_bytes = sum_sizes(ix);
	IGNORE_RESULT(dataset_set_part(ds, 0, 1, 0, NULL, 0)); /* world 1: no error */
	return ds;
}

void dataset_cancel(struct dataset *ds)
{
	if (!ds)
		return;
	shards_cancel(ds->sh);
	http_cancel(ds->http);
}

void dataset_close(struct dataset *ds)
{
	if (!ds)
		return;
	dataset_stop_image(ds); /* the pool and outputs read the shards */
	if (ds->own) {
		/* Readers first: their threads use the client and store. */
		shards_free(ds->sh);
		index_free((struct index *)ds->ix);
		store_close(ds->store);
		http_free(ds->http);
		buckets_free(ds->bk); /* the client's hooks point into it */
	}
	free(ds->rank_of);
	free(ds->in_view);
	free(ds);
}

size_t dataset_nsamples(const struct dataset *ds)
{
	return ds->ix->nsamples;
}

size_t dataset_ngroups(const struct dataset *ds)
{
	return ds->ix->nshards;
}

/* A sample, or a member numbered after the samples (dataset.h). */
static const struct index_sample *sample_of(const struct dataset *ds,
					    uint32_t sample)
{
	const struct index *ix = ds->ix;

	if (sample < ix->nsamples)
		return &ix->samples[sample];
	if (sample - ix->nsamples < ix->nmembers)
		return &ix->members[sample - ix->nsamples];
	return NULL;
}

int dataset_has_members(const struct dataset *ds)
{
	return ds->ix->has_members;
}

size_t dataset_nmembers(const struct dataset *ds)
{
	return ds->ix->nmembers;
}

static size_t place_hash(uint32_t shard, uint64_t offset, size_t mask)
{
	uint64_t h = (offset ^ (uint64_t)shard << 40) * 0x9e3779b97f4a7c15ull;
	return (size_t)(h >> 21) & mask;
}

/* The sample whose image lies where member m does (same shard, offset
 * and size), through slot (sample + 1 by place; 0 empty). */
static uint32_t sample_at(const struct index *ix, const uint32_t *slot,
			  size_t mask, const struct index_sample *m)
{
	for (size_t j = place_hash(m->shard, m->offset, mask); slot[j];
	     j = (j + 1) & mask) {
		const struct index_sample *s = &ix->samples[slot[j] - 1];
		if (s->shard == m->shard && s->offset == m->offset &&
		    s->size == m->size)
			return slot[j] - 1;
	}
	return UINT32_MAX;
}

void dataset_member_samples(const struct dataset *ds, uint32_t *out)
{
	const struct index *ix = ds->ix;
	size_t cap = 64, mask;
	uint32_t *slot;

	while (cap < 2 * ix->nsamples + 2)
		cap *= 2;
	mask = cap - 1;
	slot = xcalloc(cap, sizeof(*slot));
	for (size_t i = 0; i < ix->nsamples; i++) {
		const struct index_sample *s = &ix->samples[i];
		size_t j = place_hash(s->shard, s->offset, mask);
		while (slot[j])
			j = (j + 1) & mask;
		slot[j] = (uint32_t)i + 1;
	}
	for (size_t k = 0; k < ix->nmembers; k++) {
		uint32_t i = sample_at(ix, slot, mask, &ix->members[k]);
		out[k] = i != UINT32_MAX ? i : (uint32_t)(ix->nsamples + k);
	}
	free(slot);
}

const char *dataset_key(const struct dataset *ds, uint32_t sample)
{
	const struct index_sample *s = sample_of(ds, sample);
	return s ? index_key(ds->ix, s) : "";
}

const char *dataset_label(const struct dataset *ds, uint32_t sample)
{
	const struct index_sample *s = sample_of(ds, sample);
	return s ? index_label(ds->ix, s) : "";
}

const char *dataset_ext(const struct dataset *ds, uint32_t sample)
{
	const struct index_sample *s = sample_of(ds, sample);
	return s ? index_ext(ds->ix, s) : "";
}

uint64_t dataset_size(const struct dataset *ds, uint32_t sample)
{
	const struct index_sample *s = sample_of(ds, sample);
	return s ? s->size : 0;
}

uint32_t dataset_group(const struct dataset *ds, uint32_t sample)
{
	const struct index_sample *s = sample_of(ds, sample);
	return s ? s->shard : 0;
}

const char *dataset_group_url(const struct dataset *ds, uint32_t g, char *buf,
			      size_t buflen)
{
	if (g < ds->ix->nshards)
		return http_redact(ds->ix->shards[g].url, buf, buflen);
	if (buflen)
		buf[0] = '\0';
	return buf;
}

uint64_t dataset_total_bytes(const struct dataset *ds)
{
	return ds->total_bytes;
}

const char *dataset_index_from(const struct dataset *ds)
{
	return ds->index_from;
}

uint64_t dataset_bad_label(const struct dataset *ds)
{
	return ds->bad_label;
}

uint64_t dataset_tar_skipped(const struct dataset *ds)
{
	return ds->tar_skipped;
}

ssize_t dataset_read(struct dataset *ds, uint32_t sample, uint64_t off,
		     size_t len, void *buf)
{
	const struct index_sample *s = sample_of(ds, sample);
	ssize_t r;

	if (!s)
		return -EINVAL;
	if (off >= s->size || len == 0)
		return 0;
	if (!ds->sh)
		return -ENXIO;
	if (len > s->size - off)
		len = (size_t)(s->size - off);
	shards_note(ds->sh, sample); /* the pass's progress (cache policy) */
	r = shards_read(ds->sh, s->shard, s->offset + off, len, buf);
	if (r >= 0 && (size_t)r != len)
		r = -EIO; /* the index promised these bytes */
	return r;
}

int dataset_read_span(struct dataset *ds, uint32_t sample, uint64_t off,
		      size_t len, struct dataset_span *out)
{
	const struct index_sample *s = sample_of(ds, sample);
	int r;

	if (!s)
		return -EINVAL;
	if (!ds->sh || ds->no_span || off != 0 || len < s->size ||
	    s->size < DATASET_SPAN_MIN) /* size: INDEX_SAMPLE_MAX fits */
		return -EAGAIN;
	shards_note(ds->sh, sample);
	struct shards_view v;
	r = shards_view(ds->sh, s->shard, s->offset, (size_t)s->size, &v);
	if (r)
		return r;
	*out = (struct dataset_span){
		.fd = v.fd, .pos = v.off, .len = v.len,
		.pin = {.ref = v.ref, .group = v.shard,
			.streaming = v.streaming}};
	return 0;
}

void dataset_set_zerocopy(struct dataset *ds, int on)
{
	ds->no_span = !on;
}

void dataset_span_done(struct dataset *ds, struct dataset_span *sp)
{
	if (!ds || !sp)
		return;
	struct shards_view v = {
		.fd = sp->fd, .off = sp->pos, .len = sp->len,
		.ref = sp->pin.ref, .shard = sp->pin.group,
		.streaming = sp->pin.streaming};
	shards_view_done(ds->sh, &v);
}

int dataset_is_cached(struct dataset *ds, uint32_t group)
{
	if (!ds->sh || group >= ds->ix->nshards)
		return 0;
	return shards_is_cached(ds->sh, group);
}

int dataset_all_local(struct dataset *ds)
{
	return ds->sh && shards_all_local(ds->sh);
}

int dataset_track_pass(struct dataset *ds, const uint32_t *samples, size_t n)
{
	return ds->sh ? shards_track(ds->sh, samples, n) : 0;
}

void dataset_prefetch(struct dataset *ds, uint32_t group)
{
	if (ds->sh && group < ds->ix->nshards)
		shards_prefetch(ds->sh, group);
}

static void net_stats(struct http *h, struct dataset_net_stats *out)
{
	struct http_stats hs;

	memset(out, 0, sizeof(*out));
	if (!h)
		return;
	http_get_stats(h, &hs);
	*out = (struct dataset_net_stats){
		.requests = hs.requests,
		.bytes = hs.bytes,
		.retries = hs.retries,
		.resumes = hs.resumes,
		.stalls = hs.stalls,
		.errors_4xx = hs.errors_4xx,
		.errors_5xx = hs.errors_5xx,
		.errors_conn = hs.errors_conn,
		.errors_verify = hs.errors_verify,
		.header_bytes = hs.header_bytes,
	};
}

static void read_stats(struct shards *sh, struct dataset_read_stats *out)
{
	struct shards_stats s;

	shards_get_stats(sh, &s);
	*out = (struct dataset_read_stats){
		.hits = s.hits, .misses = s.misses,
		.range_reads = s.range_reads,
		.fetched_shards = s.fetched_shards,
		.fetched_bytes = s.fetched_bytes,
		.failed_shards = s.failed_shards, .refetches = s.refetches,
		.read_errors = s.read_errors, .verify_errors = s.verify_errors,
		.read_timeouts = s.read_timeouts,
		.queued = s.queued, .active = s.active, .views = s.views,
		.views_streaming = s.views_streaming,
		.views_refused = s.views_refused, .bypassed = s.bypassed,
		.peer_reads = s.peer_reads, .passes = s.passes,
		.pass_left = s.pass_left,
		.demand_ranges = s.demand_ranges, .range_bytes = s.range_bytes,
		.ranges_refused = s.ranges_refused,
		.net_wait_s = s.net_wait_s, .net_wait_pass_s = s.net_wait_pass_s,
		.net_wait_last_pass_s = s.net_wait_last_pass_s,
	};
}

static void store_stats(struct store *st, struct dataset_store_stats *out)
{
	struct store_stats s;

	store_get_stats(st, &s);
	*out = (struct dataset_store_stats){
		.entries = s.entries, .bytes = s.bytes, .cap = s.cap,
		.evictions = s.evictions, .corrupt = s.corrupt,
		.write_errors = s.write_errors, .waits = s.waits,
	};
}

void dataset_get_stats(struct dataset *ds, struct dataset_stats *out)
{
	memset(out, 0, sizeof(*out));
	if (ds->sh)
		read_stats(ds->sh, &out->reads);
	if (ds->store)
		store_stats(ds->store, &out->store);
	if (ds->prepared) {
		/* The prepared tier is the cache too: a write it could not do
		 * (disk full) is logged as cache_write and counted there. */
		struct prepared_stats ps;
		prepared_get_stats(ds->prepared, &ps);
		out->store.write_errors += ps.write_errors;
	}
	dataset_echo_fill_stats(ds, out);
	net_stats(ds->http, &out->net);
	for (size_t i = 0; i < ds->ix->nshards; i++)
		out->cached_groups +=
			(uint64_t)dataset_is_cached(ds, (uint32_t)i);
}

const struct index *dataset_index(const struct dataset *ds)
{
	return ds->ix;
}

struct shards *dataset_shards(struct dataset *ds)
{
	return ds->sh;
}

struct store *dataset_store(struct dataset *ds)
{
	return ds->store;
}

uint64_t *dataset_group_counts(const struct dataset *ds)
{
	uint64_t *c = xcalloc(ds->ix->nshards + 1, sizeof(*c));
	for (size_t i = 0; i < ds->ix->nsamples; i++)
		c[ds->ix->samples[i].shard]++;
	return c;
}

/* The view of rank: its shards' samples up to the common count. */
static void fill_view(struct dataset *ds, const uint64_t *counts)
{
	const struct index *ix = ds->ix;
	uint32_t *shard_of = xmalloc((ix->nsamples + 1) * sizeof(*shard_of));
	struct dataset_part *p = &ds->part;

	for (size_t i = 0; i < ix->nsamples; i++)
		shard_of[i] = ix->samples[i].shard;
	for (size_t g = 0; g < ix->nshards; g++)
		p->shards += ds->rank_of[g] == p->rank;
	p->part_samples = partition_load(counts, ix->nshards, ds->rank_of,
					 p->rank);
	p->samples = partition_common(counts, ix->nshards, ds->rank_of,
				      p->world);
	ds->in_view = xmalloc(ix->nsamples + 1);
	p->trimmed = partition_trim(shard_of, ix->nsamples, ds->rank_of,
				    p->rank, p->samples, ds->in_view);
	free(shard_of);
}

int dataset_set_part(struct dataset *ds, uint32_t rank, uint32_t world,
		     uint64_t seed, char *err, size_t errlen)
{
	size_t n = ds->ix->nshards;
	uint32_t *rank_of;
	uint64_t *counts;
	int r;

	if (world <= 1 && rank == 0) {
		free(ds->rank_of);
		free(ds->in_view);
		ds->rank_of = NULL;
		ds->in_view = NULL;
		ds->part = (struct dataset_part){
			.world = 1, .shards = n, .seed = seed,
			.part_samples = ds->ix->nsamples,
			.samples = ds->ix->nsamples};
		return 0;
	}
	if (rank >= world) {
		snprintf(err, errlen, "rank %u is not below world %u", rank,
			 world);
		return -EINVAL;
	}
	counts = dataset_group_counts(ds);
	rank_of = xmalloc((n + 1) * sizeof(*rank_of));
	r = partition_assign(counts, n, seed, world, 0, rank_of, err, errlen);
	if (r) {
		free(rank_of);
		free(counts);
		return r;
	}
	free(ds->rank_of);
	free(ds->in_view);
	ds->rank_of = rank_of;
	ds->part = (struct dataset_part){.rank = rank, .world = world,
					 .seed = seed};
	fill_view(ds, counts);
	free(counts);
	log_info("rank %u of %u: %zu of %zu shards, %llu samples shown "
		 "(%llu in the part, %llu trimmed)", rank, world,
		 ds->part.shards, n, (unsigned long long)ds->part.samples,
		 (unsigned long long)ds->part.part_samples,
		 (unsigned long long)ds->part.trimmed);
	return 0;
}

int dataset_in_view(const struct dataset *ds, uint32_t sample)
{
	if (sample >= ds->ix->nsamples)
		return 0;
	return ds->in_view ? ds->in_view[sample] : 1;
}

int dataset_in_part(const struct dataset *ds, uint32_t sample)
{
	const struct index_sample *s = sample_of(ds, sample);

	if (!s)
		return 0;
	return ds->rank_of ? ds->rank_of[s->shard] == ds->part.rank : 1;
}

void dataset_get_part(const struct dataset *ds, struct dataset_part *out)
{
	*out = ds->part;
}
