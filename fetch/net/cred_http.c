/* cred_http.c - the small HTTP exchange of credential sources (see
 * cred_http.h). */
#include "fetch/net/cred_http.h"

#include <curl/curl.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "common/util.h"

struct body {
	char *buf; /* CRED_HTTP_BODY_MAX + 1 */
	size_t len;
};

static size_t on_data(char *p, size_t size, size_t n, void *ud)
{
	struct body *b = ud;
	size_t len = size * n;

	if (len > CRED_HTTP_BODY_MAX - b->len)
		return 0; /* curl fails the transfer: no answer we can use */
	memcpy(b->buf + b->len, p, len);
	b->len += len;
	b->buf[b->len] = '\0';
	return len;
}

int cred_http_call(const struct cred_http_req *r, long *status, char **out)
{
	CURL *c = curl_easy_init();
	struct curl_slist *l = NULL;
	struct body b = {xmalloc(CRED_HTTP_BODY_MAX + 1), 0};
	CURLcode cc;

	*out = NULL;
	*status = 0;
	if (!c) {
		free(b.buf);
		return -ENOMEM;
	}
	b.buf[0] = '\0';
	for (size_t i = 0; i < r->nhdrs; i++)
		l = curl_slist_append(l, r->hdrs[i]);
	curl_easy_setopt(c, CURLOPT_URL, r->url);
	if (r->method)
		curl_easy_setopt(c, CURLOPT_CUSTOMREQUEST, r->method);
	curl_easy_setopt(c, CURLOPT_HTTPHEADER, l);
	if (r->form)
		curl_easy_setopt(c, CURLOPT_POSTFIELDS, r->form);
	curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
	curl_easy_setopt(c, CURLOPT_PROTOCOLS_STR, "http,https");
	curl_easy_setopt(c, CURLOPT_CONNECTTIMEOUT_MS, 2000L);
	curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, 10000L);
	curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, on_data);
	curl_easy_setopt(c, CURLOPT_WRITEDATA, &b);
	cc = curl_easy_perform(c);
	curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, status);
	curl_slist_free_all(l);
	curl_easy_cleanup(c);
	if (cc != CURLE_OK) {
		explicit_bzero(b.buf, b.len);
		free(b.buf);
		return -EHOSTUNREACH;
	}
	*out = b.buf;
	return 0;
}
