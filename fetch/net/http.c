/* http.c - HTTP(S) transfers with libcurl: streaming, range reads, retries,
 * verification and redaction. */

/* DESIGN
 * Every public call runs on the caller's thread with its own easy handle.
 * Connections, DNS and TLS sessions live in one CURLSH, guarded by one mutex
 * per curl_lock_data (curl takes them itself through share_lock/unlock and
 * never holds two at once). A counting semaphore (slot_lock + slot_cond)
 * bounds transfers in flight to opts.connections; a slot is held only for
 * one curl_easy_perform, never across a backoff sleep. slot_lock is a leaf
 * lock: nothing else is taken while it is held.
 *
 * A call is a loop of attempts (retry loop in run()); an attempt follows up
 * to MAX_REDIRECTS redirects itself so that https->http can be refused and
 * header_file headers go only to the origin they were meant for. What the
 * call still wants (struct want: next offset, end, size, ETag) survives the
 * attempts, so a broken body is resumed with a Range request from the next
 * byte and If-Match on the ETag: a changed object answers 412 (-ESTALE)
 * instead of mixing versions. Bytes reach the sink exactly once, in order.
 *
 * Deadlines: a call ends by a total deadline fixed when it starts (connect,
 * first byte, the body at min_rate, the retry budget; see call_deadline),
 * whatever the resumes; the calling thread may shorten it
 * (http_thread_deadline). While curl runs, on_progress enforces it, the
 * min_rate floor over each rate window, and the stop flag of http_cancel, so
 * a cancelled transfer ends within about a second (curl calls it at least
 * once a second). Waits outside curl (slot, backoff) are timed waits on
 * slot_cond / stop_cond, woken by http_cancel. */

#include "fetch/net/http.h"

#include "common/deadline.h"
#include "common/file.h"
#include "common/log.h"
#include "common/util.h"

#include <curl/curl.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>

#ifndef ECHOFS_VERSION
#define ECHOFS_VERSION "dev"
#endif

#define HEADER_FILE_MAX (64 * 1024)
#define MAX_REDIRECTS 5
/* per call: a server cutting every body short stays bounded */
#define MAX_RESUMES 100
#define BACKOFF_CAP_S 5.0
#define RETRY_AFTER_MAX_S 3600
#define NO_SIZE UINT64_MAX
#define MIN_RATE_DEFAULT (64.0 * 1024)
#define RATE_WINDOW_DEFAULT_S 10.0
/* A resume asks again for this many of the bytes already delivered (at most)
 * and compares them: a server answering from another offset under a right
 * Content-Range, or a 200 of other bytes, is caught before its bytes go on. */
#define RESUME_OVERLAP 4096

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
		_Atomic uint64_t requests, bytes, retries, resumes;
		_Atomic uint64_t errors_4xx, errors_5xx, errors_conn,
			errors_verify;
	} st;
};

/* What a call still needs from the object; survives across attempts. */
struct want {
	uint64_t pos;	/* next object offset the sink gets */
	uint64_t end;	/* exclusive end; NO_SIZE: to the end of the object */
	uint64_t total; /* object size; NO_SIZE until known */
	char etag[HTTP_ETAG_MAX]; /* "" until known */
	int head;		  /* HEAD request: headers only */
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

#define AUTH_HEADERS_MAX 8192
#define ERROR_BODY_MAX 4096

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
	int stop_err;	/* why on_progress stopped the transfer */
	int stop_retry; /* ... and whether another attempt may help */
	int sign;	/* the URL came from auth.map_url: sign its requests */
	int auth_again; /* auth.failed asked for another attempt */
	int auth_retried; /* ... and it was granted (once per call) */
	size_t errlen;	  /* start of a non-2xx body, for auth.failed */
	char errbody[ERROR_BODY_MAX + 1];
	/* The last bytes delivered, ending at w->pos (tail_len of them), and
	 * how many of them the request in flight asks for again. */
	unsigned char tail[RESUME_OVERLAP];
	size_t tail_len;
	size_t overlap;
};

/* Why this thread's last call failed, when an errno alone would not say,
 * for http_reason: curl's words on a TLS failure ("SSL certificate problem:
 * self-signed certificate") tell a user which certificate check failed; a
 * verification failure says which check. Cleared when a call starts. */
static _Thread_local struct {
	int err;
	char text[CURL_ERROR_SIZE + 64];
} last_why;

#define RESUME_LIE                                                             \
	"resumed body differs from the bytes already received (the server "    \
	"answered the Range request from another offset)"

/* Records why for http_reason; returns err. */
static int note_why(int err, const char *why)
{
	last_why.err = err;
	snprintf(last_why.text, sizeof(last_why.text), "%s", why);
	return err;
}

/* A caller's own bound on the calls its thread makes (0: none). */
static _Thread_local double thread_deadline;

#define STAT_ADD(h, field, n) atomic_fetch_add(&(h)->st.field, (uint64_t)(n))

int http_global_init(void)
{
	return curl_global_init(CURL_GLOBAL_DEFAULT) == CURLE_OK ? 0 : -EIO;
}

/* ---- errno translation ------------------------------------------------ */

/* The one place where curl's and the server's verdicts become errno; also
 * counts the failure and says whether another attempt may help. */
static int xlate(struct http *h, CURL *c, CURLcode cc, long status, int *retry)
{
	long oserr = 0;

	*retry = 0;
	if (cc == CURLE_OK) {
		if (status == 200 || status == 206)
			return 0;
		if (status >= 400 && status < 500)
			STAT_ADD(h, errors_4xx, 1);
		if (status >= 500)
			STAT_ADD(h, errors_5xx, 1);
		if (status == 404 || status == 410)
			return -ENOENT;
		if (status == 401 || status == 403)
			return -EACCES;
		if (status == 412)
			return -ESTALE;
		*retry = status == 408 || status == 429 ||
			 (status >= 500 && status <= 599);
		return -EIO;
	}
	switch (cc) {
	case CURLE_WRITE_ERROR: /* our callbacks stopped it; see resp.err */
		return -EIO;
	case CURLE_OUT_OF_MEMORY:
		return -ENOMEM;
	case CURLE_URL_MALFORMAT:
		return -EINVAL;
	case CURLE_UNSUPPORTED_PROTOCOL:
		return -EPROTO;
	default:
		break;
	}
	STAT_ADD(h, errors_conn, 1);
	switch (cc) {
	case CURLE_COULDNT_RESOLVE_HOST:
	case CURLE_COULDNT_RESOLVE_PROXY:
		*retry = 1;
		return -EHOSTUNREACH;
	case CURLE_COULDNT_CONNECT:
		*retry = 1;
		curl_easy_getinfo(c, CURLINFO_OS_ERRNO, &oserr);
		return oserr == EHOSTUNREACH || oserr == ENETUNREACH
			       ? -EHOSTUNREACH
			       : -ECONNREFUSED;
	case CURLE_OPERATION_TIMEDOUT:
		*retry = 1;
		return -ETIMEDOUT;
	case CURLE_PEER_FAILED_VERIFICATION:
	case CURLE_SSL_CACERT_BADFILE:
	case CURLE_SSL_CERTPROBLEM:
	case CURLE_SSL_PINNEDPUBKEYNOTMATCH:
		return -EKEYREJECTED; /* an untrusted peer stays untrusted */
	case CURLE_PARTIAL_FILE:
	case CURLE_RECV_ERROR:
	case CURLE_SEND_ERROR:
	case CURLE_GOT_NOTHING:
	case CURLE_SSL_CONNECT_ERROR:
	case CURLE_HTTP2:
	case CURLE_HTTP2_STREAM:
		*retry = 1;
		return -EIO;
	default:
		return -EIO;
	}
}

/* ---- header_file -------------------------------------------------------- */

static int is_tchar(unsigned char ch)
{
	return (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') ||
	       (ch >= '0' && ch <= '9') ||
	       (ch && strchr("!#$%&'*+-.^_`|~", ch));
}

/* Why line (trimmed, non-empty) is not a usable header, or NULL. The reason
 * never quotes the line: the value may be a secret. */
static const char *header_line_problem(const char *s, size_t len, size_t *colon)
{
	static const char *const reserved[] = {
		"host",	      "range",		"if-match",
		"if-range",   "content-length", "transfer-encoding",
		"connection", "accept-encoding"};
	const char *c = memchr(s, ':', len);
	size_t i, v;

	for (i = 0; i < len; i++) {
		unsigned char ch = (unsigned char)s[i];
		if ((ch < 0x20 && ch != '\t') || ch == 0x7f)
			return "control character";
	}
	if (!c)
		return "no colon";
	*colon = (size_t)(c - s);
	if (*colon == 0)
		return "empty header name";
	for (i = 0; i < *colon; i++)
		if (!is_tchar((unsigned char)s[i]))
			return "bad character in header name";
	for (i = 0; i < ARRAY_SIZE(reserved); i++)
		if (strlen(reserved[i]) == *colon &&
		    strncasecmp(s, reserved[i], *colon) == 0)
			return "header name reserved for echofs";
	for (v = *colon + 1; v < len && (s[v] == ' ' || s[v] == '\t'); v++)
		;
	if (v == len)
		return "empty value";
	return NULL;
}

static void trim(const char **s, size_t *len)
{
	while (*len && (**s == ' ' || **s == '\t')) {
		(*s)++;
		(*len)--;
	}
	while (*len && strchr(" \t\r\n", (*s)[*len - 1]))
		(*len)--;
}

static int load_headers(struct http *h, const char *path, char *err,
			size_t errlen)
{
	char *text = NULL, *line;
	size_t len = 0, lineno = 0;
	int rc = file_read_all(path, HEADER_FILE_MAX, &text, &len);

	if (rc) {
		snprintf(err, errlen, "header_file %s: %s", path,
			 rc == -EFBIG ? "larger than 64 KiB" : strerror(-rc));
		return rc;
	}
	for (const char *p = text; p < text + len; lineno++) {
		const char *nl = memchr(p, '\n', (size_t)(text + len - p));
		const char *s = p, *why;
		size_t n = (size_t)((nl ? nl : text + len) - p), colon = 0;
		struct curl_slist *next;

		p += n + 1;
		trim(&s, &n);
		if (n == 0 || s[0] == '#')
			continue;
		why = header_line_problem(s, n, &colon);
		if (why) {
			snprintf(err, errlen, "header_file %s line %zu: %s",
				 path, lineno + 1, why);
			free(text);
			return -EINVAL;
		}
		line = xstrndup(s, n);
		next = curl_slist_append(h->extra, line);
		free(line);
		if (!next) {
			free(text);
			return -ENOMEM;
		}
		h->extra = next;
	}
	free(text);
	return 0;
}

/* ---- handle lifetime ---------------------------------------------------- */

static void share_lock(CURL *c, curl_lock_data d, curl_lock_access a, void *ud)
{
	struct http *h = ud;
	(void)c;
	(void)a;
	pthread_mutex_lock(&h->share_lock[d]);
}

static void share_unlock(CURL *c, curl_lock_data d, void *ud)
{
	struct http *h = ud;
	(void)c;
	pthread_mutex_unlock(&h->share_lock[d]);
}

static int make_share(struct http *h)
{
	h->share = curl_share_init();
	if (!h->share)
		return -ENOMEM;
	if (curl_share_setopt(h->share, CURLSHOPT_LOCKFUNC, share_lock) ||
	    curl_share_setopt(h->share, CURLSHOPT_UNLOCKFUNC, share_unlock) ||
	    curl_share_setopt(h->share, CURLSHOPT_USERDATA, h) ||
	    curl_share_setopt(h->share, CURLSHOPT_SHARE,
			      CURL_LOCK_DATA_CONNECT) ||
	    curl_share_setopt(h->share, CURLSHOPT_SHARE, CURL_LOCK_DATA_DNS) ||
	    curl_share_setopt(h->share, CURLSHOPT_SHARE,
			      CURL_LOCK_DATA_SSL_SESSION))
		return -EIO;
	return 0;
}

static double or_default(double v, double def)
{
	return v > 0 ? v : def;
}

const char *http_version(void)
{
	return curl_version();
}

/* Timed waits (slots, backoff) are on the monotonic clock: a clock step
 * must neither cut them short nor stretch them. */
static int monotonic_conds(struct http *h)
{
	int r = cond_init_monotonic(&h->slot_cond);

	if (r)
		return r;
	r = cond_init_monotonic(&h->stop_cond);
	if (r)
		pthread_cond_destroy(&h->slot_cond);
	return r;
}

int http_open(const struct http_opts *o, struct http **out, char *err,
	      size_t errlen)
{
	struct http *h = xcalloc(1, sizeof(*h));
	int r;

	*out = NULL;
	if (errlen)
		err[0] = '\0';
	for (size_t i = 0; i < ARRAY_SIZE(h->share_lock); i++)
		pthread_mutex_init(&h->share_lock[i], NULL);
	pthread_mutex_init(&h->slot_lock, NULL);
	r = monotonic_conds(h);
	if (r) {
		snprintf(err, errlen,
			 "cannot set up a monotonic condition "
			 "variable: %s",
			 strerror(-r));
		for (size_t i = 0; i < ARRAY_SIZE(h->share_lock); i++)
			pthread_mutex_destroy(&h->share_lock[i]);
		pthread_mutex_destroy(&h->slot_lock);
		free(h);
		return r;
	}
	h->min_rate = or_default(o->min_rate, MIN_RATE_DEFAULT);
	h->rate_window_s = or_default(o->rate_window_s, RATE_WINDOW_DEFAULT_S);
	h->slots_free = o->connections ? o->connections : 8;
	h->retry_budget_s = or_default(o->retry_budget_s, 30);
	h->connect_timeout_s = or_default(o->connect_timeout_s, 5);
	h->low_speed_time_s = or_default(o->low_speed_time_s, 10);
	h->backoff_base_s = or_default(o->backoff_base_s, 0.2);
	h->ca_file = o->ca_file ? xstrdup(o->ca_file) : NULL;
	h->ca_path = o->ca_path ? xstrdup(o->ca_path) : NULL;
	if (o->auth)
		h->auth = *o->auth;
	r = make_share(h);
	if (r)
		snprintf(err, errlen, "cannot set up curl connection sharing");
	else if (o->header_file)
		r = load_headers(h, o->header_file, err, errlen);
	if (r) {
		if (errlen && !err[0])
			snprintf(err, errlen, "%s", strerror(-r));
		http_free(h);
		return r;
	}
	*out = h;
	return 0;
}

void http_free(struct http *h)
{
	if (!h)
		return;
	if (h->share)
		curl_share_cleanup(h->share);
	curl_slist_free_all(h->extra);
	free(h->ca_file);
	free(h->ca_path);
	for (size_t i = 0; i < ARRAY_SIZE(h->share_lock); i++)
		pthread_mutex_destroy(&h->share_lock[i]);
	pthread_mutex_destroy(&h->slot_lock);
	pthread_cond_destroy(&h->slot_cond);
	pthread_cond_destroy(&h->stop_cond);
	free(h);
}

void http_cancel(struct http *h)
{
	if (!h)
		return;
	pthread_mutex_lock(&h->slot_lock);
	h->stopping = 1;
	pthread_cond_broadcast(&h->slot_cond);
	pthread_cond_broadcast(&h->stop_cond);
	pthread_mutex_unlock(&h->slot_lock);
}

double http_thread_deadline(double until)
{
	double old = thread_deadline;
	thread_deadline = until;
	return old;
}

void http_get_stats(struct http *h, struct http_stats *out)
{
	out->requests = atomic_load(&h->st.requests);
	out->bytes = atomic_load(&h->st.bytes);
	out->retries = atomic_load(&h->st.retries);
	out->resumes = atomic_load(&h->st.resumes);
	out->errors_4xx = atomic_load(&h->st.errors_4xx);
	out->errors_5xx = atomic_load(&h->st.errors_5xx);
	out->errors_conn = atomic_load(&h->st.errors_conn);
	out->errors_verify = atomic_load(&h->st.errors_verify);
}

/* ---- transfer slots ----------------------------------------------------- */

static void mono_abs(double until, struct timespec *ts)
{
	double s = until - now_mono();
	clock_gettime(CLOCK_MONOTONIC, ts);
	if (s < 0)
		s = 0;
	if (s > 86400)
		s = 86400;
	ts->tv_sec += (time_t)s;
	ts->tv_nsec += (long)((s - (double)(time_t)s) * 1e9);
	if (ts->tv_nsec >= 1000000000L) {
		ts->tv_sec++;
		ts->tv_nsec -= 1000000000L;
	}
}

/* Returns 0 with a slot, -ECANCELED after http_cancel, -ETIMEDOUT at until. */
static int slot_take(struct http *h, double until)
{
	struct timespec ts;
	int r = 0;

	mono_abs(until, &ts);
	pthread_mutex_lock(&h->slot_lock);
	while (h->slots_free == 0 && !h->stopping && r == 0)
		if (pthread_cond_timedwait(&h->slot_cond, &h->slot_lock, &ts) ==
		    ETIMEDOUT)
			r = -ETIMEDOUT;
	if (h->stopping)
		r = -ECANCELED;
	else if (h->slots_free > 0)
		r = 0;
	if (r == 0)
		h->slots_free--;
	pthread_mutex_unlock(&h->slot_lock);
	return r;
}

static void slot_give(struct http *h)
{
	pthread_mutex_lock(&h->slot_lock);
	h->slots_free++;
	pthread_cond_signal(&h->slot_cond);
	pthread_mutex_unlock(&h->slot_lock);
}

/* ---- response headers --------------------------------------------------- */

/* Content-Range "bytes A-B/T", T may be a star */
static int parse_content_range(const char *v, size_t n, struct resp *r)
{
	const char *dash, *slash, *end = v + n;

	if (n < 6 || strncasecmp(v, "bytes ", 6) != 0)
		return -EPROTO;
	v += 6;
	dash = memchr(v, '-', (size_t)(end - v));
	slash = dash ? memchr(dash, '/', (size_t)(end - dash)) : NULL;
	if (!slash || parse_u64_n(v, (size_t)(dash - v), &r->cr_first) ||
	    parse_u64_n(dash + 1, (size_t)(slash - dash - 1), &r->cr_last))
		return -EPROTO;
	if (end - slash == 2 && slash[1] == '*')
		r->cr_total = NO_SIZE;
	else if (parse_u64_n(slash + 1, (size_t)(end - slash - 1),
			     &r->cr_total))
		return -EPROTO;
	if (r->cr_last < r->cr_first ||
	    (r->cr_total != NO_SIZE && r->cr_last >= r->cr_total))
		return -EPROTO;
	r->has_cr = 1;
	return 0;
}

static void parse_header(struct resp *r, const char *name, size_t nlen,
			 const char *v, size_t vlen)
{
	uint64_t u;

#define IS(s) (nlen == sizeof(s) - 1 && strncasecmp(name, s, nlen) == 0)
	if (IS("content-length")) {
		r->has_clen = parse_u64_n(v, vlen, &r->clen) == 0;
	} else if (IS("content-range")) {
		if (parse_content_range(v, vlen, r))
			r->has_cr = -1; /* present but garbage */
	} else if (IS("etag")) {
		r->etag_bad = vlen >= sizeof(r->etag);
		if (!r->etag_bad) {
			memcpy(r->etag, v, vlen);
			r->etag[vlen] = '\0';
		}
	} else if (IS("content-encoding")) {
		/* We ask for identity: anything else is not the object's
		 * bytes (curl decodes nothing unless told to). */
		r->encoded = !(vlen == 8 && strncasecmp(v, "identity", 8) == 0);
	} else if (IS("retry-after")) {
		if (parse_u64_n(v, vlen, &u) == 0)
			r->retry_after = u > RETRY_AFTER_MAX_S
						 ? RETRY_AFTER_MAX_S
						 : (long)u;
	}
#undef IS
}

static int check_etag(struct want *w, const struct resp *r)
{
	if (!w->etag[0]) {
		if (r->etag[0])
			memcpy(w->etag, r->etag, sizeof(w->etag));
		return 0;
	}
	if ((r->etag[0] || r->etag_bad) && strcmp(w->etag, r->etag) != 0)
		return -ESTALE;
	return 0;
}

/* A 206: it must start where the request did (overlap bytes before w->pos)
 * and end where the call wants. */
static int check_partial(struct want *w, struct resp *r, size_t overlap)
{
	uint64_t total = w->total, last;

	if (r->has_cr != 1)
		return -EPROTO;
	if (r->cr_first != w->pos - overlap)
		return note_why(-EPROTO, "a resumed body starts at another "
					 "offset than asked (Content-Range)");
	if (total != NO_SIZE && r->cr_total != NO_SIZE && r->cr_total < total)
		return note_why(-EPROTO, "body shorter than Content-Length (a "
					 "resume found the object shorter)");
	if (total != NO_SIZE && r->cr_total != NO_SIZE && r->cr_total != total)
		return note_why(-EPROTO, "object larger than announced "
					 "(Content-Range total)");
	if (total == NO_SIZE)
		total = r->cr_total;
	last = w->end != NO_SIZE  ? w->end - 1
	       : total != NO_SIZE ? total - 1
				  : r->cr_last;
	if (r->cr_last != last)
		return -EPROTO;
	if (r->has_clen && r->clen != r->cr_last - r->cr_first + 1)
		return -EPROTO;
	w->total = total;
	return 0;
}

/* A 200 to a Range request: the server ignored the range; skip to pos
 * (the overlap before it is compared on the way). */
static int check_full(struct want *w, struct resp *r, size_t overlap)
{
	if (r->has_clen) {
		if (w->total != NO_SIZE && r->clen != w->total)
			return -EPROTO;
		w->total = r->clen;
	}
	if (w->end != NO_SIZE && w->total != NO_SIZE && w->end > w->total)
		return -EPROTO;
	r->skip = w->pos - overlap;
	return 0;
}

/* A 200/206 whose body is encoded (gzip...): never the object's bytes. */
static int refuse_encoding(struct xfer *x)
{
	const char *url = NULL;
	char red[512];

	STAT_ADD(x->h, errors_verify, 1);
	curl_easy_getinfo(x->c, CURLINFO_EFFECTIVE_URL, &url);
	log_warn("http: %s: refusing a Content-Encoding other than identity",
		 http_redact(url ? url : "?", red, sizeof(red)));
	return -EIO;
}

/* All headers of a final response are in: decide whether its body is ours. */
static int check_headers(struct xfer *x)
{
	struct resp *r = &x->r;
	struct want *w = x->w;
	int rc;

	if (r->status != 200 && r->status != 206)
		return 0; /* xlate() judges the status after the transfer */
	if (r->encoded)
		return refuse_encoding(x);
	rc = check_etag(w, r);
	if (rc == 0 && w->head) {
		if (r->has_clen)
			w->total = r->clen;
		return 0;
	}
	if (rc == 0)
		rc = r->status == 206 ? check_partial(w, r, x->overlap)
				      : check_full(w, r, x->overlap);
	if (rc)
		STAT_ADD(x->h, errors_verify, 1);
	else
		r->accept = 1;
	r->cmp = x->overlap;
	return rc;
}

static size_t on_header(char *buf, size_t size, size_t n, void *ud)
{
	struct xfer *x = ud;
	size_t len = size * n, nlen;
	const char *v, *colon, *name;

	if (len >= 5 && strncmp(buf, "HTTP/", 5) == 0) {
		/* a new response (after 1xx): forget the previous one */
		const char *sp = memchr(buf, ' ', len);
		uint64_t code = 0;
		memset(&x->r, 0, sizeof(x->r));
		x->r.retry_after = -1;
		if (sp && buf + len - sp > 3)
			parse_u64_n(sp + 1, 3, &code);
		x->r.status = (long)code;
		return len;
	}
	v = buf;
	trim(&v, &len);
	if (len == 0) {
		if (x->r.status >= 200)
			x->r.err = check_headers(x);
		return x->r.err ? 0 : size * n;
	}
	colon = memchr(v, ':', len);
	if (!colon)
		return size * n;
	name = v;
	nlen = (size_t)(colon - v);
	len -= nlen + 1;
	v = colon + 1;
	trim(&v, &len);
	parse_header(&x->r, name, nlen, v, len);
	if (x->sign && x->h->auth.header)
		x->h->auth.header(x->h->auth.ud, name, nlen, v, len);
	return size * n;
}

/* ---- response body ------------------------------------------------------ */

static void keep_error_body(struct xfer *x, const char *buf, size_t len)
{
	size_t room = ERROR_BODY_MAX - x->errlen;

	if (!x->sign || x->r.status < 300)
		return;
	if (len > room)
		len = room;
	memcpy(x->errbody + x->errlen, buf, len);
	x->errlen += len;
	x->errbody[x->errlen] = '\0';
}

/* Remember the last RESUME_OVERLAP bytes delivered, for the next resume. */
static void keep_tail(struct xfer *x, const char *buf, size_t len)
{
	size_t keep;

	if (len >= RESUME_OVERLAP) {
		memcpy(x->tail, buf + len - RESUME_OVERLAP, RESUME_OVERLAP);
		x->tail_len = RESUME_OVERLAP;
		return;
	}
	keep = x->tail_len + len > RESUME_OVERLAP ? RESUME_OVERLAP - len
						  : x->tail_len;
	memmove(x->tail, x->tail + x->tail_len - keep, keep);
	memcpy(x->tail + keep, buf, len);
	x->tail_len = keep + len;
}

static size_t on_body(char *buf, size_t size, size_t n, void *ud)
{
	struct xfer *x = ud;
	struct want *w = x->w;
	struct resp *r = &x->r;
	size_t len = size * n, left = len;
	int rc;

	STAT_ADD(x->h, bytes, len);
	if (!r->accept) {
		keep_error_body(x, buf, len);
		return len; /* error or redirect body: not the object */
	}
	if (r->skip) {
		size_t k = r->skip < left ? (size_t)r->skip : left;
		buf += k;
		left -= k;
		r->skip -= k;
	}
	if (r->cmp && left) {
		size_t k = r->cmp < left ? r->cmp : left;
		if (memcmp(buf, x->tail + x->tail_len - r->cmp, k) != 0) {
			STAT_ADD(x->h, errors_verify, 1);
			r->err = note_why(-EPROTO, RESUME_LIE);
			return 0;
		}
		buf += k;
		left -= k;
		r->cmp -= k;
	}
	if (r->status == 200 && w->end != NO_SIZE && left >= w->end - w->pos) {
		r->done = 1;
		left = (size_t)(w->end - w->pos);
	}
	if (w->total != NO_SIZE && left > w->total - w->pos) {
		STAT_ADD(x->h, errors_verify, 1);
		r->err = -EPROTO; /* longer than announced */
		return 0;
	}
	if (left) {
		rc = w->sink(w->ud, buf, left);
		if (rc) {
			r->err = rc < 0 ? rc : -ECANCELED;
			r->done = 0;
			return 0;
		}
		w->pos += left;
		keep_tail(x, buf, left);
	}
	return r->done ? 0 : len; /* a 200 past our range: stop it early */
}

/* A response that ended cleanly still has to hold every byte wanted. */
static int check_complete(struct http *h, struct want *w)
{
	if (w->head)
		return 0;
	if (w->end != NO_SIZE ? w->pos != w->end
			      : w->total != NO_SIZE && w->pos != w->total) {
		STAT_ADD(h, errors_verify, 1);
		return -EPROTO;
	}
	if (w->total == NO_SIZE && w->end == NO_SIZE)
		w->total = w->pos;
	return 0;
}

/* ---- one attempt -------------------------------------------------------- */

static size_t origin_len(const char *url)
{
	const char *p = strstr(url, "://");
	if (!p)
		return 0;
	p += 3;
	return (size_t)(p - url) + strcspn(p, "/?#");
}

static int same_origin(const char *a, const char *b)
{
	size_t n = origin_len(a);
	return n && n == origin_len(b) && strncasecmp(a, b, n) == 0;
}

static struct curl_slist *request_headers(struct http *h, const struct want *w,
					  int trusted)
{
	struct curl_slist *l, *next;
	char line[HTTP_ETAG_MAX + 16];

	/* Bytes exactly as stored: the index's sizes and checksums are of
	 * those. */
	l = curl_slist_append(NULL, "Accept-Encoding: identity");
	if (!l)
		return NULL;
	for (const struct curl_slist *e = h->extra; trusted && e; e = e->next) {
		next = curl_slist_append(l, e->data);
		if (!next)
			goto oom;
		l = next;
	}
	/* If-Match needs a strong validator; a weak one is still compared
	 * against the response's ETag in check_etag(). */
	if (!w->head && w->etag[0] == '"') {
		snprintf(line, sizeof(line), "If-Match: %s", w->etag);
		next = curl_slist_append(l, line);
		if (!next)
			goto oom;
		l = next;
	}
	return l;
oom:
	curl_slist_free_all(l);
	return NULL;
}

/* Sets the request's Range; range (48 bytes) gets "A-B" or "". A resume
 * starts x->overlap bytes early: those are compared, not delivered. */
static void set_range(struct xfer *x, char *range)
{
	const struct want *w = x->w;
	uint64_t first;

	x->overlap = w->head ? 0 : x->tail_len;
	first = w->pos - x->overlap;
	range[0] = '\0';
	/* A resume from 0 still asks for a range: the Content-Range of the
	 * answer says whether the object is as long as announced. */
	if (w->head || (first == 0 && w->end == NO_SIZE && !x->overlap)) {
		curl_easy_setopt(x->c, CURLOPT_RANGE, NULL);
		return;
	}
	if (w->end == NO_SIZE)
		snprintf(range, 48, "%llu-", (unsigned long long)first);
	else
		snprintf(range, 48, "%llu-%llu", (unsigned long long)first,
			 (unsigned long long)(w->end - 1));
	curl_easy_setopt(x->c, CURLOPT_RANGE, range);
}

/* The call's total deadline: connect, first byte (one rate window), the
 * retry budget, and the body at min_rate. The body's size counts once it is
 * known (the end asked for, or the object's size); until then what arrived so
 * far does, so the rate window keeps an unknown-size body moving. */
static double call_deadline(const struct xfer *x)
{
	const struct http *h = x->h;
	const struct want *w = x->w;
	uint64_t last = w->end != NO_SIZE ? w->end : w->total;
	uint64_t body = last != NO_SIZE && last > x->pos0 ? last - x->pos0
							  : w->pos - x->pos0;
	double d = x->started + h->connect_timeout_s + h->rate_window_s +
		   h->retry_budget_s + (double)body / h->min_rate;

	if (thread_deadline > 0 && thread_deadline < d)
		d = thread_deadline;
	return d;
}

/* curl calls this at least once a second, data or not: the one place that
 * stops a transfer for shutdown, its deadline, or a body below min_rate. */
static int on_progress(void *ud, curl_off_t dltotal, curl_off_t dlnow,
		       curl_off_t ultotal, curl_off_t ulnow)
{
	struct xfer *x = ud;
	double now = now_mono(), el = now - x->win_start;

	(void)dltotal;
	(void)ultotal;
	(void)ulnow;
	x->stop_retry = 0;
	if (x->h->stopping) {
		x->stop_err = -ECANCELED;
		return 1;
	}
	if (now >= call_deadline(x)) {
		x->stop_err = -ETIMEDOUT;
		return 1;
	}
	if (el < x->h->rate_window_s)
		return 0;
	if ((double)(dlnow - x->win_bytes) < x->h->min_rate * el) {
		STAT_ADD(x->h, errors_conn, 1);
		x->stop_err = -ETIMEDOUT;
		x->stop_retry = 1; /* resumed from the next byte */
		return 1;
	}
	x->win_start = now;
	x->win_bytes = dlnow;
	return 0;
}

/* The auth hook's lines for this request, appended to *l. */
static int add_auth_headers(struct xfer *x, const char *url, const char *range,
			    struct curl_slist **l)
{
	char rv[64], *buf = xmalloc(AUTH_HEADERS_MAX);
	struct http_req_info ri = {.method = x->w->head ? "HEAD" : "GET",
				   .url = url};
	int rc;

	if (range[0]) {
		snprintf(rv, sizeof(rv), "bytes=%s", range);
		ri.range = rv;
	}
	buf[0] = '\0';
	rc = x->h->auth.sign(x->h->auth.ud, &ri, buf, AUTH_HEADERS_MAX);
	for (char *p = buf, *nl; rc == 0 && *p; p = nl + 1) {
		struct curl_slist *next;
		nl = strchr(p, '\n');
		if (!nl)
			break;
		*nl = '\0';
		next = curl_slist_append(*l, p);
		if (!next)
			rc = -ENOMEM;
		else
			*l = next;
	}
	explicit_bzero(buf, AUTH_HEADERS_MAX); /* a session token */
	free(buf);
	return rc;
}

static CURLcode perform(struct xfer *x, const char *url, int trusted)
{
	struct curl_slist *hdrs = request_headers(x->h, x->w, trusted);
	char range[48];
	CURLcode cc;

	if (!hdrs)
		return CURLE_OUT_OF_MEMORY;
	memset(&x->r, 0, sizeof(x->r));
	x->r.retry_after = -1;
	x->errlen = 0;
	curl_easy_setopt(x->c, CURLOPT_URL, url);
	set_range(x, range);
	if (trusted && x->sign && x->h->auth.sign) {
		int rc = add_auth_headers(x, url, range, &hdrs);
		if (rc) {
			curl_slist_free_all(hdrs);
			x->r.err = rc;
			return CURLE_ABORTED_BY_CALLBACK;
		}
	}
	curl_easy_setopt(x->c, CURLOPT_HTTPHEADER, hdrs);
	x->stop_err = slot_take(x->h, call_deadline(x));
	x->stop_retry = 0;
	if (x->stop_err) {
		curl_slist_free_all(hdrs);
		return CURLE_ABORTED_BY_CALLBACK;
	}
	STAT_ADD(x->h, requests, 1);
	x->win_start = now_mono();
	x->win_bytes = 0;
	cc = curl_easy_perform(x->c);
	slot_give(x->h);
	curl_easy_setopt(x->c, CURLOPT_HTTPHEADER, NULL);
	curl_slist_free_all(hdrs);
	return cc;
}

static int is_redirect(long status)
{
	return status == 301 || status == 302 || status == 303 ||
	       status == 307 || status == 308;
}

/* Where a redirect from cur goes (caller frees), or an errno: a downgrade
 * from https to http, or a scheme other than http(s), is refused. */
static int redirect_target(CURL *c, const char *cur, char **next)
{
	char *loc = NULL;
	int from_https = strncasecmp(cur, "https://", 8) == 0;

	if (curl_easy_getinfo(c, CURLINFO_REDIRECT_URL, &loc) != CURLE_OK ||
	    !loc)
		return -EIO; /* a 3xx without a usable Location */
	if (strncasecmp(loc, "https://", 8) != 0 &&
	    (from_https || strncasecmp(loc, "http://", 7) != 0))
		return -EPROTONOSUPPORT;
	*next = xstrdup(loc);
	return 0;
}

/* Every failure xlate() or the header checks count is logged too (rate-
 * limited per kind), with the URL redacted. */
static int is_tls_failure(CURLcode cc)
{
	return cc == CURLE_PEER_FAILED_VERIFICATION ||
	       cc == CURLE_SSL_CACERT_BADFILE || cc == CURLE_SSL_CERTPROBLEM ||
	       cc == CURLE_SSL_PINNEDPUBKEYNOTMATCH ||
	       cc == CURLE_SSL_CONNECT_ERROR ||
	       cc == CURLE_SSL_ENGINE_NOTFOUND || cc == CURLE_SSL_CIPHER;
}

/* What failed, in words a user acts on, then curl's own. */
static void note_tls(CURLcode cc, int rc, const char *detail)
{
	const char *what = "TLS handshake failed (protocol or cipher)";

	if (cc == CURLE_SSL_CACERT_BADFILE)
		what = "cannot read the CA certificates (ca_file, ca_path)";
	else if (strstr(detail, "expired"))
		what = "TLS certificate expired";
	else if (strstr(detail, "subject name") || strstr(detail, "hostname") ||
		 strstr(detail, "does not match"))
		what = "TLS certificate name mismatch";
	else if (cc == CURLE_PEER_FAILED_VERIFICATION ||
		 cc == CURLE_SSL_CERTPROBLEM)
		what = "TLS certificate not trusted (a private CA? see "
		       "ca_file)";
	else if (cc == CURLE_SSL_PINNEDPUBKEYNOTMATCH)
		what = "TLS public key does not match the pinned one";
	last_why.err = rc;
	snprintf(last_why.text, sizeof(last_why.text), "%s: %s", what,
		 detail[0] ? detail : curl_easy_strerror(cc));
}

static void note_failure(const struct xfer *x, const char *url, CURLcode cc,
			 int rc)
{
	long st = x->r.status;
	char red[256];

	if (rc == 0)
		return;
	if (is_tls_failure(cc))
		note_tls(cc, rc, x->errbuf);
	http_redact(url, red, sizeof(red));
	if (x->r.err && (rc == -EPROTO || rc == -ESTALE))
		log_counted("verify", "http: %s: %s", red, http_reason(rc));
	else if (cc == CURLE_OK && st >= 400)
		log_counted(st < 500 ? "http_4xx" : "http_5xx",
			    "http: %s: HTTP %ld", red, st);
	else if (cc != CURLE_OK && cc != CURLE_WRITE_ERROR &&
		 cc != CURLE_OUT_OF_MEMORY && cc != CURLE_URL_MALFORMAT &&
		 cc != CURLE_UNSUPPORTED_PROTOCOL)
		log_counted("connection", "http: %s: %s", red,
			    curl_easy_strerror(cc));
}

/* One request plus the redirects it leads to. */
static int attempt(struct xfer *x, const char *url, int *retry, long *ra)
{
	char *cur = xstrdup(url), *next = NULL;
	int rc = -ELOOP;
	CURLcode cc;

	*retry = 0;
	*ra = -1;
	for (int hop = 0; hop <= MAX_REDIRECTS; hop++) {
		cc = perform(x, cur, same_origin(cur, url));
		*ra = x->r.retry_after;
		x->w->status = x->r.status;
		if (cc == CURLE_ABORTED_BY_CALLBACK && x->stop_err) {
			rc = x->stop_err; /* on_progress or slot_take */
			*retry = x->stop_retry;
			break;
		}
		x->auth_again = 0;
		if (x->sign && x->r.status >= 300 && x->h->auth.failed)
			x->auth_again = x->h->auth.failed(
				x->h->auth.ud, cur, x->r.status, x->errbody,
				x->errlen);
		if (x->r.done) {
			rc = 0;
			break;
		}
		if (x->r.err) {
			rc = x->r.err;
			break;
		}
		if (cc == CURLE_OK && is_redirect(x->r.status)) {
			rc = redirect_target(x->c, cur, &next);
			if (rc)
				break;
			free(cur);
			cur = next;
			rc = -ELOOP;
			continue;
		}
		rc = xlate(x->h, x->c, cc, x->r.status, retry);
		if (rc == 0)
			rc = check_complete(x->h, x->w);
		if (rc && x->auth_again && !x->auth_retried) {
			x->auth_retried = 1;
			*retry = 1;
		}
		break;
	}
	note_failure(x, cur, cc, rc);
	free(cur);
	return rc;
}

/* ---- the retry loop ----------------------------------------------------- */

/* A new easy handle with what every request of h shares: protocols, TLS
 * verification and CA, connect timeout, curl's error text into errbuf. */
static CURL *easy_base(struct http *h, char *errbuf)
{
	CURL *c = curl_easy_init();

	if (!c)
		return NULL;
	curl_easy_setopt(c, CURLOPT_SHARE, h->share);
	curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
	curl_easy_setopt(c, CURLOPT_PROTOCOLS_STR, "http,https");
	curl_easy_setopt(c, CURLOPT_REDIR_PROTOCOLS_STR, "http,https");
	curl_easy_setopt(c, CURLOPT_FOLLOWLOCATION, 0L); /* see attempt() */
	curl_easy_setopt(c, CURLOPT_SSL_VERIFYPEER, 1L);
	curl_easy_setopt(c, CURLOPT_SSL_VERIFYHOST, 2L);
	if (h->ca_file)
		curl_easy_setopt(c, CURLOPT_CAINFO, h->ca_file);
	if (h->ca_path)
		curl_easy_setopt(c, CURLOPT_CAPATH, h->ca_path);
	errbuf[0] = '\0';
	curl_easy_setopt(c, CURLOPT_ERRORBUFFER, errbuf);
	curl_easy_setopt(c, CURLOPT_CONNECTTIMEOUT_MS,
			 (long)(h->connect_timeout_s * 1000));
	curl_easy_setopt(c, CURLOPT_USERAGENT, "echofs/" ECHOFS_VERSION);
	return c;
}

static CURL *easy_new(struct http *h, struct xfer *x)
{
	CURL *c = easy_base(h, x->errbuf);
	long low = (long)h->low_speed_time_s;

	if (!c)
		return NULL;
	curl_easy_setopt(c, CURLOPT_LOW_SPEED_LIMIT, 1L);
	if ((double)low < h->low_speed_time_s)
		low++; /* curl counts whole seconds: round up */
	curl_easy_setopt(c, CURLOPT_LOW_SPEED_TIME, low > 0 ? low : 1L);
	curl_easy_setopt(c, CURLOPT_TCP_KEEPALIVE, 1L);
	curl_easy_setopt(c, CURLOPT_TCP_KEEPIDLE, 30L);
	curl_easy_setopt(c, CURLOPT_TCP_KEEPINTVL, 15L);
	curl_easy_setopt(c, CURLOPT_HEADERFUNCTION, on_header);
	curl_easy_setopt(c, CURLOPT_HEADERDATA, x);
	curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, on_body);
	curl_easy_setopt(c, CURLOPT_WRITEDATA, x);
	curl_easy_setopt(c, CURLOPT_NOPROGRESS, 0L);
	curl_easy_setopt(c, CURLOPT_XFERINFOFUNCTION, on_progress);
	curl_easy_setopt(c, CURLOPT_XFERINFODATA, x);
	if (x->w->head)
		curl_easy_setopt(c, CURLOPT_NOBODY, 1L);
	return c;
}

/* Full jitter: uniform in [0, min(cap, base * 2^failures)). */
static double backoff(const struct http *h, unsigned failures, uint64_t *seed)
{
	double max = h->backoff_base_s;

	for (unsigned i = 0; i < failures && max < BACKOFF_CAP_S; i++)
		max *= 2;
	if (max > BACKOFF_CAP_S)
		max = BACKOFF_CAP_S;
	/* xorshift64: only has to decorrelate clients, not be secure */
	*seed ^= *seed << 13;
	*seed ^= *seed >> 7;
	*seed ^= *seed << 17;
	return max * (double)(*seed >> 11) / (double)(1ULL << 53);
}

/* Sleep s seconds unless http_cancel comes first (then -ECANCELED). */
static int sleep_s(struct http *h, double s)
{
	double until = now_mono() + s;
	struct timespec ts;

	mono_abs(until, &ts);
	pthread_mutex_lock(&h->slot_lock);
	while (!h->stopping && now_mono() < until)
		if (pthread_cond_timedwait(&h->stop_cond, &h->slot_lock, &ts) ==
		    ETIMEDOUT)
			break;
	pthread_mutex_unlock(&h->slot_lock);
	return h->stopping ? -ECANCELED : 0;
}

static void note_retry(const char *url, int rc, double delay)
{
	char red[256];

	if (log_get_level() < LOG_LEVEL_DEBUG)
		return;
	log_debug("http: %s failed (%s), retrying in %.2fs",
		  http_redact(url, red, sizeof(red)), strerror(-rc), delay);
}

/* A call that timed out inside a body of known length says where: a server
 * announcing more than it sends looks like this too. */
static void note_stall(const struct xfer *x)
{
	const struct want *w = x->w;
	uint64_t end = w->end != NO_SIZE ? w->end : w->total;
	char why[160];

	if (!x->r.accept || w->head || end == NO_SIZE || w->pos >= end)
		return;
	snprintf(why, sizeof(why),
		 "timed out with the body at byte %llu of %llu (stalled, or "
		 "shorter than its Content-Length)",
		 (unsigned long long)w->pos, (unsigned long long)end);
	note_why(-ETIMEDOUT, why);
}

/* auth.map_url's URL for url (caller frees), or NULL: url as it is */
static int map_url(struct http *h, const char *url, char **mapped)
{
	*mapped = NULL;
	return h->auth.map_url ? h->auth.map_url(h->auth.ud, url, mapped) : 0;
}

/* Attempts until success, a final error, or retry_budget_s without progress:
 * a body that moved forward restarts the budget and is resumed at once. */
static int run(struct http *h, const char *given, struct want *w)
{
	struct xfer x;
	double start = now_mono();
	uint64_t seed = ((uint64_t)(start * 1e9) ^ (uintptr_t)&x) | 1;
	unsigned failures = 0, resumes = 0;
	char *mapped;
	const char *url = given;
	int rc = map_url(h, given, &mapped), retry;
	long ra;

	last_why.err = 0; /* this call's reason only */
	if (rc)
		return rc;
	url = mapped ? mapped : given;
	memset(&x, 0, sizeof(x));
	x.h = h;
	x.w = w;
	x.started = start;
	x.pos0 = w->pos;
	x.sign = mapped != NULL;
	x.c = easy_new(h, &x);
	if (!x.c) {
		free(mapped);
		return -ENOMEM;
	}
	for (;;) {
		uint64_t before = w->pos;
		double left, delay;

		if (h->stopping) {
			rc = -ECANCELED;
			break;
		}
		rc = attempt(&x, url, &retry, &ra);
		if (rc == 0 || !retry)
			break;
		if (now_mono() >= call_deadline(&x)) {
			rc = -ETIMEDOUT; /* whatever the resumes */
			break;
		}
		if (w->pos > before && resumes < MAX_RESUMES) {
			resumes++;
			STAT_ADD(h, resumes, 1);
			start = now_mono();
			failures = 0;
			continue;
		}
		left = h->retry_budget_s - (now_mono() - start);
		if (left > call_deadline(&x) - now_mono())
			left = call_deadline(&x) - now_mono();
		if (left <= 0)
			break;
		delay = ra >= 0 ? (double)ra : backoff(h, failures, &seed);
		if (delay > left)
			delay = left; /* Retry-After past the budget: last try
				       */
		failures++;
		STAT_ADD(h, retries, 1);
		note_retry(url, rc, delay);
		if (sleep_s(h, delay)) {
			rc = -ECANCELED;
			break;
		}
	}
	if (rc == -ETIMEDOUT)
		note_stall(&x);
	curl_easy_cleanup(x.c);
	free(mapped);
	return rc;
}

/* ---- public calls ------------------------------------------------------- */

static int want_etag(struct want *w, const char *etag)
{
	size_t n = etag ? strlen(etag) : 0;

	if (n >= sizeof(w->etag))
		return -EINVAL;
	memcpy(w->etag, etag ? etag : "", n + 1);
	return 0;
}

static int discard_sink(void *ud, const void *data, size_t len)
{
	(void)ud;
	(void)data;
	(void)len;
	return 0;
}

int http_stat(struct http *h, const char *url, uint64_t *size, char *etag,
	      size_t etaglen)
{
	struct want w = {.end = NO_SIZE, .total = NO_SIZE, .head = 1};
	int rc = run(h, url, &w);

	if ((rc == 0 && w.total == NO_SIZE) || w.status == 405 ||
	    w.status == 501) {
		/* no length in HEAD (or HEAD refused): ask for one byte */
		struct want g = {
			.end = 1, .total = NO_SIZE, .sink = discard_sink};
		rc = run(h, url, &g);
		w = g;
	}
	if (rc)
		return rc;
	if (w.total == NO_SIZE)
		return -EPROTO;
	*size = w.total;
	if (etaglen)
		snprintf(etag, etaglen, "%s", w.etag);
	return 0;
}

int http_stream(struct http *h, const char *url, const char *etag,
		uint64_t expected_size, http_sink_fn sink, void *ud)
{
	struct want w = {
		.end = NO_SIZE, .total = expected_size, .sink = sink, .ud = ud};

	if (want_etag(&w, etag))
		return -EINVAL;
	return run(h, url, &w);
}

struct into_buf {
	char *buf;
	size_t got;
};

static int buf_sink(void *ud, const void *data, size_t len)
{
	struct into_buf *b = ud;
	memcpy(b->buf + b->got, data, len);
	b->got += len;
	return 0;
}

int http_get_range(struct http *h, const char *url, const char *etag,
		   uint64_t off, size_t len, void *buf)
{
	return http_get_range_of(h, url, etag, UINT64_MAX, off, len, buf);
}

int http_get_range_of(struct http *h, const char *url, const char *etag,
		      uint64_t total, uint64_t off, size_t len, void *buf)
{
	struct into_buf b = {.buf = buf};
	struct want w = {.pos = off,
			 .end = off + len,
			 .total = total,
			 .sink = buf_sink,
			 .ud = &b};

	if (len == 0)
		return 0;
	if (off > NO_SIZE - 1 - len || want_etag(&w, etag))
		return -EINVAL;
	return run(h, url, &w);
}

struct growbuf {
	char *buf;
	size_t len, alloc, cap;
};

static int grow_sink(void *ud, const void *data, size_t len)
{
	struct growbuf *g = ud;

	if (len > g->cap - g->len)
		return -EFBIG;
	if (g->len + len + 1 > g->alloc) {
		size_t want = g->alloc ? g->alloc * 2 : 64 * 1024;
		char *p;
		if (want < g->len + len + 1)
			want = g->len + len + 1;
		if (want > g->cap + 1)
			want = g->cap + 1;
		p = realloc(g->buf, want);
		if (!p)
			return -ENOMEM;
		g->buf = p;
		g->alloc = want;
	}
	memcpy(g->buf + g->len, data, len);
	g->len += len;
	return 0;
}

int http_get_all(struct http *h, const char *url, size_t cap, char **out,
		 size_t *outlen)
{
	struct growbuf g = {.cap = cap};
	int rc = http_stream(h, url, NULL, NO_SIZE, grow_sink, &g);

	if (rc == 0 && !g.buf) {
		g.buf = malloc(1);
		if (!g.buf)
			rc = -ENOMEM;
	}
	if (rc) {
		free(g.buf);
		return rc;
	}
	g.buf[g.len] = '\0';
	*out = g.buf;
	*outlen = g.len;
	return 0;
}

/* ---- one exchange (credential sources) ----------------------------------- */

static size_t on_exchange_body(char *p, size_t size, size_t n, void *ud)
{
	return grow_sink(ud, p, size * n) == 0 ? size * n : 0;
}

static void exchange_opts(CURL *c, const struct http_exchange *r,
			  struct curl_slist *l, struct growbuf *g)
{
	curl_easy_setopt(c, CURLOPT_URL, r->url);
	if (r->method)
		curl_easy_setopt(c, CURLOPT_CUSTOMREQUEST, r->method);
	curl_easy_setopt(c, CURLOPT_HTTPHEADER, l);
	if (r->form)
		curl_easy_setopt(c, CURLOPT_POSTFIELDS, r->form);
	curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, on_exchange_body);
	curl_easy_setopt(c, CURLOPT_WRITEDATA, g);
}

int http_exchange(struct http *h, const struct http_exchange *r, size_t cap,
		  long *status, char **out)
{
	char errbuf[CURL_ERROR_SIZE];
	struct growbuf g = {.cap = cap};
	struct curl_slist *l = NULL, *next;
	double until = now_mono() + h->connect_timeout_s + h->retry_budget_s;
	CURL *c = easy_base(h, errbuf);
	CURLcode cc;
	int rc = 0, retry;

	*out = NULL;
	*status = 0;
	last_why.err = 0;
	if (thread_deadline > 0 && thread_deadline < until)
		until = thread_deadline;
	for (size_t i = 0; c && i < r->nhdrs && rc == 0; i++) {
		next = curl_slist_append(l, r->hdrs[i]);
		rc = next ? 0 : -ENOMEM;
		l = next ? next : l;
	}
	if (!c || rc) {
		curl_slist_free_all(l);
		curl_easy_cleanup(c);
		return -ENOMEM;
	}
	exchange_opts(c, r, l, &g);
	curl_easy_setopt(c, CURLOPT_TIMEOUT_MS,
			 (long)((until - now_mono()) * 1000) + 1);
	rc = slot_take(h, until);
	if (rc == 0) {
		STAT_ADD(h, requests, 1);
		cc = curl_easy_perform(c);
		slot_give(h);
		curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, status);
		/* any status is an answer: only curl's verdict is an error */
		rc = xlate(h, c, cc, 200, &retry);
		if (rc == -EIO && cc == CURLE_WRITE_ERROR)
			rc = -EFBIG;
		/* not logged: a credential chain probes sources that may
		 * well be absent; its caller says what failed */
		if (rc && is_tls_failure(cc))
			note_tls(cc, rc, errbuf);
	}
	curl_slist_free_all(l);
	curl_easy_cleanup(c);
	if (rc == 0 && !g.buf && !(g.buf = malloc(1)))
		rc = -ENOMEM;
	if (rc) {
		if (g.buf)
			explicit_bzero(g.buf, g.len);
		free(g.buf);
		return rc;
	}
	g.buf[g.len] = '\0';
	*out = g.buf;
	return 0;
}

const char *http_reason(int err)
{
	if (err && err == last_why.err)
		return last_why.text;
	switch (err) {
	case -EKEYREJECTED:
		return "TLS certificate refused";
	case -ENOENT:
		return "not found (HTTP 404)";
	case -EACCES:
		return "access denied (HTTP 401/403)";
	case -ESTALE:
		return "changed on the server (ETag mismatch)";
	case -EPROTO:
		return "bad response (length or range mismatch)";
	case -EPROTONOSUPPORT:
		return "redirect refused (to a scheme other than http(s), or "
		       "from https to http)";
	case -ELOOP:
		return "too many redirects (more than 5)";
	case -ETIMEDOUT:
		return "timed out";
	case -ECONNREFUSED:
		return "connection refused";
	default:
		return strerror(-err);
	}
}
