/* test_namespace.c - the virtual tree: class names, file names, inodes,
 * lookups, listings, duplicates and bad labels. */
#include <criterion/criterion.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cache/dataset_parts.h"
#include "fetch/format/index.h"
#include "fs/namespace.h"

struct spec {
	const char *label, *key, *ext;
	uint64_t size;
};

static struct index *make_index(const struct spec *s, size_t n)
{
	struct index *ix = index_new();
	uint32_t sh = index_add_shard(ix, "http://h/a.tar", 1 << 20, "\"e\"");
	for (size_t i = 0; i < n; i++)
		cr_assert_eq(index_add_sample(ix, sh, 512 * (i + 1), s[i].size,
					      s[i].label, s[i].key, s[i].ext),
			     0);
	return ix;
}

/* The tree is built from the dataset face over the test's index. */
static struct dataset *cur;

static const struct dataset *wrap(const struct index *ix)
{
	cur = dataset_wrap(ix, NULL);
	cr_assert_not_null(cur);
	return cur;
}

static void unwrap(struct index *ix)
{
	dataset_close(cur);
	cur = NULL;
	index_free(ix);
}

static const char *list_name(const struct namespace *ns, uint64_t dir,
			     size_t i)
{
	const char *name = NULL;
	int is_dir;
	return ns_list(ns, dir, i, &name, &is_dir) ? name : NULL;
}


/* ns_open that must succeed. */
static struct namespace *build(const struct dataset *ds, const char *ext)
{
	struct namespace *ns = (struct namespace *)1;
	int r = ns_open(ds, ext, &ns);

	cr_assert_eq(r, 0, "ns_open: %s", strerror(-r));
	return ns;
}
Test(namespace, numeric_labels_are_zero_padded_and_sorted)
{
	const struct spec s[] = {
		{"10", "b", "jpg", 5}, {"2", "a", "jpg", 6}, {"0", "c", "png", 7},
	};
	struct index *ix = make_index(s, 3);
	struct namespace *ns = build(wrap(ix), NULL);

	cr_assert_not_null(ns);
	cr_assert_eq(ns->nclasses, 3);
	cr_assert_str_eq(list_name(ns, NS_INO_ROOT, 0), "00");
	cr_assert_str_eq(list_name(ns, NS_INO_ROOT, 1), "02");
	cr_assert_str_eq(list_name(ns, NS_INO_ROOT, 2), "10");
	cr_assert_null(list_name(ns, NS_INO_ROOT, 3));

	uint64_t d = ns_lookup(ns, NS_INO_ROOT, "10");
	cr_assert_neq(d, 0);
	uint64_t f = ns_lookup(ns, d, "b.jpg");
	uint32_t num;
	cr_assert_eq(ns_kind_of(ns, f, &num), NS_FILE);
	cr_assert_eq(ns_file_size(ns, num), 5);
	cr_assert_eq(ns_lookup(ns, d, "a.jpg"), 0, "a is in class 02");
	cr_assert_eq(ns_lookup(ns, NS_INO_ROOT, "2"), 0, "unpadded name");
	ns_free(ns);
	unwrap(ix);
}

Test(namespace, directory_labels_keep_names_and_key_basenames)
{
	const struct spec s[] = {
		{"n02", "n02/n02_9", "jpeg", 1},
		{"n01", "n01/n01_1", "jpeg", 2},
		{"n01", "n01/n01_0", "jpeg", 3},
	};
	struct index *ix = make_index(s, 3);
	struct namespace *ns = build(wrap(ix), NULL);
	uint64_t d = ns_lookup(ns, NS_INO_ROOT, "n01");

	cr_assert_eq(ns->numeric_labels, 0);
	cr_assert_str_eq(list_name(ns, d, 0), "n01_0.jpeg");
	cr_assert_str_eq(list_name(ns, d, 1), "n01_1.jpeg");
	cr_assert_null(list_name(ns, d, 2));
	ns_free(ns);
	unwrap(ix);
}

Test(namespace, control_dir_is_reachable_but_not_listed)
{
	const struct spec s[] = {{"1", "k", "jpg", 1}};
	struct index *ix = make_index(s, 1);
	struct namespace *ns = build(wrap(ix), NULL);

	cr_assert_eq(ns_lookup(ns, NS_INO_ROOT, ".echofs"), NS_INO_CONTROL_DIR);
	cr_assert_eq(ns_lookup(ns, NS_INO_CONTROL_DIR, "stats"), NS_INO_STATS);
	cr_assert_str_eq(list_name(ns, NS_INO_ROOT, 0), "1");
	cr_assert_null(list_name(ns, NS_INO_ROOT, 1));
	ns_free(ns);
	unwrap(ix);
}

#define A250 \
	"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa" \
	"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa" \
	"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa" \
	"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"

/* Every name of directory d: at most 255 bytes, unique, sorted, ending in
 * ext, found again by lookup; returns how many. */
static size_t check_names(const struct namespace *ns, uint64_t d,
			  const char *ext)
{
	size_t i, el = strlen(ext);
	const char *prev = NULL, *name;

	for (i = 0; (name = list_name(ns, d, i)); i++) {
		size_t len = strlen(name);
		cr_expect_leq(len, 255, "name %zu is %zu bytes", i, len);
		cr_expect(len > el && strcmp(name + len - el, ext) == 0,
			  "%s keeps its extension %s", name, ext);
		if (prev)
			cr_expect_lt(strcmp(prev, name), 0, "%s then %s",
				     prev, name);
		cr_expect_neq(ns_lookup(ns, d, name), 0, "%s", name);
		prev = name;
	}
	return i;
}

/* A 251-byte stem plus ".jpg" is 255 bytes: its duplicates' "_dup<N>" and
 * a longer extension override must shorten the stem, not pass 255. */
Test(namespace, long_names_stay_within_255_bytes)
{
	const struct spec s[] = {
		{"a", "x/b" A250, "jpg", 1}, {"a", "y/b" A250, "jpg", 2},
		{"a", "z/b" A250, "jpg", 3}, {"a", "w/b" A250, "jpg", 4},
	};
	struct index *ix = make_index(s, 4);
	struct namespace *ns = build(wrap(ix), NULL);
	uint64_t d = ns_lookup(ns, NS_INO_ROOT, "a");

	cr_assert_eq(strlen("b" A250), 251);
	cr_expect_eq(ns->counts.renamed_duplicates, 3);
	cr_expect_eq(check_names(ns, d, ".jpg"), 4);
	cr_expect_neq(ns_lookup(ns, d, "b" A250 ".jpg"), 0);
	ns_free(ns);
	ns = build(cur, "jpeg");
	d = ns_lookup(ns, NS_INO_ROOT, "a");
	cr_expect_eq(check_names(ns, d, ".jpeg"), 4);
	ns_free(ns);
	unwrap(ix);
}

/* A renamed duplicate must not take the name of another file: "k_dup1"
 * exists, and sample 1 is a second "k". */
Test(namespace, renamed_duplicates_do_not_collide)
{
	const struct spec s[] = {
		{"a", "x/k", "jpg", 1}, {"a", "y/k", "jpg", 2},
		{"a", "k_dup1", "jpg", 3}, {"a", "z/k", "jpg", 4},
	};
	struct index *ix = make_index(s, 4);
	struct namespace *ns = build(wrap(ix), NULL);
	uint64_t d = ns_lookup(ns, NS_INO_ROOT, "a");

	cr_expect_eq(check_names(ns, d, ".jpg"), 4);
	ns_free(ns);
	unwrap(ix);
}

Test(namespace, duplicate_names_are_made_unique)
{
	const struct spec s[] = {
		{"a", "x/k", "jpg", 1}, {"a", "y/k", "jpg", 2}, {"a", "z/k", "jpg", 3},
	};
	struct index *ix = make_index(s, 3);
	struct namespace *ns = build(wrap(ix), NULL);
	uint64_t d = ns_lookup(ns, NS_INO_ROOT, "a");

	cr_assert_eq(ns->counts.renamed_duplicates, 2);
	cr_assert_neq(ns_lookup(ns, d, "k.jpg"), 0);
	cr_assert_neq(ns_lookup(ns, d, "k_dup1.jpg"), 0);
	cr_assert_neq(ns_lookup(ns, d, "k_dup2.jpg"), 0);
	/* Listing stays sorted so lookups by binary search work. */
	for (size_t i = 1; i < 3; i++)
		cr_assert_lt(strcmp(list_name(ns, d, i - 1), list_name(ns, d, i)), 0);
	ns_free(ns);
	unwrap(ix);
}

Test(namespace, every_inode_round_trips)
{
	struct spec s[50];
	char keys[50][8], labels[50][4];
	for (int i = 0; i < 50; i++) {
		snprintf(keys[i], sizeof(keys[i]), "k%02d", 49 - i);
		snprintf(labels[i], sizeof(labels[i]), "%d", i % 7);
		s[i] = (struct spec){labels[i], keys[i], "jpg", (uint64_t)i + 1};
	}
	struct index *ix = make_index(s, 50);
	struct namespace *ns = build(wrap(ix), NULL);
	size_t seen = 0;

	for (size_t c = 0; c < ns->nclasses; c++) {
		uint64_t d = ns_class_ino(ns, (uint32_t)c);
		const char *name;
		int is_dir;
		uint64_t ino;
		for (size_t i = 0; (ino = ns_list(ns, d, i, &name, &is_dir)); i++) {
			uint32_t num;
			cr_assert_eq(ns_lookup(ns, d, name), ino);
			cr_assert_eq(ns_kind_of(ns, ino, &num), NS_FILE);
			const struct index_sample *sm = &ix->samples[ns->files[num].sample];
			cr_assert_eq(sm->size, ns_file_size(ns, num));
			cr_assert_eq(strtoull(index_label(ix, sm), NULL, 10), c);
			seen++;
		}
	}
	cr_assert_eq(seen, 50);
	ns_free(ns);
	unwrap(ix);
}

Test(namespace, extension_override)
{
	const struct spec s[] = {{"1", "a", "jpg", 1}, {"1", "b", "jpeg", 2}};
	struct index *ix = make_index(s, 2);
	struct namespace *ns = build(wrap(ix), "ppm");
	uint64_t d = ns_lookup(ns, NS_INO_ROOT, "1");

	cr_assert_str_eq(list_name(ns, d, 0), "a.ppm");
	cr_assert_str_eq(list_name(ns, d, 1), "b.ppm");
	cr_assert_eq(ns_lookup(ns, d, "a.jpg"), 0);
	ns_free(ns);
	unwrap(ix);
}

/* Many nodes: shards sorted by class (shard s holds class s only), 4
 * shards over 2 ranks. Each rank shows only its samples, yet lists all 4
 * class directories (empty where its part has none) with the same class
 * numbers as every other rank; the two views are disjoint and cover all. */
Test(namespace, rank_view_keeps_every_class)
{
	static const char *const labels[] = {"0", "1", "2", "3"};
	struct index *ix = index_new();
	uint32_t seen[16] = {0};
	char key[16], err[128];

	for (uint32_t s = 0; s < 4; s++) {
		char url[32];
		snprintf(url, sizeof(url), "http://h/%u.tar", s);
		cr_assert_eq(index_add_shard(ix, url, 1 << 20, "\"e\""), s);
		for (int i = 0; i < 4; i++) {
			snprintf(key, sizeof(key), "k%u_%d", s, i);
			cr_assert_eq(index_add_sample(ix, s, 512 * (i + 1), 10,
						      labels[s], key, "jpg"), 0);
		}
	}
	for (uint32_t rank = 0; rank < 2; rank++) {
		struct dataset *ds = dataset_wrap(ix, NULL);
		cr_assert_eq(dataset_set_part(ds, rank, 2, 0, err, sizeof(err)),
			     0, "%s", err);
		struct namespace *ns = build(ds, NULL);
		cr_assert_eq(ns->nclasses, 4, "rank %u", rank);
		cr_assert_eq(ns->nfiles, 8, "rank %u", rank);
		size_t empty = 0;
		for (uint32_t c = 0; c < 4; c++) {
			cr_assert_str_eq(ns->classes[c].name, labels[c]);
			empty += ns->classes[c].count == 0;
		}
		cr_assert_eq(empty, 2, "rank %u: %zu empty classes", rank, empty);
		for (size_t f = 0; f < ns->nfiles; f++) {
			uint32_t smp = ns->files[f].sample;
			cr_assert(dataset_in_view(ds, smp));
			cr_assert_eq(ns_sample_class(ns, smp),
				     ix->samples[smp].shard);
			seen[smp]++;
		}
		ns_free(ns);
		dataset_close(ds);
	}
	for (int i = 0; i < 16; i++)
		cr_assert_eq(seen[i], 1, "sample %d shown %u times", i, seen[i]);
	index_free(ix);
}

/* ---- the samples layout ------------------------------------------------ */

struct mspec {
	const char *key, *ext;
};

/* An index of members only (and the samples a scan would add for
 * labelled images: none here), format 3. */
static struct index *member_index(const struct mspec *m, size_t n)
{
	struct index *ix = index_new();
	uint32_t sh = index_add_shard(ix, "http://h/a.tar", 1 << 20, "");

	for (size_t i = 0; i < n; i++)
		cr_assert_eq(index_add_member(ix, sh, 512 * (i + 1), i + 1,
					      m[i].key, m[i].ext),
			     0, "%s.%s", m[i].key, m[i].ext);
	ix->has_members = true;
	return ix;
}

/* The inode of a path from the root ("a/b/c.txt"), 0 if none. */
static uint64_t walk_path(const struct namespace *ns, const char *path)
{
	char buf[256], *save = NULL;
	uint64_t ino = NS_INO_ROOT;

	snprintf(buf, sizeof(buf), "%s", path);
	for (char *c = strtok_r(buf, "/", &save); c && ino;
	     c = strtok_r(NULL, "/", &save))
		ino = ns_lookup(ns, ino, c);
	return ino;
}

Test(namespace, samples_layout_tree)
{
	const struct mspec m[] = {
		{"b/x", "jpg"},	 {"b/x", "txt"},    {"a/d/e/k", "seg.PNG"},
		{"top", "json"}, {"a/k", "txt"},    {".hid/z", "txt"},
		{"a/k", "txt"},	 {"x", "y"},	    {"x.y/z", "txt"},
		{"b/.h/q", "c"},
	};
	struct index *ix = member_index(m, sizeof(m) / sizeof(m[0]));
	struct namespace *ns = (struct namespace *)1;
	uint32_t num;
	uint64_t ino;
	int is_dir;
	const char *name;

	cr_assert_eq(ns_open_samples(wrap(ix), &ns), 0);
	/* root: directories a, b, x.y first (sorted), then the file top.json;
	 * "x.y" the file gives way to x.y the directory */
	cr_expect_str_eq(list_name(ns, NS_INO_ROOT, 0), "a");
	cr_expect_str_eq(list_name(ns, NS_INO_ROOT, 1), "b");
	cr_expect_str_eq(list_name(ns, NS_INO_ROOT, 2), "x.y");
	cr_expect_str_eq(list_name(ns, NS_INO_ROOT, 3), "top.json");
	cr_expect_null(list_name(ns, NS_INO_ROOT, 4));
	cr_expect_eq(ns->counts.skipped_clash, 1);
	cr_expect_eq(ns->counts.skipped_hidden, 2);
	cr_expect_eq(ns->counts.renamed_duplicates, 1);
	ino = walk_path(ns, "a/d/e/k.seg.PNG");
	cr_assert_eq(ns_kind_of(ns, ino, &num), NS_FILE);
	cr_expect_eq(ns_file_size(ns, num), 3); /* member 2: size 3 */
	cr_expect_neq(walk_path(ns, "b/x.jpg"), 0);
	cr_expect_neq(walk_path(ns, "x.y/z.txt"), 0);
	cr_expect_eq(ns_kind_of(ns, walk_path(ns, "a/d"), &num), NS_CLASS);
	cr_expect_str_eq(ns_dir_name(ns, num), "d");
	/* a: directory d first, then k.txt and its duplicate */
	ino = walk_path(ns, "a");
	cr_expect_eq(ns_list(ns, ino, 0, &name, &is_dir), walk_path(ns, "a/d"));
	cr_expect(is_dir);
	cr_expect_str_eq(list_name(ns, ino, 1), "k.txt");
	cr_expect_str_eq(list_name(ns, ino, 2), "k_dup6.txt");
	cr_expect_eq(walk_path(ns, ".hid/z.txt"), 0);
	cr_expect_eq(ns_sample_class(ns, 0), NS_NO_CLASS);
	ns_free(ns);
	unwrap(ix);
}

Test(namespace, samples_layout_needs_members)
{
	const struct spec s[] = {{"1", "k", "jpg", 1}};
	struct index *ix = make_index(s, 1);
	struct namespace *ns = (struct namespace *)1;

	cr_expect_eq(ns_open_samples(wrap(ix), &ns), -ENOTSUP);
	cr_expect_null(ns);
	unwrap(ix);
}

/* An image member that is a sample's image reads through the sample (its
 * sum checked, its reads tracked); one whose name differs from the
 * sample's ("JPG") and every other member through its own number. */
Test(namespace, samples_layout_reads_images_as_samples)
{
	struct index *ix = index_new();
	uint32_t sh = index_add_shard(ix, "http://h/a.tar", 1 << 20, "");
	struct namespace *ns = (struct namespace *)1;
	uint32_t num;

	cr_assert_eq(index_add_sample(ix, sh, 512, 5, "c", "c/k", "jpg"), 0);
	cr_assert_eq(index_add_sample(ix, sh, 2048, 4, "c", "c/k2", "JPG"), 0);
	cr_assert_eq(index_add_member(ix, sh, 512, 5, "c/k", "jpg"), 0);
	cr_assert_eq(index_add_member(ix, sh, 1024, 3, "c/k", "txt"), 0);
	cr_assert_eq(index_add_member(ix, sh, 2048, 4, "c/k2", "JPG"), 0);
	ix->has_members = true;
	cr_assert_eq(ns_open_samples(wrap(ix), &ns), 0);
	cr_assert_eq(ns_kind_of(ns, walk_path(ns, "c/k.jpg"), &num), NS_FILE);
	cr_expect_eq(ns->files[num].sample, 0);
	cr_assert_eq(ns_kind_of(ns, walk_path(ns, "c/k.txt"), &num), NS_FILE);
	cr_expect_eq(ns->files[num].sample, 2 + 1);
	cr_assert_eq(ns_kind_of(ns, walk_path(ns, "c/k2.JPG"), &num), NS_FILE);
	cr_expect_eq(ns->files[num].sample, 2 + 2);
	cr_expect_eq(ns_file_size(ns, num), 4);
	ns_free(ns);
	unwrap(ix);
}

/* ---- duplicate keys (issue 45) ---------------------------------------- */

struct sspec {
	uint32_t shard;
	const char *key, *ext;
};

/* Members over nshards shards (format 3, no samples). */
static struct index *shard_members(const struct sspec *m, size_t n,
				   uint32_t nshards)
{
	struct index *ix = index_new();
	char url[32];

	for (uint32_t s = 0; s < nshards; s++) {
		snprintf(url, sizeof(url), "http://h/%u.tar", s);
		cr_assert_eq(index_add_shard(ix, url, 1 << 20, ""), s);
	}
	for (size_t i = 0; i < n; i++)
		cr_assert_eq(index_add_member(ix, m[i].shard, 512 * (i + 1),
					      i + 1, m[i].key, m[i].ext),
			     0);
	ix->has_members = true;
	return ix;
}

/* The member number (from 0 in the member list) a path reads, or -1. */
static long member_at(const struct namespace *ns, const char *path)
{
	uint32_t num;

	if (ns_kind_of(ns, walk_path(ns, path), &num) != NS_FILE)
		return -1;
	return (long)ns->files[num].sample -
	       (long)dataset_nsamples(ns->ds);
}

/* A key met again in another shard is renamed as a whole sample: every
 * member of it gets one suffix (the number of its first member), even a
 * member whose own name is not repeated (z.txt); the first keeps its
 * names. A suffix that is another key's name moves on. */
Test(namespace, samples_layout_renames_whole_samples)
{
	const struct sspec m[] = {
		{0, "d/x", "jpg"},	{0, "d/x", "json"}, {0, "d/y", "jpg"},
		{0, "d/y", "txt"},	{0, "d/x_dup6", "jpg"},
		{1, "d/x", "jpg"},	{1, "d/x", "json"}, {1, "d/x", "txt"},
		{1, "d/y", "jpg"},	{1, "d/y", "txt"},
	};
	struct index *ix = shard_members(m, sizeof(m) / sizeof(m[0]), 2);
	struct namespace *ns = (struct namespace *)1;

	cr_assert_eq(ns_open_samples(wrap(ix), &ns), 0);
	cr_expect_eq(member_at(ns, "d/x.jpg"), 0);
	cr_expect_eq(member_at(ns, "d/x.json"), 1);
	cr_expect_eq(member_at(ns, "d/y.txt"), 3);
	cr_expect_eq(member_at(ns, "d/x_dup6.jpg"), 4, "a real key keeps");
	/* shard 1's x: "_dup5" is free */
	cr_expect_eq(member_at(ns, "d/x_dup5.jpg"), 5);
	cr_expect_eq(member_at(ns, "d/x_dup5.json"), 6);
	cr_expect_eq(member_at(ns, "d/x_dup5.txt"), 7);
	cr_expect_eq(member_at(ns, "d/x.txt"), -1, "no mix of two samples");
	/* shard 1's y starts at member 8: one suffix for both members */
	cr_expect_eq(member_at(ns, "d/y_dup8.jpg"), 8);
	cr_expect_eq(member_at(ns, "d/y_dup8.txt"), 9);
	cr_expect_eq(ns->nfiles, 10);
	cr_expect_eq(ns->counts.duplicate_keys, 2);
	cr_expect_eq(ns->counts.dup_first, dataset_nsamples(ns->ds) + 0);
	cr_expect_eq(ns->counts.dup_again, dataset_nsamples(ns->ds) + 5);
	ns_free(ns);
	unwrap(ix);
}

/* A renamed key must not take a real key's name: x's second sample
 * starts at member 2, and "x_dup2" is a key of shard 0. */
Test(namespace, samples_layout_suffix_skips_real_keys)
{
	const struct sspec m[] = {
		{0, "x", "jpg"},      {0, "x_dup2", "jpg"}, {1, "x", "jpg"},
		{1, "x", "txt"},
	};
	struct index *ix = shard_members(m, 4, 2);
	struct namespace *ns = (struct namespace *)1;

	cr_assert_eq(ns_open_samples(wrap(ix), &ns), 0);
	cr_expect_eq(member_at(ns, "x_dup2.jpg"), 1);
	cr_expect_eq(member_at(ns, "x_dup2_1.jpg"), 2);
	cr_expect_eq(member_at(ns, "x_dup2_1.txt"), 3);
	cr_expect_eq(ns->nfiles, 4);
	ns_free(ns);
	unwrap(ix);
}

/* A sample's members need not be adjacent in the member list (format 3
 * appends the images its M lines imply after every F line): shard 1's x
 * is still one sample, renamed with one suffix. */
Test(namespace, samples_layout_sample_is_key_and_shard)
{
	const struct sspec m[] = {
		{0, "x", "txt"}, {1, "x", "txt"}, {0, "x", "jpg"}, {1, "x", "jpg"},
	};
	struct index *ix = shard_members(m, 4, 2);
	struct namespace *ns = (struct namespace *)1;

	cr_assert_eq(ns_open_samples(wrap(ix), &ns), 0);
	cr_expect_eq(member_at(ns, "x.txt"), 0);
	cr_expect_eq(member_at(ns, "x.jpg"), 2);
	cr_expect_eq(member_at(ns, "x_dup1.txt"), 1);
	cr_expect_eq(member_at(ns, "x_dup1.jpg"), 3);
	cr_expect_eq(ns->counts.duplicate_keys, 1);
	ns_free(ns);
	unwrap(ix);
}

/* The names are the index's, not the view's: a rank that shows only the
 * second shard names its x as a single mount does. */
Test(namespace, samples_layout_dup_names_agree_on_every_rank)
{
	const struct sspec m[] = {
		{0, "x", "jpg"}, {0, "x", "txt"}, {1, "x", "jpg"}, {1, "x", "txt"},
	};
	struct index *ix = shard_members(m, 4, 2);
	char err[128];
	int found = 0;

	/* a sample in each shard, for the partition's weights (at offsets no
	 * member has: the members read as themselves) */
	for (uint32_t s = 0; s < 2; s++)
		cr_assert_eq(index_add_sample(ix, s, 1 << 19, 1, "c", "s", "jpg"),
			     0);

	for (uint32_t rank = 0; rank < 2; rank++) {
		struct dataset *ds = dataset_wrap(ix, NULL);
		struct namespace *ns = (struct namespace *)1;
		cr_assert_eq(dataset_set_part(ds, rank, 2, 0, err, sizeof(err)),
			     0, "%s", err);
		cr_assert_eq(ns_open_samples(ds, &ns), 0);
		cr_expect_eq(ns->nfiles, 2);
		if (member_at(ns, "x_dup4.jpg") == 2) { /* 2 samples first */
			cr_expect_eq(member_at(ns, "x_dup4.txt"), 3);
			found++;
		} else {
			cr_expect_eq(member_at(ns, "x.jpg"), 0, "rank %u", rank);
			cr_expect_eq(member_at(ns, "x.txt"), 1, "rank %u", rank);
		}
		ns_free(ns);
		dataset_close(ds);
	}
	cr_expect_eq(found, 1);
	index_free(ix);
}

/* The imagefolder layout: one file per sample, and the same name for a
 * sample on every rank (decided over the index, not the view). */
Test(namespace, dup_names_agree_on_every_rank)
{
	struct index *ix = index_new();
	char err[128];
	int renamed = 0;

	for (uint32_t s = 0; s < 2; s++) {
		char url[32];
		snprintf(url, sizeof(url), "http://h/%u.tar", s);
		cr_assert_eq(index_add_shard(ix, url, 1 << 20, "\"e\""), s);
		cr_assert_eq(index_add_sample(ix, s, 512, 10, "a", "k", "jpg"),
			     0);
	}
	for (uint32_t rank = 0; rank < 2; rank++) {
		struct dataset *ds = dataset_wrap(ix, NULL);
		cr_assert_eq(dataset_set_part(ds, rank, 2, 0, err, sizeof(err)),
			     0, "%s", err);
		struct namespace *ns = build(ds, NULL);
		uint64_t d = ns_lookup(ns, NS_INO_ROOT, "a");
		cr_assert_eq(ns->nfiles, 1, "rank %u", rank);
		if (ns->files[0].sample == 1) {
			cr_expect_str_eq(list_name(ns, d, 0), "k_dup1.jpg");
			cr_expect_eq(ns->counts.duplicate_keys, 1);
			renamed++;
		} else {
			cr_expect_str_eq(list_name(ns, d, 0), "k.jpg");
		}
		ns_free(ns);
		dataset_close(ds);
	}
	cr_expect_eq(renamed, 1);
	index_free(ix);
}
