/* log.c - the one logging module: levels, stderr or syslog or a file. */
#include "common/log.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <syslog.h>
#include <time.h>
#include <unistd.h>

#include "common/util.h"

static const char *const level_names[] = {"error", "warn", "info", "debug"};

/* The level is read without the lock: a stale read only changes whether one
 * message is printed. */
static _Atomic int cur_level = LOG_LEVEL_INFO;

/* DESIGN: a line is formatted whole in the caller's buffer, then written
 * with one write(2), outside any lock: a log file is opened O_APPEND, so
 * concurrent lines never interleave and a slow log device stalls only the
 * threads whose lines are waiting on it, not every thread that logs.
 * sink_lock guards only which sink is current and the sinks' counts, never
 * I/O. A writer pins the current sink (refs) for its write; a reopen
 * (SIGHUP, SIGUSR1) makes a new sink current and drops the old one's
 * "current" reference, so the old descriptor is closed by whoever lets go
 * of it last: never under a writer, and never reused by a later open while
 * a writer still holds its number. */
struct sink {
	int fd;
	unsigned refs; /* guarded by sink_lock; 1 for being current */
};

static pthread_mutex_t sink_lock = PTHREAD_MUTEX_INITIALIZER;
static struct sink *cur_sink; /* guarded by sink_lock; NULL: stderr/syslog */
static int out_syslog;	      /* guarded by sink_lock */

int log_parse_level(const char *s, enum log_level *out)
{
	for (size_t i = 0; i < sizeof(level_names) / sizeof(level_names[0]);
	     i++) {
		if (strcmp(s, level_names[i]) == 0) {
			*out = (enum log_level)i;
			return 0;
		}
	}
	return -EINVAL;
}

void log_set_level(enum log_level level)
{
	cur_level = level;
}

enum log_level log_get_level(void)
{
	return (enum log_level)cur_level;
}

static void sink_put(struct sink *s)
{
	unsigned left;

	if (!s)
		return;
	pthread_mutex_lock(&sink_lock);
	left = --s->refs;
	pthread_mutex_unlock(&sink_lock);
	if (left == 0) {
		close(s->fd);
		free(s);
	}
}

/* The log file is the daemon user's own regular file, reached without a
 * symlink at its last component: otherwise anyone who can write the
 * directory (a shared /tmp, /var/log/x writable by a group) could point it
 * at a file of their choice for the daemon to append to, at mount and at
 * every reopen. A second hard link is refused for the same reason. The
 * checks are made on the file opened, so nothing can swap it in between;
 * O_NONBLOCK keeps a FIFO from stalling the open. */
static int open_log(const char *path)
{
	int fd = open(path,
		      O_WRONLY | O_APPEND | O_CREAT | O_NOFOLLOW | O_NOCTTY |
			      O_NONBLOCK | O_CLOEXEC,
		      0644);
	struct stat st;
	int r = 0;

	if (fd < 0) /* ENXIO: a FIFO with no reader, or a device with none */
		return errno == ENXIO ? -EINVAL : -errno;
	if (fstat(fd, &st) != 0)
		r = -errno;
	else if (!S_ISREG(st.st_mode))
		r = -EINVAL;
	else if (st.st_uid != geteuid() || st.st_nlink > 1)
		r = -EPERM;
	if (r) {
		close(fd);
		return r;
	}
	return fd;
}

int log_set_file(const char *path)
{
	struct sink *s, *old;
	int fd = open_log(path);

	if (fd < 0)
		return fd;
	s = xmalloc(sizeof(*s));
	s->fd = fd;
	s->refs = 1;
	pthread_mutex_lock(&sink_lock);
	old = cur_sink;
	cur_sink = s;
	out_syslog = 0;
	pthread_mutex_unlock(&sink_lock);
	sink_put(old);
	return 0;
}

const char *log_file_strerror(int r)
{
	switch (r) {
	case -ELOOP:
		return "a symlink (refused: name the file itself)";
	case -EPERM:
		return "not this user's own file with one link (refused)";
	case -EINVAL:
		return "not a regular file";
	default:
		return strerror(-r);
	}
}

void log_use_syslog(void)
{
	openlog("echofs", LOG_PID, LOG_DAEMON);
	pthread_mutex_lock(&sink_lock);
	out_syslog = 1;
	pthread_mutex_unlock(&sink_lock);
}

/* All of buf, retrying short writes and EINTR; a line that cannot be
 * written is dropped: logging must never fail the caller. */
static void write_line(int fd, const char *buf, size_t len)
{
	while (len > 0) {
		ssize_t n = write(fd, buf, len);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			return;
		buf += n;
		len -= (size_t)n;
	}
}

/* "<UTC time> echofs <level>: <msg>\n" into line; returns its length. */
static size_t format_line(char *line, size_t size, enum log_level level,
			  const char *msg)
{
	struct timespec ts;
	struct tm tm;
	char when[32];
	int n;

	clock_gettime(CLOCK_REALTIME, &ts);
	gmtime_r(&ts.tv_sec, &tm);
	strftime(when, sizeof(when), "%Y-%m-%dT%H:%M:%S", &tm);
	n = snprintf(line, size, "%s.%03ldZ echofs %s: %s\n", when,
		     ts.tv_nsec / 1000000, level_names[level], msg);
	return n < 0 ? 0 : (size_t)n < size ? (size_t)n : size - 1;
}

void log_msg(enum log_level level, const char *fmt, ...)
{
	static const int prio[] = {LOG_ERR, LOG_WARNING, LOG_INFO, LOG_DEBUG};
	char msg[1024], line[sizeof(msg) + 64];
	struct sink *s;
	int to_syslog;
	va_list ap;

	if ((int)level > cur_level)
		return;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);

	pthread_mutex_lock(&sink_lock);
	s = cur_sink;
	if (s)
		s->refs++;
	to_syslog = out_syslog && !s;
	pthread_mutex_unlock(&sink_lock);
	if (to_syslog) {
		syslog(prio[level], "%s", msg); /* thread-safe in glibc */
	} else {
		size_t n = format_line(line, sizeof(line), level, msg);
		write_line(s ? s->fd : STDERR_FILENO, line, n);
	}
	sink_put(s);
}

/* ---- rate-limited counted errors ---------------------------------------- */

#define KINDS_MAX 32

struct kind_state {
	const char *kind;
	double last; /* monotonic seconds of the last line */
	unsigned long long left_out;
};

static pthread_mutex_t kinds_lock = PTHREAD_MUTEX_INITIALIZER;
static struct kind_state kinds[KINDS_MAX]; /* guarded by kinds_lock */

static double mono_now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* Whether a line of kind may go out now; *left_out is how many were held
 * back before it. Kinds past KINDS_MAX share the last slot. */
static int kind_admit(const char *kind, unsigned long long *left_out)
{
	double now = mono_now();
	struct kind_state *k = &kinds[KINDS_MAX - 1];
	int ok;

	pthread_mutex_lock(&kinds_lock);
	for (size_t i = 0; i < KINDS_MAX; i++) {
		if (!kinds[i].kind) {
			kinds[i].kind = kind;
			kinds[i].last = now - 2.0;
		}
		if (kinds[i].kind == kind || strcmp(kinds[i].kind, kind) == 0) {
			k = &kinds[i];
			break;
		}
	}
	ok = now - k->last >= 1.0;
	if (ok) {
		*left_out = k->left_out;
		k->left_out = 0;
		k->last = now;
	} else {
		k->left_out++;
	}
	pthread_mutex_unlock(&kinds_lock);
	return ok;
}

/* Take the summaries due: kinds other than but (which carries its own count
 * on its next line) with lines held back whose last line is at least
 * min_age seconds old (0: all of them). Returns how many were taken into
 * out (at most max); their counts restart. */
static size_t take_due(const char *but, double min_age, struct kind_state *out,
		       size_t max)
{
	double now = mono_now();
	size_t n = 0;

	pthread_mutex_lock(&kinds_lock);
	for (size_t i = 0; i < KINDS_MAX && kinds[i].kind && n < max; i++) {
		if (!kinds[i].left_out || now - kinds[i].last < min_age ||
		    (but && strcmp(kinds[i].kind, but) == 0))
			continue;
		out[n++] = kinds[i];
		kinds[i].left_out = 0;
		kinds[i].last = now;
	}
	pthread_mutex_unlock(&kinds_lock);
	return n;
}

/* Summaries are written outside kinds_lock: log_msg takes sink_lock. */
static void write_due(const char *but, double min_age)
{
	struct kind_state due[KINDS_MAX];
	size_t n = take_due(but, min_age, due, KINDS_MAX);

	for (size_t i = 0; i < n; i++)
		log_msg(LOG_LEVEL_WARN, "[%s, %llu more since the last]",
			due[i].kind, due[i].left_out);
}

void log_counted_flush(void)
{
	if (LOG_LEVEL_WARN <= cur_level)
		write_due(NULL, 0.0);
}

void log_counted(const char *kind, const char *fmt, ...)
{
	unsigned long long left_out;
	char msg[900];
	va_list ap;

	if (LOG_LEVEL_WARN > cur_level)
		return;
	/* errors held back from a kind that has since gone quiet are
	 * summarised now rather than at its next error, which may never come */
	write_due(kind, 1.0);
	if (!kind_admit(kind, &left_out))
		return;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	if (left_out)
		log_msg(LOG_LEVEL_WARN, "%s [%s, %llu more since the last]",
			msg, kind, left_out);
	else
		log_msg(LOG_LEVEL_WARN, "%s [%s]", msg, kind);
}
