/* http_exchange.c - one request and its whole answer, for the credential
 * sources (STS, IMDS, ECS, Google tokens): the client's TLS options, slots,
 * deadlines and errno translation, without the GET calls' resume. */

#include "fetch/net/http_int.h"

#include "common/util.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

static size_t on_exchange_body(char *p, size_t size, size_t n, void *ud)
{
	return http_grow_sink(ud, p, size * n) == 0 ? size * n : 0;
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
	CURL *c;
	CURLcode cc;
	int rc, retry;

	*out = NULL;
	*status = 0;
	http_why_clear();
	rc = http_easy_base(h, errbuf, &c);
	if (rc)
		return rc;
	until = http_deadline_cap(until);
	for (size_t i = 0; i < r->nhdrs && rc == 0; i++) {
		next = curl_slist_append(l, r->hdrs[i]);
		rc = next ? 0 : -ENOMEM;
		l = next ? next : l;
	}
	if (rc) {
		curl_slist_free_all(l);
		curl_easy_cleanup(c);
		return -ENOMEM;
	}
	exchange_opts(c, r, l, &g);
	curl_easy_setopt(c, CURLOPT_TIMEOUT_MS,
			 (long)((until - now_mono()) * 1000) + 1);
	rc = http_slot_take(h, until);
	if (rc == 0) {
		STAT_ADD(h, requests, 1);
		cc = curl_easy_perform(c);
		http_slot_give(h);
		curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, status);
		/* any status is an answer: only curl's verdict is an error */
		rc = http_xlate(h, c, cc, 200, &retry);
		if (rc == -EIO && cc == CURLE_WRITE_ERROR)
			rc = -EFBIG;
		/* not logged: a credential chain probes sources that may
		 * well be absent; its caller says what failed */
		if (rc && http_is_tls_failure(cc))
			http_note_tls(cc, rc, errbuf);
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
