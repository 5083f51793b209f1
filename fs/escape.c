/* escape.c - JSON string and Prometheus label value escaping for the stats. */
#include "fs/escape.h"

#include <stdio.h>
#include <string.h>

#include "common/util.h"

/* Length of the valid UTF-8 sequence at p (1..4), or 0 if it is not one:
 * no overlong forms, no surrogates, nothing above U+10FFFF. */
static size_t utf8_len(const unsigned char *p)
{
	unsigned char c = p[0];
	size_t n;
	unsigned long cp;

	if (c < 0x80)
		return 1;
	if (c >= 0xC2 && c <= 0xDF)
		n = 2, cp = c & 0x1F;
	else if (c >= 0xE0 && c <= 0xEF)
		n = 3, cp = c & 0x0F;
	else if (c >= 0xF0 && c <= 0xF4)
		n = 4, cp = c & 0x07;
	else
		return 0;
	for (size_t i = 1; i < n; i++) {
		if ((p[i] & 0xC0) != 0x80)
			return 0; /* also stops at the NUL */
		cp = (cp << 6) | (p[i] & 0x3F);
	}
	if ((n == 3 && cp < 0x800) || (n == 4 && cp < 0x10000) ||
	    (cp >= 0xD800 && cp <= 0xDFFF) || cp > 0x10FFFF)
		return 0;
	return n;
}

/* Appends the n bytes of t at *o. */
static void add(char **o, const char *t, size_t n)
{
	memcpy(*o, t, n);
	*o += n;
}

char *escape_json(const char *s)
{
	const unsigned char *p = (const unsigned char *)s;
	/* Worst case: every byte becomes \ufffd or \u00XX (6 bytes). */
	char *out = xmalloc(strlen(s) * 6 + 1), *o = out;

	while (*p) {
		size_t n = utf8_len(p);
		char u[8];
		if (n == 0) {
			add(&o, "\\ufffd", 6);
			p++;
		} else if (*p == '"' || *p == '\\') {
			add(&o, "\\", 1);
			add(&o, (const char *)p++, 1);
		} else if (*p == '\n') {
			add(&o, "\\n", 2), p++;
		} else if (*p == '\t') {
			add(&o, "\\t", 2), p++;
		} else if (*p < 0x20 || *p == 0x7f) {
			snprintf(u, sizeof(u), "\\u%04x", *p++);
			add(&o, u, 6);
		} else {
			add(&o, (const char *)p, n);
			p += n;
		}
	}
	*o = '\0';
	return out;
}

char *escape_prom(const char *s)
{
	const unsigned char *p = (const unsigned char *)s;
	char *out = xmalloc(strlen(s) * 3 + 1), *o = out;

	while (*p) {
		size_t n = utf8_len(p);
		if (n == 0) {
			add(&o, "\xef\xbf\xbd", 3); /* U+FFFD */
			p++;
		} else if (*p == '\\' || *p == '"') {
			add(&o, "\\", 1);
			add(&o, (const char *)p++, 1);
		} else if (*p == '\n') {
			add(&o, "\\n", 2), p++;
		} else {
			add(&o, (const char *)p, n);
			p += n;
		}
	}
	*o = '\0';
	return out;
}
