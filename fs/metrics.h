/* metrics.h - the Prometheus endpoint (-o metrics=ADDR:PORT): GET /metrics
 * answers the text of .echofs/stats.prom plus the process's own figures
 * (resident memory, threads, open descriptors, CPU seconds).
 *
 * DESIGN
 * - libmicrohttpd serves the endpoint from one internal polling thread of
 *   its own; a scrape renders a fresh snapshot through control_render
 *   (no lock of ours is held while the reply is sent).
 * - At most METRICS_MAX_CONNECTIONS connections at a time and
 *   METRICS_PER_IP of them from one address. A request must be whole
 *   within METRICS_REQUEST_S of its accept (or of the end of the previous
 *   request on a kept-alive connection), and answered within
 *   METRICS_EXCHANGE_S: a client that sends a header line every second is
 *   cut off like a silent one (METRICS_TIMEOUT_S of silence), since the
 *   idle timeout alone restarts at every line.
 * - An address at its limit still gets a newcomer in: the newcomer takes
 *   the slot of that address's oldest connection without a whole request
 *   (once it has had METRICS_GRACE_S to send one), else it is refused. So
 *   slow clients cannot keep a scraper from their own address out, and a
 *   scraper from any other address is answered beside them. A scrape is
 *   one short request, so the short limits cost Prometheus at most a
 *   reconnect. Requests other than GET/HEAD of /metrics (or /) and
 *   /healthz are answered 404 or 405 without touching the stats.
 * - GET /healthz answers Kubernetes probes: 503 "starting" until
 *   metrics_set_mounted, then 200 "ok" while the mount is attached, 503
 *   "mount gone" once mountinfo no longer has it.
 * - Threads: libmicrohttpd's one polling thread runs every callback
 *   (accept, request, completion, close); the reaper thread wakes every
 *   METRICS_REAP_S and shuts down overdue sockets, which libmicrohttpd then
 *   closes. struct metrics.lock guards the connection table (a leaf lock,
 *   held across shutdown(2) only: libmicrohttpd's CLOSED notice, which
 *   takes it, comes before it closes the descriptor). */
#ifndef ECHOFS_METRICS_H
#define ECHOFS_METRICS_H

#include "common/attrs.h"
#include <stddef.h>

struct control;
struct metrics;

#define METRICS_MAX_CONNECTIONS 64
#define METRICS_PER_IP 4
#define METRICS_TIMEOUT_S 3
#define METRICS_REQUEST_S 3.0
#define METRICS_EXCHANGE_S 10.0
#define METRICS_GRACE_S 0.5
#define METRICS_REAP_S 0.25

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
/* The tree is up: /healthz answers 200 while the mount with this ID is
 * attached (mount_id -1: unknown, e.g. a /dev/fd/N mount outside this
 * mount namespace: 200 while the daemon runs). Accepts NULL. */
void metrics_set_mounted(struct metrics *m, int mount_id);

/* libmicrohttpd's version (static string). */
const char *metrics_version(void);

/* Stop listening and free. Accepts NULL. */
void metrics_stop(struct metrics *m);

#endif
