/* test_resolve.c - where the index "beside the shards" is looked for, for
 * every source form (brace, list file, s3 prefix, s3 glob). */
#include "cache/index/resolve.h"

#include <criterion/criterion.h>
#include <errno.h>
#include <string.h>

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
