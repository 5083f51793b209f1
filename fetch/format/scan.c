/* scan.c - group one shard's tar members into WebDataset samples and add
 * them to an index (see scan.h). */
#include "fetch/format/scan.h"

#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "common/util.h"
#include "fetch/format/index.h"
#include "fetch/format/tar.h"

/* Reasons are a small fixed set of static strings (tar.h and below). */
#define MAX_REASONS 32

struct reason {
	const char *what;
	uint64_t n;
};

struct scan {
	struct index *ix;
	uint32_t shard;
	struct tar_parser *tp;
	struct scan_counts c;
	struct reason reasons[MAX_REASONS];
	size_t nreasons;
	/* The current group of adjacent members sharing a key. */
	bool in_group, has_image, has_cls, cls_bad;
	size_t keylen;
	uint64_t img_off, img_size;
	char img_ext[8];
	char cls[24];
	char key[TAR_NAME_MAX + 1];
	char label[TAR_NAME_MAX + 1];
};

static void skip(struct scan *s, const char *what)
{
	size_t i;

	for (i = 0; i < s->nreasons; i++) {
		if (s->reasons[i].what == what ||
		    strcmp(s->reasons[i].what, what) == 0) {
			s->reasons[i].n++;
			return;
		}
	}
	if (s->nreasons == MAX_REASONS) {
		s->reasons[MAX_REASONS - 1].what = "other";
		s->reasons[MAX_REASONS - 1].n++;
		return;
	}
	s->reasons[s->nreasons].what = what;
	s->reasons[s->nreasons].n = 1;
	s->nreasons++;
}

static bool is_image_ext(const char *ext)
{
	static const char *const exts[] = {"jpg", "jpeg", "png", "ppm", "webp"};
	for (size_t i = 0; i < ARRAY_SIZE(exts); i++)
		if (strcasecmp(ext, exts[i]) == 0)
			return true;
	return false;
}

static void lower_copy(char *dst, const char *src)
{
	do {
		*dst++ = (char)(*src >= 'A' && *src <= 'Z' ? *src + 32 : *src);
	} while (*src++);
}

/* A label file holds one non-negative decimal integer, maybe padded with
 * whitespace; it is stored in canonical form ("007" -> "7"). */
static bool parse_cls(const uint8_t *d, uint64_t size, char *out, size_t cap)
{
	static const char ws[] = " \t\r\n\v\f";
	const char *b = (const char *)d;
	size_t lo = 0, hi = (size_t)size;
	uint64_t v;

	if (!d)
		return false;
	while (lo < hi && b[lo] && strchr(ws, b[lo]))
		lo++;
	while (hi > lo && b[hi - 1] && strchr(ws, b[hi - 1]))
		hi--;
	if (parse_u64_n(b + lo, hi - lo, &v))
		return false;
	snprintf(out, cap, "%llu", (unsigned long long)v);
	return true;
}

/* Label from the image's parent directory: the last directory component of
 * the key (key and image share their directory part). */
static bool dir_label(struct scan *s)
{
	const char *k = s->key, *end = NULL, *start;
	size_t i;

	for (i = s->keylen; i > 0; i--) {
		if (k[i - 1] == '/') {
			end = k + i - 1;
			break;
		}
	}
	if (!end)
		return false;
	start = end;
	while (start > k && start[-1] != '/')
		start--;
	if (start == end)
		return false;
	memcpy(s->label, start, (size_t)(end - start));
	s->label[end - start] = '\0';
	return true;
}

static void flush(struct scan *s)
{
	const char *label = s->label;

	if (!s->in_group)
		return;
	s->in_group = false;
	if (!s->has_image) {
		s->c.skipped_no_image++;
		skip(s, "no image");
		return;
	}
	if (s->has_cls && s->cls_bad) {
		s->c.skipped_bad_label++;
		skip(s, "bad label");
		return;
	}
	if (s->has_cls) {
		label = s->cls;
	} else if (!dir_label(s)) {
		s->c.skipped_no_label++;
		skip(s, "no label");
		return;
	}
	if (index_add_sample(s->ix, s->shard, s->img_off, s->img_size, label,
			     s->key, s->img_ext)) {
		/* The tar claims more than the shard's recorded size. */
		skip(s, "outside the shard's size");
		return;
	}
	s->c.samples++;
}

static void start_group(struct scan *s, const char *name, size_t keylen)
{
	flush(s);
	memcpy(s->key, name, keylen);
	s->key[keylen] = '\0';
	s->keylen = keylen;
	s->in_group = true;
	s->has_image = s->has_cls = s->cls_bad = false;
}

static void add_member(struct scan *s, const struct tar_entry *e,
		       const char *ext)
{
	const char *last = strrchr(ext, '.');

	last = last ? last + 1 : ext;
	if (strcasecmp(ext, "cls") == 0) {
		if (s->has_cls)
			return; /* a second label file: the first one counts */
		s->has_cls = true;
		s->cls_bad = !parse_cls(e->small_data, e->size, s->cls,
					sizeof(s->cls));
	} else if (is_image_ext(last)) {
		if (s->has_image) {
			s->c.extra_images++;
			skip(s, "extra image");
			return;
		}
		s->has_image = true;
		s->img_off = e->data_offset;
		s->img_size = e->size;
		lower_copy(s->img_ext, last); /* fits: one of is_image_ext */
	}
}

/* Every member goes into the index's member list (the samples layout),
 * labelled or not; one whose name the index refuses is counted. */
static void list_member(struct scan *s, const struct tar_entry *e,
			const char *ext)
{
	const struct index_shard *sh = &s->ix->shards[s->shard];

	if (index_add_member(s->ix, s->shard, e->data_offset, e->size, s->key,
			     ext) == 0)
		return;
	s->c.unlisted_members++;
	/* A member past the recorded size is the tar's fault, said once
	 * (flush) when it is the image, not a name to report. */
	if (e->size <= sh->size && e->data_offset <= sh->size - e->size)
		skip(s, "member name unfit for the samples layout");
}

/* Whether a directory component of name is hidden (starts with '.'), as
 * ImageFolder and ls take it: ".git/x.jpg" or "c/.ipynb_checkpoints/x.jpg"
 * is no class and no sample. (A hidden last component has no key.) */
static bool hidden_dir(const char *name)
{
	for (const char *p = name, *slash; (slash = strchr(p, '/')) != NULL;
	     p = slash + 1)
		if (p[0] == '.')
			return true;
	return false;
}

static int on_entry(void *ud, const struct tar_entry *e)
{
	struct scan *s = ud;
	const char *base, *dot;

	s->c.members++;
	if (e->reject) {
		s->c.skipped_members++;
		skip(s, e->reject);
		return 0;
	}
	if (hidden_dir(e->name)) {
		s->c.skipped_members++;
		skip(s, "hidden name");
		return 0;
	}
	base = strrchr(e->name, '/');
	base = base ? base + 1 : e->name;
	dot = strchr(base, '.');
	/* WebDataset ignores such members without ending the group. */
	if (!dot || dot == base || dot[1] == '\0') {
		s->c.skipped_members++;
		skip(s, !dot || dot[1] == '\0' ? "no extension" : "no key");
		return 0;
	}
	if (!s->in_group || s->keylen != (size_t)(dot - e->name) ||
	    memcmp(s->key, e->name, s->keylen) != 0)
		start_group(s, e->name, (size_t)(dot - e->name));
	list_member(s, e, dot + 1);
	add_member(s, e, dot + 1);
	return 0;
}

struct scan *scan_new(struct index *ix, uint32_t shard)
{
	struct scan *s = xcalloc(1, sizeof(*s));
	s->ix = ix;
	ix->has_members = true; /* it lists every member it adds */
	s->shard = shard;
	s->tp = tar_parser_new(on_entry, s);
	return s;
}

void scan_free(struct scan *s)
{
	if (!s)
		return;
	tar_parser_free(s->tp);
	free(s);
}

int scan_feed(struct scan *s, const void *buf, size_t len)
{
	return tar_parser_feed(s->tp, buf, len);
}

int scan_finish(struct scan *s)
{
	int r = tar_parser_finish(s->tp);
	if (r)
		return r;
	flush(s);
	return 0;
}

const char *scan_error(const struct scan *s)
{
	return tar_parser_error(s->tp);
}

const struct scan_counts *scan_counts(const struct scan *s)
{
	return &s->c;
}

void scan_for_each_skip(const struct scan *s,
			void (*fn)(void *ud, const char *reason, uint64_t n),
			void *ud)
{
	for (size_t i = 0; i < s->nreasons; i++)
		fn(ud, s->reasons[i].what, s->reasons[i].n);
}
