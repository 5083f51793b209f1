/* http_fx.c - what the http suites (test_http.c, test_http_resume.c)
 * share: tests/fault_server.py on a directory of known objects, a raw client
 * for its control endpoints, and sinks that collect and check a body. */
#include "http_fx.h"

#include "fetch/net/http.h"

#include "common/util.h"
#include "fixtures.h"

#include <arpa/inet.h>
#include <criterion/criterion.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

char g_dir[128];  /* temp dir: port files, header files, certs */
char g_root[192]; /* served directory */
char g_skip[256]; /* why the server tests cannot run, or "" */
struct fx_server g_srv;
unsigned char *g_big;

/* ---- fixtures ----------------------------------------------------------- */

void write_file(const char *dir, const char *name, const void *data, size_t len)
{
	char path[384];

	snprintf(path, sizeof(path), "%s/%s", dir, name);
	fx_write_file(path, data, len);
}

/* Starts fault_server.py on g_root, its port file named after tag; cert/key
 * for HTTPS and one --fault rule are optional. Returns 0 or a negative errno
 * (see fx_server_spawn). */
int server_start(struct fx_server *s, const char *tag, const char *cert,
		 const char *key, const char *fault)
{
	char portfile[256];
	const char *extra[8];
	int n = 0;

	snprintf(portfile, sizeof(portfile), "%s/port-%s", g_dir, tag);
	if (cert) {
		extra[n++] = "--tls-cert";
		extra[n++] = cert;
		extra[n++] = "--tls-key";
		extra[n++] = key;
	}
	if (fault) {
		extra[n++] = "--fault";
		extra[n++] = fault;
	}
	extra[n] = NULL;
	return fx_server_spawn(s, g_root, portfile, extra);
}

void http_fx_setup(void)
{
	uint64_t x = 0x9e3779b97f4a7c15ULL;

	snprintf(g_dir, sizeof(g_dir), "/tmp/echofs-test-http-XXXXXX");
	cr_assert_not_null(mkdtemp(g_dir));
	snprintf(g_root, sizeof(g_root), "%s/root", g_dir);
	cr_assert_eq(mkdir(g_root, 0700), 0);
	g_big = xmalloc(BIG_LEN);
	for (size_t i = 0; i < BIG_LEN; i++) {
		x ^= x << 13, x ^= x >> 7, x ^= x << 17;
		g_big[i] = (unsigned char)(x >> 24);
	}
	write_file(g_root, "big.bin", g_big, BIG_LEN);
	write_file(g_root, "small.txt", SMALL_TEXT, strlen(SMALL_TEXT));
	write_file(g_root, "empty.bin", "", 0);
	cr_assert_eq(http_global_init(), 0);
	g_skip[0] = '\0';
	if (access("/usr/bin/python3", X_OK))
		snprintf(g_skip, sizeof(g_skip), "no /usr/bin/python3");
	else if (server_start(&g_srv, "main", NULL, NULL, NULL))
		snprintf(g_skip, sizeof(g_skip),
			 "fault_server.py did not start (ECHOFS_TEST_DATA=%s)",
			 getenv("ECHOFS_TEST_DATA") ? getenv("ECHOFS_TEST_DATA")
						    : "unset");
}

void http_fx_teardown(void)
{
	fx_server_stop(&g_srv);
	fx_rm_tree(g_dir);
	free(g_big);
}

/* ---- helpers ------------------------------------------------------------ */

const char *url_on(int port, const char *path)
{
	static __thread char buf[256];
	snprintf(buf, sizeof(buf), "http://127.0.0.1:%d%s", port, path);
	return buf;
}

const char *url(const char *path)
{
	return url_on(g_srv.port, path);
}

/* A tiny raw HTTP/1.0-style client for the control endpoints, so the test
 * does not depend on the code under test. Returns the status. */
int ctl(const char *method, const char *path, const char *body, char *out,
	size_t outlen)
{
	struct sockaddr_in a = {.sin_family = AF_INET,
				.sin_port = htons((uint16_t)g_srv.port)};
	static char resp[65536];
	char req[4096];
	size_t got = 0;
	ssize_t n;
	int fd = socket(AF_INET, SOCK_STREAM, 0), len;
	char *hdr_end;

	a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	cr_assert(fd >= 0);
	cr_assert_eq(connect(fd, (struct sockaddr *)&a, sizeof(a)), 0);
	len = snprintf(req, sizeof(req),
		       "%s %s HTTP/1.1\r\nHost: t\r\nConnection: close\r\n"
		       "Content-Length: %zu\r\n\r\n%s",
		       method, path, strlen(body), body);
	cr_assert_eq(write(fd, req, (size_t)len), len);
	while ((n = read(fd, resp + got, sizeof(resp) - 1 - got)) > 0)
		got += (size_t)n;
	close(fd);
	resp[got] = '\0';
	hdr_end = strstr(resp, "\r\n\r\n");
	cr_assert_not_null(hdr_end, "control reply: %s", resp);
	if (out)
		snprintf(out, outlen, "%s", hdr_end + 4);
	return (int)strtol(resp + 9, NULL, 10);
}

void set_faults(const char *rules)
{
	char out[256];
	cr_assert_eq(ctl("PUT", "/_faults", rules, out, sizeof(out)), 200,
		     "rules rejected: %s", out);
}

uint64_t server_stat(const char *key)
{
	char out[4096], pat[64];
	const char *p;

	cr_assert_eq(ctl("GET", "/_stats", "", out, sizeof(out)), 200);
	snprintf(pat, sizeof(pat), "\"%s\": ", key);
	p = strstr(out, pat);
	cr_assert_not_null(p, "no %s in %s", key, out);
	return strtoull(p + strlen(pat), NULL, 10);
}

struct http *mk(double budget, const char *header_file)
{
	struct http_opts o = {.connections = 4,
			      .retry_budget_s = budget,
			      .connect_timeout_s = 1,
			      .low_speed_time_s = 1,
			      .backoff_base_s = 0.01,
			      .header_file = header_file};
	char err[256] = "";
	struct http *h;
	cr_assert_eq(http_open(&o, &h, err, sizeof(err)), 0, "http_open: %s",
		     err);
	return h;
}

/* big.bin with other bytes, its size and mtime (so its ETag) kept: an
 * object changed in place without the server noticing. */
static void swap_big(void)
{
	unsigned char *other = xmalloc(BIG_LEN);
	char path[256];
	struct stat st;
	struct timespec ts[2];

	snprintf(path, sizeof(path), "%s/big.bin", g_root);
	cr_assert_eq(stat(path, &st), 0);
	for (size_t i = 0; i < BIG_LEN; i++)
		other[i] = (unsigned char)(g_big[i] ^ 0x5a);
	write_file(g_root, "big.bin", other, BIG_LEN);
	ts[0] = st.st_atim;
	ts[1] = st.st_mtim;
	cr_assert_eq(utimensat(AT_FDCWD, path, ts, 0), 0);
	free(other);
}

int collect_sink(void *ud, const void *data, size_t len)
{
	struct collect *c = ud;

	if (c->fail_with)
		return c->fail_with;
	cr_assert_leq(len, c->cap - c->len, "sink got more than the object");
	memcpy(c->buf + c->len, data, len);
	c->len += len;
	if (c->touch_after && c->len >= c->touch_after) {
		char path[256];
		struct timespec ts[2] = {{.tv_sec = 1000000},
					 {.tv_sec = 1000000}};
		snprintf(path, sizeof(path), "%s/big.bin", g_root);
		cr_assert_eq(utimensat(AT_FDCWD, path, ts, 0), 0);
		c->touch_after = 0;
	}
	if (c->swap_after && c->len >= c->swap_after) {
		swap_big();
		c->swap_after = 0;
	}
	return 0;
}

struct collect *collect_new(void)
{
	struct collect *c = xcalloc(1, sizeof(*c));
	c->cap = BIG_LEN + 1;
	c->buf = xmalloc(c->cap);
	return c;
}

void collect_free(struct collect *c)
{
	free(c->buf);
	free(c);
}

void expect_big(const struct collect *c)
{
	cr_expect_eq(c->len, BIG_LEN, "got %zu bytes", c->len);
	cr_expect(c->len == BIG_LEN && memcmp(c->buf, g_big, BIG_LEN) == 0,
		  "bytes differ");
}

struct http_stats stats_of(struct http *h)
{
	struct http_stats s;
	http_get_stats(h, &s);
	return s;
}
