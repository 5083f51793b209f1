/* daemon.c - going to the background so that the command returns only once
 * the mount is ready, or fails with the reason; and shutting down on signals
 * or a lazy unmount. */
#define FUSE_USE_VERSION 314
#include "fs/daemon.h"

#include "common/log.h"
#include "fs/mounts.h"

#include <errno.h>
#include <fcntl.h>
#include <fuse_lowlevel.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
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

/* ---- shutdown: signals and the watcher (see the DESIGN note in daemon.h) */

#define WATCH_PERIOD_MS 300

static struct {
	struct fuse_session *se;
	int pipe[2];
	int mount_id;
	void (*cancel)(void *ud);
	void *ud;
	pthread_t main, thread;
	int started;
	volatile sig_atomic_t sig;    /* first signal received */
	volatile sig_atomic_t waking; /* the watcher's own wake-up SIGTERM */
	_Atomic int quit, gone;
} w = {.pipe = {-1, -1}, .mount_id = -1};

static const int stop_signals[] = {SIGTERM, SIGINT, SIGHUP};

static void on_signal(int sig)
{
	int saved = errno;

	if (!w.sig && !w.waking)
		w.sig = sig;
	fuse_session_exit(w.se);
	if (write(w.pipe[1], "s", 1) < 0) {
		/* pipe full: a byte is already waiting */
	}
	errno = saved;
}

/* Wait for a signal byte, the quit flag, or the mount to vanish. */
static int watch_wait(void)
{
	struct pollfd p = {.fd = w.pipe[0], .events = POLLIN};
	char buf[16];

	for (;;) {
		int n = poll(&p, 1, WATCH_PERIOD_MS);
		if (w.quit)
			return 0;
		if (n > 0 && read(w.pipe[0], buf, sizeof(buf)) > 0)
			return 1;
		if (w.mount_id >= 0 && mounts_attached(w.mount_id) == 0) {
			w.gone = 1;
			log_info("the mount is gone (unmounted, maybe lazily): "
				 "shutting down");
			return 1;
		}
	}
}

static void *watch_main(void *arg)
{
	(void)arg;
	if (!watch_wait())
		return NULL;
	if (w.sig)
		log_info("signal %d: shutting down", (int)w.sig);
	w.cancel(w.ud);
	fuse_session_exit(w.se);
	w.waking = 1;
	pthread_kill(w.main, SIGTERM);
	return NULL;
}

int daemon_watch(struct fuse_session *se, int mount_id,
		 void (*cancel)(void *ud), void *ud)
{
	struct sigaction sa;
	int r;

	if (pipe2(w.pipe, O_CLOEXEC | O_NONBLOCK) != 0)
		return -errno;
	w.se = se;
	w.mount_id = mount_id;
	w.cancel = cancel;
	w.ud = ud;
	w.main = pthread_self();
	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = on_signal; /* no SA_RESTART: waits must wake */
	sigemptyset(&sa.sa_mask);
	for (size_t i = 0; i < sizeof(stop_signals) / sizeof(int); i++)
		sigaction(stop_signals[i], &sa, NULL);
	signal(SIGPIPE, SIG_IGN);
	r = pthread_create(&w.thread, NULL, watch_main, NULL);
	if (r)
		return -r;
	w.started = 1;
	return 0;
}

int daemon_unwatch(void)
{
	if (w.started) {
		w.quit = 1;
		if (write(w.pipe[1], "q", 1) < 0) {
			/* the watcher also polls quit every period */
		}
		pthread_join(w.thread, NULL);
		w.started = 0;
	}
	for (size_t i = 0; i < sizeof(stop_signals) / sizeof(int); i++)
		signal(stop_signals[i], SIG_DFL);
	return w.sig;
}

int daemon_mount_gone(void)
{
	return w.gone;
}
