/* prepared.c - the prepared-sample tier over a store instance (see
 * prepared.h). */
#include "cache/image/prepared.h"

#include "cache/image/prep.h"
#include "cache/image/prepared_seen.h"
#include "cache/image/resample.h"
#include "cache/store/store.h"
#include "common/log.h"
#include "common/util.h"

/* Lazy commits for the tier (store_set_lazy: any value > 0). */
#define PREPARED_RESCAN_S 1.0
/* Prepared samples waiting for the writer, at most (bytes). */
#define PREPARED_QUEUE_BYTES (64u << 20)
/* First uses between two wake-ups of the writer to append them to the
 * seen file (so that a killed mount loses at most these). */
#define PREPARED_SEEN_BATCH 4096u

#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>
#include <xxhash.h>

/* Written jobs' buffers kept for the next ones, at most: a 150 KB malloc
 * is an mmap whose pages fault in at the copy and whose free is a munmap
 * with a TLB shootdown on every core (perf, issue 47). */
#define PREPARED_SPARES 16

/* A prepared sample waiting to be written. */
struct job {
	struct job *next;
	char etag[64];
	size_t n, cap; /* bytes in data; its room */
	uint8_t data[];
};

struct prepared {
	struct store *st;
	char url[512];	/* the recipe, the key's url part */
	uint64_t url_h; /* its hash: the seed of the seen keys */
	struct prepared_seen *seen;
	/* atomic: */
	uint64_t hits, misses, writes, corrupt, skipped;
	uint64_t skipped_first, skipped_seen_full, firsts;
	uint64_t writer_ns; /* wall time in save(), the writer's */
	pthread_t writer;
	pthread_mutex_t lock; /* guards the queue and stop */
	pthread_cond_t cv;    /* a job queued, or stop */
	struct job *head, **tail;
	struct job *spare; /* buffers to reuse, nspare of them */
	size_t nspare;
	size_t queued, queued_bytes;
	bool stop, flush; /* flush: seen keys to append */
};

static void save(struct prepared *p, const char *etag, const uint8_t *buf,
		 size_t n);
static void *writer_main(void *arg);

int prepared_applies(const struct transform_opts *o)
{
	return o->size && (o->format == TF_JPEG || o->format == TF_PPM);
}

/* The recipe: what the prepared bytes depend on besides the sample. */
static void recipe(const struct transform_opts *o, char *buf, size_t len)
{
	char libs[256];
	transform_versions(libs, sizeof(libs));
	snprintf(buf, len,
		 "echofs-prepared://v1/s%u-c%u%s-mp%" PRIu64 "-r%d-%016" PRIx64,
		 o->size, o->crop, transform_prepared_is_cut(o) ? "-cut" : "",
		 o->max_pixels, RESAMPLE_VERSION,
		 hash64(libs, strlen(libs), 0));
}

int prepared_open(const char *cache_dir, uint64_t cap,
		  const struct transform_opts *opts, struct prepared **out,
		  char *err, size_t errlen)
{
	char dir[4096], serr[256];
	struct prepared *p;

	*out = NULL;
	if (snprintf(dir, sizeof(dir), "%s/prepared", cache_dir) >=
	    (int)sizeof(dir)) {
		snprintf(err, errlen, "cache_dir too long");
		return -ENAMETOOLONG;
	}
	p = xcalloc(1, sizeof(*p));
	int r = store_open(dir, cap, &p->st, serr, sizeof(serr));
	if (r) {
		snprintf(err, errlen, "%s", serr);
		free(p);
		return r;
	}
	/* Another mount writing the same sample: skip ours, never wait. */
	store_set_wait(p->st, 0);
	/* Many small entries, each checked at its first read: commit without
	 * fsync (store.h). */
	store_set_lazy(p->st, PREPARED_RESCAN_S);
	recipe(opts, p->url, sizeof(p->url));
	p->url_h = hash64(p->url, strlen(p->url), 0);
	r = prepared_seen_open(dir, &p->seen, serr, sizeof(serr));
	if (r) {
		snprintf(err, errlen, "%s", serr);
		store_close(p->st);
		free(p);
		return r;
	}
	pthread_mutex_init(&p->lock, NULL);
	pthread_cond_init(&p->cv, NULL);
	p->tail = &p->head;
	r = pthread_create(&p->writer, NULL, writer_main, p);
	if (r) {
		snprintf(err, errlen, "cannot start the writer: %s",
			 strerror(r));
		pthread_cond_destroy(&p->cv);
		pthread_mutex_destroy(&p->lock);
		prepared_seen_close(p->seen);
		store_close(p->st);
		free(p);
		return -r;
	}
	*out = p;
	return 0;
}

void prepared_close(struct prepared *p)
{
	struct job *j, *next;

	if (!p)
		return;
	/* What is queued is written here, at this thread's priority (the
	 * writer's may get no CPU on a busy machine); the writer finishes
	 * the one it holds. */
	pthread_mutex_lock(&p->lock);
	p->stop = true;
	j = p->head;
	p->head = NULL;
	p->tail = &p->head;
	pthread_cond_signal(&p->cv);
	pthread_mutex_unlock(&p->lock);
	for (; j; j = next) {
		next = j->next;
		save(p, j->etag, j->data, j->n);
		free(j);
	}
	pthread_join(p->writer, NULL);
	for (j = p->spare; j; j = next) {
		next = j->next;
		free(j);
	}
	prepared_seen_close(p->seen); /* appends what is pending */
	pthread_cond_destroy(&p->cv);
	pthread_mutex_destroy(&p->lock);
	store_close(p->st);
	free(p);
}

static void etag_of(const void *in, size_t len, char *etag, size_t n)
{
	snprintf(etag, n, "%016" PRIx64 "-%zu", (uint64_t)XXH3_64bits(in, len),
		 len);
}

/* The entry's bytes into a new buffer: 1 read and intact, 0 absent, -1
 * corrupt (dropped, with one rate-limited line naming the sample `key`,
 * or its encoded bytes' etag when the caller did not say, and what was
 * wrong). */
static int lookup(struct prepared *p, const char *key, const char *etag,
		  size_t n, uint8_t **out)
{
	struct store_entry *e = store_get(p->st, p->url, etag, n);
	char what[512];
	if (!e)
		return 0;
	uint8_t *b = malloc(n);
	ssize_t r = b ? store_pread(e, b, n, 0) : -ENOMEM;
	if (r == (ssize_t)n) {
		store_put(e);
		*out = b;
		return 1;
	}
	free(b);
	if (r == -EBADMSG || r >= 0) {
		snprintf(what, sizeof(what),
			 "prepared sample %s (encoded bytes %s): %s; dropped, "
			 "made again",
			 key ? key : "?", etag,
			 r == -EBADMSG ? "a block failed its checksum"
				       : "the file is shorter than its entry");
		store_drop_said(e, what);
		store_put(e);
		return -1;
	}
	store_put(e);
	return 0;
}

/* Writes buf as the entry; failures only logged (the tier is a cache). */
static void save_timed(struct prepared *p, const char *etag, const uint8_t *buf,
		       size_t n);

static void save(struct prepared *p, const char *etag, const uint8_t *buf,
		 size_t n)
{
	double t0 = now_mono();
	save_timed(p, etag, buf, n);
	uint64_t ns = (uint64_t)((now_mono() - t0) * 1e9);
	__atomic_add_fetch(&p->writer_ns, ns, __ATOMIC_RELAXED);
}

static void save_timed(struct prepared *p, const char *etag, const uint8_t *buf,
		       size_t n)
{
	struct store_writer *w;
	struct store_entry *e;
	int r = store_begin(p->st, p->url, etag, n, &w);
	if (r) {
		if (r != -EEXIST && r != -EBUSY)
			log_debug("prepared sample not kept: %s", strerror(-r));
		return;
	}
	r = store_write(w, buf, n);
	if (r) {
		store_abort(w);
		log_debug("prepared sample not kept: %s", strerror(-r));
		return;
	}
	if (store_commit(w, &e) == 0) {
		store_put(e);
		__atomic_add_fetch(&p->writes, 1, __ATOMIC_RELAXED);
	}
}

/* The writer: one thread at the lowest nice value (19), so that the tier
 * is written mostly from time the decode workers and the readers leave
 * idle and a first pass costs about what it costs without the tier (issue
 * 30: writing each sample in the pass took 24-29% more CPU, on cores the
 * decode already filled). Not SCHED_IDLE: it measured no better (fill
 * 0.85 and 0.72 of R1, against 0.96 and 0.77 at nice 19, in one script),
 * and a writer starved while it holds the store's lock or a directory's
 * (create, rename) would stall the normal threads' lookups; at nice 19 it
 * still gets a little CPU and lets go. Where the nice value cannot be set
 * it runs at the process's. */
static void *writer_main(void *arg)
{
	struct prepared *p = arg;

	if (setpriority(PRIO_PROCESS, (id_t)gettid(), 19) != 0)
		log_debug("prepared writer at normal priority: %s",
			  strerror(errno));
	pthread_mutex_lock(&p->lock);
	for (;;) {
		while (!p->head && !p->stop && !p->flush)
			pthread_cond_wait(&p->cv, &p->lock);
		if (p->flush) {
			p->flush = false;
			pthread_mutex_unlock(&p->lock);
			if (prepared_seen_flush(p->seen) != 0)
				log_debug("prepared: seen samples not kept");
			pthread_mutex_lock(&p->lock);
			continue;
		}
		struct job *j = p->head;
		if (!j)
			break;
		if (!(p->head = j->next))
			p->tail = &p->head;
		pthread_mutex_unlock(&p->lock);
		save(p, j->etag, j->data, j->n);
		pthread_mutex_lock(&p->lock);
		p->queued--;
		p->queued_bytes -= j->n;
		if (p->nspare < PREPARED_SPARES) {
			j->next = p->spare;
			p->spare = j;
			p->nspare++;
		} else {
			free(j);
		}
	}
	pthread_mutex_unlock(&p->lock);
	return NULL;
}

/* Queues buf (copied) for the writer; a full queue skips it (counted):
 * the sample is decoded again when next read, and queued again. */
/* p->lock held. A job with room for n bytes: a spare one (its pages
 * already mapped) or a new one; NULL when out of memory. */
static struct job *job_take(struct prepared *p, size_t n)
{
	struct job *j = p->spare;
	if (j && j->cap >= n) {
		p->spare = j->next;
		p->nspare--;
		return j;
	}
	if ((j = malloc(sizeof(*j) + n)))
		j->cap = n;
	return j;
}

static void queue_save(struct prepared *p, const char *etag, const uint8_t *buf,
		       size_t n)
{
	struct job *j = NULL;

	pthread_mutex_lock(&p->lock);
	if (!p->stop && p->queued_bytes + n <= PREPARED_QUEUE_BYTES &&
	    (j = job_take(p, n))) {
		p->queued++;
		p->queued_bytes += n;
	}
	pthread_mutex_unlock(&p->lock);
	if (!j) {
		__atomic_add_fetch(&p->skipped, 1, __ATOMIC_RELAXED);
		return;
	}
	/* Counted in queued_bytes before the copy: the cap holds. */
	j->next = NULL;
	snprintf(j->etag, sizeof(j->etag), "%s", etag);
	j->n = n;
	memcpy(j->data, buf, n);
	pthread_mutex_lock(&p->lock);
	*p->tail = j;
	p->tail = &j->next;
	pthread_cond_signal(&p->cv);
	pthread_mutex_unlock(&p->lock);
}

/* Whether the entry of the sample whose encoded bytes have etag is worth
 * writing now: at its second use (in this mount or since an earlier one
 * on the cache_dir), never its first, so that a pass that reads each
 * sample once writes nothing (issue 47). A first use is counted, and
 * every PREPARED_SEEN_BATCH-th wakes the writer to append the batch to
 * the seen file. */
static bool worth_writing(struct prepared *p, const char *etag)
{
	uint64_t key = hash64(etag, strlen(etag), p->url_h);

	switch (prepared_seen_mark(p->seen, key)) {
	case PREPARED_SEEN_AGAIN:
		return true;
	case PREPARED_SEEN_FULL:
		__atomic_add_fetch(&p->skipped_seen_full, 1, __ATOMIC_RELAXED);
		return false;
	case PREPARED_SEEN_FIRST:
		break;
	}
	__atomic_add_fetch(&p->skipped_first, 1, __ATOMIC_RELAXED);
	if (__atomic_add_fetch(&p->firsts, 1, __ATOMIC_RELAXED) %
		    PREPARED_SEEN_BATCH ==
	    0) {
		pthread_mutex_lock(&p->lock);
		p->flush = true;
		pthread_cond_signal(&p->cv);
		pthread_mutex_unlock(&p->lock);
	}
	return false;
}

/* prepared_make_named, or (skip: the caller can make its output without
 * the prepared buffer) 0 at once, before any decode, for a miss whose
 * entry is not worth writing. Returns 1 with *out set, 0, or -errno. */
static int make(struct prepared *p, struct prep *prep, const char *key,
		const void *in, size_t len, bool skip, uint8_t **out,
		size_t *outlen, char *why, size_t whylen)
{
	char etag[64];
	ssize_t n = prep_prepared_len(prep, in, len);
	int r;

	if (n < 0) { /* unusable header: prep_prepare says why */
		r = prep_prepare(prep, in, len, out, outlen, why, whylen);
		return r ? r : 1;
	}
	etag_of(in, len, etag, sizeof(etag));
	int hit = lookup(p, key, etag, (size_t)n, out);
	if (hit > 0) {
		__atomic_add_fetch(&p->hits, 1, __ATOMIC_RELAXED);
		*outlen = (size_t)n;
		return 1;
	}
	if (hit < 0) /* logged with the drop */
		__atomic_add_fetch(&p->corrupt, 1, __ATOMIC_RELAXED);
	__atomic_add_fetch(&p->misses, 1, __ATOMIC_RELAXED);
	bool keep = hit < 0 || worth_writing(p, etag);
	if (!keep && skip)
		return 0;
	r = prep_prepare(prep, in, len, out, outlen, why, whylen);
	if (r)
		return r;
	if (keep && *outlen == (size_t)n)
		queue_save(p, etag, *out, *outlen);
	return 1;
}

int prepared_make_named(struct prepared *p, struct prep *prep, const char *key,
			const void *in, size_t len, uint8_t **out,
			size_t *outlen, char *why, size_t whylen)
{
	int r = make(p, prep, key, in, len, false, out, outlen, why, whylen);
	return r < 0 ? r : 0;
}

int prepared_take_named(struct prepared *p, struct prep *prep, const char *key,
			const void *in, size_t len, uint8_t **out,
			size_t *outlen, char *why, size_t whylen)
{
	return make(p, prep, key, in, len, true, out, outlen, why, whylen);
}

int prepared_make(struct prepared *p, struct prep *prep, const void *in,
		  size_t len, uint8_t **out, size_t *outlen, char *why,
		  size_t whylen)
{
	return prepared_make_named(p, prep, NULL, in, len, out, outlen, why,
				   whylen);
}

void prepared_get_stats(struct prepared *p, struct prepared_stats *out)
{
	struct store_stats s;

	memset(out, 0, sizeof(*out));
	if (!p)
		return;
	out->hits = __atomic_load_n(&p->hits, __ATOMIC_RELAXED);
	out->misses = __atomic_load_n(&p->misses, __ATOMIC_RELAXED);
	out->writes = __atomic_load_n(&p->writes, __ATOMIC_RELAXED);
	out->corrupt = __atomic_load_n(&p->corrupt, __ATOMIC_RELAXED);
	out->skipped = __atomic_load_n(&p->skipped, __ATOMIC_RELAXED);
	out->skipped_first =
		__atomic_load_n(&p->skipped_first, __ATOMIC_RELAXED);
	out->skipped_seen_full =
		__atomic_load_n(&p->skipped_seen_full, __ATOMIC_RELAXED);
	out->writer_s =
		(double)__atomic_load_n(&p->writer_ns, __ATOMIC_RELAXED) / 1e9;
	out->seen = prepared_seen_count(p->seen);
	pthread_mutex_lock(&p->lock);
	out->queued = p->queued;
	pthread_mutex_unlock(&p->lock);
	store_get_stats(p->st, &s);
	out->bytes = s.bytes;
	out->entries = s.entries;
	out->evictions = s.evictions;
	out->write_errors = s.write_errors;
}
