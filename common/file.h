/* file.h - reading a whole file into memory, size-capped: the one helper
 * for shard lists, index files, header files and control files. */
#ifndef ECHOFS_FILE_H
#define ECHOFS_FILE_H

#include "common/attrs.h"
#include <stddef.h>

/* Read the regular file at path to EOF into a malloc'd, NUL-terminated
 * buffer (caller frees). More than cap bytes is -EFBIG (nothing returned).
 * Reads to EOF whatever st_size says, so files that report no size
 * (/proc) work too. Never blocks on what path names: a directory is
 * -EISDIR, anything else that is not a regular file (a FIFO, a socket, a
 * device) -EINVAL, judged on the file opened. Returns 0 or -errno
 * (-ENOMEM, the open/read error). */
MUST_CHECK
int file_read_all(const char *path, size_t cap, char **out, size_t *len);

/* The same on an open descriptor (borrowed; not closed), whatever it is:
 * a pipe is read to EOF, so the caller must know it will end. */
int file_read_fd(int fd, size_t cap, char **out, size_t *len);

/* Exactly len bytes from fd into buf, retrying short reads and EINTR.
 * Returns 0, -EIO when EOF comes first, or -errno. */
MUST_CHECK
int file_read_exact(int fd, void *buf, size_t len);

#endif
