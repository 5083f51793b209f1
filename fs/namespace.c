/* namespace.c - the virtual ImageFolder tree built from a dataset: class
 * directories, file names, inode numbers, lookups and listings. */
#include "fs/namespace.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cache/dataset.h"
#include "common/util.h"

static const char *const control_names[] = {"stats", "stats.prom", "config"};

/* One file before grouping. */
struct ent {
	char *name; /* in the names buffer, or a renamed copy */
	uint32_t sample;
	uint32_t cls; /* class number: the classes' sorted order */
	int in_view;  /* a file of this rank (else only its class shows) */
};

/* Within one class: by name, then by sample. */
static int ent_cmp(const void *a, const void *b)
{
	const struct ent *x = a, *y = b;
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

#define SUFFIX_ROOM                                                            \
	24		 /* "_dup" + 10 digits + "_" + 2 digits + NUL, rounded \
			  */
#define NAME_LEN_MAX 255 /* what a filesystem takes (cp -r, tar) */
#define DUP_ROUNDS 8	 /* renaming passes before giving up on a clash */

/* "<base><suffix>.<ext>" into p, which has room (name_len, renamed_name), at
 * most NAME_LEN_MAX bytes: a base too long for the suffix and extension is cut
 * (at a UTF-8 character boundary), the same way for the same sample each
 * time. Returns the length written, without the NUL. */
static size_t write_name(char *p, const struct dataset *ds, uint32_t sample,
			 const char *ext, const char *suffix)
{
	const char *base = key_base(dataset_key(ds, sample));
	const char *e = ext ? ext : dataset_ext(ds, sample);
	size_t bl = strlen(base), el = strlen(e), sl = strlen(suffix), len;

	if (bl + sl + 1 + el > NAME_LEN_MAX) {
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

static int all_numeric(const struct dataset *ds)
{
	uint64_t v;
	for (uint32_t i = 0; i < dataset_nsamples(ds); i++)
		if (parse_u64(dataset_label(ds, i), &v) != 0)
			return 0;
	return dataset_nsamples(ds) > 0;
}

/* One class while the tree is built. */
struct build_class {
	const char *label; /* the first sample's, borrowed */
	uint64_t num;	   /* its value when labels are numeric */
	size_t count;	   /* samples, in view or not */
	size_t next;	   /* the next free slot of its run in ents */
	uint32_t rank;	   /* its class number: place in the sorted order */
};

/* The classes met so far, found by label (by value when numeric: "1" and
 * "01" are one class) through an open-addressing table of ids + 1. Hashing
 * labels once each keeps a 14 M-sample, 21,841-class tree from sorting 14 M
 * labels with strcmp. */
struct class_table {
	struct build_class *c;
	size_t n, cap;
	uint32_t *slot; /* id + 1; 0 empty */
	size_t nslots;	/* a power of two, more than twice n */
	int numeric;
	size_t n_ents; /* files placed (samples with a good label) */
};

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

	if (t->numeric)
		parse_u64(label, &num);
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

/* Bytes of one file's name as first written: "<base>.<ext>" and a NUL. */
static size_t name_len(const struct namespace *ns, uint32_t i)
{
	const char *e = ns->ext ? ns->ext : dataset_ext(ns->ds, i);
	return strlen(key_base(dataset_key(ns->ds, i))) + 1 + strlen(e) + 1;
}

/* Pass 1: every sample's class id into class_of (NS_NO_CLASS for a bad
 * label), the classes counted. Returns the bytes the names take. */
static size_t find_classes(struct namespace *ns, struct class_table *t)
{
	const struct dataset *ds = ns->ds;
	size_t bytes = 1;

	for (uint32_t i = 0; i < dataset_nsamples(ds); i++) {
		const char *label = dataset_label(ds, i);
		if (!label_ok(label)) {
			ns->counts.skipped_bad_label++;
			ns->class_of[i] = NS_NO_CLASS;
			continue;
		}
		ns->class_of[i] = class_id(t, label);
		t->c[ns->class_of[i]].count++;
		bytes += name_len(ns, i);
	}
	return bytes;
}

/* Class numbers in sorted label order, each class's run of slots in ents. */
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
		next += c->count;
	}
	free(order);
}

/* Pass 2: each file into its class's run (a counting sort by class, in
 * sample order), its name written; class_of becomes the class number. */
static size_t place_files(struct namespace *ns, struct class_table *t,
			  struct ent *ents)
{
	const struct dataset *ds = ns->ds;
	char *p = ns->names;
	size_t n = 0;

	for (uint32_t i = 0; i < dataset_nsamples(ds); i++) {
		struct build_class *c;
		struct ent *e;
		if (ns->class_of[i] == NS_NO_CLASS)
			continue;
		c = &t->c[ns->class_of[i]];
		e = &ents[c->next++];
		e->name = p;
		e->sample = i;
		e->cls = c->rank;
		e->in_view = dataset_in_view(ds, i);
		ns->class_of[i] = c->rank;
		p += write_name(p, ds, i, ns->ext, "") + 1;
		n++;
	}
	return n;
}

/* Mark in dup every entry of one class's sorted run whose name repeats the
 * one before it. Marks first, renames after, so runs of three stay caught.
 * Returns how many. */
static size_t mark_duplicates(const struct ent *ents, size_t n,
			      unsigned char *dup)
{
	size_t marked = 0;

	for (size_t i = 1; i < n; i++) {
		dup[i] = strcmp(ents[i - 1].name, ents[i].name) == 0;
		marked += dup[i];
	}
	return marked;
}

/* A renamed file's name, in a buffer of its own kept by the namespace. */
static char *renamed_name(struct namespace *ns, uint32_t s, const char *suffix)
{
	const char *e = ns->ext ? ns->ext : dataset_ext(ns->ds, s);
	size_t room = strlen(key_base(dataset_key(ns->ds, s))) +
		      strlen(suffix) + strlen(e) + 2;
	char *name = xmalloc(room);

	write_name(name, ns->ds, s, ns->ext, suffix);
	if (ns->nrenamed == ns->caprenamed) {
		ns->caprenamed = ns->caprenamed ? 2 * ns->caprenamed : 16;
		ns->renamed = xrealloc(ns->renamed,
				       ns->caprenamed * sizeof(*ns->renamed));
	}
	ns->renamed[ns->nrenamed++] = name;
	return name;
}

/* Give every file of one class's sorted run whose name repeats the one
 * before it a unique name: "_dup<sample>", unique among renamed files;
 * should that name be another file's own, a later round adds "_<round>".
 * Leaves the run sorted. seen marks samples renamed already. Returns how
 * many files were renamed for the first time. */
static size_t rename_duplicates(struct namespace *ns, struct ent *ents,
				size_t n, unsigned char *seen)
{
	unsigned char *dup = xcalloc(n ? n : 1, 1);
	char suffix[SUFFIX_ROOM];
	size_t renamed = 0;

	for (unsigned round = 0; round < DUP_ROUNDS; round++) {
		if (!mark_duplicates(ents, n, dup))
			break;
		for (size_t i = 1; i < n; i++) {
			uint32_t s = ents[i].sample;
			if (!dup[i])
				continue;
			if (round)
				snprintf(suffix, sizeof(suffix), "_dup%u_%u", s,
					 round);
			else
				snprintf(suffix, sizeof(suffix), "_dup%u", s);
			ents[i].name = renamed_name(ns, s, suffix);
			renamed += !(seen[s / 8] & (1u << (s % 8)));
			seen[s / 8] |= (unsigned char)(1u << (s % 8));
		}
		qsort(ents, n, sizeof(*ents), ent_cmp);
	}
	free(dup);
	return renamed;
}

/* Sort each class's run by name and rename its duplicates. */
static void sort_classes(struct namespace *ns, const struct class_table *t,
			 struct ent *ents)
{
	unsigned char *seen = xcalloc(dataset_nsamples(ns->ds) / 8 + 1, 1);
	size_t first = 0;

	for (size_t r = 0; r < t->n; r++) {
		/* rank_classes gave the runs in rank order: run r ends where
		 * its class's next slot now points. */
		size_t end = first;
		while (end < t->n_ents && ents[end].cls == r)
			end++;
		qsort(ents + first, end - first, sizeof(*ents), ent_cmp);
		ns->counts.renamed_duplicates +=
			rename_duplicates(ns, ents + first, end - first, seen);
		first = end;
	}
	free(seen);
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
 * on every rank) and the files in view. */
static void group(struct namespace *ns, const struct class_table *t,
		  const struct ent *ents, size_t n)
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
	ns->files = xcalloc(n ? n : 1, sizeof(*ns->files));
	for (size_t id = 0; id < t->n; id++)
		ns->classes[t->c[id].rank].name =
			class_name(ns->numeric_labels, &t->c[id], width);
	ns->nclasses = t->n;
	for (size_t i = 0; i < n; i++) {
		struct ns_class *c = &ns->classes[ents[i].cls];
		if (c->count == 0)
			c->first = (uint32_t)ns->nfiles;
		if (!ents[i].in_view)
			continue;
		c->count++;
		ns->files[ns->nfiles].name = ents[i].name;
		ns->files[ns->nfiles].sample = ents[i].sample;
		ns->files[ns->nfiles].cls = ents[i].cls;
		ns->nfiles++;
	}
}

int ns_open(const struct dataset *ds, const char *ext, struct namespace **out)
{
	size_t nsamples = dataset_nsamples(ds);
	struct class_table t = {0};
	struct namespace *ns;
	struct ent *ents;

	*out = NULL;
	if (nsamples >= UINT32_MAX - NS_INO_FIRST_CLASS)
		return -EOVERFLOW;
	ns = xcalloc(1, sizeof(*ns));
	ns->ds = ds;
	ns->ext = ext && strlen(ext) <= 7 ? ext : NULL;
	ns->class_of = malloc((nsamples ? nsamples : 1) * sizeof(uint32_t));
	if (!ns->class_of) {
		ns_free(ns);
		return -ENOMEM;
	}
	ns->numeric_labels = t.numeric = all_numeric(ds);
	ns->names = malloc(find_classes(ns, &t));
	ents = malloc((nsamples ? nsamples : 1) * sizeof(*ents));
	if (!ns->names || !ents) {
		free(ents);
		free(t.slot);
		free(t.c);
		ns_free(ns);
		return -ENOMEM;
	}
	rank_classes(&t);
	t.n_ents = place_files(ns, &t, ents);
	sort_classes(ns, &t, ents);
	group(ns, &t, ents, t.n_ents);
	free(ents);
	free(t.slot);
	free(t.c);
	*out = ns;
	return 0;
}

void ns_free(struct namespace *ns)
{
	if (!ns)
		return;
	for (size_t i = 0; i < ns->nclasses; i++)
		free((char *)ns->classes[i].name);
	free(ns->classes);
	free(ns->files);
	free(ns->class_of);
	free(ns->names);
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

static uint64_t find_class(const struct namespace *ns, const char *name)
{
	size_t lo = 0, hi = ns->nclasses;
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

static uint64_t find_file(const struct namespace *ns, uint32_t cls,
			  const char *name)
{
	size_t lo = ns->classes[cls].first;
	size_t hi = lo + ns->classes[cls].count;
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
	uint32_t num;

	switch (ns_kind_of(ns, parent, &num)) {
	case NS_ROOT:
		if (strcmp(name, NS_CONTROL_DIR_NAME) == 0)
			return NS_INO_CONTROL_DIR;
		return find_class(ns, name);
	case NS_CONTROL_DIR:
		for (size_t i = 0; i < ARRAY_SIZE(control_names); i++)
			if (strcmp(name, control_names[i]) == 0)
				return NS_INO_STATS + i;
		return 0;
	case NS_CLASS:
		return find_file(ns, num, name);
	default:
		return 0;
	}
}

uint64_t ns_list(const struct namespace *ns, uint64_t dir, size_t i,
		 const char **name, int *is_dir)
{
	uint32_t num;

	switch (ns_kind_of(ns, dir, &num)) {
	case NS_ROOT:
		if (i >= ns->nclasses)
			return 0;
		*name = ns->classes[i].name;
		*is_dir = 1;
		return ns_class_ino(ns, (uint32_t)i);
	case NS_CONTROL_DIR:
		if (i >= ARRAY_SIZE(control_names))
			return 0;
		*name = control_names[i];
		*is_dir = 0;
		return NS_INO_STATS + i;
	case NS_CLASS:
		if (i >= ns->classes[num].count)
			return 0;
		i += ns->classes[num].first;
		*name = ns->files[i].name;
		*is_dir = 0;
		return ns_file_ino(ns, (uint32_t)i);
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
	return sample < dataset_nsamples(ns->ds) ? ns->class_of[sample]
						 : NS_NO_CLASS;
}
