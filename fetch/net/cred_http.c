/* cred_http.c - the small HTTP exchange of credential sources (see
 * cred_http.h), made through fetch/net/http.c's client. */
#include "fetch/net/cred_http.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>

#include "common/util.h"
#include "fetch/net/http.h"

struct cred_tls *cred_tls_dup(const struct cred_tls *t)
{
	struct cred_tls *d = xcalloc(1, sizeof(*d));

	if (t && t->ca_file)
		d->ca_file = xstrdup(t->ca_file);
	if (t && t->ca_path)
		d->ca_path = xstrdup(t->ca_path);
	return d;
}

void cred_tls_free(struct cred_tls *t)
{
	if (!t)
		return;
	free((char *)t->ca_file);
	free((char *)t->ca_path);
	free(t);
}

/* Credentials are fetched rarely (at mount, then before they expire): a
 * client per exchange costs nothing that matters and needs no shared state
 * between credential sources. */
int cred_http_call(const struct cred_http_req *r, long *status, char **out)
{
	struct http_opts o = {.connections = 1,
			      .connect_timeout_s = 2,
			      .retry_budget_s = 8,
			      .ca_file = r->ca_file,
			      .ca_path = r->ca_path};
	struct http_exchange x = {.method = r->method,
				  .url = r->url,
				  .hdrs = r->hdrs,
				  .nhdrs = r->nhdrs,
				  .form = r->form};
	struct http *h;
	char err[256];
	int rc;

	*out = NULL;
	*status = 0;
	rc = http_open(&o, &h, err, sizeof(err));
	if (rc)
		return rc;
	rc = http_exchange(h, &x, CRED_HTTP_BODY_MAX, status, out);
	http_free(h);
	return rc;
}

int cred_http_no_answer(int rc)
{
	return rc == -EHOSTUNREACH || rc == -ECONNREFUSED ||
	       rc == -ENETUNREACH || rc == -ETIMEDOUT || rc == -EIO;
}
