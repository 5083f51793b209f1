/* index_mem.c - the dataset index in memory: its storage, the name rules,
 * and adding shards, samples and members (see index.h).
 *
 * The strings a parse keeps (URLs, ETags, keys) lie side by side in one
 * region sized by the text (index.c), and a sample records its key as an
 * offset there; labels and extensions are interned, and a sample records
 * one id for its (label, ext) pair (32 bytes a sample). Samples added one
 * by one copy their keys into a key buffer the index grows, other strings
 * into a bump arena. */
#include "fetch/format/index_int.h"

#include <errno.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "common/bigmap.h"
#include "common/util.h"

#define ARENA_BLOCK (64 * 1024)
#define ARENA_BLOCK_BIG (4u << 20) /* once an arena holds more than this */

struct arena_block {
	struct arena_block *next;
	size_t used, cap;
	char data[];
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
bool index_text_ok(const char *s)
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

const char index_reject_label[] = "bad label";

/* Why label/key/ext break the name rules, or NULL when they don't. */
const char *index_names_reject(const char *label, size_t llen, const char *key,
			       size_t klen, const char *ext, size_t elen)
{
	if (!name_ok(label, llen, false))
		return index_reject_label;
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
const char *index_member_reject(const char *key, size_t klen, const char *ext,
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
void index_lower_into(char *d, const char *s, size_t len)
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
int index_alloc_samples(struct index *ix, size_t lines)
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
void index_trim_samples(struct index *ix)
{
	if (!ix->arena->samples_map)
		return;
	bigmap_trim(ix->samples, ix->nsamples * sizeof(*ix->samples),
		    &ix->arena->samples_map);
	ix->cap_samples = ix->arena->samples_map / sizeof(*ix->samples);
}

bool index_in_shard(const struct index *ix, uint32_t shard, uint64_t offset,
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
int64_t index_names_of(struct index *ix, const char *label, size_t llen,
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

	if (!index_text_ok(label) || !index_text_ok(key) ||
	    !index_text_ok(ext) ||
	    index_names_reject(label, strlen(label), key, strlen(key), ext,
			       elen) ||
	    elen >= sizeof(lext) || size > INDEX_SAMPLE_MAX ||
	    !index_in_shard(ix, shard, offset, size))
		return -EINVAL;
	if (ix->nsamples == ix->cap_samples &&
	    grow_samples(ix, ix->nsamples + 1))
		return -ENOMEM;
	index_lower_into(lext, ext, elen);
	names = index_names_of(ix, label, strlen(label), lext, elen);
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

int index_reserve(struct index *ix, size_t nsamples, size_t key_bytes)
{
	struct index_arena *a = ix->arena;
	char *k;

	if (nsamples > ix->cap_samples && grow_samples(ix, nsamples))
		return -ENOMEM;
	if (!key_bytes || key_bytes > INDEX_KEYS_MAX ||
	    (a->keys_owned && a->keys_cap >= key_bytes))
		return 0;
	k = malloc(key_bytes > a->keys_len ? key_bytes : a->keys_len + 1);
	if (!k)
		return -ENOMEM;
	if (a->keys_len)
		memcpy(k, a->keys, a->keys_len);
	if (a->keys_owned)
		free(a->keys);
	a->keys = k;
	a->keys_cap = key_bytes > a->keys_len ? key_bytes : a->keys_len + 1;
	a->keys_owned = true;
	ix->keys = k;
	return 0;
}

int index_add_sample_at(struct index *ix, uint32_t shard, uint64_t offset,
			uint64_t size, uint32_t key, uint32_t names)
{
	const struct index_names *nm;
	const char *k;
	struct index_sample *s;

	if (names >= ix->nnames || key >= ix->arena->keys_len)
		return -EINVAL;
	nm = &ix->names[names];
	k = ix->keys + key;
	if (!index_text_ok(k) ||
	    index_names_reject(nm->label, strlen(nm->label), k, strlen(k),
			       nm->ext, strlen(nm->ext)) ||
	    size > INDEX_SAMPLE_MAX || !index_in_shard(ix, shard, offset, size))
		return -EINVAL;
	if (ix->nsamples == ix->cap_samples &&
	    grow_samples(ix, ix->nsamples + 1))
		return -ENOMEM;
	s = &ix->samples[ix->nsamples++];
	*s = (struct index_sample){.offset = offset,
				   .key = key,
				   .shard = shard,
				   .size = (uint32_t)size,
				   .names = names};
	return 0;
}

int index_add_sample_named(struct index *ix, uint32_t shard, uint64_t offset,
			   uint64_t size, const char *key, uint32_t names)
{
	uint32_t at;
	int r = add_key(ix, key, &at);

	if (!r)
		r = index_add_sample_at(ix, shard, offset, size, at, names);
	if (r) /* the key stays unused in the key area */
		return r;
	return 0;
}

void index_keys_borrow(struct index *ix, void *map, size_t maplen,
		       const char *keys, size_t keys_len)
{
	struct index_arena *a = ix->arena;

	bigmap_free(a->text, a->text_map);
	if (a->keys_owned)
		free(a->keys);
	a->text = map;
	a->text_map = maplen;
	a->keys = (char *)keys;
	a->keys_len = keys_len;
	a->keys_cap = keys_len;
	a->keys_owned = false;
	ix->keys = keys;
}

/* Room for one more member. */
int index_grow_members(struct index *ix)
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

/* Fill the next member record (room made by index_grow_members); its key
 * offset is set by the caller. */
int index_put_member(struct index *ix, uint32_t shard, uint64_t offset,
		     uint64_t size, const char *ext, size_t elen)
{
	struct index_sample *m = &ix->members[ix->nmembers];
	int64_t names = member_names(ix, ext, elen);

	if (names < 0)
		return -ENOMEM;
	*m = (struct index_sample){.offset = offset,
				   .shard = shard,
				   .size = (uint32_t)size,
				   .names = (uint32_t)names};
	return 0;
}

int index_add_member(struct index *ix, uint32_t shard, uint64_t offset,
		     uint64_t size, const char *key, const char *ext)
{
	int r;

	if (!index_text_ok(key) || !index_text_ok(ext) ||
	    index_member_reject(key, strlen(key), ext, strlen(ext)) ||
	    size > INDEX_SAMPLE_MAX || !index_in_shard(ix, shard, offset, size))
		return -EINVAL;
	r = index_grow_members(ix);
	if (!r)
		r = index_put_member(ix, shard, offset, size, ext, strlen(ext));
	if (!r)
		r = add_key(ix, key, &ix->members[ix->nmembers].key);
	if (!r)
		ix->nmembers++;
	return r;
}

static size_t place_hash(uint32_t shard, uint64_t offset, size_t mask)
{
	uint64_t h = (offset ^ (uint64_t)shard << 40) * 0x9e3779b97f4a7c15ull;
	return (size_t)(h >> 21) & mask;
}

void index_places_make(struct index_places *p, const struct index_sample *v,
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
int64_t index_places_find(const struct index_places *p,
			  const struct index_sample *v,
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
