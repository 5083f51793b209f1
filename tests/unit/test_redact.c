/* test_redact.c - http_strip_secrets (the form of a URL kept on disk) and
 * http_url_key_use (the key of its query digests). */
#include "fetch/net/redact.h"

#include "fixtures.h"

#include <criterion/criterion.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static int same(const char *a, const char *b)
{
	char *sa = http_strip_secrets(a), *sb = http_strip_secrets(b);
	int r = strcmp(sa, sb) == 0;
	free(sa);
	free(sb);
	return r;
}

static void expect_stripped(const char *url, const char *want)
{
	char *s = http_strip_secrets(url);
	cr_expect_str_eq(s, want, "%s", url);
	free(s);
}

Test(redact, credentials_and_plain_urls)
{
	expect_stripped("http://u:pw@h/a.tar#frag", "http://h/a.tar");
	expect_stripped("/local/path?x=1", "/local/path?x=1");
	/* a presigned URL holds nothing but credentials: no query kept */
	expect_stripped("https://b.s3.amazonaws.com/a.tar?X-Amz-Algorithm=A"
			"&X-Amz-Credential=AKID%2F1&X-Amz-Date=2026"
			"&X-Amz-Expires=60&X-Amz-SignedHeaders=host"
			"&X-Amz-Signature=abcd",
			"https://b.s3.amazonaws.com/a.tar");
	expect_stripped("https://h/a.tar?sig=s&se=1&sp=r&sv=2&sr=b",
			"https://h/a.tar");
}

Test(redact, query_names_the_shard_without_reaching_the_text)
{
	cr_expect(!same("http://h/get?s=good1", "http://h/get?s=good2"));
	cr_expect(!same("http://h/get?s=good1", "http://h/get"));
	cr_expect(same("http://h/get?s=good1&X-Amz-Signature=aaa",
		       "http://h/get?X-Amz-Signature=bbb&s=good1"));
	cr_expect(same("http://h/get?s=1&token=a", "http://h/get?s=1&token=b"));
	/* Azure's short names count only beside a sig */
	cr_expect(!same("http://h/get?st=train", "http://h/get?st=test"));
	cr_expect(same("http://h/get?st=1&sig=a", "http://h/get?st=2&sig=b"));
	char *s = http_strip_secrets("http://h/get?s=hunter2&key=sekrit#f");
	cr_expect_null(strstr(s, "hunter2"));
	cr_expect_null(strstr(s, "sekrit"));
	cr_expect_eq(strncmp(s, "http://h/get?~", 14), 0, "%s", s);
	cr_expect_eq(strlen(s), 14 + 32, "%s", s);
	free(s);
}

Test(redact, key_file_is_private_and_kept)
{
	char dir[] = "/tmp/echofs-redact-XXXXXX", path[64];
	struct stat sb;
	char *a, *b;

	cr_assert_not_null(mkdtemp(dir));
	cr_expect_eq(http_url_key_use(dir, 0), -ENOENT);
	cr_assert_eq(http_url_key_use(dir, 1), 0);
	snprintf(path, sizeof(path), "%s/url-key", dir);
	cr_assert_eq(stat(path, &sb), 0);
	cr_expect_eq(sb.st_mode & 0777, 0600);
	cr_expect_eq(sb.st_size, 32);
	a = http_strip_secrets("http://h/get?s=1");
	/* another key in between, then the dir's again: the same digest */
	char other[] = "/tmp/echofs-redact-XXXXXX";
	cr_assert_not_null(mkdtemp(other));
	cr_assert_eq(http_url_key_use(other, 1), 0);
	b = http_strip_secrets("http://h/get?s=1");
	cr_expect_str_neq(a, b);
	free(b);
	cr_assert_eq(http_url_key_use(dir, 1), 0);
	b = http_strip_secrets("http://h/get?s=1");
	cr_expect_str_eq(a, b);
	free(a);
	free(b);
	/* a key others may read is not used */
	cr_assert_eq(chmod(path, 0644), 0);
	cr_expect_eq(http_url_key_use(dir, 1), -EPERM);
	fx_rm_tree(dir);
	fx_rm_tree(other);
}
