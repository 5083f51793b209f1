/* http_xfer.c - the transfer engine: one attempt (a request and its
 * redirects, signed by the auth hooks), deadlines and the rate floor while
 * curl runs, and the retry loop that resumes broken bodies. */

#include "fetch/net/http_int.h"

#include "common/log.h"
#include "common/util.h"

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#define MAX_REDIRECTS 5
/* per call: a server cutting every body short stays bounded */
#define MAX_RESUMES 100
#define BACKOFF_CAP_S 5.0
#define AUTH_HEADERS_MAX 8192

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

	return http_deadline_cap(d);
}

/* curl calls this at least once a second, data or not: the one place that
 * stops a transfer for shutdown, its deadline, or a body below min_rate. */
int http_on_progress(void *ud, curl_off_t dltotal, curl_off_t dlnow,
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
		x->stall = HTTP_STALL_SLOW; /* counted by http_xlate_stop */
		x->slow_bps = (double)(dlnow - x->win_bytes) / el;
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
	http_set_range(x, range);
	if (trusted && x->sign && x->h->auth.sign) {
		int rc = add_auth_headers(x, url, range, &hdrs);
		if (rc) {
			curl_slist_free_all(hdrs);
			x->r.err = rc;
			return CURLE_ABORTED_BY_CALLBACK;
		}
	}
	curl_easy_setopt(x->c, CURLOPT_HTTPHEADER, hdrs);
	x->stop_err = http_slot_take(x->h, call_deadline(x));
	x->stop_retry = 0;
	if (x->stop_err) {
		curl_slist_free_all(hdrs);
		return CURLE_ABORTED_BY_CALLBACK;
	}
	STAT_ADD(x->h, requests, 1);
	x->win_start = now_mono();
	x->win_bytes = 0;
	cc = curl_easy_perform(x->c);
	http_slot_give(x->h);
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

/* The words behind a bare errno (EIO, ENOMEM...), for the mount's one
 * error line as for the log: the status, or curl's verdict and its detail
 * ("Transferred a partial file: transfer closed with 5120 bytes remaining
 * to read", "Out of memory: header line too long"). Kept for the call's
 * end unless a later attempt fails otherwise. */
static void note_verdict(const struct xfer *x, CURLcode cc, int rc)
{
	char why[CURL_ERROR_SIZE + 96];

	if (rc != -EIO && rc != -ENOMEM)
		return; /* http_reason's words, or the TLS note, say it */
	if (cc == CURLE_OK && x->r.retry_after >= 0)
		snprintf(why, sizeof(why),
			 "HTTP %ld from the server (Retry-After %ld s)",
			 x->r.status, x->r.retry_after);
	else if (cc == CURLE_OK)
		snprintf(why, sizeof(why), "HTTP %ld from the server",
			 x->r.status);
	else if (cc == CURLE_OUT_OF_MEMORY && !x->errbuf[0])
		/* what libcurl 7.88 answers to a header over its 100 KB cap */
		snprintf(why, sizeof(why),
			 "a response header too large for libcurl (over 100 "
			 "KB), or out of memory");
	else if (cc == CURLE_PARTIAL_FILE)
		snprintf(why, sizeof(why), "body cut short (%s)",
			 x->errbuf[0] ? x->errbuf : curl_easy_strerror(cc));
	else
		snprintf(why, sizeof(why), "%s%s%s", curl_easy_strerror(cc),
			 x->errbuf[0] ? ": " : "", x->errbuf);
	http_note_why(rc, why);
}

/* One request plus the redirects it leads to. */
static int attempt(struct xfer *x, const char *url, int *retry, long *ra)
{
	char *cur = xstrdup(url), *next = NULL;
	int rc = -ELOOP;
	CURLcode cc;

	*retry = 0;
	*ra = -1;
	x->stall = HTTP_STALL_NONE;
	for (int hop = 0; hop <= MAX_REDIRECTS; hop++) {
		cc = perform(x, cur, same_origin(cur, url));
		*ra = x->r.retry_after;
		x->w->status = x->r.status;
		if (cc == CURLE_ABORTED_BY_CALLBACK && x->stop_err) {
			/* http_on_progress or http_slot_take */
			rc = http_xlate_stop(x, retry);
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
		rc = http_xlate(x->h, x->c, cc, x->r.status, retry);
		if (http_is_silent_stall(x->c, cc))
			x->stall = HTTP_STALL_SILENT;
		else if (rc)
			note_verdict(x, cc, rc);
		if (rc == 0)
			rc = http_check_complete(x->h, x->w);
		if (rc && x->auth_again && !x->auth_retried) {
			x->auth_retried = 1;
			*retry = 1;
		}
		break;
	}
	http_note_failure(x, cur, cc, rc);
	free(cur);
	return rc;
}

/* ---- the retry loop ----------------------------------------------------- */

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
	http_note_why(-ETIMEDOUT, why);
}

/* A stalled attempt in words a user acts on (not libcurl's "Operation was
 * aborted by an application callback" or "Timeout was reached"), and
 * whether the call goes on from where the body stopped. Rate-limited: a
 * congested link stalls often, and each one is also in stats.stalls. */
static void log_stall(struct xfer *x, const char *url, int resuming)
{
	const struct http *h = x->h;
	char red[256], how[128];

	if (!x->stall)
		return;
	if (x->stall == HTTP_STALL_SILENT)
		snprintf(how, sizeof(how), "no data for %g s (stall_timeout)",
			 h->low_speed_time_s);
	else
		snprintf(how, sizeof(how),
			 "%.0f B/s over %g s, under min_rate (%.0f B/s)",
			 x->slow_bps, h->rate_window_s, h->min_rate);
	log_counted("stalls", "http: %s: %s, %s at byte %llu",
		    http_redact(url, red, sizeof(red)), how,
		    resuming ? "resuming" : "giving up",
		    (unsigned long long)x->w->pos);
	x->stall = HTTP_STALL_NONE;
}

/* auth.map_url's URL for url (caller frees), or NULL: url as it is */
static int map_url(struct http *h, const char *url, char **mapped)
{
	*mapped = NULL;
	return h->auth.map_url ? h->auth.map_url(h->auth.ud, url, mapped) : 0;
}

/* Attempts until success, a final error, or retry_budget_s without progress:
 * a body that moved forward restarts the budget and is resumed at once. */
int http_run(struct http *h, const char *given, struct want *w)
{
	struct xfer x;
	double start = now_mono();
	uint64_t seed = ((uint64_t)(start * 1e9) ^ (uintptr_t)&x) | 1;
	unsigned failures = 0, resumes = 0;
	char *mapped;
	const char *url = given;
	int rc = map_url(h, given, &mapped), retry;
	long ra;

	http_why_clear(); /* this call's reason only */
	if (rc)
		return rc;
	url = mapped ? mapped : given;
	memset(&x, 0, sizeof(x));
	x.h = h;
	x.w = w;
	x.started = start;
	x.pos0 = w->pos;
	x.sign = mapped != NULL;
	rc = http_easy_new(h, &x, &x.c);
	if (rc) {
		free(mapped);
		return rc;
	}
	for (;;) {
		uint64_t before = w->pos;
		double left, delay;

		if (h->stopping) {
			rc = -ECANCELED;
			break;
		}
		log_stall(&x, url, 1); /* the last attempt's, if it stalled */
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
		if (http_sleep(h, delay)) {
			rc = -ECANCELED;
			break;
		}
	}
	log_stall(&x, url, 0);
	if (rc == -ETIMEDOUT)
		note_stall(&x);
	curl_easy_cleanup(x.c);
	free(mapped);
	return rc;
}
