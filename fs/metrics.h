/* metrics.h - the Prometheus endpoint (-o metrics=ADDR:PORT): GET /metrics
 * answers the text of .echofs/stats.prom plus the process's own figures
 * (resident memory, threads, open descriptors, CPU seconds).
 *
 * DESIGN
 * - libmicrohttpd serves the endpoint from one internal polling thread of
 *   its own; a scrape renders a fresh snapshot through control_render
 *   (no lock of ours is held while the reply is sent).
 * - At most METRICS_MAX_CONNECTIONS connections at a time and
 *   METRICS_PER_IP of them from one address, each closed after
 *   METRICS_TIMEOUT_S of silence. Slow clients (a header line every few
 *   seconds, 200 of them) then hold only their address's few slots: a
 *   scraper from any other address is answered, and one from the same
 *   address once the idle timeout reclaims a slot. A scrape is one short
 *   request, so the short timeout costs Prometheus at most a reconnect.
 *   Requests other than GET/HEAD of /metrics (or /) are answered 404 or
 *   405 without touching the stats. */
#ifndef ECHOFS_METRICS_H
#define ECHOFS_METRICS_H

#include "common/attrs.h"
#include <stddef.h>

struct control;
struct metrics;

#define METRICS_MAX_CONNECTIONS 64
#define METRICS_PER_IP 4
#define METRICS_TIMEOUT_S 3

/* Check an address as given to -o metrics=: "PORT" (loopback),
 * "HOST:PORT" with a numeric IPv4 host, or "[IPv6]:PORT". Returns 0 or
 * -EINVAL with a reason in err. */
MUST_CHECK
int metrics_check_addr(const char *spec, char *err, size_t errlen);

/* Listen on spec and serve ctl's Prometheus text. ctl is borrowed and must
 * outlive the server. Returns 0 with *out set, or -EINVAL (spec is not a
 * local address) or the bind error (e.g. -EADDRINUSE) with *out NULL and a
 * one-line reason in err. */
MUST_CHECK
int metrics_open(const char *spec, struct control *ctl, struct metrics **out,
		 char *err, size_t errlen);
/* libmicrohttpd's version (static string). */
const char *metrics_version(void);

/* Stop listening and free. Accepts NULL. */
void metrics_stop(struct metrics *m);

#endif
