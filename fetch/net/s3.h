/* s3.h - s3:// sources: addressing (virtual-hosted or path-style, custom
 * endpoints), SigV4 signing of every request through http's auth hooks,
 * prefix listing with ListObjectsV2, and S3 error codes as errno.
 *
 * URL forms, as the shard list and the index hold them:
 *   s3://BUCKET/KEY       an object; KEY is raw (not percent-encoded), every
 *                         byte after "BUCKET/" belongs to it
 *   s3://BUCKET?QUERY     a bucket-level request; QUERY is sent as it is
 *                         (already encoded; used for ListObjectsV2)
 * http.c maps them through s3_http_auth's map_url to the https URL of the
 * endpoint and asks sign for the headers of each attempt, so retries and
 * resumes are signed afresh with the credentials current at that moment.
 *
 * Thread safety: after s3_open, every function may be called from any thread;
 * credentials are read through aws_creds (which refreshes them without
 * blocking signers). Signatures and tokens never reach a log line. */
#ifndef ECHOFS_S3_H
#define ECHOFS_S3_H

#include "common/attrs.h"
#include <stddef.h>

struct http;
struct http_auth;
struct shardlist;

struct s3_opts {
	const char *endpoint; /* -o endpoint=URL, or NULL */
	const char *region;   /* -o region=, or NULL */
	const char *profile;  /* -o profile=, or NULL (then AWS_PROFILE) */
	int path_style;	      /* -o path_style=1 */
	int requester_pays;   /* -o requester_pays=1 */
	int no_sign;	      /* -o no_sign=1: anonymous requests */
	/* CA bundle and directory the credential requests (STS, container,
	 * instance metadata) trust, as the transfers do; or NULL */
	const char *ca_file, *ca_path;
};

struct s3;

/* Settles endpoint, region and addressing, and (unless no_sign) finds
 * credentials now, so a mount without any fails at once, naming the
 * sources tried. Region: option, AWS_REGION, AWS_DEFAULT_REGION, the
 * profile's region, else found from the bucket (s3_find_region). Endpoint:
 * option, AWS_ENDPOINT_URL_S3, AWS_ENDPOINT_URL, the profile's endpoint_url,
 * else AWS's. Returns 0 with *out set, or -errno with *out NULL and a one-line
 * reason in err. */
MUST_CHECK
int s3_open(const struct s3_opts *o, struct s3 **out, char *err, size_t errlen);
/* Accepts NULL. */
void s3_free(struct s3 *s);

/* The hooks to put in http_opts.auth (points into s; valid until
 * s3_free). */
const struct http_auth *s3_http_auth(struct s3 *s);

/* Finds the region of url's bucket when none was given (option,
 * environment, profile): one HEAD on the bucket, read from its
 * x-amz-bucket-region header whatever the status, as the AWS SDKs do; with
 * AWS's own endpoint the endpoint follows the region. Call once after
 * http_open with these hooks, before any other request (it is not safe
 * against concurrent requests). Returns 1 if a region was found, 0 if not
 * needed or not found (us-east-1 then, corrected on a wrong-region
 * refusal); a failed HEAD is not an error. */
int s3_find_region(struct s3 *s, struct http *h, const char *url);

/* 1 if s is an s3:// URL with a bucket name; 0 otherwise (NULL too). */
int s3_is_url(const char *s);

/* 1 if SOURCE asks for a listing: "s3://B/PREFIX/" (every object ending
 * in ".tar" under PREFIX, at any depth) or a last component holding '*'
 * ("s3://B/PREFIX/GLOB" with GLOB e.g. "*.tar": fnmatch on the names
 * directly under PREFIX). */
int s3_is_listing(const char *source);

/* Lists SOURCE (see s3_is_listing) with ListObjectsV2, following every
 * continuation token; keys sorted byte-wise, as "s3://B/KEY". At most max
 * shards (-E2BIG beyond). Keys with control characters are skipped with a
 * warning. Returns 0 or -errno with a one-line reason in err; -ENODATA
 * when nothing matches. out is overwritten. */
MUST_CHECK
int s3_list_shards(struct http *h, const char *source, size_t max,
		   struct shardlist *out, char *err, size_t errlen);

/* The last S3 error reason seen ("S3 SignatureDoesNotMatch: ...") into
 * buf, "" if none: appended to a failed mount's one-line message. */
const char *s3_last_error(struct s3 *s, char *buf, size_t buflen);

/* The errno and a one-line explanation for an S3 error code ("AccessDenied",
 * "NoSuchBucket", ...); the one place S3 codes become errno. Unknown codes
 * give -EIO and NULL. */
MUST_CHECK
int s3_code_errno(const char *code, const char **why);

#endif
