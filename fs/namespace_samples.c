/* namespace_samples.c - the samples layout's tree: every member of every
 * sample at <key>.<ext>, the key's directory part as directories.
 *
 * Built from the dataset's member list (a format 3 index) in four steps:
 * the directories every shown key implies are found through a hash table
 * of their paths; they are numbered level by level (by parent, then name)
 * so that each directory's subdirectories are one run; the files are
 * sorted by directory and name; each directory's run is made unique (as
 * the imagefolder tree does) and cleared of names a subdirectory has. */
#include "fs/namespace.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "cache/dataset.h"
#include "common/bigmap.h"
#include "common/util.h"
#include "fs/namespace_int.h"

/* One directory while the tree is built. */
struct dir {
	const char *path; /* its path is path[0 .. len), borrowed (a key) */
	uint32_t len;
	uint32_t name;	 /* where its last component starts in path */
	uint32_t parent; /* dir id, NS_NO_CLASS for the root */
	uint32_t depth;	 /* 0 below the root */
	uint32_t rank;	 /* its class number */
};

struct dir_table {
	struct dir *d;
	size_t n, cap;
	uint32_t *slot; /* id + 1, 0 empty */
	size_t nslots;	/* a power of two, more than 2n */
};

static uint64_t path_hash(const char *s, size_t len)
{
	uint64_t h = 1469598103934665603ull; /* FNV-1a */
	for (size_t i = 0; i < len; i++)
		h = (h ^ (unsigned char)s[i]) * 1099511628211ull;
	return h;
}

static void dirs_grow(struct dir_table *t)
{
	size_t nslots = t->nslots ? 2 * t->nslots : 256;
	uint32_t *slot = xcalloc(nslots, sizeof(*slot));

	for (size_t id = 0; id < t->n; id++) {
		size_t j =
			path_hash(t->d[id].path, t->d[id].len) & (nslots - 1);
		while (slot[j])
			j = (j + 1) & (nslots - 1);
		slot[j] = (uint32_t)id + 1;
	}
	free(t->slot);
	t->slot = slot;
	t->nslots = nslots;
}

/* The id of the directory path[0 .. len), added when new. */
static uint32_t dir_id(struct dir_table *t, const char *path, size_t len,
		       size_t name, uint32_t parent, uint32_t depth)
{
	size_t j;

	if (2 * (t->n + 1) > t->nslots)
		dirs_grow(t);
	for (j = path_hash(path, len) & (t->nslots - 1); t->slot[j];
	     j = (j + 1) & (t->nslots - 1)) {
		const struct dir *d = &t->d[t->slot[j] - 1];
		if (d->len == len && memcmp(d->path, path, len) == 0)
			return t->slot[j] - 1;
	}
	if (t->n == t->cap) {
		t->cap = t->cap ? 2 * t->cap : 64;
		t->d = xrealloc(t->d, t->cap * sizeof(*t->d));
	}
	t->d[t->n] = (struct dir){path,	  (uint32_t)len, (uint32_t)name,
				  parent, depth,	 0};
	t->slot[j] = (uint32_t)t->n + 1;
	return (uint32_t)t->n++;
}

/* A component starting with '.': hidden, as ls and ImageFolder take it
 * (and ".echofs" at the top is the control directory's). */
static int hidden(const char *key)
{
	for (const char *p = key; p; p = strchr(p, '/'), p = p ? p + 1 : p)
		if (p[0] == '.')
			return 1;
	return 0;
}

/* The directory of key (NS_NO_CLASS: the root), its ancestors added. */
static uint32_t key_dir(struct dir_table *t, const char *key)
{
	uint32_t parent = NS_NO_CLASS, depth = 0;
	size_t start = 0;

	for (const char *s = strchr(key, '/'); s; s = strchr(s + 1, '/')) {
		size_t len = (size_t)(s - key);
		parent = dir_id(t, key, len, start, parent, depth++);
		start = len + 1;
	}
	return parent;
}

/* The last component's bytes of a directory, as strcmp orders names. */
static int dir_name_cmp(const struct dir *x, const struct dir *y)
{
	size_t xl = x->len - x->name, yl = y->len - y->name;
	int c = memcmp(x->path + x->name, y->path + y->name, xl < yl ? xl : yl);

	return c ? c : (xl > yl) - (xl < yl);
}

/* Level by level: by depth, then the parent's rank, then name. */
static int dir_cmp(const void *a, const void *b, void *arg)
{
	const struct dir_table *t = arg;
	const struct dir *x = &t->d[*(const uint32_t *)a];
	const struct dir *y = &t->d[*(const uint32_t *)b];
	uint32_t px, py;

	if (x->depth != y->depth)
		return x->depth < y->depth ? -1 : 1;
	px = x->parent == NS_NO_CLASS ? 0 : t->d[x->parent].rank;
	py = y->parent == NS_NO_CLASS ? 0 : t->d[y->parent].rank;
	if (px != py)
		return px < py ? -1 : 1;
	return dir_name_cmp(x, y);
}

/* Rank the directories (sorting each level once the one above has its
 * ranks) and make ns->classes with their subdirectory runs. */
static void rank_dirs(struct namespace *ns, struct dir_table *t)
{
	uint32_t *order = xmalloc((t->n ? t->n : 1) * sizeof(*order));
	size_t lo = 0;

	for (size_t id = 0; id < t->n; id++)
		order[id] = (uint32_t)id;
	while (lo < t->n) {
		size_t hi = lo;
		qsort_r(order + lo, t->n - lo, sizeof(*order), dir_cmp, t);
		while (hi < t->n &&
		       t->d[order[hi]].depth == t->d[order[lo]].depth)
			hi++;
		for (size_t r = lo; r < hi; r++)
			t->d[order[r]].rank = (uint32_t)r;
		lo = hi;
	}
	ns->classes = xcalloc(t->n ? t->n : 1, sizeof(*ns->classes));
	ns->nclasses = t->n;
	for (size_t r = 0; r < t->n; r++) {
		const struct dir *d = &t->d[order[r]];
		struct ns_class *c = &ns->classes[r];
		c->name = xstrndup(d->path + d->name, d->len - d->name);
		if (d->parent == NS_NO_CLASS) {
			ns->root_dirs++;
			continue;
		}
		c = &ns->classes[t->d[d->parent].rank];
		if (c->sub_count++ == 0)
			c->sub_first = (uint32_t)r;
	}
	free(order);
}

/* By directory (the root first), then name, then number. */
static int placed_cmp(const void *a, const void *b)
{
	const struct ns_file *x = a, *y = b;
	uint32_t cx = x->cls + 1, cy = y->cls + 1; /* NS_NO_CLASS -> 0 */

	if (cx != cy)
		return cx < cy ? -1 : 1;
	return ns_file_cmp(a, b);
}

/* A subdirectory of dir (NS_NO_CLASS: the root) is called name. */
static int is_subdir(const struct namespace *ns, uint32_t dir, const char *name)
{
	size_t lo = dir == NS_NO_CLASS ? 0 : ns->classes[dir].sub_first;
	size_t hi = dir == NS_NO_CLASS ? ns->root_dirs
				       : lo + ns->classes[dir].sub_count;

	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;
		int c = strcmp(name, ns->classes[mid].name);
		if (c == 0)
			return 1;
		if (c < 0)
			hi = mid;
		else
			lo = mid + 1;
	}
	return 0;
}

/* One directory's run f[0 .. n) made unique, files named like a
 * subdirectory dropped; what is kept moves to ns->files[ns->nfiles ...]. */
static void settle_run(struct namespace *ns, struct ns_file *f, size_t n,
		       unsigned char *seen)
{
	uint32_t dir = f[0].cls, first = (uint32_t)ns->nfiles;

	ns->counts.renamed_duplicates += ns_rename_duplicates(ns, f, n, seen);
	for (size_t k = 0; k < n; k++) {
		if (is_subdir(ns, dir, f[k].name)) {
			ns->counts.skipped_clash++;
			continue;
		}
		ns->files[ns->nfiles++] = f[k];
	}
	if (dir == NS_NO_CLASS) {
		ns->root_first = first;
		ns->root_files = (uint32_t)ns->nfiles - first;
	} else {
		ns->classes[dir].first = first;
		ns->classes[dir].count = (uint32_t)ns->nfiles - first;
	}
}

/* Sorted files into their directories' runs. */
static void settle_files(struct namespace *ns, size_t shown, size_t numbers)
{
	unsigned char *seen = xcalloc(numbers / 8 + 1, 1);
	size_t a = 0;

	qsort(ns->files, shown, sizeof(*ns->files), placed_cmp);
	ns->nfiles = 0;
	while (a < shown) {
		size_t b = a + 1;
		while (b < shown && ns->files[b].cls == ns->files[a].cls)
			b++;
		/* settle_run writes at or before a: never past what it reads */
		settle_run(ns, ns->files + a, b - a, seen);
		a = b;
	}
	free(seen);
}

/* The number a member's file reads through: the sample whose image it
 * is when that sample's name is the member's own ("jpg", not "JPG" or
 * "seg.jpg"), so its reads are checked, spliced and tracked as in the
 * imagefolder layout; else the member's. */
static uint32_t read_number(const struct dataset *ds, uint32_t m,
			    uint32_t sample)
{
	if (sample != m && strcmp(dataset_ext(ds, sample), dataset_ext(ds, m)))
		return m;
	return sample;
}

/* Keys met again (issue 45): a sample here is the members of one key in
 * one shard (the member list keeps no tar order: a format 3 index adds the
 * images its M lines imply after every F line). When a later shard has an
 * earlier one's key, renaming its members one by one would leave
 * "x_dup7.jpg" beside "x_dup8.txt", or "x.txt" of one sample beside "x.jpg"
 * of another; so the whole sample is renamed, every member with one
 * suffix. Decided over the whole index, never the rank's part, so that
 * every mount and rank gives a member the same name. */
struct dups {
	uint32_t *head;	      /* per member: its sample's first member */
	unsigned char *round; /* per head: 0 keeps its key, else 1 + round */
};

/* The members' numbers from 0 and the dataset they are keys of. */
struct keyed {
	const struct dataset *ds;
	uint32_t base; /* member j is number base + j */
};

static const char *key_of(const struct keyed *k, uint32_t j)
{
	return dataset_key(k->ds, k->base + j);
}

/* qsort_r: members by key, then shard, then number (index order). */
static int member_cmp(const void *a, const void *b, void *arg)
{
	const struct keyed *k = arg;
	uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
	uint32_t gx = dataset_group(k->ds, k->base + x);
	uint32_t gy = dataset_group(k->ds, k->base + y);
	int c = strcmp(key_of(k, x), key_of(k, y));

	if (c)
		return c;
	if (gx != gy)
		return gx < gy ? -1 : 1;
	return (x > y) - (x < y);
}

/* 1 if a member of the sorted h[0 .. n) has key. */
static int key_taken(const struct keyed *k, const uint32_t *h, size_t n,
		     const char *key)
{
	size_t lo = 0, hi = n;

	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;
		int c = strcmp(key, key_of(k, h[mid]));
		if (c == 0)
			return 1;
		if (c < 0)
			hi = mid;
		else
			lo = mid + 1;
	}
	return 0;
}

/* 1 + the first round whose key for the sample headed by member j is no
 * member's (renamed keys differ from each other by their number), or 0
 * when all are taken: its files are then renamed one by one, as a last
 * resort. */
static unsigned char free_round(const struct keyed *k, const uint32_t *h,
				size_t nh, uint32_t j)
{
	const char *key = key_of(k, j);
	size_t len = strlen(key);
	char *buf = xmalloc(len + NS_SUFFIX_ROOM);
	unsigned char r = 0;

	memcpy(buf, key, len);
	for (unsigned round = 0; round < NS_DUP_ROUNDS && !r; round++) {
		ns_dup_suffix(buf + len, k->base + j, round);
		if (!key_taken(k, h, nh, buf))
			r = (unsigned char)(round + 1);
	}
	free(buf);
	return r;
}

/* A renamed sample this mount shows is counted; the first in index order
 * is named in the warning. */
static void count_dup(struct namespace *ns, uint32_t first, uint32_t again)
{
	struct ns_counts *c = &ns->counts;

	if (!dataset_in_part(ns->ds, again))
		return;
	c->duplicate_keys++;
	if (c->dup_first == c->dup_again || again < c->dup_again) {
		c->dup_first = first;
		c->dup_again = again;
	}
}

/* The run h[a .. b) of one key: each shard's members after the first
 * shard's are one sample, renamed. */
static void rename_key(struct namespace *ns, const struct keyed *k,
		       struct dups *d, const uint32_t *h, size_t nh, size_t a,
		       size_t b)
{
	uint32_t head = h[a];

	for (size_t i = a; i < b; i++) {
		if (dataset_group(k->ds, k->base + h[i]) !=
		    dataset_group(k->ds, k->base + head)) {
			head = h[i];
			d->round[head] = free_round(k, h, nh, head);
			count_dup(ns, k->base + h[a], k->base + head);
		}
		d->head[h[i]] = head;
	}
}

static struct dups find_dups(struct namespace *ns)
{
	struct keyed k = {ns->ds, (uint32_t)dataset_nsamples(ns->ds)};
	size_t n = dataset_nmembers(ns->ds), nh = 0;
	struct dups d = {xmalloc((n + 1) * sizeof(uint32_t)),
			 xcalloc(n + 1, 1)};
	uint32_t *h = xmalloc((n + 1) * sizeof(*h));

	for (uint32_t j = 0; j < n; j++) {
		d.head[j] = j;
		if (!hidden(key_of(&k, j)))
			h[nh++] = j;
	}
	qsort_r(h, nh, sizeof(*h), member_cmp, &k);
	for (size_t a = 0, b; a < nh; a = b) {
		for (b = a + 1;
		     b < nh && strcmp(key_of(&k, h[a]), key_of(&k, h[b])) == 0;
		     b++)
			;
		rename_key(ns, &k, &d, h, nh, a, b);
	}
	free(h);
	return d;
}

/* Every shown member into ns->files (directory ids for now) and its name
 * into ns->names (a renamed sample's into its own buffer); returns how
 * many. */
static size_t place_members(struct namespace *ns, struct dir_table *t)
{
	const struct dataset *ds = ns->ds;
	uint32_t base = (uint32_t)dataset_nsamples(ds);
	size_t n = dataset_nmembers(ds), shown = 0;
	uint32_t *as = xmalloc((n + 1) * sizeof(*as));
	struct dups d = find_dups(ns);
	char *p = ns->names, suffix[NS_SUFFIX_ROOM];

	dataset_member_samples(ds, as);
	for (size_t j = 0; j < n; j++) {
		uint32_t m = base + (uint32_t)j, h = d.head[j];
		const char *key = dataset_key(ds, m), *name = p;
		if (!dataset_in_part(ds, m))
			continue;
		if (hidden(key)) {
			ns->counts.skipped_hidden++;
			continue;
		}
		if (d.round[h]) {
			ns_dup_suffix(suffix, base + h, d.round[h] - 1);
			name = ns_renamed_name(ns, m, suffix);
			ns->counts.renamed_duplicates++;
		} else {
			p += ns_write_name(p, ds, m, NULL, "") + 1;
		}
		ns->files[shown++] = (struct ns_file){
			name, read_number(ds, m, as[j]), key_dir(t, key)};
	}
	free(d.head);
	free(d.round);
	free(as);
	bigmap_trim(ns->names, (size_t)(p - ns->names), &ns->map_names);
	return shown;
}

int ns_open_samples(const struct dataset *ds, struct namespace **out)
{
	size_t n = dataset_nmembers(ds), numbers = dataset_nsamples(ds) + n;
	struct dir_table t = {0};
	struct namespace *ns;
	size_t shown;

	*out = NULL;
	if (!dataset_has_members(ds))
		return -ENOTSUP;
	if (numbers >= (UINT32_MAX - NS_INO_FIRST_CLASS) / 2)
		return -EOVERFLOW; /* files and directories share the inodes */
	ns = xcalloc(1, sizeof(*ns));
	ns->ds = ds;
	ns->names = bigmap_alloc(n * (NAME_LEN_MAX + 1) + 1, &ns->map_names);
	ns->files = bigmap_alloc((n + 1) * sizeof(*ns->files), &ns->map_files);
	if (!ns->names || !ns->files) {
		ns_free(ns);
		return -ENOMEM;
	}
	shown = place_members(ns, &t);
	rank_dirs(ns, &t);
	for (size_t i = 0; i < shown; i++)
		if (ns->files[i].cls != NS_NO_CLASS)
			ns->files[i].cls = t.d[ns->files[i].cls].rank;
	settle_files(ns, shown, numbers);
	free(t.d);
	free(t.slot);
	*out = ns;
	return 0;
}
