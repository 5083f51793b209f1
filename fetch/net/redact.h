/* redact.h - URLs without their secrets: userinfo, query string and
 * fragment never reach logs, error text, indexes or cache keys. */
#ifndef ECHOFS_REDACT_H
#define ECHOFS_REDACT_H

#include "common/attrs.h"
#include <stddef.h>

/* Copy url into buf without userinfo, query string and fragment (replaced by
 * "***" markers), truncated to fit. Returns buf. */
const char *http_redact(const char *url, char *buf, size_t buflen);

/* The URL as it may be stored: without userinfo and fragment, its query
 * without the parameters that carry a changing credential (signatures,
 * their dates and expiries, tokens: X-Amz-*, X-Goog-*, Signature, Expires,
 * AWSAccessKeyId, token, access_token, sig and, beside a sig, Azure's SAS
 * names) and the rest replaced by "~" and 32 hex digits of an HMAC-SHA256
 * under the key of http_url_key_use; no query left: no '?'. A path without
 * "://" is returned unchanged. Indexes, cache keys and cache file names use
 * this form: no query text reaches the disk, a presigned URL signed anew
 * finds the same entries, and URLs that differ in another parameter
 * ("get?s=a", "get?s=b") are different shards. Returns a new string (caller
 * frees). */
char *http_strip_secrets(const char *url);

/* The URL as it may be published (echofs-index's output): without
 * userinfo, query string and fragment (a path without "://" unchanged).
 * An index given or found beside the shards may name a shard this way; its
 * place in the list tells shards that differ only in the query apart.
 * Returns a new string (caller frees). */
char *http_strip_query(const char *url);

/* Use the key of the query digests kept in cache_dir/url-key (32 random
 * bytes, mode 0600, owned by this user; written first when absent and
 * `create`). Until a call succeeds the process uses a random key of its
 * own, so digests then agree only within the process. Call before the
 * first digest that reaches the disk. Returns 0 or -errno (-EPERM: the file
 * is not this user's or others may read it; -EBADMSG: not a key file). */
MUST_CHECK
int http_url_key_use(const char *cache_dir, int create);

#endif
