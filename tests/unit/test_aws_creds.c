/* test_aws_creds.c - the AWS credential chain's local sources: precedence,
 * profiles, credential_process, refused secret files, the "no credentials"
 * message. (Metadata, ECS and STS stand-ins: tests/integration/
 * test_aws_creds.py.) */
#include "fetch/net/aws_creds.h"

#include <criterion/criterion.h>
#include <curl/curl.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static char dir[64];

static void setup(void)
{
	static const char *const vars[] = {
		"AWS_ACCESS_KEY_ID",
		"AWS_SECRET_ACCESS_KEY",
		"AWS_SESSION_TOKEN",
		"AWS_PROFILE",
		"AWS_WEB_IDENTITY_TOKEN_FILE",
		"AWS_ROLE_ARN",
		"AWS_CONTAINER_CREDENTIALS_RELATIVE_URI",
		"AWS_CONTAINER_CREDENTIALS_FULL_URI"};
	char path[128];

	for (size_t i = 0; i < sizeof(vars) / sizeof(vars[0]); i++)
		unsetenv(vars[i]);
	snprintf(dir, sizeof(dir), "/tmp/echofs-creds.XXXXXX");
	cr_assert(mkdtemp(dir));
	snprintf(path, sizeof(path), "%s/credentials", dir);
	setenv("AWS_SHARED_CREDENTIALS_FILE", path, 1);
	snprintf(path, sizeof(path), "%s/config", dir);
	setenv("AWS_CONFIG_FILE", path, 1);
	setenv("AWS_EC2_METADATA_DISABLED", "true", 1);
}

static void teardown(void)
{
	char cmd[128];
	snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
	cr_assert_eq(system(cmd), 0);
}

static void write_file(const char *name, const char *text, mode_t mode)
{
	char path[128];
	FILE *f;

	snprintf(path, sizeof(path), "%s/%s", dir, name);
	f = fopen(path, "w");
	cr_assert(f);
	fputs(text, f);
	fclose(f);
	cr_assert_eq(chmod(path, mode), 0);
}

static struct aws_creds *open_creds(const char *profile, char *err,
				    size_t errlen)
{
	struct aws_creds *c = (struct aws_creds *)err; /* must be set */
	int rc = aws_creds_open(profile, NULL, &c, err, errlen);

	cr_assert(rc <= 0, "rc %d", rc);
	cr_assert_eq(rc == 0, c != NULL, "rc %d with *out %p", rc, (void *)c);
	return c;
}

TestSuite(aws_creds, .init = setup, .fini = teardown);

Test(aws_creds, environment_wins_over_profile)
{
	struct aws_creds_value v;
	char err[512];
	struct aws_creds *c;

	write_file("credentials",
		   "[default]\naws_access_key_id = AKFILE\n"
		   "aws_secret_access_key = filesecret\n",
		   0600);
	setenv("AWS_ACCESS_KEY_ID", "AKENV", 1);
	setenv("AWS_SECRET_ACCESS_KEY", "envsecret", 1);
	setenv("AWS_SESSION_TOKEN", "envtoken", 1);
	c = open_creds(NULL, err, sizeof(err));
	cr_assert(c, "%s", err);
	aws_creds_get(c, &v);
	cr_expect_str_eq(v.access_key, "AKENV");
	cr_expect_str_eq(v.secret_key, "envsecret");
	cr_expect_str_eq(v.token, "envtoken");
	cr_expect_str_eq(aws_creds_source(c), "environment");
	aws_creds_free(c);
}

Test(aws_creds, half_set_environment_is_an_error)
{
	char err[512] = "";

	setenv("AWS_ACCESS_KEY_ID", "AKENV", 1);
	cr_expect_null(open_creds(NULL, err, sizeof(err)));
	cr_expect(strstr(err, "AWS_SECRET_ACCESS_KEY"), "%s", err);
}

Test(aws_creds, named_profile_from_both_files)
{
	struct aws_creds_value v;
	char err[512], region[64];
	struct aws_creds *c;

	write_file("credentials",
		   "# comment\n[default]\naws_access_key_id=AKDEF\n"
		   "aws_secret_access_key=defsecret\n\n[work]\n"
		   "  aws_access_key_id = AKWORK  \n"
		   "aws_secret_access_key = work/secret+1\n"
		   "aws_session_token = worktoken\n",
		   0600);
	write_file("config",
		   "[default]\nregion = us-west-2\n[profile work]\n"
		   "region = eu-central-1\nendpoint_url = http://minio:9000\n",
		   0600);
	setenv("AWS_PROFILE", "work", 1);
	c = open_creds(NULL, err, sizeof(err));
	cr_assert(c, "%s", err);
	aws_creds_get(c, &v);
	cr_expect_str_eq(v.access_key, "AKWORK");
	cr_expect_str_eq(v.secret_key, "work/secret+1");
	cr_expect_str_eq(v.token, "worktoken");
	cr_expect_str_eq(aws_creds_source(c), "profile work");
	aws_creds_free(c);
	cr_expect_eq(aws_profile_setting(NULL, "region", region, 64), 0);
	cr_expect_str_eq(region, "eu-central-1");
	cr_expect_eq(aws_profile_setting("default", "region", region, 64), 0);
	cr_expect_str_eq(region, "us-west-2");
	cr_expect_eq(aws_profile_setting("work", "endpoint_url", region, 64),
		     0);
	cr_expect_str_eq(region, "http://minio:9000");
	cr_expect_eq(aws_profile_setting("nope", "region", region, 64),
		     -ENOENT);
	/* profile= beats AWS_PROFILE */
	c = open_creds("default", err, sizeof(err));
	cr_assert(c, "%s", err);
	aws_creds_get(c, &v);
	cr_expect_str_eq(v.access_key, "AKDEF");
	cr_expect_str_eq(v.token, "");
	aws_creds_free(c);
}

Test(aws_creds, readable_credentials_file_refused)
{
	char err[512] = "";

	write_file("credentials",
		   "[default]\naws_access_key_id=AK\n"
		   "aws_secret_access_key=s\n",
		   0644);
	cr_expect_null(open_creds(NULL, err, sizeof(err)));
	cr_expect(strstr(err, "permissions 0644"), "%s", err);
	cr_expect(strstr(err, "too open"), "%s", err);
}

Test(aws_creds, credentials_file_of_another_user_refused)
{
	char err[512] = "", path[128];

	if (geteuid() != 0)
		cr_skip_test("needs root to chown the file to nobody");
	write_file("credentials",
		   "[default]\naws_access_key_id=AK\n"
		   "aws_secret_access_key=s\n",
		   0600);
	snprintf(path, sizeof(path), "%s/credentials", dir);
	cr_assert_eq(chown(path, 65534, 65534), 0);
	cr_expect_null(open_creds(NULL, err, sizeof(err)));
	cr_expect(strstr(err, "owned by uid 65534"), "%s", err);
}

Test(aws_creds, credential_process)
{
	struct aws_creds_value v;
	char err[512], text[512];
	struct aws_creds *c;

	write_file("proc.sh",
		   "#!/bin/sh\necho '{\"Version\": 1, \"AccessKeyId\": "
		   "\"AKPROC\", \"SecretAccessKey\": \"procsecret\", "
		   "\"SessionToken\": \"proctoken\", \"Expiration\": "
		   "\"2999-01-01T00:00:00Z\"}'\n",
		   0700);
	snprintf(text, sizeof(text),
		 "[profile p]\ncredential_process = %s/proc.sh\n", dir);
	write_file("config", text, 0600);
	c = open_creds("p", err, sizeof(err));
	cr_assert(c, "%s", err);
	aws_creds_get(c, &v);
	cr_expect_str_eq(v.access_key, "AKPROC");
	cr_expect_str_eq(v.token, "proctoken");
	cr_expect_gt(v.expires, 32000000000LL - 1000000000LL);
	cr_expect(strstr(aws_creds_source(c), "credential_process"));
	aws_creds_free(c);
}

Test(aws_creds, failing_credential_process_is_an_error)
{
	char err[512] = "";

	write_file("config", "[default]\ncredential_process = /bin/false\n",
		   0600);
	cr_expect_null(open_creds(NULL, err, sizeof(err)));
	cr_expect(strstr(err, "credential_process"), "%s", err);
}

Test(aws_creds, none_found_names_every_source)
{
	char err[512] = "";

	cr_expect_null(open_creds(NULL, err, sizeof(err)));
	cr_expect(strstr(err, "no AWS credentials found"), "%s", err);
	cr_expect(strstr(err, "environment"), "%s", err);
	cr_expect(strstr(err, "profile default"), "%s", err);
	cr_expect(strstr(err, "web identity"), "%s", err);
	cr_expect(strstr(err, "container credentials"), "%s", err);
	cr_expect(strstr(err, "instance metadata"), "%s", err);
}

/* curl_easy_escape gives NULL when out of memory: the source then fails
 * clearly, never dereferencing it (linked with -Wl,--wrap=curl_easy_escape:
 * see unit_link_args in tests/meson.build). */
static int escape_fails;

char *__real_curl_easy_escape(CURL *c, const char *s, int len);
char *__wrap_curl_easy_escape(CURL *c, const char *s, int len);
char *__wrap_curl_easy_escape(CURL *c, const char *s, int len)
{
	if (escape_fails && strstr(s, "arn:aws:iam::"))
		return NULL;
	return __real_curl_easy_escape(c, s, len);
}

Test(aws_creds, unencodable_web_identity_is_an_error)
{
	char err[512] = "", path[128];

	write_file("token", "eyJhbGciOi.token.sig\n", 0600);
	snprintf(path, sizeof(path), "%s/token", dir);
	setenv("AWS_WEB_IDENTITY_TOKEN_FILE", path, 1);
	setenv("AWS_ROLE_ARN", "arn:aws:iam::123456789012:role/r", 1);
	escape_fails = 1;
	cr_expect_null(open_creds(NULL, err, sizeof(err)));
	escape_fails = 0;
	cr_expect(strstr(err, "cannot encode the role ARN"), "%s", err);
}

/* A FIFO as the web identity token file fails at once (file_read_all never
 * blocks) and says what is wrong: it read "cannot read PATH: Invalid
 * argument". */
Test(aws_creds, a_fifo_token_file_is_not_a_regular_file, .timeout = 20)
{
	char err[512] = "", path[128], want[256];

	snprintf(path, sizeof(path), "%s/token", dir);
	cr_assert_eq(mkfifo(path, 0600), 0);
	setenv("AWS_WEB_IDENTITY_TOKEN_FILE", path, 1);
	setenv("AWS_ROLE_ARN", "arn:aws:iam::123456789012:role/r", 1);
	cr_expect_null(open_creds(NULL, err, sizeof(err)));
	snprintf(want, sizeof(want), "cannot read %s: not a regular file",
		 path);
	cr_expect(strstr(err, want), "%s", err);
}
