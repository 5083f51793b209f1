/* dataset_echo.c - the dataset face's echo pool, decode workers and
 * converted outputs: what an echo mount or a preprocessing mount asks of
 * the data, wired here so that fs/ sees none of cache/echo or cache/image.
 *
 * The pool's ingest hook (what the pool holds: the final image after
 * augment, or the decoded image before it, or with echo_stage=encoded no
 * hook: the sample's own bytes) and the bindings' hooks (a new crop/flip,
 * or a whole decode, per binding) run on the decode workers of prep.c. */
#include <errno.h>
#include <malloc.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cache/dataset.h"
#include "cache/dataset_int.h"
#include "cache/dataset_parts.h"
#include "cache/echo/pool.h"
#include "cache/image/outputs.h"
#include "cache/image/prep.h"
#include "cache/image/transform.h"
#include "cache/image/prepared.h"
#include "common/log.h"
#include "common/util.h"

/* The face's plain values are the modules' own, so they pass through. */
_Static_assert(DATASET_NO_CLASS == POOL_NO_CLASS, "no-class mark");
_Static_assert((int)DATASET_ECHO_ADAPTIVE == (int)ECHO_ADAPTIVE &&
		       (int)DATASET_ECHO_FIXED == (int)ECHO_FIXED,
	       "echo modes");
_Static_assert((int)DATASET_FORMAT_SAME == (int)TF_SAME &&
		       (int)DATASET_FORMAT_JPEG == (int)TF_JPEG &&
		       (int)DATASET_FORMAT_PPM == (int)TF_PPM,
	       "formats");

/* A dataset_sample is a pool_sample under another name (never defined). */
static struct dataset_sample *face_of(struct pool_sample *s)
{
	return (struct dataset_sample *)s;
}

static struct pool_sample *pool_of(const struct dataset_sample *s)
{
	return (struct pool_sample *)s;
}

const uint8_t *dataset_sample_data(const struct dataset_sample *s)
{
	return pool_of(s)->data;
}

size_t dataset_sample_len(const struct dataset_sample *s)
{
	return pool_of(s)->len;
}

uint32_t dataset_sample_id(const struct dataset_sample *s)
{
	return pool_of(s)->sample;
}

/* The echo stage in force. Adaptive mode's default is encoded (issue 29):
 * a fresh serve then costs what an exact mount's does, one decode with
 * the crop's resize, where holding decoded pixels cost the readers' cores
 * 1.4x the CPU per fresh sample (resize of the whole image, a copy of it
 * into the pool, page faults on 260 KB buffers) and a 512 MB pool of
 * pixels held 2,000 samples, not the dataset. Its echoes are decoded
 * again: they save the network and the disk, not the decode, so on a
 * CPU-bound node the governor finds they cost fresh samples and stays
 * near 1. Fixed and greedy keep the paper's cheap echoes of pixels. */
static enum dataset_echo_stage echo_stage(const struct dataset *ds)
{
	const struct dataset_echo_opts *eo = &ds->echo_opts;

	if (eo->stage != DATASET_STAGE_AUTO)
		return eo->stage;
	return eo->mode == DATASET_ECHO_ADAPTIVE ? DATASET_STAGE_ENCODED
						 : DATASET_STAGE_BEFORE_AUGMENT;
}

const char *dataset_echo_stage_name(const struct dataset *ds)
{
	if (!ds->prep)
		return "encoded"; /* no preprocessing: the sample's bytes */
	switch (echo_stage(ds)) {
	case DATASET_STAGE_BEFORE_AUGMENT:
		return "before_augment";
	case DATASET_STAGE_AFTER_AUGMENT:
		return "after_augment";
	default:
		return "encoded";
	}
}

/* Exact first's per-sample state (dataset.own_state), when it applies. */
static void own_set(struct dataset *ds, uint32_t sample, uint8_t state)
{
	if (ds->own_state && sample < dataset_nsamples(ds))
		atomic_store_explicit(&ds->own_state[sample], state,
				      memory_order_relaxed);
}

/* Echo pool hook: what the pool keeps of a sample when preprocessing. */
static int ingest_sample(void *ud, uint32_t sample, const uint8_t *in,
			 size_t len, uint8_t **out, size_t *outlen)
{
	struct dataset *ds = ud;
	char why[200];
	int r;

	if (echo_stage(ds) == DATASET_STAGE_AFTER_AUGMENT) {
		uint64_t n = ds->ingested++;
		uint64_t rand = hash64(&n, sizeof(n), ds->seed);
		r = prep_apply(ds->prep, in, len, rand, out, outlen, why,
			       sizeof(why));
	} else if (ds->prepared) {
		r = prepared_make_named(ds->prepared, ds->prep,
					dataset_key(ds, sample), in, len, out,
					outlen, why, sizeof(why));
	} else {
		r = prep_prepare(ds->prep, in, len, out, outlen, why,
				 sizeof(why));
	}
	if (r && !transform_image_fault(r))
		return -EAGAIN; /* memory, shutdown: not the image's fault */
	if (r) {
		/* Rate-limited: the pool never reads a failed sample again,
		 * but a dataset with many bad ones must not flood the log
		 * (issue 32). */
		log_counted("bad_sample", "sample %s skipped: %s",
			    dataset_key(ds, sample), why);
		/* Counted by the pool: exact first must not decode it again. */
		own_set(ds, sample, OWN_BAD);
	}
	return r;
}

/* The prepared-sample tier, when the recipe has a prepared stage and it
 * is not turned off; a tier that cannot open is logged, not fatal. */
static void open_prepared(struct dataset *ds, const struct dataset_opts *o,
			  const struct transform_opts *tf)
{
	char err[256];
	if (o->image.no_prepared || !o->cache_dir || !prepared_applies(tf))
		return;
	uint64_t cap = o->image.prepared_size ? o->image.prepared_size
					      : o->cache_size;
	if (prepared_open(o->cache_dir, cap, tf, &ds->prepared, err,
			  sizeof(err)))
		log_warn("decoding every pass (no prepared samples): %s", err);
}

/* Exact first (dataset_echo_own) applies: an adaptive echo mount whose
 * rendering of a sample is deterministic. */
static int exact_first(const struct dataset_echo_opts *e,
		       const struct dataset_image_opts *i)
{
	return e->on && e->mode == DATASET_ECHO_ADAPTIVE && !e->no_exact_first &&
	       !i->augment;
}

int dataset_start_image(struct dataset *ds, const struct dataset_opts *o,
			char *err, size_t errlen)
{
	const struct dataset_image_opts *io = &o->image;
	int random = o->echo.on && io->augment;
	struct transform_opts tf = {
		.size = io->size,
		.crop = io->crop,
		.random_crop = random,
		.flip_prob_half = random && io->flip,
		.rrc = io->rrc,
		.rrc_scale = {io->rrc_scale[0], io->rrc_scale[1]},
		.rrc_ratio = {io->rrc_ratio[0], io->rrc_ratio[1]},
		.format = (enum transform_format)io->format,
		.quality = (int)io->quality,
		.max_pixels = io->max_pixels,
		.decode_mem = io->decode_mem,
	};
	int r;

	if (!io->on)
		return 0;
	if (io->flip && !random)
		log_warn("flip=1 needs an echo mount with augment=1; ignored");
	if (io->rrc && !random)
		log_warn("augment=rrc needs an echo mount; exact mounts keep "
			 "the centre crop");
	/* decode_mem bounds what the workers hold at once; it bounds the RSS
	 * only if freed buffers go back to the system. glibc's dynamic mmap
	 * threshold (raised up to 32 MB by each free) would serve libjpeg's
	 * tens-of-MB coefficient arrays from per-thread heaps that are kept;
	 * a fixed threshold (this call turns the dynamic one off) keeps them
	 * mmap'd, returned on free. */
	mallopt(M_MMAP_THRESHOLD, 8 << 20);
	/* Fixing the threshold also leaves the trim threshold at 128 KB:
	 * freeing a 150 KB output at the top of a heap gave the pages back
	 * and the next one faulted them in again (issue 29: 11 page faults
	 * per echo serve, 7x an exact mount's). Up to 32 MB of free top of
	 * heap is kept per arena. */
	mallopt(M_TRIM_THRESHOLD, 32 << 20);
	r = prep_open(&tf, io->threads, &ds->prep);
	if (r) {
		snprintf(err, errlen, "cannot start decode workers: %s",
			 strerror(-r));
		return r;
	}
	open_prepared(ds, o, &tf);
	/* Exact first serves an echo mount's own samples as an exact mount
	 * does: from the same outputs. */
	if (!o->echo.on || exact_first(&o->echo, io)) {
		ds->outputs = outputs_new(ds->ix, ds->sh, ds->prep);
		outputs_set_prepared(ds->outputs, ds->prepared);
	}
	return 0;
}

void dataset_stop_image(struct dataset *ds)
{
	dataset_echo_end(ds);
	outputs_free(ds->outputs);
	ds->outputs = NULL;
	prep_free(ds->prep);
	ds->prep = NULL;
	prepared_close(ds->prepared);
	ds->prepared = NULL;
}

/* Start the pool over the samples, or (members) over the members. */
static int echo_start(struct dataset *ds, const uint32_t *class_of,
		      uint32_t nclasses, bool members, char *err,
		      size_t errlen)
{
	const struct dataset_echo_opts *eo = &ds->echo_opts;
	uint32_t base = (uint32_t)dataset_nsamples(ds);
	size_t n = members ? dataset_nmembers(ds) : base;
	uint32_t *cls;
	struct pool_opts po = {
		.echo = eo->echo,
		.mode = (enum echo_mode)eo->mode,
		.window = eo->window,
		.mem_size = eo->mem_size,
		.seed = ds->seed,
		.ingest = ds->prep && echo_stage(ds) != DATASET_STAGE_ENCODED
				  ? ingest_sample
				  : NULL,
		.ingest_ud = ds,
		/* Encoded echoes cost a decode like fresh serves: they may
		 * only fill waits. */
		.fresh_first = ds->prep &&
			       echo_stage(ds) == DATASET_STAGE_ENCODED &&
			       eo->mode == DATASET_ECHO_ADAPTIVE,
		/* Twice the decode workers: one decoding, one queued each. */
		.ingest_threads = 2 * prep_threads(ds->prep),
		.world = eo->repartition ? ds->part.world : 1,
		.rank = ds->part.rank,
		.interrupted = eo->interrupted,
		.members = members,
		.number_base = members ? base : 0,
		/* Exact first over a warm cache serves every path its own
		 * sample: a stream started now would decode a buffer's worth
		 * of samples nobody takes (BENCHMARKS §26). */
		.lazy_start = !members && exact_first(eo, &ds->image_opts) &&
			      dataset_all_local(ds),
	};
	int r;

	if (ds->pool) {
		snprintf(err, errlen, "the echo pool is running already");
		return -EBUSY;
	}
	cls = xmalloc((n ? n : 1) * sizeof(*cls));
	/* The pool streams the rank's whole part (trimmed samples too), or
	 * every shard when it draws a new part each pass. */
	for (size_t i = 0; i < n; i++)
		cls[i] = eo->repartition ||
				 dataset_in_part(ds, (uint32_t)i +
							     (members ? base : 0))
				 ? class_of[i]
				 : POOL_NO_CLASS;
	/* Before the pool's threads start: its hooks mark bad samples. */
	if (!members && exact_first(eo, &ds->image_opts))
		ds->own_state = xcalloc(n ? n : 1, sizeof(*ds->own_state));
	r = pool_open(ds->ix, ds->sh, cls, nclasses, &po, &ds->pool);
	free(cls);
	if (r) {
		free((void *)ds->own_state);
		ds->own_state = NULL;
		snprintf(err, errlen, "cannot start the echo pool: %s",
			 strerror(-r));
		return r;
	}
	ds->own_pool = 1;
	return 0;
}

int dataset_echo_start(struct dataset *ds, const uint32_t *class_of,
		       uint32_t nclasses, char *err, size_t errlen)
{
	return echo_start(ds, class_of, nclasses, false, err, errlen);
}

int dataset_echo_start_members(struct dataset *ds, const uint32_t *class_of,
			       uint32_t nclasses, char *err, size_t errlen)
{
	if (ds->prep || ds->echo_opts.repartition) {
		snprintf(err, errlen, "an echo pool of members takes no "
				      "preprocessing and no repartition");
		return -EINVAL;
	}
	return echo_start(ds, class_of, nclasses, true, err, errlen);
}

struct dataset_sample *dataset_echo_share(struct dataset *ds,
					  struct dataset_sample *s)
{
	return face_of(pool_share(ds->pool, pool_of(s)));
}

int dataset_echoes(const struct dataset *ds)
{
	return ds->pool != NULL;
}

void dataset_echo_end(struct dataset *ds)
{
	if (!ds || !ds->pool)
		return;
	if (ds->own_pool)
		pool_free(ds->pool);
	ds->pool = NULL;
	free((void *)ds->own_state);
	ds->own_state = NULL;
	ds->own_pool = 0;
}

void dataset_wrap_pool(struct dataset *ds, struct pool *pool)
{
	ds->pool = pool;
	ds->own_pool = 0;
}

int dataset_echo_take(struct dataset *ds, uint32_t cls,
		      struct dataset_sample **out)
{
	struct pool_sample *s = NULL;
	int r = ds->pool ? pool_take(ds->pool, cls, &s) : -ENXIO;

	*out = r ? NULL : face_of(s);
	return r;
}

/* A parked take's caller, between the pool's callback and the face's. */
struct take {
	dataset_echo_done_fn done;
	void *ud;
};

static void take_done(void *ud, int err, struct pool_sample *s)
{
	struct take t = *(struct take *)ud;

	free(ud);
	t.done(t.ud, err, s ? face_of(s) : NULL);
}

int dataset_echo_take_async(struct dataset *ds, uint32_t cls, const void *tag,
			    dataset_echo_done_fn done, void *ud,
			    struct dataset_sample **out)
{
	struct take *t;
	struct pool_sample *s = NULL;
	int r;

	*out = NULL;
	if (!ds->pool)
		return -ENXIO;
	t = xmalloc(sizeof(*t));
	*t = (struct take){.done = done, .ud = ud};
	r = pool_take_async(ds->pool, cls, tag, take_done, t, &s);
	if (r == -EINPROGRESS)
		return r; /* t belongs to take_done now */
	free(t);
	if (r == 0)
		*out = face_of(s);
	return r;
}

int dataset_echo_cancel(struct dataset *ds, const void *tag)
{
	return ds && ds->pool ? pool_cancel(ds->pool, tag) : 0;
}

void dataset_echo_cancel_all(struct dataset *ds)
{
	if (ds)
		pool_cancel_all(ds->pool);
}

void dataset_echo_stop(struct dataset *ds)
{
	if (ds)
		pool_stop(ds->pool);
}

void dataset_echo_commit(struct dataset *ds, struct dataset_sample *s)
{
	pool_commit(ds->pool, pool_of(s));
}

void dataset_echo_untake(struct dataset *ds, struct dataset_sample *s)
{
	pool_untake(ds->pool, pool_of(s));
}

void dataset_echo_release(struct dataset *ds, struct dataset_sample *s)
{
	if (s)
		pool_release(ds->pool, pool_of(s));
}

void dataset_echo_get(struct dataset *ds, double *echo,
		      enum dataset_echo_mode *mode)
{
	enum echo_mode m = ECHO_ADAPTIVE;

	*echo = 1.0;
	if (ds->pool)
		pool_get_echo(ds->pool, echo, &m);
	*mode = (enum dataset_echo_mode)m;
}

int dataset_echo_set(struct dataset *ds, double echo,
		     enum dataset_echo_mode mode)
{
	if (!ds->pool)
		return -ENXIO;
	if (atomic_load(&ds->echo_retired))
		return -EBUSY;
	return pool_set_echo(ds->pool, echo, (enum echo_mode)mode);
}

int dataset_echo_may_retire(struct dataset *ds)
{
	struct pool_stats ps;
	double echo;
	enum dataset_echo_mode mode;

	if (!ds->pool || !ds->own_state || ds->echo_opts.no_exact_when_local ||
	    atomic_load(&ds->echo_retired))
		return 0;
	dataset_echo_get(ds, &echo, &mode);
	if (mode != DATASET_ECHO_ADAPTIVE)
		return 0;
	pool_get_stats(ds->pool, &ps);
	/* Retired, every path serves its own sample: not while the pool has
	 * served some of them through other paths this pass or the last
	 * (pool_claim_own), or echo=1 would serve those twice in a pass. */
	if (ps.parked || ps.taken_recently)
		return 0;
	return dataset_all_local(ds);
}

void dataset_echo_retire(struct dataset *ds)
{
	atomic_store(&ds->echo_retired, true);
}

int dataset_echo_own(struct dataset *ds, uint32_t sample)
{
	if (!ds->pool || !ds->own_state || sample >= dataset_nsamples(ds) ||
	    atomic_load_explicit(&ds->own_state[sample],
				 memory_order_relaxed) == OWN_BAD)
		return 0;
	/* Local and not the pool's this pass (a sample is served by its
	 * path or by the pool, never both: pool_claim_own). */
	return pool_claim_own(ds->pool, sample,
			      dataset_is_cached(ds, dataset_group(ds, sample)));
}

/* A bad image found by its own path: exact first leaves it to the pool,
 * which skips it too. Counted by the outputs: the pool must not count it
 * again. */
static void own_bad(struct dataset *ds, uint32_t sample)
{
	own_set(ds, sample, OWN_BAD);
	pool_mark_bad(ds->pool, sample);
}

int dataset_echo_known_bad(struct dataset *ds, uint32_t sample)
{
	return ds->own_state && sample < dataset_nsamples(ds) &&
	       atomic_load_explicit(&ds->own_state[sample],
				    memory_order_relaxed) == OWN_BAD;
}

/* The first look at a sample's own path makes its output (the read after
 * it finds it in ds->outputs), so that a bad image fails here, where the
 * pool can stand in, rather than at a read; later looks trust that. Only
 * the image's own fault (outputs_bad) marks it bad: a failed fetch, a read
 * timeout or memory running short is the moment's, fails this look with
 * its errno and leaves the sample unknown, so the next look makes it again
 * (a failed shard fails fast until its retry_failed_s backoff ends, as on
 * any read); marked, its path would read another sample for good and the
 * pool would never serve it (issue 50). */
int dataset_echo_check_own(struct dataset *ds, uint32_t sample)
{
	struct dataset_output *o;
	int r;

	if (!ds->outputs || !ds->own_state || sample >= dataset_nsamples(ds))
		return 0;
	switch (atomic_load_explicit(&ds->own_state[sample],
				     memory_order_relaxed)) {
	case OWN_OK:
		return 0;
	case OWN_BAD:
		return -EIO; /* its reason was counted and logged once */
	default:
		break;
	}
	r = dataset_output_get(ds, sample, &o);
	if (r) {
		if (outputs_bad(ds->outputs, sample))
			own_bad(ds, sample);
		return r;
	}
	dataset_output_put(ds, o);
	own_set(ds, sample, OWN_OK);
	return 0;
}

/* A good image the same every time, rather than EIO: the reader gets a
 * sample of the right label, as a hard link to a sibling would give it.
 * Only local candidates when asked (checking one makes its output, which
 * must not wait for a fetch on a FUSE thread). */
uint32_t dataset_echo_stand_in(struct dataset *ds, uint32_t count,
			       uint32_t self, dataset_candidate_fn at,
			       const void *ud, int local, uint32_t *skipped)
{
	if (skipped)
		*skipped = 0;
	for (uint32_t k = 1; k < count; k++) {
		uint32_t c = (self + k) % count;
		uint32_t s = at(ud, c);

		if (local && !dataset_is_cached(ds, dataset_group(ds, s))) {
			if (skipped)
				++*skipped;
			continue;
		}
		if (dataset_echo_check_own(ds, s) == 0)
			return c;
	}
	return UINT32_MAX;
}

int dataset_echo_open_own(struct dataset *ds, uint32_t sample)
{
	int r = dataset_echo_check_own(ds, sample);

	if (r == 0)
		pool_count_own(ds->pool);
	return r;
}

uint64_t dataset_echo_ready(struct dataset *ds, uint32_t cls)
{
	return ds->pool ? pool_ready(ds->pool, cls) : 0;
}

uint64_t dataset_echo_parked(struct dataset *ds)
{
	return ds->pool ? pool_parked(ds->pool) : 0;
}

int dataset_echo_mode_parse(const char *s, enum dataset_echo_mode *out)
{
	enum echo_mode m;
	int r = echo_mode_parse(s, &m);

	if (r == 0)
		*out = (enum dataset_echo_mode)m;
	return r;
}

const char *dataset_echo_mode_name(enum dataset_echo_mode m)
{
	return echo_mode_name((enum echo_mode)m);
}

enum dataset_echo_serve dataset_echo_serving(const struct dataset *ds)
{
	if (!ds->prep || echo_stage(ds) == DATASET_STAGE_AFTER_AUGMENT)
		return DATASET_SERVE_HELD;
	if (echo_stage(ds) == DATASET_STAGE_ENCODED)
		return DATASET_SERVE_DECODE;
	/* A RandomResizedCrop resamples: it is made whole per open, not
	 * rendered range by range. */
	return ds->image_opts.format == DATASET_FORMAT_PPM &&
				       !ds->image_opts.rrc
		       ? DATASET_SERVE_RENDER
		       : DATASET_SERVE_AUGMENT;
}

int dataset_echo_decode(struct dataset *ds, const struct dataset_sample *s,
			uint64_t rand, uint8_t **out, size_t *outlen)
{
	const struct pool_sample *ps = pool_of(s);
	char why[200];
	uint8_t *pb;
	size_t pl;
	int r;

	if (ds->prepared) {
		/* Decoded once per dataset (the prepared-sample tier), as an
		 * exact mount's outputs are. */
		r = prepared_make_named(ds->prepared, ds->prep,
					dataset_key(ds, ps->sample), ps->data,
					ps->len, &pb, &pl, why, sizeof(why));
		if (r == 0) {
			r = prep_augment(ds->prep, pb, pl, rand ^ ds->seed, out,
					 outlen, why, sizeof(why));
			free(pb);
		}
	} else {
		r = prep_apply(ds->prep, ps->data, ps->len, rand ^ ds->seed, out,
			       outlen, why, sizeof(why));
	}
	if (r)
		log_counted("bad_sample", "sample %s skipped: %s",
			    dataset_key(ds, ps->sample), why);
	return r;
}

void dataset_echo_discard(struct dataset *ds, struct dataset_sample *s)
{
	uint32_t sample = pool_of(s)->sample;

	/* Counted by the pool: exact first must not decode it again. */
	own_set(ds, sample, OWN_BAD);
	pool_discard(ds->pool, pool_of(s));
}

int dataset_echo_augment(struct dataset *ds, const uint8_t *data, size_t len,
			 uint64_t rand, uint8_t **out, size_t *outlen)
{
	char why[200];
	int r = prep_augment(ds->prep, data, len, rand ^ ds->seed, out, outlen,
			     why, sizeof(why));
	if (r)
		log_warn("cannot augment a sample: %s", why);
	return r;
}

ssize_t dataset_echo_render_size(struct dataset *ds, const uint8_t *data,
				 size_t len)
{
	return prep_augment_size(ds->prep, data, len);
}

ssize_t dataset_echo_render_range(struct dataset *ds, const uint8_t *data,
				  size_t len, uint64_t rand, uint64_t off,
				  uint8_t *dst, size_t n)
{
	ssize_t r = prep_augment_range(ds->prep, data, len, rand ^ ds->seed,
				       off, dst, n);
	if (r < 0)
		log_warn("cannot augment a sample: %s", strerror((int)-r));
	return r;
}

/* A dataset_output is an outputs.c output under another name. */
static const struct output *output_of(const struct dataset_output *o)
{
	return (const struct output *)o;
}

int dataset_converts(const struct dataset *ds)
{
	return ds->outputs != NULL;
}

ssize_t dataset_output_fixed_size(const struct dataset *ds)
{
	return ds->prep ? prep_fixed_size(ds->prep) : -1;
}

int dataset_output_get(struct dataset *ds, uint32_t sample,
		       struct dataset_output **out)
{
	struct output *o = NULL;
	int r = ds->outputs ? outputs_get(ds->outputs, sample, &o) : -ENXIO;

	*out = r ? NULL : (struct dataset_output *)o;
	return r;
}

const uint8_t *dataset_output_data(const struct dataset_output *o)
{
	return output_of(o)->data;
}

size_t dataset_output_len(const struct dataset_output *o)
{
	return output_of(o)->len;
}

void dataset_output_put(struct dataset *ds, struct dataset_output *o)
{
	outputs_put(ds->outputs, (struct output *)o);
}

void dataset_echo_fill_stats(struct dataset *ds, struct dataset_stats *out)
{
	struct outputs_stats os;
	struct pool_stats p;

	if (ds->outputs) {
		outputs_get_stats(ds->outputs, &os);
		out->outputs =
			(struct dataset_output_stats){.hits = os.hits,
						      .misses = os.misses,
						      .rejected = os.rejected};
	}
	if (ds->prepared) {
		struct prepared_stats ps;
		prepared_get_stats(ds->prepared, &ps);
		out->prepared = (struct dataset_prepared_stats){
			.on = 1, .hits = ps.hits, .misses = ps.misses,
			.writes = ps.writes, .corrupt = ps.corrupt,
			.bytes = ps.bytes, .entries = ps.entries,
			.evictions = ps.evictions, .queued = ps.queued,
			.skipped = ps.skipped,
			.skipped_first = ps.skipped_first,
			.skipped_seen_full = ps.skipped_seen_full,
			.seen = ps.seen, .writer_s = ps.writer_s};
	}
	if (!ds->pool)
		return;
	pool_get_stats(ds->pool, &p);
	out->echo = (struct dataset_echo_stats){
		.pass = p.pass,
		.fresh_in_pass = p.fresh_in_pass,
		.fresh_served = p.fresh_served,
		.own_served = p.own_served,
		.echoes_served = p.echoes_served,
		.effective_echo = p.effective_echo,
		.stall_s = p.stall_s,
		.pool_bytes = p.pool_bytes,
		.pool_samples = p.pool_samples,
		.dropped = p.dropped,
		.read_errors = p.read_errors,
		.timeouts = p.timeouts,
		.rejected = p.rejected,
		.given_back = p.given_back,
		.reread = p.reread,
		.owed = p.owed,
		.parked = p.parked,
		.echo_factor = p.echo_factor,
		.fresh_rate = p.fresh_rate,
		.best_fresh_rate = p.best_fresh_rate,
		.echo_reason = atomic_load(&ds->echo_retired) ? "retired"
							      : p.echo_reason,
		.echo_changes = p.echo_changes,
		.echo_age_p10 = p.echo_age_p10,
		.echo_age_p50 = p.echo_age_p50,
		.fresh_ready = p.fresh_ready,
	};
}

void dataset_image_versions(char *buf, size_t len)
{
	transform_versions(buf, len);
}
