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
	uint64_t num;      /* numeric label, when every label is numeric */
	const char *label; /* borrowed from the dataset */
	char *name;        /* in the names buffer */
	uint32_t sample;
	int in_view;       /* a file of this rank (else only its class shows) */
};

/* qsort_r comparator; arg points at the namespace's numeric_labels. */
static int ent_cmp(const void *a, const void *b, void *arg)
{
	const struct ent *x = a, *y = b;
	int c;
	if (*(const int *)arg) {
		if (x->num != y->num)
			return x->num < y->num ? -1 : 1;
	} else if ((c = strcmp(x->label, y->label)) != 0) {
		return c;
	}
	if ((c = strcmp(x->name, y->name)) != 0)
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

#define SUFFIX_ROOM 24 /* "_dup" + 10 digits + "_" + 2 digits + NUL, rounded */
#define EXT_ROOM 8     /* an extension override: up to 7 bytes + '.' */
#define NAME_LEN_MAX 255 /* what a filesystem takes (cp -r, tar) */
#define DUP_ROUNDS 8     /* renaming passes before giving up on a clash */

/* Bytes kept for one file's name: room for its "_dup" suffix and for an
 * extension override whatever the dataset's extension. */
static size_t name_room(const struct dataset *ds, uint32_t i)
{
	size_t el = strlen(dataset_ext(ds, i));
	return strlen(key_base(dataset_key(ds, i))) + 1 +
	       (el > EXT_ROOM ? el : EXT_ROOM) + SUFFIX_ROOM;
}

/* Room for every file name plus a uniquifying suffix each. */
static size_t names_size(const struct dataset *ds)
{
	size_t total = 1;
	for (uint32_t i = 0; i < dataset_nsamples(ds); i++)
		total += name_room(ds, i);
	return total;
}

/* "<base><suffix>.<ext>" into p, which has room (see name_room), at most
 * NAME_LEN_MAX bytes: a base too long for the suffix and extension is cut
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

/* Fill ents; returns how many were kept. */
static size_t make_ents(struct namespace *ns, struct ent *ents,
			uint64_t *max_label)
{
	const struct dataset *ds = ns->ds;
	char *p = ns->names;
	size_t n = 0;

	*max_label = 0;
	for (uint32_t i = 0; i < dataset_nsamples(ds); i++) {
		const char *label = dataset_label(ds, i);
		struct ent *e = &ents[n];
		if (!label_ok(label)) {
			ns->counts.skipped_bad_label++;
			continue;
		}
		e->label = label;
		e->sample = i;
		e->in_view = dataset_in_view(ds, i);
		e->num = 0;
		if (ns->numeric_labels) {
			parse_u64(label, &e->num);
			if (e->num > *max_label)
				*max_label = e->num;
		}
		e->name = p;
		write_name(p, ds, i, ns->ext, "");
		p += name_room(ds, i);
		n++;
	}
	return n;
}

static int same_class(int numeric, const struct ent *a, const struct ent *b)
{
	return numeric ? a->num == b->num : strcmp(a->label, b->label) == 0;
}

/* Mark in dup every entry whose name repeats the one before it in its class
 * (ents sorted). Marks first, renames after, so runs of three stay caught.
 * Returns how many. */
static size_t mark_duplicates(const struct namespace *ns,
			      const struct ent *ents, size_t n,
			      unsigned char *dup)
{
	size_t marked = 0;

	for (size_t i = 1; i < n; i++) {
		dup[i] = same_class(ns->numeric_labels, &ents[i - 1], &ents[i]) &&
			 strcmp(ents[i - 1].name, ents[i].name) == 0;
		marked += dup[i];
	}
	return marked;
}

/* Give every file whose name repeats the one before it in its class a
 * unique name: "_dup<sample>", unique among renamed files; should that name
 * be another file's own, a later round adds "_<round>". Leaves ents
 * sorted. Returns how many files were renamed. */
static size_t rename_duplicates(const struct namespace *ns, struct ent *ents,
				size_t n)
{
	unsigned char *dup = xcalloc(n ? n : 1, 1);
	unsigned char *seen = xcalloc(dataset_nsamples(ns->ds) / 8 + 1, 1);
	char suffix[SUFFIX_ROOM];
	size_t renamed = 0;

	for (unsigned round = 0; round < DUP_ROUNDS; round++) {
		if (!mark_duplicates(ns, ents, n, dup))
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
			write_name(ents[i].name, ns->ds, s, ns->ext, suffix);
			renamed += !(seen[s / 8] & (1u << (s % 8)));
			seen[s / 8] |= (unsigned char)(1u << (s % 8));
		}
		qsort_r(ents, n, sizeof(*ents), ent_cmp,
			(void *)&ns->numeric_labels);
	}
	free(seen);
	free(dup);
	return renamed;
}

static char *class_name(int numeric, const struct ent *e, int width)
{
	char buf[32];
	if (!numeric)
		return xstrdup(e->label);
	snprintf(buf, sizeof(buf), "%0*llu", width, (unsigned long long)e->num);
	return xstrdup(buf);
}

static void group(struct namespace *ns, const struct ent *ents, size_t n,
		  uint64_t max_label)
{
	char digits[32];
	int width = snprintf(digits, sizeof(digits), "%llu",
			     (unsigned long long)max_label);
	size_t cap = 16;

	ns->classes = xcalloc(cap, sizeof(*ns->classes));
	ns->files = xcalloc(n ? n : 1, sizeof(*ns->files));
	/* Every class of the whole dataset gets its directory, empty where
	 * this rank's view has none, so class numbers agree on every rank. */
	for (size_t i = 0; i < n; i++) {
		if (i == 0 ||
		    !same_class(ns->numeric_labels, &ents[i - 1], &ents[i])) {
			if (ns->nclasses == cap) {
				cap *= 2;
				ns->classes = xrealloc(ns->classes,
					cap * sizeof(*ns->classes));
			}
			ns->classes[ns->nclasses].name = class_name(ns->numeric_labels, &ents[i], width);
			ns->classes[ns->nclasses].first = (uint32_t)ns->nfiles;
			ns->classes[ns->nclasses].count = 0;
			ns->nclasses++;
		}
		ns->class_of[ents[i].sample] = (uint32_t)(ns->nclasses - 1);
		if (!ents[i].in_view)
			continue;
		ns->classes[ns->nclasses - 1].count++;
		ns->files[ns->nfiles].name = ents[i].name;
		ns->files[ns->nfiles].sample = ents[i].sample;
		ns->files[ns->nfiles].cls = (uint32_t)(ns->nclasses - 1);
		ns->nfiles++;
	}
}

int ns_open(const struct dataset *ds, const char *ext, struct namespace **out)
{
	size_t nsamples = dataset_nsamples(ds);
	struct namespace *ns;
	struct ent *ents;
	uint64_t max_label;
	size_t n;

	*out = NULL;
	if (nsamples >= UINT32_MAX - NS_INO_FIRST_CLASS)
		return -EOVERFLOW;
	ns = xcalloc(1, sizeof(*ns));
	ns->ds = ds;
	ns->ext = ext && strlen(ext) <= 7 ? ext : NULL;
	ns->names = malloc(names_size(ds));
	ents = malloc((nsamples ? nsamples : 1) * sizeof(*ents));
	ns->class_of = malloc((nsamples ? nsamples : 1) * sizeof(uint32_t));
	if (!ns->names || !ents || !ns->class_of) {
		free(ents);
		ns_free(ns);
		return -ENOMEM;
	}
	for (size_t i = 0; i < nsamples; i++)
		ns->class_of[i] = NS_NO_CLASS;
	ns->numeric_labels = all_numeric(ds);
	n = make_ents(ns, ents, &max_label);
	qsort_r(ents, n, sizeof(*ents), ent_cmp, &ns->numeric_labels);
	ns->counts.renamed_duplicates = rename_duplicates(ns, ents, n);
	if (ns->counts.renamed_duplicates)
		qsort_r(ents, n, sizeof(*ents), ent_cmp, &ns->numeric_labels);
	group(ns, ents, n, max_label);
	free(ents);
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

enum ns_kind ns_kind_of(const struct namespace *ns, uint64_t ino,
			uint32_t *num)
{
	if (ino == NS_INO_ROOT)
		return NS_ROOT;
	if (ino == NS_INO_CONTROL_DIR)
		return NS_CONTROL_DIR;
	if (ino >= NS_INO_STATS && ino < NS_INO_STATS + ARRAY_SIZE(control_names))
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
