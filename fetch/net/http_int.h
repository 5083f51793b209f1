/* http_int.h - what the pieces of the HTTP client (fetch/net/http*.c) share:
 * the handle, a call's state, and the calls between them. Nothing outside
 * fetch/net/http*.c includes it: the API is fetch/net/http.h. */
#ifndef ECHOFS_HTTP_INT_H
#define ECHOFS_HTTP_INT_H

#include "common/attrs.h"
#include "fetch/net/http.h"

#include <curl/curl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

/* want.end or .total not known (or not asked for) */
#define NO_SIZE UINT64_MAX
/* A resume asks again for this many of the bytes already delivered (at most)
 * and compares them: a server answering from another offset under a right
 * Content-Range, or a 200 of other bytes, is caught before its bytes go on. */
#define RESUME_OVERLAP 4096
/* the start of an error body kept for auth.failed */
#define ERROR_BODY_MAX 4096

struct http {
	double retry_budget_s;
	double connect_timeout_s;
	double low_speed_time_s;
	double backoff_base_s;
	char *ca_file, *ca_path; /* NULL: the system's */
	/* header_file lines; immutable after http_open */
	struct curl_slist *extra;
	struct http_auth auth; /* all NULL without hooks; immutable */
	CURLSH *share;
	pthread_mutex_t share_lock[CURL_LOCK_DATA_LAST];
	pthread_mutex_t slot_lock; /* guards slots_free; leaf lock */
	pthread_cond_t slot_cond;
	unsigned slots_free;
	pthread_cond_t stop_cond; /* with slot_lock: backoff sleeps */
	double min_rate;	  /* body bytes/s, averaged per window */
	double rate_window_s;
	_Atomic int stopping; /* http_cancel was called */
	struct {
		_Atomic uint64_t requests, bytes, header_bytes, retries,
			resumes, stalls;
		_Atomic uint64_t errors_4xx, errors_5xx, errors_conn,
			errors_verify;
	} st;
};

/* Why an attempt was broken off as stalled (struct xfer.stall): a stall is
 * counted in stalls and logged in these words, not as a connection error. */
enum http_stall {
	HTTP_STALL_NONE = 0,
	HTTP_STALL_SILENT, /* no byte for low_speed_time_s (curl's limit) */
	HTTP_STALL_SLOW,   /* under min_rate over a rate window */
};

/* What a call still needs from the object; survives across attempts. */
struct want {
	uint64_t pos;	/* next object offset the sink gets */
	uint64_t end;	/* exclusive end; NO_SIZE: to the end of the object */
	uint64_t total; /* object size; NO_SIZE until known */
	char etag[HTTP_ETAG_MAX]; /* "" until known */
	int head;		  /* HEAD request: headers only */
	int strict;		  /* a range only: 200 or 416 is -ERANGE */
	long status;		  /* of the last final response */
	http_sink_fn sink;
	void *ud;
};

/* One response; reset for each request. */
struct resp {
	long status;
	uint64_t clen;
	int has_clen;
	uint64_t cr_first, cr_last, cr_total; /* cr_total NO_SIZE for "*" */
	int has_cr;
	char etag[HTTP_ETAG_MAX];
	int etag_bad;	  /* present but unusable (too long) */
	int encoded;	  /* a Content-Encoding other than identity */
	long retry_after; /* seconds; -1 when absent or not in seconds form */
	uint64_t skip;	  /* bytes of a 200 body before the overlap */
	size_t cmp;	  /* overlap bytes still to compare with xfer.tail */
	int accept;	  /* validated 200/206: body goes to the sink */
	int done;	  /* all wanted arrived; transfer stopped early */
	int err;	  /* verification or sink errno that stopped it */
};

struct xfer {
	struct http *h;
	struct want *w;
	struct resp r;
	CURL *c;
	char errbuf[CURL_ERROR_SIZE]; /* curl's own words on a failure */
	double started;		      /* monotonic start of the call */
	uint64_t pos0;		      /* w->pos when the call started */
	double win_start; /* current rate window: start and dlnow then */
	curl_off_t win_bytes;
	int stop_err;	 /* why on_progress stopped the transfer */
	int stop_retry;	 /* ... and whether another attempt may help */
	int stall;	 /* enum http_stall of the last attempt, until logged */
	double slow_bps; /* HTTP_STALL_SLOW: the window's rate */
	int sign;	 /* the URL came from auth.map_url: sign its requests */
	int auth_again;	 /* auth.failed asked for another attempt */
	int auth_retried; /* ... and it was granted (once per call) */
	size_t errlen;	  /* start of a non-2xx body, for auth.failed */
	char errbody[ERROR_BODY_MAX + 1];
	/* The last bytes delivered, ending at w->pos (tail_len of them), and
	 * how many of them the request in flight asks for again. */
	unsigned char tail[RESUME_OVERLAP];
	size_t tail_len;
	size_t overlap;
};

/* A body collected whole, at most cap bytes (http_grow_sink; buf has room
 * for a NUL after len). Zero it with cap set; the caller frees buf. */
struct growbuf {
	char *buf;
	size_t len, alloc, cap;
};

#define STAT_ADD(h, field, n) atomic_fetch_add(&(h)->st.field, (uint64_t)(n))

/* http.c: d, or the calling thread's own deadline when that is earlier. */
double http_deadline_cap(double d);
/* http.c: a new easy handle with what every request of h shares (protocols,
 * the path as written, TLS verification and CA, connect timeout, curl's
 * words into errbuf, which must outlive it) into *out. Returns 0, -ENOMEM,
 * or -EOPNOTSUPP when libcurl refuses an option (named in the call's
 * reason, http_note_why). The caller cleans it up. */
MUST_CHECK
int http_easy_base(struct http *h, char *errbuf, CURL **out);
/* http.c: http_easy_base plus a GET call's options: x's callbacks, low
 * speed, keepalive, HEAD when x->w->head. Returns as http_easy_base. */
int http_easy_new(struct http *h, struct xfer *x, CURL **out);

/* http_slots.c: 0 with a slot, -ECANCELED after http_cancel, -ETIMEDOUT at
 * until (monotonic). Give it back with http_slot_give. Takes slot_lock. */
MUST_CHECK
int http_slot_take(struct http *h, double until);
void http_slot_give(struct http *h);
/* http_slots.c: sleeps s seconds unless http_cancel comes first (then
 * -ECANCELED). */
MUST_CHECK
int http_sleep(struct http *h, double s);

/* http_xlate.c: curl's and the server's verdict as 0 or -errno, counted in
 * h's stats; *retry says whether another attempt may help. */
MUST_CHECK
int http_xlate(struct http *h, CURL *c, CURLcode cc, long status, int *retry);
/* http_xlate.c: an attempt http_on_progress or the slot wait stopped
 * (x->stop_err set) as 0 or -errno, a stall counted as such. */
MUST_CHECK
int http_xlate_stop(struct xfer *x, int *retry);
/* http_xlate.c: whether curl's verdict cc on c is its low-speed limit (no
 * byte for low_speed_time_s once the request went out), not a failure to
 * connect. */
int http_is_silent_stall(CURL *c, CURLcode cc);
/* http_xlate.c: records why (for http_reason) this thread's call failed with
 * err; returns err. http_why_clear forgets it when a call starts. */
int http_note_why(int err, const char *why);
void http_why_clear(void);
int http_is_tls_failure(CURLcode cc);
/* http_xlate.c: a TLS failure's reason, from curl's words in detail. */
void http_note_tls(CURLcode cc, int rc, const char *detail);
/* http_xlate.c: logs a failed attempt (rate-limited, URL redacted). */
void http_note_failure(const struct xfer *x, const char *url, CURLcode cc,
		       int rc);

/* http_headerfile.c: appends path's header lines to h->extra; err gets why
 * (never a header's value). */
int http_load_headers(struct http *h, const char *path, char *err,
		      size_t errlen);

/* http_resp.c: strips blanks (and CR, LF at the end) from *s, *len. */
void http_trim(const char **s, size_t *len);
/* http_resp.c: CURLOPT_HEADERFUNCTION and CURLOPT_WRITEFUNCTION; ud is the
 * struct xfer. */
size_t http_on_header(char *buf, size_t size, size_t n, void *ud);
size_t http_on_body(char *buf, size_t size, size_t n, void *ud);

/* http_resume.c: all headers of a final response are in: 0 and x->r.accept
 * when its body is what x->w wants, else -errno (counted). */
MUST_CHECK
int http_check_headers(struct xfer *x);
/* http_resume.c: remembers the last bytes delivered, for the next resume. */
void http_keep_tail(struct xfer *x, const char *buf, size_t len);
/* http_resume.c: sets the request's Range; range (48 bytes) gets "A-B" or
 * "" and must outlive the transfer. */
void http_set_range(struct xfer *x, char *range);
/* http_resume.c: a response that ended cleanly holds every byte wanted. */
int http_check_complete(struct http *h, struct want *w);

/* http_xfer.c: CURLOPT_XFERINFOFUNCTION; ud is the struct xfer. */
int http_on_progress(void *ud, curl_off_t dltotal, curl_off_t dlnow,
		     curl_off_t ultotal, curl_off_t ulnow);
/* http_xfer.c: runs the call w on url: attempts until success, a final
 * error or the deadline; 0 or -errno. */
MUST_CHECK
int http_run(struct http *h, const char *given, struct want *w);

/* http_get.c: a sink into a growing buffer of at most cap bytes (plus a
 * NUL's room): -EFBIG past cap. */
MUST_CHECK
int http_grow_sink(void *ud, const void *data, size_t len);

#endif
