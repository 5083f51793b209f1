/* log.h - the one logging module: levels, stderr or syslog or a file. */
#ifndef ECHOFS_LOG_H
#define ECHOFS_LOG_H

#include "common/attrs.h"

enum log_level {
	LOG_LEVEL_ERROR = 0,
	LOG_LEVEL_WARN,
	LOG_LEVEL_INFO,
	LOG_LEVEL_DEBUG,
};

/* Parse "error", "warn", "info" or "debug". Returns 0 or -EINVAL. */
MUST_CHECK
int log_parse_level(const char *s, enum log_level *out);
void log_set_level(enum log_level level);
enum log_level log_get_level(void);

/* Send messages to the file at path (appended; path borrowed), which must
 * be the effective user's own regular file with one link, not reached
 * through a symlink at its last component; created 0644 when missing.
 * Until called, messages go to stderr. Called again (a reopen after a log
 * rotation), the new file takes over once open and the old one is closed
 * when its last line in flight is written. Returns 0, -ELOOP (a symlink),
 * -EPERM (another user's file, or hard-linked), -EINVAL (not a regular
 * file), or the open error; on error the current sink stays. */
MUST_CHECK
int log_set_file(const char *path);
/* Why log_set_file refused (its negative errno), for a one-line error. */
const char *log_file_strerror(int r);

/* Send messages to syslog, unless a file was set. */
void log_use_syslog(void);

/* One line, written whole with one write(2) and without holding a lock,
 * so that a slow log device does not stall other threads (see log.c). */
void log_msg(enum log_level level, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));

/* A counted error (kind: the counter's name, a static string), logged at
 * warn and rate-limited: at most one line per kind a second, so a failing
 * shard read by many files cannot flood the log; the next line of a kind
 * says how many were left out ("[kind, 41 more since the last]"). */
void log_counted(const char *kind, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));

/* Write a summary line ("[kind, N more since the last]") for every kind
 * with errors held back, so that none is lost; the daemon calls it at
 * shutdown. */
void log_counted_flush(void);

#define log_error(...) log_msg(LOG_LEVEL_ERROR, __VA_ARGS__)
#define log_warn(...) log_msg(LOG_LEVEL_WARN, __VA_ARGS__)
#define log_info(...) log_msg(LOG_LEVEL_INFO, __VA_ARGS__)
#define log_debug(...) log_msg(LOG_LEVEL_DEBUG, __VA_ARGS__)

#endif
