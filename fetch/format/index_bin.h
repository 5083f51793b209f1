/* index_bin.h - the binary index (docs/index-format.md): the same shards,
 * samples and members as the text index (index.h), plus the tree's order
 * (classes, each class's file names sorted, duplicates already renamed),
 * in fixed-size records a reader maps and reads in place.
 *
 * Loading checks everything before anything is used: the magic and
 * version, every section's offset, size and count against the file's
 * size, the XXH3-64 of the header and of every section, and that every
 * reference (string, shard, name pair, class, sample) points inside its
 * table. A file that fails any check is refused with -EBADMSG and one
 * line in err; nothing in it is trusted before. */
#ifndef ECHOFS_INDEX_BIN_H
#define ECHOFS_INDEX_BIN_H

#include "common/attrs.h"
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/types.h>

struct index;
struct index_bin;

/* The first 8 bytes of every binary index: a byte no text index starts
 * with (text indexes start "echofs-index"), then a name, then a newline
 * that a text-mode transfer would mangle. */
#define INDEX_BIN_MAGIC                                                        \
	"\x89"                                                                 \
	"EFSIDX\n"
#define INDEX_BIN_MAGIC_LEN 8
#define INDEX_BIN_VERSION 1

/* buf (len bytes) starts with the binary magic. */
bool index_bin_is(const void *buf, size_t len);

/* Write ix in the binary form to f, which must be seekable and at its
 * start (-ESPIPE otherwise: the header, with the sections' places and
 * checksums, is written last); f is left at the end. Names are
 * decided here, the same on every rank: a class's files sorted by name,
 * a repeated name renamed "<base>_dup<sample>.<ext>". Returns 0, -EINVAL
 * (a field the format cannot hold), -EOVERFLOW (past 2^32 bytes of
 * strings) or -EIO. */
MUST_CHECK
int index_bin_write(const struct index *ix, FILE *f);
/* index_bin_write to path atomically, as index_save_mode. */
MUST_CHECK
int index_bin_save_mode(const struct index *ix, const char *path, mode_t mode);

/* Check len bytes as a binary index: 0, or -EBADMSG with one line in
 * err. Reads every byte (the checksums); writes nothing. */
MUST_CHECK
int index_bin_check(const void *buf, size_t len, char *err, size_t errlen);

/* Map path read-only and check it (index_bin_check). *out is closed with
 * index_bin_close. -EBADMSG (err says why), or -errno ("path: reason"). */
MUST_CHECK
int index_bin_open(const char *path, struct index_bin **out, char *err,
		   size_t errlen);
/* Check buf (borrowed: it must outlive *out) as index_bin_open does. */
MUST_CHECK
int index_bin_open_mem(const void *buf, size_t len, struct index_bin **out,
		       char *err, size_t errlen);
/* Accepts NULL. */
void index_bin_close(struct index_bin *b);

/* The same shards, samples and members as an index in memory (strings
 * copied; *out caller-freed). 0, -ENOMEM, or -EBADMSG when a record
 * breaks a rule of index.h (err says which). */
MUST_CHECK
int index_bin_to_index(const struct index_bin *b, struct index **out, char *err,
		       size_t errlen);

/* The XXH3-64 of a local file's bytes (read in chunks): the key under which a
 * mount keeps the binary copy of a text index it was given. 0 or -errno. */
MUST_CHECK
int index_bin_file_sum(const char *path, uint64_t *sum);

/* index_bin_to_index for a b of index_bin_open: the index takes over the
 * mapping and reads its keys in place from the file's string table
 * (shared, file-backed pages rather than a copy); b keeps working until
 * index_bin_close, the mapping until index_free. */
MUST_CHECK
int index_bin_into_index(struct index_bin *b, struct index **out, char *err,
			 size_t errlen);

/* What a mount reads in place: the tree (borrowed from the mapping). */
size_t index_bin_nsamples(const struct index_bin *b);
size_t index_bin_nclasses(const struct index_bin *b);
/* Class c (below nclasses): its directory name and how many files. */
const char *index_bin_class_name(const struct index_bin *b, size_t c,
				 size_t *nfiles);
/* File i of class c, in name order: its name, and its sample in *sample. */
const char *index_bin_file(const struct index_bin *b, size_t c, size_t i,
			   uint32_t *sample);
/* The class named name, or -ENOENT (binary search). */
int64_t index_bin_find_class(const struct index_bin *b, const char *name);
/* The position in class c of the file named name, or -ENOENT. */
int64_t index_bin_find_file(const struct index_bin *b, size_t c,
			    const char *name);

#endif
