/* test_xml_tag.c - one tag's text out of S3/GCS/STS XML replies, exact and
 * for messages. */
#include <criterion/criterion.h>
#include <errno.h>
#include <string.h>

#include "fetch/net/xml_tag.h"

static const char body[] =
	"<?xml version=\"1.0\"?><Error><Code>NoSuchKey</Code>"
	"<Message>The key\r\n does\x01 not exist</Message>"
	"<Open>never closed<Token>abcdefghij</Token></Error>";

Test(xml_tag, table)
{
	static const struct {
		const char *tag;
		size_t outlen;
		int exact, want_rc;
		const char *want;
	} cases[] = {
		{"Code", 64, 1, 0, "NoSuchKey"},
		{"Code", 64, 0, 0, "NoSuchKey"},
		{"Message", 64, 1, 0, "The key\r\n does\x01 not exist"},
		{"Message", 64, 0, 0, "The key does not exist"},
		{"Token", 10, 1, -ENAMETOOLONG, ""}, /* 10 bytes + NUL */
		{"Token", 11, 1, 0, "abcdefghij"},
		{"Token", 5, 0, 0, "abcd"}, /* messages are cut to fit */
		{"Region", 64, 1, -ENOENT, ""},
		{"Region", 64, 0, -ENOENT, ""},
		{"Open", 64, 1, -EINVAL, ""},
		{"Open", 64, 0, -EINVAL, ""},
		{"Code", 0, 1, -ENAMETOOLONG, NULL},
	};
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		char out[64];
		int rc;

		memset(out, 'x', sizeof(out));
		rc = cases[i].exact ? xml_tag_copy(body, cases[i].tag, out,
						   cases[i].outlen)
				    : xml_tag_text(body, cases[i].tag, out,
						   cases[i].outlen);
		cr_expect_eq(rc, cases[i].want_rc, "case %zu: rc %d", i, rc);
		if (cases[i].want)
			cr_expect_str_eq(out, cases[i].want, "case %zu", i);
		else
			cr_expect_eq(out[0], 'x', "case %zu wrote", i);
	}
}
