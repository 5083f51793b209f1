/* redact.c - URLs without their secrets (userinfo, query, fragment), for
 * logs, error text, indexes and cache keys (see redact.h). */
#include "fetch/net/redact.h"

#include "common/util.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include <openssl/evp.h>
#include <openssl/hmac.h>

#define KEY_LEN 32
#define KEY_FILE "url-key"
#define DIGEST_HEX 32 /* 128 bits of the HMAC, in hex */

static void put(char *buf, size_t buflen, size_t *at, const char *s, size_t n)
{
	if (*at + 1 >= buflen)
		return;
	if (n > buflen - 1 - *at)
		n = buflen - 1 - *at;
	memcpy(buf + *at, s, n);
	*at += n;
	buf[*at] = '\0';
}

const char *http_redact(const char *url, char *buf, size_t buflen)
{
	const char *p = url, *sep = strstr(url, "://"), *auth_end, *at_sign;
	size_t at = 0, n;

	if (buflen == 0)
		return buf;
	buf[0] = '\0';
	if (sep) {
		const char *auth = sep + 3;
		auth_end = auth + strcspn(auth, "/?#");
		at_sign = NULL;
		for (const char *q = auth; q < auth_end; q++)
			if (*q == '@')
				at_sign = q;
		if (at_sign) {
			put(buf, buflen, &at, url, (size_t)(auth - url));
			put(buf, buflen, &at, "***", 3);
			p = at_sign;
		}
	}
	n = strcspn(p, "?#");
	put(buf, buflen, &at, p, n);
	if (p[n])
		put(buf, buflen, &at, p[n] == '?' ? "?***" : "#***", 4);
	return buf;
}

/* ---- the key of the query digests ---------------------------------------- */

/* Set once per mount (http_url_key_use) before any digest that reaches disk;
 * the lock only keeps a reader from seeing half a key. */
static pthread_mutex_t key_lock = PTHREAD_MUTEX_INITIALIZER;
static unsigned char url_key[KEY_LEN];
static int url_key_set;

static int random_key(unsigned char *k)
{
	size_t got = 0;
	while (got < KEY_LEN) {
		ssize_t r = getrandom(k + got, KEY_LEN - got, 0);
		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0)
			return r < 0 ? -errno : -EIO;
		got += (size_t)r;
	}
	return 0;
}

static void key_copy(unsigned char *k)
{
	pthread_mutex_lock(&key_lock);
	if (!url_key_set && random_key(url_key) == 0)
		url_key_set = 1; /* the process's own: digests match within it */
	memcpy(k, url_key, KEY_LEN);
	pthread_mutex_unlock(&key_lock);
}

/* An existing key file: ours, regular, unreadable by others, KEY_LEN bytes. */
static int key_read(const char *path, unsigned char *k)
{
	struct stat sb;
	int fd = open(path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC), r = 0;

	if (fd < 0)
		return -errno;
	if (fstat(fd, &sb) != 0)
		r = -errno;
	else if (!S_ISREG(sb.st_mode) || sb.st_size != KEY_LEN)
		r = -EBADMSG;
	else if (sb.st_uid != geteuid() || (sb.st_mode & 077))
		r = -EPERM;
	else if (pread(fd, k, KEY_LEN, 0) != KEY_LEN)
		r = -EIO;
	close(fd);
	return r;
}

/* A new key file, written whole under a temporary name and linked into
 * place: a mount racing us either wins (-EEXIST: read its key) or loses. */
static int key_create(const char *dir, const char *path, unsigned char *k)
{
	size_t n = strlen(dir) + sizeof("/" KEY_FILE ".tmp.XXXXXX");
	char *tmp = xmalloc(n);
	int fd, r;

	snprintf(tmp, n, "%s/" KEY_FILE ".tmp.XXXXXX", dir);
	fd = mkstemp(tmp); /* 0600 */
	if (fd < 0) {
		r = -errno;
		free(tmp);
		return r;
	}
	r = random_key(k);
	if (!r && write(fd, k, KEY_LEN) != KEY_LEN)
		r = -EIO;
	if (!r && fsync(fd) != 0)
		r = -errno;
	if (close(fd) != 0 && !r)
		r = -errno;
	if (!r && link(tmp, path) != 0)
		r = -errno;
	unlink(tmp);
	free(tmp);
	return r;
}

int http_url_key_use(const char *cache_dir, int create)
{
	size_t n = strlen(cache_dir) + sizeof("/" KEY_FILE);
	char *path = xmalloc(n);
	unsigned char k[KEY_LEN];
	int r;

	snprintf(path, n, "%s/" KEY_FILE, cache_dir);
	r = key_read(path, k);
	if (r == -ENOENT && create) {
		r = key_create(cache_dir, path, k);
		if (r == -EEXIST)
			r = key_read(path, k);
	}
	free(path);
	if (r)
		return r;
	pthread_mutex_lock(&key_lock);
	memcpy(url_key, k, KEY_LEN);
	url_key_set = 1;
	pthread_mutex_unlock(&key_lock);
	return 0;
}

/* ---- the stored form ------------------------------------------------------ */

/* Query parameters that carry a credential and change between mounts
 * (signatures, their dates and expiries, rotating tokens): dropped, so a
 * presigned URL signed anew finds the same entries. Azure's short SAS names
 * only with a "sig" beside them, where they are known to be the SAS. */
static const char *const cred_params[] = {
	"X-Amz-Signature", "X-Amz-Credential", "X-Amz-Security-Token",
	"X-Amz-Date", "X-Amz-Expires", "X-Amz-Algorithm",
	"X-Amz-SignedHeaders", "Signature", "Expires", "AWSAccessKeyId",
	"X-Goog-Signature", "X-Goog-Credential", "X-Goog-Date",
	"X-Goog-Expires", "X-Goog-Algorithm", "X-Goog-SignedHeaders",
	"GoogleAccessId", "Policy", "Key-Pair-Id", "token", "access_token",
	"sig", NULL};
static const char *const sas_params[] = {
	"se", "sp", "sv", "st", "sr", "spr", "sip", "ss", "srt", "skoid",
	"sktid", "skt", "ske", "sks", "skv", "sdd", NULL};

static int name_in(const char *p, size_t n, const char *const *list)
{
	for (; *list; list++)
		if (strlen(*list) == n && strncasecmp(p, *list, n) == 0)
			return 1;
	return 0;
}

static size_t name_len(const char *p, size_t len)
{
	const char *eq = memchr(p, '=', len);
	return eq ? (size_t)(eq - p) : len;
}

static int has_sig(const char *q, size_t qlen)
{
	static const char *const sig[] = {"sig", NULL};
	for (const char *p = q, *end = q + qlen; p < end;) {
		size_t len = strcspn(p, "&");
		if (len > (size_t)(end - p))
			len = (size_t)(end - p);
		if (name_in(p, name_len(p, len), sig))
			return 1;
		p += len + 1;
	}
	return 0;
}

/* The query's parameters that are not credentials, '&'-joined in their
 * order, into out (at least qlen + 1 bytes). */
static size_t kept_params(const char *q, size_t qlen, char *out)
{
	int sas = has_sig(q, qlen);
	size_t n = 0;

	for (const char *p = q, *end = q + qlen; p < end;) {
		size_t len = strcspn(p, "&");
		if (len > (size_t)(end - p))
			len = (size_t)(end - p);
		size_t nl = name_len(p, len);
		if (len && !name_in(p, nl, cred_params) &&
		    !(sas && name_in(p, nl, sas_params))) {
			if (n)
				out[n++] = '&';
			memcpy(out + n, p, len);
			n += len;
		}
		p += len + 1;
	}
	out[n] = '\0';
	return n;
}

/* "~" and the keyed digest of the kept parameters, into out[DIGEST_HEX + 2]:
 * the query names the shard, but no byte of it reaches the disk. */
static void query_digest(const char *kept, size_t n, char *out)
{
	static const char hex[] = "0123456789abcdef";
	unsigned char k[KEY_LEN], md[EVP_MAX_MD_SIZE];
	unsigned int mdlen = 0;

	key_copy(k);
	if (!HMAC(EVP_sha256(), k, KEY_LEN, (const unsigned char *)kept, n,
		  md, &mdlen) ||
	    mdlen * 2 < DIGEST_HEX)
		abort(); /* HMAC-SHA256 over memory cannot fail but by OOM */
	out[0] = '~';
	for (int i = 0; i < DIGEST_HEX / 2; i++) {
		out[1 + 2 * i] = hex[md[i] >> 4];
		out[2 + 2 * i] = hex[md[i] & 15];
	}
	out[DIGEST_HEX + 1] = '\0';
}

/* url without userinfo, query and fragment into out (strlen(url) + 1
 * bytes; a path without "://" whole); returns where its query starts
 * (after '?'), or NULL when it has none to strip. */
static const char *base_of(const char *url, char *out)
{
	const char *sep = strstr(url, "://"), *auth, *auth_end, *from;
	size_t n, rest;

	if (!sep) {
		memcpy(out, url, strlen(url) + 1);
		return NULL;
	}
	auth = sep + 3;
	auth_end = auth + strcspn(auth, "/?#");
	from = auth;
	for (const char *q = auth; q < auth_end; q++)
		if (*q == '@')
			from = q + 1; /* the last '@' ends the userinfo */
	n = (size_t)(auth - url);
	rest = strcspn(from, "?#");
	memcpy(out, url, n);
	memcpy(out + n, from, rest);
	out[n + rest] = '\0';
	return from[rest] == '?' ? from + rest + 1 : NULL;
}

char *http_strip_query(const char *url)
{
	char *out = xmalloc(strlen(url) + 1);
	base_of(url, out);
	return out;
}

char *http_strip_secrets(const char *url)
{
	char *out = xmalloc(strlen(url) + DIGEST_HEX + 3), *kept;
	const char *q = base_of(url, out);
	size_t n = strlen(out), qlen, klen;

	if (!q)
		return out;
	qlen = strcspn(q, "#");
	kept = xmalloc(qlen + 1);
	klen = kept_params(q, qlen, kept);
	if (klen) {
		out[n++] = '?';
		query_digest(kept, klen, out + n);
	}
	explicit_bzero(kept, qlen + 1);
	free(kept);
	return out;
}
