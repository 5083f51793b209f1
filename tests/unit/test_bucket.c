/* test_bucket.c - the bucket backend registry (scheme lookup, listing
 * sources) and the set a source opens: which backends, and that their
 * chained hooks map and sign each scheme's URLs with its own backend. */
#include "fetch/net/bucket.h"
#include "fetch/net/http.h"

#include <criterion/criterion.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static void clean_env(void)
{
	static const char *const vars[] = {
		"AWS_REGION",	    "AWS_DEFAULT_REGION",
		"AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_S3",
		"AWS_PROFILE",	    "STORAGE_EMULATOR_HOST"};
	for (size_t i = 0; i < sizeof(vars) / sizeof(vars[0]); i++)
		unsetenv(vars[i]);
	setenv("AWS_CONFIG_FILE", "/nonexistent/config", 1);
	setenv("AWS_SHARED_CREDENTIALS_FILE", "/nonexistent/credentials", 1);
}

Test(bucket, registry_by_scheme)
{
	static const struct {
		const char *url, *scheme; /* NULL: no backend */
	} cases[] = {
		{"s3://bucket/k.tar", "s3"}, {"S3://bucket/", "s3"},
		{"gs://bucket/k.tar", "gs"}, {"GS://bucket?x", "gs"},
		{"http://h/a.tar", NULL},    {"https://h/a.tar", NULL},
		{"s3:/bucket", NULL},	     {"/data/list", NULL},
		{"ftp://h/x", NULL},	     {NULL, NULL},
	};
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		const struct bucket_ops *b = bucket_of(cases[i].url);
		const char *got = b ? b->scheme : NULL;

		cr_expect((got && cases[i].scheme &&
			   !strcmp(got, cases[i].scheme)) ||
				  (!got && !cases[i].scheme),
			  "%s: %s", cases[i].url ? cases[i].url : "NULL",
			  got ? got : "none");
	}
	cr_expect_not_null(bucket_at(0));
	for (size_t i = 0; bucket_at(i); i++)
		cr_expect_eq(bucket_of(bucket_at(i)->scheme) == NULL, 1,
			     "a bare scheme name is no URL");
	cr_expect(bucket_is_listing("s3://b/prefix/"));
	cr_expect(bucket_is_listing("gs://bucket/p/*.tar"));
	cr_expect_not(bucket_is_listing("gs://bucket/a-{0..3}.tar"));
	cr_expect_not(bucket_is_listing("http://h/p/"));
}

/* The mapped URL of url through a, or NULL when a leaves it alone. */
static char *map(const struct http_auth *a, const char *url)
{
	char *out = NULL;

	cr_assert_eq(a->map_url(a->ud, url, &out), 0, "%s", url);
	return out;
}

/* Opens the set for urls with conf c; NULL hooks when none opened. */
static struct buckets *open_set(const struct bucket_conf *c,
				const char *const *urls, size_t n)
{
	struct buckets *b = NULL;
	char err[512];

	cr_assert_eq(buckets_open(c, urls, n, &b, err, sizeof(err)), 0, "%s",
		     err);
	return b;
}

Test(bucket, source_opens_its_backend_only)
{
	struct bucket_conf c = {.endpoint = "http://127.0.0.1:9", .no_sign = 1};
	const char *gs[] = {"gs://bucket/a.tar", NULL};
	const char *http[] = {"http://h/a-{0..3}.tar", NULL};
	struct buckets *b;
	char *u;

	clean_env();
	b = open_set(&c, gs, 2);
	u = map(buckets_hooks(b), "gs://bucket/a.tar");
	cr_expect_str_eq(u ? u : "", "http://127.0.0.1:9/bucket/a.tar");
	free(u);
	cr_expect_null(map(buckets_hooks(b), "s3://bucket/a.tar"),
		       "no S3 backend for a gs:// source");
	buckets_free(b);
	/* endpoint= with no bucket URL: the first registered (S3) */
	b = open_set(&c, http, 2);
	u = map(buckets_hooks(b), "s3://bucket/a.tar");
	cr_expect_str_eq(u ? u : "", "http://127.0.0.1:9/bucket/a.tar");
	free(u);
	buckets_free(b);
	/* no option, no bucket URL: nothing open, no hooks */
	c = (struct bucket_conf){0};
	b = open_set(&c, http, 2);
	cr_expect_null(buckets_hooks(b));
	buckets_free(b);
}

Test(bucket, list_file_naming_both_chains_both)
{
	char dir[] = "/tmp/echofs-bucket-XXXXXX", path[64], *u;
	const char *text = "s3://sbucket/a.tar\ngs://gbucket/b.tar\n";
	struct bucket_conf c = {.endpoint = "http://127.0.0.1:9", .no_sign = 1};
	struct http_req_info ri = {.method = "GET"};
	const char *urls[1] = {path};
	char buf[256] = "x";
	struct buckets *b;
	FILE *f;

	clean_env();
	cr_assert_not_null(mkdtemp(dir));
	snprintf(path, sizeof(path), "%s/list", dir);
	f = fopen(path, "w");
	cr_assert_not_null(f);
	fputs(text, f);
	fclose(f);
	b = open_set(&c, urls, 1);
	u = map(buckets_hooks(b), "s3://sbucket/a.tar");
	cr_expect_str_eq(u ? u : "", "http://127.0.0.1:9/sbucket/a.tar");
	free(u);
	u = map(buckets_hooks(b), "gs://gbucket/b.tar");
	cr_expect_str_eq(u ? u : "", "http://127.0.0.1:9/gbucket/b.tar");
	free(u);
	cr_expect_null(map(buckets_hooks(b), "https://h/c.tar"));
	ri.url = "https://other.example/x";
	cr_expect_eq(buckets_hooks(b)->sign(buckets_hooks(b)->ud, &ri, buf,
					    sizeof(buf)),
		     0);
	cr_expect_str_eq(buf, "", "nothing signed for a URL of no backend");
	buckets_free(b);
	unlink(path);
	rmdir(dir);
}

Test(bucket, failed_open_names_the_backend)
{
	struct bucket_conf c = {.endpoint = "ftp://h", .no_sign = 1};
	const char *urls[] = {"s3://bucket/a.tar"};
	struct buckets *b = (struct buckets *)&c; /* must be reset */
	char err[256] = "";

	clean_env();
	cr_expect_eq(buckets_open(&c, urls, 1, &b, err, sizeof(err)), -EINVAL);
	cr_expect_null(b);
	cr_expect(strstr(err, "S3 endpoint") != NULL, "%s", err);
}
