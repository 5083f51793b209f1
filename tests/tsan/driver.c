/* driver.c - runs the tests registered through the Criterion stand-in
 * (tests/tsan/criterion/criterion.h) under ThreadSanitizer: each test in a
 * child of its own (forked while this process has no threads), with its
 * suite's init and fini, a time bound, and a summary line. Exit status 1 if
 * any test failed. */
#include "criterion/criterion.h"

#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#define MAX_TESTS 512
#define EXIT_SKIP 77

struct crs_test {
	const char *suite, *name;
	void (*fn)(void);
	const struct crs_suite *s;
};

static struct crs_test tests[MAX_TESTS];
static size_t ntests;
static int failed_soft;

void crs_register(const char *suite, const char *name, void (*fn)(void),
		  const struct crs_suite *s)
{
	if (ntests == MAX_TESTS)
		abort();
	tests[ntests++] = (struct crs_test){suite, name, fn, s};
}

void crs_fail(int fatal, const char *file, int line, const char *what,
	      const char *fmt, ...)
{
	va_list ap;

	fprintf(stderr, "%s:%d: failed: %s", file, line, what);
	if (fmt[0]) {
		fputs(": ", stderr);
		va_start(ap, fmt);
		vfprintf(stderr, fmt, ap);
		va_end(ap);
	}
	fputc('\n', stderr);
	failed_soft = 1;
	if (fatal)
		_exit(1); /* the parent reports it; fini is skipped, as the
			   * child's resources go with it */
}

void crs_skip(const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	fputs("skip: ", stderr);
	vfprintf(stderr, fmt, ap);
	fputc('\n', stderr);
	va_end(ap);
	exit(EXIT_SKIP);
}

static int run_one(const struct crs_test *t)
{
	/* TSan slows code 5-15x: ten times the suite's own bound. */
	unsigned bound =
		(unsigned)(10 *
			   (t->s && t->s->timeout > 0 ? t->s->timeout : 60));
	int st;
	pid_t pid = fork();

	if (pid < 0)
		return -1;
	if (pid == 0) {
		alarm(bound);
		if (t->s && t->s->init)
			t->s->init();
		t->fn();
		if (t->s && t->s->fini)
			t->s->fini();
		exit(failed_soft ? 1 : 0);
	}
	if (waitpid(pid, &st, 0) < 0)
		return -1;
	if (WIFEXITED(st))
		return WEXITSTATUS(st);
	fprintf(stderr, "%s::%s: killed by signal %d\n", t->suite, t->name,
		WTERMSIG(st));
	return -1;
}

int main(int argc, char **argv)
{
	size_t passed = 0, skipped = 0, failed = 0;

	for (size_t i = 0; i < ntests; i++) {
		const struct crs_test *t = &tests[i];
		if (argc > 1 && strcmp(argv[1], t->name) != 0)
			continue;
		int r = run_one(t);
		printf("[%s] %s::%s\n",
		       r == 0		? "PASS"
		       : r == EXIT_SKIP ? "SKIP"
					: "FAIL",
		       t->suite, t->name);
		fflush(stdout);
		if (r == 0)
			passed++;
		else if (r == EXIT_SKIP)
			skipped++;
		else
			failed++;
	}
	printf("tested %zu: %zu passed, %zu skipped, %zu failed\n",
	       passed + skipped + failed, passed, skipped, failed);
	return failed ? 1 : 0;
}
