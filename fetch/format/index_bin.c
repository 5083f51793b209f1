/* index_bin.c - reads the binary index (docs/index-format.md): maps it
 * read-only, checks every place, size, count, checksum and reference
 * against the file before anything else reads it, then serves the tree in
 * place (binary search over the classes and each class's sorted names) or
 * copies it into an index in memory (index_bin_to_index). */
#include "fetch/format/index_bin_int.h"

#include "common/util.h"
#include "fetch/format/index.h"
#include "fetch/format/index_int.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

struct index_bin {
	const unsigned char *base;
	size_t len;
	size_t mapped; /* bytes to munmap, 0: borrowed */
	uint32_t flags;
	const char *str;
	size_t strlen;
	const struct ibin_shard *shards;
	const struct ibin_names *names;
	const struct ibin_sample *samples, *members;
	const struct ibin_class *classes;
	const uint32_t *order;
	size_t nshards, nnames, nsamples, nmembers, nclasses, norder;
};

bool index_bin_is(const void *buf, size_t len)
{
	return len >= INDEX_BIN_MAGIC_LEN &&
	       memcmp(buf, INDEX_BIN_MAGIC, INDEX_BIN_MAGIC_LEN) == 0;
}

static int bad(char *err, size_t errlen, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
static int bad(char *err, size_t errlen, const char *fmt, ...)
{
	va_list ap;
	int n = snprintf(err, errlen, "binary index: ");

	va_start(ap, fmt);
	if (n > 0 && (size_t)n < errlen)
		vsnprintf(err + n, errlen - (size_t)n, fmt, ap);
	va_end(ap);
	return -EBADMSG;
}

static const char *const sec_name[IBIN_NSECTIONS] = {
	"strings", "shards", "names", "samples", "members", "classes", "order"};
static const size_t sec_rec[IBIN_NSECTIONS] = {1,
					       sizeof(struct ibin_shard),
					       sizeof(struct ibin_names),
					       sizeof(struct ibin_sample),
					       sizeof(struct ibin_sample),
					       sizeof(struct ibin_class),
					       sizeof(uint32_t)};

static int check_header(const struct ibin_header *h, size_t len, char *err,
			size_t errlen)
{
	if (len < sizeof(*h))
		return bad(err, errlen, "truncated (%zu bytes, header is %zu)",
			   len, sizeof(*h));
	if (!index_bin_is(h, len))
		return bad(err, errlen, "not a binary index (bad magic)");
	if (h->version != INDEX_BIN_VERSION)
		return bad(err, errlen, "version %u, this echofs reads %u",
			   h->version, INDEX_BIN_VERSION);
	if (h->header_sum !=
	    XXH3_64bits(h, offsetof(struct ibin_header, header_sum)))
		return bad(err, errlen, "header checksum mismatch");
	if (h->header_size != sizeof(*h) || h->nsections != IBIN_NSECTIONS ||
	    (h->flags & ~IBIN_FLAGS_KNOWN) || h->reserved[0] || h->reserved[1])
		return bad(err, errlen, "unknown header layout or flags");
	if (h->file_size != len)
		return bad(err, errlen,
			   "truncated or extended (%zu bytes, header says "
			   "%llu)",
			   len, (unsigned long long)h->file_size);
	return 0;
}

/* Zero padding only between the sections: with the checksums, every
 * byte of the file is checked. */
static bool zeros(const unsigned char *p, size_t n)
{
	while (n--)
		if (*p++)
			return false;
	return true;
}

/* Each section where the writer puts it (in turn, after the header, at
 * the next multiple of 8, zero-padded), of the size its count says, with
 * its checksum; the last one ends the file. */
static int check_sections(const struct ibin_header *h, const void *base,
			  size_t len, char *err, size_t errlen)
{
	uint64_t at = sizeof(*h);

	for (int i = 0; i < IBIN_NSECTIONS; i++) {
		const struct ibin_section *s = &h->sec[i];
		uint64_t want = (at + 7) / 8 * 8;
		if (s->offset != want || s->offset > len ||
		    !zeros((const unsigned char *)base + at,
			   (size_t)(want - at)) ||
		    s->size > len - s->offset ||
		    s->count > s->size / sec_rec[i] ||
		    s->count * sec_rec[i] != s->size || s->count >= IBIN_NONE)
			return bad(err, errlen,
				   "section %s out of bounds or sized wrong",
				   sec_name[i]);
		if (XXH3_64bits((const char *)base + s->offset,
				(size_t)s->size) != s->sum)
			return bad(err, errlen, "section %s checksum mismatch",
				   sec_name[i]);
		at = s->offset + s->size;
	}
	if (at != len)
		return bad(err, errlen, "%llu bytes after the last section",
			   (unsigned long long)(len - at));
	return 0;
}

static void take_sections(struct index_bin *b, const struct ibin_header *h)
{
	const unsigned char *p = b->base;

	b->flags = h->flags;
	b->str = (const char *)p + h->sec[IBIN_STRINGS].offset;
	b->strlen = h->sec[IBIN_STRINGS].count;
#define TAKE(f, n, which)                                                      \
	do {                                                                   \
		b->f = (const void *)(p + h->sec[which].offset);               \
		b->n = h->sec[which].count;                                    \
	} while (0)
	TAKE(shards, nshards, IBIN_SHARDS);
	TAKE(names, nnames, IBIN_NAMES);
	TAKE(samples, nsamples, IBIN_SAMPLES);
	TAKE(members, nmembers, IBIN_MEMBERS);
	TAKE(classes, nclasses, IBIN_CLASSES);
	TAKE(order, norder, IBIN_ORDER);
#undef TAKE
}

static bool str_ok(const struct index_bin *b, uint32_t s)
{
	return s < b->strlen;
}

/* A sample or member record: references inside their tables, the data
 * inside its shard. */
static bool record_ok(const struct index_bin *b, const struct ibin_sample *s)
{
	const struct ibin_shard *sh;

	if (s->shard >= b->nshards || s->names >= b->nnames ||
	    !str_ok(b, s->key))
		return false;
	sh = &b->shards[s->shard];
	return s->size <= sh->size && s->offset <= sh->size - s->size;
}

static int check_records(const struct index_bin *b, char *err, size_t errlen)
{
	if (!b->strlen || b->str[0] || b->str[b->strlen - 1])
		return bad(err, errlen, "string table not NUL-terminated");
	for (size_t i = 0; i < b->nshards; i++)
		if (!str_ok(b, b->shards[i].url) ||
		    !str_ok(b, b->shards[i].etag) ||
		    !b->str[b->shards[i].url] ||
		    !index_text_ok(b->str + b->shards[i].url) ||
		    !index_text_ok(b->str + b->shards[i].etag))
			return bad(err, errlen, "shard %zu: bad string", i);
	for (size_t i = 0; i < b->nnames; i++)
		if (!str_ok(b, b->names[i].label) ||
		    !str_ok(b, b->names[i].ext))
			return bad(err, errlen, "name pair %zu: bad string", i);
	for (size_t i = 0; i < b->nsamples; i++) {
		const struct ibin_sample *s = &b->samples[i];
		if (!record_ok(b, s) ||
		    (s->cls == IBIN_NONE) != (s->name == IBIN_NONE) ||
		    (s->cls != IBIN_NONE &&
		     (s->cls >= b->nclasses || !str_ok(b, s->name))))
			return bad(err, errlen, "sample %zu: bad reference", i);
	}
	for (size_t i = 0; i < b->nmembers; i++)
		if (!record_ok(b, &b->members[i]))
			return bad(err, errlen, "member %zu: bad reference", i);
	return 0;
}

/* Classes tile the order in turn, sorted by name; each class's run names
 * its own samples, strictly sorted by name (so a lookup's binary search
 * is right). */
static int check_tree(const struct index_bin *b, char *err, size_t errlen)
{
	size_t at = 0;

	for (size_t c = 0; c < b->nclasses; c++) {
		const struct ibin_class *k = &b->classes[c];
		if (!str_ok(b, k->name) || !str_ok(b, k->label) ||
		    k->first != at || k->count > b->norder - at ||
		    (c && strcmp(b->str + b->classes[c - 1].name,
				 b->str + k->name) >= 0))
			return bad(err, errlen, "class %zu: bad entry", c);
		for (size_t i = at; i < at + k->count; i++) {
			uint32_t s = b->order[i];
			if (s >= b->nsamples || b->samples[s].cls != c ||
			    (i > at &&
			     strcmp(b->str + b->samples[b->order[i - 1]].name,
				    b->str + b->samples[s].name) >= 0))
				return bad(err, errlen,
					   "class %zu: file %zu out of order",
					   c, i - at);
		}
		at += k->count;
	}
	if (at != b->norder)
		return bad(err, errlen, "order holds %zu files, classes %zu",
			   b->norder, at);
	return 0;
}

/* A class's samples are all in its run: counted against the order. */
static int check_counts(const struct index_bin *b, char *err, size_t errlen)
{
	size_t classed = 0;

	for (size_t i = 0; i < b->nsamples; i++)
		classed += b->samples[i].cls != IBIN_NONE;
	if (classed != b->norder)
		return bad(err, errlen, "%zu samples in classes, order %zu",
			   classed, b->norder);
	return 0;
}

static int check_into(struct index_bin *b, const void *buf, size_t len,
		      char *err, size_t errlen)
{
	struct ibin_header h;
	int r;

	if (len >= sizeof(h))
		memcpy(&h, buf, sizeof(h));
	r = check_header(&h, len, err, errlen);
	if (!r)
		r = check_sections(&h, buf, len, err, errlen);
	if (r)
		return r;
	b->base = buf;
	b->len = len;
	take_sections(b, &h);
	r = check_records(b, err, errlen);
	if (!r)
		r = check_tree(b, err, errlen);
	if (!r)
		r = check_counts(b, err, errlen);
	return r;
}

int index_bin_check(const void *buf, size_t len, char *err, size_t errlen)
{
	struct index_bin b = {0};

	return check_into(&b, buf, len, err, errlen);
}

int index_bin_open_mem(const void *buf, size_t len, struct index_bin **out,
		       char *err, size_t errlen)
{
	struct index_bin *b = xcalloc(1, sizeof(*b));
	int r = check_into(b, buf, len, err, errlen);

	if (r) {
		free(b);
		b = NULL;
	}
	*out = b;
	return r;
}

int index_bin_open(const char *path, struct index_bin **out, char *err,
		   size_t errlen)
{
	struct stat st;
	void *p = NULL;
	int r = 0, fd;

	*out = NULL;
	fd = open(path, O_RDONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
	if (fd < 0 || fstat(fd, &st))
		r = -errno;
	else if (!S_ISREG(st.st_mode))
		r = S_ISDIR(st.st_mode) ? -EISDIR : -EINVAL;
	else if ((uint64_t)st.st_size < sizeof(struct ibin_header))
		r = bad(err, errlen, "truncated (%lld bytes)",
			(long long)st.st_size);
	else if ((p = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_SHARED, fd,
			   0)) == MAP_FAILED)
		r = -errno;
	if (fd >= 0)
		close(fd);
	if (r) {
		if (r != -EBADMSG)
			snprintf(err, errlen, "%s: %s", path,
				 r == -EINVAL ? "not a regular file"
					      : strerror(-r));
		return r;
	}
	r = index_bin_open_mem(p, (size_t)st.st_size, out, err, errlen);
	if (r)
		munmap(p, (size_t)st.st_size);
	else
		(*out)->mapped = (size_t)st.st_size;
	return r;
}

void index_bin_close(struct index_bin *b)
{
	if (!b)
		return;
	if (b->mapped)
		munmap((void *)b->base, b->mapped);
	free(b);
}

/* The index's names id for the file's pair p (made on first use): -1
 * when the pair breaks a rule, -2 out of memory. */
static int64_t names_id(const struct index_bin *b, struct index *ix,
			int64_t *map, uint32_t p)
{
	const char *label = b->str + b->names[p].label;
	const char *ext = b->str + b->names[p].ext;
	size_t elen = strlen(ext);
	char lext[16];

	if (map[p] != -1)
		return map[p];
	if (!index_text_ok(label) || !index_text_ok(ext) ||
	    elen >= sizeof(lext))
		return -1;
	index_lower_into(lext, ext, elen);
	map[p] = index_names_of(ix, label, strlen(label), lext, elen);
	return map[p] < 0 ? -2 : map[p];
}

/* The samples into ix; keys read in place when ix borrows the string
 * table (index_keys_borrow), else copied. */
static int add_samples(const struct index_bin *b, struct index *ix,
		       bool in_place, char *err, size_t errlen)
{
	int64_t *map = xmalloc((b->nnames + 1) * sizeof(*map)), id;
	int r = index_reserve(ix, b->nsamples, in_place ? 0 : b->strlen);

	for (size_t i = 0; i < b->nnames; i++)
		map[i] = -1;
	for (size_t i = 0; i < b->nsamples && !r; i++) {
		const struct ibin_sample *s = &b->samples[i];
		id = names_id(b, ix, map, s->names);
		if (id < 0)
			r = id == -2 ? -ENOMEM : -EINVAL;
		else if (in_place)
			r = index_add_sample_at(ix, s->shard, s->offset,
						s->size, s->key, (uint32_t)id);
		else
			r = index_add_sample_named(ix, s->shard, s->offset,
						   s->size, b->str + s->key,
						   (uint32_t)id);
		if (r == -EINVAL)
			r = bad(err, errlen, "sample %zu breaks a name rule",
				i);
		else if (!r)
			ix->samples[ix->nsamples - 1].sum = s->sum;
	}
	if (r == -ENOMEM)
		snprintf(err, errlen, "out of memory");
	free(map);
	return r;
}

static int add_members(const struct index_bin *b, struct index *ix, char *err,
		       size_t errlen)
{
	for (size_t i = 0; i < b->nmembers; i++) {
		const struct ibin_sample *s = &b->members[i];
		int r = index_add_member(ix, s->shard, s->offset, s->size,
					 b->str + s->key,
					 b->str + b->names[s->names].ext);
		if (r == -EINVAL)
			return bad(err, errlen, "member %zu breaks a name rule",
				   i);
		if (r) {
			snprintf(err, errlen, "out of memory");
			return r;
		}
		ix->members[ix->nmembers - 1].sum = s->sum;
	}
	return 0;
}

static int to_index(struct index_bin *b, bool in_place, struct index **out,
		    char *err, size_t errlen)
{
	struct index *ix = index_new();
	int r;

	for (size_t i = 0; i < b->nshards; i++) {
		const struct ibin_shard *s = &b->shards[i];
		index_add_shard(ix, b->str + s->url, s->size, b->str + s->etag);
		ix->shards[i].sum = s->sum;
	}
	if (in_place) { /* the mapping is the index's from here on */
		index_keys_borrow(ix, (void *)b->base, b->mapped, b->str,
				  b->strlen);
		b->mapped = 0;
	}
	r = add_samples(b, ix, in_place, err, errlen);
	if (!r)
		r = add_members(b, ix, err, errlen);
	if (r) {
		index_free(ix);
		ix = NULL;
	} else {
		ix->has_sums = b->flags & IBIN_HAS_SUMS;
		ix->has_members = b->flags & IBIN_HAS_MEMBERS;
	}
	*out = ix;
	return r;
}

int index_bin_to_index(const struct index_bin *b, struct index **out, char *err,
		       size_t errlen)
{
	return to_index((struct index_bin *)b, false, out, err, errlen);
}

int index_bin_into_index(struct index_bin *b, struct index **out, char *err,
			 size_t errlen)
{
	return to_index(b, b->mapped != 0, out, err, errlen);
}

size_t index_bin_nsamples(const struct index_bin *b)
{
	return b->nsamples;
}

size_t index_bin_nclasses(const struct index_bin *b)
{
	return b->nclasses;
}

const char *index_bin_class_name(const struct index_bin *b, size_t c,
				 size_t *nfiles)
{
	*nfiles = b->classes[c].count;
	return b->str + b->classes[c].name;
}

const char *index_bin_file(const struct index_bin *b, size_t c, size_t i,
			   uint32_t *sample)
{
	*sample = b->order[b->classes[c].first + i];
	return b->str + b->samples[*sample].name;
}

int64_t index_bin_find_class(const struct index_bin *b, const char *name)
{
	size_t lo = 0, hi = b->nclasses;

	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;
		int c = strcmp(name, b->str + b->classes[mid].name);
		if (!c)
			return (int64_t)mid;
		if (c < 0)
			hi = mid;
		else
			lo = mid + 1;
	}
	return -ENOENT;
}

int64_t index_bin_find_file(const struct index_bin *b, size_t c,
			    const char *name)
{
	const uint32_t *run = b->order + b->classes[c].first;
	size_t lo = 0, hi = b->classes[c].count;

	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;
		int k = strcmp(name, b->str + b->samples[run[mid]].name);
		if (!k)
			return (int64_t)mid;
		if (k < 0)
			hi = mid;
		else
			lo = mid + 1;
	}
	return -ENOENT;
}

int index_bin_file_sum(const char *path, uint64_t *sum)
{
	XXH3_state_t *st = XXH3_createState();
	size_t cap = (size_t)8 << 20;
	char *buf = xmalloc(cap);
	int fd = open(path, O_RDONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
	int r = fd < 0 ? -errno : !st ? -ENOMEM : 0;
	ssize_t n = 0;

	if (!r && XXH3_64bits_reset(st) != XXH_OK)
		r = -ENOMEM;
	while (!r && (n = read(fd, buf, cap)) != 0) {
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			r = -errno;
		else if (XXH3_64bits_update(st, buf, (size_t)n) != XXH_OK)
			r = -ENOMEM;
	}
	if (!r)
		*sum = XXH3_64bits_digest(st);
	if (fd >= 0)
		close(fd);
	XXH3_freeState(st);
	free(buf);
	return r;
}
