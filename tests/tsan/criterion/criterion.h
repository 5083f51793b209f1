/* criterion.h (ThreadSanitizer stand-in) - the part of Criterion's API the
 * threaded modules' unit suites use, so they build without Criterion:
 * Criterion's runner cannot start under TSan (its boxfort arena is mapped
 * where TSan keeps its shadow). tests/tsan/driver.c runs the tests, one
 * forked child each. Only built into -Db_sanitize=thread builds. */
#ifndef ECHOFS_TSAN_CRITERION_H
#define ECHOFS_TSAN_CRITERION_H

#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>   /* Criterion's header brings these in too */
#include <stdlib.h>
#include <string.h>

struct crs_suite {
	void (*init)(void);
	void (*fini)(void);
	double timeout;
};

void crs_register(const char *suite, const char *name, void (*fn)(void),
		  const struct crs_suite *s);
/* fatal: end the test now (failed); else record the failure and go on. */
void crs_fail(int fatal, const char *file, int line, const char *what,
	      const char *fmt, ...) __attribute__((format(printf, 5, 6)));
void crs_skip(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

#define TestSuite(suite, ...) \
	struct crs_suite crs_suite_##suite = {__VA_ARGS__}

#define Test(suite, name, ...)                                              \
	extern struct crs_suite crs_suite_##suite __attribute__((weak));     \
	static void crs_fn_##suite##_##name(void);                          \
	__attribute__((constructor)) static void crs_reg_##suite##_##name(  \
		void)                                                        \
	{                                                                    \
		crs_register(#suite, #name, crs_fn_##suite##_##name,         \
			     &crs_suite_##suite);                            \
	}                                                                    \
	static void crs_fn_##suite##_##name(void)

#define CRS_CHECK(fatal, cond, ...)                                          \
	do {                                                                 \
		if (!(cond))                                                 \
			crs_fail(fatal, __FILE__, __LINE__, #cond,           \
				 "" __VA_ARGS__);                            \
	} while (0)

#define cr_assert(c, ...) CRS_CHECK(1, c, __VA_ARGS__)
#define cr_assert_not(c, ...) CRS_CHECK(1, !(c), __VA_ARGS__)
#define cr_assert_eq(a, b, ...) CRS_CHECK(1, (a) == (b), __VA_ARGS__)
#define cr_assert_neq(a, b, ...) CRS_CHECK(1, (a) != (b), __VA_ARGS__)
#define cr_assert_lt(a, b, ...) CRS_CHECK(1, (a) < (b), __VA_ARGS__)
#define cr_assert_leq(a, b, ...) CRS_CHECK(1, (a) <= (b), __VA_ARGS__)
#define cr_assert_gt(a, b, ...) CRS_CHECK(1, (a) > (b), __VA_ARGS__)
#define cr_assert_geq(a, b, ...) CRS_CHECK(1, (a) >= (b), __VA_ARGS__)
#define cr_assert_null(p, ...) CRS_CHECK(1, (p) == NULL, __VA_ARGS__)
#define cr_assert_not_null(p, ...) CRS_CHECK(1, (p) != NULL, __VA_ARGS__)
#define cr_assert_str_eq(a, b, ...) \
	CRS_CHECK(1, strcmp((a), (b)) == 0, __VA_ARGS__)
#define cr_assert_fail(...) CRS_CHECK(1, 0, __VA_ARGS__)
#define cr_expect(c, ...) CRS_CHECK(0, c, __VA_ARGS__)
#define cr_expect_not(c, ...) CRS_CHECK(0, !(c), __VA_ARGS__)
#define cr_expect_eq(a, b, ...) CRS_CHECK(0, (a) == (b), __VA_ARGS__)
#define cr_expect_neq(a, b, ...) CRS_CHECK(0, (a) != (b), __VA_ARGS__)
#define cr_expect_lt(a, b, ...) CRS_CHECK(0, (a) < (b), __VA_ARGS__)
#define cr_expect_leq(a, b, ...) CRS_CHECK(0, (a) <= (b), __VA_ARGS__)
#define cr_expect_gt(a, b, ...) CRS_CHECK(0, (a) > (b), __VA_ARGS__)
#define cr_expect_geq(a, b, ...) CRS_CHECK(0, (a) >= (b), __VA_ARGS__)
#define cr_expect_null(p, ...) CRS_CHECK(0, (p) == NULL, __VA_ARGS__)
#define cr_expect_not_null(p, ...) CRS_CHECK(0, (p) != NULL, __VA_ARGS__)
#define cr_expect_str_eq(a, b, ...) \
	CRS_CHECK(0, strcmp((a), (b)) == 0, __VA_ARGS__)
#define cr_expect_float_eq(a, b, eps, ...)                           \
	CRS_CHECK(0, (a) - (b) <= (eps) && (b) - (a) <= (eps), __VA_ARGS__)
#define cr_skip_test(...) crs_skip("" __VA_ARGS__)

#endif
