/* http_headerfile.c - header_file: the extra request headers a user gives
 * for the origin, read and checked once at http_open. */

#include "fetch/net/http_int.h"

#include "common/file.h"
#include "common/util.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#define HEADER_FILE_MAX (64 * 1024)

static int is_tchar(unsigned char ch)
{
	return (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') ||
	       (ch >= '0' && ch <= '9') ||
	       (ch && strchr("!#$%&'*+-.^_`|~", ch));
}

/* Why line (trimmed, non-empty) is not a usable header, or NULL. The reason
 * never quotes the line: the value may be a secret. */
static const char *header_line_problem(const char *s, size_t len, size_t *colon)
{
	static const char *const reserved[] = {
		"host",	      "range",		"if-match",
		"if-range",   "content-length", "transfer-encoding",
		"connection", "accept-encoding"};
	const char *c = memchr(s, ':', len);
	size_t i, v;

	for (i = 0; i < len; i++) {
		unsigned char ch = (unsigned char)s[i];
		if ((ch < 0x20 && ch != '\t') || ch == 0x7f)
			return "control character";
	}
	if (!c)
		return "no colon";
	*colon = (size_t)(c - s);
	if (*colon == 0)
		return "empty header name";
	for (i = 0; i < *colon; i++)
		if (!is_tchar((unsigned char)s[i]))
			return "bad character in header name";
	for (i = 0; i < ARRAY_SIZE(reserved); i++)
		if (strlen(reserved[i]) == *colon &&
		    strncasecmp(s, reserved[i], *colon) == 0)
			return "header name reserved for echofs";
	for (v = *colon + 1; v < len && (s[v] == ' ' || s[v] == '\t'); v++)
		;
	if (v == len)
		return "empty value";
	return NULL;
}

int http_load_headers(struct http *h, const char *path, char *err,
		      size_t errlen)
{
	char *text = NULL, *line;
	size_t len = 0, lineno = 0;
	int rc = file_read_all(path, HEADER_FILE_MAX, &text, &len);

	if (rc) {
		snprintf(err, errlen, "header_file %s: %s", path,
			 rc == -EFBIG ? "larger than 64 KiB" : strerror(-rc));
		return rc;
	}
	for (const char *p = text; p < text + len; lineno++) {
		const char *nl = memchr(p, '\n', (size_t)(text + len - p));
		const char *s = p, *why;
		size_t n = (size_t)((nl ? nl : text + len) - p), colon = 0;
		struct curl_slist *next;

		p += n + 1;
		http_trim(&s, &n);
		if (n == 0 || s[0] == '#')
			continue;
		why = header_line_problem(s, n, &colon);
		if (why) {
			snprintf(err, errlen, "header_file %s line %zu: %s",
				 path, lineno + 1, why);
			free(text);
			return -EINVAL;
		}
		line = xstrndup(s, n);
		next = curl_slist_append(h->extra, line);
		free(line);
		if (!next) {
			free(text);
			return -ENOMEM;
		}
		h->extra = next;
	}
	free(text);
	return 0;
}
