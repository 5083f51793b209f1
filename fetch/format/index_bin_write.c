/* index_bin_write.c - writes the binary index (docs/index-format.md): the
 * tables are laid out in memory (index_bin_tree.c decides the tree), then
 * written section by section behind a zeroed header, which is written last
 * with the sections' places and checksums: a file cut short has no valid
 * header. */
#include "fetch/format/index_bin_int.h"

#include "common/util.h"
#include "fetch/format/index.h"
#include "fetch/format/index_int.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

struct layout {
	struct ibin_tree t;
	struct ibin_shard *shards;
	struct ibin_names *names;
	/* string offsets of the samples' and members' keys: their records
	 * (40 bytes each) are made as they are written, not held */
	uint32_t *skey, *mkey;
};

static uint32_t add(struct layout *l, const char *s, int *r)
{
	uint32_t at = ibin_str_add(&l->t, s, strlen(s));

	if (at == IBIN_NONE)
		*r = -EOVERFLOW;
	return at;
}

/* The record of sample i, or of member i. */
static struct ibin_sample record(const struct layout *l, const struct index *ix,
				 size_t i, bool member)
{
	const struct index_sample *s =
		member ? &ix->members[i] : &ix->samples[i];

	return (struct ibin_sample){.offset = s->offset,
				    .sum = s->sum,
				    .shard = s->shard,
				    .size = s->size,
				    .key = member ? l->mkey[i] : l->skey[i],
				    .names = s->names,
				    .cls = member ? IBIN_NONE : l->t.cls[i],
				    .name = member ? IBIN_NONE : l->t.name[i]};
}

static int lay_out(struct layout *l, const struct index *ix)
{
	int r = ibin_tree_build(&l->t, ix);

	l->shards = xcalloc(ix->nshards + 1, sizeof(*l->shards));
	l->names = xcalloc(ix->nnames + 1, sizeof(*l->names));
	l->skey = xcalloc(ix->nsamples + 1, sizeof(*l->skey));
	l->mkey = xcalloc(ix->nmembers + 1, sizeof(*l->mkey));
	for (size_t i = 0; i < ix->nshards && !r; i++) {
		const struct index_shard *s = &ix->shards[i];
		if (!index_text_ok(s->url) || !s->url[0] ||
		    !index_text_ok(s->etag))
			return -EINVAL;
		l->shards[i] = (struct ibin_shard){.size = s->size,
						   .sum = s->sum,
						   .url = add(l, s->url, &r),
						   .etag = add(l, s->etag, &r)};
	}
	for (size_t i = 0; i < ix->nnames && !r; i++)
		l->names[i] = (struct ibin_names){
			.label = add(l, ix->names[i].label, &r),
			.ext = add(l, ix->names[i].ext, &r)};
	for (size_t i = 0; i < ix->nsamples && !r; i++)
		l->skey[i] = add(l, index_key(ix, &ix->samples[i]), &r);
	for (size_t i = 0; i < ix->nmembers && !r; i++)
		l->mkey[i] = add(l, index_key(ix, &ix->members[i]), &r);
	return r;
}

static void layout_clear(struct layout *l)
{
	ibin_tree_clear(&l->t);
	free(l->shards);
	free(l->names);
	free(l->skey);
	free(l->mkey);
}

/* One section at the file's current end (8-aligned), its place and sum
 * into sec. */
static int put_section(FILE *f, struct ibin_section *sec, const void *p,
		       size_t count, size_t rec, uint64_t *at)
{
	static const char zero[8];
	size_t pad = (size_t)((8 - *at % 8) % 8);

	if (pad && fwrite(zero, 1, pad, f) != pad)
		return -EIO;
	*at += pad;
	sec->offset = *at;
	sec->count = count;
	sec->size = (uint64_t)count * rec;
	sec->sum = XXH3_64bits(p, (size_t)sec->size);
	if (sec->size && fwrite(p, 1, (size_t)sec->size, f) != sec->size)
		return -EIO;
	*at += sec->size;
	return 0;
}

/* The samples' or members' section, made and hashed a chunk at a time. */
static int put_records(FILE *f, struct ibin_section *sec,
		       const struct layout *l, const struct index *ix,
		       bool member, uint64_t *at)
{
	struct ibin_sample chunk[1024];
	size_t n = member ? ix->nmembers : ix->nsamples, k = 0;
	XXH3_state_t *st = XXH3_createState();
	int r = st && XXH3_64bits_reset(st) == XXH_OK ? 0 : -ENOMEM;

	if (!r)
		r = put_section(f, sec, NULL, 0, sizeof(*chunk), at);
	for (size_t i = 0; i < n && !r; i++) {
		chunk[k++] = record(l, ix, i, member);
		if (k < sizeof(chunk) / sizeof(*chunk) && i + 1 < n)
			continue;
		if (XXH3_64bits_update(st, chunk, k * sizeof(*chunk)) !=
			    XXH_OK ||
		    fwrite(chunk, sizeof(*chunk), k, f) != k)
			r = -EIO;
		k = 0;
	}
	if (!r) {
		sec->count = n;
		sec->size = (uint64_t)n * sizeof(*chunk);
		sec->sum = XXH3_64bits_digest(st);
		*at += sec->size;
	}
	XXH3_freeState(st);
	return r;
}

static int put_all(FILE *f, const struct layout *l, const struct index *ix,
		   struct ibin_header *h)
{
	uint64_t at = sizeof(*h);
	int r = 0;

	memset(h, 0, sizeof(*h));
	if (fwrite(h, 1, sizeof(*h), f) != sizeof(*h))
		return -EIO;
	struct {
		const void *p;
		size_t n, rec;
	} s[IBIN_NSECTIONS] = {
		[IBIN_STRINGS] = {l->t.str, l->t.len, 1},
		[IBIN_SHARDS] = {l->shards, ix->nshards, sizeof(*l->shards)},
		[IBIN_NAMES] = {l->names, ix->nnames, sizeof(*l->names)},
		/* IBIN_SAMPLES, IBIN_MEMBERS: put_records */
		[IBIN_CLASSES] = {l->t.classes, l->t.nclasses,
				  sizeof(*l->t.classes)},
		[IBIN_ORDER] = {l->t.order, l->t.norder, sizeof(*l->t.order)},
	};
	for (int i = 0; i < IBIN_NSECTIONS && !r; i++)
		r = i == IBIN_SAMPLES || i == IBIN_MEMBERS
			    ? put_records(f, &h->sec[i], l, ix,
					  i == IBIN_MEMBERS, &at)
			    : put_section(f, &h->sec[i], s[i].p, s[i].n,
					  s[i].rec, &at);
	h->file_size = at;
	return r;
}

int index_bin_write(const struct index *ix, FILE *f)
{
	struct layout l = {0};
	struct ibin_header h;
	int r;

	/* Offsets count from the file's start, where the header goes. */
	if (ftello(f) != 0)
		return -ESPIPE;
	if (ibin_str_add(&l.t, "", 0) != 0)
		return -EOVERFLOW;
	r = lay_out(&l, ix);
	if (!r)
		r = put_all(f, &l, ix, &h);
	if (!r) {
		memcpy(h.magic, INDEX_BIN_MAGIC, INDEX_BIN_MAGIC_LEN);
		h.version = INDEX_BIN_VERSION;
		h.header_size = sizeof(h);
		h.flags = (ix->has_sums ? IBIN_HAS_SUMS : 0) |
			  (ix->has_members ? IBIN_HAS_MEMBERS : 0) |
			  (l.t.numeric ? IBIN_NUMERIC : 0);
		h.nsections = IBIN_NSECTIONS;
		h.header_sum = XXH3_64bits(
			&h, offsetof(struct ibin_header, header_sum));
		if (fflush(f) || fseeko(f, 0, SEEK_SET) ||
		    fwrite(&h, 1, sizeof(h), f) != sizeof(h) || fflush(f) ||
		    fseeko(f, (off_t)h.file_size, SEEK_SET))
			r = -EIO;
	}
	layout_clear(&l);
	return r;
}

int index_bin_save_mode(const struct index *ix, const char *path, mode_t mode)
{
	return index_save_with(ix, path, mode, index_bin_write);
}
