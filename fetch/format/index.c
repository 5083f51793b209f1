/* index.c - reading the dataset index's text format: parsing it in memory
 * and loading it from a local file (see index.h).
 *
 * Loading is the hot path (14.2 M samples, 0.9 GB of text, for
 * ImageNet-21k). The parser only reads the text (fields are pointer and
 * length), so a local file is read in chunks into one reused buffer and a
 * fetched one is parsed where it arrived: one pass over the bytes, and no
 * fresh memory for the text. The strings an index keeps (URLs, ETags, keys)
 * are copied side by side into one region sized by the text and trimmed
 * after (index_mem.c holds the rest of the index's storage). */
#include "fetch/format/index_bin.h"
#include "fetch/format/index_int.h"

#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/bigmap.h"
#include "common/util.h"

#define SUM_HEX 16
#define MAX_FIELDS 8

/* A parsed key's offset into the text fits index_sample.key. */
_Static_assert(INDEX_FILE_MAX <= (size_t)INDEX_KEYS_MAX + 1,
	       "key offsets need more than 32 bits");

struct parser {
	struct index *ix;
	int version; /* 1, 2 or 3 (F lines) */
	int extra;   /* fields after the format 1 ones: 1 for the sum in v2 */
	const char *end; /* past the text */
	size_t line;	 /* 1-based number of the line being parsed */
	const char *why;
	int bad_field; /* split: the field holding the control character */
	char *kept;    /* where the next kept string goes (its region has
			* room for the whole text) */
};

/* Keep a field: copied, NUL-terminated, into the kept region. */
static const char *keep(struct parser *ps, const char *s, size_t len)
{
	char *d = ps->kept;

	memcpy(d, s, len);
	d[len] = '\0';
	ps->kept += len + 1;
	return d;
}

/* Count one skipped M line (its names break the rules in index.h). */
static void skip(struct parser *ps, bool label, const char *why)
{
	struct index_skips *k = &ps->ix->skipped;

	if (label)
		k->labels++;
	else
		k->names++;
	if (!k->first_line) {
		k->first_line = ps->line;
		k->first_why = why;
	}
}

static int bad(struct parser *ps, const char *why)
{
	ps->why = why;
	return -1;
}

/* Split one line at tabs, reading only (the text may be a read-only
 * mapping, and is not NUL-terminated). Returns the field count
 * (MAX_FIELDS + 1 means too many) and sets *next to the following line,
 * or -1 on a control character. */
static int split(struct parser *ps, const char *s, const char **f, size_t *fl,
		 const char **next)
{
	const char *start = s;
	int n = 0;

	for (;; s++) {
		unsigned char c = s < ps->end ? (unsigned char)*s : '\n';
		if (c >= 0x20 && c != 0x7f)
			continue;
		if (c != '\t' && c != '\n') {
			ps->bad_field = n;
			/* CRLF line ends break every line: not a name. */
			if (c == '\r' && s + 1 < ps->end && s[1] == '\n')
				ps->bad_field = -1;
			return bad(ps, "control character in a field");
		}
		if (n == MAX_FIELDS)
			return MAX_FIELDS + 1;
		f[n] = start;
		fl[n] = (size_t)(s - start);
		n++;
		if (c != '\t') {
			*next = s < ps->end ? s + 1 : ps->end;
			return n;
		}
		start = s + 1;
	}
}

/* Exactly SUM_HEX lower-case hex digits: one spelling per value, so a file
 * that loads is written back byte for byte. */
static int parse_sum(const char *s, size_t len, uint64_t *out)
{
	uint64_t v = 0;

	if (len != SUM_HEX)
		return -1;
	for (size_t i = 0; i < len; i++) {
		char c = s[i];
		unsigned d;
		if (c >= '0' && c <= '9')
			d = (unsigned)(c - '0');
		else if (c >= 'a' && c <= 'f')
			d = (unsigned)(c - 'a' + 10);
		else
			return -1;
		v = v << 4 | d;
	}
	*out = v;
	return 0;
}

static int parse_shard(struct parser *ps, const char **f, size_t *fl, int n)
{
	struct index *ix = ps->ix;
	struct index_shard *s;
	uint64_t size;

	if (n != 4 + ps->extra)
		return bad(ps,
			   ps->extra ? "S needs 5 fields" : "S needs 4 fields");
	if (fl[1] == 0 || fl[3] == 0)
		return bad(ps, "empty URL or ETag");
	if (parse_u64_n(f[2], fl[2], &size))
		return bad(ps, "bad shard size");
	if (ix->nshards >= UINT32_MAX)
		return bad(ps, "too many shards");
	if (ix->nshards == ix->cap_shards) {
		ix->cap_shards = ix->cap_shards ? 2 * ix->cap_shards : 64;
		ix->shards = xrealloc(ix->shards,
				      ix->cap_shards * sizeof(*ix->shards));
	}
	s = &ix->shards[ix->nshards];
	s->sum = 0;
	if (ps->extra && parse_sum(f[4], fl[4], &s->sum))
		return bad(ps, "bad shard checksum");
	ix->nshards++;
	s->url = keep(ps, f[1], fl[1]);
	s->size = size;
	s->etag = fl[3] == 1 && f[3][0] == '-' ? "" : keep(ps, f[3], fl[3]);
	return 0;
}

static int parse_sample(struct parser *ps, const char **f, size_t *fl, int n)
{
	struct index *ix = ps->ix;
	struct index_sample *s = &ix->samples[ix->nsamples];
	uint64_t shard, off, size;
	char lext[16];
	const char *why;
	int64_t names;

	if (n != 7 + ps->extra)
		return bad(ps,
			   ps->extra ? "M needs 8 fields" : "M needs 7 fields");
	if (parse_u64_n(f[1], fl[1], &shard) || shard >= ix->nshards)
		return bad(ps, "bad or unknown shard number");
	if (parse_u64_n(f[2], fl[2], &off) || parse_u64_n(f[3], fl[3], &size))
		return bad(ps, "bad offset or size");
	if (size > INDEX_SAMPLE_MAX)
		return bad(ps, "sample larger than 4 GiB");
	if (!index_in_shard(ix, (uint32_t)shard, off, size))
		return bad(ps, "sample lies outside its shard");
	s->sum = 0;
	if (ps->extra && parse_sum(f[7], fl[7], &s->sum))
		return bad(ps, "bad sample checksum");
	why = index_names_reject(f[4], fl[4], f[5], fl[5], f[6], fl[6]);
	if (why) {
		skip(ps, why == index_reject_label, why);
		return 0;
	}
	index_lower_into(lext, f[6], fl[6]); /* ext_ok: fl[6] < 16 */
	names = index_names_of(ix, f[4], fl[4], lext, fl[6]);
	if (names < 0)
		return bad(ps, "too many labels");
	s->shard = (uint32_t)shard;
	s->offset = off;
	s->size = (uint32_t)size;
	s->names = (uint32_t)names;
	/* the text is below INDEX_FILE_MAX: the offset fits (index.h) */
	s->key = (uint32_t)(keep(ps, f[5], fl[5]) - ix->arena->text);
	ix->nsamples++;
	return 0;
}

/* An F line (format 3): one member. */
static int parse_member(struct parser *ps, const char **f, size_t *fl, int n)
{
	struct index *ix = ps->ix;
	uint64_t shard, off, size, sum;
	const char *why;

	if (ps->version < 3)
		return bad(ps, "F lines need format 3");
	if (n != 7)
		return bad(ps, "F needs 7 fields");
	if (parse_u64_n(f[1], fl[1], &shard) || shard >= ix->nshards)
		return bad(ps, "bad or unknown shard number");
	if (parse_u64_n(f[2], fl[2], &off) || parse_u64_n(f[3], fl[3], &size))
		return bad(ps, "bad offset or size");
	if (size > INDEX_SAMPLE_MAX)
		return bad(ps, "member larger than 4 GiB");
	if (!index_in_shard(ix, (uint32_t)shard, off, size))
		return bad(ps, "member lies outside its shard");
	if (parse_sum(f[6], fl[6], &sum))
		return bad(ps, "bad member checksum");
	why = index_member_reject(f[4], fl[4], f[5], fl[5]);
	if (why) {
		ix->skipped.members++;
		if (!ix->skipped.first_line) {
			ix->skipped.first_line = ps->line;
			ix->skipped.first_why = why;
		}
		return 0;
	}
	if (index_grow_members(ix) ||
	    index_put_member(ix, (uint32_t)shard, off, size, f[5], fl[5]))
		return bad(ps, "out of memory");
	ix->members[ix->nmembers].sum = sum;
	ix->members[ix->nmembers].key =
		(uint32_t)(keep(ps, f[4], fl[4]) - ix->arena->text);
	ix->nmembers++;
	return 0;
}

/* The line after the one at p (or the end). */
static const char *next_line(const struct parser *ps, const char *p)
{
	const char *nl = memchr(p, '\n', (size_t)(ps->end - p));
	return nl ? nl + 1 : ps->end;
}

/* A control character in a name field of an M line (label, key or ext):
 * skip that line like any unsafe name. Elsewhere the file is broken. */
static int skip_control(struct parser *ps, const char *p, const char **next)
{
	/* bad_field >= 4: split saw the fields before it, "M" first */
	if (ps->bad_field < 4 || ps->bad_field > 6 || p[0] != 'M' ||
	    p[1] != '\t')
		return -1;
	*next = next_line(ps, p);
	skip(ps, ps->bad_field == 4, "control character in a name");
	return 0;
}

static int parse_line(struct parser *ps, const char *p, const char **next)
{
	const char *f[MAX_FIELDS];
	size_t fl[MAX_FIELDS];
	int n;

	if (*p == '#') {
		*next = next_line(ps, p);
		return 0;
	}
	n = split(ps, p, f, fl, next);
	if (n < 0)
		return skip_control(ps, p, next);
	if (n > MAX_FIELDS)
		return bad(ps, "too many fields");
	if (fl[0] == 1 && f[0][0] == 'M')
		return parse_sample(ps, f, fl, n);
	if (fl[0] == 1 && f[0][0] == 'S')
		return parse_shard(ps, f, fl, n);
	if (fl[0] == 1 && f[0][0] == 'F')
		return parse_member(ps, f, fl, n);
	return bad(ps,
		   fl[0] == 0 && n == 1 ? "empty line" : "unknown record type");
}

/* The format's number from the first line, 0 when it is none of ours
 * (the three magics have one length). */
static int magic_version(const char *text, size_t len)
{
	static const char *const magic[] = {INDEX_MAGIC_V1, INDEX_MAGIC_V2,
					    INDEX_MAGIC_V3};
	size_t mlen = strlen(INDEX_MAGIC_V1);

	if (len < mlen || (len > mlen && text[mlen] != '\n'))
		return 0;
	for (int v = 0; v < 3; v++)
		if (memcmp(text, magic[v], mlen) == 0)
			return v + 1;
	return 0;
}

/* The shortest M line: "M", six tabs, three one-digit numbers, three
 * one-byte names and the newline. */
#define MIN_SAMPLE_LINE 14

/* The index's room, sized by the text's length without a pass over it:
 * the sample array (every line a shortest M line) and the kept strings'
 * region (no bigger than the text). Both are trimmed after the parse. */
static int alloc_index(struct index *ix, size_t len)
{
	struct index_arena *a = ix->arena;

	if (index_alloc_samples(ix, len / MIN_SAMPLE_LINE + 1))
		return -ENOMEM;
	a->text = bigmap_alloc(len + 1, &a->text_map);
	return a->text ? 0 : -ENOMEM;
}

/* Check the first line (head: the text's first have bytes, or all of
 * it) and make the index for a text of total bytes; *body is where the
 * records start. */
static int parse_start(struct parser *ps, const char *head, size_t have,
		       size_t total, const char **body, char *err,
		       size_t errlen)
{
	size_t mlen = strlen(INDEX_MAGIC_V1);

	ps->version = magic_version(head, have);
	if (!ps->version) {
		snprintf(err, errlen,
			 "line 1: not an echofs index (want \"%s\", \"%s\" or "
			 "\"%s\")",
			 INDEX_MAGIC_V3, INDEX_MAGIC_V2, INDEX_MAGIC_V1);
		return -EBADMSG;
	}
	ps->extra = ps->version >= 2;
	ps->line = 1;
	ps->ix = index_new();
	ps->ix->has_sums = ps->extra == 1;
	ps->ix->has_members = ps->version == 3;
	if (alloc_index(ps->ix, total)) {
		index_free(ps->ix);
		ps->ix = NULL;
		snprintf(err, errlen, "out of memory");
		return -ENOMEM;
	}
	ps->kept = ps->ix->arena->text;
	ps->ix->arena->keys = ps->ix->arena->text;
	ps->ix->keys = ps->ix->arena->text;
	*body = have > mlen ? head + mlen + 1 : head + have;
	return 0;
}

/* Parse the lines of [p, end): all of them when last, else those that end
 * within it. *stop is where parsing stopped. -EBADMSG (the index freed)
 * with "line N: reason" in err. */
static int parse_lines(struct parser *ps, const char *p, const char *end,
		       bool last, const char **stop, char *err, size_t errlen)
{
	const char *lim = end;

	if (!last) {
		lim = p < end ? memrchr(p, '\n', (size_t)(end - p)) : NULL;
		lim = lim ? lim + 1 : p;
	}
	ps->end = lim;
	while (p < lim) {
		ps->line++;
		if (parse_line(ps, p, &p)) {
			snprintf(err, errlen, "line %zu: %s", ps->line,
				 ps->why);
			index_free(ps->ix);
			ps->ix = NULL;
			return -EBADMSG;
		}
	}
	*stop = p;
	return 0;
}

/* Format 3: an M line also stands for the member it records, unless an F
 * line lists a member at its place (one whose name the M line does not
 * keep, "JPG" or "seg.jpg"). */
static int add_implied_members(struct index *ix)
{
	struct index_places p;
	int r = 0;

	index_places_make(&p, ix->members, ix->nmembers);
	for (size_t i = 0; r == 0 && i < ix->nsamples; i++) {
		const struct index_sample *s = &ix->samples[i];
		const char *ext = index_ext(ix, s);
		if (index_places_find(&p, ix->members, s) >= 0)
			continue;
		r = index_grow_members(ix);
		if (r == 0)
			r = index_put_member(ix, s->shard, s->offset, s->size,
					     ext, strlen(ext));
		if (r == 0) {
			ix->members[ix->nmembers].sum = s->sum;
			ix->members[ix->nmembers++].key = s->key;
		}
	}
	free(p.slot);
	return r;
}

/* The kept strings' and samples' untouched room given back; format 3's
 * implied members added. -ENOMEM (the index freed) or 0. */
static int parse_finish(struct parser *ps, struct index **out, char *err,
			size_t errlen)
{
	struct index_arena *a = ps->ix->arena;

	bigmap_trim(a->text, (size_t)(ps->kept - a->text), &a->text_map);
	a->keys_len = (size_t)(ps->kept - a->text);
	index_trim_samples(ps->ix);
	if (ps->version == 3 && add_implied_members(ps->ix)) {
		index_free(ps->ix);
		ps->ix = NULL;
		snprintf(err, errlen, "out of memory");
		return -ENOMEM;
	}
	*out = ps->ix;
	return 0;
}

/* A binary index (index_bin.h) from memory (buf) or a file (path), copied
 * into an index in memory. */
static int load_bin(const char *buf, size_t len, const char *path,
		    struct index **out, char *err, size_t errlen)
{
	struct index_bin *b;
	int r = path ? index_bin_open(path, &b, err, errlen)
		     : index_bin_open_mem(buf, len, &b, err, errlen);

	if (!r)
		r = index_bin_into_index(b, out, err, errlen);
	index_bin_close(b);
	return r;
}

int index_parse(const char *buf, size_t len, struct index **out, char *err,
		size_t errlen)
{
	struct parser ps = {0};
	const char *p;
	int r;

	*out = NULL;
	if (index_bin_is(buf, len))
		return load_bin(buf, len, NULL, out, err, errlen);
	if (len >= INDEX_FILE_MAX) {
		snprintf(err, errlen, "index too large");
		return -EFBIG;
	}
	r = parse_start(&ps, buf, len, len, &p, err, errlen);
	if (!r)
		r = parse_lines(&ps, p, buf + len, true, &p, err, errlen);
	if (!r)
		r = parse_finish(&ps, out, err, errlen);
	return r;
}

int index_parse_owned(char *text, size_t len, struct index **out, char *err,
		      size_t errlen)
{
	int r = index_parse(text, len, out, err, errlen);

	free(text);
	return r;
}

/* A local file is read in chunks into one buffer that is parsed and
 * reused (what is left of a line moves to its start), not read whole or
 * mapped: a 0.9 GB index would cost 0.9 GB of fresh pages (2.5 s to zero
 * on these VMs), and a mapping dies (SIGBUS) if the file is cut short
 * while it loads. */
#define READ_CHUNK ((size_t)8 << 20)

struct reader {
	int fd;
	size_t size; /* what fstat said: never read past it */
	size_t done; /* bytes read */
	char *buf;
	size_t cap, have; /* bytes in buf */
	bool eof;
};

/* Fill the buffer (up to the file's size): 0 or -errno. */
static int fill(struct reader *rd)
{
	while (!rd->eof && rd->have < rd->cap) {
		size_t want = rd->cap - rd->have;
		ssize_t n;
		if (want > rd->size - rd->done)
			want = rd->size - rd->done;
		n = want ? read(rd->fd, rd->buf + rd->have, want) : 0;
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			return -errno;
		rd->eof = n == 0;
		rd->have += (size_t)n;
		rd->done += (size_t)n;
	}
	return 0;
}

/* Keep the unparsed rest (from stop) at the buffer's start, with room to
 * read more: a line longer than the buffer doubles it. */
static void shift(struct reader *rd, const char *stop)
{
	size_t rest = (size_t)(rd->buf + rd->have - stop);

	memmove(rd->buf, stop, rest);
	rd->have = rest;
	if (rest == rd->cap) {
		rd->cap *= 2;
		rd->buf = xrealloc(rd->buf, rd->cap);
	}
}

static int load_fd(struct reader *rd, struct index **out, char *err,
		   size_t errlen)
{
	struct parser ps = {0};
	const char *p;
	int r;

	rd->cap = rd->size < READ_CHUNK ? rd->size + 1 : READ_CHUNK;
	rd->buf = xmalloc(rd->cap);
	r = fill(rd);
	if (!r)
		r = parse_start(&ps, rd->buf, rd->have, rd->size, &p, err,
				errlen);
	while (!r) {
		r = parse_lines(&ps, p, rd->buf + rd->have, rd->eof, &p, err,
				errlen);
		if (r || rd->eof)
			break;
		shift(rd, p);
		r = fill(rd);
		p = rd->buf;
	}
	if (!r)
		r = parse_finish(&ps, out, err, errlen);
	else if (ps.ix) /* a read error after the start */
		index_free(ps.ix);
	free(rd->buf);
	return r;
}

/* The file at fd starts with the binary index's magic (a binary index is
 * mapped, not read through the text reader). */
static bool starts_binary(int fd)
{
	char magic[INDEX_BIN_MAGIC_LEN];

	return pread(fd, magic, sizeof(magic), 0) == (ssize_t)sizeof(magic) &&
	       index_bin_is(magic, sizeof(magic));
}

int index_load(const char *path, struct index **out, char *err, size_t errlen)
{
	struct reader rd = {.fd = -1};
	struct stat st;
	int r = 0;
	bool said = false; /* err already says why */

	*out = NULL;
	/* As file_read_all: never blocks on a FIFO; judged on what opened */
	rd.fd = open(path, O_RDONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
	if (rd.fd < 0)
		r = -errno;
	else if (fstat(rd.fd, &st))
		r = -errno;
	else if (!S_ISREG(st.st_mode))
		r = S_ISDIR(st.st_mode) ? -EISDIR : -EINVAL;
	else if ((uint64_t)st.st_size >= INDEX_FILE_MAX)
		r = -EFBIG;
	if (!r && starts_binary(rd.fd)) {
		close(rd.fd);
		return load_bin(NULL, 0, path, out, err, errlen);
	}
	if (!r) {
		rd.size = (size_t)st.st_size;
		r = load_fd(&rd, out, err, errlen);
		said = r == -EBADMSG || r == -ENOMEM;
	}
	if (rd.fd >= 0)
		close(rd.fd);
	if (r && !said)
		snprintf(err, errlen, "%s: %s", path,
			 r == -EINVAL ? "not a regular file" : strerror(-r));
	return r;
}
