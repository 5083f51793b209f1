/* xml_tag.c - one tag's text out of a small XML reply (see xml_tag.h). */
#include "fetch/net/xml_tag.h"

#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

static int find(const char *body, const char *tag, char *out, size_t outlen,
		bool printable)
{
	char open[64], close[64];
	const char *a, *b;
	size_t n = 0;

	if (!outlen)
		return -ENAMETOOLONG;
	out[0] = '\0';
	snprintf(open, sizeof(open), "<%s>", tag);
	snprintf(close, sizeof(close), "</%s>", tag);
	a = strstr(body, open);
	if (!a)
		return -ENOENT;
	a += strlen(open);
	b = strstr(a, close);
	if (!b)
		return -EINVAL;
	if (!printable && (size_t)(b - a) >= outlen)
		return -ENAMETOOLONG;
	for (; a < b && n + 1 < outlen; a++)
		if (!printable || ((unsigned char)*a >= 0x20 && *a != 0x7f))
			out[n++] = *a;
	out[n] = '\0';
	return 0;
}

int xml_tag_copy(const char *body, const char *tag, char *out, size_t outlen)
{
	return find(body, tag, out, outlen, false);
}

int xml_tag_text(const char *body, const char *tag, char *out, size_t outlen)
{
	return find(body, tag, out, outlen, true);
}
