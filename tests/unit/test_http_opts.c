/* test_http_opts.c - what every easy handle of fetch/net/http.c is given:
 * an option libcurl refuses fails the call naming it (linked with
 * -Wl,--wrap=curl_easy_setopt: see unit_link_args in tests/meson.build),
 * and the path goes out as written, dot segments and all. */
#include "fetch/net/http.h"

#include <arpa/inet.h>
#include <criterion/criterion.h>
#include <curl/curl.h>
#include <errno.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

/* ---- a curl_easy_setopt that refuses one option on demand ---------------- */

static CURLoption refuse = (CURLoption)-1;

#undef curl_easy_setopt
CURLcode __real_curl_easy_setopt(CURL *c, CURLoption o, ...);
CURLcode __wrap_curl_easy_setopt(CURL *c, CURLoption o, ...);
CURLcode __wrap_curl_easy_setopt(CURL *c, CURLoption o, ...)
{
	va_list ap;
	CURLcode r;

	if (o == refuse)
		return CURLE_UNKNOWN_OPTION;
	va_start(ap, o);
	if (o < CURLOPTTYPE_OBJECTPOINT)
		r = __real_curl_easy_setopt(c, o, va_arg(ap, long));
	else if (o >= CURLOPTTYPE_OFF_T && o < CURLOPTTYPE_BLOB)
		r = __real_curl_easy_setopt(c, o, va_arg(ap, curl_off_t));
	else /* objects, strings, functions, blobs: one pointer */
		r = __real_curl_easy_setopt(c, o, va_arg(ap, void *));
	va_end(ap);
	return r;
}

/* ---- a one-request server that remembers the request line --------------- */

struct one {
	int fd;
	int port;
	char line[512];
	pthread_t t;
};

static void *serve_one(void *ud)
{
	struct one *s = ud;
	int c = accept(s->fd, NULL, NULL);
	ssize_t n;

	if (c < 0)
		return NULL;
	n = recv(c, s->line, sizeof(s->line) - 1, 0);
	s->line[n > 0 ? n : 0] = '\0';
	s->line[strcspn(s->line, "\r\n")] = '\0';
	static const char ans[] = "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n"
				  "Connection: close\r\n\r\nok";
	if (send(c, ans, sizeof(ans) - 1, MSG_NOSIGNAL) < 0)
		s->line[0] = '!';
	close(c);
	return NULL;
}

static void one_start(struct one *s)
{
	struct sockaddr_in a = {.sin_family = AF_INET,
				.sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	socklen_t al = sizeof(a);

	memset(s->line, 0, sizeof(s->line));
	s->fd = socket(AF_INET, SOCK_STREAM, 0);
	cr_assert_geq(s->fd, 0);
	cr_assert_eq(bind(s->fd, (struct sockaddr *)&a, sizeof(a)), 0);
	cr_assert_eq(listen(s->fd, 1), 0);
	cr_assert_eq(getsockname(s->fd, (struct sockaddr *)&a, &al), 0);
	s->port = ntohs(a.sin_port);
	cr_assert_eq(pthread_create(&s->t, NULL, serve_one, s), 0);
}

static void one_stop(struct one *s)
{
	shutdown(s->fd, SHUT_RDWR);
	pthread_join(s->t, NULL);
	close(s->fd);
}

static struct http *open_client(void)
{
	struct http_opts o = {.connections = 2, .retry_budget_s = 1,
			      .connect_timeout_s = 1};
	struct http *h = NULL;
	char err[256];

	cr_assert_eq(http_open(&o, &h, err, sizeof(err)), 0, "%s", err);
	return h;
}

static int get(struct http *h, int port, const char *path)
{
	char u[256], *body = NULL;
	size_t len;
	int r;

	snprintf(u, sizeof(u), "http://127.0.0.1:%d%s", port, path);
	r = http_get_all(h, u, 1024, &body, &len);
	free(body);
	return r;
}

Test(http_opts, a_refused_option_fails_the_call_naming_it)
{
	static const struct {
		CURLoption opt;
		const char *name;
	} cases[] = {
		{CURLOPT_SSL_VERIFYPEER, "CURLOPT_SSL_VERIFYPEER"},
		{CURLOPT_SSL_VERIFYHOST, "CURLOPT_SSL_VERIFYHOST"},
		{CURLOPT_PROTOCOLS_STR, "CURLOPT_PROTOCOLS_STR"},
		{CURLOPT_LOW_SPEED_TIME, "CURLOPT_LOW_SPEED_TIME"},
	};
	struct http *h = open_client();

	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		struct one s;
		one_start(&s);
		refuse = cases[i].opt;
		int r = get(h, s.port, "/x");
		refuse = (CURLoption)-1;
		cr_expect_eq(r, -EOPNOTSUPP, "%s: %d", cases[i].name, r);
		cr_expect(strstr(http_reason(r), cases[i].name) != NULL,
			  "%s: %s", cases[i].name, http_reason(r));
		one_stop(&s);
		cr_expect_str_empty(s.line, "%s: the request was sent",
				    cases[i].name);
	}
	http_free(h);
}

Test(http_opts, the_path_goes_out_as_written)
{
	struct http *h = open_client();
	struct one s;

	one_start(&s);
	cr_expect_eq(get(h, s.port, "/b/ds/../../other/./x.tar"), 0);
	one_stop(&s);
	cr_expect_str_eq(s.line, "GET /b/ds/../../other/./x.tar HTTP/1.1");
	http_free(h);
}
