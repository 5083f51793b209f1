/* metrics.c - the Prometheus endpoint: GET /metrics over libmicrohttpd
 * (see metrics.h). */
#include "fs/metrics.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <microhttpd.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include "common/util.h"
#include "fs/control.h"

struct metrics {
	struct MHD_Daemon *d;
	struct control *ctl;
};

union addr {
	struct sockaddr sa;
	struct sockaddr_in in4;
	struct sockaddr_in6 in6;
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

static enum MHD_Result on_request(void *cls, struct MHD_Connection *conn,
				  const char *url, const char *method,
				  const char *version, const char *upload,
				  size_t *upload_len, void **state)
{
	struct metrics *m = cls;
	char *text, *proc, *body;
	size_t tlen, plen;
	(void)version, (void)upload, (void)state;

	if (*upload_len)
		return MHD_NO; /* a scrape has no body */
	if (strcmp(method, "GET") != 0 && strcmp(method, "HEAD") != 0)
		return reply(conn, MHD_HTTP_METHOD_NOT_ALLOWED,
			     xstrdup("GET /metrics\n"), 13, "text/plain");
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

int metrics_open(const char *spec, struct control *ctl, struct metrics **out,
		 char *err, size_t errlen)
{
	struct metrics *m;
	union addr a;
	unsigned flags = MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_ERROR_LOG;

	*out = NULL;
	if (parse_addr(spec, &a, err, errlen) != 0)
		return -EINVAL;
	if (a.sa.sa_family == AF_INET6)
		flags |= MHD_USE_IPv6;
	m = xcalloc(1, sizeof(*m));
	m->ctl = ctl;
	errno = 0;
	m->d = MHD_start_daemon(flags, 0, NULL, NULL, on_request, m,
				MHD_OPTION_SOCK_ADDR, &a.sa,
				MHD_OPTION_CONNECTION_LIMIT,
				(unsigned)METRICS_MAX_CONNECTIONS,
				MHD_OPTION_PER_IP_CONNECTION_LIMIT,
				(unsigned)METRICS_PER_IP,
				MHD_OPTION_CONNECTION_TIMEOUT,
				(unsigned)METRICS_TIMEOUT_S, MHD_OPTION_END);
	if (!m->d) {
		/* libmicrohttpd leaves bind's errno when that is what failed. */
		int e = errno ? errno : EADDRINUSE;

		snprintf(err, errlen, "cannot serve metrics on %s (address in "
			 "use or not local?)", spec);
		free(m);
		return -e;
	}
	*out = m;
	return 0;
}

const char *metrics_version(void)
{
	return MHD_get_version();
}

void metrics_stop(struct metrics *m)
{
	if (!m)
		return;
	MHD_stop_daemon(m->d);
	free(m);
}
