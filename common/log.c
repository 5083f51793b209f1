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
static FILE *out_file;  /* guarded by out_lock; NULL means stderr */
static int out_syslog;  /* guarded by out_lock */

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
