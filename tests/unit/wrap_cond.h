/* wrap_cond.h - a pthread_cond_init that fails on demand, for the suites
 * that check cond_init_monotonic's return (linked with
 * -Wl,--wrap=pthread_cond_init: see unit_link_args in tests/meson.build). */
#ifndef ECHOFS_TESTS_WRAP_COND_H
#define ECHOFS_TESTS_WRAP_COND_H

/* Once this many monotonic inits (those given an attr: made by
 * cond_init_monotonic) have succeeded, the next ones fail with ENOMEM.
 * -1 (the start): none fails. */
extern int cond_fail_after;

#endif
