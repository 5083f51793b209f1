/* aws_creds.h - the AWS credential chain, in the AWS CLI's order, with
 * refresh ahead of expiry:
 *   1. environment: AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY,
 *      AWS_SESSION_TOKEN;
 *   2. the profile (profile= option, else AWS_PROFILE, else "default") in
 *      the shared credentials file (AWS_SHARED_CREDENTIALS_FILE, else
 *      ~/.aws/credentials) and the config file (AWS_CONFIG_FILE, else
 *      ~/.aws/config, section "[profile NAME]" or "[default]"): static keys,
 *      or credential_process (its JSON output, Version 1);
 *   3. web identity: AWS_WEB_IDENTITY_TOKEN_FILE + AWS_ROLE_ARN (and
 *      AWS_ROLE_SESSION_NAME) exchanged at STS AssumeRoleWithWebIdentity
 *      (AWS_ENDPOINT_URL_STS overrides the endpoint); the token file is
 *      read again at each refresh;
 *   4. ECS container credentials: AWS_CONTAINER_CREDENTIALS_RELATIVE_URI
 *      (on 169.254.170.2) or _FULL_URI, with AWS_CONTAINER_AUTHORIZATION_
 *      TOKEN or _TOKEN_FILE as the Authorization header;
 *   5. EC2 instance metadata, IMDSv2 (a token PUT, then the role's
 *      credentials; AWS_EC2_METADATA_SERVICE_ENDPOINT overrides the
 *      address, AWS_EC2_METADATA_DISABLED=true turns it off).
 * Files that hold secrets (credentials, config, token files) must belong to
 * the user and be unreadable by group and others, or they are refused with
 * a message saying so, as ssh does.
 *
 * DESIGN: credentials that expire are refreshed by one background thread
 * (fetch/net/refresher) at least 5 minutes before they expire (or at half
 * their life when that is shorter); aws_creds_get only copies the current value
 * under `lock` (a leaf lock, never held across I/O), so signers never wait for
 * a refresh: they use the old credentials until the new ones are in. A failed
 * refresh is retried every 10 s and logged (without secrets). */
#ifndef ECHOFS_AWS_CREDS_H
#define ECHOFS_AWS_CREDS_H

#include "common/attrs.h"
#include <stddef.h>
#include <time.h>

#define AWS_KEY_MAX 129
#define AWS_SECRET_MAX 257
#define AWS_TOKEN_MAX 4097

struct aws_creds_value {
	char access_key[AWS_KEY_MAX];
	char secret_key[AWS_SECRET_MAX];
	char token[AWS_TOKEN_MAX]; /* "" for long-term keys */
	time_t expires;		   /* 0: does not expire */
};

struct aws_creds;
struct cred_tls;

/* Walks the chain now. profile may be NULL; tls (copied; NULL: the
 * system's CAs) is what the STS, container and instance-metadata requests
 * trust. Returns 0 with *out set, or
 * -errno with *out NULL and a one-line reason in err: a refused file, a
 * broken source that was configured, or "no credentials found (tried:
 * ...)" (-ENOKEY). */
MUST_CHECK
int aws_creds_open(const char *profile, const struct cred_tls *tls,
		   struct aws_creds **out, char *err, size_t errlen);
/* Stops the refresh thread and wipes the credentials. Accepts NULL. */
void aws_creds_free(struct aws_creds *c);

/* Copies the current credentials into out (wipe it after use). Never
 * blocks on I/O. */
void aws_creds_get(struct aws_creds *c, struct aws_creds_value *out);

/* The server refused `used` as expired (ExpiredToken): fetches new
 * credentials now from the source that gave them, unless they already
 * changed since `used` was taken. The refresher renews ahead of the expiry
 * on this machine's clock; a server whose clock runs ahead, or a local
 * clock stepped back, makes credentials expire sooner than that. Returns
 * 0 when the current credentials differ from `used` (try again), or
 * -EKEYEXPIRED (the source cannot change: the environment, or it gave the
 * same again) or the fetch's -errno; logs either way. */
MUST_CHECK
int aws_creds_refresh(struct aws_creds *c, const struct aws_creds_value *used);

/* Which source gave the credentials ("environment", "profile NAME", ...);
 * static or owned by c. */
const char *aws_creds_source(const struct aws_creds *c);

/* A setting (e.g. "region", "endpoint_url") of profile (NULL: AWS_PROFILE
 * or "default") from the config file, then the credentials file. Returns
 * 0, -ENOENT when unset, -EACCES for a refused file, -ENAMETOOLONG. */
MUST_CHECK
int aws_profile_setting(const char *profile, const char *key, char *out,
			size_t outlen);

/* Checks that path may hold secrets: a regular file owned by the user,
 * no group or other permission bits. Returns 0 or -EPERM with the reason
 * in err. */
MUST_CHECK
int aws_secret_file_ok(const char *path, char *err, size_t errlen);

#endif
