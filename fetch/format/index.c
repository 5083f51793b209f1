/* index.c - the dataset index in memory and as a text file (see index.h).
 *
 * Loading is the hot path (14.2 M samples, 0.9 GB of text, for
 * ImageNet-21k). The parser only reads the text (fields are pointer and
 * length), so a local file is read in chunks into one reused buffer and a
 * fetched one is parsed where it arrived: one pass over the bytes, and no
 * fresh memory for the text. The strings an index keeps (URLs, ETags, keys)
 * are copied side by side into one region sized by the text and trimmed
 * after, and a sample records its key as an offset there; labels and
 * extensions are interned, and a sample records one id for its (label,
 * ext) pair (32 bytes a sample). Samples added one by one copy their keys
 * into a key buffer the index grows, other strings into a bump arena. */
#include "fetch/format/index.h"

#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/file.h"
#include "common/bigmap.h"
#include "common/util.h"

#define INDEX_MAGIC_V1 "echofs-index 1"
#define INDEX_MAGIC_V2 "echofs-index 2"
#define INDEX_MAGIC_V3 "echofs-index 3"
#define SUM_HEX 16
#define ARENA_BLOCK (64 * 1024)
#define ARENA_BLOCK_BIG (4u << 20) /* once an arena holds more than this */
#define MAX_FIELDS 8

/* A parsed key's offset into the text fits index_sample.key. */
_Static_assert(INDEX_FILE_MAX <= (size_t)INDEX_KEYS_MAX + 1,
	       "key offsets need more than 32 bits");

struct arena_block {
	struct arena_block *next;
	size_t used, cap;
	char data[];
};

/* Labels and extensions, one copy each: an open-addressing set of strings
 * in the arena (an ImageNet-21k index has 21,841 labels for 14 million
 * samples). */
struct intern_set {
	const char **slot; /* NULL: empty */
	size_t cap, n;	   /* cap a power of two */
};

struct index_arena {
	struct arena_block *head;
	size_t bytes;		    /* held in blocks, for the block size */
	struct intern_set interned; /* labels and extensions */
	uint32_t *pair_slot;	    /* ids + 1 into ix->names, 0: empty */
	size_t pair_cap;	    /* a power of two */
	char *text;	    /* the strings a parse kept (URLs, ETags, keys) */
	size_t text_map;    /* bytes mapped for text, 0 if malloc'd */
	size_t samples_map; /* bytes mapped for samples, 0 if malloc'd */
	/* The key area (ix->keys): a parse's keys lie in text among the
	 * URLs and ETags (not owned); index_add_sample's in a malloc'd
	 * buffer it grows (owned), the parsed ones copied there first. */
	char *keys;
	size_t keys_len, keys_cap;
	bool keys_owned;
};

static char *arena_strndup(struct index_arena *a, const char *s, size_t len)
{
	size_t n = len + 1;
	struct arena_block *b = a->head;

	if (!b || b->cap - b->used < n) {
		/* Big blocks once it is big: a 14 M-sample index copies 300+
		 * MB of keys, and 64 KiB blocks would be 5,000 mallocs. */
		size_t block = a->bytes > ARENA_BLOCK_BIG ? ARENA_BLOCK_BIG
							  : ARENA_BLOCK;
		size_t cap = n > block ? n : block;
		b = xmalloc(sizeof(*b) + cap);
		a->bytes += cap;
		b->cap = cap;
		b->used = 0;
		b->next = a->head;
		a->head = b;
	}
	memcpy(b->data + b->used, s, len);
	b->data[b->used + len] = '\0';
	b->used += n;
	return b->data + b->used - n;
}

static char *arena_strdup(struct index_arena *a, const char *s)
{
	return arena_strndup(a, s, strlen(s));
}

struct index *index_new(void)
{
	struct index *ix = xcalloc(1, sizeof(*ix));
	ix->arena = xcalloc(1, sizeof(*ix->arena));
	return ix;
}

void index_free(struct index *ix)
{
	struct arena_block *b, *next;

	if (!ix)
		return;
	for (b = ix->arena->head; b; b = next) {
		next = b->next;
		free(b);
	}
	bigmap_free(ix->arena->text, ix->arena->text_map);
	bigmap_free(ix->samples, ix->arena->samples_map);
	free(ix->arena->interned.slot);
	free(ix->arena->pair_slot);
	if (ix->arena->keys_owned)
		free(ix->arena->keys);
	free(ix->names);
	free(ix->arena);
	free(ix->shards);
	free(ix->members);
	free(ix);
}

/* No tab, newline or other control character: the file format's rule. */
static bool text_ok(const char *s)
{
	for (; *s; s++)
		if ((unsigned char)*s < 0x20 || *s == 0x7f)
			return false;
	return true;
}

/* Spaces only (the text is not NUL-terminated: no strspn). */
static bool blank(const char *s, size_t len)
{
	for (size_t i = 0; i < len; i++)
		if (s[i] != ' ')
			return false;
	return true;
}

/* Keys become file names under the mount: relative, no empty, ".", ".."
 * or blank component, none longer than a file name may be. Labels are
 * single components. */
static bool name_ok(const char *s, size_t len, bool slashes)
{
	size_t start = 0;

	if (len == 0)
		return false;
	for (size_t i = 0; i <= len; i++) {
		size_t c;
		if (i < len && s[i] != '/')
			continue;
		if (i < len && !slashes)
			return false;
		c = i - start;
		if (c == 0 || (c == 1 && s[start] == '.') ||
		    (c == 2 && s[start] == '.' && s[start + 1] == '.') ||
		    c > INDEX_COMPONENT_MAX || blank(s + start, c))
			return false;
		start = i + 1;
	}
	return true;
}

static bool ext_ok(const char *s, size_t len)
{
	return len > 0 && len < 16 && !memchr(s, '.', len) &&
	       !memchr(s, '/', len);
}

/* The file name "<last key component>.<ext>" fits in one component. */
static bool file_name_fits(const char *key, size_t klen, size_t elen)
{
	const char *slash = memrchr(key, '/', klen);
	size_t base = slash ? klen - (size_t)(slash + 1 - key) : klen;
	return base + 1 + elen <= INDEX_COMPONENT_MAX;
}

static const char names_reject_label[] = "bad label";

/* Why label/key/ext break the name rules, or NULL when they don't. */
static const char *names_reject(const char *label, size_t llen, const char *key,
				size_t klen, const char *ext, size_t elen)
{
	if (!name_ok(label, llen, false))
		return names_reject_label;
	if (!name_ok(key, klen, true))
		return "bad key";
	if (!ext_ok(ext, elen))
		return "bad extension";
	if (!file_name_fits(key, klen, elen))
		return "bad key";
	return NULL;
}

/* A member's ext ("seg.PNG"): the rest of a file name after the key's
 * first dot, so no '/', no leading '.', and the whole name fits. */
static const char *member_reject(const char *key, size_t klen, const char *ext,
				 size_t elen)
{
	if (!name_ok(key, klen, true))
		return "bad key";
	if (elen == 0 || ext[0] == '.' || memchr(ext, '/', elen) ||
	    !file_name_fits(key, klen, elen))
		return "bad extension";
	return NULL;
}

/* len bytes of s, lower-cased, into d (len + 1 bytes, NUL-terminated). */
static void lower_into(char *d, const char *s, size_t len)
{
	for (size_t i = 0; i < len; i++)
		d[i] = s[i] >= 'A' && s[i] <= 'Z' ? (char)(s[i] + 32) : s[i];
	d[len] = '\0';
}

uint32_t index_add_shard(struct index *ix, const char *url, uint64_t size,
			 const char *etag)
{
	struct index_shard *s;

	if (ix->nshards == ix->cap_shards) {
		ix->cap_shards = ix->cap_shards ? 2 * ix->cap_shards : 16;
		ix->shards = xrealloc(ix->shards,
				      ix->cap_shards * sizeof(*ix->shards));
	}
	s = &ix->shards[ix->nshards];
	s->url = arena_strdup(ix->arena, url);
	s->size = size;
	s->etag = arena_strdup(ix->arena, etag ? etag : "");
	s->sum = 0;
	return (uint32_t)ix->nshards++;
}

void index_set_url(struct index *ix, uint32_t shard, const char *url)
{
	if (shard < ix->nshards)
		ix->shards[shard].url = arena_strdup(ix->arena, url);
}

static int grow_samples(struct index *ix, size_t want)
{
	struct index_sample *n;
	size_t cap = ix->cap_samples ? ix->cap_samples : 1024;

	while (cap < want)
		cap *= 2;
	if (cap > SIZE_MAX / sizeof(*n))
		return -ENOMEM;
	if (ix->arena->samples_map) {
		/* A loaded index grows: move off the mapping. */
		n = malloc(cap * sizeof(*n));
		if (!n)
			return -ENOMEM;
		memcpy(n, ix->samples, ix->nsamples * sizeof(*n));
		bigmap_free(ix->samples, ix->arena->samples_map);
		ix->arena->samples_map = 0;
	} else {
		n = realloc(ix->samples, cap * sizeof(*n));
		if (!n)
			return -ENOMEM;
	}
	ix->samples = n;
	ix->cap_samples = cap;
	return 0;
}

/* Room for n samples, mapped once (untouched pages cost nothing). */
static int alloc_samples(struct index *ix, size_t lines)
{
	size_t map;

	if (lines > SIZE_MAX / sizeof(*ix->samples))
		return -ENOMEM;
	ix->samples = bigmap_alloc(lines * sizeof(*ix->samples), &map);
	if (!ix->samples)
		return -ENOMEM;
	ix->arena->samples_map = map;
	ix->cap_samples = lines;
	return 0;
}

/* Give back the mapped sample array's untouched pages. */
static void trim_samples(struct index *ix)
{
	if (!ix->arena->samples_map)
		return;
	bigmap_trim(ix->samples, ix->nsamples * sizeof(*ix->samples),
		 &ix->arena->samples_map);
	ix->cap_samples = ix->arena->samples_map / sizeof(*ix->samples);
}

static bool in_shard(const struct index *ix, uint32_t shard, uint64_t offset,
		     uint64_t size)
{
	uint64_t ssize;

	if (shard >= ix->nshards)
		return false;
	ssize = ix->shards[shard].size;
	return size <= ssize && offset <= ssize - size;
}

static uint64_t str_hash(const char *s, size_t len)
{
	uint64_t h = 1469598103934665603ull; /* FNV-1a */
	for (size_t i = 0; i < len; i++)
		h = (h ^ (unsigned char)s[i]) * 1099511628211ull;
	return h;
}

/* The NUL-terminated a equals the len bytes at s. */
static bool same_str(const char *a, const char *s, size_t len)
{
	return memcmp(a, s, len) == 0 && a[len] == '\0';
}

static void intern_grow(struct intern_set *set)
{
	size_t cap = set->cap ? 2 * set->cap : 64;
	const char **slot = xcalloc(cap, sizeof(*slot));

	for (size_t i = 0; i < set->cap; i++) {
		const char *s = set->slot[i];
		size_t j;
		if (!s)
			continue;
		for (j = str_hash(s, strlen(s)) & (cap - 1); slot[j];
		     j = (j + 1) & (cap - 1))
			;
		slot[j] = s;
	}
	free(set->slot);
	set->slot = slot;
	set->cap = cap;
}

/* One copy of each label and extension in the arena, for the len bytes
 * at s. */
static const char *intern(struct index *ix, const char *s, size_t len)
{
	struct intern_set *set = &ix->arena->interned;
	size_t j;

	if (2 * (set->n + 1) > set->cap)
		intern_grow(set);
	for (j = str_hash(s, len) & (set->cap - 1); set->slot[j];
	     j = (j + 1) & (set->cap - 1))
		if (same_str(set->slot[j], s, len))
			return set->slot[j];
	set->n++;
	return set->slot[j] = arena_strndup(ix->arena, s, len);
}

/* Interned strings are equal when their pointers are. */
static size_t pair_hash(const char *label, const char *ext, size_t cap)
{
	uint64_t h = (uint64_t)(uintptr_t)label * 0x9e3779b97f4a7c15ull ^
		     (uint64_t)(uintptr_t)ext * 0xc2b2ae3d27d4eb4full;
	return (size_t)(h >> 29) & (cap - 1);
}

static void pair_grow(struct index *ix)
{
	struct index_arena *a = ix->arena;
	size_t cap = a->pair_cap ? 2 * a->pair_cap : 64;
	uint32_t *slot = xcalloc(cap, sizeof(*slot));

	for (size_t id = 0; id < ix->nnames; id++) {
		const struct index_names *p = &ix->names[id];
		size_t j = pair_hash(p->label, p->ext, cap);
		while (slot[j])
			j = (j + 1) & (cap - 1);
		slot[j] = (uint32_t)id + 1;
	}
	free(a->pair_slot);
	a->pair_slot = slot;
	a->pair_cap = cap;
}

/* The id of the interned pair (label, ext), added if new; -1 when the
 * table is full (more pairs than a uint32_t counts). */
static int64_t pair_id(struct index *ix, const char *label, const char *ext)
{
	struct index_arena *a = ix->arena;
	size_t j;

	if (2 * (ix->nnames + 1) > a->pair_cap)
		pair_grow(ix);
	for (j = pair_hash(label, ext, a->pair_cap); a->pair_slot[j];
	     j = (j + 1) & (a->pair_cap - 1)) {
		const struct index_names *p = &ix->names[a->pair_slot[j] - 1];
		if (p->label == label && p->ext == ext)
			return a->pair_slot[j] - 1;
	}
	if (ix->nnames >= UINT32_MAX - 1)
		return -1;
	if (ix->nnames == ix->cap_names) {
		ix->cap_names = ix->cap_names ? 2 * ix->cap_names : 64;
		ix->names =
			xrealloc(ix->names, ix->cap_names * sizeof(*ix->names));
	}
	ix->names[ix->nnames] = (struct index_names){label, ext};
	a->pair_slot[j] = (uint32_t)ix->nnames + 1;
	return (int64_t)ix->nnames++;
}

/* The names id for a sample's label and (lower-cased) ext: most samples
 * repeat the previous one's (a shard often holds one class), a cheap
 * check before the tables. -1 when the table is full. */
static int64_t names_of(struct index *ix, const char *label, size_t llen,
			const char *ext, size_t elen)
{
	if (ix->nsamples) {
		uint32_t id = ix->samples[ix->nsamples - 1].names;
		const struct index_names *p = &ix->names[id];
		if (same_str(p->label, label, llen) &&
		    same_str(p->ext, ext, elen))
			return id;
	}
	return pair_id(ix, intern(ix, label, llen), intern(ix, ext, elen));
}

/* Append key to the key area (owned and grown here; a parsed index's
 * keys are copied over first), its offset into *off. */
static int add_key(struct index *ix, const char *key, uint32_t *off)
{
	struct index_arena *a = ix->arena;
	size_t n = strlen(key) + 1, cap = a->keys_cap;
	char *k;

	if (n > INDEX_KEYS_MAX - a->keys_len)
		return -ENOMEM;
	if (!a->keys_owned || a->keys_len + n > cap) {
		while (cap < a->keys_len + n)
			cap = cap ? 2 * cap : 4096;
		k = malloc(cap);
		if (!k)
			return -ENOMEM;
		if (a->keys_len)
			memcpy(k, a->keys, a->keys_len);
		if (a->keys_owned)
			free(a->keys);
		a->keys = k;
		a->keys_cap = cap;
		a->keys_owned = true;
		ix->keys = k;
	}
	memcpy(a->keys + a->keys_len, key, n);
	*off = (uint32_t)a->keys_len;
	a->keys_len += n;
	return 0;
}

int index_add_sample(struct index *ix, uint32_t shard, uint64_t offset,
		     uint64_t size, const char *label, const char *key,
		     const char *ext)
{
	struct index_sample *s;
	char lext[16];
	size_t elen = strlen(ext);
	int64_t names;
	int r;

	if (!text_ok(label) || !text_ok(key) || !text_ok(ext) ||
	    names_reject(label, strlen(label), key, strlen(key), ext, elen) ||
	    elen >= sizeof(lext) || size > INDEX_SAMPLE_MAX ||
	    !in_shard(ix, shard, offset, size))
		return -EINVAL;
	if (ix->nsamples == ix->cap_samples &&
	    grow_samples(ix, ix->nsamples + 1))
		return -ENOMEM;
	lower_into(lext, ext, elen);
	names = names_of(ix, label, strlen(label), lext, elen);
	if (names < 0)
		return -ENOMEM;
	s = &ix->samples[ix->nsamples];
	s->shard = shard;
	s->offset = offset;
	s->size = (uint32_t)size;
	s->names = (uint32_t)names;
	r = add_key(ix, key, &s->key);
	if (r)
		return r;
	s->sum = 0;
	ix->nsamples++;
	return 0;
}

/* Room for one more member. */
static int grow_members(struct index *ix)
{
	struct index_sample *n;
	size_t cap = ix->cap_members ? 2 * ix->cap_members : 1024;

	if (ix->nmembers < ix->cap_members)
		return 0;
	if (cap > SIZE_MAX / sizeof(*n))
		return -ENOMEM;
	n = realloc(ix->members, cap * sizeof(*n));
	if (!n)
		return -ENOMEM;
	ix->members = n;
	ix->cap_members = cap;
	return 0;
}

/* The names id of ("", ext): most members repeat the ext of the member
 * two or three before (jpg, txt, json, ...). -1 when the table is full. */
static int64_t member_names(struct index *ix, const char *ext, size_t elen)
{
	for (size_t back = 1; back <= 4 && back <= ix->nmembers; back++) {
		uint32_t id = ix->members[ix->nmembers - back].names;
		if (same_str(ix->names[id].ext, ext, elen))
			return id;
	}
	return pair_id(ix, intern(ix, "", 0), intern(ix, ext, elen));
}

/* Fill the next member record (room made by grow_members); its key
 * offset is set by the caller. */
static int put_member(struct index *ix, uint32_t shard, uint64_t offset,
		      uint64_t size, const char *ext, size_t elen)
{
	struct index_sample *m = &ix->members[ix->nmembers];
	int64_t names = member_names(ix, ext, elen);

	if (names < 0)
		return -ENOMEM;
	*m = (struct index_sample){.offset = offset, .shard = shard,
				   .size = (uint32_t)size,
				   .names = (uint32_t)names};
	return 0;
}

int index_add_member(struct index *ix, uint32_t shard, uint64_t offset,
		     uint64_t size, const char *key, const char *ext)
{
	int r;

	if (!text_ok(key) || !text_ok(ext) ||
	    member_reject(key, strlen(key), ext, strlen(ext)) ||
	    size > INDEX_SAMPLE_MAX || !in_shard(ix, shard, offset, size))
		return -EINVAL;
	r = grow_members(ix);
	if (!r)
		r = put_member(ix, shard, offset, size, ext, strlen(ext));
	if (!r)
		r = add_key(ix, key, &ix->members[ix->nmembers].key);
	if (!r)
		ix->nmembers++;
	return r;
}

struct parser {
	struct index *ix;
	int version; /* 1, 2 or 3 (F lines) */
	int extra; /* fields after the format 1 ones: 1 for the sum in v2 */
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
	if (!in_shard(ix, (uint32_t)shard, off, size))
		return bad(ps, "sample lies outside its shard");
	s->sum = 0;
	if (ps->extra && parse_sum(f[7], fl[7], &s->sum))
		return bad(ps, "bad sample checksum");
	why = names_reject(f[4], fl[4], f[5], fl[5], f[6], fl[6]);
	if (why) {
		skip(ps, why == names_reject_label, why);
		return 0;
	}
	lower_into(lext, f[6], fl[6]); /* ext_ok: fl[6] < 16 */
	names = names_of(ix, f[4], fl[4], lext, fl[6]);
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
	if (!in_shard(ix, (uint32_t)shard, off, size))
		return bad(ps, "member lies outside its shard");
	if (parse_sum(f[6], fl[6], &sum))
		return bad(ps, "bad member checksum");
	why = member_reject(f[4], fl[4], f[5], fl[5]);
	if (why) {
		ix->skipped.members++;
		if (!ix->skipped.first_line) {
			ix->skipped.first_line = ps->line;
			ix->skipped.first_why = why;
		}
		return 0;
	}
	if (grow_members(ix) || put_member(ix, (uint32_t)shard, off, size,
					   f[5], fl[5]))
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

	if (alloc_samples(ix, len / MIN_SAMPLE_LINE + 1))
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

/* The kept strings' and samples' untouched room given back. */
/* Samples by place (shard, offset): ids + 1 in a table of a power of two
 * slots, for matching members with the samples whose images they are. */
struct places {
	uint32_t *slot;
	size_t mask;
};

static size_t place_hash(uint32_t shard, uint64_t offset, size_t mask)
{
	uint64_t h = (offset ^ (uint64_t)shard << 40) * 0x9e3779b97f4a7c15ull;
	return (size_t)(h >> 21) & mask;
}

static void places_make(struct places *p, const struct index_sample *v,
			size_t n)
{
	size_t cap = 64;

	while (cap < 2 * n + 2)
		cap *= 2;
	p->mask = cap - 1;
	p->slot = xcalloc(cap, sizeof(*p->slot));
	for (size_t i = 0; i < n; i++) {
		size_t j = place_hash(v[i].shard, v[i].offset, p->mask);
		while (p->slot[j])
			j = (j + 1) & p->mask;
		p->slot[j] = (uint32_t)i + 1;
	}
}

/* The id in v of the record at x's place, or -1. */
static int64_t places_find(const struct places *p, const struct index_sample *v,
			   const struct index_sample *x)
{
	for (size_t j = place_hash(x->shard, x->offset, p->mask); p->slot[j];
	     j = (j + 1) & p->mask) {
		const struct index_sample *s = &v[p->slot[j] - 1];
		if (s->shard == x->shard && s->offset == x->offset)
			return p->slot[j] - 1;
	}
	return -1;
}

/* Format 3: an M line also stands for the member it records, unless an F
 * line lists a member at its place (one whose name the M line does not
 * keep, "JPG" or "seg.jpg"). */
static int add_implied_members(struct index *ix)
{
	struct places p;
	int r = 0;

	places_make(&p, ix->members, ix->nmembers);
	for (size_t i = 0; r == 0 && i < ix->nsamples; i++) {
		const struct index_sample *s = &ix->samples[i];
		const char *ext = index_ext(ix, s);
		if (places_find(&p, ix->members, s) >= 0)
			continue;
		r = grow_members(ix);
		if (r == 0)
			r = put_member(ix, s->shard, s->offset, s->size, ext,
				       strlen(ext));
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
	trim_samples(ps->ix);
	if (ps->version == 3 && add_implied_members(ps->ix)) {
		index_free(ps->ix);
		ps->ix = NULL;
		snprintf(err, errlen, "out of memory");
		return -ENOMEM;
	}
	*out = ps->ix;
	return 0;
}

int index_parse(const char *buf, size_t len, struct index **out, char *err,
		size_t errlen)
{
	struct parser ps = {0};
	const char *p;
	int r;

	*out = NULL;
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

int index_load(const char *path, struct index **out, char *err, size_t errlen)
{
	struct reader rd = {.fd = -1};
	struct stat st;
	int r = 0;

	*out = NULL;
	rd.fd = open(path, O_RDONLY | O_CLOEXEC);
	if (rd.fd < 0)
		r = -errno;
	else if (fstat(rd.fd, &st))
		r = -errno;
	else if (!S_ISREG(st.st_mode))
		r = -EINVAL;
	else if ((uint64_t)st.st_size >= INDEX_FILE_MAX)
		r = -EFBIG;
	if (!r) {
		rd.size = (size_t)st.st_size;
		r = load_fd(&rd, out, err, errlen);
		if (r == -EBADMSG || r == -ENOMEM) {
			close(rd.fd);
			return r; /* err says why */
		}
	}
	if (rd.fd >= 0)
		close(rd.fd);
	if (r)
		snprintf(err, errlen, "%s: %s", path, strerror(-r));
	return r;
}

/* The end of an S or M line: the sum in format 2. */
static void write_sum(FILE *f, const struct index *ix, uint64_t sum)
{
	if (ix->has_sums)
		fprintf(f, "\t%016llx\n", (unsigned long long)sum);
	else
		fputc('\n', f);
}

/* An M line stands for this member (add_implied_members): the same
 * place, size, sum, key and name. */
static bool implied(const struct index *ix, const struct places *p,
		    const struct index_sample *m)
{
	int64_t i = places_find(p, ix->samples, m);
	const struct index_sample *s = i >= 0 ? &ix->samples[i] : NULL;

	return s && s->size == m->size && s->sum == m->sum &&
	       strcmp(index_key(ix, s), index_key(ix, m)) == 0 &&
	       strcmp(index_ext(ix, s), index_ext(ix, m)) == 0;
}

/* Format 3's F lines: the members no M line stands for. */
static void write_members(const struct index *ix, FILE *f)
{
	struct places p;

	places_make(&p, ix->samples, ix->nsamples);
	for (size_t i = 0; i < ix->nmembers; i++) {
		const struct index_sample *m = &ix->members[i];
		if (implied(ix, &p, m))
			continue;
		fprintf(f, "F\t%u\t%llu\t%llu\t%s\t%s", m->shard,
			(unsigned long long)m->offset,
			(unsigned long long)m->size, index_key(ix, m),
			index_ext(ix, m));
		write_sum(f, ix, m->sum);
	}
	free(p.slot);
}

int index_write(const struct index *ix, FILE *f)
{
	size_t i;

	for (i = 0; i < ix->nshards; i++) {
		const struct index_shard *s = &ix->shards[i];
		if (!s->url[0] || !text_ok(s->url) || !text_ok(s->etag))
			return -EINVAL;
	}
	bool v3 = ix->has_sums && ix->has_members;

	fprintf(f, "%s\n", v3		 ? INDEX_MAGIC_V3
			   : ix->has_sums ? INDEX_MAGIC_V2
					  : INDEX_MAGIC_V1);
	for (i = 0; i < ix->nshards; i++) {
		const struct index_shard *s = &ix->shards[i];
		fprintf(f, "S\t%s\t%llu\t%s", s->url,
			(unsigned long long)s->size,
			s->etag[0] ? s->etag : "-");
		write_sum(f, ix, s->sum);
	}
	for (i = 0; i < ix->nsamples; i++) {
		const struct index_sample *s = &ix->samples[i];
		fprintf(f, "M\t%u\t%llu\t%llu\t%s\t%s\t%s", s->shard,
			(unsigned long long)s->offset,
			(unsigned long long)s->size, index_label(ix, s),
			index_key(ix, s), index_ext(ix, s));
		write_sum(f, ix, s->sum);
	}
	if (v3)
		write_members(ix, f);
	if (fflush(f) || ferror(f))
		return -EIO;
	return 0;
}

/* The rename is only durable once the directory entry is on disk too. */
static int fsync_dir_of(const char *path)
{
	char *copy = xstrdup(path);
	int fd = open(dirname(copy), O_RDONLY | O_DIRECTORY | O_CLOEXEC), r = 0;

	if (fd < 0 || fsync(fd) != 0)
		r = -errno;
	if (fd >= 0)
		close(fd);
	free(copy);
	return r;
}

int index_save(const struct index *ix, const char *path)
{
	/* an index is meant to be shared */
	return index_save_mode(ix, path, 0644);
}

int index_save_mode(const struct index *ix, const char *path, mode_t mode)
{
	size_t tlen = strlen(path) + sizeof(".tmp.XXXXXX");
	char *tmp = xmalloc(tlen);
	FILE *f;
	int fd, r;

	snprintf(tmp, tlen, "%s.tmp.XXXXXX", path);
	fd = mkstemp(tmp); /* 0600 from the start */
	if (fd < 0) {
		r = -errno;
		free(tmp);
		return r;
	}
	if ((mode != 0600 && fchmod(fd, mode)) || !(f = fdopen(fd, "w"))) {
		r = -errno;
		close(fd);
		goto out;
	}
	r = index_write(ix, f);
	if (!r && fsync(fileno(f)))
		r = -errno;
	if (fclose(f) && !r)
		r = -EIO;
	if (!r && rename(tmp, path))
		r = -errno;
	/* renamed but maybe not durable: said, the file is left in place */
	if (!r)
		r = fsync_dir_of(path);
out:
	if (r)
		unlink(tmp);
	free(tmp);
	return r;
}
