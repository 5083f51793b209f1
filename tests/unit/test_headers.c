/* test_headers.c - include hygiene that the compiler alone does not check:
 * the echo policy depends on nothing of the pool that uses it (the two
 * headers once included each other), and each common/ header compiles on
 * its own. */
#include "cache/echo/policy.h"
#ifdef ECHOFS_POOL_H
#define POLICY_PULLS_IN_POOL 1
#else
#define POLICY_PULLS_IN_POOL 0
#endif

#include "common/deadline.h"
#include "common/file.h"
#include "common/list.h"
#include "common/workq.h"

#include <criterion/criterion.h>

Test(headers, policy_h_includes_nothing_of_the_pool)
{
	cr_assert_eq(POLICY_PULLS_IN_POOL, 0,
		     "cache/echo/policy.h includes cache/echo/pool.h again");
	/* The mode the pool is configured with is the policy's. */
	enum echo_mode m = ECHO_FIXED;
	cr_assert_eq(m, 1);
}
