/* test_log_counted.c - counted errors are logged at warn, at most one line
 * per kind a second, the next line telling how many were left out. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/log.h"

static size_t count(const char *text, const char *what)
{
	size_t n = 0;
	for (const char *p = text; (p = strstr(p, what)) != NULL; p++)
		n++;
	return n;
}

Test(log_counted, one_line_per_kind_a_second)
{
	char path[] = "/tmp/echofs-logc-XXXXXX", text[8192];
	int fd = mkstemp(path);
	cr_assert_geq(fd, 0);
	close(fd);
	log_set_level(LOG_LEVEL_WARN);
	cr_assert_eq(log_set_file(path), 0);
	for (int i = 0; i < 100; i++)
		log_counted("read", "read of f%d failed", i);
	log_counted("image", "sample s failed");
	sleep(1);
	log_counted("read", "read of last failed");
	log_set_level(LOG_LEVEL_ERROR);
	log_counted("image", "not shown below warn");

	FILE *f = fopen(path, "r");
	size_t n = fread(text, 1, sizeof(text) - 1, f);
	text[n] = '\0';
	fclose(f);
	unlink(path);
	cr_expect_eq(count(text, "echofs warn: read of"), 2, "%s", text);
	cr_expect(strstr(text, "read of f0 failed [read]"), "%s", text);
	cr_expect(strstr(text,
			 "read of last failed [read, 99 more since the last]"),
		  "%s", text);
	cr_expect_eq(count(text, "sample s failed [image]"), 1, "%s", text);
	cr_expect_eq(count(text, "not shown"), 0, "%s", text);
}

static void read_log(const char *path, char *text, size_t cap)
{
	FILE *f = fopen(path, "r");
	size_t n = f ? fread(text, 1, cap - 1, f) : 0;
	text[n] = '\0';
	if (f)
		fclose(f);
	unlink(path);
}

static void log_to_temp(char *path)
{
	int fd = mkstemp(path);
	cr_assert_geq(fd, 0);
	close(fd);
	log_set_level(LOG_LEVEL_WARN);
	cr_assert_eq(log_set_file(path), 0);
}

/* Errors held back and never followed by another of their kind still reach
 * the log: a flush (at shutdown) writes "N more since the last". */
Test(log_counted, flush_writes_what_was_held_back)
{
	char path[] = "/tmp/echofs-logc-XXXXXX", text[8192];

	log_to_temp(path);
	for (int i = 0; i < 13; i++)
		log_counted("image", "sample %d: cannot preprocess", i);
	log_counted_flush();
	log_counted_flush(); /* nothing is left to say the second time */
	read_log(path, text, sizeof(text));
	cr_expect_eq(count(text, "cannot preprocess [image]"), 1, "%s", text);
	cr_expect_eq(count(text, "[image, 12 more since the last]"), 1, "%s",
		     text);
}

/* A summary does not wait for shutdown: once its kind's second is over,
 * the next counted error of any kind writes it first. */
Test(log_counted, stale_summary_goes_out_with_other_kinds)
{
	char path[] = "/tmp/echofs-logc-XXXXXX", text[8192];

	log_to_temp(path);
	for (int i = 0; i < 5; i++)
		log_counted("read", "read of f%d failed", i);
	sleep(1);
	log_counted("http_5xx", "http: 503");
	read_log(path, text, sizeof(text));
	cr_expect_eq(count(text, "[read, 4 more since the last]"), 1, "%s",
		     text);
	cr_expect_eq(count(text, "http: 503 [http_5xx]"), 1, "%s", text);
}
