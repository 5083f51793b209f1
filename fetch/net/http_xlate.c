/* http_xlate.c - the one place where curl's and the server's verdicts
 * become errno, and the words (http_reason) that say why a call failed. */

#include "fetch/net/http_int.h"

#include "common/log.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

/* Why this thread's last call failed, when an errno alone would not say,
 * for http_reason: curl's words on a TLS failure ("SSL certificate problem:
 * self-signed certificate") tell a user which certificate check failed; a
 * verification failure says which check. Cleared when a call starts. */
static _Thread_local struct {
	int err;
	char text[CURL_ERROR_SIZE + 64];
} last_why;

/* Records why for http_reason; returns err. */
int http_note_why(int err, const char *why)
{
	last_why.err = err;
	snprintf(last_why.text, sizeof(last_why.text), "%s", why);
	return err;
}

void http_why_clear(void)
{
	last_why.err = 0;
}

/* The one place where curl's and the server's verdicts become errno; also
 * counts the failure and says whether another attempt may help. */
int http_xlate(struct http *h, CURL *c, CURLcode cc, long status, int *retry)
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
	if (http_is_silent_stall(c, cc)) {
		STAT_ADD(h, stalls, 1);
		*retry = 1;
		return -ETIMEDOUT;
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

int http_is_silent_stall(CURL *c, CURLcode cc)
{
	long sent = 0;

	/* The same code means the connect timeout: nothing was sent then. */
	return cc == CURLE_OPERATION_TIMEDOUT &&
	       curl_easy_getinfo(c, CURLINFO_REQUEST_SIZE, &sent) == CURLE_OK &&
	       sent > 0;
}

int http_xlate_stop(struct xfer *x, int *retry)
{
	*retry = x->stop_retry;
	if (x->stall)
		STAT_ADD(x->h, stalls, 1);
	return x->stop_err;
}

int http_is_tls_failure(CURLcode cc)
{
	return cc == CURLE_PEER_FAILED_VERIFICATION ||
	       cc == CURLE_SSL_CACERT_BADFILE || cc == CURLE_SSL_CERTPROBLEM ||
	       cc == CURLE_SSL_PINNEDPUBKEYNOTMATCH ||
	       cc == CURLE_SSL_CONNECT_ERROR ||
	       cc == CURLE_SSL_ENGINE_NOTFOUND || cc == CURLE_SSL_CIPHER;
}

/* What failed, in words a user acts on, then curl's own. */
void http_note_tls(CURLcode cc, int rc, const char *detail)
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

/* Every failure http_xlate() or the header checks count is logged too (rate-
 * limited per kind), with the URL redacted. */
void http_note_failure(const struct xfer *x, const char *url, CURLcode cc,
		       int rc)
{
	long st = x->r.status;
	char red[256];

	if (rc == 0 || x->stall || rc == -ECANCELED)
		return; /* a stall: http_run says whether it resumes */
	if (http_is_tls_failure(cc))
		http_note_tls(cc, rc, x->errbuf);
	http_redact(url, red, sizeof(red));
	if (cc == CURLE_ABORTED_BY_CALLBACK && x->stop_err)
		log_counted(
			"connection",
			"http: %s: %s at byte %llu (the call's deadline, or "
			"the reader's read_timeout)",
			red, http_reason(rc), (unsigned long long)x->w->pos);
	else if (x->r.err && (rc == -EPROTO || rc == -ESTALE))
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
	case -ERANGE:
		return "the server refuses ranges (answered a range with the "
		       "whole object or 416)";
	case -ETIMEDOUT:
		return "timed out";
	case -ECONNREFUSED:
		return "connection refused";
	default:
		return strerror(-err);
	}
}
