/* index_bin_int.h - the binary index's records as they lie in the file
 * (docs/index-format.md), shared by its writer (index_bin_write.c,
 * index_bin_tree.c) and its reader (index_bin.c). Little-endian, every
 * section 8-byte aligned; a big-endian host refuses to build. */
#ifndef ECHOFS_INDEX_BIN_INT_H
#define ECHOFS_INDEX_BIN_INT_H

#include "fetch/format/index_bin.h"

#include <stdint.h>

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "the binary index is read in place: little-endian hosts only"
#endif

/* A reference that points nowhere (a sample without a class). */
#define IBIN_NONE UINT32_MAX

enum ibin_sec {
	IBIN_STRINGS, /* NUL-terminated strings; offset 0 is "" */
	IBIN_SHARDS,  /* struct ibin_shard */
	IBIN_NAMES,   /* struct ibin_names: (label, ext) pairs */
	IBIN_SAMPLES, /* struct ibin_sample */
	IBIN_MEMBERS, /* struct ibin_sample, cls and name IBIN_NONE */
	IBIN_CLASSES, /* struct ibin_class, in name order */
	IBIN_ORDER,   /* uint32_t sample numbers, class by class, by name */
	IBIN_NSECTIONS
};

#define IBIN_HAS_SUMS 1u
#define IBIN_HAS_MEMBERS 2u
#define IBIN_NUMERIC 4u /* classes named by zero-padded label values */
#define IBIN_FLAGS_KNOWN 7u

struct ibin_section {
	uint64_t offset; /* from the file's start, a multiple of 8 */
	uint64_t size;	 /* bytes: count * the record's size */
	uint64_t count;	 /* records (strings: bytes) */
	uint64_t sum;	 /* XXH3-64 (seed 0) of the section's bytes */
};

struct ibin_header {
	char magic[INDEX_BIN_MAGIC_LEN];
	uint32_t version;     /* INDEX_BIN_VERSION */
	uint32_t header_size; /* sizeof(struct ibin_header) */
	uint64_t file_size;   /* the whole file's */
	uint32_t flags;	      /* IBIN_HAS_SUMS | ... */
	uint32_t nsections;   /* IBIN_NSECTIONS */
	struct ibin_section sec[IBIN_NSECTIONS];
	uint64_t reserved[2]; /* 0 */
	uint64_t header_sum;  /* XXH3-64 of every byte above */
};

struct ibin_shard {
	uint64_t size;
	uint64_t sum;
	uint32_t url;  /* string */
	uint32_t etag; /* string, "" unknown */
};

struct ibin_names {
	uint32_t label; /* string */
	uint32_t ext;	/* string */
};

struct ibin_sample {
	uint64_t offset; /* of the image (member) data in its shard */
	uint64_t sum;	 /* XXH3-64 of that data */
	uint32_t shard;
	uint32_t size;
	uint32_t key;	/* string: the WebDataset key */
	uint32_t names; /* into the names table */
	uint32_t cls;	/* class number, IBIN_NONE: in no directory */
	uint32_t name;	/* string: its file name in the class, or IBIN_NONE */
};

struct ibin_class {
	uint32_t name;	/* string: the directory's name */
	uint32_t label; /* string: the label as the index has it */
	uint32_t first; /* into the order */
	uint32_t count;
};

_Static_assert(sizeof(struct ibin_header) == 280, "header layout");
_Static_assert(sizeof(struct ibin_shard) == 24, "shard layout");
_Static_assert(sizeof(struct ibin_sample) == 40, "sample layout");
_Static_assert(sizeof(struct ibin_class) == 16, "class layout");

/* The tree a writer lays out (index_bin_tree.c). */
struct ibin_tree {
	char *str; /* the string table being built */
	size_t len, cap;
	uint32_t *cls;	/* per sample: class, IBIN_NONE */
	uint32_t *name; /* per sample: string of its file name */
	struct ibin_class *classes;
	size_t nclasses;
	uint32_t *order; /* norder sample numbers */
	size_t norder;
	bool numeric;
};

/* index_bin_tree.c: a string into t->str, its offset (or IBIN_NONE past
 * 2^32 - 1 bytes). */
uint32_t ibin_str_add(struct ibin_tree *t, const char *s, size_t len);
/* index_bin_tree.c: classes, names and order of ix into t (whose str
 * may hold strings already). 0 or -EOVERFLOW. */
int ibin_tree_build(struct ibin_tree *t, const struct index *ix);
void ibin_tree_clear(struct ibin_tree *t);

#endif
