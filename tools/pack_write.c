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
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/util.h"
#include "fetch/format/index.h"
#include "fetch/format/scan.h"
#include "fetch/format/sums.h"
#include "tools/pack_input.h"
#include "tools/pack_tar.h"

/* A work unit: consecutive samples of one shard, about this many bytes
 * (at least one sample), assembled in one buffer and written with one
 * pwrite; also each thread's buffer size. */
#define CHUNK_BYTES ((size_t)4 << 20)

struct shard_plan {
	size_t first, n;     /* into order */
	uint64_t bytes;	     /* the tar's exact size */
	struct index *ix;    /* its index, once written */
	atomic_size_t left;  /* its chunks not yet written */
	bool done;	     /* renamed into place */
};

/* Samples order[first .. first + n) at offset off of shard `shard`; the
 * shard's last chunk also ends the archive. */
struct chunk {
	size_t shard, first, n;
	uint64_t off, bytes;
	bool last;
};

struct writer {
	const struct pack_input *in;
	const struct pack_write_opts *o;
	uint32_t *order; /* sample numbers, shuffled */
	struct shard_plan *plan;
	size_t nplan;
	struct chunk *chunks;
	size_t nchunks;
	atomic_size_t next; /* the next chunk to take */
	int rootfd;	    /* in->root, for openat */
	atomic_bool failed;
	pthread_mutex_t lock; /* guards err */
	char err[600];
};

/* A thread's buffer over the shard file it is filling: bytes go to off
 * (pwrite) when the buffer is full or the chunk ends. */
struct sink {
	int fd;
	const char *path;
	uint64_t off;
	uint8_t *buf; /* CHUNK_BYTES */
	size_t used;
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

static void tmp_path(const struct writer *w, size_t k, char *buf, size_t len)
{
	snprintf(buf, len, "%s/%s-%06zu.tar.tmp.%ld", w->o->out, w->o->prefix,
		 k, (long)getpid());
}

/* Cut every shard into chunks of about CHUNK_BYTES, each knowing where in
 * its shard it goes (the sizes were fixed when the input was listed). */
static void plan_chunks(struct writer *w)
{
	size_t cap = 16;

	w->chunks = xmalloc(cap * sizeof(*w->chunks));
	for (size_t k = 0; k < w->nplan; k++) {
		const struct shard_plan *p = &w->plan[k];
		uint64_t off = 0;
		size_t i = p->first, end = p->first + p->n;
		do { /* an empty shard (more shards than samples) too */
			struct chunk c = {.shard = k, .first = i, .off = off};
			while (i < end && (c.n == 0 ||
					   c.bytes + w->in->s[w->order[i]].bytes <=
						   CHUNK_BYTES)) {
				c.bytes += w->in->s[w->order[i]].bytes;
				c.n++;
				i++;
			}
			c.last = i == end;
			if (c.last)
				c.bytes += 2 * PACK_TAR_BLOCK;
			off += c.bytes;
			if (w->nchunks == cap) {
				cap *= 2;
				w->chunks = xrealloc(w->chunks,
						     cap * sizeof(*w->chunks));
			}
			w->chunks[w->nchunks++] = c;
			atomic_fetch_add(&w->plan[k].left, 1);
		} while (i < end);
	}
}

static int flush_sink(struct writer *w, struct sink *k)
{
	size_t done = 0;

	while (done < k->used) {
		ssize_t n = pwrite(k->fd, k->buf + done, k->used - done,
				   (off_t)(k->off + done));
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			return fail(w, "writing %s: %s", k->path,
				    n < 0 ? strerror(errno) : "no progress");
		done += (size_t)n;
	}
	k->off += k->used;
	k->used = 0;
	return 0;
}

static int put(struct writer *w, struct sink *k, const void *buf, size_t len)
{
	while (len > 0) {
		size_t n = CHUNK_BYTES - k->used < len ? CHUNK_BYTES - k->used
							: len;
		memcpy(k->buf + k->used, buf, n);
		k->used += n;
		buf = (const uint8_t *)buf + n;
		len -= n;
		if (k->used == CHUNK_BYTES && flush_sink(w, k))
			return -1;
	}
	return 0;
}

/* A file's bytes, read straight into the buffer: exactly the size seen
 * when the input was listed. */
static int copy_file(struct writer *w, struct sink *k,
		     const struct pack_member *m)
{
	struct stat st;
	int fd = pack_input_open(w->rootfd, m->path + m->rel, O_RDONLY, &st);
	uint64_t left = m->size;
	int rc = 0;

	/* Opened beneath the root following no symlink, and checked once
	 * open: a file swapped for a link, a FIFO or another file after it
	 * was listed is refused, never read. */
	if (fd < 0)
		return fail(w, "%s: %s", m->path, strerror(-fd));
	if (!S_ISREG(st.st_mode) || (uint64_t)st.st_size != m->size) {
		close(fd);
		return fail(w,
			    "%s: changed since it was listed (now %s, %llu "
			    "bytes)",
			    m->path,
			    S_ISREG(st.st_mode) ? "a file"
						: "not a regular file",
			    (unsigned long long)st.st_size);
	}
	while (rc == 0 && left > 0) {
		if (k->used == CHUNK_BYTES && (rc = flush_sink(w, k)) != 0)
			break;
		size_t room = CHUNK_BYTES - k->used;
		size_t want = left < room ? (size_t)left : room;
		ssize_t n = read(fd, k->buf + k->used, want);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			rc = fail(w, "%s: %s", m->path, strerror(errno));
		else if (n == 0)
			rc = fail(w,
				  "%s: shorter than when listed (changed "
				  "while packing?)",
				  m->path);
		else {
			k->used += (size_t)n;
			left -= (uint64_t)n;
		}
	}
	close(fd);
	return rc;
}

static int put_member(struct writer *w, struct sink *k,
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
	rc = put(w, k, blk, sizeof(blk));
	if (rc == 0)
		rc = m->path ? copy_file(w, k, m)
			     : put(w, k, m->data, (size_t)m->size);
	if (rc == 0 && pad)
		rc = put(w, k, zeros, pad);
	return rc;
}

/* Chunk c's bytes at its place in its shard's temp file. */
static int write_chunk(struct writer *w, const struct chunk *c, uint8_t *buf)
{
	static const uint8_t zeros[2 * PACK_TAR_BLOCK];
	char tmp[PATH_MAX + 32];
	struct sink k = {.path = tmp, .off = c->off, .buf = buf};
	int rc = 0;

	tmp_path(w, c->shard, tmp, sizeof(tmp));
	k.fd = open(tmp, O_WRONLY | O_CLOEXEC);
	if (k.fd < 0)
		return fail(w, "%s: %s", tmp, strerror(errno));
	for (size_t i = c->first; rc == 0 && i < c->first + c->n; i++) {
		const struct pack_sample *s = &w->in->s[w->order[i]];
		for (uint32_t j = 0; rc == 0 && j < s->n; j++)
			rc = put_member(w, &k, &w->in->m[s->first + j]);
		if (atomic_load(&w->failed))
			rc = -1;
	}
	if (rc == 0 && c->last)
		rc = put(w, &k, zeros, sizeof(zeros));
	if (rc == 0)
		rc = flush_sink(w, &k);
	if (rc == 0 && k.off != c->off + c->bytes)
		rc = fail(w,
			  "%s: %llu bytes written, %llu planned (a file "
			  "changed while packing?)",
			  tmp, (unsigned long long)(k.off - c->off),
			  (unsigned long long)c->bytes);
	if (close(k.fd) && rc == 0)
		rc = fail(w, "%s: %s", tmp, strerror(errno));
	return rc;
}

/* Scan and sum bytes of a written shard into its index. */
static int index_bytes(struct writer *w, struct shard_plan *p, const char *path,
		       const uint8_t *data, size_t len)
{
	struct scan *sc = scan_new(p->ix, 0);
	struct sums *su = sums_new();
	int rc = 0;

	if (scan_feed(sc, data, len) || sums_feed(su, data, len) ||
	    scan_finish(sc) || sums_fill(su, p->ix, 0))
		rc = fail(w, "bug: the packer wrote a bad tar %s: %s", path,
			  scan_error(sc));
	scan_free(sc);
	sums_free(su);
	return rc;
}

/* Shard k is written: index it from its bytes on disk (read back from the
 * page cache) and give it its name. */
static int finish_shard(struct writer *w, size_t k)
{
	struct shard_plan *p = &w->plan[k];
	char path[PATH_MAX], tmp[PATH_MAX + 32];
	struct stat st;
	void *map;
	int fd, rc;

	shard_path(w, k, path, sizeof(path));
	tmp_path(w, k, tmp, sizeof(tmp));
	fd = open(tmp, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return fail(w, "%s: %s", tmp, strerror(errno));
	if (fstat(fd, &st) || (uint64_t)st.st_size != p->bytes) {
		close(fd);
		return fail(w, "%s: not the %llu bytes planned", tmp,
			    (unsigned long long)p->bytes);
	}
	map = mmap(NULL, (size_t)p->bytes, PROT_READ, MAP_PRIVATE, fd, 0);
	close(fd);
	if (map == MAP_FAILED)
		return fail(w, "%s: %s", tmp, strerror(errno));
	p->ix = index_new();
	index_add_shard(p->ix, path, p->bytes, "");
	rc = index_bytes(w, p, path, map, (size_t)p->bytes);
	munmap(map, (size_t)p->bytes);
	if (rc == 0 && rename(tmp, path))
		rc = fail(w, "%s: %s", path, strerror(errno));
	p->done = rc == 0;
	return rc;
}

static void *worker(void *arg)
{
	struct writer *w = arg;
	uint8_t *buf = xmalloc(CHUNK_BYTES);

	for (;;) {
		size_t k = atomic_fetch_add(&w->next, 1);
		if (k >= w->nchunks || atomic_load(&w->failed))
			break;
		const struct chunk *c = &w->chunks[k];
		if (write_chunk(w, c, buf))
			break;
		/* The thread that writes a shard's last chunk finishes it. */
		if (atomic_fetch_sub(&w->plan[c->shard].left, 1) == 1 &&
		    finish_shard(w, c->shard))
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

/* Every shard's temp file, empty; the chunks write into it at their
 * offsets. */
static int make_temps(struct writer *w)
{
	char tmp[PATH_MAX + 32];

	for (size_t k = 0; k < w->nplan; k++) {
		tmp_path(w, k, tmp, sizeof(tmp));
		int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC,
			      0644);
		if (fd < 0)
			return fail(w, "%s: %s", tmp, strerror(errno));
		close(fd);
	}
	return 0;
}

/* After a failure: no temp file stays. */
static void remove_temps(struct writer *w)
{
	char tmp[PATH_MAX + 32];

	for (size_t k = 0; k < w->nplan; k++) {
		if (w->plan[k].done)
			continue;
		tmp_path(w, k, tmp, sizeof(tmp));
		unlink(tmp);
	}
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
	plan_chunks(&w);
	w.rootfd = open(in->root, O_PATH | O_DIRECTORY | O_CLOEXEC);
	if (w.rootfd < 0)
		fail(&w, "%s: %s", in->root, strerror(errno));
	else if (make_temps(&w) == 0)
		run_workers(&w, o->threads ? o->threads : 1);
	if (w.rootfd >= 0)
		close(w.rootfd);
	if (atomic_load(&w.failed))
		remove_temps(&w);
	rc = atomic_load(&w.failed) ? -EIO : save_index(&w, res);
	if (rc)
		snprintf(err, errlen, "%s", w.err);
	res->shards = w.nplan;
	res->samples = in->ns;
	res->files = in->nm;
	for (size_t k = 0; k < w.nplan; k++)
		index_free(w.plan[k].ix);
	free(w.plan);
	free(w.chunks);
	free(w.order);
	pthread_mutex_destroy(&w.lock);
	return rc;
}
