/* test_log.c - the logging module: levels, filtering, the file sink and
 * its line format. */
#include <criterion/criterion.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <regex.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
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

/* ---- issue 50: where log_file may point, and a slow log device ---------- */

/* Issue 50: log_file followed a symlink and appended the daemon's lines to
 * whatever it pointed at, at mount and at every reopen. */
Test(log, a_symlink_is_refused_at_open_and_at_reopen)
{
	char victim[160], own[160], *text;
	size_t len;

	snprintf(victim, sizeof(victim), "%s/victim", dir);
	fx_write_file(victim, "precious\n", 9);
	cr_assert_eq(symlink(victim, path), 0);
	cr_assert_eq(log_set_file(path), -ELOOP);

	/* a reopen onto a symlink keeps the file already open */
	snprintf(own, sizeof(own), "%s/own", dir);
	cr_assert_eq(log_set_file(own), 0);
	cr_assert_eq(log_set_file(path), -ELOOP);
	log_error("after the refused reopen");
	cr_assert_eq(file_read_all(victim, 1 << 20, &text, &len), 0);
	cr_assert_str_eq(text, "precious\n");
	free(text);
	cr_assert_eq(file_read_all(own, 1 << 20, &text, &len), 0);
	cr_assert(strstr(text, "after the refused reopen"), "%s", text);
	free(text);
}

Test(log, another_users_file_and_a_hard_link_are_refused)
{
	char link2[160];

	fx_write_file(path, "theirs\n", 7);
	snprintf(link2, sizeof(link2), "%s/second-name", dir);
	cr_assert_eq(link(path, link2), 0);
	cr_assert_eq(log_set_file(path), -EPERM, "a file with two links");
	cr_assert_eq(unlink(link2), 0);
	cr_assert_eq(log_set_file(path), 0, "the user's own file");
	if (geteuid() != 0)
		cr_skip_test("chown to another user needs root");
	cr_assert_eq(chown(path, 65534, 65534), 0);
	cr_assert_eq(log_set_file(path), -EPERM, "another user's file");
}

Test(log, a_fifo_is_refused_without_blocking, .timeout = 20)
{
	cr_assert_eq(mkfifo(path, 0600), 0);
	cr_assert_eq(log_set_file(path), -EINVAL);
	cr_assert_eq(log_set_file("/dev/null"),
		     geteuid() == 0 ? -EINVAL : -EPERM);
}

struct blocked {
	atomic_int tid;
	atomic_int done;
};

static void *log_blocked(void *arg)
{
	struct blocked *b = arg;
	atomic_store(&b->tid, (int)syscall(SYS_gettid));
	log_error("stuck behind a full pipe");
	atomic_store(&b->done, 1);
	return NULL;
}

static void *log_elsewhere(void *arg)
{
	atomic_int *done = arg;
	if (log_set_file(path) == 0)
		log_error("written while another line waits");
	atomic_store(done, 1);
	return NULL;
}

/* Whether thread tid is inside write(2) now (/proc/.../syscall). */
static int in_write(pid_t tid)
{
	char p[96], *text;
	size_t len;
	long nr = -1;

	snprintf(p, sizeof(p), "/proc/self/task/%d/syscall", (int)tid);
	if (file_read_all(p, 4096, &text, &len) != 0)
		return 0;
	nr = strtol(text, NULL, 10);
	free(text);
	return nr == SYS_write;
}

/* A pipe whose buffer is full: a blocking write to it waits. */
static void fill_pipe(int fds[2])
{
	char chunk[4096] = {0};

	cr_assert_eq(pipe(fds), 0);
	fcntl(fds[1], F_SETPIPE_SZ, 4096);
	cr_assert_eq(fcntl(fds[1], F_SETFL, O_NONBLOCK), 0);
	while (write(fds[1], chunk, sizeof(chunk)) > 0)
		;
	while (write(fds[1], chunk, 1) > 0)
		;
	cr_assert_eq(fcntl(fds[1], F_SETFL, 0), 0);
}

/* Issue 50: the log mutex was held while writing, so one line stuck on a
 * slow log device (here stderr, a full pipe) stalled every thread that
 * logged, and a reopen too. */
Test(log, a_line_stuck_on_a_slow_device_stalls_no_other_thread, .timeout = 60)
{
	struct blocked b = {.done = 0};
	atomic_int other_done = 0;
	pthread_t ta, tb;
	int fds[2], saved = dup(STDERR_FILENO), waited = 0;
	char sink[4096];

	fill_pipe(fds);
	cr_assert_eq(dup2(fds[1], STDERR_FILENO), STDERR_FILENO);
	cr_assert_eq(pthread_create(&ta, NULL, log_blocked, &b), 0);
	while (!(b.tid && in_write(b.tid)) && waited++ < 10000)
		usleep(1000);
	cr_assert(b.tid && in_write(b.tid), "the first line never blocked");

	cr_assert_eq(pthread_create(&tb, NULL, log_elsewhere, &other_done), 0);
	for (waited = 0; !atomic_load(&other_done) && waited < 5000; waited++)
		usleep(1000);
	int other_went = atomic_load(&other_done);

	/* drain, so that both threads end whatever happened */
	fcntl(fds[0], F_SETFL, O_NONBLOCK);
	while (!atomic_load(&b.done) || !atomic_load(&other_done))
		if (read(fds[0], sink, sizeof(sink)) <= 0)
			usleep(1000);
	pthread_join(ta, NULL);
	pthread_join(tb, NULL);
	dup2(saved, STDERR_FILENO);
	close(saved);
	close(fds[0]);
	close(fds[1]);
	cr_assert(other_went, "a reopen and a line to another file waited 5 s "
			      "for a line stuck on stderr");
	char *text = contents();
	cr_assert(strstr(text, "written while another line waits"), "%s", text);
	free(text);
}

#define WRITERS 4
#define LINES 3000
#define ROTATIONS 30

static void *log_many(void *arg)
{
	int t = (int)(intptr_t)arg;
	for (int i = 0; i < LINES; i++)
		log_error("w%d line %d end", t, i);
	return NULL;
}

/* Count the lines "w<t> line <i> end" in text into seen; every line must
 * be whole. */
static void tally(const char *text, unsigned char *seen)
{
	for (const char *p = text; *p;) {
		const char *nl = strchr(p, '\n');
		int t, i, n = 0;
		const char *m = strstr(p, "echofs error: ");
		cr_assert_not_null(nl, "a torn last line: %s", p);
		cr_assert(m && m < nl, "a line without its prefix: %.80s", p);
		cr_assert_eq(sscanf(m, "echofs error: w%d line %d end%n", &t,
				    &i, &n),
			     2, "a torn line: %.80s", p);
		cr_assert(m + n == nl, "two lines in one: %.80s", p);
		cr_assert(t >= 0 && t < WRITERS && i >= 0 && i < LINES);
		seen[t * LINES + i]++;
		p = nl + 1;
	}
}

/* Reopens (a log rotation: rename, then SIGUSR1) while threads log: every
 * line lands whole, exactly once, in the old file or the new one; no
 * write goes to a closed or reused descriptor. Also run under ASan. */
Test(log, reopen_under_load_loses_and_tears_no_line, .timeout = 120)
{
	static unsigned char seen[WRITERS * LINES];
	pthread_t th[WRITERS];
	char old[160], *text;
	size_t len;

	cr_assert_eq(log_set_file(path), 0);
	for (int t = 0; t < WRITERS; t++)
		cr_assert_eq(pthread_create(&th[t], NULL, log_many,
					    (void *)(intptr_t)t),
			     0);
	for (int k = 0; k < ROTATIONS; k++) {
		snprintf(old, sizeof(old), "%s/log.%d", dir, k);
		cr_assert_eq(rename(path, old), 0);
		cr_assert_eq(log_set_file(path), 0);
		usleep(2000);
	}
	for (int t = 0; t < WRITERS; t++)
		pthread_join(th[t], NULL);
	for (int k = 0; k <= ROTATIONS; k++) {
		if (k < ROTATIONS)
			snprintf(old, sizeof(old), "%s/log.%d", dir, k);
		else
			snprintf(old, sizeof(old), "%s", path);
		cr_assert_eq(file_read_all(old, 64 << 20, &text, &len), 0);
		tally(text, seen);
		free(text);
	}
	for (size_t j = 0; j < WRITERS * LINES; j++)
		cr_assert_eq(seen[j], 1, "line w%zu %zu seen %d times",
			     j / LINES, j % LINES, seen[j]);
}
