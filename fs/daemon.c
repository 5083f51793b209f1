/* daemon.c - going to the background so that the command returns only once
 * the mount is ready, or fails with the reason. */
#include "fs/daemon.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

static int status_fd = -1; /* child's end of the pipe, -1 in the foreground */

static void parent_wait(int fd, pid_t child)
{
	char msg[1024];
	size_t len = 0;
	ssize_t n;

	while (len < sizeof(msg) - 1 &&
	       (n = read(fd, msg + len, sizeof(msg) - 1 - len)) != 0) {
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			break;
		len += (size_t)n;
		if (msg[0] == '0')
			_exit(0);
	}
	msg[len] = '\0';
	if (len > 1 && msg[0] == '1') {
		fprintf(stderr, "echofs: error: %s\n", msg + 1);
	} else {
		int st = 0;
		waitpid(child, &st, 0);
		fprintf(stderr, "echofs: error: the daemon exited during start-up%s\n",
			WIFSIGNALED(st) ? " (killed by a signal)" : "");
	}
	_exit(1);
}

int daemon_start(int foreground)
{
	int fds[2];
	pid_t pid;

	if (foreground)
		return 0;
	if (pipe2(fds, O_CLOEXEC) != 0)
		return -errno;
	pid = fork();
	if (pid < 0)
		return -errno;
	if (pid > 0) {
		close(fds[1]);
		parent_wait(fds[0], pid);
	}
	close(fds[0]);
	status_fd = fds[1];
	setsid();
	return 0;
}

static void send_status(const char *s, size_t len)
{
	while (len) {
		ssize_t n = write(status_fd, s, len);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			break;
		s += n;
		len -= (size_t)n;
	}
	close(status_fd);
	status_fd = -1;
}

void daemon_ready(void)
{
	int null;

	if (status_fd < 0)
		return;
	if (chdir("/") != 0) {
		/* Not fatal: the mount works from any directory. */
	}
	null = open("/dev/null", O_RDWR | O_CLOEXEC);
	if (null >= 0) {
		dup2(null, STDIN_FILENO);
		dup2(null, STDOUT_FILENO);
		dup2(null, STDERR_FILENO);
		if (null > STDERR_FILENO)
			close(null);
	}
	send_status("0", 1);
}

void daemon_fail(const char *msg)
{
	char buf[1024];
	int n;

	if (status_fd < 0) {
		fprintf(stderr, "echofs: error: %s\n", msg);
		return;
	}
	n = snprintf(buf, sizeof(buf), "1%s", msg);
	send_status(buf, n < 0 ? 0 : (size_t)n >= sizeof(buf) ? sizeof(buf) - 1 : (size_t)n);
}
