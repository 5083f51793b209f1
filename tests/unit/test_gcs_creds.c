/* test_gcs_creds.c - the Google credential chain's local parts: the
 * service-account JWT (its RS256 signature checked with libcrypto against
 * the public key, its claims), the order of the sources, refused and broken
 * key files, the "no credentials" message. (Token endpoint and metadata
 * server stand-ins: tests/integration/test_gcs.py.) */
#include "fetch/net/gcs_creds.h"
#include "fetch/net/gcs_json.h"

#include <criterion/criterion.h>
#include <errno.h>
#include <openssl/bio.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/rsa.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

static char dir[64];

static void setup(void)
{
	char path[128];

	unsetenv("GOOGLE_APPLICATION_CREDENTIALS");
	snprintf(dir, sizeof(dir), "/tmp/echofs-gcreds.XXXXXX");
	cr_assert(mkdtemp(dir));
	setenv("CLOUDSDK_CONFIG", dir, 1);
	snprintf(path, sizeof(path), "%s/home", dir);
	setenv("HOME", path, 1);
	setenv("GCE_METADATA_HOST", "127.0.0.1:1", 1); /* refused at once */
}

static void teardown(void)
{
	char cmd[128];

	snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
	cr_assert_eq(system(cmd), 0);
}

static const char *write_file(const char *name, const char *text, mode_t mode)
{
	static char path[128];
	FILE *f;

	snprintf(path, sizeof(path), "%s/%s", dir, name);
	f = fopen(path, "w");
	cr_assert(f);
	fputs(text, f);
	fclose(f);
	cr_assert_eq(chmod(path, mode), 0);
	return path;
}

static EVP_PKEY *new_key(int rsa)
{
	EVP_PKEY *k = rsa ? EVP_RSA_gen(2048) : EVP_EC_gen("P-256");
	cr_assert(k);
	return k;
}

static char *pem_of(EVP_PKEY *k)
{
	BIO *b = BIO_new(BIO_s_mem());
	char *data, *out;
	long n;

	cr_assert(PEM_write_bio_PrivateKey(b, k, NULL, NULL, 0, NULL, NULL));
	n = BIO_get_mem_data(b, &data);
	out = strndup(data, (size_t)n);
	BIO_free(b);
	return out;
}

static size_t b64url_dec(const char *s, size_t n, unsigned char *out)
{
	char buf[2048];
	size_t m = 0;
	int len;

	cr_assert_lt(n + 4, sizeof(buf));
	for (size_t i = 0; i < n; i++)
		buf[m++] = s[i] == '-' ? '+' : s[i] == '_' ? '/' : s[i];
	while (m % 4)
		buf[m++] = '=';
	len = EVP_DecodeBlock(out, (unsigned char *)buf, (int)m);
	cr_assert_geq(len, 0);
	return (size_t)len - (n % 4 ? 4 - n % 4 : 0);
}

Test(gcs_creds, jwt_signature_verifies_and_claims_are_right)
{
	EVP_PKEY *k = new_key(1);
	char *pem = pem_of(k), *jwt, *dot1, *dot2, out[256];
	unsigned char part[1024];
	EVP_MD_CTX *md = EVP_MD_CTX_new();
	size_t n;

	cr_assert_eq(gcs_jwt_make("sa@p.iam.gserviceaccount.com", pem,
				  "http://127.0.0.1:9/token", 1700000000, &jwt),
		     0);
	cr_assert_null(strchr(jwt, '='), "base64url has no padding");
	dot1 = strchr(jwt, '.');
	dot2 = strrchr(jwt, '.');
	cr_assert(dot1 && dot2 > dot1);
	n = b64url_dec(jwt, (size_t)(dot1 - jwt), part);
	cr_assert_eq(gcs_json_get((char *)part, n, "alg", out, sizeof(out)), 0);
	cr_assert_str_eq(out, "RS256");
	n = b64url_dec(dot1 + 1, (size_t)(dot2 - dot1 - 1), part);
	cr_assert_eq(gcs_json_get((char *)part, n, "iss", out, sizeof(out)), 0);
	cr_assert_str_eq(out, "sa@p.iam.gserviceaccount.com");
	cr_assert_eq(gcs_json_get((char *)part, n, "scope", out, sizeof(out)),
		     0);
	cr_assert_str_eq(out, GCS_SCOPE);
	cr_assert_eq(gcs_json_get((char *)part, n, "aud", out, sizeof(out)), 0);
	cr_assert_str_eq(out, "http://127.0.0.1:9/token");
	cr_assert_eq(gcs_json_get((char *)part, n, "iat", out, sizeof(out)), 0);
	cr_assert_str_eq(out, "1700000000");
	cr_assert_eq(gcs_json_get((char *)part, n, "exp", out, sizeof(out)), 0);
	cr_assert_str_eq(out, "1700003600");
	n = b64url_dec(dot2 + 1, strlen(dot2 + 1), part);
	cr_assert_eq(n, 256);
	cr_assert_eq(EVP_DigestVerifyInit(md, NULL, EVP_sha256(), NULL, k), 1);
	cr_assert_eq(EVP_DigestVerify(md, part, n, (unsigned char *)jwt,
				      (size_t)(dot2 - jwt)),
		     1, "the RS256 signature does not verify");
	/* one byte of the signed part changed: no longer verifies */
	jwt[5] ^= 1;
	cr_assert_eq(EVP_DigestVerifyInit(md, NULL, EVP_sha256(), NULL, k), 1);
	cr_assert_neq(EVP_DigestVerify(md, part, n, (unsigned char *)jwt,
				       (size_t)(dot2 - jwt)),
		      1);
	EVP_MD_CTX_free(md);
	EVP_PKEY_free(k);
	free(pem);
	free(jwt);
}

Test(gcs_creds, jwt_refuses_bad_keys_and_fields)
{
	EVP_PKEY *ec = new_key(0);
	char *pem = pem_of(ec), *jwt = (char *)1;

	cr_assert_eq(gcs_jwt_make("a@b", pem, "http://x/token", 1, &jwt),
		     -EINVAL, "an EC key cannot sign RS256");
	cr_assert_null(jwt);
	cr_assert_eq(gcs_jwt_make("a@b", "-----BEGIN PRIVATE KEY-----\nxx\n",
				  "http://x/token", 1, &jwt),
		     -EINVAL);
	cr_assert_eq(gcs_jwt_make("a\"@b", pem, "http://x/token", 1, &jwt),
		     -EPROTO, "a quote would break out of the claims");
	EVP_PKEY_free(ec);
	free(pem);
}

Test(gcs_creds, precedence_env_then_adc_then_metadata, .init = setup,
     .fini = teardown)
{
	char path[256], want[256];

	cr_assert_eq(gcs_creds_pick(path, sizeof(path)), GCS_SRC_METADATA);
	cr_assert_str_eq(path, "127.0.0.1:1");
	write_file("application_default_credentials.json", "{}", 0600);
	snprintf(want, sizeof(want), "%s/application_default_credentials.json",
		 dir);
	cr_assert_eq(gcs_creds_pick(path, sizeof(path)), GCS_SRC_ADC);
	cr_assert_str_eq(path, want);
	setenv("GOOGLE_APPLICATION_CREDENTIALS", "/nonexistent/key.json", 1);
	cr_assert_eq(gcs_creds_pick(path, sizeof(path)), GCS_SRC_KEY_ENV);
	cr_assert_str_eq(path, "/nonexistent/key.json");
	/* without CLOUDSDK_CONFIG: ~/.config/gcloud */
	unsetenv("GOOGLE_APPLICATION_CREDENTIALS");
	unsetenv("CLOUDSDK_CONFIG");
	cr_assert_eq(gcs_creds_pick(path, sizeof(path)), GCS_SRC_METADATA);
	unsetenv("GCE_METADATA_HOST");
	cr_assert_eq(gcs_creds_pick(path, sizeof(path)), GCS_SRC_METADATA);
	cr_assert_str_eq(path, "metadata.google.internal");
}

static void expect_fail(const char *what, const char *const *needles)
{
	char err[1024] = "";
	struct gcs_creds *c = (struct gcs_creds *)err; /* must be reset */
	int rc = gcs_creds_open(NULL, &c, err, sizeof(err));

	cr_assert_lt(rc, 0, "%s: found credentials", what);
	cr_assert_null(c, "%s: *out left set", what);
	for (; *needles; needles++)
		cr_expect(strstr(err, *needles), "%s: \"%s\" not in: %s", what,
			  *needles, err);
}

Test(gcs_creds, no_credentials_names_every_source, .init = setup,
     .fini = teardown)
{
	char adc[128];
	const char *n[] = {"no Google credentials found",
			   "GOOGLE_APPLICATION_CREDENTIALS",
			   adc,
			   "metadata server 127.0.0.1:1",
			   "unreachable",
			   "no_sign=1",
			   NULL};

	snprintf(adc, sizeof(adc), "%s/application_default_credentials.json",
		 dir);
	expect_fail("nothing", n);
}

Test(gcs_creds, key_files_refused_or_named, .init = setup, .fini = teardown)
{
	EVP_PKEY *ec = new_key(0);
	char *pem = pem_of(ec), text[2048], esc[1024];
	const char *p;
	size_t m = 0;

	setenv("GOOGLE_APPLICATION_CREDENTIALS",
	       p = write_file("open.json", "{\"type\":\"service_account\"}",
			      0644),
	       1);
	expect_fail("group-readable",
		    (const char *[]){"too open", "open.json", NULL});
	setenv("GOOGLE_APPLICATION_CREDENTIALS", "/nonexistent/key.json", 1);
	expect_fail("missing", (const char *[]){"/nonexistent/key.json",
						"no such file", NULL});
	setenv("GOOGLE_APPLICATION_CREDENTIALS",
	       write_file("bad.json", "{\"type\":", 0600), 1);
	expect_fail("bad JSON", (const char *[]){"bad.json", "bad JSON", NULL});
	setenv("GOOGLE_APPLICATION_CREDENTIALS",
	       write_file("ext.json", "{\"type\":\"external_account\"}", 0600),
	       1);
	expect_fail("type", (const char *[]){"external_account",
					     "not supported", NULL});
	for (const char *s = pem; *s && m + 3 < sizeof(esc); s++)
		m += (size_t)snprintf(esc + m, sizeof(esc) - m, "%s",
				      *s == '\n' ? "\\n" : (char[2]){*s, 0});
	snprintf(text, sizeof(text),
		 "{\"type\":\"service_account\",\"client_email\":\"a@b\","
		 "\"private_key\":\"%s\",\"token_uri\":\"http://127.0.0.1:1/"
		 "t\"}",
		 esc);
	setenv("GOOGLE_APPLICATION_CREDENTIALS",
	       write_file("ec.json", text, 0600), 1);
	expect_fail("EC key",
		    (const char *[]){"ec.json", "RSA private_key", NULL});
	EVP_PKEY_free(ec);
	free(pem);
	(void)p;
}
