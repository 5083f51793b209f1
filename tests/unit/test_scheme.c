/* test_scheme.c - fetch_scheme_of, fetch_has_scheme, fetch_source_has,
 * fetch_url_authority. */
#include "fetch/net/scheme.h"

#include "fixtures.h"

#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

Test(scheme, table)
{
	static const struct {
		const char *url;
		enum fetch_scheme want;
	} cases[] = {
		{"http://h/a.tar", FETCH_SCHEME_HTTP},
		{"HTTPS://h/a.tar", FETCH_SCHEME_HTTP},
		{"s3://bucket/ds/", FETCH_SCHEME_BUCKET},
		{"S3://bucket/x.tar", FETCH_SCHEME_BUCKET},
		{"gs://bucket/x.tar", FETCH_SCHEME_BUCKET},
		{"gs://ab/x.tar", FETCH_SCHEME_OTHER}, /* 3 bytes at least */
		{"s3:///nobucket", FETCH_SCHEME_OTHER},
		{"ftp://h/x.tar", FETCH_SCHEME_OTHER},
		{"/data/shards.list", FETCH_SCHEME_FILE},
		{"shards.list", FETCH_SCHEME_FILE},
		{NULL, FETCH_SCHEME_FILE},
	};
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++)
		cr_expect_eq(fetch_scheme_of(cases[i].url), cases[i].want, "%s",
			     cases[i].url ? cases[i].url : "NULL");
}

Test(scheme, list_file_and_authority)
{
	char dir[] = "/tmp/echofs-scheme-XXXXXX", path[64];
	const char *text = "# shards\ngs://b/a.tar\nhttps://h/b.tar\n";

	cr_assert_not_null(mkdtemp(dir));
	snprintf(path, sizeof(path), "%s/list", dir);
	fx_write_file(path, text, strlen(text));
	cr_expect(fetch_source_has(path, "gs"));
	cr_expect(fetch_source_has(path, "https"));
	cr_expect(!fetch_source_has(path, "s3"));
	cr_expect(fetch_source_has("s3://b/x.tar", "s3"));
	cr_expect(fetch_source_has("S3://b/x.tar", "s3"));
	cr_expect(!fetch_source_has("s3://b/x.tar", "gs"));
	cr_expect(!fetch_source_has("s3x://b/x.tar", "s3"));
	cr_expect(!fetch_source_has("http://h/list-with-gs", "gs"),
		  "only local files are read as lists");
	cr_expect_str_eq(fetch_url_authority("s3://b/x"), "b/x");
	cr_expect_str_eq(fetch_url_authority("/p/x"), "/p/x");
	unlink(path);
	rmdir(dir);
}
