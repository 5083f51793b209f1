/* test_sigv4.c - the SigV4 signer against AWS's published S3 examples
 * ("Signature Calculations for the Authorization Header", S3 API reference)
 * and the URI encoding rules. */
#include "fetch/net/sigv4.h"

#include <criterion/criterion.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const struct sigv4_creds doc_creds = {
	.access_key = "AKIAIOSFODNN7EXAMPLE",
	.secret_key = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",
};

#define DOC_DATE "20130524T000000Z"
#define DOC_SCOPE "AKIAIOSFODNN7EXAMPLE/20130524/us-east-1/s3/aws4_request"

struct doc_case {
	const char *name;
	const char *method;
	const char *url;
	const char *payload_hash;
	struct sigv4_header headers[2];
	size_t nheaders;
	const char *signed_headers;
	const char *signature;
};

static const struct doc_case doc_cases[] = {
	{"GET Object (range)",
	 "GET",
	 "https://examplebucket.s3.amazonaws.com/test.txt",
	 NULL,
	 {{"Range", "bytes=0-9"}},
	 1,
	 "host;range;x-amz-content-sha256;x-amz-date",
	 "f0e8bdb87c964420e857bd35b5d6ed310bd44f0170aba48dd91039c6036bdb41"},
	{"PUT Object",
	 "PUT",
	 "https://examplebucket.s3.amazonaws.com/test%24file.text",
	 "44ce7dd67c959e0d3524ffac1771dfbba87d2b6b4b4e99e42034a8b803f8b072",
	 {{"Date", "Fri, 24 May 2013 00:00:00 GMT"},
	  {"x-amz-storage-class", "REDUCED_REDUNDANCY"}},
	 2,
	 "date;host;x-amz-content-sha256;x-amz-date;x-amz-storage-class",
	 "98ad721746da40c64f1a55b78f14c238d841ea1380cd77a1b5971af0ece108bd"},
	{"GET Bucket lifecycle",
	 "GET",
	 "https://examplebucket.s3.amazonaws.com/?lifecycle",
	 NULL,
	 {{0}},
	 0,
	 "host;x-amz-content-sha256;x-amz-date",
	 "fea454ca298b7da1c68078a5d1bdbfbbe0d65c699e0f91ac7a200a0136783543"},
	{"GET Bucket (list objects)",
	 "GET",
	 "https://examplebucket.s3.amazonaws.com/?max-keys=2&prefix=J",
	 NULL,
	 {{0}},
	 0,
	 "host;x-amz-content-sha256;x-amz-date",
	 "34b48302e7b5fa45bde8084f4b7868a86f0a534bc59db6670ed5711ef69dc6f7"},
};

Test(sigv4, aws_documentation_examples)
{
	for (size_t i = 0; i < sizeof(doc_cases) / sizeof(doc_cases[0]); i++) {
		const struct doc_case *c = &doc_cases[i];
		struct sigv4_req r = {.method = c->method,
				      .url = c->url,
				      .region = "us-east-1",
				      .amz_date = DOC_DATE,
				      .payload_hash = c->payload_hash,
				      .headers = c->headers,
				      .nheaders = c->nheaders};
		struct sigv4_result res;
		char want[SIGV4_AUTH_MAX];

		cr_assert_eq(sigv4_sign(&r, &doc_creds, &res), 0, "%s",
			     c->name);
		snprintf(want, sizeof(want),
			 "AWS4-HMAC-SHA256 Credential=" DOC_SCOPE
			 ", SignedHeaders=%s, Signature=%s",
			 c->signed_headers, c->signature);
		cr_expect_str_eq(res.authorization, want, "%s", c->name);
		cr_expect_str_eq(res.amz_date, DOC_DATE);
	}
}

/* The documentation's intermediate strings for GET Object. */
Test(sigv4, aws_get_object_canonical_request)
{
	const struct sigv4_header range = {"range", "bytes=0-9"};
	struct sigv4_req r = {.method = "GET",
			      .url = "https://examplebucket.s3.amazonaws.com/"
				     "test.txt",
			      .region = "us-east-1",
			      .amz_date = DOC_DATE,
			      .headers = &range,
			      .nheaders = 1};
	char *canon = NULL, *sts = NULL;

	cr_assert_eq(sigv4_canonical(&r, &doc_creds, &canon, &sts), 0);
	cr_expect_str_eq(canon, "GET\n/test.txt\n\n"
				"host:examplebucket.s3.amazonaws.com\n"
				"range:bytes=0-9\n"
				"x-amz-content-sha256:" SIGV4_EMPTY_SHA256 "\n"
				"x-amz-date:20130524T000000Z\n\n"
				"host;range;x-amz-content-sha256;x-amz-"
				"date\n" SIGV4_EMPTY_SHA256);
	cr_expect_str_eq(sts, "AWS4-HMAC-SHA256\n20130524T000000Z\n"
			      "20130524/us-east-1/s3/aws4_request\n"
			      "7344ae5b7ee6c3e7e6b0fe0640412a37625d1fbfff95c48"
			      "bbb2dc43964946972");
	free(canon);
	free(sts);
}

static char *canonical_of(const char *url, const struct sigv4_creds *c)
{
	struct sigv4_req r = {.method = "GET",
			      .url = url,
			      .region = "eu-west-1",
			      .amz_date = DOC_DATE};
	char *canon = NULL;

	cr_assert_eq(sigv4_canonical(&r, c, &canon, NULL), 0, "%s", url);
	return canon;
}

Test(sigv4, query_sorted_by_key_then_value_as_sent)
{
	char *canon = canonical_of("http://127.0.0.1:9000/b/?prefix=a%2Fb&"
				   "list-type=2&continuation-token=x%3D%2B&"
				   "a-b=1&a=2&a=1&flag",
				   &doc_creds);

	/* tuples sort "a" before "a-b" although "a=" > "a-" as strings */
	cr_expect(strstr(canon, "\n/b/\na=1&a=2&a-b=1&continuation-token="
				"x%3D%2B&flag=&list-type=2&prefix=a%2Fb\n"),
		  "%s", canon);
	cr_expect(strstr(canon, "\nhost:127.0.0.1:9000\n"), "%s", canon);
	free(canon);
}

Test(sigv4, host_drops_default_port_and_lowercases)
{
	char *a = canonical_of("https://B.Example.COM:443/k", &doc_creds);
	char *b = canonical_of("http://b.example.com:80/k", &doc_creds);
	char *c = canonical_of("https://b.example.com:80/k", &doc_creds);
	char *d = canonical_of("http://[::1]:9000/k", &doc_creds);

	cr_expect(strstr(a, "\nhost:b.example.com\n"), "%s", a);
	cr_expect(strstr(b, "\nhost:b.example.com\n"), "%s", b);
	cr_expect(strstr(c, "\nhost:b.example.com:80\n"), "%s", c);
	cr_expect(strstr(d, "\nhost:[::1]:9000\n"), "%s", d);
	free(a);
	free(b);
	free(c);
	free(d);
}

Test(sigv4, session_token_is_signed)
{
	struct sigv4_creds c = doc_creds;
	char *canon;

	c.token = "FwoGZXIvYXdzE//token+with/slashes==";
	canon = canonical_of("https://b.s3.amazonaws.com/k", &c);
	cr_expect(strstr(canon, "\nx-amz-security-token:FwoGZXIvYXdzE//token+"
				"with/slashes==\n\nhost;x-amz-content-sha256;"
				"x-amz-date;x-amz-security-token\n"),
		  "%s", canon);
	free(canon);
}

Test(sigv4, header_values_trimmed_and_folded)
{
	const struct sigv4_header h = {"X-Amz-Meta-Note", "  a   b \t c  "};
	struct sigv4_req r = {.method = "HEAD",
			      .url = "https://b.s3.amazonaws.com/k",
			      .region = "us-east-1",
			      .amz_date = DOC_DATE,
			      .headers = &h,
			      .nheaders = 1};
	char *canon = NULL;

	cr_assert_eq(sigv4_canonical(&r, &doc_creds, &canon, NULL), 0);
	cr_expect(strstr(canon, "\nx-amz-meta-note:a b c\n"), "%s", canon);
	free(canon);
}

struct bad_case {
	const char *url, *date, *key;
	const char *hname, *hvalue;
};

Test(sigv4, malformed_input_refused)
{
	static const struct bad_case bad[] = {
		{"ftp://h/k", NULL, NULL, NULL, NULL},
		{"https:///k", NULL, NULL, NULL, NULL},
		{"https://user:pw@h/k", NULL, NULL, NULL, NULL},
		{"https://h/k k", NULL, NULL, NULL, NULL},
		{"https://h:port/k", NULL, NULL, NULL, NULL},
		{"https://h/k", "2013-05-24", NULL, NULL, NULL},
		{"https://h/k", NULL, "AKIA/EVIL", NULL, NULL},
		{"https://h/k", NULL, "", NULL, NULL},
		{"https://h/k", NULL, NULL, "bad name", "v"},
		{"https://h/k", NULL, NULL, "x-a", "line\nbreak"},
		{"https://h/k", NULL, NULL, "Host", "dup"},
	};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		struct sigv4_header h = {bad[i].hname, bad[i].hvalue};
		struct sigv4_creds c = doc_creds;
		struct sigv4_req r = {.method = "GET",
				      .url = bad[i].url,
				      .region = "us-east-1",
				      .amz_date = bad[i].date ? bad[i].date
							      : DOC_DATE,
				      .headers = &h,
				      .nheaders = bad[i].hname ? 1 : 0};
		struct sigv4_result res;

		if (bad[i].key)
			c.access_key = bad[i].key;
		cr_expect_eq(sigv4_sign(&r, &c, &res), -EINVAL, "case %zu", i);
	}
}

Test(sigv4, uri_encode_as_aws)
{
	char out[128];
	const char *in = "a b/c+d=e%f~g_h-i.j\xc3\xa9*";

	cr_assert_eq(sigv4_uri_encode(in, strlen(in), 1, out, sizeof(out)),
		     (long)strlen("a%20b/c%2Bd%3De%25f~g_h-i.j%C3%A9%2A"));
	cr_expect_str_eq(out, "a%20b/c%2Bd%3De%25f~g_h-i.j%C3%A9%2A");
	sigv4_uri_encode(in, strlen(in), 0, out, sizeof(out));
	cr_expect_str_eq(out, "a%20b%2Fc%2Bd%3De%25f~g_h-i.j%C3%A9%2A");
	cr_expect_eq(sigv4_uri_encode("  ", 2, 0, out, 6), -ENAMETOOLONG);
	cr_expect_eq(sigv4_uri_encode("  ", 2, 0, out, 7), 6);
}

Test(sigv4, now_is_well_formed)
{
	char d[SIGV4_DATE_LEN + 1];

	sigv4_now(d, 0);
	cr_expect_eq(strlen(d), SIGV4_DATE_LEN);
	cr_expect_eq(d[8], 'T');
	cr_expect_eq(d[15], 'Z');
}
