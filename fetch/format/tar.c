/* tar.c - push parser for ustar / GNU / PAX tar archives (see tar.h). */
#include "fetch/format/tar.h"

#include <errno.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "common/util.h"

#define BLOCK 512

enum state { ST_HEADER, ST_DATA, ST_PAD, ST_END, ST_ERROR };

/* Where the bytes of the current data area go. */
enum sink { SINK_SKIP, SINK_SMALL, SINK_LONGNAME, SINK_PAX };

struct tar_parser {
	tar_entry_fn on_entry;
	void *ud;
	enum state state;
	enum sink sink;
	int err;
	const char *errmsg;
	uint64_t off;	 /* bytes consumed */
	uint64_t remain; /* data bytes of the current record still to come */
	uint64_t got;	 /* data bytes of the current record seen */
	size_t pad;	 /* padding bytes still to come after the data */
	size_t hfill;	 /* bytes of a split header collected in hdr */
	struct tar_entry cur; /* small regular file waiting for its data */
	/* Metadata records ('L', 'K', 'x') apply to the next entry. */
	bool pending, has_lname, has_pax_path, has_pax_size, pax_sparse;
	size_t lname_len, pax_path_len;
	uint64_t pax_size;
	const char *pax_path; /* points into pax */
	char *lname;	      /* TAR_NAME_MAX + 2 bytes */
	char *pax; /* TAR_PAX_MAX + 1 bytes, allocated on first use */
	uint8_t hdr[BLOCK];
	char hname[256 + 1]; /* prefix "/" name, from the header */
	uint8_t small[TAR_SMALL_MAX];
};

struct tar_parser *tar_parser_new(tar_entry_fn on_entry, void *ud)
{
	struct tar_parser *p = xcalloc(1, sizeof(*p));
	p->on_entry = on_entry;
	p->ud = ud;
	p->errmsg = "";
	p->lname = xmalloc(TAR_NAME_MAX + 2);
	return p;
}

void tar_parser_free(struct tar_parser *p)
{
	if (!p)
		return;
	free(p->lname);
	free(p->pax);
	free(p);
}

static int fail(struct tar_parser *p, int err, const char *msg)
{
	p->state = ST_ERROR;
	p->err = err;
	p->errmsg = msg;
	return err;
}

/* A numeric header field: octal digits, optionally led by spaces and ended
 * by spaces or NULs (all blank reads as 0), or GNU base-256 (first byte 0x80,
 * then big-endian bytes). Negative base-256 values and overflow fail. */
static int parse_num(const uint8_t *f, size_t n, uint64_t *out)
{
	uint64_t v = 0;
	size_t i = 0;

	if (f[0] == 0x80) {
		for (i = 1; i < n; i++) {
			if (v >> 56)
				return -1;
			v = v << 8 | f[i];
		}
		*out = v;
		return 0;
	}
	while (i < n && f[i] == ' ')
		i++;
	for (; i < n && f[i] >= '0' && f[i] <= '7'; i++) {
		if (v >> 61)
			return -1;
		v = v << 3 | (uint64_t)(f[i] - '0');
	}
	for (; i < n; i++)
		if (f[i] != ' ' && f[i] != '\0')
			return -1;
	*out = v;
	return 0;
}

/* Old tars summed signed chars; POSIX says unsigned. Accept either. */
static bool checksum_ok(const uint8_t *h)
{
	uint64_t want;
	uint32_t us = 8 * ' ';
	int32_t ss = 8 * ' ';
	size_t i;

	if (parse_num(h + 148, 8, &want))
		return false;
	for (i = 0; i < 148; i++) {
		us += h[i];
		ss += (signed char)h[i];
	}
	for (i = 156; i < BLOCK; i++) {
		us += h[i];
		ss += (signed char)h[i];
	}
	return want == us || (ss >= 0 && want == (uint64_t)ss);
}

static bool is_zero_block(const uint8_t *h)
{
	static const uint8_t zero[BLOCK];
	return memcmp(h, zero, BLOCK) == 0;
}

static const char *type_reject(char t, const char *name, size_t len)
{
	switch (t) {
	case '0':
	case '\0':
	case '7':
		/* v7 archives mark directories only by the trailing slash. */
		return len && name[len - 1] == '/' ? "directory" : NULL;
	case '1':
		return "hard link";
	case '2':
		return "symlink";
	case '3':
	case '4':
		return "device";
	case '5':
	case 'D':
		return "directory";
	case '6':
		return "fifo";
	case 'S':
		return "sparse file";
	default:
		return "unsupported type";
	}
}

static const char *name_reject(const char *s, size_t len)
{
	size_t i, start = 0;

	if (len == 0)
		return "empty name";
	if (s[0] == '/')
		return "absolute name";
	if (memchr(s, '\0', len))
		return "NUL in name";
	for (i = 0; i < len; i++)
		if ((unsigned char)s[i] < 0x20 || s[i] == 0x7f)
			return "control character";
	for (i = 0; i <= len; i++) {
		size_t clen;
		if (i < len && s[i] != '/')
			continue;
		clen = i - start;
		if (clen == 0)
			return "empty component";
		if (clen == 1 && s[start] == '.')
			return "dot component";
		if (clen == 2 && s[start] == '.' && s[start + 1] == '.')
			return "dot-dot component";
		/* No filesystem takes a longer name (cp -r and tar from the
		 * mount would fail), and a blank one reads as nothing. */
		if (clen > TAR_COMPONENT_MAX)
			return "component too long";
		if (strspn(s + start, " ") >= clen)
			return "blank component";
		start = i + 1;
	}
	return NULL;
}

/* POSIX ustar splits long names into prefix + "/" + name; GNU archives
 * ("ustar  " magic) use the prefix bytes for other things. */
static size_t header_name(const uint8_t *h, char *out)
{
	size_t nlen = strnlen((const char *)h, 100), plen = 0, o = 0;

	if (memcmp(h + 257, "ustar\0", 6) == 0)
		plen = strnlen((const char *)h + 345, 155);
	if (plen) {
		memcpy(out, h + 345, plen);
		out[plen] = '/';
		o = plen + 1;
	}
	memcpy(out + o, h, nlen);
	o += nlen;
	out[o] = '\0';
	return o;
}

static int call_back(struct tar_parser *p)
{
	int r = p->on_entry ? p->on_entry(p->ud, &p->cur) : 0;
	if (r)
		return fail(p, r < 0 ? r : -ECANCELED, "stopped by the caller");
	return 0;
}

static int pax_record(struct tar_parser *p, const char *key, size_t klen,
		      char *val, size_t vlen)
{
	if (klen == 4 && memcmp(key, "path", 4) == 0) {
		/* An empty value cancels the override (POSIX). */
		p->has_pax_path = vlen > 0;
		if (vlen > TAR_NAME_MAX)
			return fail(p, -EBADMSG, "PAX path too long");
		val[vlen] = '\0'; /* overwrites the record's newline */
		p->pax_path = val;
		p->pax_path_len = vlen;
	} else if (klen == 4 && memcmp(key, "size", 4) == 0) {
		p->has_pax_size = vlen > 0;
		if (vlen && parse_u64_n(val, vlen, &p->pax_size))
			return fail(p, -EBADMSG, "bad PAX size");
	} else if (klen > 11 && memcmp(key, "GNU.sparse.", 11) == 0) {
		p->pax_sparse = true;
	}
	return 0;
}

/* Records are "<len> <key>=<value>\n", len counting the whole record. */
static int parse_pax(struct tar_parser *p, size_t len)
{
	char *b = p->pax;
	size_t pos = 0;

	while (pos < len) {
		size_t avail = len - pos, digits, end;
		const char *sp = memchr(b + pos, ' ', avail < 24 ? avail : 24);
		char *kv, *eq;
		uint64_t rlen;

		if (!sp)
			return fail(p, -EBADMSG, "malformed PAX record");
		digits = (size_t)(sp - (b + pos));
		if (parse_u64_n(b + pos, digits, &rlen) || rlen > avail ||
		    rlen < digits + 4 || b[pos + rlen - 1] != '\n')
			return fail(p, -EBADMSG, "malformed PAX record");
		end = pos + (size_t)rlen - 1;
		kv = b + pos + digits + 1;
		eq = memchr(kv, '=', (size_t)(b + end - kv));
		if (!eq || eq == kv)
			return fail(p, -EBADMSG, "malformed PAX record");
		if (pax_record(p, kv, (size_t)(eq - kv), eq + 1,
			       (size_t)(b + end - (eq + 1))))
			return p->err;
		pos += (size_t)rlen;
	}
	return 0;
}

static int data_done(struct tar_parser *p)
{
	p->state = p->pad ? ST_PAD : ST_HEADER;
	switch (p->sink) {
	case SINK_SMALL:
		p->cur.small_data = p->small;
		return call_back(p);
	case SINK_LONGNAME:
		p->lname[p->got] = '\0';
		p->lname_len = strlen(p->lname);
		if (p->lname_len > TAR_NAME_MAX)
			return fail(p, -EBADMSG, "long name too long");
		p->has_lname = true;
		return 0;
	case SINK_PAX:
		return parse_pax(p, (size_t)p->got);
	case SINK_SKIP:
		break;
	}
	return 0;
}

static int begin_data(struct tar_parser *p, uint64_t size, enum sink sink)
{
	/* Keeps off + size + padding far from overflow. */
	if (size > (UINT64_MAX >> 2) - p->off)
		return fail(p, -EBADMSG, "size field out of range");
	p->remain = size;
	p->got = 0;
	p->sink = sink;
	p->pad = (size_t)((BLOCK - size % BLOCK) % BLOCK);
	p->state = ST_DATA;
	return 0;
}

static void clear_pending(struct tar_parser *p)
{
	p->pending = p->has_lname = p->has_pax_path = false;
	p->has_pax_size = p->pax_sparse = false;
}

static int start_entry(struct tar_parser *p, const uint8_t *h, uint64_t size)
{
	struct tar_entry *e = &p->cur;
	const char *name;
	size_t len;
	bool small;

	if (h[156] == 'S' && h[482])
		return fail(p, -EBADMSG, "extended GNU sparse header");
	if (p->has_pax_path) {
		name = p->pax_path;
		len = p->pax_path_len;
	} else if (p->has_lname) {
		name = p->lname;
		len = p->lname_len;
	} else {
		name = p->hname;
		len = header_name(h, p->hname);
	}
	while (len >= 2 && name[0] == '.' && name[1] == '/') {
		name += 2;
		len -= 2;
	}
	if (p->has_pax_size)
		size = p->pax_size;
	memset(e, 0, sizeof(*e));
	e->type = (char)h[156];
	e->name = name;
	e->data_offset = p->off;
	e->size = size;
	e->reject = type_reject(e->type, name, len);
	if (!e->reject && p->pax_sparse)
		e->reject = "sparse file";
	if (!e->reject)
		e->reject = name_reject(name, len);
	clear_pending(p);
	small = !e->reject && size <= TAR_SMALL_MAX;
	if (begin_data(p, size, small ? SINK_SMALL : SINK_SKIP))
		return p->err;
	if (!small && call_back(p))
		return p->err;
	return p->remain ? 0 : data_done(p);
}

static int begin_meta(struct tar_parser *p, uint64_t size, enum sink sink)
{
	p->pending = true;
	if (begin_data(p, size, sink))
		return p->err;
	return p->remain ? 0 : data_done(p);
}

static int on_header(struct tar_parser *p, const uint8_t *h)
{
	uint64_t size;

	if (is_zero_block(h)) {
		if (p->pending)
			return fail(p, -EBADMSG,
				    "extended header not followed by an entry");
		p->state = ST_END;
		return 0;
	}
	if (!checksum_ok(h))
		return fail(p, -EBADMSG, "bad header checksum");
	if (parse_num(h + 124, 12, &size))
		return fail(p, -EBADMSG, "bad size field");
	switch (h[156]) {
	case 'L':
		if (size > TAR_NAME_MAX + 1)
			return fail(p, -EBADMSG, "long name too long");
		return begin_meta(p, size, SINK_LONGNAME);
	case 'K':
		if (size > TAR_NAME_MAX + 1)
			return fail(p, -EBADMSG, "long link name too long");
		return begin_meta(p, size, SINK_SKIP);
	case 'x':
		if (size > TAR_PAX_MAX)
			return fail(p, -EBADMSG, "PAX header too large");
		if (!p->pax)
			p->pax = xmalloc(TAR_PAX_MAX + 1);
		/* A path from an earlier 'x' record lived in the buffer this
		 * one overwrites. */
		p->has_pax_path = false;
		return begin_meta(p, size, SINK_PAX);
	case 'g':
		/* Global PAX records are ignored; they change no name or size
		 * a WebDataset reader relies on. */
		if (begin_data(p, size, SINK_SKIP))
			return p->err;
		return p->remain ? 0 : data_done(p);
	default:
		return start_entry(p, h, size);
	}
}

static size_t feed_header(struct tar_parser *p, const uint8_t *b, size_t len)
{
	const uint8_t *h = b;
	size_t n = BLOCK;

	/* Parse in place when the whole block is there: no copy. */
	if (p->hfill || len < BLOCK) {
		n = BLOCK - p->hfill < len ? BLOCK - p->hfill : len;
		memcpy(p->hdr + p->hfill, b, n);
		p->hfill += n;
		p->off += n;
		if (p->hfill < BLOCK)
			return n;
		h = p->hdr;
	} else {
		p->off += n;
	}
	p->hfill = 0;
	on_header(p, h);
	return n;
}

static size_t feed_data(struct tar_parser *p, const uint8_t *b, size_t len)
{
	size_t n = p->remain < len ? (size_t)p->remain : len;

	switch (p->sink) {
	case SINK_SMALL:
		memcpy(p->small + p->got, b, n);
		break;
	case SINK_LONGNAME:
		memcpy(p->lname + p->got, b, n);
		break;
	case SINK_PAX:
		memcpy(p->pax + p->got, b, n);
		break;
	case SINK_SKIP:
		break;
	}
	p->got += n;
	p->remain -= n;
	p->off += n;
	if (p->remain == 0)
		data_done(p);
	return n;
}

int tar_parser_feed(struct tar_parser *p, const void *buf, size_t len)
{
	const uint8_t *b = buf;

	while (len > 0 && p->state != ST_ERROR) {
		size_t n;
		switch (p->state) {
		case ST_HEADER:
			n = feed_header(p, b, len);
			break;
		case ST_DATA:
			n = feed_data(p, b, len);
			break;
		case ST_PAD:
			n = p->pad < len ? p->pad : len;
			p->pad -= n;
			p->off += n;
			if (p->pad == 0)
				p->state = ST_HEADER;
			break;
		default: /* ST_END: trailing blocks are ignored */
			n = len;
			p->off += n;
			break;
		}
		b += n;
		len -= n;
	}
	return p->state == ST_ERROR ? p->err : 0;
}

int tar_parser_finish(struct tar_parser *p)
{
	switch (p->state) {
	case ST_ERROR:
		return p->err;
	case ST_END:
		return 0;
	case ST_HEADER:
		if (p->hfill)
			break;
		if (p->pending)
			return fail(p, -EBADMSG,
				    "archive ends after an extended header");
		return 0;
	default:
		break;
	}
	return fail(p, -EBADMSG, "archive truncated");
}

const char *tar_parser_error(const struct tar_parser *p)
{
	return p->errmsg;
}

uint64_t tar_parser_offset(const struct tar_parser *p)
{
	return p->off;
}
