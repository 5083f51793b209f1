/* test_tar.c - the streaming tar parser against crafted and real archives,
 * fed whole and in every awkward chunking. */
#include <criterion/criterion.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fetch/format/tar.h"

/* ---- archive builder ---------------------------------------------------- */

struct tb {
	unsigned char *buf;
	size_t len, cap;
};

enum {
	F_BADSUM = 1, /* store a wrong checksum */
	F_SIGNED = 2, /* store the signed-char checksum */
	F_B256 = 4,   /* size in GNU base-256 */
	F_GNU = 8,    /* GNU magic "ustar  " */
	F_V7 = 16,    /* no magic at all */
};

static void put(struct tb *t, const void *d, size_t n)
{
	if (t->len + n > t->cap) {
		t->cap = (t->len + n) * 2 + 4096;
		t->buf = realloc(t->buf, t->cap);
		cr_assert_not_null(t->buf);
	}
	memcpy(t->buf + t->len, d, n);
	t->len += n;
}

static void pad(struct tb *t)
{
	static const unsigned char zero[512];
	if (t->len % 512)
		put(t, zero, 512 - t->len % 512);
}

static void octal(unsigned char *f, size_t n, unsigned long long v)
{
	char tmp[32];
	snprintf(tmp, sizeof(tmp), "%0*llo", (int)n - 1, v);
	memcpy(f, tmp, n - 1);
	f[n - 1] = 0;
}

/* A header with name (may be longer than 100: it is cut, as a test wants),
 * optional ustar prefix, type, size, and flags; raw_size overrides the size
 * field bytes. */
static void hdr_full(struct tb *t, const char *name, const char *prefix,
		     char type, unsigned long long size, const char *raw_size,
		     int flags)
{
	unsigned char h[512] = {0};
	unsigned us = 0;
	int ss = 0;

	memcpy(h, name, strnlen(name, 100));
	octal(h + 100, 8, 0644);
	octal(h + 108, 8, 1000);
	octal(h + 116, 8, 1000);
	if (raw_size) {
		memcpy(h + 124, raw_size, strnlen(raw_size, 12));
	} else if (flags & F_B256) {
		h[124] = 0x80;
		for (int i = 11; i >= 4; i--, size >>= 8)
			h[124 + i] = size & 0xff;
	} else {
		octal(h + 124, 12, size);
	}
	octal(h + 136, 12, 1700000000);
	h[156] = (unsigned char)type;
	if (flags & F_GNU)
		memcpy(h + 257, "ustar  ", 8);
	else if (!(flags & F_V7))
		memcpy(h + 257,
		       "ustar\0"
		       "00",
		       8);
	if (prefix)
		memcpy(h + 345, prefix, strnlen(prefix, 155));
	memset(h + 148, ' ', 8);
	for (int i = 0; i < 512; i++) {
		us += h[i];
		ss += (signed char)h[i];
	}
	octal(h + 148, 7, (flags & F_SIGNED) ? (unsigned)ss : us);
	h[155] = ' ';
	if (flags & F_BADSUM)
		h[150] ^= 1;
	put(t, h, 512);
}

static void hdr(struct tb *t, const char *name, char type,
		unsigned long long size, int flags)
{
	hdr_full(t, name, NULL, type, size, NULL, flags);
}

static void file(struct tb *t, const char *name, const char *content)
{
	hdr(t, name, '0', strlen(content), 0);
	put(t, content, strlen(content));
	pad(t);
}

static void end(struct tb *t)
{
	static const unsigned char zero[1024];
	put(t, zero, sizeof(zero));
}

static void meta(struct tb *t, char type, const void *d, size_t n)
{
	hdr(t, "././@LongLink", type, n, F_GNU);
	put(t, d, n);
	pad(t);
}

static void longname(struct tb *t, const char *name)
{
	meta(t, 'L', name, strlen(name) + 1);
}

/* One PAX record "<len> key=value\n" appended to out (len bytes of value). */
static size_t paxrec(char *out, const char *key, const char *val, size_t vlen)
{
	size_t n = strlen(key) + vlen + 3, total = n + 1;
	char num[24];
	while ((size_t)snprintf(num, sizeof(num), "%zu", total) + n != total)
		total++;
	size_t o = (size_t)snprintf(out, 64, "%zu %s=", total, key);
	memcpy(out + o, val, vlen);
	out[o + vlen] = '\n';
	return total;
}

static void pax1(struct tb *t, char type, const char *key, const char *val)
{
	char rec[TAR_PAX_MAX * 2];
	size_t n = paxrec(rec, key, val, strlen(val));
	hdr(t, "PaxHeaders/x", type, n, 0);
	put(t, rec, n);
	pad(t);
}

/* ---- running the parser ------------------------------------------------- */

struct log {
	char text[8192];
	size_t n;
	int stop_after; /* >0: return -EINTR after this many entries */
	int seen;
	const char *err; /* tar_parser_error after finish */
};

static int on_entry(void *ud, const struct tar_entry *e)
{
	struct log *l = ud;
	l->n += (size_t)snprintf(
		l->text + l->n, sizeof(l->text) - l->n, "%s:%llu:%s;", e->name,
		(unsigned long long)e->size, e->reject ? e->reject : "ok");
	cr_assert_lt(l->n, sizeof(l->text));
	if (!e->reject && e->size <= TAR_SMALL_MAX)
		cr_assert_not_null(e->small_data, "%s", e->name);
	else
		cr_assert_null(e->small_data, "%s", e->name);
	if (l->stop_after && ++l->seen == l->stop_after)
		return -EINTR;
	return 0;
}

/* Feed in chunks of `chunk` bytes (0: all at once). */
static void run(const struct tb *t, size_t chunk, struct log *l, int *feed_rc,
		int *fin_rc)
{
	struct tar_parser *p = tar_parser_new(on_entry, l);
	size_t off = 0;

	*feed_rc = 0;
	if (!chunk)
		chunk = t->len ? t->len : 1;
	while (off < t->len) {
		size_t n = t->len - off < chunk ? t->len - off : chunk;
		int r = tar_parser_feed(p, t->buf + off, n);
		if (r && !*feed_rc)
			*feed_rc = r;
		off += n;
	}
	*fin_rc = tar_parser_finish(p);
	if (*feed_rc)
		cr_assert_eq(*fin_rc, *feed_rc, "errors must stick");
	l->err = tar_parser_error(p);
	if (*fin_rc)
		cr_assert_neq(l->err[0], '\0');
	else
		cr_expect_eq(tar_parser_offset(p), t->len);
	tar_parser_free(p);
}

static const size_t chunks[] = {0, 1, 3, 100, 511, 512, 513, 1536, 4096};

struct tcase {
	const char *what;
	void (*build)(struct tb *t);
	int feed_rc, fin_rc;
	const char *log;
	const char *err; /* expected tar_parser_error, "" when clean */
};

static void check_case(const struct tcase *c)
{
	struct tb t = {0};
	c->build(&t);
	for (size_t i = 0; i < sizeof(chunks) / sizeof(chunks[0]); i++) {
		struct log l = {0};
		int frc, fin;
		run(&t, chunks[i], &l, &frc, &fin);
		cr_expect_eq(frc, c->feed_rc, "%s (chunk %zu): feed %d",
			     c->what, chunks[i], frc);
		cr_expect_eq(fin, c->fin_rc, "%s (chunk %zu): finish %d",
			     c->what, chunks[i], fin);
		cr_expect_str_eq(l.text, c->log, "%s (chunk %zu)", c->what,
				 chunks[i]);
		cr_expect_str_eq(l.err, c->err ? c->err : "", "%s (chunk %zu)",
				 c->what, chunks[i]);
	}
	free(t.buf);
}

/* ---- well-formed archives ----------------------------------------------- */

static void b_plain(struct tb *t)
{
	file(t, "a.jpg", "abc");
	file(t, "dir/a.cls", "7\n");
	end(t);
}

static void b_empty_file(struct tb *t)
{
	file(t, "e.txt", "");
	end(t);
}

#define TEN "0123456789"
#define LONG_NAME TEN TEN TEN TEN TEN "/" TEN TEN TEN TEN TEN TEN TEN ".jpg"

static void b_gnu_longname(struct tb *t)
{
	longname(t, LONG_NAME);
	hdr(t, "truncated-name", '0', 2, F_GNU);
	put(t, "hi", 2);
	pad(t);
	file(t, "b.cls", "1");
	end(t);
}

static void b_longlink(struct tb *t)
{
	meta(t, 'K', "target/of/link", 15);
	hdr(t, "lnk", '2', 0, F_GNU);
	file(t, "c.jpg", "x");
	end(t);
}

static void b_pax_path_size(struct tb *t)
{
	char rec[256];
	size_t n = paxrec(rec, "mtime", "1700000000.5", 12);
	n += paxrec(rec + n, "path", "pax/long.jpg", 12);
	n += paxrec(rec + n, "size", "5", 1);
	hdr(t, "PaxHeaders/long.jpg", 'x', n, 0);
	put(t, rec, n);
	pad(t);
	hdr(t, "short", '0', 999, 0); /* pax size wins over 999 */
	put(t, "hello", 5);
	pad(t);
	file(t, "after", "z"); /* overrides apply to one entry only */
	end(t);
}

static void b_pax_global(struct tb *t)
{
	pax1(t, 'g', "path", "ignored.jpg");
	file(t, "g.jpg", "g");
	end(t);
}

static void b_pax_empty_path(struct tb *t)
{
	pax1(t, 'x', "path", "");
	file(t, "hdr.jpg", "h");
	end(t);
}

static void b_two_pax(struct tb *t)
{
	pax1(t, 'x', "path", "first.jpg");
	pax1(t, 'x', "comment", "a comment long enough to matter");
	file(t, "hdr.jpg", "h");
	end(t);
}

static void b_base256(struct tb *t)
{
	hdr(t, "big.bin", '0', 600, F_B256 | F_GNU);
	for (int i = 0; i < 600; i++)
		put(t, "x", 1);
	pad(t);
	end(t);
}

static void b_signed_sum(struct tb *t)
{
	hdr(t, "caf\xc3\xa9.jpg", '0', 1, F_SIGNED);
	put(t, "s", 1);
	pad(t);
	end(t);
}

static void b_prefix(struct tb *t)
{
	hdr_full(t, "name.jpg", "some/prefix", '0', 1, NULL, 0);
	put(t, "p", 1);
	pad(t);
	/* GNU headers reuse the prefix bytes: not a name part. */
	hdr_full(t, "gnu.jpg", "notaprefix", '0', 1, NULL, F_GNU);
	put(t, "q", 1);
	pad(t);
	end(t);
}

static void b_v7(struct tb *t)
{
	hdr(t, "v7dir/", '0', 0, F_V7);
	hdr(t, "v7dir/f.jpg", '0', 1, F_V7);
	put(t, "v", 1);
	pad(t);
	end(t);
}

static void b_dot_slash(struct tb *t)
{
	hdr(t, "./", '5', 0, 0);
	file(t, "./x/y.jpg", "y");
	file(t, "././z.jpg", "z");
	end(t);
}

static void b_one_zero_block(struct tb *t)
{
	static const unsigned char zero[512];
	file(t, "a", "a");
	put(t, zero, 512);
}

static void b_no_end(struct tb *t)
{
	file(t, "a", "a");
}

static void b_nothing(struct tb *t)
{
	(void)t;
}

static void b_trailing(struct tb *t)
{
	file(t, "a", "a");
	end(t);
	put(t, "garbage after the end is ignored", 32);
}

static void b_large_member(struct tb *t)
{
	static char big[TAR_SMALL_MAX + 2];
	memset(big, 'b', sizeof(big) - 1); /* TAR_SMALL_MAX + 1 bytes */
	file(t, "big", big);
	file(t, "max", big + 1);
	end(t);
}

/* ---- rejected entries --------------------------------------------------- */

static void b_types(struct tb *t)
{
	hdr(t, "hl", '1', 0, 0);
	hdr(t, "sl", '2', 0, 0);
	hdr(t, "chr", '3', 0, 0);
	hdr(t, "blk", '4', 0, 0);
	hdr(t, "d", '5', 0, 0);
	hdr(t, "fifo", '6', 0, 0);
	hdr(t, "vol", 'V', 0, 0);
	hdr(t, "sparse", 'S', 0, F_GNU);
	hdr(t, "cont", '7', 1, 0);
	put(t, "c", 1);
	pad(t);
	hdr(t, "nul", '\0', 1, 0);
	put(t, "n", 1);
	pad(t);
	end(t);
}

static void b_bad_names(struct tb *t)
{
	file(t, "/etc/passwd", "x");
	file(t, "../up.jpg", "x");
	file(t, "a/../../b.jpg", "x");
	file(t, "..", "x");
	file(t, "a//b.jpg", "x");
	file(t, "a/./b.jpg", "x");
	file(t, "a/b\x01.jpg", "x");
	file(t, "tab\there", "x");
	file(t, "del\x7f", "x");
	file(t, "ok/fine.jpg", "x");
	end(t);
}

/* Components over 255 bytes (PAX and GNU long names) and blank ones. */
static void b_long_blank_names(struct tb *t)
{
	char name[300];
	memset(name, 'a', 256);
	memcpy(name + 256, ".jpg", 5);
	pax1(t, 'x', "path", name);
	file(t, "hdr.jpg", "x");
	longname(t, name + 1); /* 255 a's then .jpg: 259 bytes */
	hdr(t, "x", '0', 1, F_GNU);
	put(t, "y", 1);
	pad(t);
	memset(name, 'b', 251);
	memcpy(name + 251, ".jpg", 5); /* exactly 255 */
	pax1(t, 'x', "path", name);
	file(t, "hdr2.jpg", "z");
	file(t, " /x.jpg", "x");
	file(t, "a/   /x.jpg", "x");
	file(t, "  ", "x");
	file(t, " a/x.jpg", "x");
	end(t);
}

static void b_empty_name(struct tb *t)
{
	hdr(t, "", '0', 0, 0);
	longname(t, "");
	hdr(t, "x", '0', 0, F_GNU);
	end(t);
}

static void b_pax_nul(struct tb *t)
{
	char rec[64];
	size_t n = paxrec(rec, "path", "a\0b.jpg", 7);
	hdr(t, "PaxHeaders/n", 'x', n, 0);
	put(t, rec, n);
	pad(t);
	file(t, "n.jpg", "n");
	end(t);
}

static void b_pax_sparse(struct tb *t)
{
	pax1(t, 'x', "GNU.sparse.major", "1");
	file(t, "s.jpg", "s");
	end(t);
}

static void b_longname_link(struct tb *t)
{
	longname(t, "long/symlink/name");
	hdr(t, "x", '2', 0, F_GNU);
	end(t);
}

/* ---- malformed archives ------------------------------------------------- */

static void b_bad_sum(struct tb *t)
{
	file(t, "a", "a");
	hdr(t, "b", '0', 0, F_BADSUM);
	end(t);
}

static void b_size_not_octal(struct tb *t)
{
	hdr_full(t, "a", NULL, '0', 0, "0000000001x", 0);
	end(t);
}

static void b_size_digit_8(struct tb *t)
{
	hdr_full(t, "a", NULL, '0', 0, "00000000008", 0);
	end(t);
}

static void b_size_b256_overflow(struct tb *t)
{
	unsigned char h[512];
	hdr(t, "a", '0', 0, F_B256);
	memcpy(h, t->buf + t->len - 512, 512);
	memset(h + 125, 0xff, 11); /* > 2^64 */
	/* re-sum */
	memset(h + 148, ' ', 8);
	unsigned us = 0;
	for (int i = 0; i < 512; i++)
		us += h[i];
	octal(h + 148, 7, us);
	memcpy(t->buf + t->len - 512, h, 512);
	end(t);
}

static void b_size_negative(struct tb *t)
{
	hdr_full(t, "a", NULL, '0', 0,
		 "\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff", 0);
	end(t);
}

static void b_size_huge(struct tb *t)
{
	hdr(t, "a", '0', 1ULL << 62,
	    F_B256); /* fits the field, not the limit */
	end(t);
}

static void b_pax_size_huge(struct tb *t)
{
	pax1(t, 'x', "size", "18446744073709551615");
	file(t, "a", "a");
	end(t);
}

static void b_past_end(struct tb *t)
{
	hdr(t, "a.jpg", '0', 100000, 0);
	put(t, "only a little data", 18);
	pad(t);
	end(t);
}

static void b_cut_header(struct tb *t)
{
	file(t, "a", "a");
	hdr(t, "b", '0', 0, 0);
	t->len -= 100;
}

static void b_cut_padding(struct tb *t)
{
	file(t, "a", "abc");
	t->len -= 10;
}

static void b_longname_too_long(struct tb *t)
{
	static char name[TAR_NAME_MAX + 2];
	memset(name, 'a', sizeof(name) - 1);
	longname(t, name);
	file(t, "x", "x");
	end(t);
}

static void b_longname_no_nul(struct tb *t)
{
	static char name[TAR_NAME_MAX + 1];
	memset(name, 'a', sizeof(name));
	meta(t, 'L', name, sizeof(name)); /* 4097 bytes, no terminator */
	file(t, "x", "x");
	end(t);
}

static void b_longname_max(struct tb *t)
{
	static char name[TAR_NAME_MAX + 1];
	memset(name, 'a', sizeof(name) - 1);
	/* Components of 200 bytes: under TAR_COMPONENT_MAX. */
	for (size_t i = 200; i < sizeof(name) - 1; i += 201)
		name[i] = '/';
	longname(t, name);
	hdr(t, "x", '0', 0, F_GNU);
	end(t);
}

static void b_longlink_too_long(struct tb *t)
{
	static char name[TAR_NAME_MAX + 2];
	meta(t, 'K', name, sizeof(name));
	end(t);
}

static void b_pax_path_too_long(struct tb *t)
{
	static char name[TAR_NAME_MAX + 2];
	memset(name, 'p', sizeof(name) - 1);
	pax1(t, 'x', "path", name);
	file(t, "x", "x");
	end(t);
}

static void b_pax_too_big(struct tb *t)
{
	static char val[TAR_PAX_MAX];
	memset(val, 'c', sizeof(val) - 1);
	pax1(t, 'x', "comment", val);
	file(t, "x", "x");
	end(t);
}

static void pax_raw(struct tb *t, const char *rec)
{
	hdr(t, "PaxHeaders/bad", 'x', strlen(rec), 0);
	put(t, rec, strlen(rec));
	pad(t);
	file(t, "x", "x");
	end(t);
}

static void b_pax_bad_len(struct tb *t)
{
	pax_raw(t, "99 path=a\n");
}

static void b_pax_no_nl(struct tb *t)
{
	pax_raw(t, "10 path=ab");
}

static void b_pax_no_eq(struct tb *t)
{
	pax_raw(t, "9 pathab\n");
}

static void b_pax_no_space(struct tb *t)
{
	pax_raw(t, "9_path=a\n");
}

static void b_pax_empty_key(struct tb *t)
{
	pax_raw(t, "6 =ab\n");
}

static void b_pax_short_len(struct tb *t)
{
	pax_raw(t, "2 \n");
}

static void b_pax_bad_size(struct tb *t)
{
	pax_raw(t, "11 size=1x\n");
}

static void b_pax_trailing(struct tb *t)
{
	pax_raw(t, "10 path=a\nXX");
}

static void b_meta_then_end(struct tb *t)
{
	longname(t, "dangling");
	end(t);
}

static void b_meta_then_eof(struct tb *t)
{
	pax1(t, 'x', "path", "dangling");
}

static void b_sparse_ext(struct tb *t)
{
	unsigned char *h;
	hdr(t, "sp", 'S', 0, F_GNU);
	h = t->buf + t->len - 512;
	h[482] = 1;
	memset(h + 148, ' ', 8);
	unsigned us = 0;
	for (int i = 0; i < 512; i++)
		us += h[i];
	octal(h + 148, 7, us);
	end(t);
}

#define A16 "aaaaaaaaaaaaaaaa"
#define A64 A16 A16 A16 A16
#define A256 A64 A64 A64 A64
#define A255 A64 A64 A64 A16 A16 A16 "aaaaaaaaaaaaaaa"
#define B16 "bbbbbbbbbbbbbbbb"
#define SHORT251 B16 B16 B16 B16 B16 B16 B16 B16 B16 B16 B16 B16 B16 B16 B16 \
	"bbbbbbbbbbb"
#define OK 0, 0
#define BAD_FEED -EBADMSG, -EBADMSG
#define BAD_FINISH 0, -EBADMSG

static const struct tcase cases[] = {
	{"plain ustar", b_plain, OK, "a.jpg:3:ok;dir/a.cls:2:ok;", ""},
	{"empty file", b_empty_file, OK, "e.txt:0:ok;", ""},
	{"GNU longname", b_gnu_longname, OK, "" LONG_NAME ":2:ok;b.cls:1:ok;",
	 ""},
	{"GNU longlink", b_longlink, OK, "lnk:0:symlink;c.jpg:1:ok;", ""},
	{"PAX path and size", b_pax_path_size, OK,
	 "pax/long.jpg:5:ok;after:1:ok;", ""},
	{"PAX global ignored", b_pax_global, OK, "g.jpg:1:ok;", ""},
	{"PAX empty path", b_pax_empty_path, OK, "hdr.jpg:1:ok;", ""},
	{"two PAX headers", b_two_pax, OK, "hdr.jpg:1:ok;", ""},
	{"base-256 size", b_base256, OK, "big.bin:600:ok;", ""},
	{"signed checksum", b_signed_sum, OK, "caf\xc3\xa9.jpg:1:ok;", ""},
	{"ustar prefix", b_prefix, OK,
	 "some/prefix/name.jpg:1:ok;gnu.jpg:1:ok;", ""},
	{"v7", b_v7, OK, "v7dir/:0:directory;v7dir/f.jpg:1:ok;", ""},
	{"dot slash", b_dot_slash, OK, ":0:directory;x/y.jpg:1:ok;z.jpg:1:ok;",
	 ""},
	{"one zero block", b_one_zero_block, OK, "a:1:ok;", ""},
	{"no end blocks", b_no_end, OK, "a:1:ok;", ""},
	{"empty input", b_nothing, OK, "", ""},
	{"trailing bytes", b_trailing, OK, "a:1:ok;", ""},
	{"small limit", b_large_member, OK, "big:257:ok;max:256:ok;", ""},
	{"types", b_types, OK,
	 "hl:0:hard link;sl:0:symlink;chr:0:device;blk:0:device;d:0:directory;"
	 "fifo:0:fifo;vol:0:unsupported type;sparse:0:sparse file;cont:1:ok;"
	 "nul:1:ok;",
	 ""},
	{"bad names", b_bad_names, OK,
	 "/etc/passwd:1:absolute name;../up.jpg:1:dot-dot component;"
	 "a/../../b.jpg:1:dot-dot component;..:1:dot-dot component;"
	 "a//b.jpg:1:empty component;a/./b.jpg:1:dot component;"
	 "a/b\x01.jpg:1:control character;tab\there:1:control character;"
	 "del\x7f:1:control character;ok/fine.jpg:1:ok;",
	 ""},
	{"long and blank names", b_long_blank_names, OK,
	 A256 ".jpg:1:component too long;" A255 ".jpg:1:component too long;"
	 SHORT251 ".jpg:1:ok;"
	 " /x.jpg:1:blank component;a/   /x.jpg:1:blank component;"
	 "  :1:blank component; a/x.jpg:1:ok;",
	 ""},
	{"empty names", b_empty_name, OK, ":0:empty name;:0:empty name;", ""},
	{"NUL in PAX path", b_pax_nul, OK, "a:1:NUL in name;", ""},
	{"PAX sparse", b_pax_sparse, OK, "s.jpg:1:sparse file;", ""},
	{"longname on a link", b_longname_link, OK,
	 "long/symlink/name:0:symlink;", ""},
	{"longname at the limit", b_longname_max, OK, NULL, ""},
	{"bad checksum", b_bad_sum, BAD_FEED, "a:1:ok;", "bad header checksum"},
	{"size not octal", b_size_not_octal, BAD_FEED, "", "bad size field"},
	{"size digit 8", b_size_digit_8, BAD_FEED, "", "bad size field"},
	{"base-256 overflow", b_size_b256_overflow, BAD_FEED, "",
	 "bad size field"},
	{"negative base-256", b_size_negative, BAD_FEED, "", "bad size field"},
	{"size beyond limit", b_size_huge, BAD_FEED, "",
	 "size field out of range"},
	{"PAX size beyond limit", b_pax_size_huge, BAD_FEED, "",
	 "size field out of range"},
	{"size past the end", b_past_end, BAD_FINISH, "a.jpg:100000:ok;",
	 "archive truncated"},
	{"cut in a header", b_cut_header, BAD_FINISH, "a:1:ok;",
	 "archive truncated"},
	{"cut in padding", b_cut_padding, BAD_FINISH, "a:3:ok;",
	 "archive truncated"},
	{"longname too long", b_longname_too_long, BAD_FEED, "",
	 "long name too long"},
	{"longname without NUL", b_longname_no_nul, BAD_FEED, "",
	 "long name too long"},
	{"longlink too long", b_longlink_too_long, BAD_FEED, "",
	 "long link name too long"},
	{"PAX path too long", b_pax_path_too_long, BAD_FEED, "",
	 "PAX path too long"},
	{"PAX header too big", b_pax_too_big, BAD_FEED, "",
	 "PAX header too large"},
	{"PAX length past data", b_pax_bad_len, BAD_FEED, "",
	 "malformed PAX record"},
	{"PAX no newline", b_pax_no_nl, BAD_FEED, "", "malformed PAX record"},
	{"PAX no equals", b_pax_no_eq, BAD_FEED, "", "malformed PAX record"},
	{"PAX no space", b_pax_no_space, BAD_FEED, "", "malformed PAX record"},
	{"PAX empty key", b_pax_empty_key, BAD_FEED, "",
	 "malformed PAX record"},
	{"PAX record too short", b_pax_short_len, BAD_FEED, "",
	 "malformed PAX record"},
	{"PAX bad size", b_pax_bad_size, BAD_FEED, "", "bad PAX size"},
	{"PAX trailing junk", b_pax_trailing, BAD_FEED, "",
	 "malformed PAX record"},
	{"longname then end", b_meta_then_end, BAD_FEED, "",
	 "extended header not followed by an entry"},
	{"PAX then EOF", b_meta_then_eof, BAD_FINISH, "",
	 "archive ends after an extended header"},
	{"extended sparse", b_sparse_ext, BAD_FEED, "",
	 "extended GNU sparse header"},
};

Test(tar, table)
{
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		if (cases[i].log) {
			check_case(&cases[i]);
			continue;
		}
		/* Long expected names: compare lengths instead. */
		struct tb t = {0};
		struct log l = {0};
		int frc, fin;
		cases[i].build(&t);
		run(&t, 1, &l, &frc, &fin);
		cr_expect_eq(frc, cases[i].feed_rc, "%s", cases[i].what);
		cr_expect_eq(fin, cases[i].fin_rc, "%s", cases[i].what);
		cr_expect_eq(strlen(l.text), TAR_NAME_MAX + strlen(":0:ok;"),
			     "%s", cases[i].what);
		free(t.buf);
	}
}

/* ---- details ------------------------------------------------------------- */

struct capture {
	uint64_t off[8], size[8];
	char data[8][TAR_SMALL_MAX + 1];
	int n;
};

static int on_capture(void *ud, const struct tar_entry *e)
{
	struct capture *c = ud;
	cr_assert_lt(c->n, 8);
	c->off[c->n] = e->data_offset;
	c->size[c->n] = e->size;
	if (e->small_data)
		memcpy(c->data[c->n], e->small_data, e->size);
	c->n++;
	return 0;
}

Test(tar, offsets_and_small_data)
{
	struct tb t = {0};
	struct capture c = {0};
	struct tar_parser *p = tar_parser_new(on_capture, &c);

	file(&t, "a.jpg", "abc");
	longname(&t, "some/long/name.cls");
	hdr(&t, "x", '0', 5, F_GNU);
	put(&t, "12345", 5);
	pad(&t);
	end(&t);
	for (size_t i = 0; i < t.len; i++)
		cr_assert_eq(tar_parser_feed(p, t.buf + i, 1), 0);
	cr_assert_eq(tar_parser_finish(p), 0);
	cr_assert_eq(c.n, 2);
	cr_expect_eq(c.off[0], 512);
	cr_expect_eq(c.size[0], 3);
	cr_expect_str_eq(c.data[0], "abc");
	cr_expect_eq(c.off[1], 512 * 5);
	cr_expect_str_eq(c.data[1], "12345");
	cr_expect_str_eq(tar_parser_error(p), "");
	tar_parser_free(p);
	free(t.buf);
}

Test(tar, callback_error_stops_and_sticks)
{
	struct tb t = {0};
	struct log l = {.stop_after = 1};
	struct tar_parser *p = tar_parser_new(on_entry, &l);

	file(&t, "a", "a");
	file(&t, "b", "b");
	end(&t);
	cr_assert_eq(tar_parser_feed(p, t.buf, t.len), -EINTR);
	cr_expect_str_eq(l.text, "a:1:ok;");
	cr_expect_eq(tar_parser_feed(p, t.buf, 512), -EINTR);
	cr_expect_eq(tar_parser_finish(p), -EINTR);
	tar_parser_free(p);
	free(t.buf);
	tar_parser_free(NULL);
}

/* Many members, random chunk sizes: the result must not depend on how the
 * bytes arrive. */
Test(tar, random_chunking)
{
	struct tb t = {0};
	struct log whole = {0};
	int frc, fin;
	char name[64], body[700];

	for (int i = 0; i < 60; i++) {
		size_t n = (size_t)(i * 37) % sizeof(body);
		memset(body, 'a' + i % 26, n);
		body[n] = '\0';
		snprintf(name, sizeof(name), "d%d/k%03d.%s", i % 3, i,
			 i % 2 ? "jpg" : "cls");
		if (i % 7 == 0)
			longname(&t, name);
		if (i % 11 == 0)
			pax1(&t, 'x', "path", name);
		file(&t, name, body);
	}
	end(&t);
	run(&t, 0, &whole, &frc, &fin);
	cr_assert_eq(frc, 0);
	cr_assert_eq(fin, 0);
	srand(42);
	for (int round = 0; round < 50; round++) {
		struct log l = {0};
		struct tar_parser *p = tar_parser_new(on_entry, &l);
		size_t off = 0;
		while (off < t.len) {
			size_t n = 1 + (size_t)rand() % 1500;
			if (n > t.len - off)
				n = t.len - off;
			cr_assert_eq(tar_parser_feed(p, t.buf + off, n), 0);
			off += n;
		}
		cr_assert_eq(tar_parser_finish(p), 0);
		cr_assert_str_eq(l.text, whole.text);
		tar_parser_free(p);
	}
	free(t.buf);
}

/* Archives written by GNU tar (gnu, posix/pax and ustar formats). */
static void check_fixture(const char *file, const char *want)
{
	const char *dir = getenv("ECHOFS_TEST_DATA");
	char path[4096];
	struct tb t = {0};
	unsigned char buf[4096];
	size_t n;
	FILE *f;
	struct log l = {0};
	int frc, fin;

	if (!dir)
		cr_skip_test(
			"ECHOFS_TEST_DATA not set (run through meson test)");
	snprintf(path, sizeof(path), "%s/tar/%s", dir, file);
	f = fopen(path, "rb");
	cr_assert_not_null(f, "%s", path);
	while ((n = fread(buf, 1, sizeof(buf), f)) > 0)
		put(&t, buf, n);
	fclose(f);
	run(&t, 7, &l, &frc, &fin);
	cr_expect_eq(frc, 0);
	cr_expect_eq(fin, 0);
	cr_expect_str_eq(l.text, want, "%s", file);
	free(t.buf);
}

#define X150 "xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx"
#define D90                                                                    \
	"dddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddddd" \
	"dddddddddddddddddddddd"
#define GNU_LISTING                                                            \
	"n01/:0:directory;n01/a.cls:2:ok;n01/a.jpg:8:ok;"                      \
	"n01/caf\xc3\xa9.jpg:3:ok;n01/deep/:0:directory;"                      \
	"n01/deep/" X150 X150 X150 ".jpg:4:ok;n01/link.jpg:0:symlink;"

Test(tar, gnu_tar_gnu_format)
{
	check_fixture("gnu.tar", GNU_LISTING);
}

Test(tar, gnu_tar_pax_format)
{
	check_fixture("pax.tar", GNU_LISTING);
}

Test(tar, gnu_tar_ustar_prefix)
{
	check_fixture("ustar.tar",
		      "n01/:0:directory;n01/a.jpg:8:ok;"
		      "n01/" D90 "/:0:directory;n01/" D90 "/p.jpg:3:ok;");
}
