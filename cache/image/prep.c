/* prep.c - the decode worker pool: image transforms run on worker threads,
 * each with its own TurboJPEG context (see prep.h). */
#include "cache/image/prep.h"

#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cache/image/budget.h"
#include "common/util.h"
#include "common/workq.h"

#define QUEUE_PER_WORKER 4
/* Room for serve jobs (augment) beyond the bounded decode queue: a serve
 * never waits behind queued decodes, only for a worker to finish one. */
#define QUEUE_URGENT 64
#define PREP_MAGIC 0x50524550u /* "PREP" */
#define PREP_HEADER 16

enum job_kind { JOB_APPLY, JOB_PREPARE, JOB_AUGMENT };

struct job {
	struct workq_item it;
	enum job_kind kind;
	const void *in;
	size_t len;
	uint64_t rand;
	uint8_t *out;
	size_t outlen;
	int result;
	char why[160];
};

struct prep {
	struct transform_opts opts;
	unsigned nthreads;
	struct workq *wq;   /* the workers; serves queue with workq_run_first */
	struct budget *mem; /* decode memory, shared by the workers */
};

static void put_u32(uint8_t *p, uint32_t v)
{
	memcpy(p, &v, sizeof(v));
}

static uint32_t get_u32(const uint8_t *p)
{
	uint32_t v;
	memcpy(&v, p, sizeof(v));
	return v;
}

/* Image into one prepared buffer (takes the pixels' ownership). */
static int pack(struct image *img, uint8_t **out, size_t *outlen)
{
	size_t px = (size_t)img->w * img->h * 3;
	uint8_t *b = malloc(PREP_HEADER + px);
	if (!b) {
		transform_image_free(img);
		return -ENOMEM;
	}
	put_u32(b, PREP_MAGIC);
	put_u32(b + 4, img->w);
	put_u32(b + 8, img->h);
	put_u32(b + 12, 0);
	memcpy(b + PREP_HEADER, img->rgb, px);
	transform_image_free(img);
	*out = b;
	*outlen = PREP_HEADER + px;
	return 0;
}

/* A view of a prepared buffer as an image (pixels borrowed). */
static int unpack(const void *buf, size_t len, struct image *img)
{
	const uint8_t *b = buf;
	if (len < PREP_HEADER || get_u32(b) != PREP_MAGIC)
		return -EINVAL;
	img->w = get_u32(b + 4);
	img->h = get_u32(b + 8);
	if (!img->w || !img->h ||
	    (uint64_t)img->w * img->h * 3 != len - PREP_HEADER)
		return -EINVAL;
	img->rgb = (uint8_t *)b + PREP_HEADER;
	return 0;
}

/* Decoding waits for its memory (read from the header) to be free; an
 * image that needs more than the whole budget is refused. */
static int take_mem(struct prep *p, struct job *j, uint64_t *n)
{
	if (transform_decode_mem(&p->opts, j->in, j->len, n) < 0) {
		*n = 0; /* unusable header: the transform says why */
		return 0;
	}
	if (budget_take(p->mem, *n) == 0)
		return 0;
	snprintf(j->why, sizeof(j->why),
		 "decoding needs %llu MB, more than decode_mem (%llu MB)",
		 (unsigned long long)(*n >> 20),
		 (unsigned long long)(budget_total(p->mem) >> 20));
	*n = 0;
	return -EFBIG;
}

static void run(struct prep *p, struct transform_ctx *tc, struct job *j)
{
	struct image img = {0};
	uint64_t mem = 0;

	if (j->kind != JOB_AUGMENT && (j->result = take_mem(p, j, &mem)) != 0)
		return;

	switch (j->kind) {
	case JOB_APPLY:
		j->result = transform_apply(tc, &p->opts, j->in, j->len, j->rand,
					    &j->out, &j->outlen, j->why,
					    sizeof(j->why));
		break;
	case JOB_PREPARE:
		j->result = transform_prepare(tc, &p->opts, j->in, j->len, &img,
					      j->why, sizeof(j->why));
		if (j->result == 0)
			j->result = pack(&img, &j->out, &j->outlen);
		break;
	case JOB_AUGMENT:
		j->result = unpack(j->in, j->len, &img);
		if (j->result == 0)
			j->result = transform_augment(tc, &p->opts, &img, j->rand,
						      &j->out, &j->outlen);
		if (j->result)
			snprintf(j->why, sizeof(j->why), "augment: %s",
				 strerror(-j->result));
		break;
	}
	budget_give(p->mem, mem);
}

/* workq callbacks: each worker keeps its own TurboJPEG context. */
static void *worker_ctx_new(void *ctx)
{
	(void)ctx;
	return transform_ctx_new();
}

static void worker_ctx_free(void *ctx, void *tc)
{
	(void)ctx;
	transform_ctx_free(tc);
}

static void worker_run(void *ctx, struct workq_item *it)
{
	struct job *j = list_entry(it, struct job, it);
	struct transform_ctx *tc = workq_worker_state();

	if (tc) {
		run(ctx, tc, j);
	} else {
		j->result = -ENOMEM;
		snprintf(j->why, sizeof(j->why), "no TurboJPEG context");
	}
}

/* The job's result to the caller, with its reason. */
static int finish(struct job *j, uint8_t **out, size_t *outlen, char *why,
		  size_t whylen)
{
	*out = j->out;
	*outlen = j->outlen;
	if (j->result && why)
		snprintf(why, whylen, "%s",
			 j->why[0] ? j->why : strerror(-j->result));
	return j->result;
}

/* Queue j and wait for it. A serve (augment) goes ahead of queued decodes,
 * in the room kept for it; others wait while the bounded queue is full. */
static int submit(struct prep *p, struct job *j, uint8_t **out,
		  size_t *outlen, char *why, size_t whylen)
{
	int r = j->kind == JOB_AUGMENT ? workq_run_first(p->wq, &j->it)
				       : workq_run(p->wq, &j->it);
	if (r) {
		j->result = r == -ECANCELED ? -ESHUTDOWN : r;
		j->out = NULL;
		j->outlen = 0;
	}
	return finish(j, out, outlen, why, whylen);
}

int prep_apply(struct prep *p, const void *in, size_t len, uint64_t rand,
	       uint8_t **out, size_t *outlen, char *why, size_t whylen)
{
	struct job j = {.kind = JOB_APPLY, .in = in, .len = len, .rand = rand};
	return submit(p, &j, out, outlen, why, whylen);
}

int prep_prepare(struct prep *p, const void *in, size_t len, uint8_t **out,
		 size_t *outlen, char *why, size_t whylen)
{
	struct job j = {.kind = JOB_PREPARE, .in = in, .len = len};
	return submit(p, &j, out, outlen, why, whylen);
}

/* Each calling thread's own transform context for inline augments, freed
 * when the thread exits. */
static pthread_key_t ctx_key;
static pthread_once_t ctx_once = PTHREAD_ONCE_INIT;

static void ctx_destroy(void *tc)
{
	transform_ctx_free(tc);
}

static void ctx_key_make(void)
{
	pthread_key_create(&ctx_key, ctx_destroy);
}

static struct transform_ctx *thread_ctx(void)
{
	struct transform_ctx *tc;

	pthread_once(&ctx_once, ctx_key_make);
	tc = pthread_getspecific(ctx_key);
	if (!tc && (tc = transform_ctx_new()) != NULL)
		pthread_setspecific(ctx_key, tc);
	return tc;
}

int prep_augment(struct prep *p, const void *prepared, size_t len,
		 uint64_t rand, uint8_t **out, size_t *outlen, char *why,
		 size_t whylen)
{
	struct job j = {.kind = JOB_AUGMENT, .in = prepared, .len = len,
			.rand = rand};
	struct transform_ctx *tc;

	/* A PPM echo is a crop, a flip and a header: copies, cheaper than
	 * the two thread switches of a worker job, so it runs here. */
	if (p->opts.format != TF_PPM || !(tc = thread_ctx()))
		return submit(p, &j, out, outlen, why, whylen);
	run(p, tc, &j);
	return finish(&j, out, outlen, why, whylen);
}

ssize_t prep_prepared_len(struct prep *p, const void *in, size_t len)
{
	struct transform_ctx *tc = thread_ctx();
	unsigned w, h;

	if (!tc)
		return -ENOMEM;
	int r = transform_prepared_dims(tc, &p->opts, in, len, &w, &h);
	return r < 0 ? r : (ssize_t)(PREP_HEADER + (size_t)w * h * 3);
}

ssize_t prep_augment_size(const struct prep *p, const void *prepared,
			  size_t len)
{
	struct image img;

	if (p->opts.format != TF_PPM)
		return -ENOTSUP;
	if (unpack(prepared, len, &img) < 0)
		return -EINVAL;
	return transform_augment_ppm_size(&p->opts, img.w, img.h);
}

ssize_t prep_augment_range(const struct prep *p, const void *prepared,
			   size_t len, uint64_t rand, uint64_t off,
			   uint8_t *dst, size_t n)
{
	struct image img;

	if (p->opts.format != TF_PPM)
		return -ENOTSUP;
	if (unpack(prepared, len, &img) < 0)
		return -EINVAL;
	return transform_augment_ppm(&p->opts, &img, rand, off, dst, n);
}

unsigned prep_threads(const struct prep *p)
{
	return p ? p->nthreads : 0;
}

ssize_t prep_fixed_size(const struct prep *p)
{
	if (p->opts.format != TF_PPM || p->opts.crop == 0)
		return -ENOTSUP;
	return transform_output_size(&p->opts, p->opts.crop, p->opts.crop);
}

int prep_open(const struct transform_opts *opts, unsigned threads,
	      struct prep **out)
{
	struct prep *p = xcalloc(1, sizeof(*p));
	long n = threads ? (long)threads : sysconf(_SC_NPROCESSORS_ONLN);
	int err;

	*out = NULL;
	p->opts = *opts;
	p->mem = budget_new(opts->decode_mem ? opts->decode_mem
					     : TRANSFORM_DEFAULT_DECODE_MEM);
	p->nthreads = (unsigned)(n > 0 ? (n > 64 ? 64 : n) : 1);
	err = workq_open(&(struct workq_opts){
		.threads = p->nthreads,
		.cap = (size_t)p->nthreads * QUEUE_PER_WORKER,
		.urgent = QUEUE_URGENT,
		.run = worker_run,
		.ctx = p,
		.worker_init = worker_ctx_new,
		.worker_fini = worker_ctx_free}, &p->wq);
	if (err) {
		prep_free(p);
		return err;
	}
	*out = p;
	return 0;
}

void prep_free(struct prep *p)
{
	if (!p)
		return;
	workq_free(p->wq); /* drains: every queued job still runs */
	budget_free(p->mem);
	free(p);
}
