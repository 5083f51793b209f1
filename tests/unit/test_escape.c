/* test_escape.c - class names with hostile bytes in the JSON and Prometheus
 * stats. */
#include <criterion/criterion.h>
#include <stdlib.h>

#include "fs/escape.h"

struct ecase {
	const char *in, *json, *prom;
};

static const struct ecase cases[] = {
	{"plain", "plain", "plain"},
	{"q\"uote", "q\\\"uote", "q\\\"uote"},
	{"back\\slash", "back\\\\slash", "back\\\\slash"},
	{"new\nline", "new\\nline", "new\\nline"},
	{"tab\tx\x01y", "tab\\tx\\u0001y", "tab\tx\x01y"},
	{"\"}, \"x\": 1, \"", "\\\"}, \\\"x\\\": 1, \\\"",
	 "\\\"}, \\\"x\\\": 1, \\\""},
	{"caf\xc3\xa9", "caf\xc3\xa9", "caf\xc3\xa9"},
	{"bad\xff", "bad\\ufffd", "bad\xef\xbf\xbd"},
	{"cut\xe2\x82", "cut\\ufffd\\ufffd", "cut\xef\xbf\xbd\xef\xbf\xbd"},
	{"over\xc0\xaf", "over\\ufffd\\ufffd", "over\xef\xbf\xbd\xef\xbf\xbd"},
	{"", "", ""},
};

Test(escape, hostile_labels)
{
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		char *j = escape_json(cases[i].in),
		     *p = escape_prom(cases[i].in);
		cr_expect_str_eq(j, cases[i].json, "json of case %zu", i);
		cr_expect_str_eq(p, cases[i].prom, "prom of case %zu", i);
		free(j);
		free(p);
	}
}
