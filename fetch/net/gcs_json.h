/* gcs_json.h - a small strict reader for the flat JSON objects of Google
 * credentials: service-account and authorized-user key files, token
 * replies of the OAuth endpoint and of the metadata server.
 *
 * Only one object whose values are strings, numbers, true, false or null is
 * accepted (nested objects or arrays, trailing bytes, duplicate names, bad
 * escapes, unpaired surrogates, NUL or control characters in strings: all
 * -EPROTO), so a hostile reply cannot smuggle a second value past a check.
 * Input is bounded by its length; nothing is read past it. */
#ifndef ECHOFS_GCS_JSON_H
#define ECHOFS_GCS_JSON_H

#include "common/attrs.h"
#include <stddef.h>

/* Checks that text[0..len) is such an object. Returns 0 or -EPROTO. */
MUST_CHECK
int gcs_json_check(const char *text, size_t len);

/* The value of member `name` of the object in text[0..len) into out,
 * NUL-terminated: a string decoded (escapes, \u as UTF-8), a number, true,
 * false or null as written. Returns 0, -ENOENT when absent, -EPROTO for
 * text that is not such an object, -ENAMETOOLONG when it does not fit. */
MUST_CHECK
int gcs_json_get(const char *text, size_t len, const char *name, char *out,
		 size_t outlen);

#endif
