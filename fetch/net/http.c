/* http.c - the HTTP(S) client handle: connection sharing, the transfer
 * slots, per-thread deadlines, statistics, and the libcurl easy handles
 * (TLS verification and CA, per-transfer options) every request runs on. */

/* DESIGN
 * Every public call runs on the caller's thread with its own easy handle.
 * Connections, DNS and TLS sessions live in one CURLSH, guarded by one mutex
 * per curl_lock_data (curl takes them itself through share_lock/unlock and
 * never holds two at once). A counting semaphore (slot_lock + slot_cond)
 * bounds transfers in flight to opts.connections; a slot is held only for
 * one curl_easy_perform, never across a backoff sleep. slot_lock is a leaf
 * lock: nothing else is taken while it is held.
 *
 * A call is a loop of attempts (retry loop in http_run()); an attempt follows
 * up to MAX_REDIRECTS redirects itself so that https->http can be refused and
 * header_file headers go only to the origin they were meant for. What the
 * call still wants (struct want: next offset, end, size, ETag) survives the
 * attempts, so a broken body is resumed with a Range request from the next
 * byte and If-Match on the ETag: a changed object answers 412 (-ESTALE)
 * instead of mixing versions. Bytes reach the sink exactly once, in order.
 *
 * Deadlines: a call ends by a total deadline fixed when it starts (connect,
 * first byte, the body at min_rate, the retry budget; see call_deadline),
 * whatever the resumes; the calling thread may shorten it
 * (http_thread_deadline). While curl runs, http_on_progress enforces it, the
 * min_rate floor over each rate window, and the stop flag of http_cancel, so
 * a cancelled transfer ends within about a second (curl calls it at least
 * once a second). Waits outside curl (slot, backoff) are timed waits on
 * slot_cond / stop_cond, woken by http_cancel.
 *
 * Files: http.c (this handle, easy handles), http_slots.c (slots, backoff
 * sleeps), http_xfer.c (attempts, redirects, the retry loop), http_resp.c
 * (libcurl's header and body callbacks), http_resume.c (Range, ETag and
 * length checks), http_xlate.c (errno and reasons), http_headerfile.c,
 * http_get.c (the GET calls), http_exchange.c (credential requests). */

#include "fetch/net/http_int.h"

#include "common/deadline.h"
#include "common/util.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifndef ECHOFS_VERSION
#define ECHOFS_VERSION "dev"
#endif

#define MIN_RATE_DEFAULT (64.0 * 1024)
#define RATE_WINDOW_DEFAULT_S 10.0

/* A caller's own bound on the calls its thread makes (0: none). */
static _Thread_local double thread_deadline;

double http_deadline_cap(double d)
{
	return thread_deadline > 0 && thread_deadline < d ? thread_deadline : d;
}

int http_global_init(void)
{
	return curl_global_init(CURL_GLOBAL_DEFAULT) == CURLE_OK ? 0 : -EIO;
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
		r = http_load_headers(h, o->header_file, err, errlen);
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

double http_stall_timeout(const struct http *h)
{
	return h->low_speed_time_s;
}

void http_get_stats(struct http *h, struct http_stats *out)
{
	out->requests = atomic_load(&h->st.requests);
	out->bytes = atomic_load(&h->st.bytes);
	out->header_bytes = atomic_load(&h->st.header_bytes);
	out->retries = atomic_load(&h->st.retries);
	out->resumes = atomic_load(&h->st.resumes);
	out->stalls = atomic_load(&h->st.stalls);
	out->errors_4xx = atomic_load(&h->st.errors_4xx);
	out->errors_5xx = atomic_load(&h->st.errors_5xx);
	out->errors_conn = atomic_load(&h->st.errors_conn);
	out->errors_verify = atomic_load(&h->st.errors_verify);
}

/* ---- easy handles ------------------------------------------------------- */

/* Every option is checked: a libcurl that refuses one (built without a
 * protocol, a TLS backend without CA paths) must fail the call naming the
 * option, not run it without, say, peer verification. SET records the
 * first refusal in *bad and skips the rest. */
#define SET(c, bad, opt, val)                                               \
	do {                                                                \
		if (!(bad)->name) {                                         \
			CURLcode cc_ = curl_easy_setopt(c, opt, val);       \
			if (cc_ != CURLE_OK)                                \
				(bad)->name = #opt, (bad)->cc = cc_;        \
		}                                                           \
	} while (0)

struct refused {
	const char *name; /* the first option libcurl refused, or NULL */
	CURLcode cc;
};

/* 0, or -EOPNOTSUPP with the refused option as the call's reason (the
 * handle cleaned up). */
static int refused_fail(CURL *c, const struct refused *bad)
{
	char why[160];

	if (!bad->name)
		return 0;
	curl_easy_cleanup(c);
	snprintf(why, sizeof(why), "libcurl refused %s (%s)", bad->name,
		 curl_easy_strerror(bad->cc));
	return http_note_why(-EOPNOTSUPP, why);
}

int http_easy_base(struct http *h, char *errbuf, CURL **out)
{
	CURL *c = curl_easy_init();
	struct refused bad = {0};
	int rc;

	*out = NULL;
	if (!c)
		return -ENOMEM;
	errbuf[0] = '\0';
	SET(c, &bad, CURLOPT_ERRORBUFFER, errbuf);
	SET(c, &bad, CURLOPT_SHARE, h->share);
	SET(c, &bad, CURLOPT_NOSIGNAL, 1L);
	SET(c, &bad, CURLOPT_PROTOCOLS_STR, "http,https");
	SET(c, &bad, CURLOPT_REDIR_PROTOCOLS_STR, "http,https");
	SET(c, &bad, CURLOPT_FOLLOWLOCATION, 0L); /* see attempt() */
	/* The path as written: an object key with dot segments
	 * ("ds/../../other/x.tar") names itself, never another object. */
	SET(c, &bad, CURLOPT_PATH_AS_IS, 1L);
	SET(c, &bad, CURLOPT_SSL_VERIFYPEER, 1L);
	SET(c, &bad, CURLOPT_SSL_VERIFYHOST, 2L);
	if (h->ca_file)
		SET(c, &bad, CURLOPT_CAINFO, h->ca_file);
	if (h->ca_path)
		SET(c, &bad, CURLOPT_CAPATH, h->ca_path);
	SET(c, &bad, CURLOPT_CONNECTTIMEOUT_MS,
	    (long)(h->connect_timeout_s * 1000));
	SET(c, &bad, CURLOPT_USERAGENT, "echofs/" ECHOFS_VERSION);
	rc = refused_fail(c, &bad);
	if (rc == 0)
		*out = c;
	return rc;
}

int http_easy_new(struct http *h, struct xfer *x, CURL **out)
{
	long low = (long)h->low_speed_time_s;
	struct refused bad = {0};
	CURL *c;
	int rc = http_easy_base(h, x->errbuf, &c);

	*out = NULL;
	if (rc)
		return rc;
	SET(c, &bad, CURLOPT_LOW_SPEED_LIMIT, 1L);
	if ((double)low < h->low_speed_time_s)
		low++; /* curl counts whole seconds: round up */
	SET(c, &bad, CURLOPT_LOW_SPEED_TIME, low > 0 ? low : 1L);
	SET(c, &bad, CURLOPT_TCP_KEEPALIVE, 1L);
	SET(c, &bad, CURLOPT_TCP_KEEPIDLE, 30L);
	SET(c, &bad, CURLOPT_TCP_KEEPINTVL, 15L);
	SET(c, &bad, CURLOPT_HEADERFUNCTION, http_on_header);
	SET(c, &bad, CURLOPT_HEADERDATA, x);
	SET(c, &bad, CURLOPT_WRITEFUNCTION, http_on_body);
	SET(c, &bad, CURLOPT_WRITEDATA, x);
	SET(c, &bad, CURLOPT_NOPROGRESS, 0L);
	SET(c, &bad, CURLOPT_XFERINFOFUNCTION, http_on_progress);
	SET(c, &bad, CURLOPT_XFERINFODATA, x);
	if (x->w->head)
		SET(c, &bad, CURLOPT_NOBODY, 1L);
	rc = refused_fail(c, &bad);
	if (rc == 0)
		*out = c;
	return rc;
}
