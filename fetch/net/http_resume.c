/* http_resume.c - whether a response is the part of the object a call wants:
 * ETag, Content-Range and length checks, the Range of a resume and the bytes
 * it asks for again. */

#include "fetch/net/http_int.h"

#include "common/log.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

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
		return http_note_why(-EPROTO,
				     "a resumed body starts at another "
				     "offset than asked (Content-Range)");
	if (total != NO_SIZE && r->cr_total != NO_SIZE && r->cr_total < total)
		return http_note_why(-EPROTO,
				     "body shorter than Content-Length (a "
				     "resume found the object shorter)");
	if (total != NO_SIZE && r->cr_total != NO_SIZE && r->cr_total != total)
		return http_note_why(-EPROTO, "object larger than announced "
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
	return http_note_why(-EIO, "the server sent a Content-Encoding other "
				   "than identity (an encoded body is not the "
				   "object's bytes)");
}

/* All headers of a final response are in: decide whether its body is ours. */
int http_check_headers(struct xfer *x)
{
	struct resp *r = &x->r;
	struct want *w = x->w;
	int rc;

	if (w->strict && (r->status == 416 || r->status == 200))
		return http_note_why(-ERANGE, "the server refuses ranges "
					      "(answered a range with the "
					      "whole object or 416)");
	if (r->status != 200 && r->status != 206)
		return 0; /* http_xlate() judges the status after the transfer
			   */
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

/* Remember the last RESUME_OVERLAP bytes delivered, for the next resume. */
void http_keep_tail(struct xfer *x, const char *buf, size_t len)
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

/* Sets the request's Range; range (48 bytes) gets "A-B" or "". A resume
 * starts x->overlap bytes early: those are compared, not delivered. */
void http_set_range(struct xfer *x, char *range)
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

/* A response that ended cleanly still has to hold every byte wanted. */
int http_check_complete(struct http *h, struct want *w)
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
