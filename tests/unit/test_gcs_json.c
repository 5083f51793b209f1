/* test_gcs_json.c - the strict flat JSON reader of Google key files and
 * token replies: what it takes, and hostile inputs it refuses. */
#include "fetch/net/gcs_json.h"

#include <criterion/criterion.h>
#include <errno.h>
#include <string.h>

static int get(const char *text, const char *name, char *out, size_t outlen)
{
	return gcs_json_get(text, strlen(text), name, out, outlen);
}

Test(gcs_json, service_account_key_fields)
{
	const char *key =
		"{\n  \"type\": \"service_account\",\n  \"private_key\": "
		"\"-----BEGIN PRIVATE KEY-----\\nMIIE\\u0041b/+=\\n-----END "
		"PRIVATE KEY-----\\n\",\n  \"client_email\": "
		"\"a@b.iam.gserviceaccount.com\", \"n\": 12, \"ok\": true, "
		"\"x\": null, \"esc\": \"\\\"\\\\\\/\\b\\f\\r\\t\\u00e9\\ud83d"
		"\\ude00\"\n}\n";
	char out[256];

	cr_assert_eq(gcs_json_check(key, strlen(key)), 0);
	cr_assert_eq(get(key, "type", out, sizeof(out)), 0);
	cr_assert_str_eq(out, "service_account");
	cr_assert_eq(get(key, "private_key", out, sizeof(out)), 0);
	cr_assert_str_eq(out, "-----BEGIN PRIVATE KEY-----\nMIIEAb/+=\n"
			      "-----END PRIVATE KEY-----\n");
	cr_assert_eq(get(key, "n", out, sizeof(out)), 0);
	cr_assert_str_eq(out, "12");
	cr_assert_eq(get(key, "ok", out, sizeof(out)), 0);
	cr_assert_str_eq(out, "true");
	cr_assert_eq(get(key, "x", out, sizeof(out)), 0);
	cr_assert_str_eq(out, "null");
	cr_assert_eq(get(key, "esc", out, sizeof(out)), 0);
	cr_assert_str_eq(out, "\"\\/\b\f\r\t\xc3\xa9\xf0\x9f\x98\x80");
	cr_assert_eq(get(key, "missing", out, sizeof(out)), -ENOENT);
	cr_assert_eq(get("{}", "a", out, sizeof(out)), -ENOENT);
}

Test(gcs_json, too_long_is_enametoolong_and_wiped)
{
	char out[4] = "zzz";

	cr_assert_eq(get("{\"a\":\"abcd\"}", "a", out, sizeof(out)),
		     -ENAMETOOLONG);
	cr_assert_eq(out[0], '\0');
	cr_assert_eq(get("{\"a\":\"abc\"}", "a", out, sizeof(out)), 0);
	cr_assert_str_eq(out, "abc");
}

Test(gcs_json, hostile_inputs_refused)
{
	static const char *const bad[] = {
		"",
		"[]",
		"{",
		"{\"a\"}",
		"{\"a\":}",
		"{\"a\":\"b\",}",
		"{\"a\":\"b\"} x",
		"{\"a\":\"b\"}{}",
		"{\"a\":{\"b\":1}}",	      /* nested */
		"{\"a\":[1]}",		      /* nested */
		"{\"a\":\"1\",\"a\":\"2\"}",  /* duplicate: which one? */
		"{\"a\":\"\\u0000\"}",	      /* NUL */
		"{\"a\":\"\\ud800\"}",	      /* lone high surrogate */
		"{\"a\":\"\\udc00\"}",	      /* lone low surrogate */
		"{\"a\":\"\\ud800\\u0041\"}", /* bad pair */
		"{\"a\":\"\\x41\"}",	      /* bad escape */
		"{\"a\":\"\\u12\"}",	      /* short \u */
		"{\"a\":\"line\nbreak\"}",    /* raw control */
		"{\"a\":\"unterminated}",
		"{\"a\":tru}",
		"{\"a\":-}",
		"{a:1}",
		"{\"a\" 1}",
	};
	char out[64];

	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		cr_expect_eq(gcs_json_check(bad[i], strlen(bad[i])), -EPROTO,
			     "accepted: %s", bad[i]);
		cr_expect_eq(get(bad[i], "a", out, sizeof(out)), -EPROTO,
			     "read from: %s", bad[i]);
	}
}

Test(gcs_json, bounded_by_length_not_nul)
{
	const char text[] = "{\"a\":\"b\"}GARBAGE";
	char out[8];

	cr_assert_eq(gcs_json_get(text, 9, "a", out, sizeof(out)), 0);
	cr_assert_str_eq(out, "b");
	/* a cut inside a string is refused, never read past */
	for (size_t n = 0; n < 9; n++)
		cr_expect_eq(gcs_json_get(text, n, "a", out, sizeof(out)),
			     -EPROTO, "prefix %zu", n);
	/* a NUL byte inside the given length is not the end */
	cr_assert_eq(gcs_json_check("{\"a\":\"b\"}\0", 10), -EPROTO);
}
