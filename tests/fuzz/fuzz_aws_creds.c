/* fuzz_aws_creds.c - libFuzzer target for the AWS credential parsers in
 * aws_creds.c (files and replies a user or a metadata server controls):
 * the INI reader of ~/.aws/credentials and ~/.aws/config, and the
 * credential bodies of credential_process, ECS and IMDS (JSON) and STS
 * (XML). The input is the text.
 * Checks: only the documented errnos; a setting is trimmed, on one line and
 * NUL-terminated within its buffer; a JSON string holds no quote or
 * backslash; parsed credentials are NUL-terminated in their fields. */

/* The parsers are static to aws_creds.c (the public API reads files and
 * calls servers): the file is compiled into this target instead of linked. */
#include "../../fetch/net/aws_creds.c"

#include <stdint.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check_ini(const char *text)
{
	static const char *const sections[] = {"default", "profile p", "p", ""};
	static const char *const keys[] = {"aws_access_key_id", "region",
					   "credential_process", "k"};
	char out[24];

	for (size_t s = 0; s < ARRAY_SIZE(sections); s++)
		for (size_t k = 0; k < ARRAY_SIZE(keys); k++) {
			int rc = ini_get(text, sections[s], keys[k], out,
					 sizeof(out));
			if (rc == -ENOENT || rc == -ENAMETOOLONG)
				continue;
			if (rc != 0 || !memchr(out, '\0', sizeof(out)))
				abort();
			size_t n = strlen(out);
			if (strchr(out, '\n') ||
			    (n && strchr(" \t\r", out[n - 1])) ||
			    out[0] == ' ' || out[0] == '\t')
				abort();
		}
}

static void check_json(const char *text)
{
	static const char *const names[] = {"AccessKeyId", "Token", "Code", ""};
	char out[24];

	for (size_t i = 0; i < ARRAY_SIZE(names); i++) {
		int rc = json_str(text, names[i], out, sizeof(out));
		if (rc == -ENOENT || rc == -EINVAL || rc == -ENAMETOOLONG)
			continue;
		if (rc != 0 || !memchr(out, '\0', sizeof(out)) ||
		    strpbrk(out, "\"\\"))
			abort();
	}
}

static void check_creds(const char *text, field_fn get, const char *token)
{
	struct aws_creds_value *v = malloc(sizeof(*v));
	int rc;

	if (!v)
		abort();
	rc = parse_creds(text, get, token, v);
	if (rc != 0 && rc != -EPROTO)
		abort();
	if (rc == 0 && (!memchr(v->access_key, '\0', sizeof(v->access_key)) ||
			!memchr(v->secret_key, '\0', sizeof(v->secret_key)) ||
			!memchr(v->token, '\0', sizeof(v->token))))
		abort();
	free(v);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char *text = malloc(size + 1);

	if (!text)
		abort();
	memcpy(text, data, size);
	text[size] = '\0';
	check_ini(text);
	check_json(text);
	check_creds(text, json_str, "SessionToken"); /* credential_process */
	check_creds(text, json_str, "Token");	     /* ECS, IMDS */
	check_creds(text, xml_tag_copy, "SessionToken"); /* STS */
	free(text);
	return 0;
}
