/* test_index_bin.c - the binary index: text -> binary -> the same index;
 * the tree decided at write time (classes, sorted names, renamed
 * duplicates); every truncation and every flipped byte refused. */
#include <criterion/criterion.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "fetch/format/index.h"
#include "fetch/format/index_bin.h"

static char *text_of(const struct index *ix, size_t *len)
{
	char *buf = NULL;
	FILE *f = open_memstream(&buf, len);

	cr_assert_not_null(f);
	cr_assert_eq(index_write(ix, f), 0);
	fclose(f);
	return buf;
}

/* The binary form of ix in a malloc'd buffer. */
static unsigned char *bin_of(const struct index *ix, size_t *len)
{
	FILE *f = tmpfile();
	unsigned char *buf;

	cr_assert_not_null(f);
	cr_assert_eq(index_bin_write(ix, f), 0);
	*len = (size_t)ftello(f);
	buf = malloc(*len);
	cr_assert(fseeko(f, 0, SEEK_SET) == 0 &&
		  fread(buf, 1, *len, f) == *len);
	fclose(f);
	return buf;
}

static struct index *parsed(const char *text)
{
	struct index *ix;
	char err[256];
	int r = index_parse(text, strlen(text), &ix, err, sizeof(err));

	cr_assert_eq(r, 0, "%s", err);
	return ix;
}

/* Format 3 (members), a duplicate key across shards, two labels. */
static const char v3[] = "echofs-index 3\n"
			 "S\thttp://h/a.tar\t10240\t\"e1\"\t302175fc62befc79\n"
			 "S\thttp://h/b.tar\t10240\t-\t7847fec211234cd9\n"
			 "M\t0\t1024\t8\tcat\tx/k1\tjpg\t6cf6d80d94757691\n"
			 "M\t0\t2048\t3\tdog\tx/k2\tpng\te20430f7a94d0f9a\n"
			 "F\t0\t3072\t5\tx/k2\tcls\t0000000000000001\n"
			 "M\t1\t1024\t9\tcat\ty/k1\tjpg\tbbcc12ee0c98bec9\n"
			 "M\t1\t2048\t9\tcat\tk0\tjpg\t0000000000000002\n";

static const char *const texts[] = {
	v3,
	"echofs-index 2\n"
	"S\thttp://h/a.tar\t100\t-\t0000000000000001\n"
	"M\t0\t0\t10\t7\tk\tjpg\t0000000000000002\n",
	"echofs-index 1\n"
	"S\thttp://h/a.tar\t100\t-\n"
	"M\t0\t0\t10\t7\tk\tjpg\n"
	"M\t0\t10\t10\t12\tk\tjpg\n",
	"echofs-index 1\nS\thttp://h/a.tar\t100\t-\n",
};

Test(index_bin, round_trip_text_binary_text)
{
	for (size_t t = 0; t < sizeof(texts) / sizeof(texts[0]); t++) {
		struct index *a = parsed(texts[t]), *b;
		size_t blen, l1, l2;
		unsigned char *bin = bin_of(a, &blen);
		char err[256], *t1, *t2;

		cr_assert(index_bin_is(bin, blen));
		cr_assert_eq(index_parse((const char *)bin, blen, &b, err,
					 sizeof(err)),
			     0, "%zu: %s", t, err);
		t1 = text_of(a, &l1);
		t2 = text_of(b, &l2);
		cr_assert(l1 == l2 && memcmp(t1, t2, l1) == 0,
			  "case %zu:\n%.*s\n----\n%.*s", t, (int)l1, t1,
			  (int)l2, t2);
		cr_assert_eq(b->has_members, a->has_members);
		free(t1);
		free(t2);
		free(bin);
		index_free(a);
		index_free(b);
	}
}

Test(index_bin, tree_names_decided_at_write)
{
	struct index *a = parsed(v3);
	size_t blen, n;
	unsigned char *bin = bin_of(a, &blen);
	struct index_bin *b;
	char err[256];
	uint32_t s;

	cr_assert_eq(index_bin_open_mem(bin, blen, &b, err, sizeof(err)), 0,
		     "%s", err);
	cr_assert_eq(index_bin_nsamples(b), 4);
	cr_assert_eq(index_bin_nclasses(b), 2);
	cr_assert_str_eq(index_bin_class_name(b, 0, &n), "cat");
	cr_assert_eq(n, 3);
	/* by name; the second k1 (sample 2) renamed after its number */
	cr_assert_str_eq(index_bin_file(b, 0, 0, &s), "k0.jpg");
	cr_assert_eq(s, 3);
	cr_assert_str_eq(index_bin_file(b, 0, 1, &s), "k1.jpg");
	cr_assert_eq(s, 0);
	cr_assert_str_eq(index_bin_file(b, 0, 2, &s), "k1_dup2.jpg");
	cr_assert_eq(s, 2);
	cr_assert_str_eq(index_bin_class_name(b, 1, &n), "dog");
	cr_assert_str_eq(index_bin_file(b, 1, 0, &s), "k2.png");
	cr_assert_eq(index_bin_find_class(b, "dog"), 1);
	cr_assert_eq(index_bin_find_class(b, "cow"), -ENOENT);
	cr_assert_eq(index_bin_find_file(b, 0, "k1_dup2.jpg"), 2);
	cr_assert_eq(index_bin_find_file(b, 0, "k2.png"), -ENOENT);
	index_bin_close(b);
	free(bin);
	index_free(a);
}

/* Numeric labels: one class per value, named zero-padded to the widest. */
Test(index_bin, numeric_classes_padded)
{
	struct index *a = parsed(texts[2]);
	size_t blen, n;
	unsigned char *bin = bin_of(a, &blen);
	struct index_bin *b;
	char err[256];

	cr_assert_eq(index_bin_open_mem(bin, blen, &b, err, sizeof(err)), 0);
	cr_assert_eq(index_bin_nclasses(b), 2);
	cr_assert_str_eq(index_bin_class_name(b, 0, &n), "07");
	cr_assert_str_eq(index_bin_class_name(b, 1, &n), "12");
	index_bin_close(b);
	free(bin);
	index_free(a);
}

Test(index_bin, every_truncation_refused)
{
	struct index *a = parsed(v3);
	size_t blen;
	unsigned char *bin = bin_of(a, &blen);
	char err[256];

	cr_assert_eq(index_bin_check(bin, blen, err, sizeof(err)), 0, "%s",
		     err);
	for (size_t n = 0; n < blen; n++) {
		unsigned char *cut = malloc(n ? n : 1);
		memcpy(cut, bin, n);
		err[0] = '\0';
		cr_assert_eq(index_bin_check(cut, n, err, sizeof(err)),
			     -EBADMSG, "cut at %zu accepted", n);
		cr_assert(strncmp(err, "binary index: ", 14) == 0 &&
				  !strchr(err, '\n'),
			  "%s", err);
		free(cut);
	}
	free(bin);
	index_free(a);
}

Test(index_bin, every_flipped_byte_refused)
{
	struct index *a = parsed(v3);
	size_t blen;
	unsigned char *bin = bin_of(a, &blen);
	char err[256];
	static const unsigned char masks[] = {0x01, 0x80, 0xff};

	for (size_t i = 0; i < blen; i++)
		for (size_t m = 0; m < sizeof(masks); m++) {
			bin[i] ^= masks[m];
			cr_assert_eq(
				index_bin_check(bin, blen, err, sizeof(err)),
				-EBADMSG, "byte %zu ^ %#x accepted", i,
				masks[m]);
			bin[i] ^= masks[m];
		}
	free(bin);
	index_free(a);
}

/* A file saved atomically, mapped, loaded by index_load as any index;
 * one cut short refused in one line. */
Test(index_bin, save_map_and_load)
{
	char dir[] = "/tmp/echofs-ibin-XXXXXX", path[64], cut[80], err[256];
	struct index *a = parsed(v3), *b;
	struct index_bin *m;
	size_t l1, l2;
	char *t1, *t2;
	FILE *f;

	cr_assert_not_null(mkdtemp(dir));
	snprintf(path, sizeof(path), "%s/i.bin", dir);
	cr_assert_eq(index_bin_save_mode(a, path, 0600), 0);
	cr_assert_eq(index_bin_open(path, &m, err, sizeof(err)), 0, "%s", err);
	cr_assert_eq(index_bin_nsamples(m), 4);
	index_bin_close(m);
	cr_assert_eq(index_load(path, &b, err, sizeof(err)), 0, "%s", err);
	t1 = text_of(a, &l1);
	t2 = text_of(b, &l2);
	cr_assert(l1 == l2 && memcmp(t1, t2, l1) == 0);
	snprintf(cut, sizeof(cut), "%s/cut.bin", dir);
	f = fopen(cut, "w");
	cr_assert_eq(index_bin_write(a, f), 0);
	cr_assert_eq(ftruncate(fileno(f), ftello(f) - 3), 0);
	fclose(f);
	index_free(b);
	cr_assert_eq(index_load(cut, &b, err, sizeof(err)), -EBADMSG);
	cr_assert_null(b);
	cr_assert(strstr(err, "truncated"), "%s", err);
	cr_assert_eq(index_bin_open(dir, &m, err, sizeof(err)), -EISDIR);
	unlink(path);
	unlink(cut);
	rmdir(dir);
	free(t1);
	free(t2);
	index_free(a);
}
