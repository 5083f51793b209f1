/* tar.h - a push (streaming) parser for ustar / GNU / PAX tar archives.
 *
 * Bytes are fed in any chunking; the parser calls back once per archive
 * entry with the entry's final name (after GNU longname / PAX path records)
 * and the offset of its data in the archive. It never follows links and never
 * builds filesystem paths: safety of names is judged here so every caller
 * gets the same rules. Low-level: it reports, it does not log.
 *
 * Formats: v7, POSIX ustar (name prefix field), GNU ('L' long name, 'K' long
 * link name, base-256 numbers), PAX ('x' records: "path" and "size" override
 * the next entry's header, other keys ignored; 'g' global records skipped).
 * Header checksums are verified (unsigned and signed byte sums accepted).
 * The first all-zero header block ends the archive, as in GNU tar, libarchive
 * and Python's tarfile; anything after it is ignored.
 *
 * Names: leading "./" components are dropped ("./a/b.jpg" is "a/b.jpg").
 * Memory: fixed buffers (header, names, small data, PAX records) allocated
 * once; member data is never copied except for small regular files. */
#ifndef ECHOFS_TAR_H
#define ECHOFS_TAR_H

#include "common/attrs.h"
#include <stddef.h>
#include <stdint.h>

/* Largest member whose data the parser hands over in tar_entry.small_data
 * (used for labels such as key.cls). */
#define TAR_SMALL_MAX 256
/* Longest accepted member name (after longname / PAX); longer is -EBADMSG. */
#define TAR_NAME_MAX 4096
/* Longest name component (NAME_MAX); a longer one is rejected. */
#define TAR_COMPONENT_MAX 255
/* Largest accepted PAX extended header ('x') data; larger is -EBADMSG. */
#define TAR_PAX_MAX 16384

struct tar_entry {
	const char
		*name; /* borrowed, valid during the callback, NUL-terminated */
	char type;     /* typeflag as in the header ('0', '5', '2', ...) */
	uint64_t data_offset; /* offset of the first data byte in the archive */
	uint64_t size;	      /* data size in bytes */
	/* NULL for a regular file with a safe name; otherwise a short static
	 * reason the entry must be skipped: "symlink", "hard link", "device",
	 * "fifo", "directory", "sparse file", "unsupported type" (by type,
	 * checked first), then "empty name", "absolute name", "dot-dot
	 * component", "dot component", "empty component", "NUL in name",
	 * "control character", "component too long" (over
	 * TAR_COMPONENT_MAX bytes), "blank component" (spaces only) (by
	 * name). Skipped entries are still reported so
	 * the caller can count them. The pointer is stable: callers may compare
	 * or keep it. */
	const char *reject;
	/* For regular files with size <= TAR_SMALL_MAX and no reject: the whole
	 * data (non-NULL even when size is 0), else NULL. Borrowed, valid
	 * during the callback. */
	const uint8_t *small_data;
};

/* Return 0 to go on, or a negative errno to stop parsing (returned by
 * tar_parser_feed). */
typedef int (*tar_entry_fn)(void *ud, const struct tar_entry *e);

struct tar_parser;

/* Caller frees with tar_parser_free. */
struct tar_parser *tar_parser_new(tar_entry_fn on_entry, void *ud);
void tar_parser_free(struct tar_parser *p);

/* Feed the next len bytes of the archive. Returns 0, a callback's negative
 * errno, or -EBADMSG on a malformed archive (bad header checksum, size field
 * overflowing or not octal/base-256, name too long, PAX record malformed,
 * GNU/PAX record not followed by an entry); after an error every later call
 * returns the same error. The callback for a small regular file runs once its
 * data has been fed, for other entries as soon as the header has. */
MUST_CHECK
int tar_parser_feed(struct tar_parser *p, const void *buf, size_t len);

/* End of input. Returns 0 if the archive ended cleanly (end-of-archive zero
 * block, or EOF exactly at a header boundary), -EBADMSG if it was truncated
 * inside a header or member data (a size pointing past the end), or the
 * earlier error. */
MUST_CHECK
int tar_parser_finish(struct tar_parser *p);

/* Human-readable reason for the last error, static string, or "" if none. */
const char *tar_parser_error(const struct tar_parser *p);

/* Total bytes consumed so far. */
uint64_t tar_parser_offset(const struct tar_parser *p);

#endif
