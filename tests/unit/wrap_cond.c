/* wrap_cond.c - pthread_cond_init wrapped at link time (-Wl,--wrap=
 * pthread_cond_init, tests/meson.build): fails as wrap_cond.h says. */
#include "wrap_cond.h"

#include <errno.h>
#include <pthread.h>

int __real_pthread_cond_init(pthread_cond_t *c, const pthread_condattr_t *a);
int __wrap_pthread_cond_init(pthread_cond_t *c, const pthread_condattr_t *a);

int cond_fail_after = -1;

int __wrap_pthread_cond_init(pthread_cond_t *c, const pthread_condattr_t *a)
{
	if (a && cond_fail_after >= 0 && cond_fail_after-- == 0) {
		cond_fail_after = 0;
		return ENOMEM;
	}
	return __real_pthread_cond_init(c, a);
}
