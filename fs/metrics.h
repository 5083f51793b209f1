/* metrics.h - the Prometheus endpoint (-o metrics=ADDR:PORT): GET /metrics
 * answers the text of .echofs/stats.prom plus the process's own figures
 * (resident memory, threads, open descriptors, CPU seconds).
 *
 * DESIGN
 * - libmicrohttpd serves the endpoint from one internal polling thread of
 *   its own; a scrape renders a fresh snapshot through control_render
 *   (no lock of ours is held while the reply is sent).
 * - At most METRICS_MAX_CONNECTIONS clients at a time, each closed after
 *   METRICS_TIMEOUT_S of silence; requests other than GET/HEAD of /metrics
 *   (or /) are answered 404 or 405 without touching the stats. */
#ifndef ECHOFS_METRICS_H
#define ECHOFS_METRICS_H

#include <stddef.h>

struct control;
struct metrics;

#define METRICS_MAX_CONNECTIONS 16
#define METRICS_TIMEOUT_S 10

/* Check an address as given to -o metrics=: "PORT" (loopback),
 * "HOST:PORT" with a numeric IPv4 host, or "[IPv6]:PORT". Returns 0 or
 * -EINVAL with a reason in err. */
int metrics_check_addr(const char *spec, char *err, size_t errlen);

/* Listen on spec and serve ctl's Prometheus text. ctl is borrowed and must
 * outlive the server. Returns 0 with *out set, or -EINVAL (spec is not a
 * local address) or the bind error (e.g. -EADDRINUSE) with *out NULL and a
 * one-line reason in err. */
int metrics_open(const char *spec, struct control *ctl, struct metrics **out,
		 char *err, size_t errlen);
/* libmicrohttpd's version (static string). */
const char *metrics_version(void);

/* Stop listening and free. Accepts NULL. */
void metrics_stop(struct metrics *m);

#endif
