/* test_lockcheck.c - ASSERT_HELD aborts unless this thread holds the lock. */
#include <criterion/criterion.h>
#include <pthread.h>
#include <signal.h>

#include "common/lockcheck.h"

#ifdef NDEBUG
/* The release build compiles the check away: nothing to observe. */
#define NEED_CHECKS() cr_skip_test("ASSERT_HELD is compiled out (NDEBUG)")
#else
#define NEED_CHECKS() ((void)0)
#endif

static pthread_mutex_t m = PTHREAD_MUTEX_INITIALIZER;

Test(lockcheck, fires_when_nobody_holds_the_lock, .signal = SIGABRT)
{
	NEED_CHECKS();
	ASSERT_HELD(&m);
}

Test(lockcheck, fires_after_the_lock_was_released, .signal = SIGABRT)
{
	NEED_CHECKS();
	pthread_mutex_lock(&m);
	pthread_mutex_unlock(&m);
	ASSERT_HELD(&m);
}

static pthread_mutex_t other = PTHREAD_MUTEX_INITIALIZER;
static pthread_mutex_t go = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t go_cv = PTHREAD_COND_INITIALIZER;
static int locked_by_other;

/* Hold `other` until the process ends (the test aborts or returns). */
static void *hold_other(void *arg)
{
	(void)arg;
	pthread_mutex_lock(&other);
	pthread_mutex_lock(&go);
	locked_by_other = 1;
	pthread_cond_signal(&go_cv);
	pthread_mutex_unlock(&go);
	pause();
	return NULL;
}

#ifdef __GLIBC__
/* Only glibc's owner check can tell another thread's hold from ours. */
Test(lockcheck, fires_when_another_thread_holds_the_lock, .signal = SIGABRT)
{
	pthread_t t;

	NEED_CHECKS();
	cr_assert_eq(pthread_create(&t, NULL, hold_other, NULL), 0);
	pthread_mutex_lock(&go);
	while (!locked_by_other)
		pthread_cond_wait(&go_cv, &go);
	pthread_mutex_unlock(&go);
	ASSERT_HELD(&other);
}
#endif

Test(lockcheck, silent_while_held_and_leaves_the_lock_as_it_was)
{
	pthread_mutex_lock(&m);
	ASSERT_HELD(&m);
	ASSERT_HELD(&m);
	cr_assert_eq(pthread_mutex_unlock(&m), 0);
	/* Still unlocked and usable: the check took nothing. */
	cr_assert_eq(pthread_mutex_trylock(&m), 0);
	ASSERT_HELD(&m);
	pthread_mutex_unlock(&m);
}

Test(lockcheck, silent_after_a_condition_wait_relocks)
{
	pthread_cond_t cv;
	struct timespec ts;

	cr_assert_eq(pthread_cond_init(&cv, NULL), 0);
	pthread_mutex_lock(&m);
	clock_gettime(CLOCK_REALTIME, &ts);
	/* A timed wait already past: it drops and retakes the lock. */
	pthread_cond_timedwait(&cv, &m, &ts);
	ASSERT_HELD(&m);
	pthread_mutex_unlock(&m);
	pthread_cond_destroy(&cv);
}

Test(lockcheck, silent_for_error_checking_and_recursive_mutexes)
{
	int types[] = {PTHREAD_MUTEX_ERRORCHECK, PTHREAD_MUTEX_RECURSIVE};

	for (size_t i = 0; i < sizeof(types) / sizeof(types[0]); i++) {
		pthread_mutexattr_t a;
		pthread_mutex_t x;

		pthread_mutexattr_init(&a);
		pthread_mutexattr_settype(&a, types[i]);
		cr_assert_eq(pthread_mutex_init(&x, &a), 0);
		pthread_mutex_lock(&x);
		ASSERT_HELD(&x);
		pthread_mutex_unlock(&x);
		pthread_mutex_destroy(&x);
		pthread_mutexattr_destroy(&a);
	}
}
