/* test_resolve.c - where the index "beside the shards" is looked for, for
 * every source form (brace, list file, s3 prefix, s3 glob). */
#include "cache/index/resolve.h"

#include "common/file.h"
#include "common/log.h"
#include "fetch/format/index.h"
#include "fetch/net/http.h"

#include <criterion/criterion.h>
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

struct beside_case {
	const char *source, *want;
};

static const struct beside_case beside_cases[] = {
	{"http://h/ds/train-{000000..000059}.tar",
	 "http://h/ds/train.echofs-index"},
	{"http://h/ds/train.txt", "http://h/ds/train.echofs-index"},
	{"http://h/ds/shard-0.tar", "http://h/ds/shard-0.echofs-index"},
	{"s3://b/ds/train-{000000..000009}.tar",
	 "s3://b/ds/train.echofs-index"},
	{"s3://b/ds/train-*.tar", "s3://b/ds/train.echofs-index"},
	/* prefix and bare-glob sources: named after the prefix's last
	 * component, inside the prefix (the listing takes .tar keys only) */
	{"s3://b/ds/train/", "s3://b/ds/train/train.echofs-index"},
	{"s3://b/ds/train/*.tar", "s3://b/ds/train/train.echofs-index"},
	{"s3://b/train/", "s3://b/train/train.echofs-index"},
	/* the bucket's (or host's) root: no component to take a name from */
	{"s3://b/", "s3://b/shards.echofs-index"},
	{"s3://b/*.tar", "s3://b/shards.echofs-index"},
	{"http://h/{0..9}.tar", "http://h/shards.echofs-index"},
	{"http://h/ds/{0..9}.tar", "http://h/ds/ds.echofs-index"},
};

Test(resolve, beside_index_names)
{
	char buf[512];

	for (size_t i = 0; i < sizeof(beside_cases) / sizeof(beside_cases[0]);
	     i++) {
		const struct beside_case *c = &beside_cases[i];
		cr_assert_eq(resolve_beside_index(c->source, buf, sizeof(buf)),
			     0, "%s", c->source);
		cr_expect_str_eq(buf, c->want, "%s -> %s", c->source, buf);
	}
}

Test(resolve, beside_index_too_long)
{
	char buf[24];

	cr_expect_eq(resolve_beside_index("s3://bucket/long/prefix/", buf,
					  sizeof(buf)),
		     -ENAMETOOLONG);
}

/* ---- the index kept in cache_dir ----------------------------------------- */

/* rename(2) that notes the mode of a kept index's temporary file as it is
 * renamed into place (linked with -Wl,--wrap=rename: see unit_link_args in
 * tests/meson.build): the copy is its owner's from the first byte. */
int __real_rename(const char *from, const char *to);
int __wrap_rename(const char *from, const char *to);
static int kept_mode = -1;

int __wrap_rename(const char *from, const char *to)
{
	struct stat sb;
	size_t n = strlen(to);
	if (n > 13 && strcmp(to + n - 13, ".echofs-index") == 0 &&
	    stat(from, &sb) == 0)
		kept_mode = (int)(sb.st_mode & 0777);
	return __real_rename(from, to);
}

static void put(const char *path, const char *text)
{
	FILE *f = fopen(path, "w");
	cr_assert_not_null(f, "%s", path);
	fputs(text, f);
	cr_assert_eq(fclose(f), 0);
}

/* A list file with an index beside it, whose shard's server is gone: the
 * index is kept (before the probe fails the call). */
static int resolve_beside(const char *dir, const char *cache_dir)
{
	char list[256], beside[256], err[512];
	struct resolve_opts o = {.source = list, .cache_dir = cache_dir};
	struct http_opts ho = {.retry_budget_s = 0.2, .connect_timeout_s = 1};
	struct resolve_info info;
	struct index *ix = NULL;
	struct http *h = NULL;
	int r;

	snprintf(list, sizeof(list), "%s/train.txt", dir);
	snprintf(beside, sizeof(beside), "%s/train.echofs-index", dir);
	put(list, "http://127.0.0.1:1/a.tar?s=1\n");
	put(beside, "echofs-index 1\nS\thttp://127.0.0.1:1/a.tar\t1024\t-\n"
		    "M\t0\t512\t100\t7\tk0\tjpg\n");
	cr_assert_eq(http_open(&ho, &h, err, sizeof(err)), 0, "%s", err);
	r = resolve_open(&o, h, NULL, &ix, &info, err, sizeof(err));
	cr_expect_str_eq(info.index_from, "beside");
	index_free(ix);
	http_free(h);
	return r;
}

static int count_kept(const char *cache_dir)
{
	char d[512];
	struct dirent *de;
	DIR *dd;
	int n = 0;

	snprintf(d, sizeof(d), "%s/index", cache_dir);
	dd = opendir(d);
	if (!dd)
		return 0;
	while ((de = readdir(dd)))
		n += strstr(de->d_name, ".echofs-index") != NULL;
	closedir(dd);
	return n;
}

Test(resolve, kept_index_is_private_from_its_first_byte)
{
	char dir[] = "/tmp/echofs-resolve-XXXXXX", cache[64], cmd[128];

	cr_assert_not_null(mkdtemp(dir));
	snprintf(cache, sizeof(cache), "%s/cache", dir);
	cr_assert_eq(mkdir(cache, 0700), 0);
	kept_mode = -1;
	resolve_beside(dir, cache);
	cr_expect_eq(count_kept(cache), 1);
	cr_expect_eq(kept_mode, 0600, "renamed into place with mode %o",
		     kept_mode);
	snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
	cr_expect_eq(system(cmd), 0);
}

Test(resolve, unmakeable_index_dir_is_said)
{
	char dir[] = "/tmp/echofs-resolve-XXXXXX", cache[64], p[128];
	char *text = NULL;
	size_t len;

	cr_assert_not_null(mkdtemp(dir));
	snprintf(cache, sizeof(cache), "%s/cache", dir);
	cr_assert_eq(mkdir(cache, 0700), 0);
	snprintf(p, sizeof(p), "%s/index", cache);
	put(p, "a file where the index directory belongs\n");
	snprintf(p, sizeof(p), "%s/log", dir);
	cr_assert_eq(log_set_file(p), 0);
	resolve_beside(dir, cache);
	/* The log is line-buffered: no need to close it (log_set_file takes
	 * no NULL; Criterion runs each test in a process of its own). */
	cr_assert_eq(file_read_all(p, 1 << 20, &text, &len), 0);
	cr_expect(strstr(text, "cannot make") && strstr(text, "/index: not a "
							      "directory"),
		  "%s", text);
	free(text);
	snprintf(p, sizeof(p), "rm -rf %s", dir);
	cr_expect_eq(system(p), 0);
}
