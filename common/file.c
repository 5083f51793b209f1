/* file.c - reading a whole file into memory, size-capped (see file.h). */
#include "common/file.h"

#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#define FIRST_CHUNK 65536

/* A first buffer size: the file's own size when it says one (plus one byte
 * to see EOF without growing), else a modest chunk. */
static size_t first_size(int fd, size_t cap)
{
	struct stat st;
	size_t want = FIRST_CHUNK;

	if (fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && st.st_size > 0 &&
	    (unsigned long long)st.st_size < cap)
		want = (size_t)st.st_size + 1;
	return want < cap + 1 ? want : cap + 1;
}

/* Make room for more bytes in *buf (len used, *size allocated, one byte
 * kept for the NUL): doubles, never past cap + 1 (one byte over the cap
 * shows the file is too big). */
static int grow(char **buf, size_t *size, size_t len, size_t cap)
{
	size_t want;
	char *nb;

	if (len < *size - 1)
		return 0;
	if (len > cap)
		return -EFBIG;
	want = *size > (cap + 2) / 2 ? cap + 2 : *size * 2;
	nb = realloc(*buf, want);
	if (!nb)
		return -ENOMEM;
	*buf = nb;
	*size = want;
	return 0;
}

int file_read_fd(int fd, size_t cap, char **out, size_t *len)
{
	size_t size, n = 0;
	char *buf;
	int r;

	if (cap > SIZE_MAX - 4)
		cap = SIZE_MAX - 4; /* cap + 2 below must not wrap */
	size = first_size(fd, cap) + 1;
	buf = malloc(size);
	r = buf ? 0 : -ENOMEM;

	while (r == 0) {
		ssize_t got;
		if ((r = grow(&buf, &size, n, cap)) != 0)
			break;
		got = read(fd, buf + n, size - 1 - n);
		if (got < 0 && errno == EINTR)
			continue;
		if (got < 0)
			r = -errno;
		else if (got == 0)
			break;
		else
			n += (size_t)got;
	}
	if (r == 0 && n > cap)
		r = -EFBIG;
	if (r) {
		free(buf);
		return r;
	}
	buf[n] = '\0';
	*out = buf;
	*len = n;
	return 0;
}

/* O_NONBLOCK: opening a FIFO with no writer would otherwise wait forever
 * (and a device may block too); a regular file ignores the flag. The type
 * is judged on what was opened, not on a stat of the path beforehand. */
int file_read_all(const char *path, size_t cap, char **out, size_t *len)
{
	int fd = open(path, O_RDONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
	struct stat st;
	int r = 0;

	if (fd < 0)
		return -errno;
	if (fstat(fd, &st) != 0)
		r = -errno;
	else if (S_ISDIR(st.st_mode))
		r = -EISDIR;
	else if (!S_ISREG(st.st_mode))
		r = -EINVAL;
	if (r == 0)
		r = file_read_fd(fd, cap, out, len);
	close(fd);
	return r;
}

int file_read_exact(int fd, void *buf, size_t len)
{
	size_t got = 0;

	while (got < len) {
		ssize_t n = read(fd, (char *)buf + got, len - got);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			return -errno;
		if (n == 0)
			return -EIO;
		got += (size_t)n;
	}
	return 0;
}
