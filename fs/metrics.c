/* metrics.c - the Prometheus endpoint: GET /metrics over libmicrohttpd
 * (see metrics.h). */
#include "fs/metrics.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <microhttpd.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include "common/deadline.h"
#include "common/util.h"
#include "fs/control.h"
#include "fs/mounts.h"

#define HEALTH_STARTING (-2) /* mount_id before metrics_set_mounted */

union addr {
	struct sockaddr sa;
	struct sockaddr_in in4;
	struct sockaddr_in6 in6;
};

/* One open connection, as the guard sees it (see metrics.h). */
struct guarded {
	struct MHD_Connection *conn; /* NULL: the entry is free */
	int fd;			     /* valid until the CLOSED notice */
	union addr peer;	     /* its port zeroed: the address only */
	double since; /* accept, or the end of its last request */
	int complete; /* a whole request arrived since `since` */
	int cut;      /* shut down; libmicrohttpd closes it next */
};

struct metrics {
	struct MHD_Daemon *d;
	struct control *ctl;
	pthread_t reaper;
	pthread_mutex_t lock; /* guards conns and stopping; a leaf lock */
	pthread_cond_t wake;  /* the reaper's sleep; signalled at stop */
	int stopping;
	struct guarded conns[METRICS_MAX_CONNECTIONS];
	atomic_int mount_id; /* /healthz: HEALTH_STARTING, or the mount's */
};

/* spec -> a socket address; 0 or -EINVAL with a reason. */
static int parse_addr(const char *spec, union addr *a, char *err,
		      size_t errlen)
{
	char host[64] = "127.0.0.1";
	const char *port = spec, *colon = strrchr(spec, ':');
	uint64_t p;

	memset(a, 0, sizeof(*a));
	if (colon) {
		size_t n = (size_t)(colon - spec);
		if (spec[0] == '[' && n >= 2 && spec[n - 1] == ']')
			spec++, n -= 2;
		if (n == 0 || n >= sizeof(host))
			goto bad;
		memcpy(host, spec, n);
		host[n] = '\0';
		port = colon + 1;
	}
	if (parse_u64(port, &p) != 0 || p == 0 || p > 65535)
		goto bad;
	if (inet_pton(AF_INET, host, &a->in4.sin_addr) == 1) {
		a->in4.sin_family = AF_INET;
		a->in4.sin_port = htons((uint16_t)p);
		return 0;
	}
	if (inet_pton(AF_INET6, host, &a->in6.sin6_addr) == 1) {
		a->in6.sin6_family = AF_INET6;
		a->in6.sin6_port = htons((uint16_t)p);
		return 0;
	}
bad:
	snprintf(err, errlen, "bad metrics address '%s' (PORT, IPV4:PORT or "
		 "[IPV6]:PORT, numeric)", spec);
	return -EINVAL;
}

int metrics_check_addr(const char *spec, char *err, size_t errlen)
{
	union addr a;
	return parse_addr(spec, &a, err, errlen);
}

static size_t count_fds(void)
{
	DIR *d = opendir("/proc/self/fd");
	struct dirent *e;
	size_t n = 0;

	if (!d)
		return 0;
	while ((e = readdir(d)) != NULL)
		n += e->d_name[0] != '.';
	closedir(d);
	return n ? n - 1 : 0; /* the descriptor of the listing itself */
}

/* Boot time in seconds since the epoch (the "btime" line of /proc/stat). */
static double boot_time(void)
{
	char line[256];
	double t = 0;
	FILE *f = fopen("/proc/stat", "r");

	if (!f)
		return 0;
	while (fgets(line, sizeof(line), f))
		if (strncmp(line, "btime ", 6) == 0) {
			t = strtod(line + 6, NULL);
			break;
		}
	fclose(f);
	return t;
}

/* Fields of /proc/self/stat after the command name: utime (14), stime
 * (15), num_threads (20), starttime (22), vsize (23), rss (24). */
static int read_stat(double *cpu_s, double *threads, double *start_s,
		     double *vsize, double *rss)
{
	char buf[1024], *p;
	unsigned long long v[53] = {0}; /* v[k]: field k, from 1 */
	FILE *f = fopen("/proc/self/stat", "r");
	size_t n;
	int i = 3;

	if (!f)
		return -errno;
	n = fread(buf, 1, sizeof(buf) - 1, f);
	fclose(f);
	buf[n] = '\0';
	p = strrchr(buf, ')'); /* the command name may hold spaces */
	if (!p || p[1] != ' ' || !p[2])
		return -EIO;
	for (p += 3; i < 52 && *p; i++) { /* field 3 is the state letter */
		while (*p && *p != ' ')
			p++;
		while (*p == ' ')
			p++;
		v[i + 1] = strtoull(p, NULL, 10);
	}
	long tick = sysconf(_SC_CLK_TCK), page = sysconf(_SC_PAGESIZE);
	*cpu_s = (double)(v[14] + v[15]) / (double)tick;
	*threads = (double)v[20];
	*start_s = boot_time() + (double)v[22] / (double)tick;
	*vsize = (double)v[23];
	*rss = (double)v[24] * (double)page;
	return 0;
}

/* The process figures in the names Prometheus client libraries use. */
static char *process_text(size_t *len)
{
	double cpu = 0, threads = 0, start = 0, vsize = 0, rss = 0;
	struct rlimit rl = {0};
	char *buf = xmalloc(2048);
	int n;

	read_stat(&cpu, &threads, &start, &vsize, &rss);
	getrlimit(RLIMIT_NOFILE, &rl);
	n = snprintf(buf, 2048,
		"# HELP process_cpu_seconds_total user and system CPU time\n"
		"# TYPE process_cpu_seconds_total counter\n"
		"process_cpu_seconds_total %.6f\n"
		"# HELP process_resident_memory_bytes resident memory size\n"
		"# TYPE process_resident_memory_bytes gauge\n"
		"process_resident_memory_bytes %.0f\n"
		"# HELP process_virtual_memory_bytes virtual memory size\n"
		"# TYPE process_virtual_memory_bytes gauge\n"
		"process_virtual_memory_bytes %.0f\n"
		"# HELP process_open_fds open file descriptors\n"
		"# TYPE process_open_fds gauge\n"
		"process_open_fds %zu\n"
		"# HELP process_max_fds the open file descriptor limit\n"
		"# TYPE process_max_fds gauge\n"
		"process_max_fds %.0f\n"
		"# HELP process_threads threads of the daemon\n"
		"# TYPE process_threads gauge\n"
		"process_threads %.0f\n"
		"# HELP process_start_time_seconds start time since the epoch\n"
		"# TYPE process_start_time_seconds gauge\n"
		"process_start_time_seconds %.2f\n",
		cpu, rss, vsize, count_fds(), (double)rl.rlim_cur, threads,
		start);
	*len = n > 0 && n < 2048 ? (size_t)n : 0;
	return buf;
}

/* ---- the guard: a deadline per request, slots per address -------------- */

static int same_peer(const union addr *a, const union addr *b)
{
	if (a->sa.sa_family != b->sa.sa_family)
		return 0;
	if (a->sa.sa_family == AF_INET)
		return a->in4.sin_addr.s_addr == b->in4.sin_addr.s_addr;
	return memcmp(&a->in6.sin6_addr, &b->in6.sin6_addr,
		      sizeof(a->in6.sin6_addr)) == 0;
}

/* Ends e's connection: shutdown makes libmicrohttpd's next read see the end
 * and close it (and send CLOSED), in its own thread. Holds m->lock, so the
 * descriptor cannot be closed and reused meanwhile: CLOSED comes before
 * libmicrohttpd closes it, and takes the lock. */
static void cut(struct guarded *e)
{
	if (e->cut)
		return;
	e->cut = 1;
	shutdown(e->fd, SHUT_RDWR);
}

/* A connection just accepted (entry me) from an address already holding
 * METRICS_PER_IP: it takes the slot of that address's oldest connection
 * without a whole request, if one has had METRICS_GRACE_S to send it, else
 * it is refused. Slow clients then cannot keep a scraper from their own
 * address out, and one that keeps reconnecting only replaces itself.
 * Holds m->lock. */
static void admit(struct metrics *m, struct guarded *me)
{
	struct guarded *old = NULL;
	unsigned same = 0;

	for (size_t i = 0; i < METRICS_MAX_CONNECTIONS; i++) {
		struct guarded *e = &m->conns[i];

		if (!e->conn || e->cut || !same_peer(&e->peer, &me->peer))
			continue;
		same++;
		if (e == me || e->complete ||
		    me->since - e->since < METRICS_GRACE_S)
			continue;
		if (!old || e->since < old->since)
			old = e;
	}
	if (same > METRICS_PER_IP)
		cut(old ? old : me);
}

static void track(struct metrics *m, struct MHD_Connection *conn, void **ctx)
{
	const union MHD_ConnectionInfo *fd, *peer;
	struct guarded *e = NULL;

	fd = MHD_get_connection_info(conn, MHD_CONNECTION_INFO_CONNECTION_FD);
	peer = MHD_get_connection_info(conn,
				       MHD_CONNECTION_INFO_CLIENT_ADDRESS);
	if (!fd)
		return;
	pthread_mutex_lock(&m->lock);
	for (size_t i = 0; i < METRICS_MAX_CONNECTIONS && !e; i++)
		if (!m->conns[i].conn)
			e = &m->conns[i];
	if (!e) {
		/* cannot happen under MHD_OPTION_CONNECTION_LIMIT; unwatched
		 * connections are not served */
		shutdown(fd->connect_fd, SHUT_RDWR);
		pthread_mutex_unlock(&m->lock);
		return;
	}
	memset(e, 0, sizeof(*e));
	e->conn = conn;
	e->fd = fd->connect_fd;
	if (peer && peer->client_addr->sa_family == AF_INET6)
		memcpy(&e->peer.in6, peer->client_addr, sizeof(e->peer.in6));
	else if (peer && peer->client_addr->sa_family == AF_INET)
		memcpy(&e->peer.in4, peer->client_addr, sizeof(e->peer.in4));
	e->peer.in4.sin_port = 0; /* at the same place in both */
	e->since = now_mono();
	*ctx = e;
	admit(m, e);
	pthread_mutex_unlock(&m->lock);
}

/* MHD_OPTION_NOTIFY_CONNECTION: watch a connection from accept to close. */
static void on_connection(void *cls, struct MHD_Connection *conn, void **ctx,
			  enum MHD_ConnectionNotificationCode code)
{
	struct metrics *m = cls;
	struct guarded *e = *ctx;

	if (code == MHD_CONNECTION_NOTIFY_STARTED) {
		*ctx = NULL;
		track(m, conn, ctx);
		return;
	}
	if (!e)
		return;
	pthread_mutex_lock(&m->lock);
	e->conn = NULL;
	pthread_mutex_unlock(&m->lock);
	*ctx = NULL;
}

/* A whole request arrived (first > 0) or its exchange ended (first 0, the
 * next request's deadline starts), on conn. */
static void mark(struct metrics *m, struct MHD_Connection *conn, int first)
{
	const union MHD_ConnectionInfo *ci = MHD_get_connection_info(
		conn, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
	struct guarded *e = ci ? ci->socket_context : NULL;

	if (!e)
		return;
	pthread_mutex_lock(&m->lock);
	if (first)
		e->complete = 1;
	else
		e->complete = 0, e->since = now_mono();
	pthread_mutex_unlock(&m->lock);
}

/* MHD_OPTION_NOTIFY_COMPLETED */
static void on_completed(void *cls, struct MHD_Connection *conn, void **state,
			 enum MHD_RequestTerminationCode code)
{
	(void)state, (void)code;
	mark(cls, conn, 0);
}

/* Whether e has outlived its deadline: METRICS_REQUEST_S to send a whole
 * request, METRICS_EXCHANGE_S for the request and its answer. */
static int overdue(const struct guarded *e, double now)
{
	double age = now - e->since;

	return age > (e->complete ? METRICS_EXCHANGE_S : METRICS_REQUEST_S);
}

/* The reaper thread: cuts connections past their deadline. */
static void *reap(void *arg)
{
	struct metrics *m = arg;

	pthread_mutex_lock(&m->lock);
	while (!m->stopping) {
		struct deadline d = deadline_in(METRICS_REAP_S);
		double now = now_mono();

		for (size_t i = 0; i < METRICS_MAX_CONNECTIONS; i++) {
			struct guarded *e = &m->conns[i];

			if (e->conn && !e->cut && overdue(e, now))
				cut(e);
		}
		while (!m->stopping &&
		       cond_wait_until(&m->wake, &m->lock, &d) == 0)
			;
	}
	pthread_mutex_unlock(&m->lock);
	return NULL;
}

static enum MHD_Result reply(struct MHD_Connection *conn, unsigned status,
			     char *body, size_t len, const char *type)
{
	struct MHD_Response *r = MHD_create_response_from_buffer(
		len, body, MHD_RESPMEM_MUST_FREE);
	enum MHD_Result ret;

	if (!r) {
		free(body);
		return MHD_NO;
	}
	MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, type);
	ret = MHD_queue_response(conn, status, r);
	MHD_destroy_response(r);
	return ret;
}

/* GET /healthz, for Kubernetes probes (metrics.h). */
static enum MHD_Result health(struct metrics *m, struct MHD_Connection *conn)
{
	int id = atomic_load(&m->mount_id);
	const char *s = id == HEALTH_STARTING		      ? "starting\n"
			: id >= 0 && mounts_attached(id) == 0 ? "mount gone\n"
							      : "ok\n";

	return reply(conn,
		     s[0] == 'o' ? MHD_HTTP_OK : MHD_HTTP_SERVICE_UNAVAILABLE,
		     xstrdup(s), strlen(s), "text/plain");
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *conn,
				  const char *url, const char *method,
				  const char *version, const char *upload,
				  size_t *upload_len, void **state)
{
	struct metrics *m = cls;
	char *text, *proc, *body;
	size_t tlen, plen;
	(void)version, (void)upload, (void)state;

	mark(m, conn, 1); /* the headers are all in: its deadline is met */
	if (*upload_len)
		return MHD_NO; /* a scrape has no body */
	if (strcmp(method, "GET") != 0 && strcmp(method, "HEAD") != 0)
		return reply(conn, MHD_HTTP_METHOD_NOT_ALLOWED,
			     xstrdup("GET /metrics\n"), 13, "text/plain");
	if (strcmp(url, "/healthz") == 0)
		return health(m, conn);
	if (strcmp(url, "/metrics") != 0 && strcmp(url, "/") != 0)
		return reply(conn, MHD_HTTP_NOT_FOUND,
			     xstrdup("see /metrics\n"), 13, "text/plain");
	if (control_render(m->ctl, CONTROL_STATS_PROM, &text, &tlen) != 0)
		return MHD_NO;
	proc = process_text(&plen);
	body = xmalloc(tlen + plen + 1);
	memcpy(body, text, tlen);
	memcpy(body + tlen, proc, plen);
	free(text);
	free(proc);
	return reply(conn, MHD_HTTP_OK, body, tlen + plen,
		     "text/plain; version=0.0.4; charset=utf-8");
}

/* The daemon on a, its callbacks on m. */
static struct MHD_Daemon *start_daemon(struct metrics *m, const union addr *a)
{
	unsigned flags = MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_ERROR_LOG;

	if (a->sa.sa_family == AF_INET6)
		flags |= MHD_USE_IPv6;
	/* No MHD_OPTION_PER_IP_CONNECTION_LIMIT: admit() keeps that limit,
	 * making room for a newcomer where libmicrohttpd would refuse it. */
	return MHD_start_daemon(
		flags, 0, NULL, NULL, on_request, m, MHD_OPTION_SOCK_ADDR,
		&a->sa, MHD_OPTION_CONNECTION_LIMIT,
		(unsigned)METRICS_MAX_CONNECTIONS,
		MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)METRICS_TIMEOUT_S,
		MHD_OPTION_NOTIFY_CONNECTION, on_connection, m,
		MHD_OPTION_NOTIFY_COMPLETED, on_completed, m, MHD_OPTION_END);
}

int metrics_open(const char *spec, struct control *ctl, struct metrics **out,
		 char *err, size_t errlen)
{
	struct metrics *m;
	union addr a;
	int rc;

	*out = NULL;
	if (parse_addr(spec, &a, err, errlen) != 0)
		return -EINVAL;
	m = xcalloc(1, sizeof(*m));
	m->ctl = ctl;
	atomic_init(&m->mount_id, HEALTH_STARTING);
	pthread_mutex_init(&m->lock, NULL);
	rc = cond_init_monotonic(&m->wake);
	if (rc) {
		snprintf(err, errlen, "cannot serve metrics: %s",
			 strerror(-rc));
		goto fail_lock;
	}
	errno = 0;
	m->d = start_daemon(m, &a);
	if (!m->d) {
		/* libmicrohttpd leaves bind's errno when that is what failed. */
		rc = errno ? -errno : -EADDRINUSE;
		snprintf(err, errlen, "cannot serve metrics on %s (address in "
			 "use or not local?)", spec);
		goto fail_cond;
	}
	rc = -pthread_create(&m->reaper, NULL, reap, m);
	if (rc) {
		snprintf(err, errlen, "cannot serve metrics: %s",
			 strerror(-rc));
		MHD_stop_daemon(m->d);
		goto fail_cond;
	}
	*out = m;
	return 0;
fail_cond:
	pthread_cond_destroy(&m->wake);
fail_lock:
	pthread_mutex_destroy(&m->lock);
	free(m);
	return rc;
}

void metrics_set_mounted(struct metrics *m, int mount_id)
{
	if (m)
		atomic_store(&m->mount_id, mount_id < 0 ? -1 : mount_id);
}

const char *metrics_version(void)
{
	return MHD_get_version();
}

void metrics_stop(struct metrics *m)
{
	if (!m)
		return;
	pthread_mutex_lock(&m->lock);
	m->stopping = 1;
	pthread_cond_signal(&m->wake);
	pthread_mutex_unlock(&m->lock);
	pthread_join(m->reaper, NULL);
	MHD_stop_daemon(m->d); /* its CLOSED notices still take m->lock */
	pthread_cond_destroy(&m->wake);
	pthread_mutex_destroy(&m->lock);
	free(m);
}
