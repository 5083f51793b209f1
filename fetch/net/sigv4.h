/* sigv4.h - AWS Signature Version 4 for S3 requests (Authorization header),
 * computed with libcrypto's SHA-256 and HMAC, byte for byte as botocore's
 * S3SigV4Auth does.
 *
 * Why not libcurl's CURLOPT_AWS_SIGV4 (7.88 here): it sends no
 * x-amz-security-token, so session credentials (STS, IMDS, ECS, web
 * identity) cannot be used; it sends no x-amz-content-sha256, which S3
 * requires and which S3-compatible servers check (s3rver answers its
 * requests with 400); and its canonical query string mishandles the
 * characters that ListObjectsV2 continuation tokens and prefixes carry.
 * Signing here also lets every retry and resume be signed afresh.
 *
 * What is signed, as botocore does for a GET or HEAD without a body:
 *   - the method; the URL's path exactly as sent (S3 does not normalise or
 *     double-encode it: build it with sigv4_uri_encode(.., keep_slash=1));
 *   - the URL's query, split on '&' and '=' and sorted by key then value,
 *     as sent (build each key and value with sigv4_uri_encode(.., 0));
 *   - host (lower case, the port unless it is the scheme's default),
 *     x-amz-content-sha256 (the SHA-256 of the empty body: S3SigV4Auth signs
 *     the payload of a request without Content-MD5), x-amz-date,
 *     x-amz-security-token when the credentials have one, and the caller's
 *     extra headers (e.g. range, x-amz-request-payer), names lower-cased,
 *     values with runs of white space folded to one space.
 * Nothing here logs; secrets stay in the caller's buffers. */
#ifndef ECHOFS_SIGV4_H
#define ECHOFS_SIGV4_H

#include "common/attrs.h"
#include <stddef.h>

#define SIGV4_DATE_LEN 16 /* "YYYYMMDDTHHMMSSZ" */
#define SIGV4_HEX_LEN 64
#define SIGV4_AUTH_MAX 1024
#define SIGV4_MAX_HEADERS 8
/* sha256("") in hex: the payload hash of a GET or HEAD */
#define SIGV4_EMPTY_SHA256                                                     \
	"e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"

/* Borrowed strings. access_key and secret_key are required; token may be
 * NULL or "" (long-term keys). */
struct sigv4_creds {
	const char *access_key;
	const char *secret_key;
	const char *token;
};

struct sigv4_header {
	const char *name; /* any case */
	const char *value;
};

/* One request to sign; every string borrowed. */
struct sigv4_req {
	const char *method;  /* "GET", "HEAD" */
	const char *url;     /* absolute http(s) URL, encoded as it is sent */
	const char *region;  /* e.g. "us-east-1" */
	const char *service; /* NULL means "s3" */
	/* "YYYYMMDDTHHMMSSZ"; NULL means now (UTC) */
	const char *amz_date;
	/* hex SHA-256 of the body; NULL means SIGV4_EMPTY_SHA256 */
	const char *payload_hash;
	/* further headers to sign (and send), at most SIGV4_MAX_HEADERS */
	const struct sigv4_header *headers;
	size_t nheaders;
};

/* What to send: the headers "x-amz-date", "x-amz-content-sha256",
 * "x-amz-security-token" (when the credentials have one), the caller's extra
 * headers, and "Authorization". */
struct sigv4_result {
	char amz_date[SIGV4_DATE_LEN + 1];
	char payload_hash[SIGV4_HEX_LEN + 1];
	char authorization[SIGV4_AUTH_MAX];
};

/* Sign req. Returns 0, -EINVAL on a malformed URL, date, header or
 * credential (too long, control characters, missing part), -ENOMEM. */
MUST_CHECK
int sigv4_sign(const struct sigv4_req *req, const struct sigv4_creds *creds,
	       struct sigv4_result *out);

/* The canonical request and the string to sign that sigv4_sign would use
 * (for tests and debugging: they hold no secret). Caller frees both; either
 * pointer may be NULL. */
int sigv4_canonical(const struct sigv4_req *req,
		    const struct sigv4_creds *creds, char **canonical,
		    char **string_to_sign);

/* Percent-encode s[0..len) as AWS wants: every byte except A-Z a-z 0-9 - _
 * . ~ (and '/' when keep_slash) becomes %XX with upper-case hex; UTF-8 is
 * encoded byte by byte. Writes a NUL-terminated string; returns its length,
 * or -ENAMETOOLONG when it does not fit outlen. */
long sigv4_uri_encode(const char *s, size_t len, int keep_slash, char *out,
		      size_t outlen);

/* Current UTC time as "YYYYMMDDTHHMMSSZ", offset by skew_s seconds (the
 * server's clock minus ours, after RequestTimeTooSkewed). */
void sigv4_now(char out[SIGV4_DATE_LEN + 1], long skew_s);

#endif
