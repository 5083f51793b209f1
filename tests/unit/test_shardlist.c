/* test_shardlist.c - brace expansion, list file parsing and URL detection. */
#include "fetch/net/shardlist.h"

#include <criterion/criterion.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Results joined with spaces, for compact expectations. */
static void join(const struct shardlist *l, char *buf, size_t len)
{
	size_t at = 0;
	buf[0] = '\0';
	for (size_t i = 0; i < l->n && at < len; i++)
		at += (size_t)snprintf(buf + at, len - at, "%s%s", i ? " " : "",
				       l->urls[i]);
}

struct expand_case {
	const char *pattern;
	size_t max;
	int rc;
	const char *want; /* joined results when rc == 0 */
};

static const struct expand_case expand_cases[] = {
	{"plain.tar", 10, 0, "plain.tar"},
	{"", 10, 0, ""},
	{"s-{0..3}.tar", 10, 0, "s-0.tar s-1.tar s-2.tar s-3.tar"},
	{"s-{000..002}.tar", 10, 0, "s-000.tar s-001.tar s-002.tar"},
	{"s-{8..010}", 10, 0, "s-008 s-009 s-010"}, /* padded bound wins */
	{"s-{08..10}", 10, 0, "s-08 s-09 s-10"},
	{"s-{9..11}", 10, 0, "s-9 s-10 s-11"}, /* no leading zero */
	{"s-{0..0}", 10, 0, "s-0"},
	{"s-{3..1}", 10, 0, "s-3 s-2 s-1"}, /* descending, as bash */
	{"s-{03..01}", 10, 0, "s-03 s-02 s-01"},
	{"{a,b,c}.tar", 10, 0, "a.tar b.tar c.tar"},
	{"x{,-v2}.tar", 10, 0, "x.tar x-v2.tar"},   /* empty item */
	{"{a,b}-{1..2}", 10, 0, "a-1 a-2 b-1 b-2"}, /* right-most fastest */
	{"http://h/{a,b}/{00..01}.tar", 10, 0,
	 "http://h/a/00.tar http://h/a/01.tar http://h/b/00.tar "
	 "http://h/b/01.tar"},
	{"train-{000000..000059}.tar", 60, 0, NULL},
	{"train-{000000..000059}.tar", 59, -E2BIG, NULL},
	{"{a,b}{1..3}", 5, -E2BIG, NULL},
	{"{0..18446744073709551615}", 100, -E2BIG, NULL},
	{"x", 0, -E2BIG, NULL},
	{"s-{1..", 10, -EINVAL, NULL}, /* unclosed */
	{"s-}1", 10, -EINVAL, NULL},   /* stray close */
	{"s-{}", 10, -EINVAL, NULL},   /* empty group */
	{"s-{a}", 10, -EINVAL, NULL},  /* neither list nor range */
	{"s-{1..x}", 10, -EINVAL, NULL},
	{"s-{a..e}", 10, -EINVAL, NULL},     /* letters: unsupported */
	{"s-{1..10..2}", 10, -EINVAL, NULL}, /* steps: unsupported */
	{"s-{-1..2}", 10, -EINVAL, NULL},
	{"s-{1..99999999999999999999}", 10, -EINVAL, NULL}, /* overflow */
	{"{a,{b,c}}", 10, -EINVAL, NULL},		    /* nesting */
	{"{a}{b}{c}{d}{e}{f}{g}{h}{i}{j}{k}{l}{m}{n}{o}{p}{q}", 10, -EINVAL,
	 NULL},
	{"{1..1}{1..1}{1..1}{1..1}{1..1}{1..1}{1..1}{1..1}{1..1}{1..1}"
	 "{1..1}{1..1}{1..1}{1..1}{1..1}{1..1}{1..1}",
	 10, -EINVAL, NULL},
};

Test(shardlist, expand_table)
{
	char got[512];

	for (size_t i = 0; i < sizeof(expand_cases) / sizeof(expand_cases[0]);
	     i++) {
		const struct expand_case *c = &expand_cases[i];
		struct shardlist l = {0};
		int rc = shardlist_expand(c->pattern, c->max, &l);

		cr_expect_eq(rc, c->rc, "%s: rc %d, want %d", c->pattern, rc,
			     c->rc);
		if (rc != 0) {
			cr_expect_eq(l.n, 0, "%s: error leaves entries",
				     c->pattern);
			cr_expect_null(l.urls, "%s", c->pattern);
		} else if (c->want) {
			join(&l, got, sizeof(got));
			cr_expect_str_eq(got, c->want, "%s", c->pattern);
		}
		shardlist_clear(&l);
	}
}

Test(shardlist, expand_sixty_shards)
{
	struct shardlist l = {0};

	cr_assert_eq(shardlist_expand("https://d/train-{000000..000059}.tar",
				      1000, &l),
		     0);
	cr_assert_eq(l.n, 60);
	cr_expect_str_eq(l.urls[0], "https://d/train-000000.tar");
	cr_expect_str_eq(l.urls[59], "https://d/train-000059.tar");
	shardlist_clear(&l);
	cr_expect_eq(l.n, 0);
	shardlist_clear(NULL);
}

Test(shardlist, expand_wide_range)
{
	struct shardlist l = {0};

	cr_assert_eq(
		shardlist_expand("{18446744073709551614..18446744073709551615}",
				 10, &l),
		0);
	cr_assert_eq(l.n, 2);
	cr_expect_str_eq(l.urls[1], "18446744073709551615");
	shardlist_clear(&l);
}

struct parse_case {
	const char *text;
	size_t max;
	int rc;
	size_t bad_line;
	const char *want;
};

static const struct parse_case parse_cases[] = {
	{"", 10, 0, 0, ""},
	{"a\nb\n", 10, 0, 0, "a b"},
	{"a\r\nb\r\n", 10, 0, 0, "a b"},			/* CRLF */
	{"# shards\n\n   \n\ta  \n#b\n c \n", 10, 0, 0, "a c"}, /* comments */
	{"  # indented comment\nx", 10, 0, 0, "x"},
	{"last-without-newline", 10, 0, 0, "last-without-newline"},
	{"s{1..2}\nt{a,b}\n", 10, 0, 0, "s1 s2 ta tb"},
	{"a\nb{1..\nc\n", 10, -EINVAL, 2, NULL},
	{"a\n\nhas space\n", 10, -EINVAL, 3, NULL},
	{"a\nctl\x01x\n", 10, -EINVAL, 2, NULL},
	{"s{1..3}\nt{1..3}\n", 5, -E2BIG, 2, NULL},
	{"s{1..3}\nt{1..2}\n", 5, 0, 0, "s1 s2 s3 t1 t2"},
};

Test(shardlist, parse_table)
{
	char got[512];

	for (size_t i = 0; i < sizeof(parse_cases) / sizeof(parse_cases[0]);
	     i++) {
		const struct parse_case *c = &parse_cases[i];
		struct shardlist l = {0};
		size_t bad = 99;
		int rc = shardlist_parse(c->text, strlen(c->text), c->max, &l,
					 &bad);

		cr_expect_eq(rc, c->rc, "case %zu: rc %d, want %d", i, rc,
			     c->rc);
		cr_expect_eq(bad, c->bad_line,
			     "case %zu: bad_line %zu, want %zu", i, bad,
			     c->bad_line);
		if (rc == 0) {
			join(&l, got, sizeof(got));
			cr_expect_str_eq(got, c->want, "case %zu", i);
		} else {
			cr_expect_eq(l.n, 0, "case %zu", i);
		}
		shardlist_clear(&l);
	}
}

Test(shardlist, parse_embedded_nul)
{
	static const char text[] = "a\nb\0c\nd\n";
	struct shardlist l = {0};
	size_t bad = 0;

	cr_expect_eq(shardlist_parse(text, sizeof(text) - 1, 10, &l, &bad),
		     -EINVAL);
	cr_expect_eq(bad, 2);
	cr_expect_eq(l.n, 0);
}

Test(shardlist, parse_length_delimited)
{
	/* only the first len bytes count: no NUL terminator needed */
	static const char text[] = "a\nb\nc";
	struct shardlist l = {0};

	cr_assert_eq(shardlist_parse(text, 3, 10, &l, NULL), 0);
	cr_assert_eq(l.n, 2);
	cr_expect_str_eq(l.urls[1], "b");
	shardlist_clear(&l);
}

Test(shardlist, is_url_table)
{
	static const struct {
		const char *s;
		int want;
	} cases[] = {
		{"http://h/x.tar", 1},
		{"https://h/x.tar", 1},
		{"HTTPS://H/x", 1},
		{"HtTp://h", 1},
		{"http://", 0},
		{"http:///x", 0},
		{"ftp://h/x", 0},
		{"/data/x.tar", 0},
		{"x.tar", 0},
		{"http:/h/x", 0},
		{"", 0},
		{"httpx://h", 0},
	};

	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++)
		cr_expect_eq(shardlist_is_url(cases[i].s), cases[i].want, "%s",
			     cases[i].s);
	cr_expect_eq(shardlist_is_url(NULL), 0);
}

/* Two spellings of one shard normalise alike (RFC 3986 section 6.2.2,
 * 6.2.3); object keys of bucket schemes are bytes, left alone. */
Test(shardlist, normalise_table)
{
	static const struct {
		const char *in, *want;
	} cases[] = {
		{"http://h/d/x.tar", "http://h/d/x.tar"},
		{"HTTP://Host.Example/D/x.tar", "http://host.example/D/x.tar"},
		{"http://h/././d/x.tar", "http://h/d/x.tar"},
		{"http://h/d/./x.tar", "http://h/d/x.tar"},
		{"http://h/a/../d/x.tar", "http://h/d/x.tar"},
		{"http://h/a/b/../../d/./x.tar", "http://h/d/x.tar"},
		{"http://h/../d/x.tar", "http://h/d/x.tar"},
		{"http://h/d/x/..", "http://h/d/"},
		{"http://h/d/x/.", "http://h/d/x/"},
		{"http://h/d/x-00000%30.tar", "http://h/d/x-000000.tar"},
		{"http://h/%7Eu/%2e/x%2Etar", "http://h/~u/x.tar"},
		{"http://h/a%2fb/x%3a.tar", "http://h/a%2Fb/x%3A.tar"},
		{"http://h/a%zz", "http://h/a%zz"},
		{"http://h/a%4", "http://h/a%4"},
		{"http://h:80/x.tar", "http://h/x.tar"},
		{"https://h:443/x.tar", "https://h/x.tar"},
		{"https://h:0443/x.tar", "https://h/x.tar"},
		{"http://h:/x.tar", "http://h/x.tar"},
		{"http://h:8080/x.tar", "http://h:8080/x.tar"},
		{"https://h:80/x.tar", "https://h:80/x.tar"},
		{"http://h", "http://h/"},
		{"http://h?q=%41", "http://h/?q=A"},
		{"http://U:P@H/x", "http://U:P@h/x"},
		{"http://[::1]:80/./x", "http://[::1]/x"},
		{"http://[FE80::1]:81/x", "http://[fe80::1]:81/x"},
		{"http://h/x.tar?a=./b#./f", "http://h/x.tar?a=./b#./f"},
		{"S3://bucket/a/./x%30.tar", "s3://bucket/a/./x%30.tar"},
		{"gs://b/../x.tar", "gs://b/../x.tar"},
		{"/data/./x.tar", "/data/./x.tar"},
	};

	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		char *got = shardlist_normalise(cases[i].in);
		cr_expect_str_eq(got, cases[i].want, "%s", cases[i].in);
		free(got);
	}
}
