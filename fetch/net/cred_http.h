/* cred_http.h - one small HTTP exchange for a credential source (instance
 * metadata, container credentials, STS, Google's token endpoint and
 * metadata server) through fetch/net/http.c (http_exchange): its TLS
 * options and errnos, 2 s to connect, 10 s in all, a body of at most
 * CRED_HTTP_BODY_MAX bytes, http(s) only, no retry. */
#ifndef ECHOFS_CRED_HTTP_H
#define ECHOFS_CRED_HTTP_H

#include "common/attrs.h"
#include <stddef.h>

#define CRED_HTTP_BODY_MAX (64 * 1024)

/* The certificates a credential source trusts: the mount's ca_file and
 * ca_path (or $AWS_CA_BUNDLE...), as its shard transfers do, so a private-CA
 * STS, metadata or token endpoint is reached too. NULL members (or a NULL
 * struct): the system's. */
struct cred_tls {
	const char *ca_file;
	const char *ca_path;
};

/* A copy of t (strings duplicated; NULL gives an empty one) for a source
 * that refreshes later; cred_tls_free frees it. */
struct cred_tls *cred_tls_dup(const struct cred_tls *t);
void cred_tls_free(struct cred_tls *t);

struct cred_http_req {
	const char *method; /* NULL: GET, or POST when form is set */
	const char *url;
	const char *const *hdrs; /* nhdrs header lines */
	size_t nhdrs;
	const char *form; /* request body, or NULL */
	/* CA bundle and directory instead of the system's (a source's
	 * cred_tls), or NULL */
	const char *ca_file;
	const char *ca_path;
};

/* Returns 0 with the body (NUL-terminated, caller frees; it may hold
 * secrets: wipe it) in *out and the HTTP status in *status, whatever the
 * status; or, with *out NULL, http.c's errno for no answer
 * (-ECONNREFUSED, -EHOSTUNREACH, -ETIMEDOUT, -EKEYREJECTED for an untrusted
 * certificate: http_reason says which check...), -EFBIG for a body over the
 * cap, or -ENOMEM. */
MUST_CHECK
int cred_http_call(const struct cred_http_req *r, long *status, char **out);

/* Whether rc from cred_http_call means that nothing answered (refused,
 * unreachable, timed out, reset): a source that may well be absent (instance
 * metadata off EC2 or GCE) is then skipped; any other error is reported. */
int cred_http_no_answer(int rc);

#endif
