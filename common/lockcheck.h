/* ASSERT_HELD(m): a debug-build check that the calling thread holds mutex m.
 *
 * Functions whose comment says "Caller holds the lock" (or "Lock held",
 * "p->lock held") start with ASSERT_HELD(&x->lock), so a caller that forgot
 * the lock aborts at once in tests instead of racing silently.
 *
 * How. glibc records the owning thread's id in every mutex it locks, of any
 * type (the __owner field of the public pthread_mutex_t, set by
 * pthread_mutex_lock and pthread_cond_wait on return, cleared on unlock), so
 * "held by me" is one comparison with gettid(): exact (it also catches a
 * mutex held by another thread), lock free, and needing no change to how the
 * mutexes are made. Elsewhere it falls back to pthread_mutex_trylock: if the
 * trylock succeeds nobody held the mutex (the check unlocks and aborts);
 * EBUSY passes (held by us, or by another thread, which this weaker form
 * cannot tell apart). Neither form changes the mutex's state when it passes.
 *
 * Cost: nothing with NDEBUG (the release build, meson's b_ndebug), like
 * assert(3); the debug and debugoptimized builds and the tests check. */
#ifndef ECHOFS_COMMON_LOCKCHECK_H
#define ECHOFS_COMMON_LOCKCHECK_H

#include <pthread.h>

#ifdef NDEBUG
#define ASSERT_HELD(m) ((void)0)
#else
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

/* Abort, naming the call site and the mutex expression. */
static inline void lockcheck_fail(const char *what, const char *file, int line)
{
	fprintf(stderr, "%s:%d: lock %s not held by this thread\n", file, line, what);
	abort();
}

/* 1 if the calling thread holds m (see above for the fallback's limits). */
static inline int lockcheck_held(const pthread_mutex_t *m)
{
#ifdef __GLIBC__
	return m->__data.__owner == gettid();
#else
	/* Callers' const structs: the check leaves the mutex as it was. */
	pthread_mutex_t *w = (pthread_mutex_t *)m;
	if (pthread_mutex_trylock(w) != 0)
		return 1;
	pthread_mutex_unlock(w);
	return 0;
#endif
}

#define ASSERT_HELD(m)                                                         \
	do {                                                                   \
		if (!lockcheck_held(m))                                        \
			lockcheck_fail(#m, __FILE__, __LINE__);                \
	} while (0)
#endif

#endif
