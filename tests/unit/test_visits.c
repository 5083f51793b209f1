/* test_visits.c - whole-sample echo for the samples layout (fs/visits.c)
 * on a real echo pool of members: tar shards served by
 * tests/fault_server.py, http, shard readers (no disk cache), a wrapped
 * dataset and the samples layout's own tree (ns_open_samples).
 *
 * Every key kNN has two members, kNN.jpg (the larger: the pooled unit)
 * and kNN.txt; both name their key and its label in their first bytes
 * ("kNN jpg L", "kNN txt L", L the label or '-'), so the bytes a file
 * serves tell which substitute key it got. Most keys are labelled (an M
 * line for the jpg, label 0 or 1); the last UNLABELLED of each shard are
 * members only. */
#include "fs/visits.h"

#include "cache/dataset_parts.h"
#include "cache/store/shards.h"
#include "common/util.h"
#include "fetch/format/index.h"
#include "fixtures.h"
#include "fs/namespace.h"

#include <criterion/criterion.h>
#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define NSHARDS 2
#define PER_SHARD 12
#define UNLABELLED 2 /* the last keys of each shard */
#define NKEYS (NSHARDS * PER_SHARD)
#define NLABELLED (NSHARDS * (PER_SHARD - UNLABELLED))

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
static struct namespace *ns;
static struct visits *v;
static uint32_t jpg_file[NKEYS], txt_file[NKEYS]; /* namespace files */

static int labelled(int i)
{
	return i % PER_SHARD < PER_SHARD - UNLABELLED;
}

/* Key i's label as its members spell it: '0', '1', or '-' for none. */
static char label_of(int i)
{
	return labelled(i) ? (char)('0' + i % 2) : '-';
}

static void make_shards(void)
{
	for (int s = 0; s < NSHARDS; s++) {
		struct tarw t = {0};
		for (int k = 0; k < PER_SHARD; k++) {
			int i = s * PER_SHARD + k;
			char name[32], txt[16];
			uint8_t jpg[4096];
			jpg_len[i] = 1500 + 97 * (uint64_t)i;
			memset(jpg, 'a' + i % 26, sizeof(jpg));
			snprintf((char *)jpg, 16, "k%02d jpg %c", i,
				 label_of(i));
			snprintf(name, sizeof(name), "k%02d.jpg", i);
			jpg_off[i] = tarw_add(&t, name, jpg, jpg_len[i]);
			snprintf(txt, sizeof(txt), "k%02d txt %c", i,
				 label_of(i));
			txt_len[i] = strlen(txt);
			snprintf(name, sizeof(name), "k%02d.txt", i);
			txt_off[i] = tarw_add(&t, name, txt, txt_len[i]);
		}
		fx_shard_finish(&t, root, s, &shard_data[s], &shard_len[s]);
	}
}

static void setup(void)
{
	fx_tree_make("visits", tdir, root, cdir);
	make_shards();
	h = fx_http_open(8, 30);
}

static void close_stack(void)
{
	visits_free(v);
	v = NULL;
	dataset_cancel(ds); /* a stalled read ends now */
	dataset_echo_end(ds);
	ns_free(ns);
	ns = NULL;
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

TestSuite(visits, .init = setup, .fini = teardown, .timeout = 120);

/* The index a scan of the shards would make: an M line for each labelled
 * key's jpg, an F line for every member (format 3). */
static struct index *make_index(void)
{
	struct index *x = fx_shards_index(srv.port, shard_len, NSHARDS);

	for (int i = 0; i < NKEYS; i++) {
		uint32_t s = (uint32_t)(i / PER_SHARD);
		char key[8], label[2] = {label_of(i), 0};
		snprintf(key, sizeof(key), "k%02d", i);
		if (labelled(i))
			cr_assert_eq(index_add_sample(x, s, jpg_off[i],
						      jpg_len[i], label, key,
						      "jpg"),
				     0);
		cr_assert_eq(index_add_member(x, s, jpg_off[i], jpg_len[i], key,
					      "jpg"),
			     0);
		cr_assert_eq(index_add_member(x, s, txt_off[i], txt_len[i], key,
					      "txt"),
			     0);
	}
	x->has_members = true;
	return x;
}

/* Each key's jpg and txt file in the tree, found by name. */
static void map_files(void)
{
	memset(jpg_file, 0xff, sizeof(jpg_file));
	memset(txt_file, 0xff, sizeof(txt_file));
	cr_assert_eq(ns->nfiles, 2 * NKEYS);
	for (uint32_t f = 0; f < ns->nfiles; f++) {
		int i = -1;
		char ext[8] = "";
		cr_assert_eq(sscanf(ns->files[f].name, "k%d.%7s", &i, ext), 2,
			     "%s", ns->files[f].name);
		cr_assert(i >= 0 && i < NKEYS);
		if (strcmp(ext, "jpg") == 0)
			jpg_file[i] = f;
		else if (strcmp(ext, "txt") == 0)
			txt_file[i] = f;
		else
			cr_assert_fail("file %s", ns->files[f].name);
	}
	for (int i = 0; i < NKEYS; i++)
		cr_assert(jpg_file[i] != UINT32_MAX &&
				  txt_file[i] != UINT32_MAX,
			  "k%02d", i);
}

/* Server (with the NULL-terminated faults), index, shard readers,
 * dataset, tree and visits, as fs/main.c's start_visits makes them. With
 * echo > 1 the pool echoes whenever no fresh sample is ready. */
static void open_stack(const char *const *faults, double echo,
		       double read_timeout_s)
{
	struct shards_opts so = {.read_timeout_s = read_timeout_s};
	char err[256] = "";
	int r;

	fx_server_start(&srv, root, tdir, faults);
	ix = make_index();
	cr_assert_eq(shards_open(ix, h, NULL, &so, &sh), 0);
	ds = dataset_wrap(ix, sh);
	cr_assert_not_null(ds);
	cr_assert_eq(ns_open_samples(ds, &ns), 0);
	map_files();
	r = visits_start(ds, ns, &v, err, sizeof(err));
	cr_assert_eq(r, 0, "visits_start: %s (%s)", strerror(-r), err);
	cr_assert_not_null(v);
	if (echo > 1)
		cr_assert_eq(dataset_echo_set(ds, echo, DATASET_ECHO_GREEDY),
			     0);
}

/* Serves counted by the pool (a take counts at its first commit). */
static uint64_t served(void)
{
	struct dataset_stats st;

	dataset_get_stats(ds, &st);
	return st.echo.fresh_served + st.echo.echoes_served;
}

static uint64_t parked(void)
{
	struct dataset_stats st;

	dataset_get_stats(ds, &st);
	return st.echo.parked;
}

/* ---- what a file serves ---- */

/* What the bytes a file serves say: "kNN ext L". */
struct serve {
	int key; /* the substitute key */
	char ext[4];
	char label; /* '0', '1' or '-' */
};

/* What file f serves of s, a take of its visit, as bindings.c serves it:
 * the held bytes, or the member visits_member names (whose bytes are
 * taken here from the source shard, not read through the dataset). 0, or
 * -1 with why in err. */
static int what_served(uint32_t f, const struct dataset_sample *s,
		       struct serve *out, char *err, size_t errlen)
{
	uint32_t m = visits_member(v, f, s), base = (uint32_t)ix->nsamples;
	const uint8_t *b;
	size_t len;

	if (m == VISITS_HELD) {
		b = dataset_sample_data(s);
		len = dataset_sample_len(s);
	} else {
		const struct index_sample *ms;
		if (m < base || m - base >= ix->nmembers) {
			snprintf(err, errlen, "file %u: member %u out of range",
				 f, m);
			return -1;
		}
		ms = &ix->members[m - base];
		b = shard_data[ms->shard] + ms->offset;
		len = ms->size;
		if (dataset_size(ds, m) != len) {
			snprintf(err, errlen, "member %u: size %zu", m, len);
			return -1;
		}
	}
	if (len < 9 || b[0] != 'k' || b[3] != ' ' || b[7] != ' ') {
		snprintf(err, errlen, "file %u: bytes name no key", f);
		return -1;
	}
	out->key = (b[1] - '0') * 10 + (b[2] - '0');
	memcpy(out->ext, b + 4, 3);
	out->ext[3] = 0;
	out->label = (char)b[8];
	return 0;
}

/* Key i's jpg was served sj and its txt st, both within one visit: the
 * same substitute, each the member of its own extension, with the key's
 * label (none for an unlabelled key). 0, or -1 with why in err. */
static int check_pair(int i, const struct dataset_sample *sj,
		      const struct dataset_sample *st, char *err, size_t errlen)
{
	struct serve a, b;

	if (what_served(jpg_file[i], sj, &a, err, errlen) ||
	    what_served(txt_file[i], st, &b, err, errlen))
		return -1;
	if (strcmp(a.ext, "jpg") || strcmp(b.ext, "txt")) {
		snprintf(err, errlen, "k%02d: served %s for jpg, %s for txt", i,
			 a.ext, b.ext);
		return -1;
	}
	if (a.key != b.key) {
		snprintf(err, errlen,
			 "k%02d: jpg of k%02d, txt of k%02d in one visit", i,
			 a.key, b.key);
		return -1;
	}
	if (a.label != label_of(i) || b.label != label_of(i)) {
		snprintf(err, errlen, "k%02d (label %c) got k%02d (%c, %c)", i,
			 label_of(i), a.key, a.label, b.label);
		return -1;
	}
	if (dataset_sample_id(sj) != dataset_sample_id(st)) {
		snprintf(err, errlen, "k%02d: two takes (%u, %u) in one visit",
			 i, dataset_sample_id(sj), dataset_sample_id(st));
		return -1;
	}
	return 0;
}

/* ---- takes and their answers ---- */

/* A take's answer (visits_take_async's done). */
struct answer {
	pthread_mutex_t m;
	pthread_cond_t c;
	int calls, err;
	struct dataset_sample *s;
};

static struct answer *answer_new(void)
{
	struct answer *a = xcalloc(1, sizeof(*a));

	pthread_mutex_init(&a->m, NULL);
	pthread_cond_init(&a->c, NULL);
	return a;
}

static void answer_free(struct answer *a)
{
	pthread_cond_destroy(&a->c);
	pthread_mutex_destroy(&a->m);
	free(a);
}

static void answered(void *ud, int err, struct dataset_sample *s)
{
	struct answer *a = ud;

	pthread_mutex_lock(&a->m);
	a->calls++;
	a->err = err;
	a->s = s;
	pthread_cond_broadcast(&a->c);
	pthread_mutex_unlock(&a->m);
}

/* Wait up to secs for a's calls to reach n; its calls then. */
static int wait_calls(struct answer *a, int n, double secs)
{
	struct timespec until;
	int calls;

	clock_gettime(CLOCK_REALTIME, &until);
	until.tv_sec += (time_t)secs;
	pthread_mutex_lock(&a->m);
	while (a->calls < n &&
	       pthread_cond_timedwait(&a->c, &a->m, &until) == 0)
		;
	calls = a->calls;
	pthread_mutex_unlock(&a->m);
	return calls;
}

static int calls_of(struct answer *a)
{
	int n;

	pthread_mutex_lock(&a->m);
	n = a->calls;
	pthread_mutex_unlock(&a->m);
	return n;
}

/* A take for file f through visits_take_async, as fs/bindings.c takes,
 * and its answer (waited for: the pool answers every parked take within
 * its wait). */
static int take(uint32_t reader, uint32_t f, struct dataset_sample **s)
{
	struct answer *a;
	int r;

	a = answer_new();
	r = visits_take_async(v, f, reader, a, answered, a, s);
	if (r == -EINPROGRESS) {
		wait_calls(a, 1, 3600);
		r = a->err;
		*s = a->s;
	}
	answer_free(a);
	return r;
}

/* One visit of key i as a reader of the whole sample makes it: both files
 * taken (txt first if txt_first), both opened (committed), both let go
 * of. 0, or -1 with why in err. */
static int visit_key(uint32_t reader, int i, int txt_first, char *err,
		     size_t errlen)
{
	struct dataset_sample *sj = NULL, *st = NULL;
	uint32_t first = txt_first ? txt_file[i] : jpg_file[i];
	uint32_t second = txt_first ? jpg_file[i] : txt_file[i];
	struct dataset_sample **s1 = txt_first ? &st : &sj;
	struct dataset_sample **s2 = txt_first ? &sj : &st;
	int r = take(reader, first, s1), rc = -1;

	if (r) {
		snprintf(err, errlen, "k%02d: take: %s", i, strerror(-r));
		return -1;
	}
	r = take(reader, second, s2);
	if (r) {
		snprintf(err, errlen, "k%02d: second take: %s", i,
			 strerror(-r));
		goto out;
	}
	rc = check_pair(i, sj, st, err, errlen);
	dataset_echo_commit(ds, sj);
	dataset_echo_commit(ds, st);
out:
	dataset_echo_release(ds, sj);
	dataset_echo_release(ds, st);
	return rc;
}

/* ---- the tests ---- */

/* The tree groups every file into its key and the pool streams one unit
 * per key: a visit gives both files of the key one substitute, with the
 * key's label, and counts as one serve. */
Test(visits, the_members_of_one_visit_come_from_one_substitute_of_the_label)
{
	unsigned seed = 11;
	int order[NKEYS], visits = 0;
	char err[256];
	uint64_t s0;

	open_stack(NULL, 8, 0);
	s0 = served();
	for (int i = 0; i < NKEYS; i++)
		order[i] = i;
	for (int epoch = 0; epoch < 4; epoch++) {
		for (int i = NKEYS - 1; i > 0; i--) { /* a new order */
			int j = (int)(rand_r(&seed) % (unsigned)(i + 1));
			int t = order[i];
			order[i] = order[j];
			order[j] = t;
		}
		for (int n = 0; n < NKEYS; n++) {
			int i = order[n];
			/* A reader per epoch: one reader's visit of a
			 * key goes on while it reads that key. */
			cr_assert_eq(visit_key((uint32_t)epoch + 1, i,
					       (n + epoch) % 2, err,
					       sizeof(err)),
				     0, "epoch %d: %s", epoch, err);
			visits++;
		}
	}
	cr_assert_eq(served() - s0, (uint64_t)visits,
		     "one serve per visit: %llu serves, %d visits",
		     (unsigned long long)(served() - s0), visits);
	/* The pool hands out units, each key's jpg: the jpg serves the held
	 * bytes, the txt its member of the substitute. */
	for (int i = 0; i < NKEYS; i++) {
		struct dataset_sample *s;
		struct serve a;
		char key[8];
		cr_assert_eq(take(99, jpg_file[i], &s), 0);
		cr_assert_eq(visits_member(v, jpg_file[i], s), VISITS_HELD);
		cr_assert_neq(visits_member(v, txt_file[i], s), VISITS_HELD);
		cr_assert_eq(what_served(jpg_file[i], s, &a, err, sizeof(err)),
			     0, "%s", err);
		snprintf(key, sizeof(key), "k%02d", a.key);
		cr_assert_str_eq(dataset_key(ds, dataset_sample_id(s)), key);
		dataset_echo_untake(ds, s);
	}
	cr_assert_eq(served() - s0, (uint64_t)visits, "untaken: not served");
}

/* A reader's visit of a key lasts while it takes files of that key, in
 * any order and as often as it likes (the image twice, the caption
 * first, a member left out): one substitute, one serve. Its first take
 * for another key ends it; another reader's takes never join it (issue
 * 45: an image-only pass left visits open that the next reader's
 * captions joined while its images started new ones). */
Test(visits, one_readers_takes_of_a_key_are_one_sample_until_it_moves_on)
{
	struct dataset_sample *s1, *s2, *s3, *s4, *s5;
	char err[256];
	uint64_t s0;

	open_stack(NULL, 8, 0);
	for (int round = 0; round < 2; round++) {
		int i = round ? 5 : NKEYS - 1; /* labelled, unlabelled */
		int other = (i + 1) % NKEYS;
		uint32_t a = round ? txt_file[i] : jpg_file[i];
		uint32_t b = round ? jpg_file[i] : txt_file[i];
		uint32_t r1 = 10 + (uint32_t)round, r2 = 20 + (uint32_t)round;
		s0 = served();
		/* Reader 2 reads only a (an image-only pass). */
		cr_assert_eq(take(r2, a, &s5), 0);
		dataset_echo_commit(ds, s5);
		cr_assert_eq(take(r1, a, &s1), 0);
		dataset_echo_commit(ds, s1);
		cr_assert_eq(served() - s0, 2, "each reader its own visit");
		cr_assert_eq(take(r1, a, &s2), 0);
		dataset_echo_commit(ds, s2);
		cr_assert_eq(served() - s0, 2, "the same file again: shared");
		cr_assert_eq(dataset_sample_id(s2), dataset_sample_id(s1));
		cr_assert_eq(take(r1, b, &s3), 0);
		dataset_echo_commit(ds, s3);
		cr_assert_eq(served() - s0, 2, "the other file shares it");
		cr_assert_eq(check_pair(i, round ? s3 : s2, round ? s2 : s3,
					err, sizeof(err)),
			     0, "%s", err);
		dataset_echo_release(ds, s3);
		/* Reader 2 now reads b: its own visit's substitute. */
		cr_assert_eq(take(r2, b, &s3), 0);
		dataset_echo_commit(ds, s3);
		cr_assert_eq(served() - s0, 2);
		cr_assert_eq(check_pair(i, round ? s3 : s5, round ? s5 : s3,
					err, sizeof(err)),
			     0, "reader 2: %s", err);
		/* Reader 1 moves on to another key, then comes back: a new
		 * visit each time. */
		cr_assert_eq(take(r1, jpg_file[other], &s4), 0);
		dataset_echo_commit(ds, s4);
		dataset_echo_release(ds, s4);
		cr_assert_eq(take(r1, b, &s4), 0);
		dataset_echo_commit(ds, s4);
		cr_assert_eq(served() - s0, 4);
		dataset_echo_release(ds, s1);
		dataset_echo_release(ds, s2);
		dataset_echo_release(ds, s3);
		dataset_echo_release(ds, s4);
		dataset_echo_release(ds, s5);
	}
	cr_assert_eq(visits_take_async(v, (uint32_t)ns->nfiles, 1, &s1,
				       answered, NULL, &s1),
		     -EINVAL);
	cr_assert_null(s1);
}

/* ---- many readers ---- */

#define NTHREADS 8
#define ROUNDS 40

struct reader {
	pthread_t t;
	int id, visits, failed;
	char err[256];
	pthread_barrier_t *bar; /* the pair's, or NULL */
	struct reader *mate;	/* the pair's other reader */
	struct dataset_sample *got;
	int file_key;
};

/* Each reader reads whole samples of its own keys (i % NTHREADS == id). */
static void *read_own_keys(void *arg)
{
	struct reader *r = arg;
	unsigned seed = 100 + (unsigned)r->id;

	int prev = -1;

	for (int n = 0; n < ROUNDS && !r->failed; n++) {
		int m = (int)(rand_r(&seed) % (NKEYS / NTHREADS));
		int i = r->id + NTHREADS * m;
		if (i == prev) /* a key read twice in a row is one visit */
			i = r->id + NTHREADS * ((m + 1) % (NKEYS / NTHREADS));
		prev = i;
		if (visit_key((uint32_t)r->id + 1, i, rand_r(&seed) % 2, r->err,
			      sizeof(r->err)))
			r->failed = 1;
		r->visits++;
	}
	return NULL;
}

Test(visits, concurrent_readers_of_different_keys_get_whole_samples)
{
	struct reader rd[NTHREADS];
	int visits = 0;
	uint64_t s0;

	open_stack(NULL, 8, 0);
	s0 = served();
	for (int t = 0; t < NTHREADS; t++) {
		rd[t] = (struct reader){.id = t};
		cr_assert_eq(
			pthread_create(&rd[t].t, NULL, read_own_keys, &rd[t]),
			0);
	}
	for (int t = 0; t < NTHREADS; t++) {
		pthread_join(rd[t].t, NULL);
		cr_expect_not(rd[t].failed, "reader %d: %s", t, rd[t].err);
		visits += rd[t].visits;
	}
	cr_assert_eq(visits, NTHREADS * ROUNDS);
	cr_assert_eq(served() - s0, (uint64_t)visits,
		     "one serve per visit: %llu for %d",
		     (unsigned long long)(served() - s0), visits);
	cr_assert_eq(parked(), 0);
}

/* Two readers of one key at once, one image first, the other caption
 * first, their takes interleaved: each reads a whole sample of its own
 * visit (before issue 45 they shared one visit, and a reader whose file
 * had taken already started another: mixed pairs). Pairs of threads, each
 * pair on its own keys. */
static void *read_half(void *arg)
{
	struct reader *r = arg;
	unsigned seed = 7 + (unsigned)(r->id / 2); /* the mates draw alike */
	int npairs = NTHREADS / 2, jpg = r->id % 2 == 0, prev = -1;
	struct dataset_sample *other = NULL;

	for (int n = 0; n < ROUNDS; n++) {
		int m = (int)(rand_r(&seed) % (NKEYS / npairs));
		int i = r->id / 2 + npairs * m;
		if (i == prev)
			i = r->id / 2 + npairs * ((m + 1) % (NKEYS / npairs));
		prev = i;
		uint32_t f = jpg ? jpg_file[i] : txt_file[i];
		uint32_t g = jpg ? txt_file[i] : jpg_file[i];
		int e;
		pthread_barrier_wait(r->bar);
		e = take((uint32_t)r->id + 1, f, &r->got);
		pthread_barrier_wait(r->bar); /* both took their first */
		if (!e)
			e = take((uint32_t)r->id + 1, g, &other);
		if (e && !r->failed) {
			snprintf(r->err, sizeof(r->err), "k%02d: take: %s", i,
				 strerror(-e));
			r->failed = 1;
		}
		if (!e && !r->failed &&
		    check_pair(i, jpg ? r->got : other, jpg ? other : r->got,
			       r->err, sizeof(r->err)))
			r->failed = 1;
		r->visits++;
		pthread_barrier_wait(r->bar); /* compared: let go */
		if (r->got) {
			dataset_echo_commit(ds, r->got);
			dataset_echo_release(ds, r->got);
			r->got = NULL;
		}
		if (other) {
			dataset_echo_commit(ds, other);
			dataset_echo_release(ds, other);
			other = NULL;
		}
	}
	return NULL;
}

Test(visits, two_readers_of_one_key_at_once_get_whole_samples_of_their_own)
{
	struct reader rd[NTHREADS];
	pthread_barrier_t bar[NTHREADS / 2];
	int visits = 0;
	uint64_t s0;

	open_stack(NULL, 8, 0);
	s0 = served();
	for (int p = 0; p < NTHREADS / 2; p++)
		pthread_barrier_init(&bar[p], NULL, 2);
	for (int t = 0; t < NTHREADS; t++)
		rd[t] = (struct reader){
			.id = t, .bar = &bar[t / 2], .mate = &rd[t ^ 1]};
	for (int t = 0; t < NTHREADS; t++)
		cr_assert_eq(pthread_create(&rd[t].t, NULL, read_half, &rd[t]),
			     0);
	for (int t = 0; t < NTHREADS; t++) {
		pthread_join(rd[t].t, NULL);
		cr_expect_not(rd[t].failed, "reader %d: %s", t, rd[t].err);
		visits += rd[t].visits;
	}
	for (int p = 0; p < NTHREADS / 2; p++)
		pthread_barrier_destroy(&bar[p]);
	cr_assert_eq(visits, NTHREADS * ROUNDS);
	cr_assert_eq(served() - s0, (uint64_t)visits,
		     "one serve per visit: %llu for %d",
		     (unsigned long long)(served() - s0), visits);
	cr_assert_eq(parked(), 0);
}

/* ---- waiting takes: cancel, shutdown ---- */

/* The shards never arrive while the test runs: every visit's first take
 * parks in the pool. */
static const char *const stalled[] = {"*.tar=stall:60", NULL};

Test(visits, cancel_answers_a_waiting_take_eintr_once)
{
	struct answer *a = answer_new(), *b = answer_new(), *c = answer_new(),
		      *d = answer_new();
	struct dataset_sample *s = NULL;
	int k = 3;

	open_stack(stalled, 1, 2);
	/* a starts the visit, parked in the pool; b (the txt) and c (the
	 * jpg again: a visit still taking is joined even by a file that
	 * took in it) wait on the visit. */
	cr_assert_eq(visits_take_async(v, jpg_file[k], 7, a, answered, a, &s),
		     -EINPROGRESS);
	cr_assert_eq(visits_take_async(v, txt_file[k], 7, b, answered, b, &s),
		     -EINPROGRESS);
	cr_assert_eq(visits_take_async(v, jpg_file[k], 7, c, answered, c, &s),
		     -EINPROGRESS);
	cr_assert_eq(parked(), 1, "one take in the pool for the visit");
	cr_assert_eq(visits_cancel(v, b), 1);
	cr_assert_eq(calls_of(b), 1);
	cr_assert_eq(b->err, -EINTR);
	cr_assert_null(b->s);
	cr_assert_eq(visits_cancel(v, b), 0, "answered once");
	cr_assert_eq(calls_of(b), 1);
	cr_assert_eq(visits_cancel(v, a), 0, "the first take is the pool's");
	cr_assert_eq(visits_cancel(v, NULL), 0);
	cr_assert_eq(visits_cancel(NULL, a), 0);
	/* Its take interrupted, the visit ends and c, whose own request
	 * was not interrupted, takes anew: a new visit, parked. */
	cr_assert_eq(dataset_echo_cancel(ds, a), 1);
	cr_assert_eq(calls_of(a), 1);
	cr_assert_eq(a->err, -EINTR);
	cr_assert_eq(calls_of(c), 0, "c takes anew");
	cr_assert_eq(parked(), 1, "c's take is the new visit's");
	cr_assert_eq(visits_take_async(v, txt_file[k], 7, d, answered, d, &s),
		     -EINPROGRESS);
	/* Shutdown: the takes waiting on visits, then the pool's. */
	visits_cancel_all(v);
	cr_assert_eq(wait_calls(d, 1, 10), 1);
	cr_assert_eq(d->err, -ESHUTDOWN);
	cr_assert_eq(calls_of(c), 0);
	dataset_echo_cancel_all(ds);
	cr_assert_eq(wait_calls(c, 1, 10), 1);
	cr_assert_eq(c->err, -ESHUTDOWN);
	cr_assert_eq(parked(), 0);
	visits_cancel_all(v);
	close_stack();
	cr_assert_eq(calls_of(a) + calls_of(b) + calls_of(c) + calls_of(d), 4,
		     "every take answered once");
	answer_free(a);
	answer_free(b);
	answer_free(c);
	answer_free(d);
}

/* visits_free with takes waiting, as at unmount: the one parked in the
 * pool for a visit and the one waiting on the visit are both answered
 * -ESHUTDOWN, and nothing waits for the pool's 30 s. */
Test(visits, free_answers_every_waiting_take_eshutdown)
{
	struct answer *a = answer_new(), *b = answer_new();
	struct dataset_sample *s = NULL;
	int k = NKEYS - 1;

	open_stack(stalled, 1, 2);
	cr_assert_eq(visits_take_async(v, txt_file[k], 7, a, answered, a, &s),
		     -EINPROGRESS);
	cr_assert_eq(parked(), 1, "the visit's first take parks in the pool");
	cr_assert_eq(visits_take_async(v, jpg_file[k], 7, b, answered, b, &s),
		     -EINPROGRESS);
	visits_free(v);
	v = NULL;
	cr_assert_eq(calls_of(b), 1, "the waiter answered by visits_free");
	cr_assert_eq(b->err, -ESHUTDOWN);
	cr_assert_eq(wait_calls(a, 1, 10), 1,
		     "the take parked in the pool was not answered");
	cr_assert_eq(a->err, -ESHUTDOWN);
	cr_assert_null(a->s);
	cr_assert_eq(parked(), 0);
	close_stack();
	cr_assert_eq(calls_of(a) + calls_of(b), 2, "every take answered once");
	answer_free(a);
	answer_free(b);
	visits_free(NULL);
}
