/* gcs_json.c - strict reader for flat JSON objects (Google key files and
 * token replies); see gcs_json.h. */
#include "fetch/net/gcs_json.h"

#include <errno.h>
#include <string.h>

struct cur {
	const char *p, *end;
};

/* The writer of a decoded string: out may be NULL (only checking). */
struct sink {
	char *out;
	size_t cap, n;
	int full;
};

static void ws(struct cur *c)
{
	while (c->p < c->end && strchr(" \t\r\n", *c->p) && *c->p)
		c->p++;
}

static void put(struct sink *s, unsigned char ch)
{
	if (!s->out)
		return;
	if (s->n + 1 >= s->cap) {
		s->full = 1;
		return;
	}
	s->out[s->n++] = (char)ch;
}

static void put_utf8(struct sink *s, unsigned long cp)
{
	if (cp < 0x80) {
		put(s, (unsigned char)cp);
	} else if (cp < 0x800) {
		put(s, (unsigned char)(0xc0 | (cp >> 6)));
		put(s, (unsigned char)(0x80 | (cp & 0x3f)));
	} else if (cp < 0x10000) {
		put(s, (unsigned char)(0xe0 | (cp >> 12)));
		put(s, (unsigned char)(0x80 | ((cp >> 6) & 0x3f)));
		put(s, (unsigned char)(0x80 | (cp & 0x3f)));
	} else {
		put(s, (unsigned char)(0xf0 | (cp >> 18)));
		put(s, (unsigned char)(0x80 | ((cp >> 12) & 0x3f)));
		put(s, (unsigned char)(0x80 | ((cp >> 6) & 0x3f)));
		put(s, (unsigned char)(0x80 | (cp & 0x3f)));
	}
}

static int hex4(struct cur *c, unsigned long *v)
{
	*v = 0;
	if (c->end - c->p < 4)
		return -EPROTO;
	for (int i = 0; i < 4; i++) {
		char h = *c->p++;
		int d = h >= '0' && h <= '9'   ? h - '0'
			: h >= 'a' && h <= 'f' ? h - 'a' + 10
			: h >= 'A' && h <= 'F' ? h - 'A' + 10
					       : -1;
		if (d < 0)
			return -EPROTO;
		*v = *v * 16 + (unsigned long)d;
	}
	return 0;
}

/* After "\u": one code point, a surrogate pair taken whole; no NUL. */
static int unicode(struct cur *c, struct sink *s)
{
	unsigned long cp, lo;

	if (hex4(c, &cp))
		return -EPROTO;
	if (cp >= 0xdc00 && cp <= 0xdfff)
		return -EPROTO;
	if (cp >= 0xd800 && cp <= 0xdbff) {
		if (c->end - c->p < 2 || c->p[0] != '\\' || c->p[1] != 'u')
			return -EPROTO;
		c->p += 2;
		if (hex4(c, &lo) || lo < 0xdc00 || lo > 0xdfff)
			return -EPROTO;
		cp = 0x10000 + ((cp - 0xd800) << 10) + (lo - 0xdc00);
	}
	if (cp == 0)
		return -EPROTO;
	put_utf8(s, cp);
	return 0;
}

static int escape(struct cur *c, struct sink *s)
{
	static const char from[] = "\"\\/bfnrt", to[] = "\"\\/\b\f\n\r\t";
	const char *k;

	if (c->p >= c->end)
		return -EPROTO;
	if (*c->p == 'u') {
		c->p++;
		return unicode(c, s);
	}
	k = strchr(from, *c->p);
	if (!k || !*c->p)
		return -EPROTO;
	put(s, (unsigned char)to[k - from]);
	c->p++;
	return 0;
}

/* A string at c->p (on its opening quote), decoded into s. */
static int string(struct cur *c, struct sink *s)
{
	if (c->p >= c->end || *c->p != '"')
		return -EPROTO;
	c->p++;
	while (c->p < c->end && *c->p != '"') {
		unsigned char ch = (unsigned char)*c->p;
		if (ch < 0x20)
			return -EPROTO;
		if (ch == '\\') {
			c->p++;
			if (escape(c, s))
				return -EPROTO;
			continue;
		}
		put(s, ch);
		c->p++;
	}
	if (c->p >= c->end)
		return -EPROTO;
	c->p++;
	return 0;
}

/* A number, true, false or null, copied as written. */
static int scalar(struct cur *c, struct sink *s)
{
	static const char *const words[] = {"true", "false", "null"};
	const char *a = c->p;

	for (size_t i = 0; i < 3; i++) {
		size_t n = strlen(words[i]);
		if ((size_t)(c->end - a) >= n && !memcmp(a, words[i], n)) {
			c->p += n;
			goto copy;
		}
	}
	if (c->p < c->end && *c->p == '-')
		c->p++;
	if (c->p >= c->end || *c->p < '0' || *c->p > '9')
		return -EPROTO;
	while (c->p < c->end && strchr("0123456789.eE+-", *c->p) && *c->p)
		c->p++;
copy:
	for (const char *q = a; q < c->p; q++)
		put(s, (unsigned char)*q);
	return 0;
}

static int value(struct cur *c, struct sink *s)
{
	if (c->p < c->end && *c->p == '"')
		return string(c, s);
	return scalar(c, s);
}

/* One "name": value member; the name decoded into nm (sized NAME_MAX). */
#define MEMBER_NAME_MAX 128
static int member(struct cur *c, char *nm, const char *want, struct sink *s,
		  int *hit)
{
	struct sink ns = {nm, MEMBER_NAME_MAX, 0, 0};
	struct sink none = {0};

	if (string(c, &ns) || ns.full)
		return -EPROTO;
	nm[ns.n] = '\0';
	ws(c);
	if (c->p >= c->end || *c->p != ':')
		return -EPROTO;
	c->p++;
	ws(c);
	*hit = want && strcmp(nm, want) == 0;
	return value(c, *hit ? s : &none);
}

/* Walks the whole object; a member named want goes into s. Names seen are
 * kept (joined by NULs) to refuse duplicates. */
static int walk(const char *text, size_t len, const char *want, struct sink *s,
		int *found)
{
	struct cur c = {text, text + len};
	char nm[MEMBER_NAME_MAX], seen[4096];
	size_t seen_n = 0;
	int hit;

	*found = 0;
	ws(&c);
	if (c.p >= c.end || *c.p++ != '{')
		return -EPROTO;
	ws(&c);
	if (c.p < c.end && *c.p == '}')
		goto close;
	for (;;) {
		if (member(&c, nm, want, s, &hit))
			return -EPROTO;
		for (size_t i = 0; i < seen_n; i += strlen(seen + i) + 1)
			if (strcmp(seen + i, nm) == 0)
				return -EPROTO; /* duplicate name */
		if (seen_n + strlen(nm) + 1 > sizeof(seen))
			return -EPROTO;
		memcpy(seen + seen_n, nm, strlen(nm) + 1);
		seen_n += strlen(nm) + 1;
		*found |= hit;
		ws(&c);
		if (c.p < c.end && *c.p == ',') {
			c.p++;
			ws(&c);
			continue;
		}
		break;
	}
close:
	if (c.p >= c.end || *c.p++ != '}')
		return -EPROTO;
	ws(&c);
	return c.p == c.end ? 0 : -EPROTO;
}

int gcs_json_check(const char *text, size_t len)
{
	int found;

	return walk(text, len, NULL, &(struct sink){0}, &found);
}

int gcs_json_get(const char *text, size_t len, const char *name, char *out,
		 size_t outlen)
{
	struct sink s = {out, outlen, 0, 0};
	int found, rc;

	if (!outlen)
		return -ENAMETOOLONG;
	out[0] = '\0';
	rc = walk(text, len, name, &s, &found);
	if (rc == 0 && !found)
		rc = -ENOENT;
	if (rc == 0 && s.full)
		rc = -ENAMETOOLONG;
	out[rc == 0 ? s.n : 0] = '\0';
	if (rc)
		explicit_bzero(out, outlen);
	return rc;
}
