/* redact.h - URLs without their secrets: userinfo, query string and
 * fragment never reach logs, error text, indexes or cache keys. */
#ifndef ECHOFS_REDACT_H
#define ECHOFS_REDACT_H

#include <stddef.h>

/* Copy url into buf without userinfo, query string and fragment (replaced by
 * "***" markers), truncated to fit. Returns buf. */
const char *http_redact(const char *url, char *buf, size_t buflen);

/* The URL as it may be stored or published: without userinfo, query string
 * and fragment (a path without "://" is returned unchanged). Indexes, cache
 * keys and cache file names use this form, so nothing on disk holds a
 * credential and a new token still finds the same entries. Returns a new
 * string (caller frees). */
char *http_strip_secrets(const char *url);

#endif
