/* redact.c - URLs without their secrets (userinfo, query, fragment), for
 * logs, error text, indexes and cache keys (see redact.h). */
#include "fetch/net/redact.h"

#include "common/util.h"

#include <string.h>

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

char *http_strip_secrets(const char *url)
{
	const char *sep = strstr(url, "://"), *auth, *auth_end, *from;
	char *out = xmalloc(strlen(url) + 1);
	size_t n = 0;

	if (!sep) {
		memcpy(out, url, strlen(url) + 1);
		return out;
	}
	auth = sep + 3;
	auth_end = auth + strcspn(auth, "/?#");
	from = auth;
	for (const char *q = auth; q < auth_end; q++)
		if (*q == '@')
			from = q + 1; /* the last '@' ends the userinfo */
	memcpy(out, url, (size_t)(auth - url));
	n = (size_t)(auth - url);
	size_t rest = strcspn(from, "?#");
	memcpy(out + n, from, rest);
	out[n + rest] = '\0';
	return out;
}
