/* namespace.c - the virtual ImageFolder tree built from a dataset: class
 * directories, file names, inode numbers, lookups and listings.
 *
 * The build is the mount's largest cost after the index load (14.2 M
 * samples, 21,841 classes for ImageNet-21k), so it works on what repeats:
 * labels are met by pointer (the index keeps one copy of each), classes
 * are found once per distinct label, samples are bucketed by class with a
 * counting sort of their numbers, and each class's names are written next
 * to each other and sorted there, in cache. Only the samples a rank shows
 * get names; every class gets its directory on every rank. */
#include "fs/namespace.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cache/dataset.h"
#include "common/bigmap.h"
#include "common/util.h"
#include "fs/namespace_int.h"

static const char *const control_names[] = {"stats", "stats.prom", "config"};

/* Within one class: by name, then by sample. */
int ns_file_cmp(const void *a, const void *b)
{
	const struct ns_file *x = a, *y = b;
	int c = strcmp(x->name, y->name);

	if (c != 0)
		return c;
	return x->sample < y->sample ? -1 : x->sample > y->sample;
}

static const char *key_base(const char *key)
{
	const char *slash = strrchr(key, '/');
	return slash ? slash + 1 : key;
}

static int label_ok(const char *l)
{
	return l[0] && strcmp(l, ".") != 0 && strcmp(l, "..") != 0 &&
	       strcmp(l, NS_CONTROL_DIR_NAME) != 0 && !strchr(l, '/');
}


/* "<base><suffix>.<ext>" into p, which has room (name_len, renamed_name), at
 * most NAME_LEN_MAX bytes: a base too long for the suffix and extension is cut
 * (at a UTF-8 character boundary), the same way for the same sample each
 * time. Returns the length written, without the NUL. */
size_t ns_write_name(char *p, const struct dataset *ds, uint32_t sample,
		     const char *ext, const char *suffix)
{
	const char *base = key_base(dataset_key(ds, sample));
	const char *e = ext ? ext : dataset_ext(ds, sample);
	size_t bl = strlen(base), el = strlen(e), sl = strlen(suffix), len;

	/* (A member's long extension may leave no room for a suffix: the
	 * renamed name is then longer, in a buffer of its own.) */
	if (bl + sl + 1 + el > NAME_LEN_MAX && sl + 1 + el < NAME_LEN_MAX) {
		bl = NAME_LEN_MAX - sl - 1 - el;
		while (bl > 0 && ((unsigned char)base[bl] & 0xc0) == 0x80)
			bl--;
	}
	memcpy(p, base, bl);
	memcpy(p + bl, suffix, sl);
	len = bl + sl;
	p[len++] = '.';
	memcpy(p + len, e, el + 1);
	return len + el;
}

/* One class while the tree is built. */
struct build_class {
	const char *label; /* the first sample's, borrowed */
	uint64_t num;	   /* its value when labels are numeric */
	size_t shown;	   /* samples, in view or not */
	size_t next;	   /* the next free slot of its run in the order */
	uint32_t rank;	   /* its class number: place in the sorted order */
};

/* The classes, found by label (by value when numeric: "1" and "01" are
 * one class) through an open-addressing table of ids + 1. */
struct class_table {
	struct build_class *c;
	size_t n, cap;
	uint32_t *slot; /* id + 1; 0 empty */
	size_t nslots;	/* a power of two, more than twice n */
	int numeric;
};

/* The distinct label strings (by address) met in the samples: the index
 * keeps one copy of each label, so 14 M samples hash 21,841 strings once
 * each instead of 14 M times. Distinct copies of one label are simply
 * distinct entries here, found to be one class by the class table. */
struct label_set {
	const char **label; /* by id; slot[] holds id + 1, 0 empty */
	uint32_t *slot;
	size_t n, cap, nslots; /* nslots a power of two, more than 2n */
};

static size_t ptr_hash(const char *p, size_t mask)
{
	return (size_t)(((uint64_t)(uintptr_t)p * 0x9e3779b97f4a7c15ull) >>
			17) &
	       mask;
}

static void label_set_grow(struct label_set *s)
{
	size_t nslots = s->nslots ? 2 * s->nslots : 1024;
	uint32_t *slot = xcalloc(nslots, sizeof(*slot));

	for (size_t id = 0; id < s->n; id++) {
		size_t j = ptr_hash(s->label[id], nslots - 1);
		while (slot[j])
			j = (j + 1) & (nslots - 1);
		slot[j] = (uint32_t)id + 1;
	}
	free(s->slot);
	s->slot = slot;
	s->nslots = nslots;
}

/* The id of label's address, added when new; UINT32_MAX past 2^32 - 2. */
static uint32_t label_set_id(struct label_set *s, const char *label)
{
	size_t j;

	if (s->nslots && (j = ptr_hash(label, s->nslots - 1), 1)) {
		for (; s->slot[j]; j = (j + 1) & (s->nslots - 1))
			if (s->label[s->slot[j] - 1] == label)
				return s->slot[j] - 1;
	}
	if (s->n >= UINT32_MAX - 1)
		return UINT32_MAX;
	if (2 * (s->n + 1) > s->nslots)
		label_set_grow(s);
	if (s->n == s->cap) {
		s->cap = s->cap ? 2 * s->cap : 64;
		s->label = xrealloc(s->label, s->cap * sizeof(*s->label));
	}
	for (j = ptr_hash(label, s->nslots - 1); s->slot[j];
	     j = (j + 1) & (s->nslots - 1))
		;
	s->label[s->n] = label;
	s->slot[j] = (uint32_t)s->n + 1;
	return (uint32_t)s->n++;
}

static uint64_t label_hash(const struct class_table *t, const char *label,
			   uint64_t num)
{
	uint64_t h = 1469598103934665603ull; /* FNV-1a */

	if (t->numeric)
		return (num + 1) * 0x9e3779b97f4a7c15ull;
	for (; *label; label++)
		h = (h ^ (unsigned char)*label) * 1099511628211ull;
	return h;
}

static int same_label(const struct class_table *t, const struct build_class *c,
		      const char *label, uint64_t num)
{
	return t->numeric ? c->num == num : strcmp(c->label, label) == 0;
}

static void class_table_grow(struct class_table *t)
{
	size_t nslots = t->nslots ? 2 * t->nslots : 1024;
	uint32_t *slot = xcalloc(nslots, sizeof(*slot));

	for (size_t id = 0; id < t->n; id++) {
		const struct build_class *c = &t->c[id];
		size_t j = label_hash(t, c->label, c->num) & (nslots - 1);
		while (slot[j])
			j = (j + 1) & (nslots - 1);
		slot[j] = (uint32_t)id + 1;
	}
	free(t->slot);
	t->slot = slot;
	t->nslots = nslots;
}

static uint32_t class_id(struct class_table *t, const char *label)
{
	uint64_t num = 0;
	size_t j;

	/* numeric: find_classes parsed every label already: this cannot fail. */
	if (t->numeric)
		IGNORE_RESULT(parse_u64(label, &num));
	if (2 * (t->n + 1) > t->nslots)
		class_table_grow(t);
	for (j = label_hash(t, label, num) & (t->nslots - 1); t->slot[j];
	     j = (j + 1) & (t->nslots - 1))
		if (same_label(t, &t->c[t->slot[j] - 1], label, num))
			return t->slot[j] - 1;
	if (t->n == t->cap) {
		t->cap = t->cap ? 2 * t->cap : 64;
		t->c = xrealloc(t->c, t->cap * sizeof(*t->c));
	}
	t->c[t->n] = (struct build_class){.label = label, .num = num};
	t->slot[j] = (uint32_t)t->n + 1;
	return (uint32_t)t->n++;
}

/* qsort_r comparator of class ids; arg is the table. */
static int class_cmp(const void *a, const void *b, void *arg)
{
	const struct class_table *t = arg;
	const struct build_class *x = &t->c[*(const uint32_t *)a];
	const struct build_class *y = &t->c[*(const uint32_t *)b];

	if (t->numeric)
		return x->num < y->num ? -1 : x->num > y->num;
	return strcmp(x->label, y->label);
}

/* Pass 1: every sample's label address into the set, its id into
 * class_of. -EOVERFLOW past 2^32 - 2 distinct addresses. */
static int find_labels(struct namespace *ns, struct label_set *ls)
{
	size_t n = dataset_nsamples(ns->ds);

	for (uint32_t i = 0; i < n; i++) {
		uint32_t id = label_set_id(ls, dataset_label(ns->ds, i));
		if (id == UINT32_MAX)
			return -EOVERFLOW;
		ns->class_of[i] = id;
	}
	return 0;
}

/* Each distinct label to its class (NS_NO_CLASS when it can't be a
 * directory name), by value when every label is a number. */
static uint32_t *find_classes(struct namespace *ns, const struct label_set *ls,
			      struct class_table *t)
{
	uint32_t *cls = xmalloc((ls->n ? ls->n : 1) * sizeof(*cls));
	uint64_t v;

	t->numeric = ls->n > 0;
	for (size_t id = 0; id < ls->n && t->numeric; id++)
		t->numeric = parse_u64(ls->label[id], &v) == 0;
	ns->numeric_labels = t->numeric;
	for (size_t id = 0; id < ls->n; id++)
		cls[id] = label_ok(ls->label[id]) ? class_id(t, ls->label[id])
						  : NS_NO_CLASS;
	return cls;
}

/* Pass 2: class_of from label ids to class ids, the samples counted per
 * class: all of them, in view or not, so that a sample's name is decided
 * by the index alone, the same on every rank. Returns how many. */
static size_t count_shown(struct namespace *ns, const uint32_t *cls,
			  struct class_table *t)
{
	size_t n = dataset_nsamples(ns->ds), shown = 0;

	for (uint32_t i = 0; i < n; i++) {
		uint32_t c = cls[ns->class_of[i]];
		ns->class_of[i] = c;
		if (c == NS_NO_CLASS) {
			ns->counts.skipped_bad_label++;
			continue;
		}
		t->c[c].shown++;
		shown++;
	}
	return shown;
}

/* Class numbers in sorted label order, each class's run in the order. */
static void rank_classes(struct class_table *t)
{
	uint32_t *order = xmalloc((t->n ? t->n : 1) * sizeof(*order));
	size_t next = 0;

	for (size_t id = 0; id < t->n; id++)
		order[id] = (uint32_t)id;
	qsort_r(order, t->n, sizeof(*order), class_cmp, t);
	for (size_t r = 0; r < t->n; r++) {
		struct build_class *c = &t->c[order[r]];
		c->rank = (uint32_t)r;
		c->next = next;
		next += c->shown;
	}
	free(order);
}

/* Pass 3: the samples by class (a counting sort of their numbers, in
 * sample order within a class); class_of becomes the class number. */
static void bucket(struct namespace *ns, struct class_table *t, uint32_t *order)
{
	size_t n = dataset_nsamples(ns->ds);

	for (uint32_t i = 0; i < n; i++) {
		struct build_class *c;
		if (ns->class_of[i] == NS_NO_CLASS)
			continue;
		c = &t->c[ns->class_of[i]];
		ns->class_of[i] = c->rank;
		order[c->next++] = i;
	}
}

/* Mark in dup every file of one class's sorted run whose name repeats the
 * one before it. Marks first, renames after, so runs of three stay caught.
 * Returns how many. */
static size_t mark_duplicates(const struct ns_file *f, size_t n,
			      unsigned char *dup)
{
	size_t marked = 0;

	for (size_t i = 1; i < n; i++) {
		dup[i] = strcmp(f[i - 1].name, f[i].name) == 0;
		marked += dup[i];
	}
	return marked;
}

/* "_dup" + 10 digits + "_" + 2 digits + NUL fits NS_SUFFIX_ROOM. */
void ns_dup_suffix(char *buf, uint32_t n, unsigned round)
{
	if (round)
		snprintf(buf, NS_SUFFIX_ROOM, "_dup%u_%u", n, round);
	else
		snprintf(buf, NS_SUFFIX_ROOM, "_dup%u", n);
}

char *ns_renamed_name(struct namespace *ns, uint32_t s, const char *suffix)
{
	const char *e = ns->ext ? ns->ext : dataset_ext(ns->ds, s);
	size_t room = strlen(key_base(dataset_key(ns->ds, s))) +
		      strlen(suffix) + strlen(e) + 2;
	char *name = xmalloc(room);

	ns_write_name(name, ns->ds, s, ns->ext, suffix);
	if (ns->nrenamed == ns->caprenamed) {
		ns->caprenamed = ns->caprenamed ? 2 * ns->caprenamed : 16;
		ns->renamed = xrealloc(ns->renamed,
				       ns->caprenamed * sizeof(*ns->renamed));
	}
	ns->renamed[ns->nrenamed++] = name;
	return name;
}

/* The first pair shown (in the rank's part) for the warning: f[i] is
 * renamed, the file at the head of its run of marked ones keeps the name. */
static void note_pair(struct namespace *ns, const struct ns_file *f, size_t i,
		      const unsigned char *dup)
{
	size_t k = i;

	if (ns->counts.dup_first != ns->counts.dup_again ||
	    !dataset_in_part(ns->ds, f[i].sample))
		return;
	while (k > 0 && dup[k])
		k--;
	ns->counts.dup_first = f[k].sample;
	ns->counts.dup_again = f[i].sample;
}

/* Give every file of one class's sorted run whose name repeats the one
 * before it a unique name: "_dup<sample>", unique among renamed files;
 * should that name be another file's own, a later round adds "_<round>".
 * The run is sorted by name, then sample number: the first in index order
 * keeps the name, whatever the order shards arrive in. Leaves the run
 * sorted. seen marks samples renamed already. Returns how many files were
 * renamed for the first time. */
size_t ns_rename_duplicates(struct namespace *ns, struct ns_file *f, size_t n,
			    unsigned char *seen)
{
	char suffix[NS_SUFFIX_ROOM];
	unsigned char *dup;
	size_t renamed = 0;

	if (n < 2)
		return 0;
	dup = xcalloc(n, 1);
	for (unsigned round = 0; round < NS_DUP_ROUNDS; round++) {
		if (!mark_duplicates(f, n, dup))
			break;
		for (size_t i = 1; i < n; i++) {
			uint32_t s = f[i].sample;
			if (!dup[i])
				continue;
			if (!round)
				note_pair(ns, f, i, dup);
			ns_dup_suffix(suffix, s, round);
			f[i].name = ns_renamed_name(ns, s, suffix);
			renamed += !(seen[s / 8] & (1u << (s % 8)));
			seen[s / 8] |= (unsigned char)(1u << (s % 8));
		}
		qsort(f, n, sizeof(*f), ns_file_cmp);
	}
	free(dup);
	return renamed;
}

static char *class_name(int numeric, const struct build_class *c, int width)
{
	char buf[32];
	if (!numeric)
		return xstrdup(c->label);
	snprintf(buf, sizeof(buf), "%0*llu", width, (unsigned long long)c->num);
	return xstrdup(buf);
}

/* The classes in rank order (every class of the whole dataset gets its
 * directory, empty where this rank's view has none, so class numbers agree
 * on every rank). */
static void name_classes(struct namespace *ns, const struct class_table *t)
{
	char digits[32];
	uint64_t max_label = 0;
	int width;

	for (size_t id = 0; id < t->n; id++)
		if (t->c[id].num > max_label)
			max_label = t->c[id].num;
	width = snprintf(digits, sizeof(digits), "%llu",
			 (unsigned long long)max_label);
	ns->classes = xcalloc(t->n ? t->n : 1, sizeof(*ns->classes));
	for (size_t id = 0; id < t->n; id++) {
		struct ns_class *c = &ns->classes[t->c[id].rank];
		c->name = class_name(ns->numeric_labels, &t->c[id], width);
		c->count = (uint32_t)t->c[id].shown;
	}
	ns->nclasses = t->n;
}

#define PREFETCH_AHEAD 8

/* One class's sorted, unique run f[0 .. n) cut to the rank's view, moved
 * to ns->files[ns->nfiles ...] (never past what it reads); the renamed
 * files kept are counted. */
static void keep_view(struct namespace *ns, struct ns_class *c,
		      const struct ns_file *f, size_t n,
		      const unsigned char *seen)
{
	c->first = (uint32_t)ns->nfiles;
	for (size_t k = 0; k < n; k++) {
		uint32_t s = f[k].sample;
		if (!dataset_in_view(ns->ds, s))
			continue;
		if (seen[s / 8] & (1u << (s % 8))) {
			ns->counts.renamed_duplicates++;
			ns->counts.duplicate_keys++;
		}
		ns->files[ns->nfiles++] = f[k];
	}
	c->count = (uint32_t)(ns->nfiles - c->first);
}

/* Pass 4, class by class: the files of its run in order, their names
 * written side by side, sorted by name and made unique, then cut to the
 * view. Returns the bytes the names took. */
static size_t fill_files(struct namespace *ns, const uint32_t *order)
{
	unsigned char *seen = xcalloc(dataset_nsamples(ns->ds) / 8 + 1, 1);
	char *p = ns->names;
	size_t at = 0;

	for (size_t r = 0; r < ns->nclasses; r++) {
		struct ns_class *c = &ns->classes[r];
		struct ns_file *f = &ns->files[at]; /* at or past ns->nfiles */
		size_t n = c->count;
		for (size_t k = 0; k < n; k++) {
			uint32_t s = order[at + k];
			/* The samples of a class lie far apart in the index:
			 * ask for a later one's key now, so that its cache
			 * miss overlaps this name's work. */
			if (k + PREFETCH_AHEAD < n)
				__builtin_prefetch(dataset_key(
					ns->ds,
					order[at + k + PREFETCH_AHEAD]));
			f[k] = (struct ns_file){p, s, (uint32_t)r};
			p += ns_write_name(p, ns->ds, s, ns->ext, "") + 1;
		}
		qsort(f, n, sizeof(*f), ns_file_cmp);
		IGNORE_RESULT(ns_rename_duplicates(ns, f, n, seen));
		keep_view(ns, c, f, n, seen);
		at += n;
	}
	free(seen);
	return (size_t)(p - ns->names);
}

static void free_build(struct label_set *ls, uint32_t *cls,
		       struct class_table *t, uint32_t *order, size_t map_order)
{
	free(ls->label);
	free(ls->slot);
	free(cls);
	free(t->slot);
	free(t->c);
	bigmap_free(order, map_order);
}

int ns_open(const struct dataset *ds, const char *ext, struct namespace **out)
{
	size_t nsamples = dataset_nsamples(ds), shown, map_order = 0;
	struct label_set ls = {0};
	struct class_table t = {0};
	uint32_t *cls = NULL, *order = NULL;
	struct namespace *ns;
	int r = -ENOMEM;

	*out = NULL;
	if (nsamples >= UINT32_MAX - NS_INO_FIRST_CLASS)
		return -EOVERFLOW;
	ns = xcalloc(1, sizeof(*ns));
	ns->ds = ds;
	ns->ext = ext && strlen(ext) <= 7 ? ext : NULL;
	ns->class_of =
		bigmap_alloc(nsamples * sizeof(uint32_t), &ns->map_class_of);
	if (!ns->class_of || (r = find_labels(ns, &ls)) != 0)
		goto fail;
	cls = find_classes(ns, &ls, &t);
	shown = count_shown(ns, cls, &t);
	/* Room for every name at its longest; the unused rest is unmapped. */
	ns->names = bigmap_alloc(shown * (NAME_LEN_MAX + 1), &ns->map_names);
	order = bigmap_alloc(shown * sizeof(*order), &map_order);
	ns->files = bigmap_alloc(shown * sizeof(*ns->files), &ns->map_files);
	r = -ENOMEM;
	if (!ns->names || !order || !ns->files)
		goto fail;
	rank_classes(&t);
	bucket(ns, &t, order);
	name_classes(ns, &t);
	bigmap_trim(ns->names, fill_files(ns, order), &ns->map_names);
	bigmap_trim(ns->files, ns->nfiles * sizeof(*ns->files), &ns->map_files);
	ns->root_dirs = (uint32_t)ns->nclasses;
	free_build(&ls, cls, &t, order, map_order);
	*out = ns;
	return 0;
fail:
	free_build(&ls, cls, &t, order, map_order);
	ns_free(ns);
	return r;
}

void ns_free(struct namespace *ns)
{
	if (!ns)
		return;
	for (size_t i = 0; i < ns->nclasses; i++)
		free((char *)ns->classes[i].name);
	free(ns->classes);
	bigmap_free(ns->files, ns->map_files);
	bigmap_free(ns->class_of, ns->map_class_of);
	bigmap_free(ns->names, ns->map_names);
	for (size_t i = 0; i < ns->nrenamed; i++)
		free(ns->renamed[i]);
	free(ns->renamed);
	free(ns);
}

uint64_t ns_class_ino(const struct namespace *ns, uint32_t cls)
{
	(void)ns;
	return NS_INO_FIRST_CLASS + (uint64_t)cls;
}

uint64_t ns_file_ino(const struct namespace *ns, uint32_t file)
{
	return NS_INO_FIRST_CLASS + ns->nclasses + (uint64_t)file;
}

enum ns_kind ns_kind_of(const struct namespace *ns, uint64_t ino, uint32_t *num)
{
	if (ino == NS_INO_ROOT)
		return NS_ROOT;
	if (ino == NS_INO_CONTROL_DIR)
		return NS_CONTROL_DIR;
	if (ino >= NS_INO_STATS &&
	    ino < NS_INO_STATS + ARRAY_SIZE(control_names))
		return NS_CONTROL_FILE;
	if (ino < NS_INO_FIRST_CLASS)
		return NS_NONE;
	ino -= NS_INO_FIRST_CLASS;
	if (ino < ns->nclasses) {
		*num = (uint32_t)ino;
		return NS_CLASS;
	}
	ino -= ns->nclasses;
	if (ino < ns->nfiles) {
		*num = (uint32_t)ino;
		return NS_FILE;
	}
	return NS_NONE;
}

/* Directory name among classes [lo, hi), sorted by name. */
static uint64_t find_class(const struct namespace *ns, size_t lo, size_t hi,
			   const char *name)
{
	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;
		int c = strcmp(name, ns->classes[mid].name);
		if (c == 0)
			return ns_class_ino(ns, (uint32_t)mid);
		if (c < 0)
			hi = mid;
		else
			lo = mid + 1;
	}
	return 0;
}

/* File name among files [lo, hi), sorted by name. */
static uint64_t find_file(const struct namespace *ns, size_t lo, size_t hi,
			  const char *name)
{
	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;
		int c = strcmp(name, ns->files[mid].name);
		if (c == 0)
			return ns_file_ino(ns, (uint32_t)mid);
		if (c < 0)
			hi = mid;
		else
			lo = mid + 1;
	}
	return 0;
}

uint64_t ns_lookup(const struct namespace *ns, uint64_t parent,
		   const char *name)
{
	const struct ns_class *c;
	uint64_t ino;
	uint32_t num;

	switch (ns_kind_of(ns, parent, &num)) {
	case NS_ROOT:
		if (strcmp(name, NS_CONTROL_DIR_NAME) == 0)
			return NS_INO_CONTROL_DIR;
		ino = find_class(ns, 0, ns->root_dirs, name);
		return ino ? ino
			   : find_file(ns, ns->root_first,
				       (size_t)ns->root_first + ns->root_files,
				       name);
	case NS_CONTROL_DIR:
		for (size_t i = 0; i < ARRAY_SIZE(control_names); i++)
			if (strcmp(name, control_names[i]) == 0)
				return NS_INO_STATS + i;
		return 0;
	case NS_CLASS:
		c = &ns->classes[num];
		ino = find_class(ns, c->sub_first,
				 (size_t)c->sub_first + c->sub_count, name);
		return ino ? ino
			   : find_file(ns, c->first, (size_t)c->first + c->count,
				       name);
	default:
		return 0;
	}
}

/* Entry i of a directory whose subdirectories are classes [dirs, dirs +
 * ndirs) and files [files, files + nfiles). */
static uint64_t list_dir(const struct namespace *ns, size_t i, uint32_t dirs,
			 uint32_t ndirs, uint32_t files, uint32_t nfiles,
			 const char **name, int *is_dir)
{
	if (i < ndirs) {
		*name = ns->classes[dirs + i].name;
		*is_dir = 1;
		return ns_class_ino(ns, (uint32_t)(dirs + i));
	}
	i -= ndirs;
	if (i >= nfiles)
		return 0;
	*name = ns->files[files + i].name;
	*is_dir = 0;
	return ns_file_ino(ns, (uint32_t)(files + i));
}

uint64_t ns_list(const struct namespace *ns, uint64_t dir, size_t i,
		 const char **name, int *is_dir)
{
	uint32_t num;

	switch (ns_kind_of(ns, dir, &num)) {
	case NS_ROOT:
		return list_dir(ns, i, 0, ns->root_dirs, ns->root_first,
				ns->root_files, name, is_dir);
	case NS_CONTROL_DIR:
		if (i >= ARRAY_SIZE(control_names))
			return 0;
		*name = control_names[i];
		*is_dir = 0;
		return NS_INO_STATS + i;
	case NS_CLASS:
		return list_dir(ns, i, ns->classes[num].sub_first,
				ns->classes[num].sub_count,
				ns->classes[num].first, ns->classes[num].count,
				name, is_dir);
	default:
		return 0;
	}
}

uint64_t ns_file_size(const struct namespace *ns, uint32_t file)
{
	return dataset_size(ns->ds, ns->files[file].sample);
}

uint32_t ns_sample_class(const struct namespace *ns, uint32_t sample)
{
	return ns->class_of && sample < dataset_nsamples(ns->ds)
		       ? ns->class_of[sample]
		       : NS_NO_CLASS;
}

const char *ns_dir_name(const struct namespace *ns, uint32_t cls)
{
	return cls < ns->nclasses ? ns->classes[cls].name : "";
}
