/* test_bindings_model.c - echo-mount bindings (fs/bindings.c, and
 * fs/visits.c for the samples layout) against a reference model of what
 * may be served, under random concurrent use as FUSE drives them.
 *
 * A real echo pool (tar shards from tests/fault_server.py, http, shard
 * readers, a wrapped dataset) behind bindings_start, in both layouts
 * (classes: a tree made by hand, one file per sample; samples: the
 * samples layout's own tree, whole-sample visits) and both echo modes
 * (fixed and adaptive, E = 4: passes turn many times). NTHREADS threads
 * each play the kernel for one reader: the async lookup FUSE uses
 * (bindings_lookup_async, waiting for its done callback when parked), and
 * open, read in random pieces (sometimes with the RELEASE, and the FORGET,
 * arriving before the READ's reply is done), getattr, getxattr
 * (bindings_source), release and forget of what that thread holds, on a
 * few hot paths or keys; bindings expire after EXPIRE_S, so that opens of
 * expired and spent bindings happen all the time. Every key's members name
 * their key, extension and label in their first bytes ("kNN jpg L"), so
 * the bytes say which sample they are.
 *
 * The model (fs/bindings.h, "The rule"; fs/visits.h): a node id serves
 * one sample, with one size, gen and source, from the lookup that made it
 * until it is forgotten, whichever thread looks at it (a record per node
 * id, kept for the whole run: node ids are never reused); an OPEN that
 * follows a lookup answering its node id (as the kernel's does: a thread
 * opens only an inode it looked up and has not opened since) never fails
 * within expire_s of that lookup; every byte read is the source sample's
 * byte at that offset; a path serves a sample of its class (its label; in
 * the samples layout, the member of the file's extension). Samples layout:
 * the files one reader looks up for one key, one after the other, serve
 * members of one substitute key until it looks up a file of another key.
 * At the end (every thread released and forgot everything): no binding is
 * left, and the pool counted one serve per node id opened (classes) or
 * per reader's run of a key with an opened file (samples: a visit is one
 * take, however many of its files are opened).
 *
 * Bugs injected into fs/ by hand (never committed) that it catches, each
 * in every run tried (the tests named fail):
 * - bindings_open fails a spent or expired binding with -ESTALE (all);
 * - bind_sample rebinds a spent or expired binding's node id to the new
 *   sample: "ino 1000 now size 1694 gen 3, was size 1500 gen 1" (all);
 * - visits_take_async ignores the reader, one visit for all (samples_*);
 * - bindings_release drops the sample at the last release although the
 *   kernel holds the node id: its OPEN then fails (all);
 * - bindings_open of an expired binding does not commit: the pool counts
 *   fewer serves than the model (all);
 * - a visit's other member read at the wrong offset (samples_*);
 * - (a real one, fixed in the same commit) a lookup returns the reader's
 *   binding of a file from an earlier visit of its key: mixed substitutes
 *   (samples_*, a_reader_back_at_a_key_reads_one_substitute).
 * Under tools/dev/tsan.sh: bindings_getattr's counter update moved out of
 * the lock (3 data race reports).
 * bindings_forget untaking an opened binding is harmless (the pool keeps
 * a committed take's serve), and a path that never moves on after its
 * binding is spent is left to test_bindings.c: which opens of other
 * readers overlap cannot be told apart from a thread here.
 *
 * ECHOFS_MODEL_SEED=N replays a seed's choices (the interleaving still
 * varies); a failure prints the seed. */
#include "fs/bindings.h"

#include "cache/dataset_parts.h"
#include "cache/store/shards.h"
#include "common/util.h"
#include "fetch/format/index.h"
#include "fixtures.h"
#include "fs/namespace.h"
#include "fs/visits.h"

#include <criterion/criterion.h>
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define NSHARDS 2
#define PER_SHARD 8
#define NKEYS (NSHARDS * PER_SHARD)
#define NCLS 2 /* labels '0' and '1' */
#define NHOT 4 /* the paths (classes) or keys (samples) used */
#define NTHREADS 8
#define OPS 2500      /* per thread, at most */
#define RUN_S 3.0     /* and at most this long (TSan is slower), */
#define MIN_WORK 25   /* unless a thread opened and read fewer, */
#define HARD_S 15.0   /* which it may do up to this long (a loaded host) */
#define EXPIRE_S 0.02 /* unopened bindings expire at the next reap */
#define FIRST_INO 1000
#define MAX_INOS (NTHREADS * OPS + 64)
#define HELD_MAX 16
#define HANDLES_MAX 3

static char tdir[FX_TDIR_MAX], root[FX_PATH_MAX], cdir[FX_PATH_MAX];
static uint8_t *shard_data[NSHARDS];
static size_t shard_len[NSHARDS];
static uint64_t jpg_off[NKEYS], jpg_len[NKEYS], txt_off[NKEYS], txt_len[NKEYS];
static struct fx_server srv;
static struct http *h;

/* The stack under test (open_stack, close_stack). */
static struct index *ix;
static struct shards *sh;
static struct dataset *ds;
static struct namespace *sns; /* samples layout: the tree */
static struct ns_file cfiles[NKEYS];
static struct namespace cns = {.files = cfiles, .nfiles = NKEYS};
static const struct namespace *ns; /* the layout's: &cns or sns */
static struct bindings *b;
static uint32_t jpg_file[NKEYS], txt_file[NKEYS]; /* samples layout */
static uint32_t file_key[2 * NKEYS];		  /* per file: its key */
static char file_ext[2 * NKEYS];		  /* 'j' or 't' */

static char label_of(int k)
{
	return (char)('0' + k % NCLS);
}

static void make_shards(void)
{
	for (int s = 0; s < NSHARDS; s++) {
		struct tarw t = {0};
		for (int j = 0; j < PER_SHARD; j++) {
			int k = s * PER_SHARD + j;
			char name[32], txt[16];
			uint8_t jpg[4096];
			jpg_len[k] = 1500 + 97 * (uint64_t)k;
			for (size_t i = 0; i < sizeof(jpg); i++)
				jpg[i] = (uint8_t)(i * 7 + (size_t)k * 13);
			snprintf((char *)jpg, 16, "k%02d jpg %c", k,
				 label_of(k));
			snprintf(name, sizeof(name), "k%02d.jpg", k);
			jpg_off[k] = tarw_add(&t, name, jpg, jpg_len[k]);
			snprintf(txt, sizeof(txt), "k%02d txt %c", k,
				 label_of(k));
			txt_len[k] = strlen(txt);
			snprintf(name, sizeof(name), "k%02d.txt", k);
			txt_off[k] = tarw_add(&t, name, txt, txt_len[k]);
		}
		fx_shard_finish(&t, root, s, &shard_data[s], &shard_len[s]);
	}
}

/* Each key's jpg a sample (label k % NCLS), every member listed. */
static struct index *make_index(void)
{
	struct index *x = fx_shards_index(srv.port, shard_len, NSHARDS);

	for (int k = 0; k < NKEYS; k++) {
		uint32_t s = (uint32_t)(k / PER_SHARD);
		char key[8], label[2] = {label_of(k), 0};
		snprintf(key, sizeof(key), "k%02d", k);
		cr_assert_eq(index_add_sample(x, s, jpg_off[k], jpg_len[k],
					      label, key, "jpg"),
			     0);
		cr_assert_eq(index_add_member(x, s, jpg_off[k], jpg_len[k], key,
					      "jpg"),
			     0);
		cr_assert_eq(index_add_member(x, s, txt_off[k], txt_len[k], key,
					      "txt"),
			     0);
	}
	x->has_members = true;
	return x;
}

static void setup(void)
{
	fx_tree_make("bmodel", tdir, root, cdir);
	make_shards();
	h = fx_http_open(8, 30);
}

static void close_stack(void)
{
	bindings_free(b); /* frees the visits too */
	b = NULL;
	dataset_cancel(ds);
	dataset_echo_end(ds);
	ns_free(sns);
	sns = NULL;
	dataset_close(ds);
	ds = NULL;
	shards_free(sh);
	sh = NULL;
	index_free(ix);
	ix = NULL;
	fx_server_stop(&srv);
}

static void teardown(void)
{
	close_stack();
	fx_shards_teardown(&srv, &h, shard_data, NSHARDS, tdir);
}

TestSuite(bindings_model, .init = setup, .fini = teardown, .timeout = 120);

/* ---- the inval hook ---- */

static _Atomic uint64_t inval_calls, inval_bad;
static _Atomic uint32_t inval_of[2 * NKEYS];

static void inval_hook(void *ud, uint32_t file)
{
	(void)ud;
	atomic_fetch_add_explicit(&inval_calls, 1, memory_order_relaxed);
	if (file >= ns->nfiles)
		atomic_fetch_add_explicit(&inval_bad, 1, memory_order_relaxed);
	else
		atomic_fetch_add_explicit(&inval_of[file], 1,
					  memory_order_relaxed);
}

/* ---- the stack ---- */

/* The samples tree's files by name: key and extension. */
static void map_samples_files(void)
{
	cr_assert_eq(sns->nfiles, 2 * NKEYS);
	for (uint32_t f = 0; f < sns->nfiles; f++) {
		int k = -1;
		char ext[8] = "";
		cr_assert_eq(sscanf(sns->files[f].name, "k%d.%7s", &k, ext), 2,
			     "%s", sns->files[f].name);
		cr_assert(k >= 0 && k < NKEYS);
		cr_assert(strcmp(ext, "jpg") == 0 || strcmp(ext, "txt") == 0);
		file_key[f] = (uint32_t)k;
		file_ext[f] = ext[0];
		*(ext[0] == 'j' ? &jpg_file[k] : &txt_file[k]) = f;
	}
}

/* Server, index, shard readers, dataset, the layout's tree, its echo pool
 * (echo 4 in mode), and the bindings over them, as fs/main.c makes them. */
static void open_stack(int samples, enum dataset_echo_mode mode)
{
	char err[256] = "";
	int r;

	fx_server_start(&srv, root, tdir, NULL);
	ix = make_index();
	cr_assert_eq(shards_open(ix, h, NULL, NULL, &sh), 0);
	ds = dataset_wrap(ix, sh);
	cr_assert_not_null(ds);
	if (samples) {
		struct visits *v = NULL;
		cr_assert_eq(ns_open_samples(ds, &sns), 0);
		ns = sns;
		map_samples_files();
		r = visits_start(ds, ns, &v, err, sizeof(err));
		cr_assert_eq(r, 0, "visits_start: %s (%s)", strerror(-r), err);
		r = bindings_start(ds, ns, FIRST_INO, EXPIRE_S, NULL, NULL, &b);
		cr_assert_eq(r, 0);
		bindings_set_visits(b, v);
	} else {
		uint32_t cls[NKEYS];
		for (uint32_t k = 0; k < NKEYS; k++) {
			cls[k] = k % NCLS;
			cfiles[k] = (struct ns_file){"f", k, cls[k]};
			file_key[k] = k;
			file_ext[k] = 'j';
		}
		ns = &cns;
		r = dataset_echo_start(ds, cls, NCLS, err, sizeof(err));
		cr_assert_eq(r, 0, "dataset_echo_start: %s", err);
		r = bindings_start(ds, ns, FIRST_INO, EXPIRE_S, NULL, NULL, &b);
		cr_assert_eq(r, 0);
	}
	cr_assert_eq(dataset_echo_set(ds, 4, mode), 0);
	atomic_store(&inval_calls, 0);
	atomic_store(&inval_bad, 0);
	for (uint32_t f = 0; f < 2 * NKEYS; f++)
		atomic_store(&inval_of[f], 0);
	bindings_set_inval(b, inval_hook, NULL);
}

static struct dataset_echo_stats echo_stats(void)
{
	struct dataset_stats st;

	dataset_get_stats(ds, &st);
	return st.echo;
}

/* The bytes of dataset number n (a sample, or a member from
 * ix->nsamples on) in the shards, and its length. */
static const uint8_t *source_bytes(uint32_t n, size_t *len)
{
	const struct index_sample *e;

	if (n < ix->nsamples)
		e = &ix->samples[n];
	else if (n - ix->nsamples < ix->nmembers)
		e = &ix->members[n - ix->nsamples];
	else
		return NULL;
	*len = e->size;
	return shard_data[e->shard] + e->offset;
}

/* ---- the model: one record per node id, for the whole run ---- */

/* What a node id was first seen to serve (size, gen, source, packed:
 * sig), the reader's run that made it (samples layout) and whether it was
 * opened. Relaxed atomics: no happens-before between the threads that
 * ThreadSanitizer would then miss in the code under test. */
struct ino_rec {
	_Atomic uint64_t sig;
	_Atomic uint32_t run, file;
	_Atomic int opened;
};

static struct ino_rec *inos;
static _Atomic int stop_all;
static unsigned base_seed;

struct held {
	uint64_t ino, nlookup, size, gen;
	uint32_t file, src;
	int opens; /* this thread's handles */
	int fresh; /* its lookups not yet followed by its open: the kernel
		    * opens an inode only right after a lookup answered it */
	double looked_at; /* this thread's last lookup that answered ino */
};

struct handle {
	struct binding *h;
	uint64_t ino;
};

/* One thread: a reader, and the kernel's view of what it holds. */
struct worker {
	pthread_t t;
	int id;
	uint64_t stale_late; /* ESTALE for opens past expire_s: allowed */
	unsigned seed;
	double until;
	struct held held[HELD_MAX];
	int nheld;
	struct handle hd[HANDLES_MAX];
	int nhd;
	/* the parked lookup's answer */
	pthread_mutex_t wm;
	pthread_cond_t wc;
	int wdone, werr;
	struct binding_attr wattr;
	/* samples layout: the run of lookups of one key */
	int key, run_left, run_sub;
	uint32_t run;
	uint64_t run_ino; /* the node id that set run_sub */
	uint64_t lookups, opens, reads, bytes, getattrs, sources, releases,
		forgets, pinned, runs;
	int failed;
	char err[512];
};

__attribute__((format(printf, 2, 3))) static void fail(struct worker *w,
						       const char *fmt, ...)
{
	va_list ap;

	if (w->failed)
		return;
	va_start(ap, fmt);
	vsnprintf(w->err, sizeof(w->err), fmt, ap);
	va_end(ap);
	w->failed = 1;
	atomic_store_explicit(&stop_all, 1, memory_order_relaxed);
}

static uint32_t rnd(struct worker *w, uint32_t n)
{
	return n ? (uint32_t)rand_r(&w->seed) % n : 0;
}

/* Node id ino serves (size, gen, src): the same as whenever anyone saw
 * it before. 0, or -1 (failed). */
static int check_ino(struct worker *w, uint64_t ino, uint64_t size,
		     uint64_t gen, uint32_t src, const char *what)
{
	uint64_t sig, was = 0;
	struct ino_rec *r;

	if (ino < FIRST_INO || ino - FIRST_INO >= MAX_INOS || size >= 1 << 20 ||
	    gen >= 1 << 23 || src >= 1 << 20) {
		fail(w,
		     "%s: ino %" PRIu64 " size %" PRIu64 " gen %" PRIu64
		     " src %u out of range",
		     what, ino, size, gen, src);
		return -1;
	}
	sig = 1ULL << 63 | gen << 40 | size << 20 | src;
	r = &inos[ino - FIRST_INO];
	if (atomic_compare_exchange_strong_explicit(&r->sig, &was, sig,
						    memory_order_relaxed,
						    memory_order_relaxed) ||
	    was == sig)
		return 0;
	fail(w,
	     "%s: ino %" PRIu64 " changed: size %" PRIu64 " gen %" PRIu64
	     " src %" PRIu64 ", was size %" PRIu64 " gen %" PRIu64
	     " src %" PRIu64,
	     what, ino, size, gen, (uint64_t)src, was >> 20 & 0xFFFFF,
	     was >> 40 & 0x7FFFFF, was & 0xFFFFF);
	return -1;
}

static struct held *find_held(struct worker *w, uint64_t ino)
{
	for (int i = 0; i < w->nheld; i++)
		if (w->held[i].ino == ino)
			return &w->held[i];
	return NULL;
}

/* ---- what a path may serve ---- */

static uint32_t run_of(uint64_t ino)
{
	return atomic_load_explicit(&inos[ino - FIRST_INO].run,
				    memory_order_relaxed);
}

/* Source src, bound to file: a sample of the file's label (classes: its
 * class) and, in the samples layout, the member of the file's extension,
 * of the run's one substitute key; size is the source's. 0, or -1. */
static int check_source(struct worker *w, uint32_t file, uint64_t ino,
			uint32_t src, uint64_t size)
{
	size_t len = 0;
	const uint8_t *p = source_bytes(src, &len);
	char label = label_of((int)file_key[file]);
	int sub;

	if (!p || len < 9 || p[0] != 'k') {
		fail(w, "file %u: source %u is no member", file, src);
		return -1;
	}
	if (size != len) {
		fail(w, "file %u: size %" PRIu64 ", source %u has %zu", file,
		     size, src, len);
		return -1;
	}
	if (p[4] != (uint8_t)file_ext[file] || p[8] != (uint8_t)label) {
		fail(w, "file %u (%c, label %c): source %u is \"%.9s\"", file,
		     file_ext[file], label, src, (const char *)p);
		return -1;
	}
	if (ns != sns)
		return 0;
	sub = (p[1] - '0') * 10 + (p[2] - '0');
	if (w->run_sub < 0) {
		w->run_sub = sub;
		w->run_ino = ino;
	} else if (w->run_sub != sub) {
		fail(w,
		     "reader %d, run %u of k%02d: file %u (%c, ino %" PRIu64
		     ", bound in run %u) serves k%02d, ino %" PRIu64
		     " (bound in run %u) of the run k%02d",
		     w->id + 1, w->run, w->key, file, file_ext[file], ino,
		     run_of(ino), sub, w->run_ino, run_of(w->run_ino),
		     w->run_sub);
		return -1;
	}
	return 0;
}

/* ---- the kernel's requests ---- */

static void lookup_done(void *ud, int err, const struct binding_attr *attr)
{
	struct worker *w = ud;

	pthread_mutex_lock(&w->wm);
	w->werr = err;
	if (attr)
		w->wattr = *attr;
	w->wdone = 1;
	pthread_cond_signal(&w->wc);
	pthread_mutex_unlock(&w->wm);
}

/* LOOKUP as fs/ops.c sends it: async, answered now or by the callback. */
static int lookup(struct worker *w, uint32_t file, struct binding_attr *a)
{
	int r;

	pthread_mutex_lock(&w->wm);
	w->wdone = 0;
	pthread_mutex_unlock(&w->wm);
	r = bindings_lookup_async(b, file, (uint32_t)w->id + 1, w, lookup_done,
				  w, a);
	if (r != -EINPROGRESS)
		return r;
	pthread_mutex_lock(&w->wm);
	while (!w->wdone)
		pthread_cond_wait(&w->wc, &w->wm);
	r = w->werr;
	if (r == 0)
		*a = w->wattr;
	pthread_mutex_unlock(&w->wm);
	return r;
}

static void forget(struct worker *w, struct held *x, uint64_t n)
{
	bindings_forget(b, x->ino, n);
	w->forgets++;
	x->nlookup -= n;
	if (x->nlookup == 0)
		*x = w->held[--w->nheld];
}

/* Make room in the held table: forget a node id nothing is open on. */
static void make_room(struct worker *w)
{
	while (w->nheld >= HELD_MAX) {
		struct held *x = &w->held[rnd(w, (uint32_t)w->nheld)];
		if (x->opens == 0)
			forget(w, x, x->nlookup);
	}
}

static void op_lookup(struct worker *w, uint32_t file)
{
	struct binding_attr a;
	struct held *x;
	uint32_t src = UINT32_MAX;
	int r;

	make_room(w);
	r = lookup(w, file, &a);
	w->lookups++;
	if (r) {
		fail(w, "lookup of file %u: %s", file, strerror(-r));
		return;
	}
	x = find_held(w, a.ino);
	if (x) {
		if (x->size != a.size || x->gen != a.gen || x->file != file)
			fail(w,
			     "lookup of file %u: ino %" PRIu64
			     " now size %" PRIu64 " gen %" PRIu64
			     ", was file %u size %" PRIu64 " gen %" PRIu64,
			     file, a.ino, a.size, a.gen, x->file, x->size,
			     x->gen);
		x->nlookup++;
		x->fresh++;
		x->looked_at = now_mono();
		IGNORE_RESULT(check_source(w, file, a.ino, x->src, x->size));
		return;
	}
	r = bindings_source(b, a.ino, &src);
	if (r) {
		fail(w, "source of ino %" PRIu64 " just looked up: %s", a.ino,
		     strerror(-r));
		bindings_forget(b, a.ino, 1);
		return;
	}
	x = &w->held[w->nheld++];
	*x = (struct held){.ino = a.ino,
			   .nlookup = 1,
			   .size = a.size,
			   .gen = a.gen,
			   .file = file,
			   .src = src,
			   .fresh = 1,
			   .looked_at = now_mono()};
	if (check_ino(w, a.ino, a.size, a.gen, src, "lookup") == 0) {
		uint32_t was = 0;
		atomic_compare_exchange_strong_explicit(
			&inos[a.ino - FIRST_INO].run, &was, w->run,
			memory_order_relaxed, memory_order_relaxed);
		atomic_store_explicit(&inos[a.ino - FIRST_INO].file, file,
				      memory_order_relaxed);
		IGNORE_RESULT(check_source(w, file, a.ino, src, a.size));
	}
}

static void op_open(struct worker *w)
{
	struct held *x;
	struct binding *hb = NULL;
	int r;

	if (w->nheld == 0 || w->nhd == HANDLES_MAX)
		return;
	x = &w->held[rnd(w, (uint32_t)w->nheld)];
	if (x->fresh == 0)
		return; /* the kernel would look the path up first */
	x->fresh--;
	r = bindings_open(b, x->ino, &hb);
	w->opens++;
	/* The rule: an OPEN within expire_s of a lookup that answered the
	 * inode finds its sample. Later (the kernel opens right after its
	 * lookup; this model opens any inode it holds) the sample may have
	 * been given back, and ESTALE makes the kernel look the path up. */
	if (r == -ESTALE && now_mono() - x->looked_at > EXPIRE_S) {
		w->stale_late++;
		return;
	}
	if (r != 0 || !hb) {
		fail(w,
		     "open of ino %" PRIu64 " (file %u), held %" PRIu64
		     " times: %d (%s)",
		     x->ino, x->file, x->nlookup, r, strerror(-r));
		return;
	}
	x->opens++;
	atomic_store_explicit(&inos[x->ino - FIRST_INO].opened, 1,
			      memory_order_relaxed);
	w->hd[w->nhd++] = (struct handle){hb, x->ino};
}

/* The bytes a READ of [off, off + len) answered: the source's. */
static void check_bytes(struct worker *w, const struct held *x, uint64_t off,
			size_t len, ssize_t n, const void *data)
{
	size_t slen = 0;
	const uint8_t *p = source_bytes(x->src, &slen);
	size_t want = off >= x->size	    ? 0
		      : len < x->size - off ? len
					    : (size_t)(x->size - off);

	w->reads++;
	if (n != (ssize_t)want) {
		fail(w,
		     "read of ino %" PRIu64 " at %" PRIu64
		     "+%zu: %zd, want %zu",
		     x->ino, off, len, n, want);
		return;
	}
	if (want && memcmp(data, p + off, want) != 0)
		fail(w,
		     "read of ino %" PRIu64 " at %" PRIu64 "+%zu: not the "
		     "bytes of source %u",
		     x->ino, off, len, x->src);
	w->bytes += want;
}

static void release_at(struct worker *w, int i)
{
	struct held *x = find_held(w, w->hd[i].ino);

	bindings_release(b, w->hd[i].h);
	w->releases++;
	x->opens--;
	w->hd[i] = w->hd[--w->nhd];
}

/* A READ in a random piece; sometimes its RELEASE (and, if nothing else
 * of this thread is open on it, the FORGET) come before the reply is
 * done, as the kernel may send them. */
static void op_read(struct worker *w)
{
	int i;
	struct held x;
	uint64_t off;
	size_t len;
	const void *data = NULL;
	ssize_t n;

	if (w->nhd == 0)
		return;
	i = (int)rnd(w, (uint32_t)w->nhd);
	x = *find_held(w, w->hd[i].ino);
	off = rnd(w, (uint32_t)x.size + 8);
	len = 1 + rnd(w, (uint32_t)x.size + 8);
	n = bindings_read(b, w->hd[i].h, off, len, &data);
	if (n < 0) {
		fail(w, "read of ino %" PRIu64 " (open): %s", x.ino,
		     strerror((int)-n));
		return;
	}
	struct binding *hb = w->hd[i].h;
	if (rnd(w, 8) == 0) {
		struct held *y = find_held(w, x.ino);
		release_at(w, i);
		if (y->opens == 0 && rnd(w, 2))
			forget(w, y, y->nlookup);
		w->pinned++;
	}
	check_bytes(w, &x, off, len, n, data);
	bindings_read_done(b, hb);
}

static void op_getattr(struct worker *w)
{
	struct binding_attr a;
	struct held *x;
	int r;

	if (w->nheld == 0)
		return;
	x = &w->held[rnd(w, (uint32_t)w->nheld)];
	r = bindings_getattr(b, x->ino, &a);
	w->getattrs++;
	if (r || a.ino != x->ino || a.size != x->size || a.gen != x->gen)
		fail(w,
		     "getattr of ino %" PRIu64 ": %d, size %" PRIu64
		     " gen %" PRIu64 ", looked up as size %" PRIu64
		     " gen %" PRIu64,
		     x->ino, r, a.size, a.gen, x->size, x->gen);
	else
		IGNORE_RESULT(
			check_ino(w, x->ino, a.size, a.gen, x->src, "getattr"));
}

static void op_source(struct worker *w)
{
	struct held *x;
	uint32_t src = UINT32_MAX;
	int r;

	if (w->nheld == 0)
		return;
	x = &w->held[rnd(w, (uint32_t)w->nheld)];
	r = bindings_source(b, x->ino, &src);
	w->sources++;
	if (r || src != x->src)
		fail(w, "source of ino %" PRIu64 ": %d, %u, looked up as %u",
		     x->ino, r, src, x->src);
}

static void op_forget(struct worker *w)
{
	struct held *x;

	if (w->nheld == 0)
		return;
	x = &w->held[rnd(w, (uint32_t)w->nheld)];
	if (x->opens == 0) /* the kernel forgets only what is not open */
		forget(w, x, 1 + rnd(w, (uint32_t)x->nlookup));
}

/* The file to look up: in a run of lookups of one hot path (classes) or
 * of the files of one hot key (samples); when the run is over the reader
 * moves on to another, mostly closing what it had open. */
static void start_run(struct worker *w, int k)
{
	w->key = k;
	w->run_sub = -1;
	w->run = (uint32_t)w->id * 1000000u + (uint32_t)++w->runs;
}

static uint32_t next_file(struct worker *w)
{
	int k;

	if (w->run_left-- <= 0) {
		do
			k = (int)rnd(w, NHOT);
		while (k == w->key);
		start_run(w, k);
		w->run_left = 1 + (int)rnd(w, 6);
		while (w->nhd > 0 && rnd(w, 4))
			release_at(w, w->nhd - 1);
	}
	if (ns != sns)
		return (uint32_t)w->key;
	return rnd(w, 2) ? jpg_file[w->key] : txt_file[w->key];
}

static void one_op(struct worker *w)
{
	uint32_t op = rnd(w, 100);

	if (op < 25)
		op_lookup(w, next_file(w));
	else if (op < 40)
		op_open(w);
	else if (op < 65)
		op_read(w);
	else if (op < 72)
		op_getattr(w);
	else if (op < 78)
		op_source(w);
	else if (op < 90) {
		if (w->nhd)
			release_at(w, (int)rnd(w, (uint32_t)w->nhd));
	} else if (op < 97)
		op_forget(w);
	else
		usleep(rnd(w, 500)); /* let bindings age past EXPIRE_S */
}

/* Time to stop: past RUN_S once the thread did its share of the work
 * run_model asks for, past HARD_S in any case. */
static int time_up(const struct worker *w)
{
	double t = now_mono();
	int done = w->opens >= MIN_WORK && w->reads >= MIN_WORK &&
		   w->runs >= MIN_WORK / 4;

	return t > w->until + (done ? 0 : HARD_S - RUN_S);
}

static void *worker_main(void *arg)
{
	struct worker *w = arg;

	for (int n = 0; n < OPS && !w->failed &&
			!atomic_load_explicit(&stop_all, memory_order_relaxed);
	     n++) {
		if (n % 64 == 0 && time_up(w))
			break;
		one_op(w);
	}
	/* The reader exits: its files are closed, the kernel forgets. */
	while (w->nhd > 0)
		release_at(w, w->nhd - 1);
	while (w->nheld > 0)
		forget(w, &w->held[0], w->held[0].nlookup);
	return NULL;
}

/* ---- a run ---- */

/* What the pool must have counted: one serve per node id opened
 * (classes), or per reader's run with an opened node id (samples). */
static int cmp_u32(const void *a, const void *b_)
{
	uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b_;
	return x < y ? -1 : x > y;
}

static uint64_t serves_expected(void)
{
	uint32_t *runs = xmalloc(MAX_INOS * sizeof(*runs));
	uint64_t n = 0;
	size_t m = 0;

	for (size_t i = 0; i < MAX_INOS; i++)
		if (atomic_load(&inos[i].opened))
			runs[m++] = atomic_load(&inos[i].run);
	if (ns != sns) {
		free(runs);
		return m;
	}
	qsort(runs, m, sizeof(*runs), cmp_u32);
	for (size_t i = 0; i < m; i++)
		n += i == 0 || runs[i] != runs[i - 1];
	free(runs);
	return n;
}

/* The inval hook was called, for files of the tree, at most twice per
 * binding of the file (once expired, once spent). */
static void check_invals(void)
{
	uint64_t calls = atomic_load(&inval_calls), bound[2 * NKEYS] = {0};

	cr_expect_eq(atomic_load(&inval_bad), 0, "inval of no file");
	cr_expect_gt(calls, 0, "no entry was ever dropped");
	for (size_t i = 0; i < MAX_INOS; i++)
		if (atomic_load(&inos[i].sig))
			bound[atomic_load(&inos[i].file)]++;
	for (uint32_t f = 0; f < ns->nfiles; f++)
		cr_expect_leq(atomic_load(&inval_of[f]), 2 * bound[f],
			      "file %u: %u invals, %" PRIu64 " bindings", f,
			      atomic_load(&inval_of[f]), bound[f]);
}

static void sum_workers(struct worker *w, struct worker *sum)
{
	memset(sum, 0, sizeof(*sum));
	for (int t = 0; t < NTHREADS; t++) {
		cr_expect_not(w[t].failed, "seed %u, reader %d: %s", base_seed,
			      t + 1, w[t].err);
		sum->lookups += w[t].lookups;
		sum->opens += w[t].opens;
		sum->reads += w[t].reads;
		sum->bytes += w[t].bytes;
		sum->getattrs += w[t].getattrs;
		sum->sources += w[t].sources;
		sum->releases += w[t].releases;
		sum->forgets += w[t].forgets;
		sum->pinned += w[t].pinned;
		sum->runs += w[t].runs;
		sum->failed |= w[t].failed;
	}
}

static void run_model(int samples, enum dataset_echo_mode mode)
{
	struct worker *w = xcalloc(NTHREADS, sizeof(*w));
	const char *env = getenv("ECHOFS_MODEL_SEED");
	struct bindings_stats bs;
	struct dataset_echo_stats es;
	struct worker sum;
	uint64_t served0, expect;

	base_seed = env ? (unsigned)strtoul(env, NULL, 10)
			: (unsigned)time(NULL) ^ (unsigned)getpid();
	open_stack(samples, mode);
	inos = xcalloc(MAX_INOS, sizeof(*inos));
	atomic_store(&stop_all, 0);
	served0 = echo_stats().fresh_served + echo_stats().echoes_served;
	for (int t = 0; t < NTHREADS; t++) {
		w[t].id = t;
		w[t].seed = base_seed * 31u + (unsigned)t;
		w[t].until = now_mono() + RUN_S;
		w[t].key = -1;
		pthread_mutex_init(&w[t].wm, NULL);
		pthread_cond_init(&w[t].wc, NULL);
		cr_assert_eq(pthread_create(&w[t].t, NULL, worker_main, &w[t]),
			     0);
	}
	for (int t = 0; t < NTHREADS; t++)
		pthread_join(w[t].t, NULL);
	sum_workers(w, &sum);
	cr_assert_not(sum.failed, "seed %u: a reader saw a violation",
		      base_seed);
	bindings_get_stats(b, &bs);
	cr_expect_eq(bs.live, 0, "bindings left after every forget");
	cr_expect_eq(bs.open, 0);
	cr_expect_gt(bs.expired, 0, "no binding ever expired");
	check_invals();
	expect = serves_expected();
	bindings_free(b);
	b = NULL;
	es = echo_stats();
	cr_expect_eq(es.fresh_served + es.echoes_served - served0, expect,
		     "seed %u: the pool counted %" PRIu64
		     " serves, the model %" PRIu64,
		     base_seed, es.fresh_served + es.echoes_served - served0,
		     expect);
	cr_expect_eq(es.parked, 0);
	cr_expect_eq(es.timeouts, 0);
	cr_expect_geq(es.pass, 2, "the passes never turned");
	/* A run that checked little proves little. */
	cr_expect_geq(sum.opens, 100, "%" PRIu64 " opens", sum.opens);
	cr_expect_geq(sum.reads, 100, "%" PRIu64 " reads", sum.reads);
	cr_expect_gt(sum.pinned, 0);
	cr_expect_geq(sum.runs, 40, "%" PRIu64 " runs", sum.runs);
	for (int t = 0; t < NTHREADS; t++) {
		pthread_cond_destroy(&w[t].wc);
		pthread_mutex_destroy(&w[t].wm);
	}
	free(w);
	free(inos);
	inos = NULL;
}

Test(bindings_model, classes_fixed)
{
	run_model(0, DATASET_ECHO_FIXED);
}

Test(bindings_model, classes_adaptive)
{
	run_model(0, DATASET_ECHO_ADAPTIVE);
}

Test(bindings_model, samples_fixed)
{
	run_model(1, DATASET_ECHO_FIXED);
}

Test(bindings_model, samples_adaptive)
{
	run_model(1, DATASET_ECHO_ADAPTIVE);
}

/* One reader, one key K at a time: it opens K's caption and keeps it open,
 * looks up a file of another key, comes back to K and looks up the
 * caption and the image: both are of one substitute. Before the fix the
 * caption's lookup returned the binding of the reader's earlier visit of
 * K and the image a new visit's substitute (the model tests found it). */
Test(bindings_model, a_reader_back_at_a_key_reads_one_substitute)
{
	struct worker w = {.key = -1};

	open_stack(1, DATASET_ECHO_FIXED);
	inos = xcalloc(MAX_INOS, sizeof(*inos));
	pthread_mutex_init(&w.wm, NULL);
	pthread_cond_init(&w.wc, NULL);
	for (int n = 0; n < 24 && !w.failed; n++) {
		int k = n % NHOT, other = (k + 1) % NHOT;
		start_run(&w, k);
		op_lookup(&w, txt_file[k]);
		op_open(&w); /* the only node id held: the caption */
		start_run(&w, other);
		op_lookup(&w, jpg_file[other]);
		start_run(&w, k);
		op_lookup(&w, txt_file[k]);
		op_lookup(&w, jpg_file[k]);
		while (w.nhd > 0)
			release_at(&w, 0);
		while (w.nheld > 0)
			forget(&w, &w.held[0], w.held[0].nlookup);
	}
	cr_assert_not(w.failed, "%s", w.err);
	cr_assert_eq(w.lookups, 24 * 4);
	cr_assert_eq(w.opens, 24);
	pthread_cond_destroy(&w.wc);
	pthread_mutex_destroy(&w.wm);
	free(inos);
	inos = NULL;
}
