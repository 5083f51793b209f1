/* index_bin_tree.c - the tree a binary index carries, decided when it is
 * written: classes in name order and each class's file names sorted, with
 * repeated names renamed, by the rules fs/namespace.c applies to a text
 * index (so a tree read in place is the tree a text index builds):
 * - a label that cannot be a directory ("", ".", "..", ".echofs", one
 *   with '/') gives no class; its samples are in no directory;
 * - when every sample's label is a decimal number, classes are one per
 *   value ("1" and "01" alike), named by the value zero-padded to the
 *   widest; otherwise one per label, named by it;
 * - a file is "<key's last component>.<ext>"; within a class, by name then
 *   sample number; a name repeating the one before it becomes
 *   "<base>_dup<sample>.<ext>" (a later round "_dup<sample>_<round>"),
 *   the base cut at a UTF-8 boundary to keep the name within 255 bytes.
 * Decided on the whole index, so every rank reads the same names. */
#include "fetch/format/index_bin_int.h"

#include "common/util.h"
#include "fetch/format/index.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define NAME_MAX_BYTES 255    /* as fs/namespace_int.h's NAME_LEN_MAX */
#define DUP_ROUNDS 8	      /* as NS_DUP_ROUNDS */
#define SUFFIX_ROOM 24	      /* as NS_SUFFIX_ROOM */
#define CONTROL_DIR ".echofs" /* as NS_CONTROL_DIR_NAME */

uint32_t ibin_str_add(struct ibin_tree *t, const char *s, size_t len)
{
	size_t at = t->len;

	if (at + len + 1 > UINT32_MAX)
		return IBIN_NONE;
	if (at + len + 1 > t->cap) {
		t->cap = t->cap ? t->cap : 4096;
		while (t->cap < at + len + 1)
			t->cap *= 2;
		t->str = xrealloc(t->str, t->cap);
	}
	memcpy(t->str + at, s, len);
	t->str[at + len] = '\0';
	t->len = at + len + 1;
	return (uint32_t)at;
}

static bool label_ok(const char *l)
{
	return l[0] && strcmp(l, ".") != 0 && strcmp(l, "..") != 0 &&
	       strcmp(l, CONTROL_DIR) != 0 && !strchr(l, '/');
}

/* One distinct label (a names id's) while classes are found. */
struct lab {
	const char *label;
	uint64_t num;
	uint32_t names; /* a names id with this label */
};

static int lab_cmp(const void *a, const void *b, void *arg)
{
	const struct lab *x = a, *y = b;
	int c;

	if (*(const bool *)arg && x->num != y->num)
		return x->num < y->num ? -1 : 1;
	c = strcmp(x->label, y->label);
	return c ? c : (x->names > y->names) - (x->names < y->names);
}

/* The names ids samples use, and whether all their labels are numbers. */
static struct lab *used_labels(const struct index *ix, size_t *n, bool *numeric)
{
	bool *used = xcalloc(ix->nnames + 1, 1);
	struct lab *v = xmalloc((ix->nnames + 1) * sizeof(*v));

	for (size_t i = 0; i < ix->nsamples; i++)
		used[ix->samples[i].names] = true;
	*n = 0;
	*numeric = ix->nsamples > 0;
	for (uint32_t id = 0; id < ix->nnames; id++) {
		if (!used[id])
			continue;
		v[*n] = (struct lab){.label = ix->names[id].label, .names = id};
		if (parse_u64(v[*n].label, &v[*n].num) != 0)
			*numeric = false;
		(*n)++;
	}
	free(used);
	return v;
}

/* The class of every names id (IBIN_NONE: none) from the sorted labels;
 * one class per value (numeric) or per label. */
static uint32_t *make_classes(struct ibin_tree *t, const struct index *ix,
			      struct lab *v, size_t n, int *r)
{
	uint32_t *of = xmalloc((ix->nnames + 1) * sizeof(*of));
	char digits[32];
	int width = 0;

	for (size_t id = 0; id < ix->nnames; id++)
		of[id] = IBIN_NONE;
	qsort_r(v, n, sizeof(*v), lab_cmp, &t->numeric);
	if (t->numeric && n)
		width = snprintf(digits, sizeof(digits), "%llu",
				 (unsigned long long)v[n - 1].num);
	t->classes = xcalloc(n + 1, sizeof(*t->classes));
	for (size_t k = 0; k < n && !*r; k++) {
		struct ibin_class *c;
		bool same =
			k > 0 && t->nclasses > 0 &&
			(t->numeric ? v[k].num == v[k - 1].num
				    : strcmp(v[k].label, v[k - 1].label) == 0);
		if (!label_ok(v[k].label))
			continue;
		c = &t->classes[same ? t->nclasses - 1 : t->nclasses];
		if (!same) {
			t->nclasses++;
			c->label =
				ibin_str_add(t, v[k].label, strlen(v[k].label));
			if (t->numeric)
				snprintf(digits, sizeof(digits), "%0*llu",
					 width, (unsigned long long)v[k].num);
			c->name = t->numeric ? ibin_str_add(t, digits,
							    strlen(digits))
					     : c->label;
			if (c->label == IBIN_NONE || c->name == IBIN_NONE)
				*r = -EOVERFLOW;
		}
		of[v[k].names] = (uint32_t)(c - t->classes);
	}
	return of;
}

static const char *key_base(const char *key)
{
	const char *slash = strrchr(key, '/');
	return slash ? slash + 1 : key;
}

/* "<base><suffix>.<ext>" (fs/namespace.c's ns_write_name) as a string. */
static uint32_t add_name(struct ibin_tree *t, const struct index *ix,
			 uint32_t s, const char *suffix)
{
	const struct index_sample *x = &ix->samples[s];
	const char *base = key_base(index_key(ix, x)), *e = index_ext(ix, x);
	size_t bl = strlen(base), el = strlen(e), sl = strlen(suffix);
	char buf[2 * NAME_MAX_BYTES + SUFFIX_ROOM + 2];

	if (bl + sl + 1 + el > NAME_MAX_BYTES && sl + 1 + el < NAME_MAX_BYTES) {
		bl = NAME_MAX_BYTES - sl - 1 - el;
		while (bl > 0 && ((unsigned char)base[bl] & 0xc0) == 0x80)
			bl--;
	}
	if (bl + sl + 1 + el >= sizeof(buf))
		return IBIN_NONE; /* index.h's rules keep names far below */
	memcpy(buf, base, bl);
	memcpy(buf + bl, suffix, sl);
	buf[bl + sl] = '.';
	memcpy(buf + bl + sl + 1, e, el);
	return ibin_str_add(t, buf, bl + sl + 1 + el);
}

static int file_cmp(const void *a, const void *b, void *arg)
{
	const struct ibin_tree *t = arg;
	uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
	int c = strcmp(t->str + t->name[x], t->str + t->name[y]);

	return c ? c : (x > y) - (x < y);
}

/* One class's run f[0 .. n), sorted, made unique by rounds of renames. */
static int rename_run(struct ibin_tree *t, const struct index *ix, uint32_t *f,
		      size_t n)
{
	char suffix[SUFFIX_ROOM];
	unsigned char *dup = xcalloc(n + 1, 1);
	int r = 0;

	qsort_r(f, n, sizeof(*f), file_cmp, t);
	for (unsigned round = 0; round < DUP_ROUNDS && !r; round++) {
		size_t marked = 0;
		for (size_t i = 1; i < n; i++) {
			dup[i] = strcmp(t->str + t->name[f[i - 1]],
					t->str + t->name[f[i]]) == 0;
			marked += dup[i];
		}
		if (!marked)
			break;
		for (size_t i = 1; i < n && !r; i++) {
			if (!dup[i])
				continue;
			if (round)
				snprintf(suffix, sizeof(suffix), "_dup%u_%u",
					 f[i], round);
			else
				snprintf(suffix, sizeof(suffix), "_dup%u",
					 f[i]);
			t->name[f[i]] = add_name(t, ix, f[i], suffix);
			if (t->name[f[i]] == IBIN_NONE)
				r = -EOVERFLOW;
		}
		if (!r)
			qsort_r(f, n, sizeof(*f), file_cmp, t);
	}
	free(dup);
	return r;
}

/* Samples bucketed by class (counting sort, sample order within), each
 * named, each class's run sorted and made unique. */
static int fill_order(struct ibin_tree *t, const struct index *ix,
		      const uint32_t *of)
{
	size_t *next = xcalloc(t->nclasses + 1, sizeof(*next)), at = 0;
	int r = 0;

	t->cls = xmalloc((ix->nsamples + 1) * sizeof(*t->cls));
	t->name = xmalloc((ix->nsamples + 1) * sizeof(*t->name));
	for (uint32_t s = 0; s < ix->nsamples; s++) {
		t->cls[s] = of[ix->samples[s].names];
		t->name[s] = IBIN_NONE;
		if (t->cls[s] != IBIN_NONE)
			t->classes[t->cls[s]].count++;
	}
	for (size_t c = 0; c < t->nclasses; c++) {
		t->classes[c].first = (uint32_t)at;
		next[c] = at;
		at += t->classes[c].count;
	}
	t->norder = at;
	t->order = xmalloc((at + 1) * sizeof(*t->order));
	for (uint32_t s = 0; s < ix->nsamples && !r; s++) {
		if (t->cls[s] == IBIN_NONE)
			continue;
		t->order[next[t->cls[s]]++] = s;
		t->name[s] = add_name(t, ix, s, "");
		if (t->name[s] == IBIN_NONE)
			r = -EOVERFLOW;
	}
	for (size_t c = 0; c < t->nclasses && !r; c++)
		r = rename_run(t, ix, t->order + t->classes[c].first,
			       t->classes[c].count);
	free(next);
	return r;
}

int ibin_tree_build(struct ibin_tree *t, const struct index *ix)
{
	size_t n;
	struct lab *v;
	uint32_t *of;
	int r = 0;

	if (ix->nsamples >= IBIN_NONE)
		return -EOVERFLOW;
	v = used_labels(ix, &n, &t->numeric);
	of = make_classes(t, ix, v, n, &r);
	if (!r)
		r = fill_order(t, ix, of);
	free(of);
	free(v);
	return r;
}

void ibin_tree_clear(struct ibin_tree *t)
{
	free(t->str);
	free(t->cls);
	free(t->name);
	free(t->classes);
	free(t->order);
	memset(t, 0, sizeof(*t));
}
