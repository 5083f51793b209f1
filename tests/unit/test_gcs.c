/* test_gcs.c - gs:// URLs: which strings are gs:// sources and listings,
 * how http's hooks map them (path style on the endpoint, keys
 * percent-encoded, STORAGE_EMULATOR_HOST), and that other URLs go to the
 * next hooks untouched. */
#include "fetch/net/gcs.h"
#include "fetch/net/http.h"

#include <criterion/criterion.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

Test(gcs, urls_and_listings)
{
	cr_assert(gcs_is_url("gs://bucket/key.tar"));
	cr_assert(gcs_is_url("gs://my_bucket.example/a/b"));
	cr_assert(gcs_is_url("GS://abc?list-type=2"));
	cr_assert_not(gcs_is_url("gs://ab/x"), "names have 3 bytes at least");
	cr_assert_not(gcs_is_url("gs://Bucket/x"), "upper case");
	cr_assert_not(gcs_is_url("gs:///x"));
	cr_assert_not(gcs_is_url("s3://bucket/x"));
	cr_assert_not(gcs_is_url(NULL));
	cr_assert(gcs_is_listing("gs://bucket/prefix/"));
	cr_assert(gcs_is_listing("gs://bucket/prefix/*.tar"));
	cr_assert(gcs_is_listing("gs://bucket/"));
	cr_assert_not(gcs_is_listing("gs://bucket/train-{0..9}.tar"));
	cr_assert_not(gcs_is_listing("gs://bucket"));
}

static char *mapped(const struct http_auth *a, const char *url)
{
	char *out = NULL;

	cr_assert_eq(a->map_url(a->ud, url, &out), 0, "%s", url);
	return out;
}

Test(gcs, map_path_style_and_next_hooks)
{
	struct gcs_opts o = {.endpoint = "http://127.0.0.1:9/base/",
			     .no_sign = 1};
	char err[256], *u, buf[256];
	struct gcs *g;
	const struct http_auth *a;
	struct http_req_info ri = {.method = "GET"};

	cr_assert_eq(gcs_open(&o, &g, err, sizeof(err)), 0, "%s", err);
	a = gcs_http_auth(g, NULL);
	u = mapped(a, "gs://dset/test/a b+c%é.tar");
	cr_assert_str_eq(u, "http://127.0.0.1:9/base/dset/test/a%20b%2Bc%25"
			    "%C3%A9.tar");
	ri.url = u;
	cr_assert_eq(a->sign(a->ud, &ri, buf, sizeof(buf)), 0);
	cr_assert_str_eq(buf, "", "no_sign: no Authorization");
	free(u);
	u = mapped(a, "gs://dset?list-type=2&prefix=x%2F");
	cr_assert_str_eq(u, "http://127.0.0.1:9/base/dset?list-type=2&prefix="
			    "x%2F");
	free(u);
	cr_assert_null(mapped(a, "http://host/x.tar"), "not ours: as it is");
	cr_assert_null(mapped(a, "s3://dset?list-type=2"));
	cr_assert_eq(a->map_url(a->ud, "gs://dset?a b", &u), -EINVAL);
	gcs_free(g);
}

Test(gcs, storage_emulator_host_and_bad_endpoints)
{
	struct gcs_opts o = {.no_sign = 1};
	char err[256], *u;
	struct gcs *g;

	setenv("STORAGE_EMULATOR_HOST", "127.0.0.1:4443", 1);
	cr_assert_eq(gcs_open(&o, &g, err, sizeof(err)), 0, "%s", err);
	u = mapped(gcs_http_auth(g, NULL), "gs://dset/k");
	cr_assert_str_eq(u, "http://127.0.0.1:4443/dset/k");
	free(u);
	gcs_free(g);
	unsetenv("STORAGE_EMULATOR_HOST");
	cr_assert_eq(gcs_open(&o, &g, err, sizeof(err)), 0, "%s", err);
	u = mapped(gcs_http_auth(g, NULL), "gs://dset/k");
	cr_assert_str_eq(u, "https://storage.googleapis.com/dset/k");
	free(u);
	gcs_free(g);
	for (const char *const *e =
		     (const char *const[]){"ftp://x", "http://user@host",
					   "http://h/?q", "http://", NULL};
	     *e; e++) {
		o.endpoint = *e;
		g = (struct gcs *)&o; /* must be reset */
		cr_expect_eq(gcs_open(&o, &g, err, sizeof(err)), -EINVAL, "%s",
			     *e);
		cr_expect_null(g, "%s", *e);
		cr_expect(strstr(err, "bad GCS endpoint"), "%s: %s", *e, err);
	}
}
