/* store_model.c - the shard store (cache/store/store.h) tested against a
 * reference model, with crashes.
 *
 * The model: every key (url, etag, size) of a small fixed universe has one
 * content, a function of the key, so whatever the store hands out for a key
 * must be exactly those bytes, whichever process wrote it, whenever.
 *
 * One run: a fresh cache_dir; WORKERS processes (separate store users, each
 * with its own store_open of that directory) do random operations on it:
 * read an entry whole or in part, admit one (begin, write in pieces, commit
 * or abort; several processes often admit the same key at once), drop one,
 * hold pins across operations, read a live writer's temp file
 * (store_peer_open), close and reopen the store (a rescan with a sweep).
 * Meanwhile the parent SIGKILLs workers (one to three times a run; half the
 * time a new worker takes the place and opens the store while the others
 * write): at a random moment, or aimed at one inside store_begin,
 * store_write, store_commit or store_open; after each kill another process
 * opens the store afresh and reads every entry while the others go on.
 * Then the parent stops the rest. Every byte a
 * worker reads is compared with the model as it goes. After the run a fresh
 * process checks the directory: before any rescan, entry files plus leftover
 * temp files fit the cap; a fresh store_open leaves no temp file, keeps the
 * cap, finds no corrupt entry (a killed writer must never leave a torn file
 * under an entry's name), serves every entry file in the directory, and every
 * byte of every entry matches the model.
 *
 *   store_model [--seed N] [--runs N] [--workers N] [--dir D] [--keep]
 *
 * Run r uses seed N + r (default N: from the clock); a failing run prints
 * its seed, and `--seed S --runs 1` runs it again (the same operations and
 * kill times; the interleaving of processes varies). Exit 0 if every run
 * passed, 1 if one failed, 2 on bad usage or setup. */
#include "cache/store/store.h"

#include "common/log.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <inttypes.h>
#include <sched.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define NURLS 10
#define NVARS 2 /* etags: a changed remote object is another key */
#define NKEYS (NURLS * NVARS)
#define NBIG 2 /* urls whose entries span two checksum blocks */
/* The two big entries and a few small ones fit; all of them do not, so
 * admissions evict all the time. */
#define CAP ((uint64_t)STORE_BLOCK * 3 / 2 + 256 * 1024)
#define MAX_WORKERS 8
#define NPINS 2
#define TMP_PREFIX ".tmp-"

struct key {
	char url[48], etag[16];
	uint64_t size, salt;
};

static struct key keys[NKEYS];
static volatile sig_atomic_t stop_flag;

/* What the runs did, summed over every process (a shared mapping): a run
 * that checks nothing must show here. */
struct tally {
	_Atomic uint64_t ops, commits, aborts, exists, refused, drops, reopens,
		peer_reads, bytes_checked, aimed_kills;
	/* where each worker slot is now, for kills aimed at a step */
	_Atomic int phase[MAX_WORKERS];
};
enum phase { PH_OTHER, PH_BEGIN, PH_WRITE, PH_COMMIT, PH_OPEN, PH_N };
static struct tally *tally;

static uint64_t mix(uint64_t x)
{
	x += 0x9E3779B97F4A7C15ULL;
	x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ULL;
	x = (x ^ (x >> 27)) * 0x94D049BB133111EBULL;
	return x ^ (x >> 31);
}

static uint64_t rnd(uint64_t *st)
{
	*st = mix(*st);
	return *st;
}

static uint64_t rnd_below(uint64_t *st, uint64_t n)
{
	return n ? rnd(st) % n : 0;
}

/* The model: the byte at `off` of key k's content. */
static uint8_t model_byte(const struct key *k, uint64_t off)
{
	return (uint8_t)(mix(k->salt ^ (off / 8)) >> (8 * (off % 8)));
}

static void model_fill(const struct key *k, uint64_t off, uint8_t *buf,
		       size_t len)
{
	for (size_t i = 0; i < len; i++)
		buf[i] = model_byte(k, off + i);
}

static void keys_init(void)
{
	for (int u = 0; u < NURLS; u++)
		for (int v = 0; v < NVARS; v++) {
			struct key *k = &keys[u * NVARS + v];
			uint64_t h = mix((uint64_t)(u * NVARS + v) + 1);
			snprintf(k->url, sizeof(k->url),
				 "http://model.test/shard-%02d.tar", u);
			snprintf(k->etag, sizeof(k->etag), "\"v%d\"", v);
			k->salt = h;
			k->size = u < NBIG ? STORE_BLOCK + 1 + h % 65536
					   : 1 + h % (96 * 1024);
		}
}

/* ---- a worker: one store user ---- */

struct worker {
	int id;
	uint64_t seed, rng;
	const char *dir;
	struct store *s;
	struct store_entry *pin[NPINS];
	int pin_key[NPINS];
	uint64_t bad, ops, wrong_bytes;
	uint64_t drops; /* since this store_open: each counts as corrupt */
};

static void bad(struct worker *w, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));
static void bad(struct worker *w, const char *fmt, ...)
{
	char line[512];
	va_list ap;
	int n = snprintf(line, sizeof(line),
			 "store_model: seed %" PRIu64 " worker %d op %" PRIu64
			 ": ",
			 w->seed, w->id, w->ops);
	va_start(ap, fmt);
	if (n >= 0 && (size_t)n < sizeof(line))
		vsnprintf(line + n, sizeof(line) - (size_t)n, fmt, ap);
	va_end(ap);
	/* one write a line: several processes share stderr */
	n = (int)strnlen(line, sizeof(line) - 2);
	line[n++] = '\n';
	if (write(2, line, (size_t)n) < 0)
		(void)0; /* nowhere to say it; the exit status tells */
	w->bad++;
}

/* Compare buf (read at off of key k) with the model. */
static void check_bytes(struct worker *w, int k, const uint8_t *buf, size_t len,
			uint64_t off, const char *what)
{
	uint64_t wrong = 0, first = 0;
	for (size_t i = 0; i < len; i++)
		if (buf[i] != model_byte(&keys[k], off + i) && wrong++ == 0)
			first = off + i;
	if (wrong) {
		w->wrong_bytes += wrong;
		bad(w,
		    "%s key %d: %" PRIu64 " wrong bytes of %zu at %" PRIu64
		    ", first at %" PRIu64,
		    what, k, wrong, len, off, first);
	}
}

/* Read [off, off+len) of a pinned entry and compare. */
static void read_range(struct worker *w, struct store_entry *e, int k,
		       uint64_t off, uint64_t len, uint8_t *buf)
{
	while (len > 0) {
		size_t n = (size_t)(1 + rnd_below(&w->rng, 256 * 1024));
		if (n > len)
			n = (size_t)len;
		ssize_t r = store_pread(e, buf, n, off);
		if (r < 0) {
			bad(w, "store_pread key %d at %" PRIu64 ": %s", k, off,
			    strerror((int)-r));
			return;
		}
		if ((size_t)r != n) {
			bad(w,
			    "store_pread key %d at %" PRIu64
			    ": %zd bytes of %zu",
			    k, off, r, n);
			return;
		}
		check_bytes(w, k, buf, n, off, "entry");
		tally->bytes_checked += n;
		off += n;
		len -= n;
	}
}

static void read_entry(struct worker *w, struct store_entry *e, int k,
		       uint8_t *buf)
{
	uint64_t size = keys[k].size, off = 0, len = size;
	if (rnd_below(&w->rng, 3) == 0) { /* a part only */
		off = rnd_below(&w->rng, size);
		len = 1 + rnd_below(&w->rng, size - off);
	}
	read_range(w, e, k, off, len, buf);
	/* reading past the end gives 0 bytes, not someone else's */
	if (store_pread(e, buf, 16, size) != 0)
		bad(w, "store_pread key %d past the end gave bytes", k);
}

static void unpin(struct worker *w, int slot)
{
	if (!w->pin[slot])
		return;
	/* a pinned entry reads right however long it was held, also when
	 * another process evicted it meanwhile */
	uint8_t buf[4096];
	uint64_t size = keys[w->pin_key[slot]].size;
	uint64_t off = rnd_below(&w->rng, size);
	uint64_t len = size - off < sizeof(buf) ? size - off : sizeof(buf);
	read_range(w, w->pin[slot], w->pin_key[slot], off, len, buf);
	store_put(w->pin[slot]);
	w->pin[slot] = NULL;
}

/* Keep e pinned for a while, or let it go now. */
static void keep_or_put(struct worker *w, struct store_entry *e, int k)
{
	int slot = (int)rnd_below(&w->rng, NPINS * 3);
	if (slot >= NPINS) {
		store_put(e);
		return;
	}
	unpin(w, slot);
	w->pin[slot] = e;
	w->pin_key[slot] = k;
}

static void op_read(struct worker *w, int k, uint8_t *buf)
{
	struct key *key = &keys[k];
	struct store_entry *e = store_get(w->s, key->url, key->etag, key->size);
	if (!e)
		return;
	read_entry(w, e, k, buf);
	keep_or_put(w, e, k);
}

static int write_all(struct worker *w, struct store_writer *wr, int k,
		     uint8_t *buf)
{
	uint64_t size = keys[k].size, off = 0;
	while (off < size) {
		size_t n = (size_t)(1 + rnd_below(&w->rng, 128 * 1024));
		if (n > size - off)
			n = (size_t)(size - off);
		model_fill(&keys[k], off, buf, n);
		int r = store_write(wr, buf, n);
		if (r != 0) {
			bad(w, "store_write key %d: %s", k, strerror(-r));
			return r;
		}
		off += n;
		if (rnd_below(&w->rng, 4) == 0)
			sched_yield(); /* let a kill or a peer land here */
		/* read back some of what is written */
		if (rnd_below(&w->rng, 8) == 0) {
			uint64_t at = rnd_below(&w->rng, off);
			size_t m = (size_t)(off - at < 4096 ? off - at : 4096);
			ssize_t got = store_writer_pread(wr, buf, m, at);
			if (got != (ssize_t)m)
				bad(w, "store_writer_pread key %d: %zd", k,
				    got);
			else
				check_bytes(w, k, buf, m, at, "writer");
		}
		if (off < size && rnd_below(&w->rng, 40) == 0)
			return 1; /* give up half way */
	}
	return 0;
}

static void op_admit(struct worker *w, int k, uint8_t *buf)
{
	struct key *key = &keys[k];
	struct store_writer *wr = NULL;
	struct store_entry *e = NULL;
	tally->phase[w->id] = PH_BEGIN;
	int r = store_begin(w->s, key->url, key->etag, key->size, &wr);
	tally->phase[w->id] = PH_WRITE;

	switch (r) {
	case 0:
		break;
	case -EEXIST: /* another writer finished it: read theirs */
		tally->exists++;
		op_read(w, k, buf);
		return;
	case -EBUSY: /* refusals the API promises; the caller goes on */
	case -ENOSPC:
	case -EDQUOT:
		tally->refused++;
		return;
	default:
		bad(w, "store_begin key %d: %s", k, strerror(-r));
		return;
	}
	if (write_all(w, wr, k, buf) != 0) {
		tally->aborts++;
		store_abort(wr);
		return;
	}
	tally->phase[w->id] = PH_COMMIT;
	r = store_commit(wr, &e);
	tally->phase[w->id] = PH_OTHER;
	if (r != 0) {
		bad(w, "store_commit key %d: %s", k, strerror(-r));
		return;
	}
	tally->commits++;
	read_entry(w, e, k, buf);
	keep_or_put(w, e, k);
}

static void op_drop(struct worker *w, int k)
{
	struct key *key = &keys[k];
	struct store_entry *e = store_get(w->s, key->url, key->etag, key->size);
	if (!e)
		return;
	store_drop(e);
	store_put(e);
	w->drops++;
	tally->drops++;
}

/* A live writer's temp file: what has arrived, zeros after. */
static void op_peer(struct worker *w, int k, uint8_t *buf)
{
	struct key *key = &keys[k];
	int fd = store_peer_open(w->s, key->url, key->etag, key->size);
	uint64_t off = 0;

	if (fd < 0) {
		if (fd != -ENOENT)
			bad(w, "store_peer_open key %d: %s", k, strerror(-fd));
		return;
	}
	tally->peer_reads++;
	while (off < key->size) {
		size_t n = key->size - off < 65536 ? (size_t)(key->size - off)
						   : 65536;
		ssize_t r = pread(fd, buf, n, (off_t)off);
		if (r <= 0)
			break;
		for (ssize_t i = 0; i < r; i++)
			if (buf[i] != 0 && buf[i] != model_byte(key, off + i)) {
				w->wrong_bytes++;
				bad(w,
				    "peer temp file key %d: wrong byte at "
				    "%" PRIu64,
				    k, off + i);
				break;
			}
		off += (uint64_t)r;
	}
	close(fd);
}

static int worker_open(struct worker *w)
{
	char err[256];
	if (w->id >= 0)
		tally->phase[w->id] = PH_OPEN;
	int r = store_open(w->dir, CAP, &w->s, err, sizeof(err));
	if (w->id >= 0)
		tally->phase[w->id] = PH_OTHER;
	if (r != 0) {
		bad(w, "store_open: %s", err);
		return r;
	}
	store_set_wait(w->s, 5);
	store_set_reuse_gap(w->s, 0);
	return 0;
}

static void release_all(struct worker *w)
{
	for (int i = 0; i < NPINS; i++)
		unpin(w, i);
}

/* Every corrupt entry this store met was one it dropped itself: an invalid
 * file under an entry's name (a torn write a killed writer left there) is
 * a failure wherever it is met, also by a rescan that removes it before
 * the final check could see it. Then close. */
static void close_checked(struct worker *w)
{
	struct store_stats st;
	store_get_stats(w->s, &st);
	if (st.corrupt != w->drops)
		bad(w,
		    "%" PRIu64 " entries found corrupt, %" PRIu64
		    " dropped by this worker",
		    st.corrupt, w->drops);
	store_close(w->s);
	w->s = NULL;
	w->drops = 0;
}

/* A rescan with a sweep: close and open again. */
static int op_reopen(struct worker *w)
{
	release_all(w);
	close_checked(w);
	tally->reopens++;
	return worker_open(w);
}

/* Hot keys half the time, so that processes admit the same key at once. */
static int pick_key(struct worker *w)
{
	if (rnd_below(&w->rng, 2) == 0)
		return (int)rnd_below(&w->rng, 6);
	return (int)rnd_below(&w->rng, NKEYS);
}

/* SIGTERM is blocked from before fork until the child's handler is set:
 * a stop sent to a worker just started ends it cleanly. */
static void unblock_term(void)
{
	sigset_t set;
	sigemptyset(&set);
	sigaddset(&set, SIGTERM);
	sigprocmask(SIG_UNBLOCK, &set, NULL);
}

static void on_stop(int sig)
{
	(void)sig;
	stop_flag = 1;
}

static int worker_main(int id, uint64_t seed, const char *dir)
{
	struct worker w = {.id = id, .seed = seed, .dir = dir};
	uint8_t *buf = malloc(256 * 1024);
	struct sigaction sa = {.sa_handler = on_stop, .sa_flags = SA_RESTART};

	sigaction(SIGTERM, &sa, NULL);
	unblock_term();
	w.rng = mix(seed * 131 + (uint64_t)id);
	if (!buf || worker_open(&w) != 0)
		return 3;
	while (!stop_flag) {
		int k = pick_key(&w), op = (int)rnd_below(&w.rng, 100);
		tally->phase[w.id] = PH_OTHER;
		w.ops++;
		tally->ops++;
		if (op < 35)
			op_read(&w, k, buf);
		else if (op < 75)
			op_admit(&w, k, buf);
		else if (op < 80)
			op_drop(&w, k);
		else if (op < 90)
			op_peer(&w, k, buf);
		else if (op < 95)
			unpin(&w, (int)rnd_below(&w.rng, NPINS));
		else if (op_reopen(&w) != 0)
			break;
	}
	release_all(&w);
	close_checked(&w);
	free(buf);
	return w.bad ? 3 : 0;
}

/* ---- after a run: a fresh look at the directory ---- */

struct census {
	uint64_t entry_bytes, tmp_bytes, entries, tmps;
};

static int take_census(const char *dir, struct census *c)
{
	char path[4200];
	DIR *d;
	struct dirent *de;

	memset(c, 0, sizeof(*c));
	snprintf(path, sizeof(path), "%s/shards", dir);
	if (!(d = opendir(path)))
		return -errno;
	while ((de = readdir(d)) != NULL) {
		struct stat sb;
		bool tmp = strncmp(de->d_name, TMP_PREFIX,
				   strlen(TMP_PREFIX)) == 0;
		size_t n = strlen(de->d_name);
		bool entry = n > 6 && strcmp(de->d_name + n - 6, ".shard") == 0;
		if ((!tmp && !entry) ||
		    fstatat(dirfd(d), de->d_name, &sb, AT_SYMLINK_NOFOLLOW))
			continue;
		if (tmp) {
			c->tmps++;
			c->tmp_bytes += (uint64_t)sb.st_size;
		} else {
			c->entries++;
			c->entry_bytes += (uint64_t)sb.st_size;
		}
	}
	closedir(d);
	return 0;
}

/* store_get every key of the model and read it whole; how many were in. */
static uint64_t read_every_entry(struct worker *w, uint8_t *buf)
{
	uint64_t found = 0;
	for (int k = 0; k < NKEYS; k++) {
		struct key *key = &keys[k];
		struct store_entry *e =
			store_get(w->s, key->url, key->etag, key->size);
		if (!e)
			continue;
		found++;
		read_range(w, e, k, 0, key->size, buf);
		store_put(e);
	}
	return found;
}

/* Right after a kill, while the others go on: a fresh store_open and a
 * read of every entry. (The directory's totals move meanwhile: the check
 * after the run looks at those.) */
static int verify_live(uint64_t seed, const char *dir)
{
	struct worker w = {.id = -1, .seed = seed, .dir = dir, .rng = seed};
	uint8_t *buf = malloc(256 * 1024);

	if (!buf || worker_open(&w) != 0)
		return 3;
	read_every_entry(&w, buf);
	close_checked(&w);
	free(buf);
	return w.bad ? 3 : 0;
}

static int verify_main(uint64_t seed, const char *dir)
{
	struct worker w = {.id = -1, .seed = seed, .dir = dir, .rng = seed};
	struct census before, after;
	struct store_stats st;
	uint64_t found;
	uint8_t *buf = malloc(256 * 1024);

	if (!buf || take_census(dir, &before) != 0)
		return 3;
	if (before.entry_bytes + before.tmp_bytes > CAP)
		bad(&w,
		    "cap broken before the rescan: %" PRIu64 " entry + %" PRIu64
		    " temp bytes > cap %" PRIu64,
		    before.entry_bytes, before.tmp_bytes, CAP);
	if (worker_open(&w) != 0)
		return 3;
	take_census(dir, &after);
	if (after.tmps)
		bad(&w, "%" PRIu64 " temp files outlived the rescan",
		    after.tmps);
	if (after.entry_bytes > CAP)
		bad(&w, "cap broken after the rescan: %" PRIu64 " > %" PRIu64,
		    after.entry_bytes, CAP);
	found = read_every_entry(&w, buf);
	store_get_stats(w.s, &st);
	if (st.corrupt)
		bad(&w,
		    "%" PRIu64 " corrupt entries (a torn file under an "
		    "entry's name)",
		    st.corrupt);
	take_census(dir, &after);
	if (after.entries != found)
		bad(&w,
		    "%" PRIu64 " entry files but %" PRIu64 " entries served",
		    after.entries, found);
	store_close(w.s);
	free(buf);
	return w.bad ? 3 : 0;
}

/* ---- the parent: runs, kills, verdicts ---- */

static void sleep_ms(uint64_t ms)
{
	struct timespec t = {.tv_sec = (time_t)(ms / 1000),
			     .tv_nsec = (long)(ms % 1000) * 1000000L};
	while (nanosleep(&t, &t) != 0 && errno == EINTR)
		;
}

static pid_t spawn(int (*fn)(int, uint64_t, const char *), int id,
		   uint64_t seed, const char *dir)
{
	sigset_t set, old;
	sigemptyset(&set);
	sigaddset(&set, SIGTERM);
	sigprocmask(SIG_BLOCK, &set, &old);
	fflush(NULL);
	pid_t pid = fork();
	if (pid == 0)
		_exit(fn(id, seed, dir));
	sigprocmask(SIG_SETMASK, &old, NULL);
	return pid;
}

/* id 0: the check after a run; 1: a check while the others run. */
static int verify_child(int id, uint64_t seed, const char *dir)
{
	unblock_term();
	return id ? verify_live(seed, dir) : verify_main(seed, dir);
}

/* Wait for pid; 0 if it ended as expected (exit 0, or the SIGKILL we
 * sent when `killed`). */
static int reap(pid_t pid, bool killed, uint64_t seed, const char *who)
{
	int st;
	if (waitpid(pid, &st, 0) != pid)
		return -1;
	if (killed && WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL)
		return 0;
	if (WIFEXITED(st) && WEXITSTATUS(st) == 0 && !killed)
		return 0;
	fprintf(stderr, "store_model: seed %" PRIu64 ": %s %s %d\n", seed, who,
		WIFEXITED(st) ? "exited with" : "died of signal",
		WIFEXITED(st) ? WEXITSTATUS(st) : WTERMSIG(st));
	return -1;
}

static int rm_cb(const char *p, const struct stat *sb, int flag,
		 struct FTW *ftw)
{
	(void)sb;
	(void)flag;
	(void)ftw;
	return remove(p);
}

struct opts {
	uint64_t seed, runs;
	int workers;
	const char *base;
	bool keep;
};

/* The slot to kill: any, or (most of the time) one caught in a given step
 * of the store's (begin, write, commit, open), waited for up to 200 ms, so
 * that kills land inside the short steps where a crash does harm. */
static int pick_victim(uint64_t *rng, const pid_t *pids, int n)
{
	int want = (int)rnd_below(rng, PH_N),
	    v = (int)rnd_below(rng, (uint64_t)n);
	if (want == PH_OTHER)
		return v;
	for (int tries = 0; tries < 2000; tries++) {
		for (int i = 0; i < n; i++) {
			int c = (v + i) % n;
			if (pids[c] > 0 && tally->phase[c] == want) {
				tally->aimed_kills++;
				return c;
			}
		}
		struct timespec t = {0, 100000};
		nanosleep(&t, NULL);
	}
	return v;
}

/* One run. Returns 0 if it passed. */
static int run_one(const struct opts *o, uint64_t seed, uint64_t *kills)
{
	char dir[4096];
	pid_t pids[MAX_WORKERS], checks[3];
	uint64_t rng = mix(seed);
	int n = o->workers, fail = 0, nchecks = 0;

	snprintf(dir, sizeof(dir), "%s/echofs-model-XXXXXX", o->base);
	if (!mkdtemp(dir)) {
		perror("store_model: mkdtemp");
		return -1;
	}
	for (int i = 0; i < n; i++) {
		tally->phase[i] = PH_OTHER;
		pids[i] = spawn(worker_main, i, seed, dir);
	}
	for (int round = 1 + (int)rnd_below(&rng, 3); round > 0; round--) {
		sleep_ms(5 + rnd_below(&rng, 100));
		int v = pick_victim(&rng, pids, n);
		if (pids[v] > 0 && kill(pids[v], SIGKILL) == 0) {
			fail |= reap(pids[v], true, seed, "killed worker");
			++*kills;
			checks[nchecks++] = spawn(verify_child, 1, seed, dir);
		}
		/* a new user opens the store (a sweep) while others write */
		tally->phase[v] = PH_OTHER;
		pids[v] = rnd_below(&rng, 2) ? spawn(worker_main, v, seed, dir)
					     : -1;
	}
	sleep_ms(5 + rnd_below(&rng, 60));
	for (int i = 0; i < n; i++)
		if (pids[i] > 0)
			kill(pids[i], SIGTERM);
	for (int i = 0; i < n; i++)
		if (pids[i] > 0)
			fail |= reap(pids[i], false, seed, "worker");
	while (nchecks > 0)
		fail |= reap(checks[--nchecks], false, seed,
			     "fresh open's check after a kill");
	fail |= reap(spawn(verify_child, 0, seed, dir), false, seed,
		     "fresh open's check");
	if (fail || o->keep)
		fprintf(stderr,
			"store_model: seed %" PRIu64 ": cache_dir kept: "
			"%s\n",
			seed, dir);
	else
		nftw(dir, rm_cb, 16, FTW_DEPTH | FTW_PHYS);
	return fail ? -1 : 0;
}

static int parse_u64(const char *s, uint64_t *out)
{
	char *end;
	errno = 0;
	unsigned long long v = strtoull(s, &end, 10);
	if (errno || end == s || *end || s[0] == '-')
		return -EINVAL;
	*out = v;
	return 0;
}

static int parse_args(int argc, char **argv, struct opts *o)
{
	uint64_t v;
	o->seed = (uint64_t)time(NULL) ^ ((uint64_t)getpid() << 20);
	o->runs = 100;
	o->workers = 3;
	o->base = getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp";
	for (int i = 1; i < argc; i++) {
		const char *a = argv[i],
			   *val = i + 1 < argc ? argv[i + 1] : NULL;
		if (strcmp(a, "--keep") == 0) {
			o->keep = true;
			continue;
		}
		if (!val)
			return -EINVAL;
		i++;
		if (strcmp(a, "--dir") == 0)
			o->base = val;
		else if (parse_u64(val, &v) != 0)
			return -EINVAL;
		else if (strcmp(a, "--seed") == 0)
			o->seed = v;
		else if (strcmp(a, "--runs") == 0)
			o->runs = v;
		else if (strcmp(a, "--workers") == 0 && v >= 2 &&
			 v <= MAX_WORKERS)
			o->workers = (int)v;
		else
			return -EINVAL;
	}
	return 0;
}

int main(int argc, char **argv)
{
	struct opts o = {0};
	uint64_t failed = 0, kills = 0;

	if (parse_args(argc, argv, &o) != 0) {
		fprintf(stderr,
			"usage: store_model [--seed N] [--runs N] "
			"[--workers 2..%d] [--dir D] [--keep]\n",
			MAX_WORKERS);
		return 2;
	}
	log_set_level(
		LOG_LEVEL_ERROR); /* refusals under the cap are expected */
	tally = mmap(NULL, sizeof(*tally), PROT_READ | PROT_WRITE,
		     MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	if (tally == MAP_FAILED) {
		perror("store_model: mmap");
		return 2;
	}
	keys_init();
	printf("store_model: %" PRIu64 " runs from seed %" PRIu64
	       ", %d workers, cap %" PRIu64 " bytes\n",
	       o.runs, o.seed, o.workers, CAP);
	fflush(stdout);
	for (uint64_t r = 0; r < o.runs; r++)
		if (run_one(&o, o.seed + r, &kills) != 0) {
			failed++;
			fprintf(stderr,
				"store_model: FAILED run %" PRIu64
				", replay: store_model --seed %" PRIu64
				" --runs 1\n",
				r, o.seed + r);
		}
	printf("store_model: %" PRIu64 " ops: %" PRIu64 " commits, %" PRIu64
	       " aborts, %" PRIu64 " waited for another writer, %" PRIu64
	       " refused, %" PRIu64 " drops, %" PRIu64 " reopens, %" PRIu64
	       " temp files read, %" PRIu64 " bytes checked\n",
	       (uint64_t)tally->ops, (uint64_t)tally->commits,
	       (uint64_t)tally->aborts, (uint64_t)tally->exists,
	       (uint64_t)tally->refused, (uint64_t)tally->drops,
	       (uint64_t)tally->reopens, (uint64_t)tally->peer_reads,
	       (uint64_t)tally->bytes_checked);
	printf("store_model: %" PRIu64 " runs, %" PRIu64 " kills (%" PRIu64
	       " aimed at a step), %" PRIu64 " failed\n",
	       o.runs, kills, (uint64_t)tally->aimed_kills, failed);
	return failed ? 1 : 0;
}
