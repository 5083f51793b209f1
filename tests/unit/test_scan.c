/* test_scan.c - WebDataset grouping: keys, images, .cls and directory
 * labels, skips and their reasons. */
#include <criterion/criterion.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fetch/format/index.h"
#include "fetch/format/scan.h"

/* ---- a minimal tar writer ---------------------------------------------- */

struct tb {
	unsigned char *buf;
	size_t len, cap;
};

static void put(struct tb *t, const void *d, size_t n)
{
	if (t->len + n > t->cap) {
		t->cap = (t->len + n) * 2 + 4096;
		t->buf = realloc(t->buf, t->cap);
		cr_assert_not_null(t->buf);
	}
	memcpy(t->buf + t->len, d, n);
	t->len += n;
}

static void member(struct tb *t, const char *name, char type, const char *data,
		   size_t n)
{
	static const unsigned char zero[512];
	unsigned char h[512] = {0};
	unsigned sum = 0;

	memcpy(h, name, strnlen(name, 100));
	snprintf((char *)h + 100, 8, "%07o", 0644);
	snprintf((char *)h + 124, 12, "%011o", (unsigned)n);
	h[156] = (unsigned char)type;
	memcpy(h + 257,
	       "ustar\0"
	       "00",
	       8);
	memset(h + 148, ' ', 8);
	for (int i = 0; i < 512; i++)
		sum += h[i];
	snprintf((char *)h + 148, 8, "%06o", sum);
	put(t, h, 512);
	put(t, data, n);
	if (n % 512)
		put(t, zero, 512 - n % 512);
}

/* ---- cases -------------------------------------------------------------- */

struct m {
	const char *name;
	char type;	  /* 0 means '0' */
	const char *data; /* NULL means "IMG" */
};

struct counts {
	unsigned samples, members, skipped_members, no_image, no_label,
		bad_label, extra_images;
};

struct scase {
	const char *what;
	struct m members[12]; /* ends at the first NULL name */
	const char *samples;  /* "key|label|ext;" per sample, in order */
	struct counts c;
	const char *reasons; /* "reason=n;" in first-seen order */
};

static const struct scase cases[] = {
	{"cls labels",
	 {{"k0.jpg", 0, NULL},
	  {"k0.cls", 0, "3\n"},
	  {"k1.cls", 0, " 007 \r\n"},
	  {"k1.JPG", 0, NULL},
	  {"k2.jpeg", 0, NULL},
	  {"k2.CLS", 0, "0"}},
	 "k0|3|jpg;k1|7|jpg;k2|0|jpeg;",
	 {3, 6, 0, 0, 0, 0, 0},
	 ""},
	{"bad cls",
	 {{"a.jpg", 0, NULL},
	  {"a.cls", 0, "abc"},
	  {"b.jpg", 0, NULL},
	  {"b.cls", 0, "-1"},
	  {"c.jpg", 0, NULL},
	  {"c.cls", 0, "1.5"},
	  {"d.jpg", 0, NULL},
	  {"d.cls", 0, ""},
	  {"e.jpg", 0, NULL},
	  {"e.cls", 0, "99999999999999999999999"}},
	 "",
	 {0, 10, 0, 0, 0, 5, 0},
	 "bad label=5;"},
	{"bad cls does not fall back to the directory",
	 {{"d/a.jpg", 0, NULL}, {"d/a.cls", 0, "x"}},
	 "",
	 {0, 2, 0, 0, 0, 1, 0},
	 "bad label=1;"},
	{"imagenet directories",
	 {{"train/n01440764/n01440764_10026.JPEG", 0, NULL},
	  {"train/n01440764/n01440764_10027.JPEG", 0, NULL},
	  {"n01443537/x.png", 0, NULL}},
	 "train/n01440764/n01440764_10026|n01440764|jpeg;"
	 "train/n01440764/n01440764_10027|n01440764|jpeg;"
	 "n01443537/x|n01443537|png;",
	 {3, 3, 0, 0, 0, 0, 0},
	 ""},
	{"multi-dot names use the last extension",
	 {{"dir/abc.seg.jpg", 0, NULL},
	  {"dir/abc.json", 0, "{}"},
	  {"dir/abc.seg.cls", 0, "5"}},
	 "dir/abc|dir|jpg;",
	 {1, 3, 0, 0, 0, 0, 0},
	 ""},
	{"several images per key",
	 {{"k.jpg", 0, NULL},
	  {"k.png", 0, NULL},
	  {"k.webp", 0, NULL},
	  {"k.cls", 0, "1"}},
	 "k|1|jpg;",
	 {1, 4, 0, 0, 0, 0, 2},
	 "extra image=2;"},
	{"missing labels and images",
	 {{"x.jpg", 0, NULL},
	  {"y.cls", 0, "1"},
	  {"y.txt", 0, "t"},
	  {"d/z.ppm", 0, NULL}},
	 "d/z|d|ppm;",
	 {1, 4, 0, 1, 1, 0, 0},
	 "no label=1;no image=1;"},
	{"non-adjacent repeats are separate samples",
	 {{"d/a.jpg", 0, NULL},
	  {"d/b.jpg", 0, NULL},
	  {"d/a.cls", 0, "4"},
	  {"d/a.jpg", 0, NULL},
	  {"d/b.cls", 0, "5"}},
	 "d/a|d|jpg;d/b|d|jpg;d/a|4|jpg;",
	 {3, 5, 0, 1, 0, 0, 0},
	 "no image=1;"},
	{"rejected members do not split a group",
	 {{"k.jpg", 0, NULL},
	  {"k.lnk", '2', ""},
	  {"../k.cls", 0, "1"},
	  {"k.cls", 0, "2"},
	  {"dir", '5', ""},
	  {"README", 0, "r"},
	  {".hidden.jpg", 0, NULL},
	  {"d/.jpg", 0, NULL},
	  {"k.", 0, "x"}},
	 "k|2|jpg;",
	 {1, 9, 7, 0, 0, 0, 0},
	 "symlink=1;dot-dot component=1;directory=1;no extension=2;no key=2;"},
	{"large cls is a bad label",
	 {{"k.jpg", 0, NULL},
	  {"k.cls", 0,
	   "1                                                               "
	   "                                                                "
	   "                                                                "
	   "                                                                "
	   " "}},
	 "",
	 {0, 2, 0, 0, 0, 1, 0},
	 "bad label=1;"},
	{"first cls wins",
	 {{"k.cls", 0, "1"}, {"k.cls", 0, "2"}, {"k.jpg", 0, NULL}},
	 "k|1|jpg;",
	 {1, 3, 0, 0, 0, 0, 0},
	 ""},
	{"blank class directory is skipped, not a class",
	 {{" /k.jpg", 0, NULL}, {"  /k.cls", 0, "1"}, {"ok/k.jpg", 0, NULL}},
	 "ok/k|ok|jpg;",
	 {1, 3, 2, 0, 0, 0, 0},
	 "blank component=2;"},
	/* ImageFolder skips hidden names: a ".hidden" directory is no class,
	 * and its members do not split a group. */
	{"hidden directories are skipped, not classes",
	 {{"c/k.jpg", 0, NULL},
	  {".hidden/k.jpg", 0, NULL},
	  {"c/.ipynb_checkpoints/k.cls", 0, "1"},
	  {"c/k.txt", 0, "x"},
	  {"c/.git/objects/o.jpg", 0, NULL},
	  {".d/e/m.jpg", 0, NULL},
	  {"e/m.jpg", 0, NULL}},
	 "c/k|c|jpg;e/m|e|jpg;",
	 {2, 7, 4, 0, 0, 0, 0},
	 "hidden name=4;"},
	{"empty shard", {{NULL, 0, NULL}}, "", {0, 0, 0, 0, 0, 0, 0}, ""},
};

struct reasons {
	char text[512];
	size_t n;
};

static void on_skip(void *ud, const char *reason, uint64_t n)
{
	struct reasons *r = ud;
	r->n += (size_t)snprintf(r->text + r->n, sizeof(r->text) - r->n,
				 "%s=%llu;", reason, (unsigned long long)n);
}

static void build(const struct scase *c, struct tb *t)
{
	static const unsigned char zero[1024];
	for (const struct m *m = c->members; m->name; m++) {
		const char *d = m->data ? m->data : "IMG";
		member(t, m->name, m->type ? m->type : '0', d, strlen(d));
	}
	put(t, zero, sizeof(zero));
}

static void check_case(const struct scase *c, size_t chunk)
{
	struct tb t = {0};
	struct index *ix = index_new();
	struct scan *s;
	struct reasons r = {0};
	char got[1024] = "";
	size_t n = 0;

	build(c, &t);
	index_add_shard(ix, "http://h/shard.tar", t.len, "");
	s = scan_new(ix, 0);
	for (size_t off = 0; off < t.len; off += chunk)
		cr_assert_eq(
			scan_feed(s, t.buf + off,
				  t.len - off < chunk ? t.len - off : chunk),
			0, "%s", c->what);
	cr_assert_eq(scan_finish(s), 0, "%s: %s", c->what, scan_error(s));
	for (size_t i = 0; i < ix->nsamples; i++) {
		const struct index_sample *x = &ix->samples[i];
		n += (size_t)snprintf(got + n, sizeof(got) - n, "%s|%s|%s;",
				      index_key(ix, x), index_label(ix, x),
				      index_ext(ix, x));
		/* The recorded bytes are the image member's data. */
		cr_expect_eq(x->size, 3);
		cr_expect_eq(memcmp(t.buf + x->offset, "IMG", 3), 0);
	}
	cr_expect_str_eq(got, c->samples, "%s", c->what);
	const struct scan_counts *k = scan_counts(s);
	cr_expect_eq(k->samples, c->c.samples, "%s: samples", c->what);
	cr_expect_eq(k->members, c->c.members, "%s: members", c->what);
	cr_expect_eq(k->skipped_members, c->c.skipped_members,
		     "%s: skipped members", c->what);
	cr_expect_eq(k->skipped_no_image, c->c.no_image, "%s: no image",
		     c->what);
	cr_expect_eq(k->skipped_no_label, c->c.no_label, "%s: no label",
		     c->what);
	cr_expect_eq(k->skipped_bad_label, c->c.bad_label, "%s: bad label",
		     c->what);
	cr_expect_eq(k->extra_images, c->c.extra_images, "%s: extra", c->what);
	scan_for_each_skip(s, on_skip, &r);
	cr_expect_str_eq(r.text, c->reasons, "%s", c->what);
	scan_free(s);
	index_free(ix);
	free(t.buf);
}

Test(scan, table)
{
	static const size_t chunks[] = {1, 7, 512, 1 << 20};
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++)
		for (size_t j = 0; j < sizeof(chunks) / sizeof(chunks[0]); j++)
			check_case(&cases[i], chunks[j]);
	scan_free(NULL);
}

Test(scan, shard_number_is_recorded)
{
	struct tb t = {0};
	struct index *ix = index_new();
	struct scan *s;

	member(&t, "d/a.jpg", '0', "IMG", 3);
	index_add_shard(ix, "u0", 1 << 20, "");
	index_add_shard(ix, "u1", 1 << 20, "");
	s = scan_new(ix, 1);
	cr_assert_eq(scan_feed(s, t.buf, t.len), 0);
	cr_assert_eq(scan_finish(s), 0);
	cr_assert_eq(ix->nsamples, 1);
	cr_expect_eq(ix->samples[0].shard, 1);
	cr_expect_eq(ix->samples[0].offset, 512);
	scan_free(s);
	index_free(ix);
	free(t.buf);
}

Test(scan, malformed_and_truncated)
{
	struct tb t = {0};
	struct index *ix = index_new();
	struct scan *s;

	member(&t, "d/a.jpg", '0', "IMG", 3);
	index_add_shard(ix, "u", 1 << 20, "");
	/* Truncated inside the data: the last sample is not added. */
	s = scan_new(ix, 0);
	cr_assert_eq(scan_feed(s, t.buf, 514), 0);
	cr_expect_eq(scan_finish(s), -EBADMSG);
	cr_expect_str_eq(scan_error(s), "archive truncated");
	cr_expect_eq(ix->nsamples, 0);
	scan_free(s);
	/* A corrupted header checksum. */
	t.buf[10] ^= 0x55;
	s = scan_new(ix, 0);
	cr_expect_eq(scan_feed(s, t.buf, t.len), -EBADMSG);
	cr_expect_eq(scan_finish(s), -EBADMSG);
	cr_expect_str_eq(scan_error(s), "bad header checksum");
	scan_free(s);
	index_free(ix);
	free(t.buf);
}

/* A tar that claims more than the shard's recorded size. */
Test(scan, sample_outside_recorded_size)
{
	struct tb t = {0};
	struct index *ix = index_new();
	struct scan *s;
	struct reasons r = {0};

	member(&t, "d/a.jpg", '0', "IMG", 3);
	index_add_shard(ix, "u", 100, "");
	s = scan_new(ix, 0);
	cr_assert_eq(scan_feed(s, t.buf, t.len), 0);
	cr_assert_eq(scan_finish(s), 0);
	cr_expect_eq(ix->nsamples, 0);
	scan_for_each_skip(s, on_skip, &r);
	cr_expect_str_eq(r.text, "outside the shard's size=1;");
	scan_free(s);
	index_free(ix);
	free(t.buf);
}

/* Every member goes into the member list (the samples layout), labelled
 * or not, image or not, with its whole extension as in the tar; hidden and
 * keyless ones do not. */
Test(scan, lists_every_member)
{
	struct tb t = {0};
	struct index *ix = index_new();
	struct scan *s;

	member(&t, "p/a.jpg", '0', "IMG", 3);
	member(&t, "p/a.txt", '0', "a caption", 9);
	member(&t, "p/a.seg.PNG", '0', "MASK", 4);
	member(&t, "nolabel.jpg", '0', "IMG2", 4);
	member(&t, "nolabel.json", '0', "{}", 2);
	member(&t, ".hidden/x.txt", '0', "h", 1);
	member(&t, "README", '0', "r", 1);
	index_add_shard(ix, "u", t.len + 1024, "");
	s = scan_new(ix, 0);
	cr_assert_eq(scan_feed(s, t.buf, t.len), 0);
	cr_assert_eq(scan_finish(s), 0);
	cr_expect(ix->has_members);
	cr_expect_eq(ix->nsamples, 1); /* p/a: nolabel has no label */
	cr_assert_eq(ix->nmembers, 5);
	cr_expect_str_eq(index_key(ix, &ix->members[2]), "p/a");
	cr_expect_str_eq(index_ext(ix, &ix->members[2]), "seg.PNG");
	cr_expect_eq(ix->members[1].size, 9);
	cr_expect_eq(ix->members[1].offset, 1024 + 512);
	cr_expect_str_eq(index_key(ix, &ix->members[4]), "nolabel");
	cr_expect_str_eq(index_ext(ix, &ix->members[4]), "json");
	cr_expect_eq(scan_counts(s)->unlisted_members, 0);
	scan_free(s);
	index_free(ix);
	free(t.buf);
}
