/* index_int.h - what the pieces of the index (fetch/format/index*.c) share:
 * its storage, the name rules and the calls between them. Nothing outside
 * fetch/format/index*.c includes it: the API is fetch/format/index.h. */
#ifndef ECHOFS_INDEX_INT_H
#define ECHOFS_INDEX_INT_H

#include "fetch/format/index.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define INDEX_MAGIC_V1 "echofs-index 1"
#define INDEX_MAGIC_V2 "echofs-index 2"
#define INDEX_MAGIC_V3 "echofs-index 3"

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

/* index_mem.c: no tab, newline or other control character (the file
 * format's rule) in the NUL-terminated s. */
bool index_text_ok(const char *s);

/* index_mem.c: why label/key/ext (lengths given, not NUL-terminated) break
 * the name rules of index.h, or NULL when they don't; index_reject_label
 * when it is the label. */
extern const char index_reject_label[];
const char *index_names_reject(const char *label, size_t llen, const char *key,
			       size_t klen, const char *ext, size_t elen);
/* index_mem.c: the same for a member's key and ext ("seg.PNG"). */
const char *index_member_reject(const char *key, size_t klen, const char *ext,
				size_t elen);

/* index_mem.c: len bytes of s, lower-cased, into d (len + 1 bytes,
 * NUL-terminated). */
void index_lower_into(char *d, const char *s, size_t len);

/* index_mem.c: [offset, offset + size) lies within shard, a known one. */
bool index_in_shard(const struct index *ix, uint32_t shard, uint64_t offset,
		    uint64_t size);

/* index_mem.c: the names id for a sample's label and (lower-cased) ext,
 * added if new; -1 when the table is full. */
int64_t index_names_of(struct index *ix, const char *label, size_t llen,
		       const char *ext, size_t elen);

/* index_mem.c: room for lines samples, mapped once (untouched pages cost
 * nothing); 0 or -ENOMEM. index_trim_samples gives back what stayed
 * untouched. */
int index_alloc_samples(struct index *ix, size_t lines);
void index_trim_samples(struct index *ix);

/* index_mem.c: room for one more member (0 or -ENOMEM), then
 * index_put_member fills it but for its key offset and sum, which the
 * caller sets before counting it in nmembers. */
int index_grow_members(struct index *ix);
int index_put_member(struct index *ix, uint32_t shard, uint64_t offset,
		     uint64_t size, const char *ext, size_t elen);

/* index_mem.c: records by place (shard, offset): ids + 1 in a table of a
 * power of two slots, for matching members with the samples whose images
 * they are. Caller frees slot. */
struct index_places {
	uint32_t *slot;
	size_t mask;
};

void index_places_make(struct index_places *p, const struct index_sample *v,
		       size_t n);
/* index_mem.c: the id in v of the record at x's place, or -1. */
int64_t index_places_find(const struct index_places *p,
			  const struct index_sample *v,
			  const struct index_sample *x);

/* index_mem.c: room for nsamples samples and key_bytes (0: none asked) of keys
 * in all, taken at once (a binary index knows both): 0 or -ENOMEM. */
int index_reserve(struct index *ix, size_t nsamples, size_t key_bytes);
/* index_mem.c: index_add_sample with the (label, ext) pair given by its
 * id in ix->names (index_names_of), checked as index_add_sample does;
 * _at with the key already in the key area, at offset key. */
int index_add_sample_named(struct index *ix, uint32_t shard, uint64_t offset,
			   uint64_t size, const char *key, uint32_t names);
int index_add_sample_at(struct index *ix, uint32_t shard, uint64_t offset,
			uint64_t size, uint32_t key, uint32_t names);
/* index_mem.c: the key area becomes keys (keys_len bytes, NUL-ended),
 * inside map (maplen bytes, munmap'd by index_free: a binary index's
 * read-only mapping, whose string table the keys are read from in
 * place); keys added later are copied out first (add_key). */
void index_keys_borrow(struct index *ix, void *map, size_t maplen,
		       const char *keys, size_t keys_len);

/* index_write.c: index_save_mode with the writer given (index_write,
 * index_bin_write): temp file, fsync, rename, fsync of the directory. */
int index_save_with(const struct index *ix, const char *path, mode_t mode,
		    int (*write)(const struct index *, FILE *));

#endif
