/* store_evict.c - the store's byte accounting and eviction: the one place
 * that changes the entry and byte counts, live_bytes and the event counters
 * (store_acct_*), and the scan-resistant choice of victims under the cap
 * (policy in the DESIGN note of store.c). */
#include "cache/store/store_int.h"

#include "cache/store/store_format.h"
#include "cache/store/store_journal.h"
#include "cache/store/store_lock.h"
#include "common/lockcheck.h"
#include "common/util.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

/* ---- accounting (s->lock held unless said) ---- */

void store_acct_add(struct store *s, struct store_entry *e)
{
	ASSERT_HELD(&s->lock);
	s->st.entries++;
	s->st.bytes += e->file_bytes;
	s->live_bytes += e->file_bytes;
}

void store_acct_remove(struct store *s, struct store_entry *e)
{
	ASSERT_HELD(&s->lock);
	if (entry_live(e))
		s->live_bytes -= e->file_bytes;
	if (e->owns_file)
		s->st.bytes -= e->file_bytes;
	if (!e->dropped)
		s->st.entries--;
}

void store_acct_disown(struct store *s, struct store_entry *e)
{
	ASSERT_HELD(&s->lock);
	if (!e->owns_file)
		return;
	if (entry_live(e))
		s->live_bytes -= e->file_bytes;
	e->owns_file = false;
	s->st.bytes -= e->file_bytes;
	if (!e->dropped) {
		e->dropped = true;
		s->st.entries--;
	}
}

bool store_acct_drop(struct store *s, struct store_entry *e)
{
	ASSERT_HELD(&s->lock);
	if (e->dropped)
		return false;
	if (entry_live(e))
		s->live_bytes -= e->file_bytes;
	e->dropped = true;
	s->st.entries--;
	s->st.corrupt++;
	return true;
}

void store_acct_count_locked(struct store *s, enum store_count c)
{
	ASSERT_HELD(&s->lock);
	switch (c) {
	case STORE_COUNT_CORRUPT:
		s->st.corrupt++;
		break;
	case STORE_COUNT_WRITE_ERRORS:
		s->st.write_errors++;
		break;
	case STORE_COUNT_WAITS:
		s->st.waits++;
		break;
	case STORE_COUNT_EVICTIONS:
		s->st.evictions++;
		break;
	}
}

void store_acct_count(struct store *s, enum store_count c)
{
	pthread_mutex_lock(&s->lock);
	store_acct_count_locked(s, c);
	pthread_mutex_unlock(&s->lock);
}

/* ---- eviction (s->lock and the directory lock held) ---- */

/* Used again since it was written. */
static bool is_protected(const struct store_entry *e)
{
	return ts_cmp(e->use, e->ins) > 0;
}

enum evicted { KEPT, GONE, USED };

/* Evict one entry this process has not pinned. Unless `force`, not one that
 * another process has pinned either. Returns GONE when its bytes are gone
 * from the directory, USED when another process used it since this one
 * last looked (its times are taken from the file: a use is recorded there,
 * not in the journal; the caller sorts again), KEPT otherwise. */
static enum evicted try_evict(struct store *s, struct store_entry *e,
			      bool force)
{
	struct stat sb;
	int fd = store_fmt_open(s->dirfd, e->name);

	if (fd < 0) {
		store_ent_destroy(s, e, false); /* already gone */
		return GONE;
	}
	if (fstat(fd, &sb) != 0 || sb.st_ino != e->ino || sb.st_dev != e->dev) {
		close(fd); /* a new file */
		return KEPT;
	}
	if (ts_cmp(sb.st_mtim, e->use) > 0) {
		close(fd);
		e->use = sb.st_mtim;
		e->ins = sb.st_atim;
		return USED;
	}
	if (flock(fd, LOCK_EX | LOCK_NB) != 0 && !force) {
		close(fd); /* pinned by another process */
		return KEPT;
	}
	/* A file that stays (EPERM, EIO, a read-only remount) still holds
	 * its bytes: keep the entry so the cap counts them. ENOENT: another
	 * store removed it first, which is the eviction we wanted. Noted
	 * first, so other processes stop counting it (s->lock is held over
	 * that small write: the record must come before the unlink). */
	store_jnl_note(s, e->name);
	if (unlinkat(s->dirfd, e->name, 0) != 0 && errno != ENOENT) {
		close(fd);
		return KEPT;
	}
	close(fd);
	store_acct_count_locked(s, STORE_COUNT_EVICTIONS);
	store_ent_destroy(s, e, false);
	return GONE;
}

static int cmp_newest_ins(const void *a, const void *b)
{
	const struct store_entry *x = *(struct store_entry *const *)a;
	const struct store_entry *y = *(struct store_entry *const *)b;
	int c = ts_cmp(y->ins, x->ins);
	return c ? c : strcmp(x->name, y->name);
}

static int cmp_oldest_use(const void *a, const void *b)
{
	const struct store_entry *x = *(struct store_entry *const *)a;
	const struct store_entry *y = *(struct store_entry *const *)b;
	int c = ts_cmp(x->use, y->use);
	return c ? c : strcmp(x->name, y->name);
}

/* The eviction candidates (unpinned entries), by segment, each sorted in
 * eviction order. */
struct victims {
	struct store_entry **prob; /* newest written first */
	struct store_entry **prot; /* least recently used first */
	struct store_entry **need; /* still needed: least recently used first */
	size_t np, nq, nn;
	uint64_t free_bytes; /* of prob and prot: what goes before `need` */
	size_t nfresh;	     /* prob[0..nfresh) are among the newest */
	uint64_t prot_bytes; /* of every protected entry, pinned ones too */
};

/* Keep FRESH_KEEP newest entries until last: another mount reading the same
 * shards a little behind this one needs them next (without this, a sweep's
 * newest-first rule would evict exactly what the others are about to read).
 */
#define FRESH_KEEP 2

/* The FRESH_KEEP-th newest write time of all live entries. */
static struct timespec fresh_threshold(struct store *s)
{
	struct timespec top[FRESH_KEEP] = {{0, 0}};
	for (size_t i = 0; i < s->nbuckets; i++)
		for (struct store_entry *e = s->tab[i]; e; e = e->hnext) {
			struct timespec t = e->ins;
			if (!e->owns_file || e->dropped)
				continue;
			for (int k = 0; k < FRESH_KEEP; k++)
				if (ts_cmp(t, top[k]) > 0) {
					struct timespec x = top[k];
					top[k] = t;
					t = x;
				}
		}
	return top[FRESH_KEEP - 1];
}

static void candidates(struct store *s, struct victims *v)
{
	size_t n = s->nentries ? s->nentries : 1;
	struct timespec fresh = fresh_threshold(s);

	memset(v, 0, sizeof(*v));
	v->prob = xmalloc(n * sizeof(*v->prob));
	v->prot = xmalloc(n * sizeof(*v->prot));
	v->need = xmalloc(n * sizeof(*v->need));
	for (size_t i = 0; i < s->nbuckets; i++)
		for (struct store_entry *e = s->tab[i]; e; e = e->hnext) {
			if (!e->owns_file || e->dropped)
				continue;
			if (is_protected(e))
				v->prot_bytes += e->file_bytes;
			if (e->pins)
				continue;
			if (s->needed && s->needed(s->needed_ud, e->hash)) {
				v->need[v->nn++] = e;
				continue;
			}
			v->free_bytes += e->file_bytes;
			if (is_protected(e))
				v->prot[v->nq++] = e;
			else
				v->prob[v->np++] = e;
		}
	qsort(v->prob, v->np, sizeof(*v->prob), cmp_newest_ins);
	qsort(v->prot, v->nq, sizeof(*v->prot), cmp_oldest_use);
	qsort(v->need, v->nn, sizeof(*v->need), cmp_oldest_use);
	while (v->nfresh < v->np && ts_cmp(v->prob[v->nfresh]->ins, fresh) >= 0)
		v->nfresh++;
}

/* The next victim: protected LRU while protected entries hold over 3/4 of
 * the cap; then probation newest first, but the newest (fresh) ones last of
 * the probation entries, oldest of them first; then protected LRU; then,
 * when `needed` is allowed, the entries the reader still needs, LRU. *ip,
 * *iq and *in walk prob, prot and need. */
static struct store_entry *next_victim(struct store *s, struct victims *v,
				       size_t pos[3], bool needed)
{
	if (pos[1] < v->nq && v->prot_bytes > s->st.cap / 4 * 3)
		return v->prot[pos[1]++];
	if (pos[0] < v->np - v->nfresh)
		return v->prob[v->nfresh + pos[0]++];
	if (pos[0] < v->np)
		return v->prob[v->np - 1 - pos[0]++];
	if (pos[1] < v->nq)
		return v->prot[pos[1]++];
	if (needed && pos[2] < v->nn)
		return v->need[pos[2]++];
	return NULL;
}

static void victims_free(struct victims *v)
{
	free(v->prob);
	free(v->prot);
	free(v->need);
}

/* One pass over the candidates in eviction order. Returns true when `need`
 * more bytes fit. Without `needed`, refuses at once (evicting nothing)
 * when only entries the reader still needs would make room. Sets *used
 * when a candidate turned out used by another process (skipped: its place
 * in the order has changed). */
static bool evict_pass(struct store *s, uint64_t tmp_bytes, uint64_t need,
		       bool force, bool needed, bool *used)
{
	struct victims v;
	struct store_entry *e;
	size_t pos[3] = {0, 0, 0};

	candidates(s, &v);
	if (!needed &&
	    s->st.bytes + tmp_bytes + need > s->st.cap + v.free_bytes) {
		victims_free(&v);
		return false;
	}
	while (s->st.bytes + tmp_bytes + need > s->st.cap &&
	       (e = next_victim(s, &v, pos, needed)) != NULL) {
		uint64_t fb = e->file_bytes;
		bool p = is_protected(e);
		enum evicted r = try_evict(s, e, force);
		if (r == GONE && p)
			v.prot_bytes -= fb;
		*used |= r == USED;
	}
	victims_free(&v);
	return s->st.bytes + tmp_bytes + need <= s->st.cap;
}

/* Evict until `need` more bytes fit under the cap, counting `tmp_bytes` of
 * writers in progress. Entries other processes have pinned go only when
 * nothing else frees enough: their readers keep reading the unlinked file
 * (its blocks return when they let go), whereas refusing would leave the
 * cache unusable to every mount while others hold old pins. Entries this
 * process has pinned never go. With a "needed" hint set, entries it names
 * never go either: -EDQUOT then says "only by pushing out what the reader
 * still needs" (the reader serves that shard without the cache). Returns 0,
 * -EDQUOT or -ENOSPC. */
int store_evict_for(struct store *s, uint64_t tmp_bytes, uint64_t need)
{
	ASSERT_HELD(&s->lock);
	bool all = s->needed == NULL, used = false;

	/* It fits: no candidates to sort (a sort of every entry per
	 * admission was 6% of the prepared tier's first pass). */
	if (s->st.bytes + tmp_bytes + need <= s->st.cap)
		return 0;
	/* A pass that met entries other processes used sorts again before
	 * it evicts what others have pinned. */
	if (evict_pass(s, tmp_bytes, need, false, all, &used) ||
	    (used && evict_pass(s, tmp_bytes, need, false, all, &used)) ||
	    evict_pass(s, tmp_bytes, need, true, all, &used))
		return 0;
	return all ? -ENOSPC : -EDQUOT;
}

/* ---- fits (for readers choosing whether to queue a fetch) ---- */

/* A footer's size for a key of a typical length: for the estimate below. */
#define FIT_KEY_GUESS 256

/* s->lock held, s->needed set. Do the live entries the hint does not name
 * hold at least `need` bytes? Walks the table (the hint's answers change
 * in the reader's pass without the store hearing of it), stopping once they
 * do. */
static bool unneeded_reach(struct store *s, uint64_t need)
{
	ASSERT_HELD(&s->lock);
	uint64_t freeable = 0;

	for (size_t i = 0; i < s->nbuckets; i++)
		for (struct store_entry *e = s->tab[i]; e; e = e->hnext) {
			if (!entry_live(e) || s->needed(s->needed_ud, e->hash))
				continue;
			freeable += e->file_bytes;
			if (freeable >= need)
				return true;
		}
	return freeable >= need;
}

/* Room now, none even with every live entry gone, or no hint: answered
 * from the sums; only a full store under a hint asks the hint per entry. */
int store_fits(struct store *s, uint64_t size)
{
	uint64_t want;
	int fits;

	if (!s)
		return 0;
	want = size +
	       store_fmt_footer_bytes(store_fmt_blocks(size), FIT_KEY_GUESS);
	if (want > s->st.cap)
		return 1; /* never fits: store_begin refuses it and says why */
	pthread_mutex_lock(&s->lock);
	want += s->st.bytes;
	if (want <= s->st.cap)
		fits = 1;
	else if (want - s->st.cap > s->live_bytes)
		fits = 0;
	else
		fits = !s->needed || unneeded_reach(s, want - s->st.cap);
	pthread_mutex_unlock(&s->lock);
	return fits;
}

void store_debug_fits_walk(struct store *s, uint64_t size, int *fits,
			   uint64_t *live_sum, uint64_t *live_walk)
{
	uint64_t freeable = 0, live = 0, want;

	want = size +
	       store_fmt_footer_bytes(store_fmt_blocks(size), FIT_KEY_GUESS);
	pthread_mutex_lock(&s->lock);
	for (size_t i = 0; i < s->nbuckets; i++)
		for (struct store_entry *e = s->tab[i]; e; e = e->hnext) {
			if (!entry_live(e))
				continue;
			live += e->file_bytes;
			if (!s->needed || !s->needed(s->needed_ud, e->hash))
				freeable += e->file_bytes;
		}
	*fits = want > s->st.cap || want + s->st.bytes <= s->st.cap + freeable;
	*live_sum = s->live_bytes;
	*live_walk = live;
	pthread_mutex_unlock(&s->lock);
}
