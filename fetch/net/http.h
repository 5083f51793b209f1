/* http.h - HTTP(S) transfers with libcurl: whole-object streaming, range
 * reads, retries with backoff, verification, redaction.
 *
 * Calls are blocking and may be made from many threads at once; each call
 * uses its own easy handle while connections (keep-alive), DNS and TLS
 * sessions are shared through one curl share object, so transfers reuse
 * connections. At most `connections` transfers run at a time; callers beyond
 * that wait. Only fetch/ includes curl: errors come back as negative errno:
 *   -ENOENT  404/410          -EACCES  401/403
 *   -EKEYREJECTED  TLS: certificate not trusted, expired or for another
 *            name, CA file unreadable (http_reason says which, in curl's
 *            words too)
 *   -ESTALE  ETag changed (or 412 to our If-Match)
 *   -EPROTO  bad Content-Range / Content-Length, size differing from the
 *            expected one, body shorter than announced, a resume whose
 *            bytes differ from those already received
 *   -EPROTONOSUPPORT  redirect from https to http or to another scheme
 *   -ELOOP   more than 5 redirects
 * (http_reason says which in words: strerror's "Too many levels of symbolic
 * links" would not.)
 *   -ETIMEDOUT  no progress within the low-speed limit, retries exhausted;
 *               the call's total deadline passed (see http_opts.min_rate)
 *   -ECANCELED  http_cancel was called
 *   -EIO     5xx/408/429/connection errors after retries, other statuses
 *            (e.g. 416 for a range past the end)
 *   -ECONNREFUSED / -EHOSTUNREACH  could not connect, retries exhausted
 *   -EFBIG   body larger than the caller's cap
 *   -ERANGE  http_get_part: the server refuses ranges (200 or 416)
 *   -ECANCELED  the sink asked to stop (its own errno is returned instead
 *               when it returned one)
 * 404/410/401/403/412 and verification failures are final; 5xx, 408, 429,
 * connection errors and timeouts are retried with exponential backoff and
 * full jitter (or the server's Retry-After in seconds, capped at what is
 * left of the budget). Redirects (at most 5) are followed by this module so
 * that an https->http downgrade is refused; header_file headers go only to
 * the scheme://host:port of the URL the caller gave, never to a redirect
 * target elsewhere.
 * Requests carry "Accept-Encoding: identity"; a 200/206 with any other
 * Content-Encoding is -EIO (counted in errors_verify, logged), never data.
 * Credentials (URL userinfo, query strings, header_file contents) never
 * reach logs or error text: use http_redact for any URL shown to a user. */
#ifndef ECHOFS_HTTP_H
#define ECHOFS_HTTP_H

#include "common/attrs.h"
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "fetch/net/redact.h" /* http_redact, http_strip_secrets */

#define HTTP_ETAG_MAX 128

/* A request about to be sent, as an auth hook sees it. */
struct http_req_info {
	const char *method; /* "GET" or "HEAD" */
	const char *url;    /* the http(s) URL requested (after map_url) */
	const char *range;  /* the Range header's value, or NULL */
};

/* Hooks for sources whose URLs must be mapped and whose requests must be
 * signed one by one (s3:// in fetch/net/s3.c; a bearer-token provider
 * plugs in the same way). Called from many threads at once. */
struct http_auth {
	/* The http(s) URL to request for url (caller frees *out), or 0 with
	 * *out left NULL: url is used as it is and nothing is signed. Called
	 * once per call, before the first attempt. */
	int (*map_url)(void *ud, const char *url, char **out);
	/* "Name: value\n" lines for one request into buf (NUL-terminated).
	 * Called for a mapped URL just before every request to its origin:
	 * each retry and resume is signed anew; never for a redirect target
	 * elsewhere. A negative errno fails the call. */
	int (*sign)(void *ud, const struct http_req_info *req, char *buf,
		    size_t buflen);
	/* Optional: a mapped request's final response was not 2xx; body
	 * holds its first bytes (at most 4 KiB, NUL-terminated) so the hook
	 * can log the service's own reason. Returns 1 to have the request
	 * tried once more even if its status is final (e.g. after correcting
	 * the clock for a signature); honoured once per call. */
	int (*failed)(void *ud, const char *url, long status, const char *body,
		      size_t len);
	/* Optional: each response header of a mapped request, name and
	 * value trimmed and not NUL-terminated (S3 reads its bucket's region
	 * from x-amz-bucket-region, which AWS sends even on 301/400/403). */
	void (*header)(void *ud, const char *name, size_t nlen,
		       const char *value, size_t vlen);
	void *ud;
};

struct http_opts {
	unsigned connections; /* transfers in flight at most; 0 means 8 */
	/* Extra "Name: value" header lines, or NULL. Blank lines and lines
	 * starting with '#' are ignored; a line without a colon, with control
	 * characters, an empty value or a name echofs sets itself (Host, Range,
	 * If-Match, If-Range, Content-Length, Transfer-Encoding, Connection,
	 * Accept-Encoding) makes http_open fail naming the line, not the value.
	 */
	const char *header_file;
	/* Retries of one call stop when this much time has passed since the
	 * call started or since its body last made progress (default 30 s when
	 * 0): a long download that breaks late is still resumed. A call resumes
	 * a broken body at most 100 times. */
	double retry_budget_s;
	double connect_timeout_s; /* default 5 s when 0 */
	/* Abort a transfer stalled (under 1 byte/s) this long; default 10 s. */
	double low_speed_time_s;
	/* First backoff; default 0.2 s; doubles, with jitter, capped at 5 s. */
	double backoff_base_s;
	/* Slowest body worth waiting for, in bytes/s averaged over each
	 * rate_window_s (defaults 64 KiB/s and 10 s): a slower transfer is
	 * broken off and resumed. Every call also ends by a total deadline set
	 * when it starts: connect_timeout_s + rate_window_s + retry_budget_s +
	 * its body size / min_rate, however often it resumes. */
	double min_rate;
	double rate_window_s;
	/* CA bundle (file) and CA directory (hashed, as c_rehash makes) used
	 * instead of the system ones, or NULL. */
	const char *ca_file;
	const char *ca_path;
	/* URL mapping and request signing (copied), or NULL */
	const struct http_auth *auth;
};

struct http_stats {
	uint64_t requests; /* transfers started */
	uint64_t bytes;	   /* body bytes received */
	uint64_t header_bytes; /* response header bytes received (status
				* lines included, every response) */
	uint64_t retries;  /* attempts repeated after a retryable failure */
	uint64_t resumes;  /* broken bodies resumed with Range */
	/* attempts broken off for a stalled body: no byte for
	 * low_speed_time_s, or under min_rate over a window; not in
	 * errors_conn */
	uint64_t stalls;
	uint64_t errors_4xx;
	uint64_t errors_5xx;
	uint64_t errors_conn;	/* connect / DNS / TLS / reset / timeout */
	uint64_t errors_verify; /* ETag, length or range mismatches */
};

struct http;

/* Reads header_file now (so later changes to it need a remount). Returns 0
 * with *out set, or -errno with *out NULL and a one-line reason in err.
 * Call http_global_init() once before any thread is started. */
MUST_CHECK
int http_global_init(void);
int http_open(const struct http_opts *o, struct http **out, char *err,
	      size_t errlen);
/* Accepts NULL. */
void http_free(struct http *h);

/* libcurl's version line: libcurl, its TLS backend and the libraries it
 * uses (static string). */
const char *http_version(void);

/* Size (from Content-Length of a HEAD, or, when HEAD has none or is refused
 * with 405/501, the total of a 0-0 range GET) and ETag (strong or weak,
 * quotes kept; "" if none) of url. */
int http_stat(struct http *h, const char *url, uint64_t *size, char *etag,
	      size_t etaglen);

/* Called with consecutive body bytes, starting at the object's offset 0,
 * never repeating a byte even across resumes. Return 0 to go on or a negative
 * errno to stop (the call then returns that errno). */
typedef int (*http_sink_fn)(void *ud, const void *data, size_t len);

/* Stream the whole object. expected_size is checked (UINT64_MAX: unknown);
 * etag, when non-empty, must match the server's (-ESTALE otherwise). Without
 * one, the ETag of the first response is adopted. Requests carry If-Match
 * when the ETag is strong; a weak one is compared against each response's.
 * So bytes of two versions are never mixed. A body that breaks off is
 * resumed with a Range request from the next byte (checked through
 * Content-Range); a server that ignores Range is handled by skipping the
 * bytes already delivered. A resume asks again for up to 4 KiB already
 * delivered and compares them (a 200's skipped bytes too): a server answering
 * from another offset under a right-looking Content-Range is -EPROTO, never
 * data (http_reason says so). */
MUST_CHECK
int http_stream(struct http *h, const char *url, const char *etag,
		uint64_t expected_size, http_sink_fn sink, void *ud);

/* Read exactly len bytes at off into buf with a Range request (retried, and
 * verified through Content-Range; a 200 full body is skipped to off). */
int http_get_range(struct http *h, const char *url, const char *etag,
		   uint64_t off, size_t len, void *buf);
/* The same for an object of known size `total` (UINT64_MAX: unknown): a
 * reply for an object of another size (Content-Range total, or a 200's
 * length) is -EPROTO even when no ETag can tell the versions apart. */
MUST_CHECK
int http_get_range_of(struct http *h, const char *url, const char *etag,
		      uint64_t total, uint64_t off, size_t len, void *buf);

/* The same, for callers with another way to the bytes (a whole-object
 * download): a server that answers the range with 200 (it ignores Range)
 * or 416 is -ERANGE at once, before any of the body is taken, where
 * http_get_range_of would read the whole object up to off + len. */
MUST_CHECK
int http_get_part(struct http *h, const char *url, const char *etag,
		  uint64_t total, uint64_t off, size_t len, void *buf);

/* Whole object into a malloc'd, NUL-terminated buffer of at most cap bytes
 * (-EFBIG beyond). Caller frees *out. */
MUST_CHECK
int http_get_all(struct http *h, const char *url, size_t cap, char **out,
		 size_t *outlen);

/* One request whose every answer counts, for credential sources (instance
 * metadata, container credentials, STS, Google's token endpoint): h's TLS
 * options (ca_file, ca_path), its errnos for curl's failures (-EKEYREJECTED
 * for an untrusted certificate, http_reason says which check), its
 * connect timeout, ended by connect_timeout_s + retry_budget_s (or the
 * thread's deadline); no retry, no redirect. Returns 0 with the status and
 * the body (NUL-terminated, at most cap bytes; caller frees, may hold
 * secrets: wipe it), whatever the status; or -errno with *out NULL (-EFBIG:
 * body over cap). */
struct http_exchange {
	const char *method; /* NULL: GET, or POST when form is set */
	const char *url;
	const char *const *hdrs; /* nhdrs "Name: value" lines */
	size_t nhdrs;
	const char *form; /* request body, or NULL */
};
int http_exchange(struct http *h, const struct http_exchange *r, size_t cap,
		  long *status, char **out);

void http_get_stats(struct http *h, struct http_stats *out);

/* The stall window (http_opts.low_speed_time_s, else its default): the
 * longest a caller waits without progress, e.g. a bucket listing whose
 * pages bring no new key. */
double http_stall_timeout(const struct http *h);

/* Shutdown: every transfer in progress ends within about a second, waits
 * for a slot or a backoff end at once, and later calls fail, all with
 * -ECANCELED. Safe from any thread; there is no undo. Accepts NULL. */
void http_cancel(struct http *h);

/* Bound the calls this thread makes from now on by `until` (now_mono()
 * seconds; 0: no bound of its own), e.g. a reader's read_timeout: past it a
 * call fails with -ETIMEDOUT. Returns the previous bound, to restore. */
double http_thread_deadline(double until);

/* The cause of one of the errnos above in words, for error messages and
 * logs ("too many redirects (more than 5)"); strerror for the others. */
const char *http_reason(int err);

#endif
