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
#include <sys/signalfd.h>
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

static int signals_start(int background, const char *log_file);

int daemon_start(int foreground, const char *log_file)
{
	int fds[2];
	pid_t pid;

	if (foreground)
		return signals_start(0, log_file);
	if (pipe2(fds, O_CLOEXEC) != 0)
		return -errno;
	pid = fork();
	if (pid < 0) {
		int e = errno;
		close(fds[0]);
		close(fds[1]);
		return -e;
	}
	if (pid > 0) {
		close(fds[1]);
		parent_wait(fds[0], pid);
	}
	close(fds[0]);
	status_fd = fds[1];
	setsid();
	return signals_start(1, log_file);
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

/* ---- signals and the watcher (see the DESIGN note in daemon.h) */

#define WATCH_PERIOD_MS 300

static struct {
	struct fuse_session *se;
	int pipe[2];
	int sigfd;
	int mount_id;
	void (*cancel)(void *ud);
	void *ud;
	const char *log_file; /* borrowed, NULL without log_file */
	int background;
	pthread_t main, thread;
	int started;
	volatile sig_atomic_t sig;    /* first signal received */
	volatile sig_atomic_t waking; /* the watcher's own wake-up SIGTERM */
	_Atomic int quit, gone, watching;
} w = {.pipe = {-1, -1}, .sigfd = -1, .mount_id = -1};

/* Signals that a user may send and whose default action would end the
 * daemon without unmounting. Faults and SIGQUIT, SIGTRAP, SIGXCPU keep
 * their default (a core dump is what they ask for); SIGPROF is left to
 * profilers. */
static const int taken_signals[] = {
	SIGTERM, SIGINT, SIGHUP,	       /* stop (SIGHUP in -f only) */
	SIGUSR1,			       /* reopen log_file */
	SIGUSR2, SIGALRM, SIGVTALRM, SIGIO,    /* ignored, counted */
	SIGPWR,	 SIGSTKFLT, SIGXFSZ,
};

static void taken_set(sigset_t *set)
{
	sigemptyset(set);
	for (size_t i = 0; i < sizeof(taken_signals) / sizeof(int); i++)
		sigaddset(set, taken_signals[i]);
	for (int s = SIGRTMIN; s <= SIGRTMAX; s++)
		sigaddset(set, s);
}

static int is_stop(int sig)
{
	return sig == SIGTERM || sig == SIGINT ||
	       (sig == SIGHUP && !w.background);
}

/* Starting up (no session yet): end as the default action would, so that
 * Ctrl-C still interrupts a long index build and the parent reports it. */
static void die_of(int sig)
{
	sigset_t one;

	signal(sig, SIG_DFL);
	sigemptyset(&one);
	sigaddset(&one, sig);
	pthread_sigmask(SIG_UNBLOCK, &one, NULL);
	raise(sig);
	_exit(128 + sig);
}

static void reopen_log(int sig)
{
	int r;

	if (!w.log_file) {
		log_info("signal %d: no log_file to reopen", sig);
		return;
	}
	/* log_set_file swaps the stream only once the new one is open. */
	if ((r = log_set_file(w.log_file)) != 0)
		log_warn("signal %d: cannot reopen log_file %s: %s (still "
			 "logging to the old one)",
			 sig, w.log_file, log_file_strerror(r));
	else
		log_info("signal %d: reopened log_file %s", sig, w.log_file);
}

/* Act on the signals queued on the signalfd; 1 when one stops the daemon. */
static int take_signals(void)
{
	struct signalfd_siginfo si;

	while (read(w.sigfd, &si, sizeof(si)) == (ssize_t)sizeof(si)) {
		int sig = (int)si.ssi_signo;

		if (is_stop(sig)) {
			if (!atomic_load(&w.watching))
				die_of(sig);
			if (!w.sig)
				w.sig = sig;
			return 1;
		}
		if (sig == SIGUSR1 || sig == SIGHUP)
			reopen_log(sig);
		else
			log_counted("signals_ignored",
				    "signal %d from pid %u ignored", sig,
				    (unsigned)si.ssi_pid);
	}
	return 0;
}

/* Main thread only (the one thread with SIGTERM unblocked, for the
 * watcher's wake-up): async-signal-safe work only. */
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

/* Wait for a stopping signal, the quit flag, or the mount to vanish. */
static int watch_wait(void)
{
	struct pollfd p[2] = {{.fd = w.pipe[0], .events = POLLIN},
			      {.fd = w.sigfd, .events = POLLIN}};
	char buf[16];

	for (;;) {
		int n = poll(p, 2, WATCH_PERIOD_MS);
		if (w.quit)
			return 0;
		if (n > 0 && (p[0].revents & POLLIN) &&
		    read(w.pipe[0], buf, sizeof(buf)) > 0)
			return 1;
		if (n > 0 && (p[1].revents & POLLIN) && take_signals())
			return 1;
		if (atomic_load(&w.watching) && w.mount_id >= 0 &&
		    mounts_attached(w.mount_id) == 0) {
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

/* Before any other thread exists: block every taken signal here, so that
 * all threads inherit the mask and none sees EINTR or dies of one; the
 * watcher reads them from a signalfd. */
static int signals_start(int background, const char *log_file)
{
	sigset_t set;
	int r;

	w.background = background;
	w.log_file = log_file;
	signal(SIGPIPE, SIG_IGN);
	taken_set(&set);
	if ((r = pthread_sigmask(SIG_BLOCK, &set, NULL)) != 0)
		return -r;
	if (pipe2(w.pipe, O_CLOEXEC | O_NONBLOCK) != 0)
		return -errno;
	w.sigfd = signalfd(-1, &set, SFD_CLOEXEC | SFD_NONBLOCK);
	if (w.sigfd < 0)
		return -errno;
	r = pthread_create(&w.thread, NULL, watch_main, NULL);
	if (r)
		return -r;
	w.started = 1;
	return 0;
}

int daemon_watch(struct fuse_session *se, int mount_id,
		 void (*cancel)(void *ud), void *ud)
{
	struct sigaction sa;
	sigset_t term;

	if (!w.started)
		return -EINVAL; /* daemon_start failed or was not called */
	w.se = se;
	w.mount_id = mount_id;
	w.cancel = cancel;
	w.ud = ud;
	w.main = pthread_self();
	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = on_signal; /* no SA_RESTART: sem_wait must wake */
	sigemptyset(&sa.sa_mask);
	if (sigaction(SIGTERM, &sa, NULL) != 0)
		return -errno;
	atomic_store(&w.watching, 1);
	/* Only here: libfuse blocks SIGTERM in the workers it starts, and
	 * every other thread inherited the block of daemon_start. */
	sigemptyset(&term);
	sigaddset(&term, SIGTERM);
	pthread_sigmask(SIG_UNBLOCK, &term, NULL);
	return 0;
}

int daemon_unwatch(void)
{
	sigset_t term;

	if (w.started) {
		w.quit = 1;
		if (write(w.pipe[1], "q", 1) < 0) {
			/* the watcher also polls quit every period */
		}
		pthread_join(w.thread, NULL);
		w.started = 0;
	}
	/* Signals during the teardown stay pending: it is bounded and ends
	 * with status 0 either way. */
	sigemptyset(&term);
	sigaddset(&term, SIGTERM);
	pthread_sigmask(SIG_BLOCK, &term, NULL);
	return w.sig;
}

int daemon_mount_gone(void)
{
	return w.gone;
}
