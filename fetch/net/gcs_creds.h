/* gcs_creds.h - Google Cloud credentials for gs:// sources, in gcloud's
 * order, with OAuth access tokens refreshed ahead of expiry:
 *   1. GOOGLE_APPLICATION_CREDENTIALS: a key file, either a service-account
 *      key ("type": "service_account": a JWT {iss, scope, aud, iat, exp}
 *      signed RS256 with its private_key, exchanged at its token_uri with
 *      the jwt-bearer grant) or an authorized-user file ("authorized_user":
 *      its refresh_token exchanged at its token_uri, else
 *      https://oauth2.googleapis.com/token);
 *   2. the application default credentials gcloud writes:
 *      $CLOUDSDK_CONFIG/application_default_credentials.json, else
 *      ~/.config/gcloud/application_default_credentials.json (same types);
 *   3. the GCE metadata server (GCE_METADATA_HOST overrides
 *      metadata.google.internal): GET /computeMetadata/v1/instance/
 *      service-accounts/default/token with "Metadata-Flavor: Google".
 * Key files must belong to the user and be unreadable by group and others
 * (refused otherwise, as the AWS files are); they are read again at each
 * refresh, so a rotated key is picked up. Tokens, keys and refresh tokens
 * never reach a log line or an error message.
 *
 * DESIGN: one background thread (fetch/net/refresher) refreshes the token at
 * least 5 minutes before it expires (at half its life when that is shorter);
 * gcs_creds_get only copies the current token under `lock` (a leaf lock, never
 * held across I/O), so readers never wait for a refresh. gcs_creds_refresh (a
 * 401) and the thread fetch under `fetch_lock` (held across the token request;
 * taken before `lock`, never the other way round), so a burst of 401s makes one
 * request. A failed refresh is retried every 10 s and logged. */
#ifndef ECHOFS_GCS_CREDS_H
#define ECHOFS_GCS_CREDS_H

#include "common/attrs.h"
#include <stddef.h>
#include <time.h>

#define GCS_TOKEN_MAX 4096
#define GCS_SCOPE "https://www.googleapis.com/auth/devstorage.read_only"
#define GCS_TOKEN_URI "https://oauth2.googleapis.com/token"

struct gcs_token {
	char token[GCS_TOKEN_MAX]; /* the bearer token */
	time_t expires;		   /* 0: unknown */
};

enum gcs_source {
	GCS_SRC_NONE,
	GCS_SRC_KEY_ENV,
	GCS_SRC_ADC,
	GCS_SRC_METADATA
};

struct gcs_creds;
struct cred_tls;

/* Walks the chain now and gets a first token; tls (copied; NULL: the
 * system's CAs) is what the token and metadata requests trust. Returns 0 with
 * *out set, or -errno with *out NULL and a one-line reason in err: a refused or
 * broken key file (named), the token endpoint's refusal (invalid_grant: naming
 * the key file), the metadata server's answer, or "no Google credentials found
 * (tried: ...)" (-ENOKEY). */
MUST_CHECK
int gcs_creds_open(const struct cred_tls *tls, struct gcs_creds **out,
		   char *err, size_t errlen);
/* Stops the refresh thread and wipes the token. Accepts NULL. */
void gcs_creds_free(struct gcs_creds *c);

/* Copies the current token into out (wipe it after use). Never blocks on
 * I/O. */
void gcs_creds_get(struct gcs_creds *c, struct gcs_token *out);

/* A request was refused with 401 while signed with `used`: fetch a new
 * token now unless another thread already has. Returns 0 or -errno. */
MUST_CHECK
int gcs_creds_refresh(struct gcs_creds *c, const char *used);

/* Which source gave the token ("service-account key /path", "metadata
 * server HOST", ...); owned by c. */
const char *gcs_creds_source(const struct gcs_creds *c);

/* Which source the chain would use, without any request: the key file's
 * path into path for the first two (the file must exist), the metadata
 * host otherwise. For tests and --check. */
enum gcs_source gcs_creds_pick(char *path, size_t pathlen);

/* A service-account assertion: base64url(header).base64url(claims).
 * base64url(RS256 signature) with iss=email, scope=GCS_SCOPE, aud,
 * iat=now, exp=now+3600. pem is the key file's private_key. *out is
 * malloc'd (caller frees). Returns 0, -EINVAL for a key that is not an RSA
 * PEM private key, -EPROTO for fields that cannot go into a JWT. */
MUST_CHECK
int gcs_jwt_make(const char *email, const char *pem, const char *aud,
		 time_t now, char **out);

#endif
