/* test_s3.c - s3:// addressing (virtual-hosted, path-style, endpoints), the
 * signing hook's headers, listing sources and the S3 error code table. */
#include "fetch/net/http.h"
#include "fetch/net/s3.h"

#include <criterion/criterion.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void clean_env(void)
{
	static const char *const vars[] = {"AWS_REGION",
					   "AWS_DEFAULT_REGION",
					   "AWS_ENDPOINT_URL",
					   "AWS_ENDPOINT_URL_S3",
					   "AWS_PROFILE",
					   "AWS_ACCESS_KEY_ID",
					   "AWS_SECRET_ACCESS_KEY",
					   "AWS_SESSION_TOKEN"};
	for (size_t i = 0; i < sizeof(vars) / sizeof(vars[0]); i++)
		unsetenv(vars[i]);
	setenv("AWS_CONFIG_FILE", "/nonexistent/config", 1);
	setenv("AWS_SHARED_CREDENTIALS_FILE", "/nonexistent/credentials", 1);
	setenv("AWS_EC2_METADATA_DISABLED", "true", 1);
}

struct map_case {
	const char *endpoint, *region;
	int path_style;
	const char *in, *want; /* want NULL: not mapped */
};

static const struct map_case map_cases[] = {
	{NULL, "eu-west-1", 0, "s3://dset/a b/c+d=e%.tar",
	 "https://dset.s3.eu-west-1.amazonaws.com/a%20b/c%2Bd%3De%25.tar"},
	{NULL, "eu-west-1", 0, "s3://dset/k?x#y\xc3\xa9",
	 "https://dset.s3.eu-west-1.amazonaws.com/k%3Fx%23y%C3%A9"},
	{NULL, "us-east-1", 0, "s3://my.bucket/k",
	 "https://s3.us-east-1.amazonaws.com/my.bucket/k"}, /* TLS: no dots */
	{NULL, "us-east-1", 0, "s3://Upper_Case/k",
	 "https://s3.us-east-1.amazonaws.com/Upper_Case/k"},
	{NULL, "us-east-1", 1, "s3://dset/k",
	 "https://s3.us-east-1.amazonaws.com/dset/k"},
	{"http://127.0.0.1:9000", "us-east-1", 0, "s3://dset/p/k.tar",
	 "http://127.0.0.1:9000/dset/p/k.tar"},
	{"http://localhost:9000/", "us-east-1", 0, "s3://dset/k",
	 "http://localhost:9000/dset/k"},
	{"https://minio.example/base/", "us-east-1", 0, "s3://dset/k",
	 "https://dset.minio.example/base/k"},
	{NULL, "eu-west-1", 0, "s3://dset?list-type=2&prefix=a%2F",
	 "https://dset.s3.eu-west-1.amazonaws.com/?list-type=2&prefix=a%2F"},
	{"http://127.0.0.1:9000", "us-east-1", 0,
	 "s3://dset?list-type=2&prefix=a%2F",
	 "http://127.0.0.1:9000/dset?list-type=2&prefix=a%2F"},
	{NULL, "us-east-1", 0, "https://host/dset/k.tar", NULL},
	{NULL, "us-east-1", 0, "s3:///k", NULL},
};

Test(s3, addressing)
{
	clean_env();
	for (size_t i = 0; i < sizeof(map_cases) / sizeof(map_cases[0]); i++) {
		const struct map_case *c = &map_cases[i];
		struct s3_opts o = {.endpoint = c->endpoint,
				    .region = c->region,
				    .path_style = c->path_style,
				    .no_sign = 1};
		char err[256];
		struct s3 *s;
		const struct http_auth *a;
		char *out = NULL;

		cr_assert_eq(s3_open(&o, &s, err, sizeof(err)), 0, "%s", err);
		a = s3_http_auth(s);
		cr_assert_eq(a->map_url(a->ud, c->in, &out), 0, "case %zu", i);
		if (c->want)
			cr_expect_str_eq(out ? out : "(null)", c->want,
					 "case %zu: %s", i, out ? out : "");
		else
			cr_expect_null(out, "case %zu", i);
		free(out);
		s3_free(s);
	}
}

Test(s3, endpoint_and_region_from_environment)
{
	struct s3_opts o = {.no_sign = 1};
	char err[256], *out = NULL;
	struct s3 *s;

	clean_env();
	setenv("AWS_DEFAULT_REGION", "ap-south-1", 1);
	setenv("AWS_ENDPOINT_URL", "http://10.0.0.1:1", 1);
	setenv("AWS_ENDPOINT_URL_S3", "http://127.0.0.1:7000", 1);
	cr_assert_eq(s3_open(&o, &s, err, sizeof(err)), 0, "%s", err);
	s3_http_auth(s)->map_url(s, "s3://b/k", &out);
	cr_expect_str_eq(out, "http://127.0.0.1:7000/b/k"); /* _S3 wins */
	free(out);
	s3_free(s);
	unsetenv("AWS_ENDPOINT_URL_S3");
	unsetenv("AWS_ENDPOINT_URL");
	setenv("AWS_REGION", "eu-north-1", 1); /* beats AWS_DEFAULT_REGION */
	cr_assert_eq(s3_open(&o, &s, err, sizeof(err)), 0, "%s", err);
	s3_http_auth(s)->map_url(s, "s3://bkt/k", &out);
	cr_expect_str_eq(out, "https://bkt.s3.eu-north-1.amazonaws.com/k");
	free(out);
	s3_free(s);
}

Test(s3, bad_endpoint_refused)
{
	static const char *const bad[] = {"ftp://h", "h:9000",
					  "http://user:pw@h", "http://h?x=1",
					  "http://"};
	clean_env();
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		struct s3_opts o = {.endpoint = bad[i], .no_sign = 1};
		char err[256] = "";
		struct s3 *s = (struct s3 *)&o; /* must be reset */
		cr_expect_eq(s3_open(&o, &s, err, sizeof(err)), -EINVAL, "%s",
			     bad[i]);
		cr_expect_null(s, "%s", bad[i]);
		cr_expect(strstr(err, "bad S3 endpoint"), "%s", err);
		s3_free(s);
	}
}

static char *sign_headers(int requester_pays, const char *token,
			  const char *range)
{
	struct s3_opts o = {.endpoint = "http://127.0.0.1:9000",
			    .requester_pays = requester_pays};
	struct http_req_info ri = {.method = "GET",
				   .url = "http://127.0.0.1:9000/dset/k",
				   .range = range};
	char err[256], *buf = calloc(1, 8192);
	struct s3 *s;

	clean_env();
	setenv("AWS_ACCESS_KEY_ID", "AKIDEXAMPLE", 1);
	setenv("AWS_SECRET_ACCESS_KEY", "secret/key", 1);
	if (token)
		setenv("AWS_SESSION_TOKEN", token, 1);
	cr_assert_eq(s3_open(&o, &s, err, sizeof(err)), 0, "%s", err);
	cr_assert_eq(s3_http_auth(s)->sign(s, &ri, buf, 8192), 0);
	s3_free(s);
	return buf;
}

Test(s3, sign_hook_headers)
{
	char *h = sign_headers(0, NULL, "bytes=0-9");

	cr_expect(strstr(h, "x-amz-date: "), "%s", h);
	cr_expect(strstr(h, "x-amz-content-sha256: e3b0c44298fc"), "%s", h);
	cr_expect(strstr(h, "SignedHeaders=host;range;x-amz-content-sha256;"
			    "x-amz-date, Signature="),
		  "%s", h);
	cr_expect_null(strstr(h, "x-amz-security-token"), "%s", h);
	cr_expect_null(strstr(h, "secret/key"), "%s", h);
	free(h);
	h = sign_headers(1, "TOKEN/with+chars==", NULL);
	cr_expect(strstr(h, "x-amz-security-token: TOKEN/with+chars==\n"), "%s",
		  h);
	cr_expect(strstr(h, "x-amz-request-payer: requester\n"), "%s", h);
	cr_expect(strstr(h, "SignedHeaders=host;x-amz-content-sha256;x-amz-"
			    "date;x-amz-request-payer;x-amz-security-token,"),
		  "%s", h);
	free(h);
}

Test(s3, no_sign_sends_nothing)
{
	struct s3_opts o = {.no_sign = 1};
	struct http_req_info ri = {.method = "GET", .url = "https://h/b/k"};
	char err[256], buf[256] = "x";
	struct s3 *s;

	clean_env();
	cr_assert_eq(s3_open(&o, &s, err, sizeof(err)), 0, "%s", err);
	cr_expect_eq(s3_http_auth(s)->sign(s, &ri, buf, sizeof(buf)), 0);
	cr_expect_str_eq(buf, "");
	s3_free(s);
}

Test(s3, listing_sources)
{
	cr_expect(s3_is_listing("s3://b/prefix/"));
	cr_expect(s3_is_listing("s3://b/"));
	cr_expect(s3_is_listing("s3://b/p/*.tar"));
	cr_expect(s3_is_listing("s3://b/p/train-*"));
	cr_expect_not(s3_is_listing("s3://b/p/train-{0..3}.tar"));
	cr_expect_not(s3_is_listing("s3://b"));
	cr_expect_not(s3_is_listing("http://h/p/"));
	cr_expect(s3_is_url("s3://b/k"));
	cr_expect(s3_is_url("S3://b?x"));
	cr_expect_not(s3_is_url("s3://"));
	cr_expect_not(s3_is_url("s3:///k"));
	cr_expect_not(s3_is_url("s3://b@d/k"));
	cr_expect_not(s3_is_url(NULL));
}

Test(s3, error_codes)
{
	const char *why = NULL;

	cr_expect_eq(s3_code_errno("AccessDenied", &why), -EACCES);
	cr_expect_eq(s3_code_errno("SignatureDoesNotMatch", &why), -EACCES);
	cr_expect(strstr(why, "wrong secret"));
	cr_expect_eq(s3_code_errno("ExpiredToken", &why), -EACCES);
	cr_expect_eq(s3_code_errno("NoSuchBucket", &why), -ENOENT);
	cr_expect_eq(s3_code_errno("NoSuchKey", &why), -ENOENT);
	cr_expect_eq(s3_code_errno("SlowDown", &why), -EAGAIN);
	cr_expect_eq(s3_code_errno("WhatIsThis", &why), -EIO);
	cr_expect_null(why);
}

/* The region a signature names, from the sign hook's Authorization line. */
static int signs_for(struct s3 *s, const char *region)
{
	struct http_req_info ri = {.method = "GET",
				   .url = "http://127.0.0.1:9000/dset/k"};
	char buf[4096], want[96];

	cr_assert_eq(s3_http_auth(s)->sign(s, &ri, buf, sizeof(buf)), 0);
	snprintf(want, sizeof(want), "/%s/s3/aws4_request", region);
	return strstr(buf, want) != NULL;
}

static struct s3 *region_s3(const char *region)
{
	struct s3_opts o = {.endpoint = "http://127.0.0.1:9000",
			    .region = region};
	char err[256];
	struct s3 *s;

	clean_env();
	setenv("AWS_ACCESS_KEY_ID", "AKIDEXAMPLE", 1);
	setenv("AWS_SECRET_ACCESS_KEY", "secret/key", 1);
	cr_assert_eq(s3_open(&o, &s, err, sizeof(err)), 0, "%s", err);
	return s;
}

static const char wrong_region_body[] =
	"<Error><Code>AuthorizationHeaderMalformed</Code><Message>the region "
	"'us-east-1' is wrong; expecting 'eu-west-3'</Message><Region>"
	"eu-west-3</Region></Error>";

Test(s3, wrong_region_refusal_switches_an_unset_region_once)
{
	struct s3 *s = region_s3(NULL);
	const struct http_auth *a = s3_http_auth(s);

	cr_expect(signs_for(s, "us-east-1"));
	cr_expect_eq(a->failed(s, "http://127.0.0.1:9000/dset/k", 400,
			       wrong_region_body,
			       sizeof(wrong_region_body) - 1),
		     1);
	cr_expect(signs_for(s, "eu-west-3"));
	/* the same refusal again changes nothing: no second attempt */
	cr_expect_eq(a->failed(s, "http://127.0.0.1:9000/dset/k", 400,
			       wrong_region_body,
			       sizeof(wrong_region_body) - 1),
		     0);
	s3_free(s);
}

Test(s3, bodyless_refusal_uses_the_region_header)
{
	struct s3 *s = region_s3(NULL);
	const struct http_auth *a = s3_http_auth(s);

	a->header(s, "x-amz-bucket-region", 19, "ap-south-2", 10);
	a->header(s, "x-amz-bucket-region", 19, "bad/region", 10); /* ignored */
	cr_expect_eq(a->failed(s, "http://127.0.0.1:9000/dset/", 301, "", 0),
		     1);
	cr_expect(signs_for(s, "ap-south-2"));
	s3_free(s);
}

Test(s3, a_region_the_user_set_is_kept)
{
	struct s3 *s = region_s3("us-west-2");
	const struct http_auth *a = s3_http_auth(s);

	cr_expect_eq(a->failed(s, "http://127.0.0.1:9000/dset/k", 400,
			       wrong_region_body,
			       sizeof(wrong_region_body) - 1),
		     0);
	cr_expect(signs_for(s, "us-west-2"));
	s3_free(s);
}

/* Chained behind another backend's hooks, S3 signs every URL it mapped
 * (virtual-hosted, path-style under a base path) and hands the others to
 * the next hooks unsigned. */
Test(s3, signs_its_own_mapped_urls_only)
{
	static const struct {
		const char *endpoint, *region, *url;
		int ours;
	} cases[] = {
		{NULL, "eu-west-1", "s3://dset/k", 1},
		{NULL, "eu-west-1", "s3://d.s/k", 1},
		{"http://127.0.0.1:9000/base/", NULL, "s3://dset/k", 1},
		{"https://minio.example", NULL, "s3://dset/k", 1},
		{NULL, "eu-west-1", "https://dset.s3.eu-west-2.amazonaws.com/k",
		 0},
		{"http://127.0.0.1:9000/base", NULL,
		 "http://127.0.0.1:9000/other/k", 0},
		{"https://minio.example", NULL, "https://xminio.example/k", 0},
	};
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		struct s3_opts o = {.endpoint = cases[i].endpoint,
				    .region = cases[i].region};
		struct http_req_info ri = {.method = "GET"};
		char err[256], buf[8192] = "x", *u = NULL;
		const struct http_auth *a;
		struct s3 *s;

		clean_env();
		setenv("AWS_ACCESS_KEY_ID", "AKIDEXAMPLE", 1);
		setenv("AWS_SECRET_ACCESS_KEY", "secret/key", 1);
		cr_assert_eq(s3_open(&o, &s, err, sizeof(err)), 0, "%s", err);
		a = s3_http_auth(s);
		if (strncmp(cases[i].url, "s3://", 5) == 0)
			cr_assert_eq(a->map_url(a->ud, cases[i].url, &u), 0);
		ri.url = u ? u : cases[i].url;
		cr_expect_eq(a->sign(a->ud, &ri, buf, sizeof(buf)), 0);
		cr_expect_eq(strstr(buf, "Authorization: AWS4-HMAC-SHA256") !=
				     NULL,
			     cases[i].ours, "%s -> %s: %s", cases[i].url,
			     ri.url, buf);
		free(u);
		s3_free(s);
	}
}
