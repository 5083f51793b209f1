/* pack_write.c - WebDataset shards and their index from a user's samples
 * (see pack_write.h for the design). */
#include "tools/pack_write.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/util.h"
#include "fetch/format/index.h"
#include "fetch/format/scan.h"
#include "fetch/format/sums.h"
#include "tools/pack_input.h"
#include "tools/pack_tar.h"

#define COPY_CHUNK ((size_t)1 << 20)

struct shard_plan {
	size_t first, n;  /* into order */
	uint64_t bytes;	  /* the tar's exact size */
	struct index *ix; /* its index, once written */
};

struct writer {
	const struct pack_input *in;
	const struct pack_write_opts *o;
	uint32_t *order; /* sample numbers, shuffled */
	struct shard_plan *plan;
	size_t nplan;
	atomic_size_t next;
	atomic_bool failed;
	pthread_mutex_t lock; /* guards err */
	char err[600];
};

/* One shard being written by one thread. */
struct out {
	FILE *f;
	struct scan *scan;
	struct sums *sums;
	uint64_t written;
	uint8_t *buf; /* COPY_CHUNK */
};

static uint64_t splitmix64(uint64_t *x)
{
	uint64_t z = (*x += 0x9e3779b97f4a7c15ull);
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

static void shuffle(uint32_t *v, size_t n, uint64_t seed)
{
	for (size_t i = n; i > 1; i--) {
		size_t j = (size_t)(splitmix64(&seed) % i);
		uint32_t t = v[i - 1];
		v[i - 1] = v[j];
		v[j] = t;
	}
}

/* Cut the shuffled order into shards: by count, by samples per shard, or
 * by size (a sample never split; a shard holds at least one). */
static void plan_shards(struct writer *w)
{
	const struct pack_input *in = w->in;
	size_t n = in->ns, k = 0;

	w->plan = xcalloc(n + 1, sizeof(*w->plan));
	for (size_t i = 0; i < n; i++) {
		const struct pack_sample *s = &in->s[w->order[i]];
		struct shard_plan *p = &w->plan[k];
		bool next;
		if (w->o->shards)
			next = i >= (k + 1) * n / w->o->shards;
		else if (w->o->per_shard)
			next = p->n == w->o->per_shard;
		else
			next = p->n &&
			       p->bytes + s->bytes + 2 * PACK_TAR_BLOCK >
				       w->o->shard_size;
		if (next) {
			p = &w->plan[++k];
			p->first = i;
		}
		p->n++;
		p->bytes += s->bytes;
	}
	w->nplan = k + 1;
	for (size_t i = 0; i < w->nplan; i++)
		w->plan[i].bytes += 2 * PACK_TAR_BLOCK; /* end of archive */
}

__attribute__((format(printf, 2, 3))) static int fail(struct writer *w,
						      const char *fmt, ...)
{
	va_list ap;

	pthread_mutex_lock(&w->lock);
	if (!atomic_exchange(&w->failed, true)) {
		va_start(ap, fmt);
		vsnprintf(w->err, sizeof(w->err), fmt, ap);
		va_end(ap);
	}
	pthread_mutex_unlock(&w->lock);
	return -1;
}

static void shard_path(const struct writer *w, size_t k, char *buf, size_t len)
{
	snprintf(buf, len, "%s/%s-%06zu.tar", w->o->out, w->o->prefix, k);
}

/* Bytes into the shard file and its scanner and checksums. */
static int emit(struct writer *w, struct out *o, const void *buf, size_t len)
{
	if (fwrite(buf, 1, len, o->f) != len)
		return fail(w, "writing a shard: %s", strerror(errno));
	if (scan_feed(o->scan, buf, len) || sums_feed(o->sums, buf, len))
		return fail(w, "bug: the packer wrote a bad tar: %s",
			    scan_error(o->scan));
	o->written += len;
	return 0;
}

/* A file's bytes: exactly the size seen when the input was listed. */
static int copy_file(struct writer *w, struct out *o,
		     const struct pack_member *m)
{
	int fd = open(m->path, O_RDONLY | O_CLOEXEC);
	uint64_t left = m->size;
	int rc = 0;

	if (fd < 0)
		return fail(w, "%s: %s", m->path, strerror(errno));
	while (rc == 0 && left > 0) {
		size_t want = left < COPY_CHUNK ? (size_t)left : COPY_CHUNK;
		ssize_t n = read(fd, o->buf, want);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			rc = fail(w, "%s: %s", m->path, strerror(errno));
		else if (n == 0)
			rc = fail(w,
				  "%s: shorter than when listed (changed "
				  "while packing?)",
				  m->path);
		else
			rc = emit(w, o, o->buf, (size_t)n);
		left -= n > 0 ? (uint64_t)n : 0;
	}
	close(fd);
	return rc;
}

static int put_member(struct writer *w, struct out *o,
		      const struct pack_member *m)
{
	static const uint8_t zeros[PACK_TAR_BLOCK];
	uint8_t blk[PACK_TAR_BLOCK];
	size_t pad = (size_t)((PACK_TAR_BLOCK - m->size % PACK_TAR_BLOCK) %
			      PACK_TAR_BLOCK);
	int rc;

	if (pack_tar_header(blk, m->name, m->size))
		return fail(w, "%s: cannot be a tar member (name or size)",
			    m->name);
	rc = emit(w, o, blk, sizeof(blk));
	if (rc == 0)
		rc = m->path ? copy_file(w, o, m)
			     : emit(w, o, m->data, (size_t)m->size);
	if (rc == 0 && pad)
		rc = emit(w, o, zeros, pad);
	return rc;
}

static int put_samples(struct writer *w, struct out *o,
		       const struct shard_plan *p)
{
	static const uint8_t zeros[2 * PACK_TAR_BLOCK];
	int rc = 0;

	for (size_t i = p->first; rc == 0 && i < p->first + p->n; i++) {
		const struct pack_sample *s = &w->in->s[w->order[i]];
		for (uint32_t j = 0; rc == 0 && j < s->n; j++)
			rc = put_member(w, o, &w->in->m[s->first + j]);
		if (atomic_load(&w->failed))
			rc = -1;
	}
	return rc ? rc : emit(w, o, zeros, sizeof(zeros));
}

/* Close the shard file and give it its name (0), or remove it. */
static int commit(struct writer *w, struct out *o, const char *tmp,
		  const char *path, int rc)
{
	if (rc == 0 && fflush(o->f))
		rc = fail(w, "%s: %s", path, strerror(errno));
	if (fclose(o->f) && rc == 0)
		rc = fail(w, "%s: %s", path, strerror(errno));
	if (rc == 0 && rename(tmp, path))
		rc = fail(w, "%s: %s", path, strerror(errno));
	if (rc)
		unlink(tmp);
	return rc;
}

static int write_shard(struct writer *w, size_t k, uint8_t *buf)
{
	struct shard_plan *p = &w->plan[k];
	struct out o = {.buf = buf};
	char path[PATH_MAX], tmp[PATH_MAX + 32];
	int rc;

	shard_path(w, k, path, sizeof(path));
	snprintf(tmp, sizeof(tmp), "%s.tmp.%ld", path, (long)getpid());
	o.f = fopen(tmp, "wb");
	if (!o.f)
		return fail(w, "%s: %s", tmp, strerror(errno));
	setvbuf(o.f, NULL, _IOFBF, COPY_CHUNK);
	p->ix = index_new();
	index_add_shard(p->ix, path, p->bytes, "");
	o.scan = scan_new(p->ix, 0);
	o.sums = sums_new();
	rc = put_samples(w, &o, p);
	if (rc == 0 && o.written != p->bytes)
		rc = fail(w,
			  "%s: %llu bytes written, %llu planned (a file "
			  "changed while packing?)",
			  path, (unsigned long long)o.written,
			  (unsigned long long)p->bytes);
	if (rc == 0 && (scan_finish(o.scan) || sums_fill(o.sums, p->ix, 0)))
		rc = fail(w, "bug: the index of %s does not match it", path);
	rc = commit(w, &o, tmp, path, rc);
	scan_free(o.scan);
	sums_free(o.sums);
	return rc;
}

static void *worker(void *arg)
{
	struct writer *w = arg;
	uint8_t *buf = xmalloc(COPY_CHUNK);

	for (;;) {
		size_t k = atomic_fetch_add(&w->next, 1);
		if (k >= w->nplan || atomic_load(&w->failed))
			break;
		if (write_shard(w, k, buf))
			break;
	}
	free(buf);
	return NULL;
}

static void run_workers(struct writer *w, unsigned threads)
{
	pthread_t *t = xcalloc(threads, sizeof(*t));
	unsigned started = 0;

	for (unsigned i = 1; i < threads; i++)
		if (pthread_create(&t[started], NULL, worker, w) == 0)
			started++;
	worker(w); /* this thread too: at least one always runs */
	for (unsigned i = 0; i < started; i++)
		pthread_join(t[i], NULL);
	free(t);
}

/* The URL the index records for shard k. Caller frees. */
static char *shard_url(const struct writer *w, size_t k)
{
	char path[PATH_MAX], abs[PATH_MAX], *url;
	const char *name;
	size_t n;

	shard_path(w, k, path, sizeof(path));
	if (!w->o->base_url)
		return xstrdup(realpath(path, abs) ? abs : path);
	name = strrchr(path, '/') + 1;
	n = strlen(w->o->base_url) + strlen(name) + 2;
	url = xmalloc(n);
	snprintf(url, n, "%s%s%s", w->o->base_url,
		 w->o->base_url[strlen(w->o->base_url) - 1] == '/' ? "" : "/",
		 name);
	return url;
}

/* An ImageFolder sample's label is its class index (.cls); the index
 * records the class's name, so the mount shows the input's names. */
static const char *label_of(const struct writer *w, const char *label)
{
	uint64_t v;

	if (!w->in->nclasses || parse_u64(label, &v) || v >= w->in->nclasses)
		return label;
	return w->in->classes[v];
}

/* Shard k's samples and members into ix (whose shard n it is). */
static int merge_one(const struct writer *w, struct index *ix, uint32_t n,
		     const struct index *p)
{
	for (size_t i = 0; i < p->nsamples; i++) {
		const struct index_sample *s = &p->samples[i];
		if (index_add_sample(ix, n, s->offset, s->size,
				     label_of(w, index_label(p, s)),
				     index_key(p, s), index_ext(p, s)))
			return -EINVAL;
		ix->samples[ix->nsamples - 1].sum = s->sum;
	}
	for (size_t i = 0; i < p->nmembers; i++) {
		const struct index_sample *m = &p->members[i];
		if (index_add_member(ix, n, m->offset, m->size, index_key(p, m),
				     index_ext(p, m)))
			return -EINVAL;
		ix->members[ix->nmembers - 1].sum = m->sum;
	}
	return 0;
}

static int save_index(struct writer *w, struct pack_write_result *res)
{
	struct index *ix = index_new();
	char path[PATH_MAX];
	int rc = 0;

	for (size_t k = 0; rc == 0 && k < w->nplan; k++) {
		const struct index *p = w->plan[k].ix;
		char *url = shard_url(w, k);
		uint32_t n = index_add_shard(ix, url, w->plan[k].bytes, "");
		free(url);
		ix->shards[n].sum = p->shards[0].sum;
		rc = merge_one(w, ix, n, p);
		res->bytes += w->plan[k].bytes;
	}
	ix->has_sums = ix->has_members = true;
	snprintf(path, sizeof(path), "%s/%s.echofs-index", w->o->out,
		 w->o->prefix);
	if (rc)
		fail(w, "%s: a class name or key the index refuses", path);
	else if ((rc = index_save(ix, path)) != 0)
		fail(w, "%s: %s", path, strerror(-rc));
	index_free(ix);
	return rc;
}

int pack_write(const struct pack_input *in, const struct pack_write_opts *o,
	       struct pack_write_result *res, char *err, size_t errlen)
{
	struct writer w = {.in = in, .o = o};
	int rc;

	memset(res, 0, sizeof(*res));
	pthread_mutex_init(&w.lock, NULL);
	w.order = xmalloc((in->ns + 1) * sizeof(*w.order));
	for (size_t i = 0; i < in->ns; i++)
		w.order[i] = (uint32_t)i;
	shuffle(w.order, in->ns, o->seed);
	plan_shards(&w);
	run_workers(&w, o->threads ? o->threads : 1);
	rc = atomic_load(&w.failed) ? -EIO : save_index(&w, res);
	if (rc)
		snprintf(err, errlen, "%s", w.err);
	res->shards = w.nplan;
	res->samples = in->ns;
	res->files = in->nm;
	for (size_t k = 0; k < w.nplan; k++)
		index_free(w.plan[k].ix);
	free(w.plan);
	free(w.order);
	pthread_mutex_destroy(&w.lock);
	return rc;
}
