/* index.h - the dataset index: shards (URL, size, ETag, checksum),
 * samples (key, label, image member offset, size and checksum) and, from
 * format 3, every member of every sample, in memory and as a text file.
 *
 * File format 2 (UTF-8 text, tab-separated, one record a line):
 *   echofs-index 2
 *   S <url> <size> <etag or "-"> <sum>                    one per shard
 *   M <shard#> <offset> <size> <label> <key> <ext> <sum>  one per sample
 * <sum> is the XXH3-64 (xxhash, seed 0) of the whole shard (S) or of the
 * image member's bytes (M), exactly 16 lower-case hex digits. Format 1
 * ("echofs-index 1") is the same without the <sum> fields; it still loads
 * (has_sums false: bytes are then checked only by size and ETag).
 * Format 3 ("echofs-index 3") is format 2 plus one line per tar member of
 * every sample, labelled or not, image or not (the samples layout shows
 * them all):
 *   F <shard#> <offset> <size> <key> <ext> <sum>
 * <ext> here is everything after the first dot of the member's last
 * component, case kept ("seg.PNG"): "<key>.<ext>" is the member's name.
 * F lines may come anywhere after their shard's S line; formats 1 and 2
 * load with no members (has_members false). An M line also stands for the
 * member it records (its key, ext, place, size and sum), unless an F line
 * lists a member at its place: F lines are written only for the other
 * members and for images whose name the M line does not keep ("JPG",
 * "seg.jpg"), so an ImageFolder-style index grows by its .cls lines, not
 * by a second line for every image.
 * Shard numbers count S lines from 0. <key> is the WebDataset key (member name
 * up to the first dot of its last component, directory part included), <ext>
 * the image member's extension without the dot (e.g. "jpg"), <label> the class
 * label (decimal from key.cls, or the parent directory name). Fields must not
 * contain tabs, newlines or other control characters. Lines starting with '#'
 * are comments. Loading 1.3 million samples takes well under a second.
 *
 * Strictness (index_parse and index_add_sample alike, so whatever is written
 * loads again): the first line is exactly "echofs-index 1", "2" or "3";
 * no empty lines; S has 4 fields, M 7 (format 2: 5 and 8); numbers are plain
 * decimal; an M line names a shard defined by an earlier S line, offset +
 * size lies within that shard's size and size is at most INDEX_SAMPLE_MAX;
 * keys are relative paths without empty, "." or ".." components; labels are
 * one such component (no '/'); ext has no '.' or '/' (at most 15 bytes) and
 * is lower-cased on the way in; URL, ETag, key, label and ext are non-empty
 * (an unknown ETag is written "-"). An F line has 7 fields; its <ext>
 * is non-empty, has no '/', does not start with '.' and makes with the
 * key's last component a name of at most INDEX_COMPONENT_MAX bytes; one
 * that breaks a name rule is skipped and counted in skipped.members.
 *
 * Names: no component of a key or label is longer than INDEX_COMPONENT_MAX
 * bytes or blank (spaces only), and the file name a key makes (its last
 * component, '.', ext) fits in INDEX_COMPONENT_MAX bytes too: the rules the
 * tar reader applies to member names. An M line whose label, key or ext
 * breaks a name rule (or holds a control character) is skipped and counted
 * in skipped, like an unsafe tar member, and the rest loads; any other
 * broken line fails the whole parse. index_add_sample refuses such names. */
#ifndef ECHOFS_INDEX_H
#define ECHOFS_INDEX_H

#include "common/attrs.h"
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>
#include <stdio.h>

struct index_shard {
	const char *url; /* owned by the index */
	uint64_t size;
	const char *etag; /* owned by the index; "" if unknown */
	uint64_t sum;	  /* XXH3-64 of the shard (when has_sums) */
};

/* One sample, 32 bytes (an ImageNet-21k index holds 14.2 M of them): the
 * key is an offset into the index's key area, and the label and extension,
 * which repeat, one id into its table of distinct (label, ext) pairs; read
 * them with index_key, index_label and index_ext. */
struct index_sample {
	uint64_t offset; /* of the image data within the shard */
	uint64_t sum;	 /* XXH3-64 of the image data (when has_sums) */
	uint32_t key;	 /* into index.keys (below INDEX_KEYS_MAX) */
	uint32_t shard;
	uint32_t size;	/* of the image data, at most INDEX_SAMPLE_MAX */
	uint32_t names; /* into index.names: its label and ext */
};

/* A distinct (label, ext) pair: strings owned by the index, ext lower case
 * without the dot. */
struct index_names {
	const char *label;
	const char *ext;
};

/* The key area's bound: keys are NUL-terminated side by side, at offsets
 * that fit a uint32_t (a parsed index's are within its text, which is
 * below INDEX_FILE_MAX). index_add_sample past it: -ENOMEM. */
#define INDEX_KEYS_MAX ((size_t)UINT32_MAX)

/* The largest image member an index records: an M line with a bigger size
 * fails the parse, index_add_sample refuses it (-EINVAL). */
#define INDEX_SAMPLE_MAX UINT32_MAX

/* Longest name component (NAME_MAX), as TAR_COMPONENT_MAX. */
#define INDEX_COMPONENT_MAX 255

/* M lines index_parse skipped for their names. */
struct index_skips {
	uint64_t labels;       /* bad label */
	uint64_t names;	       /* bad key or extension */
	uint64_t members;      /* F lines with a bad key or extension */
	size_t first_line;     /* 1-based line of the first skip, 0: none */
	const char *first_why; /* its reason (static), NULL: none */
};

struct index {
	struct index_shard *shards;
	size_t nshards;
	struct index_sample *samples;
	size_t nsamples;
	/* Every shard and sample carries its sum (format 2). Whoever builds
	 * an index sets it once all sums are filled in; index_write then
	 * writes format 2. */
	bool has_sums;
	/* members lists every member (format 3): set by whoever builds an
	 * index from the tars (the scanner adds members), by a format 3
	 * parse; index_write then writes format 3 (with has_sums). */
	bool has_members;
	/* Every member, in tar order within a shard: key, shard, offset,
	 * size, sum as for samples; names holds ("", ext) with ext as in the
	 * tar (index_ext). */
	struct index_sample *members;
	size_t nmembers;
	struct index_skips skipped; /* filled by index_parse */
	struct index_names *names;  /* index_sample.names points here */
	size_t nnames;
	const char *keys; /* index_sample.key points here */
	/* private: string storage */
	struct index_arena *arena;
	size_t cap_shards, cap_samples, cap_names, cap_members;
};

static inline const char *index_key(const struct index *ix,
				    const struct index_sample *s)
{
	return ix->keys + s->key;
}

static inline const char *index_label(const struct index *ix,
				      const struct index_sample *s)
{
	return ix->names[s->names].label;
}

static inline const char *index_ext(const struct index *ix,
				    const struct index_sample *s)
{
	return ix->names[s->names].ext;
}

/* Empty index; caller frees with index_free. */
struct index *index_new(void);
void index_free(struct index *ix);

/* Append a shard (strings copied; etag NULL or "" when unknown). Returns its
 * number. Fields are checked when written (index_write: -EINVAL). */
uint32_t index_add_shard(struct index *ix, const char *url, uint64_t size,
			 const char *etag);
/* Replace shard's URL (copied; the old string stays in the arena): the
 * index as stored holds URLs without credentials, the one in memory the
 * SOURCE's own. Out-of-range shards are ignored. */
void index_set_url(struct index *ix, uint32_t shard, const char *url);

/* Append a sample (strings copied; label and ext interned). Returns 0,
 * -ENOMEM, or -EINVAL if a field breaks the rules above (control character,
 * empty, unsafe path), the shard number is out of range, the member lies
 * outside the shard's recorded size or is larger than INDEX_SAMPLE_MAX. */
MUST_CHECK
int index_add_sample(struct index *ix, uint32_t shard, uint64_t offset,
		     uint64_t size, const char *label, const char *key,
		     const char *ext);

/* Append a member (strings copied; ext interned, case kept). Returns 0,
 * -ENOMEM, or -EINVAL if the key or ext breaks the rules above, the shard
 * number is out of range or the member lies outside the shard. Its sum is
 * 0 until set (sums_fill). */
MUST_CHECK
int index_add_member(struct index *ix, uint32_t shard, uint64_t offset,
		     uint64_t size, const char *key, const char *ext);

/* Parse an index held in memory (read only; its strings are copied into
 * the index). On error returns -EBADMSG and writes "line N: reason" into
 * err, or -ENOMEM, or -EFBIG (len INDEX_FILE_MAX or more). *out is
 * caller-freed. */
MUST_CHECK
int index_parse(const char *buf, size_t len, struct index **out, char *err,
		size_t errlen);
/* Read and parse a local file (in chunks, never past the size it had when
 * opened). -errno on I/O failure, with a reason in err.
 * index_parse and index_load also take a binary index (index_bin.h: one
 * starting with INDEX_BIN_MAGIC), which they check whole and copy in; its
 * errors read "binary index: reason" instead of "line N: reason". */
MUST_CHECK
int index_load(const char *path, struct index **out, char *err, size_t errlen);
/* index_parse on a malloc'd buffer of len bytes (file_read_all's and
 * http_get_all's), which it takes over and frees. */
int index_parse_owned(char *text, size_t len, struct index **out, char *err,
		      size_t errlen);

/* The largest index file read: far above any real one (14.2 M samples,
 * ImageNet-21k, are 1.1 GB); a guard against reading something that is not
 * an index. */
#define INDEX_FILE_MAX ((size_t)4 << 30)

/* Write in the format above (3 when has_sums and has_members, 2 when
 * has_sums, else 1). Returns 0, -EINVAL (a
 * shard URL or ETag that breaks the rules) or -EIO. */
MUST_CHECK
int index_write(const struct index *ix, FILE *f);
/* Write to path atomically (temp file in the same directory, fsync, rename,
 * fsync of the directory; mode 0644). Returns 0 or -errno (a failed fsync
 * of the directory too: the file is then in place but maybe not durable). */
MUST_CHECK
int index_save(const struct index *ix, const char *path);
/* The same with the file's mode: 0600 keeps it its owner's from the first
 * byte (the temporary file too). */
int index_save_mode(const struct index *ix, const char *path, mode_t mode);

#endif
