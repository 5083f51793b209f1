/* log.c - the one logging module: levels, stderr or syslog or a file. */
#include "common/log.h"

#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <syslog.h>
#include <time.h>

static const char *const level_names[] = {"error", "warn", "info", "debug"};

/* The level is read without the lock: a stale read only changes whether one
 * message is printed. */
static _Atomic int cur_level = LOG_LEVEL_INFO;

static pthread_mutex_t out_lock = PTHREAD_MUTEX_INITIALIZER;
static FILE *out_file; /* guarded by out_lock; NULL means stderr */
static int out_syslog; /* guarded by out_lock */

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

int log_set_file(const char *path)
{
	FILE *f = fopen(path, "ae");
	if (!f)
		return -errno;
	setvbuf(f, NULL, _IOLBF, 0);
	pthread_mutex_lock(&out_lock);
	if (out_file)
		fclose(out_file);
	out_file = f;
	out_syslog = 0;
	pthread_mutex_unlock(&out_lock);
	return 0;
}

void log_use_syslog(void)
{
	openlog("echofs", LOG_PID, LOG_DAEMON);
	pthread_mutex_lock(&out_lock);
	out_syslog = 1;
	pthread_mutex_unlock(&out_lock);
}

void log_msg(enum log_level level, const char *fmt, ...)
{
	static const int prio[] = {LOG_ERR, LOG_WARNING, LOG_INFO, LOG_DEBUG};
	char msg[1024];
	va_list ap;

	if ((int)level > cur_level)
		return;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);

	pthread_mutex_lock(&out_lock);
	if (out_syslog && !out_file) {
		syslog(prio[level], "%s", msg);
	} else {
		FILE *f = out_file ? out_file : stderr;
		struct timespec ts;
		struct tm tm;
		char when[32];
		clock_gettime(CLOCK_REALTIME, &ts);
		gmtime_r(&ts.tv_sec, &tm);
		strftime(when, sizeof(when), "%Y-%m-%dT%H:%M:%S", &tm);
		fprintf(f, "%s.%03ldZ echofs %s: %s\n", when,
			ts.tv_nsec / 1000000, level_names[level], msg);
	}
	pthread_mutex_unlock(&out_lock);
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

/* Summaries are written outside kinds_lock: log_msg takes out_lock. */
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
