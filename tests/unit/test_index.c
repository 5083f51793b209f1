/* test_index.c - index building, strict parsing, writing and atomic saving. */
#include <criterion/criterion.h>
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "fetch/format/index.h"

/* fsync of a directory fails on demand (linked with -Wl,--wrap=fsync: see
 * unit_link_args in tests/meson.build). */
int __real_fsync(int fd);
int __wrap_fsync(int fd);
static int fail_dir_fsync;

int __wrap_fsync(int fd)
{
	struct stat sb;
	if (fail_dir_fsync && fstat(fd, &sb) == 0 && S_ISDIR(sb.st_mode)) {
		errno = EIO;
		return -1;
	}
	return __real_fsync(fd);
}

static char *write_mem(const struct index *ix, size_t *len)
{
	char *buf = NULL;
	FILE *f = open_memstream(&buf, len);
	cr_assert_not_null(f);
	cr_assert_eq(index_write(ix, f), 0);
	fclose(f);
	return buf;
}

static struct index *sample_index(void)
{
	struct index *ix = index_new();
	cr_assert_eq(index_add_shard(ix, "http://h/s-000.tar", 10000, "\"e1\""),
		     0);
	cr_assert_eq(index_add_shard(ix, "http://h/s-001.tar", 5000, NULL), 1);
	cr_assert_eq(index_add_sample(ix, 0, 512, 100, "7", "k0", "jpg"), 0);
	cr_assert_eq(index_add_sample(ix, 0, 1024, 8976, "7", "dir/k1", "JPEG"),
		     0);
	cr_assert_eq(index_add_sample(ix, 1, 0, 5000, "n01440764",
				      "n01440764/n01440764_1", "png"),
		     0);
	return ix;
}

static void expect_same(const struct index *a, const struct index *b)
{
	cr_assert_eq(a->nshards, b->nshards);
	cr_assert_eq(a->nsamples, b->nsamples);
	for (size_t i = 0; i < a->nshards; i++) {
		cr_expect_str_eq(a->shards[i].url, b->shards[i].url);
		cr_expect_eq(a->shards[i].size, b->shards[i].size);
		cr_expect_str_eq(a->shards[i].etag, b->shards[i].etag);
	}
	for (size_t i = 0; i < a->nsamples; i++) {
		const struct index_sample *x = &a->samples[i],
					  *y = &b->samples[i];
		cr_expect_eq(x->shard, y->shard);
		cr_expect_eq(x->offset, y->offset);
		cr_expect_eq(x->size, y->size);
		cr_expect_str_eq(index_label(a, x), index_label(b, y));
		cr_expect_str_eq(index_key(a, x), index_key(b, y));
		cr_expect_str_eq(index_ext(a, x), index_ext(b, y));
	}
}

Test(index, round_trip_in_memory)
{
	struct index *ix = sample_index(), *back;
	char err[128], *text, *text2;
	size_t len, len2;

	text = write_mem(ix, &len);
	cr_expect_str_eq(
		text, "echofs-index 1\n"
		      "S\thttp://h/s-000.tar\t10000\t\"e1\"\n"
		      "S\thttp://h/s-001.tar\t5000\t-\n"
		      "M\t0\t512\t100\t7\tk0\tjpg\n"
		      "M\t0\t1024\t8976\t7\tdir/k1\tjpeg\n"
		      "M\t1\t0\t5000\tn01440764\tn01440764/n01440764_1\tpng\n");
	cr_assert_eq(index_parse(text, len, &back, err, sizeof(err)), 0, "%s",
		     err);
	expect_same(ix, back);
	cr_expect_str_eq(back->shards[1].etag, "");
	text2 = write_mem(back, &len2);
	cr_expect_str_eq(text, text2);
	free(text);
	free(text2);
	index_free(ix);
	index_free(back);
	index_free(NULL);
}

Test(index, save_and_load)
{
	char dir[] = "/tmp/echofs-index-XXXXXX", path[256], err[256];
	struct index *ix = sample_index(), *back;
	struct stat st;
	struct dirent *de;
	DIR *d;
	int n = 0;

	cr_assert_not_null(mkdtemp(dir));
	snprintf(path, sizeof(path), "%s/train.index", dir);
	cr_assert_eq(index_save(ix, path), 0);
	cr_assert_eq(index_save(ix, path), 0); /* replaces */
	cr_assert_eq(stat(path, &st), 0);
	cr_expect_eq(st.st_mode & 0777, 0644);
	d = opendir(dir);
	while ((de = readdir(d)))
		n += de->d_name[0] != '.';
	closedir(d);
	cr_expect_eq(n, 1, "no temporary file left behind");
	cr_assert_eq(index_load(path, &back, err, sizeof(err)), 0, "%s", err);
	expect_same(ix, back);
	index_free(back);
	unlink(path);
	cr_expect_eq(index_load(path, &back, err, sizeof(err)), -ENOENT);
	cr_expect_null(back);
	cr_expect_neq(strstr(err, "train.index"), NULL, "%s", err);
	/* A directory that does not exist: nothing created, error returned. */
	snprintf(path, sizeof(path), "%s/missing/x.index", dir);
	cr_expect_eq(index_save(ix, path), -ENOENT);
	rmdir(dir);
	index_free(ix);
}

Test(index, add_sample_rules)
{
	struct index *ix = index_new();
	static const struct {
		uint32_t shard;
		uint64_t off, size;
		const char *label, *key, *ext;
	} bad[] = {
		{1, 0, 1, "l", "k", "jpg"},   /* no such shard */
		{0, 0, 101, "l", "k", "jpg"}, /* past the shard end */
		{0, 100, 1, "l", "k", "jpg"},
		{0, UINT64_MAX, 2, "l", "k", "jpg"}, /* overflow */
		{0, 0, 1, "", "k", "jpg"},
		{0, 0, 1, "l", "", "jpg"},
		{0, 0, 1, "l", "k", ""},
		{0, 0, 1, "a\tb", "k", "jpg"},
		{0, 0, 1, "l", "k\n", "jpg"},
		{0, 0, 1, "l", "k", "j\x01"},
		{0, 0, 1, "a/b", "k", "jpg"},
		{0, 0, 1, "..", "k", "jpg"},
		{0, 0, 1, "l", "/abs", "jpg"},
		{0, 0, 1, "l", "a/../b", "jpg"},
		{0, 0, 1, "l", "a//b", "jpg"},
		{0, 0, 1, "l", "k", "tar.gz"},
		{0, 0, 1, "l", "k", "abcdefghijklmnopq"},
	};

	index_add_shard(ix, "u", 100, "");
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
		cr_expect_eq(index_add_sample(ix, bad[i].shard, bad[i].off,
					      bad[i].size, bad[i].label,
					      bad[i].key, bad[i].ext),
			     -EINVAL, "case %zu", i);
	cr_expect_eq(ix->nsamples, 0);
	cr_expect_eq(index_add_sample(ix, 0, 0, 100, "l", "k", "jpg"), 0);
	cr_expect_eq(index_add_sample(ix, 0, 100, 0, "l", "k", "jpg"), 0);
	index_free(ix);
}

Test(index, write_rejects_bad_shard_fields)
{
	struct index *ix = index_new();
	FILE *f = fopen("/dev/null", "w");

	index_add_shard(ix, "http://h/a\tb.tar", 1, "");
	cr_expect_eq(index_write(ix, f), -EINVAL);
	index_free(ix);
	ix = index_new();
	index_add_shard(ix, "", 1, "");
	cr_expect_eq(index_write(ix, f), -EINVAL);
	index_free(ix);
	fclose(f);
}

#define HDR "echofs-index 1\n"
#define S0 "S\thttp://h/a.tar\t1000\t-\n"
#define HDR2 "echofs-index 2\n"
#define S2 "S\thttp://h/a.tar\t1000\t-\t0123456789abcdef\n"
#define M2 "M\t0\t0\t1\tl\tk\tjpg\tfedcba9876543210\n"
#define HDR3 "echofs-index 3\n"

static const struct {
	const char *text;
	const char *err; /* NULL: accepted */
} parse_cases[] = {
	{"", "line 1: not an echofs index"},
	{"echofs-index 4\n", "line 1: not an echofs index"},
	{"echofs-index 2 \n", "line 1: not an echofs index"},
	{"echofs-index 1 \n", "line 1: not an echofs index"},
	{"echofs-index 1", NULL},
	{HDR, NULL},
	{HDR S0 "M\t0\t0\t1000\tl\tk\tjpg", NULL}, /* no final newline */
	{HDR "# comment\twith tab\n" S0 "#\n", NULL},
	{HDR "S\tu\t10\n", "line 2: S needs 4 fields"},
	{HDR "S\tu\t10\t-\tx\n", "line 2: S needs 4 fields"},
	{HDR "S\t\t10\t-\n", "line 2: empty URL or ETag"},
	{HDR "S\tu\t10\t\n", "line 2: empty URL or ETag"},
	{HDR "S\tu\t1e3\t-\n", "line 2: bad shard size"},
	{HDR "S\tu\t18446744073709551616\t-\n", "line 2: bad shard size"},
	{HDR "M\t0\t0\t1\tl\tk\tjpg\n", "line 2: bad or unknown shard number"},
	{HDR S0 "M\t1\t0\t1\tl\tk\tjpg\n",
	 "line 3: bad or unknown shard number"},
	{HDR S0 "M\t-0\t0\t1\tl\tk\tjpg\n",
	 "line 3: bad or unknown shard number"},
	{HDR S0 "M\t99999999999999999999\t0\t1\tl\tk\tjpg\n",
	 "line 3: bad or unknown shard number"},
	{HDR S0 "M\t0\t0\t1\tl\tk\n", "line 3: M needs 7 fields"},
	{HDR S0 "M\t0\t0\t1\tl\tk\tjpg\tx\n", "line 3: M needs 7 fields"},
	{HDR S0 "M\t0\t0\t1\tl\tk\tjpg\tx\ty\n", "line 3: too many fields"},
	/* Format 2: a checksum closes S and M lines. */
	{HDR2 S2, NULL},
	{HDR2 S2 M2, NULL},
	{HDR2 S0, "line 2: S needs 5 fields"},
	{HDR2 S2 "M\t0\t0\t1\tl\tk\tjpg\n", "line 3: M needs 8 fields"},
	{HDR S2, "line 2: S needs 4 fields"},
	{HDR2 "S\tu\t10\t-\t00000000000000000\n", "line 2: bad shard checksum"},
	{HDR2 "S\tu\t10\t-\t000000000000000\n", "line 2: bad shard checksum"},
	{HDR2 "S\tu\t10\t-\t00000000000000A0\n", "line 2: bad shard checksum"},
	{HDR2 "S\tu\t10\t-\t0x00000000000000\n", "line 2: bad shard checksum"},
	{HDR2 S2 "M\t0\t0\t1\tl\tk\tjpg\t-\n", "line 3: bad sample checksum"},
	{HDR2 S2 "M\t0\t0\t1\tl\tk\tjpg\t\n", "line 3: bad sample checksum"},
	{HDR2 S2 "M\t0\t0\t1\tl\tk\tjpg\t0123456789abcdeg\n",
	 "line 3: bad sample checksum"},
	{HDR S0 "M\t0\t 0\t1\tl\tk\tjpg\n", "line 3: bad offset or size"},
	{HDR S0 "M\t0\t0\t+1\tl\tk\tjpg\n", "line 3: bad offset or size"},
	{HDR S0 "M\t0\t\t1\tl\tk\tjpg\n", "line 3: bad offset or size"},
	{HDR S0 "M\t0\t1000\t1\tl\tk\tjpg\n",
	 "line 3: sample lies outside its shard"},
	{HDR S0 "M\t0\t1\t1000\tl\tk\tjpg\n",
	 "line 3: sample lies outside its shard"},
	{HDR S0 "M\t0\t18446744073709551615\t2\tl\tk\tjpg\n",
	 "line 3: sample lies outside its shard"},
	/* A sample's size is held in 32 bits (INDEX_SAMPLE_MAX). */
	{HDR "S\tu\t6442450944\t-\nM\t0\t0\t4294967296\tl\tk\tjpg\n",
	 "line 3: sample larger than 4 GiB"},
	{HDR "S\tu\t6442450944\t-\nM\t0\t1\t4294967295\tl\tk\tjpg\n", NULL},
	{HDR S0 "M\t0\t0\t1\tl\tk\tjpg\r\n",
	 "line 3: control character in a field"},
	/* A bad name is skipped (index_skip), a broken record is not. */
	{HDR S0 "M\t0\t0\t1\t\tk\tjpg\tx\n", "line 3: M needs 7 fields"},
	{HDR2 S2 "M\t0\t0\t1\t..\tk\tjpg\t-\n", "line 3: bad sample checksum"},
	{HDR S0 "M\t0\t1000\t1\t..\tk\tjpg\n",
	 "line 3: sample lies outside its shard"},
	{"echofs-index 1\tx\n", "line 1: not an echofs index"},
	{HDR S0 "\n", "line 3: empty line"},
	{HDR S0 "X\t1\n", "line 3: unknown record type"},
	{HDR S0 "MM\t0\n", "line 3: unknown record type"},
	{HDR2 S2 "F\t0\t0\t1\tk\ttxt\t0000000000000000\n",
	 "line 3: F lines need format 3"},
	{HDR3 S2 "F\t0\t0\t1\tk\ttxt\n", "line 3: F needs 7 fields"},
	{HDR3 S2 "F\t1\t0\t1\tk\ttxt\t0000000000000000\n",
	 "line 3: bad or unknown shard number"},
	{HDR3 S2 "F\t0\t1000\t1\tk\ttxt\t0000000000000000\n",
	 "line 3: member lies outside its shard"},
	{HDR3 S2 "F\t0\t0\t1\tk\ttxt\tXX\n", "line 3: bad member checksum"},
	{HDR3 S2 M2 "F\t0\t0\t1\tk\tseg.PNG\t0000000000000000\n", NULL},
	{HDR "# one\n# two\n" S0 "M\t0\t0\t1\tl\tk\n",
	 "line 5: M needs 7 fields"},
};

Test(index, parse_table)
{
	for (size_t i = 0; i < sizeof(parse_cases) / sizeof(parse_cases[0]);
	     i++) {
		const char *t = parse_cases[i].text, *want = parse_cases[i].err;
		struct index *ix = (struct index *)1;
		char err[256] = "";
		int r = index_parse(t, strlen(t), &ix, err, sizeof(err));
		if (!want) {
			cr_expect_eq(r, 0, "case %zu: %s", i, err);
			index_free(ix);
			continue;
		}
		cr_expect_eq(r, -EBADMSG, "case %zu", i);
		cr_expect_null(ix, "case %zu", i);
		cr_expect_eq(strncmp(err, want, strlen(want)), 0,
			     "case %zu: got \"%s\", want \"%s\"", i, err, want);
	}
}

#define L255                                                                   \
	"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa" \
	"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa" \
	"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa" \
	"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"
#define L251                                                                   \
	"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa" \
	"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa" \
	"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa" \
	"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"

/* One unsafe name among good ones: that sample is skipped and counted, the
 * rest of the index loads (the tar path skips such members one by one). */
static const struct {
	const char *m; /* fields 4..6 of an M line: label, key, ext */
	int label;     /* counted as a bad label, else as a bad name */
	const char *why;
} skip_cases[] = {
	{"\tk\tjpg", 1, "bad label"},
	{"a/b\tk\tjpg", 1, "bad label"},
	{"..\tk\tjpg", 1, "bad label"},
	{".\tk\tjpg", 1, "bad label"},
	{" \tk\tjpg", 1, "bad label"},
	{"   \tk\tjpg", 1, "bad label"},
	{L255 "b\tk\tjpg", 1, "bad label"},
	{"l\t\tjpg", 0, "bad key"},
	{"l\t/etc/x\tjpg", 0, "bad key"},
	{"l\td/../x\tjpg", 0, "bad key"},
	{"l\td/.\tjpg", 0, "bad key"},
	{"l\td/\tjpg", 0, "bad key"},
	{"l\td//x\tjpg", 0, "bad key"},
	{"l\t \tjpg", 0, "bad key"},
	{"l\t  /x\tjpg", 0, "bad key"},
	{"l\t" L255 "b/x\tjpg", 0, "bad key"},
	{"l\td/" L255 "b\tjpg", 0, "bad key"},
	{"l\td/" L251 "b\tjpg", 0, "bad key"}, /* 252 + ".jpg" > 255 */
	{"l\tk\t", 0, "bad extension"},
	{"l\tk\tj.pg", 0, "bad extension"},
	{"l\tk\tj/pg", 0, "bad extension"},
	{"l\tk\tabcdefghijklmnopq", 0, "bad extension"},
	{"l\tk\x7f\tjpg", 0, "control character in a name"},
	{"l\x01\tk\tjpg", 1, "control character in a name"},
	{"l\tk\x1b[2J\tjpg", 0, "control character in a name"},
};

static void check_skip(const char *text, size_t len, size_t i, int v2)
{
	struct index *ix;
	char err[256] = "";
	int r = index_parse(text, len, &ix, err, sizeof(err));

	cr_assert_eq(r, 0, "case %zu (v%d): %s", i, v2 + 1, err);
	cr_expect_eq(ix->nsamples, 2, "case %zu", i);
	cr_expect_str_eq(index_key(ix, &ix->samples[0]), "first", "case %zu",
			 i);
	cr_expect_str_eq(index_key(ix, &ix->samples[1]), "last", "case %zu", i);
	cr_expect_eq(ix->skipped.labels, (uint64_t)skip_cases[i].label,
		     "case %zu", i);
	cr_expect_eq(ix->skipped.names, (uint64_t)!skip_cases[i].label,
		     "case %zu", i);
	cr_expect_eq(ix->skipped.first_line, 4, "case %zu", i);
	cr_expect_str_eq(ix->skipped.first_why, skip_cases[i].why, "case %zu",
			 i);
	index_free(ix);
}

Test(index, parse_skips_unsafe_names_one_by_one)
{
	for (size_t i = 0; i < sizeof(skip_cases) / sizeof(skip_cases[0]);
	     i++) {
		char t[2048];
		int n = snprintf(t, sizeof(t),
				 HDR S0 "M\t0\t0\t1\tl\tfirst\tjpg\n"
					"M\t0\t1\t1\t%s\n"
					"M\t0\t2\t1\tl\tlast\tjpg\n",
				 skip_cases[i].m);
		check_skip(t, (size_t)n, i, 0);
		n = snprintf(t, sizeof(t),
			     HDR2 S2 "M\t0\t0\t1\tl\tfirst\tjpg\t%s\n"
				     "M\t0\t1\t1\t%s\t%s\n"
				     "M\t0\t2\t1\tl\tlast\tjpg\t%s\n",
			     "fedcba9876543210", skip_cases[i].m,
			     "fedcba9876543210", "fedcba9876543210");
		check_skip(t, (size_t)n, i, 1);
	}
}

Test(index, parse_skips_embedded_nul)
{
	static const char t[] = HDR S0 "M\t0\t0\t1\tl\tk\0x\tjpg\n"
				       "M\t0\t0\t1\tl\tk\tjpg\n";
	struct index *ix;
	char err[128];

	cr_assert_eq(index_parse(t, sizeof(t) - 1, &ix, err, sizeof(err)), 0,
		     "%s", err);
	cr_expect_eq(ix->nsamples, 1);
	cr_expect_eq(ix->skipped.names, 1);
	cr_expect_str_eq(ix->skipped.first_why, "control character in a name");
	index_free(ix);
}

/* The longest names that fit still load, and index_add_sample takes what
 * index_parse keeps and nothing else, so whatever is written loads again. */
Test(index, names_up_to_255_bytes)
{
	struct index *ix = index_new();

	index_add_shard(ix, "u", 100, "");
	cr_expect_eq(index_add_sample(ix, 0, 0, 1, L255, "d/" L251, "ab"), 0);
	cr_expect_eq(index_add_sample(ix, 0, 0, 1, L255 "b", "k", "jpg"),
		     -EINVAL);
	cr_expect_eq(index_add_sample(ix, 0, 0, 1, "l", "d/" L251 "b", "jpg"),
		     -EINVAL);
	cr_expect_eq(index_add_sample(ix, 0, 0, 1, "l", L255 "b/k", "jpg"),
		     -EINVAL);
	cr_expect_eq(index_add_sample(ix, 0, 0, 1, " ", "k", "jpg"), -EINVAL);
	cr_expect_eq(index_add_sample(ix, 0, 0, 1, "l", "d/ /k", "jpg"),
		     -EINVAL);
	cr_expect_eq(ix->nsamples, 1);
	index_free(ix);
}

Test(index, parse_lowercases_ext_and_dash_etag)
{
	static const char t[] = HDR S0 "M\t0\t0\t1\tl\tk\tJPG\n";
	struct index *ix;
	char err[128];

	cr_assert_eq(index_parse(t, sizeof(t) - 1, &ix, err, sizeof(err)), 0);
	cr_expect_str_eq(index_ext(ix, &ix->samples[0]), "jpg");
	cr_expect_str_eq(ix->shards[0].etag, "");
	index_free(ix);
}

/* Many samples through the whole path: add, write, parse. */
Test(index, many_samples)
{
	struct index *ix = index_new(), *back;
	char key[64], label[16], err[128], *text;
	size_t len;

	for (int s = 0; s < 100; s++) {
		snprintf(key, sizeof(key), "http://h/s-%06d.tar", s);
		index_add_shard(ix, key, 1u << 30, "\"etag\"");
	}
	for (int i = 0; i < 200000; i++) {
		snprintf(key, sizeof(key), "n%08d/img_%d", i / 1300, i);
		snprintf(label, sizeof(label), "n%08d", i / 1300);
		cr_assert_eq(index_add_sample(ix, (uint32_t)(i % 100),
					      (uint64_t)i * 1024, 1000, label,
					      key, "jpg"),
			     0);
	}
	text = write_mem(ix, &len);
	cr_assert_eq(index_parse(text, len, &back, err, sizeof(err)), 0, "%s",
		     err);
	expect_same(ix, back);
	/* A loaded index can still grow (its sample array moves). */
	cr_assert_eq(index_add_sample(back, 3, 0, 1, "l", "extra", "jpg"), 0);
	cr_assert_eq(index_add_sample(ix, 3, 0, 1, "l", "extra", "jpg"), 0);
	expect_same(ix, back);
	free(text);
	index_free(ix);
	index_free(back);
}

/* Format 2 keeps every checksum, and what it writes loads back byte for
 * byte; format 1 writes no checksum fields. */
Test(index, v2_round_trip)
{
	static const char t[] =
		HDR2 S2 M2 "M\t0\t1\t2\tl\tk2\tjpg\t0000000000000000\n";
	struct index *ix;
	char err[128], *out = NULL;
	size_t outlen = 0;
	FILE *f;

	cr_assert_eq(index_parse(t, sizeof(t) - 1, &ix, err, sizeof(err)), 0,
		     "%s", err);
	cr_expect(ix->has_sums);
	cr_expect_not(ix->has_members);
	cr_expect_eq(ix->shards[0].sum, 0x0123456789abcdefULL);
	cr_expect_eq(ix->samples[0].sum, 0xfedcba9876543210ULL);
	cr_expect_eq(ix->samples[1].sum, 0);
	f = open_memstream(&out, &outlen);
	cr_assert_eq(index_write(ix, f), 0);
	fclose(f);
	cr_expect_str_eq(out, t);
	free(out);
	ix->has_sums = false;
	f = open_memstream(&out, &outlen);
	cr_assert_eq(index_write(ix, f), 0);
	fclose(f);
	cr_expect_str_eq(out, HDR "S\thttp://h/a.tar\t1000\t-\n"
				  "M\t0\t0\t1\tl\tk\tjpg\n"
				  "M\t0\t1\t2\tl\tk2\tjpg\n");
	free(out);
	index_free(ix);
}

/* Format 3: every member, labelled or not, with its whole extension as
 * in the tar; written back byte for byte, and as format 2 (members left
 * out) by an index that does not claim them. */
Test(index, v3_members_round_trip)
{
	static const char t[] =
		HDR3 S2 M2 "F\t0\t0\t1\tk\tJPG\t0000000000000001\n"
		"F\t0\t1\t2\tk\tseg.png\t0000000000000002\n"
		"F\t0\t3\t4\tdir/nolabel\ttxt\t0000000000000003\n";
	struct index *ix;
	char err[128], *out;
	size_t outlen = 0;

	cr_assert_eq(index_parse(t, sizeof(t) - 1, &ix, err, sizeof(err)), 0,
		     "%s", err);
	cr_expect(ix->has_members);
	cr_assert_eq(ix->nmembers, 3);
	cr_expect_eq(ix->nsamples, 1);
	cr_expect_str_eq(index_ext(ix, &ix->members[0]), "JPG");
	cr_expect_str_eq(index_ext(ix, &ix->members[1]), "seg.png");
	cr_expect_str_eq(index_key(ix, &ix->members[2]), "dir/nolabel");
	cr_expect_eq(ix->members[2].sum, 3);
	cr_expect_eq(ix->members[2].size, 4);
	out = write_mem(ix, &outlen);
	cr_expect_str_eq(out, t);
	free(out);
	ix->has_members = false;
	out = write_mem(ix, &outlen);
	cr_expect_str_eq(out, HDR2 S2 M2);
	free(out);
	/* added one by one, as the scanner does */
	cr_expect_eq(index_add_member(ix, 0, 10, 5, "a/b", "cls"), 0);
	cr_expect_eq(index_add_member(ix, 0, 10, 5, "a/b", ".x"), -EINVAL);
	cr_expect_eq(index_add_member(ix, 0, 10, 5, "a/b", "x/y"), -EINVAL);
	cr_expect_eq(index_add_member(ix, 0, 10, 5, "../b", "txt"), -EINVAL);
	cr_expect_eq(index_add_member(ix, 0, 999, 5, "b", "txt"), -EINVAL);
	cr_expect_eq(index_add_member(ix, 0, 10, 5, "b", "t\nx"), -EINVAL);
	cr_expect_eq(ix->nmembers, 4);
	cr_expect_str_eq(index_key(ix, &ix->members[3]), "a/b");
	index_free(ix);
}

/* An M line stands for its image member in format 3: no F line is
 * written for it, and one is made for it on loading. */
Test(index, v3_m_lines_stand_for_their_members)
{
	static const char t[] =
		HDR3 S2 M2 "F\t0\t2\t1\tk\tcls\t0000000000000005\n";
	struct index *ix;
	char err[128], *out;
	size_t outlen = 0;

	cr_assert_eq(index_parse(t, sizeof(t) - 1, &ix, err, sizeof(err)), 0,
		     "%s", err);
	cr_assert_eq(ix->nmembers, 2);
	cr_expect_str_eq(index_ext(ix, &ix->members[1]), "jpg");
	cr_expect_str_eq(index_key(ix, &ix->members[1]), "k");
	cr_expect_eq(ix->members[1].sum, 0xfedcba9876543210ULL);
	cr_expect_eq(ix->members[1].offset, 0);
	out = write_mem(ix, &outlen);
	cr_expect_str_eq(out, t);
	free(out);
	/* built one by one, with the image listed as a member too */
	index_free(ix);
	ix = index_new();
	index_add_shard(ix, "http://h/a.tar", 1000, "");
	ix->shards[0].sum = 0x0123456789abcdefULL;
	cr_assert_eq(index_add_sample(ix, 0, 0, 1, "l", "k", "jpg"), 0);
	ix->samples[0].sum = 0xfedcba9876543210ULL;
	cr_assert_eq(index_add_member(ix, 0, 0, 1, "k", "jpg"), 0);
	ix->members[0].sum = 0xfedcba9876543210ULL;
	cr_assert_eq(index_add_member(ix, 0, 2, 1, "k", "cls"), 0);
	ix->members[1].sum = 5;
	ix->has_sums = ix->has_members = true;
	out = write_mem(ix, &outlen);
	cr_expect_str_eq(out, t);
	free(out);
	index_free(ix);
}

/* A member whose name breaks a rule is skipped and counted; the rest
 * loads. */
Test(index, v3_skips_bad_member_names)
{
	static const char t[] =
		HDR3 S2 "F\t0\t0\t1\t../k\ttxt\t0000000000000000\n"
		"F\t0\t0\t1\tk\t.txt\t0000000000000000\n"
		"F\t0\t0\t1\tk\ttxt\t0000000000000000\n";
	struct index *ix;
	char err[128];

	cr_assert_eq(index_parse(t, sizeof(t) - 1, &ix, err, sizeof(err)), 0,
		     "%s", err);
	cr_expect_eq(ix->nmembers, 1);
	cr_expect_eq(ix->skipped.members, 2);
	cr_expect_eq(ix->skipped.first_line, 3);
	cr_expect_str_eq(ix->skipped.first_why, "bad key");
	index_free(ix);
}

Test(index, v1_has_no_sums)
{
	static const char t[] = HDR S0 "M\t0\t0\t1\tl\tk\tjpg\n";
	struct index *ix;
	char err[128];

	cr_assert_eq(index_parse(t, sizeof(t) - 1, &ix, err, sizeof(err)), 0);
	cr_expect_not(ix->has_sums);
	cr_expect_not(ix->has_members);
	index_free(ix);
}

/* The parser reads the text where it lies (a read-only mapping of the
 * file, or the caller's buffer), which has no NUL after it: texts placed
 * flush against an unreadable page must parse (or fail) as usual, without
 * a read past their end. */
Test(index, parse_reads_nothing_past_the_text)
{
	static const struct {
		const char *text;
		int want; /* 0 or -EBADMSG */
		size_t samples;
	} cases[] = {
		{"echofs-index 1\nS\tu\t9\t-\nM\t0\t0\t1\ta\tk\tjpg", 0, 1},
		{"echofs-index 1\nS\tu\t9\t-\nM\t0\t0\t1\ta\tk\tjpg\n", 0, 1},
		{"echofs-index 1\nS\tu\t9\t-\n# a comment", 0, 0},
		{"echofs-index 1\nS\tu\t9\t-\nM\t0\t0\t1\ta\tk\tjp\x01", 0, 0},
		{"echofs-index 1\nS\tu\t9\t-\nM\t0\t0\t1\ta\tk\t", 0, 0},
		{"echofs-index 1\nS\tu\t9\t-\nM\t0\t0\t1\ta\t   ", -EBADMSG, 0},
		{"echofs-index 1\nS\tu\t9\t", -EBADMSG, 0},
		{"echofs-index 1", 0, 0},
		{"echofs-index", -EBADMSG, 0},
	};
	long page = sysconf(_SC_PAGESIZE);
	char *map = mmap(NULL, 2 * (size_t)page, PROT_READ | PROT_WRITE,
			 MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	char err[256];

	cr_assert_neq(map, MAP_FAILED);
	cr_assert_eq(mprotect(map + page, (size_t)page, PROT_NONE), 0);
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		size_t len = strlen(cases[i].text);
		char *at = map + page - len;
		struct index *ix = NULL;
		memcpy(at, cases[i].text, len);
		int r = index_parse(at, len, &ix, err, sizeof(err));
		cr_expect_eq(r, cases[i].want, "case %zu: %d %s", i, r, err);
		if (ix)
			cr_expect_eq(ix->nsamples, cases[i].samples, "case %zu",
				     i);
		index_free(ix);
	}
	munmap(map, 2 * (size_t)page);
}

/* A file of exactly one page without a final newline (and an empty one):
 * index_load reads no further than the file's size. */
Test(index, load_of_a_page_sized_file)
{
	char dir[] = "/tmp/echofs-index-XXXXXX", path[256], err[256];
	long page = sysconf(_SC_PAGESIZE);
	const char *head = "echofs-index 1\nS\tu\t9\t-\nM\t0\t0\t1\ta\t";
	size_t hl = strlen(head), keylen = (size_t)page - hl - 4;
	struct index *ix;
	FILE *f;

	cr_assert_not_null(mkdtemp(dir));
	snprintf(path, sizeof(path), "%s/page.index", dir);
	f = fopen(path, "w");
	cr_assert_not_null(f);
	fputs(head, f);
	for (size_t i = 0; i < keylen; i++)
		fputc(i % 200 == 199 ? '/' : 'k', f);
	fputs("\tjpg", f);
	fclose(f);
	cr_assert_eq(index_load(path, &ix, err, sizeof(err)), 0, "%s", err);
	cr_expect_eq(ix->nsamples, 1);
	cr_expect_eq(strlen(index_key(ix, &ix->samples[0])), keylen);
	cr_expect_str_eq(index_ext(ix, &ix->samples[0]), "jpg");
	index_free(ix);
	/* and an empty file is no index */
	f = fopen(path, "w");
	fclose(f);
	cr_expect_eq(index_load(path, &ix, err, sizeof(err)), -EBADMSG);
	unlink(path);
	rmdir(dir);
}

/* index_load reads a file in chunks (8 MiB): lines cut by a chunk's end,
 * and a line longer than a chunk (a 9 MB URL), load as index_parse parses
 * the whole text. */
Test(index, load_in_chunks_matches_parse)
{
	char dir[] = "/tmp/echofs-index-XXXXXX", path[256], err[256];
	size_t urllen = 9u << 20, n = 400000, len;
	struct index *a, *b;
	char *text = NULL;
	FILE *f;

	cr_assert_not_null(mkdtemp(dir));
	snprintf(path, sizeof(path), "%s/big.index", dir);
	f = open_memstream(&text, &len);
	fputs("echofs-index 1\nS\thttp://h/", f);
	for (size_t i = 0; i < urllen; i++)
		fputc('a' + (int)(i % 26), f);
	fputs(".tar\t100000000\t-\nS\thttp://h/2.tar\t100000000\t\"e\"\n", f);
	for (size_t i = 0; i < n; i++)
		fprintf(f, "M\t%zu\t%zu\t10\tc%zu\tc%zu/k%zu\tjpg\n", i % 2,
			i * 10, i % 97, i % 97, i);
	fclose(f);
	f = fopen(path, "w");
	cr_assert_not_null(f);
	cr_assert_eq(fwrite(text, 1, len, f), len);
	fclose(f);
	cr_assert_gt(len, 2 * (8u << 20), "spans chunks");
	cr_assert_eq(index_parse(text, len, &a, err, sizeof(err)), 0, "%s",
		     err);
	cr_assert_eq(index_load(path, &b, err, sizeof(err)), 0, "%s", err);
	cr_assert_eq(b->nsamples, n);
	cr_expect_eq(strlen(b->shards[0].url),
		     urllen + strlen("http://h/.tar"));
	expect_same(a, b);
	index_free(a);
	index_free(b);
	free(text);
	unlink(path);
	rmdir(dir);
}

/* Sizes up to INDEX_SAMPLE_MAX are kept exactly; a bigger member is
 * refused rather than cut to 32 bits. */
Test(index, sample_size_bound)
{
	struct index *ix = index_new(), *back;
	char err[128], *text;
	size_t len;

	index_add_shard(ix, "http://h/big.tar", 3ull << 32, NULL);
	cr_expect_eq(index_add_sample(ix, 0, 0, 1ull << 32, "l", "k", "jpg"),
		     -EINVAL);
	cr_expect_eq(ix->nsamples, 0);
	cr_assert_eq(index_add_sample(ix, 0, 1ull << 32, INDEX_SAMPLE_MAX, "l",
				      "k", "jpg"),
		     0);
	text = write_mem(ix, &len);
	cr_expect_str_eq(text, HDR "S\thttp://h/big.tar\t12884901888\t-\n"
				   "M\t0\t4294967296\t4294967295\tl\tk\tjpg\n");
	cr_assert_eq(index_parse(text, len, &back, err, sizeof(err)), 0, "%s",
		     err);
	cr_expect_eq(back->samples[0].size, INDEX_SAMPLE_MAX);
	cr_expect_eq(back->samples[0].offset, 1ull << 32);
	free(text);
	index_free(ix);
	index_free(back);
}

/* Labels and extensions are kept once per distinct (label, ext) pair, in
 * any order of samples; every sample reads its own back, and the text
 * written loads and writes again byte for byte. A guard on the record's
 * size too: 14.2 M samples make each byte 14 MB of memory. */
Test(index, names_per_pair)
{
	static const char *labels[] = {"l0", "l1", "l2"};
	static const char *exts[] = {"jpg", "PNG"};
	struct index *ix = index_new(), *back;
	char key[32], err[128], *text, *again;
	size_t len, len2;

	cr_expect_leq(sizeof(struct index_sample), 32);
	index_add_shard(ix, "http://h/s.tar", 1 << 20, NULL);
	for (int i = 0; i < 60; i++) {
		snprintf(key, sizeof(key), "k%d", i);
		cr_assert_eq(index_add_sample(ix, 0, (uint64_t)i, 1,
					      labels[i % 3], key,
					      exts[i / 3 % 2]),
			     0);
	}
	cr_expect_eq(ix->nnames, 6);
	for (int i = 0; i < 60; i++) {
		const struct index_sample *s = &ix->samples[i];
		cr_expect_str_eq(index_label(ix, s), labels[i % 3]);
		cr_expect_str_eq(index_ext(ix, s), i / 3 % 2 ? "png" : "jpg");
		/* interned: one copy of each string */
		cr_expect_eq(index_label(ix, s),
			     index_label(ix, &ix->samples[i % 3]));
	}
	text = write_mem(ix, &len);
	cr_assert_eq(index_parse(text, len, &back, err, sizeof(err)), 0, "%s",
		     err);
	cr_expect_eq(back->nnames, 6);
	expect_same(ix, back);
	again = write_mem(back, &len2);
	cr_expect_eq(len2, len);
	cr_expect_str_eq(again, text);
	free(text);
	free(again);
	index_free(ix);
	index_free(back);
}

Test(index, save_reports_a_failed_directory_fsync_and_keeps_modes)
{
	char dir[] = "/tmp/echofs-index-XXXXXX", path[256];
	struct index *ix = sample_index();
	struct stat st;

	cr_assert_not_null(mkdtemp(dir));
	snprintf(path, sizeof(path), "%s/kept.index", dir);
	cr_expect_eq(index_save_mode(ix, path, 0600), 0);
	cr_assert_eq(stat(path, &st), 0);
	cr_expect_eq(st.st_mode & 0777, 0600);
	fail_dir_fsync = 1;
	cr_expect_eq(index_save(ix, path), -EIO, "the rename is not durable");
	fail_dir_fsync = 0;
	unlink(path);
	rmdir(dir);
	index_free(ix);
}

/* Issue 50 follow-up: index_load opened its file blocking, so a FIFO put
 * in place of the index after the options' check hung the mount in
 * open(2). Like file_read_all, it opens without blocking and refuses what
 * is not a regular file, saying so; the timeout turns a hang into a
 * failure. */
Test(index, load_refuses_a_fifo_or_directory_at_once, .timeout = 20)
{
	char dir[] = "/tmp/echofs-index-XXXXXX", fifo[256], err[256];
	struct index *ix = NULL;

	cr_assert_not_null(mkdtemp(dir));
	snprintf(fifo, sizeof(fifo), "%s/train.index", dir);
	cr_assert_eq(mkfifo(fifo, 0600), 0);
	cr_expect_eq(index_load(fifo, &ix, err, sizeof(err)), -EINVAL);
	cr_expect_null(ix);
	cr_expect_neq(strstr(err, "not a regular file"), NULL, "%s", err);
	cr_expect_neq(strstr(err, "train.index"), NULL, "%s", err);
	cr_expect_eq(index_load(dir, &ix, err, sizeof(err)), -EISDIR);
	cr_expect_null(ix);
	unlink(fifo);
	rmdir(dir);
}
