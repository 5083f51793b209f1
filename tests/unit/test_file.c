/* test_file.c - reading whole files: sizes, the cap, pipes, errors. */
#include <criterion/criterion.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/file.h"
#include "common/util.h"
#include "fixtures.h"

static char dir[64];

static void setup(void)
{
	snprintf(dir, sizeof(dir), "/tmp/echofs-test-file.XXXXXX");
	cr_assert_not_null(mkdtemp(dir));
}

static void teardown(void)
{
	fx_rm_tree(dir);
}

TestSuite(file, .init = setup, .fini = teardown);

/* A file of n bytes (a repeating pattern) at dir/name; its path in out. */
static void make(const char *name, size_t n, char *out, size_t outlen)
{
	char *data = xmalloc(n ? n : 1);
	for (size_t i = 0; i < n; i++)
		data[i] = (char)('a' + i % 23);
	snprintf(out, outlen, "%s/%s", dir, name);
	fx_write_file(out, data, n);
	free(data);
}

Test(file, sizes_around_the_growth_steps_read_exactly)
{
	static const size_t sizes[] = {0, 1, 4095, 65535, 65536, 65537, 300000};
	char path[128];

	for (size_t k = 0; k < ARRAY_SIZE(sizes); k++) {
		char *buf = NULL;
		size_t len = 99;
		make("f", sizes[k], path, sizeof(path));
		cr_assert_eq(file_read_all(path, 1 << 20, &buf, &len), 0);
		cr_assert_eq(len, sizes[k]);
		cr_assert_eq(buf[len], '\0', "not NUL-terminated");
		for (size_t i = 0; i < len; i++)
			cr_assert_eq(buf[i], (char)('a' + i % 23), "byte %zu",
				     i);
		free(buf);
	}
}

Test(file, cap_is_inclusive_and_one_more_byte_is_efbig)
{
	char path[128], *buf = NULL;
	size_t len;

	make("f", 1000, path, sizeof(path));
	cr_assert_eq(file_read_all(path, 1000, &buf, &len), 0);
	cr_assert_eq(len, 1000);
	free(buf);
	buf = NULL;
	cr_assert_eq(file_read_all(path, 999, &buf, &len), -EFBIG);
	cr_assert_null(buf);
	cr_assert_eq(file_read_all(path, 0, &buf, &len), -EFBIG);
}

Test(file, a_pipe_with_no_size_reads_to_eof_and_is_capped)
{
	int fds[2];
	char chunk[1000], *buf = NULL;
	size_t len;

	memset(chunk, 'x', sizeof(chunk));
	cr_assert_eq(pipe(fds), 0);
	cr_assert_eq(write(fds[1], chunk, sizeof(chunk)),
		     (ssize_t)sizeof(chunk));
	close(fds[1]);
	cr_assert_eq(file_read_fd(fds[0], 4096, &buf, &len), 0);
	close(fds[0]);
	cr_assert_eq(len, sizeof(chunk));
	free(buf);

	cr_assert_eq(pipe(fds), 0);
	cr_assert_eq(write(fds[1], chunk, sizeof(chunk)),
		     (ssize_t)sizeof(chunk));
	close(fds[1]);
	cr_assert_eq(file_read_fd(fds[0], 500, &buf, &len), -EFBIG);
	close(fds[0]);
}

Test(file, errors_come_back_as_negative_errno)
{
	char path[128], *buf = NULL;
	size_t len;

	snprintf(path, sizeof(path), "%s/missing", dir);
	cr_assert_eq(file_read_all(path, 100, &buf, &len), -ENOENT);
	cr_assert_eq(file_read_all(dir, 100, &buf, &len), -EISDIR);
	cr_assert_null(buf);
}

/* Issue 50: a FIFO named as an input (index=, a list file, header_file=)
 * hung the mount in open(2), waiting for a writer that never came. Every
 * file that is not regular fails at once, reached directly or through a
 * symlink; the timeout turns the old hang into a failure. */
Test(file, special_files_fail_at_once_and_never_block, .timeout = 20)
{
	char fifo[128], link[128], reg[128], *buf = NULL;
	size_t len;

	snprintf(fifo, sizeof(fifo), "%s/fifo", dir);
	cr_assert_eq(mkfifo(fifo, 0600), 0);
	cr_assert_eq(file_read_all(fifo, 100, &buf, &len), -EINVAL);
	snprintf(link, sizeof(link), "%s/to-fifo", dir);
	cr_assert_eq(symlink(fifo, link), 0);
	cr_assert_eq(file_read_all(link, 100, &buf, &len), -EINVAL);
	cr_assert_eq(file_read_all("/dev/null", 100, &buf, &len), -EINVAL);
	cr_assert_eq(file_read_all("/dev/zero", 100, &buf, &len), -EINVAL);
	cr_assert_null(buf);

	/* a regular file behind a symlink is still read */
	make("reg", 10, reg, sizeof(reg));
	snprintf(link, sizeof(link), "%s/to-reg", dir);
	cr_assert_eq(symlink(reg, link), 0);
	cr_assert_eq(file_read_all(link, 100, &buf, &len), 0);
	cr_assert_eq(len, 10);
	free(buf);
}

/* A FIFO with a writer that keeps it open and never writes: not read
 * either (reading it would wait for that writer's EOF). */
Test(file, a_fifo_with_a_silent_writer_is_refused, .timeout = 20)
{
	char fifo[128], *buf = NULL;
	size_t len;
	int w;

	snprintf(fifo, sizeof(fifo), "%s/fifo", dir);
	cr_assert_eq(mkfifo(fifo, 0600), 0);
	/* O_RDWR on a FIFO opens without waiting (Linux) and is a writer */
	w = open(fifo, O_RDWR);
	cr_assert_geq(w, 0);
	cr_assert_eq(file_read_all(fifo, 100, &buf, &len), -EINVAL);
	cr_assert_null(buf);
	close(w);
}

Test(file, read_exact_fills_or_says_eio)
{
	char path[128], got[10];
	int fd;

	make("f", 10, path, sizeof(path));
	fd = open(path, O_RDONLY);
	cr_assert_geq(fd, 0);
	cr_assert_eq(file_read_exact(fd, got, 6), 0);
	cr_assert_eq(memcmp(got, "abcdef", 6), 0);
	cr_assert_eq(file_read_exact(fd, got, 6), -EIO,
		     "only 4 bytes were left");
	close(fd);
	cr_assert_eq(file_read_exact(-1, got, 1), -EBADF);
}
