/* test_log.c - the logging module: levels, filtering, the file sink and
 * its line format. */
#include <criterion/criterion.h>
#include <errno.h>
#include <regex.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/file.h"
#include "common/log.h"
#include "fixtures.h"

static char dir[64], path[128];

static void setup(void)
{
	snprintf(dir, sizeof(dir), "/tmp/echofs-test-log.XXXXXX");
	cr_assert_not_null(mkdtemp(dir));
	snprintf(path, sizeof(path), "%s/log", dir);
}

static void teardown(void)
{
	fx_rm_tree(dir);
}

TestSuite(log, .init = setup, .fini = teardown);

/* The log file's contents (caller frees). */
static char *contents(void)
{
	char *buf;
	size_t len;
	cr_assert_eq(file_read_all(path, 1 << 20, &buf, &len), 0);
	return buf;
}

Test(log, parse_level_names)
{
	static const struct {
		const char *s;
		int r;
		enum log_level l;
	} cases[] = {
		{"error", 0, LOG_LEVEL_ERROR},
		{"warn", 0, LOG_LEVEL_WARN},
		{"info", 0, LOG_LEVEL_INFO},
		{"debug", 0, LOG_LEVEL_DEBUG},
		{"DEBUG", -EINVAL, 0},
		{"warning", -EINVAL, 0},
		{"", -EINVAL, 0},
	};
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		enum log_level l = LOG_LEVEL_DEBUG;
		cr_assert_eq(log_parse_level(cases[i].s, &l), cases[i].r, "%s",
			     cases[i].s);
		if (cases[i].r == 0)
			cr_assert_eq(l, cases[i].l, "%s", cases[i].s);
	}
}

Test(log, default_level_is_info_and_set_level_sticks)
{
	cr_assert_eq(log_get_level(), LOG_LEVEL_INFO);
	log_set_level(LOG_LEVEL_ERROR);
	cr_assert_eq(log_get_level(), LOG_LEVEL_ERROR);
}

Test(log, lines_below_the_level_are_dropped)
{
	char *text;

	cr_assert_eq(log_set_file(path), 0);
	log_set_level(LOG_LEVEL_WARN);
	log_error("e-%d", 1);
	log_warn("w-%d", 2);
	log_info("i-%d", 3);
	log_debug("d-%d", 4);
	text = contents();
	cr_assert(strstr(text, "error: e-1"), "%s", text);
	cr_assert(strstr(text, "warn: w-2"), "%s", text);
	cr_assert_null(strstr(text, "i-3"), "%s", text);
	cr_assert_null(strstr(text, "d-4"), "%s", text);
	free(text);
}

Test(log, line_format_is_utc_timestamp_name_level_message)
{
	regex_t re;
	char *text;

	cr_assert_eq(log_set_file(path), 0);
	log_info("hello %s", "world");
	text = contents();
	cr_assert_eq(regcomp(&re,
			     "^[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:"
			     "[0-9]{2}\\.[0-9]{3}Z echofs info: hello world\n$",
			     REG_EXTENDED),
		     0);
	cr_assert_eq(regexec(&re, text, 0, NULL, 0), 0, "line: %s", text);
	regfree(&re);
	free(text);
}

Test(log, long_messages_are_truncated_not_overflowed)
{
	char big[4000], *text;

	memset(big, 'z', sizeof(big) - 1);
	big[sizeof(big) - 1] = '\0';
	cr_assert_eq(log_set_file(path), 0);
	log_warn("%s", big);
	text = contents();
	char *nl = strchr(text, '\n');
	cr_assert_not_null(nl);
	cr_assert(nl - text < 1100, "line of %td bytes", nl - text);
	cr_assert(nl - text > 1000);
	free(text);
}

Test(log, the_file_is_appended_and_a_bad_path_is_an_errno)
{
	char *text;

	fx_write_file(path, "old\n", 4);
	cr_assert_eq(log_set_file(path), 0);
	log_error("new");
	text = contents();
	cr_assert_eq(strncmp(text, "old\n", 4), 0, "%s", text);
	cr_assert(strstr(text, "new"));
	free(text);
	cr_assert_eq(log_set_file("/nonexistent-dir/x/log"), -ENOENT);
}
