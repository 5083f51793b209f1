/* test_http.c - fetch/http against tests/fault_server.py: streaming, ranges,
 * retries, redirects, TLS, headers, concurrency, deadlines (resumes and
 * verification: test_http_resume.c). */
#include "fetch/net/cred_http.h"
#include "fetch/net/http.h"

#include "common/util.h"
#include "fixtures.h"
#include "http_fx.h"

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

TestSuite(http, .init = http_fx_setup, .fini = http_fx_teardown, .timeout = 30);

/* ---- plain transfers ---------------------------------------------------- */

Test(http, stream_whole_object)
{
	NEED_SERVER();
	struct http *h = mk(2, NULL);
	struct collect *c = collect_new();

	cr_assert_eq(
		http_stream(h, url("/big.bin"), NULL, BIG_LEN, collect_sink, c),
		0);
	expect_big(c);
	cr_expect_eq(stats_of(h).requests, 1);
	cr_expect_eq(stats_of(h).bytes, BIG_LEN);
	cr_expect_eq(stats_of(h).retries, 0);
	collect_free(c);
	http_free(h);
}

Test(http, stat_and_stream_with_etag)
{
	NEED_SERVER();
	struct http *h = mk(2, NULL);
	struct collect *c = collect_new();
	char etag[HTTP_ETAG_MAX];
	uint64_t size = 0;

	cr_assert_eq(http_stat(h, url("/big.bin"), &size, etag, sizeof(etag)),
		     0);
	cr_expect_eq(size, BIG_LEN);
	cr_expect_eq(etag[0], '"', "etag %s", etag);
	cr_assert_eq(
		http_stream(h, url("/big.bin"), etag, size, collect_sink, c),
		0);
	expect_big(c);
	cr_expect_eq(http_stat(h, url("/nope"), &size, etag, sizeof(etag)),
		     -ENOENT);
	cr_expect_eq(http_stat(h, url("/empty.bin"), &size, etag, sizeof(etag)),
		     0);
	cr_expect_eq(size, 0);
	collect_free(c);
	http_free(h);
}

Test(http, get_range_exact_bytes)
{
	NEED_SERVER();
	static const struct {
		uint64_t off;
		size_t len;
		int rc;
	} cases[] = {
		{0, 1, 0},
		{1234567, 100000, 0},
		{BIG_LEN - 10, 10, 0},
		{0, BIG_LEN, 0},
		{BIG_LEN - 5, 10,
		 -EIO}, /* past the end: 206 shorter than asked */
		{BIG_LEN + 5, 10, -EIO}, /* 416 */
	};
	struct http *h = mk(1, NULL);
	unsigned char *buf = xmalloc(BIG_LEN);

	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		int rc = http_get_range(h, url("/big.bin"), NULL, cases[i].off,
					cases[i].len, buf);
		if (cases[i].rc == 0) {
			cr_expect_eq(rc, 0, "case %zu: %d", i, rc);
			cr_expect(memcmp(buf, g_big + cases[i].off,
					 cases[i].len) == 0,
				  "case %zu: bytes differ", i);
		} else {
			cr_expect_neq(rc, 0, "case %zu must fail", i);
		}
	}
	cr_expect_eq(http_get_range(h, url("/big.bin"), NULL, 5, 0, buf), 0);
	free(buf);
	http_free(h);
}

Test(http, get_all_and_cap)
{
	NEED_SERVER();
	struct http *h = mk(1, NULL);
	char *out = NULL;
	size_t len = 0;

	cr_assert_eq(http_get_all(h, url("/small.txt"), 1024, &out, &len), 0);
	cr_expect_eq(len, strlen(SMALL_TEXT));
	cr_expect_str_eq(out, SMALL_TEXT);
	free(out);
	cr_expect_eq(http_get_all(h, url("/big.bin"), 1000, &out, &len),
		     -EFBIG);
	cr_assert_eq(http_get_all(h, url("/empty.bin"), 10, &out, &len), 0);
	cr_expect_eq(len, 0);
	cr_expect_str_eq(out, "");
	free(out);
	http_free(h);
}

Test(http, sink_errors_stop_the_transfer)
{
	NEED_SERVER();
	struct http *h = mk(1, NULL);
	struct collect *c = collect_new();

	c->fail_with = -ENOSPC;
	cr_expect_eq(
		http_stream(h, url("/big.bin"), NULL, BIG_LEN, collect_sink, c),
		-ENOSPC);
	c->fail_with = 1;
	cr_expect_eq(
		http_stream(h, url("/big.bin"), NULL, BIG_LEN, collect_sink, c),
		-ECANCELED);
	cr_expect_eq(stats_of(h).retries, 0);
	collect_free(c);
	http_free(h);
}

/* ---- statuses and retries ----------------------------------------------- */

Test(http, final_statuses_do_not_retry)
{
	NEED_SERVER();
	static const struct {
		const char *rule;
		int rc;
	} cases[] = {
		{"", -ENOENT}, /* plain 404 from the server */
		{"/missing=status:410", -ENOENT},
		{"/missing=status:401", -EACCES},
		{"/missing=status:403", -EACCES},
		{"/missing=status:400", -EIO},
	};
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		struct http *h = mk(5, NULL);
		struct collect *c = collect_new();

		set_faults(cases[i].rule);
		cr_expect_eq(http_stream(h, url("/missing"), NULL, UINT64_MAX,
					 collect_sink, c),
			     cases[i].rc, "case %zu", i);
		/* one request, no retry: no backoff was slept */
		cr_expect_eq(stats_of(h).requests, 1, "case %zu", i);
		cr_expect_eq(stats_of(h).retries, 0, "case %zu", i);
		cr_expect_eq(stats_of(h).errors_4xx, 1, "case %zu", i);
		collect_free(c);
		http_free(h);
	}
}

Test(http, retries_5xx_then_succeeds)
{
	NEED_SERVER();
	struct http *h = mk(5, NULL);
	struct collect *c = collect_new();

	set_faults("/big.bin=status:503,count=2");
	cr_assert_eq(
		http_stream(h, url("/big.bin"), NULL, BIG_LEN, collect_sink, c),
		0);
	expect_big(c);
	cr_expect_eq(stats_of(h).retries, 2);
	cr_expect_eq(stats_of(h).errors_5xx, 2);
	cr_expect_eq(stats_of(h).requests, 3);
	collect_free(c);
	http_free(h);
}

Test(http, retries_429_and_reset)
{
	NEED_SERVER();
	struct http *h = mk(5, NULL);
	char *out = NULL;
	size_t len;

	/* reset first: on a reused connection curl itself would retry a
	 * connection that died without an answer, hiding the fault */
	set_faults("/small.txt=reset,count=1\n/small.txt=status:429,count=1");
	cr_assert_eq(http_get_all(h, url("/small.txt"), 100, &out, &len), 0);
	cr_expect_str_eq(out, SMALL_TEXT);
	cr_expect_eq(stats_of(h).retries, 2);
	cr_expect_eq(stats_of(h).errors_conn, 1);
	free(out);
	http_free(h);
}

Test(http, retry_after_is_honoured)
{
	NEED_SERVER();
	struct http *h = mk(5, NULL);
	char *out = NULL;
	size_t len;
	double t0 = now_mono(), dt;

	set_faults("/small.txt=status:503,count=1,retry_after=1");
	cr_assert_eq(http_get_all(h, url("/small.txt"), 100, &out, &len), 0);
	dt = now_mono() - t0;
	cr_expect_geq(dt, 0.95, "waited only %.2fs", dt);
	cr_expect_eq(stats_of(h).retries, 1);
	free(out);
	http_free(h);
}

/* An hour's Retry-After against a 1 s budget: the one retry is made when
 * the budget runs out, so the call succeeds on its second request. Honoured
 * in full, the wait would outlast the suite's timeout (the test hangs). */
Test(http, retry_after_is_capped_by_the_budget)
{
	NEED_SERVER();
	struct http *h = mk(1, NULL);
	char *out = NULL;
	size_t len;

	set_faults("/small.txt=status:503,count=1,retry_after=3600");
	cr_assert_eq(http_get_all(h, url("/small.txt"), 100, &out, &len), 0);
	cr_expect_str_eq(out, SMALL_TEXT);
	cr_expect_eq(stats_of(h).retries, 1);
	cr_expect_eq(stats_of(h).errors_5xx, 1);
	cr_expect_eq(server_stat("requests"), 2);
	free(out);
	http_free(h);
}

Test(http, persistent_5xx_gives_up_within_budget)
{
	NEED_SERVER();
	struct http *h = mk(0.5, NULL);
	char *out = NULL;
	size_t len;

	set_faults("/small.txt=status:500");
	/* The budget ends the retries with the last answer's -EIO; without
	 * it only the call's own deadline (11.5 s) would, with -ETIMEDOUT. */
	cr_expect_eq(http_get_all(h, url("/small.txt"), 100, &out, &len), -EIO);
	cr_expect_geq(stats_of(h).retries, 1);
	cr_expect_eq(stats_of(h).errors_5xx, stats_of(h).retries + 1);
	cr_expect_eq(server_stat("requests"), stats_of(h).retries + 1);
	http_free(h);
}

Test(http, unreachable_port_is_refused_within_budget)
{
	NEED_SERVER();
	struct sockaddr_in a = {.sin_family = AF_INET};
	socklen_t alen = sizeof(a);
	int fd = socket(AF_INET, SOCK_STREAM, 0), port;
	struct http *h = mk(0.5, NULL);
	struct collect *c = collect_new();

	/* a port that was free a moment ago and has no listener */
	a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	cr_assert_eq(bind(fd, (struct sockaddr *)&a, sizeof(a)), 0);
	cr_assert_eq(getsockname(fd, (struct sockaddr *)&a, &alen), 0);
	port = ntohs(a.sin_port);
	close(fd);
	cr_expect_eq(http_stream(h, url_on(port, "/x"), NULL, UINT64_MAX,
				 collect_sink, c),
		     -ECONNREFUSED);
	/* -ECONNREFUSED is the budget's end; past it only the call's own
	 * deadline (11.5 s) would end the retries, with -ETIMEDOUT */
	cr_expect_geq(stats_of(h).retries, 1);
	cr_expect_eq(stats_of(h).errors_conn, stats_of(h).retries + 1);
	collect_free(c);
	http_free(h);
}

Test(http, stall_times_out_instead_of_hanging)
{
	NEED_SERVER();
	/* an hour's rate window: only the 1 s low-speed limit ends a stall */
	struct http_opts o = {.connections = 4,
			      .retry_budget_s = 0.5,
			      .connect_timeout_s = 1,
			      .low_speed_time_s = 1,
			      .backoff_base_s = 0.01,
			      .rate_window_s = 3600};
	char err[256] = "";
	struct http *h = NULL;
	struct collect *c = collect_new();

	cr_assert_eq(http_open(&o, &h, err, sizeof(err)), 0, "%s", err);
	/* Waited out, the stall would outlast the suite's timeout; a stalled
	 * attempt broken off by the low-speed limit is past the 0.5 s budget,
	 * so it is the only one. */
	set_faults("/big.bin=stall:3600");
	cr_expect_eq(
		http_stream(h, url("/big.bin"), NULL, BIG_LEN, collect_sink, c),
		-ETIMEDOUT);
	cr_expect_eq(server_stat("requests"), 1);
	/* a stall once the request went out, not a connection error */
	cr_expect_eq(stats_of(h).stalls, 1);
	cr_expect_eq(stats_of(h).errors_conn, 0);
	cr_expect_eq(c->len, 0);
	cr_expect(strstr(http_reason(-ETIMEDOUT), "at byte 0 of") != NULL,
		  "reason: %s", http_reason(-ETIMEDOUT));
	collect_free(c);
	http_free(h);
}

/* ---- redirects and TLS -------------------------------------------------- */

Test(http, redirects_are_followed_and_bounded)
{
	NEED_SERVER();
	struct http *h = mk(1, NULL);
	char rules[512], *out = NULL;
	size_t len;

	snprintf(rules, sizeof(rules),
		 "/r=redirect:%s\n/loop=redirect:/loop\n"
		 "/ftp=redirect:ftp://127.0.0.1/x",
		 url("/small.txt"));
	set_faults(rules);
	cr_assert_eq(http_get_all(h, url("/r"), 100, &out, &len), 0);
	cr_expect_str_eq(out, SMALL_TEXT);
	free(out);
	cr_expect_eq(http_get_all(h, url("/loop"), 100, &out, &len), -ELOOP);
	cr_expect_eq(http_get_all(h, url("/ftp"), 100, &out, &len),
		     -EPROTONOSUPPORT);
	/* Messages name the cause, not strerror's symlinks or ranges. */
	cr_expect_str_eq(http_reason(-ELOOP),
			 "too many redirects (more than 5)");
	cr_expect(strstr(http_reason(-EPROTONOSUPPORT), "redirect refused"));
	http_free(h);
}

static int make_cert(char *cert, char *key, size_t len)
{
	char cmd[1024];

	snprintf(cert, len, "%s/cert.pem", g_dir);
	snprintf(key, len, "%s/key.pem", g_dir);
	snprintf(cmd, sizeof(cmd),
		 "openssl req -x509 -newkey ec -pkeyopt "
		 "ec_paramgen_curve:prime256v1 "
		 "-nodes -days 2 -subj /CN=127.0.0.1 -addext "
		 "subjectAltName=IP:127.0.0.1 "
		 "-keyout %s -out %s >/dev/null 2>&1",
		 key, cert);
	return system(cmd);
}

Test(http, https_verifies_and_refuses_downgrade)
{
	NEED_SERVER();
	char cert[256], key[256], rule[400], u[256], *out = NULL, err[256];
	struct fx_server tls = {0};
	struct http_opts o = {.retry_budget_s = 0.5, .backoff_base_s = 0.01};
	struct http *h, *untrusting;
	size_t len;

	if (make_cert(cert, key, sizeof(cert)))
		cr_skip_test("openssl could not make a test certificate");
	/* the TLS server sends /down to the plain server: a downgrade */
	snprintf(rule, sizeof(rule), "/down=redirect:%s", url("/small.txt"));
	cr_assert_eq(server_start(&tls, "tls", cert, key, rule), 0);
	o.ca_file = cert;
	cr_assert_eq(http_open(&o, &h, err, sizeof(err)), 0, "%s", err);
	o.ca_file = NULL;
	cr_assert_eq(http_open(&o, &untrusting, err, sizeof(err)), 0, "%s",
		     err);

	snprintf(u, sizeof(u), "https://127.0.0.1:%d/small.txt", tls.port);
	cr_expect_eq(http_get_all(h, u, 100, &out, &len), 0);
	cr_expect_str_eq(out ? out : "", SMALL_TEXT);
	free(out);
	out = NULL;
	cr_expect_eq(http_get_all(untrusting, u, 100, &out, &len),
		     -EKEYREJECTED);
	/* The reason names the check that failed, in curl's words too. */
	cr_expect_not_null(strstr(http_reason(-EKEYREJECTED),
				  "TLS certificate not trusted"),
			   "%s", http_reason(-EKEYREJECTED));
	cr_expect_not_null(
		strstr(http_reason(-EKEYREJECTED), "SSL certificate"), "%s",
		http_reason(-EKEYREJECTED));

	/* upgrade http -> https is fine */
	snprintf(rule, sizeof(rule), "/up=redirect:%s", u);
	set_faults(rule);
	cr_expect_eq(http_get_all(h, url("/up"), 100, &out, &len), 0);
	free(out);
	out = NULL;

	snprintf(u, sizeof(u), "https://127.0.0.1:%d/down", tls.port);
	cr_expect_eq(http_get_all(h, u, 100, &out, &len), -EPROTONOSUPPORT);
	cr_expect_eq(server_stat("requests"), 1,
		     "the http target was never asked");
	fx_server_stop(&tls);
	http_free(untrusting);
	http_free(h);
}

/* ---- headers and redaction ---------------------------------------------- */

Test(http, header_file_headers_are_sent_to_the_origin_only)
{
	NEED_SERVER();
	static const char hf[] = "# credentials for the test\n\n"
				 "X-Echofs-Test: s3cret-value\r\n"
				 "  X-Second:\tv2  \n";
	char path[256], out[4096], rule[256], *body = NULL;
	struct http *h;
	size_t len;

	write_file(g_dir, "headers", hf, strlen(hf));
	snprintf(path, sizeof(path), "%s/headers", g_dir);
	h = mk(1, path);
	cr_assert_eq(http_get_all(h, url("/small.txt"), 100, &body, &len), 0);
	free(body);
	cr_assert_eq(ctl("GET", "/_last_headers", "", out, sizeof(out)), 200);
	cr_expect_not_null(strstr(out, "\"X-Echofs-Test\": \"s3cret-value\""),
			   "%s", out);
	cr_expect_not_null(strstr(out, "\"X-Second\": \"v2\""), "%s", out);

	/* a redirect to another origin (localhost vs 127.0.0.1) drops them */
	snprintf(rule, sizeof(rule),
		 "/away=redirect:http://localhost:%d/small.txt", g_srv.port);
	set_faults(rule);
	cr_assert_eq(http_get_all(h, url("/away"), 100, &body, &len), 0);
	free(body);
	cr_assert_eq(ctl("GET", "/_last_headers", "", out, sizeof(out)), 200);
	cr_expect_not_null(strstr(out, "\"path\": \"/small.txt\""), "%s", out);
	cr_expect_null(strstr(out, "s3cret"),
		       "credential followed a redirect: %s", out);
	http_free(h);
}

Test(http_offline, header_file_rejects_bad_lines_without_leaking)
{
	static const struct {
		const char *text;
		const char *reason;
	} cases[] = {
		{"Authorization Bearer SECRET\n", "line 1: no colon"},
		{"# ok\nX-A: SEC\x01RET\n", "line 2: control character"},
		{"X A: SECRET\n", "line 1: bad character in header name"},
		{": SECRET\n", "line 1: empty header name"},
		{"\n\nRange: bytes=0-SECRET\n", "line 3: header name reserved"},
		{"X-Empty:   \n", "line 1: empty value"},
	};
	char dir[] = "/tmp/echofs-test-hf-XXXXXX", path[128], err[256];

	cr_assert_not_null(mkdtemp(dir));
	snprintf(path, sizeof(path), "%s/h", dir);
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		struct http_opts o = {.header_file = path};
		FILE *f = fopen(path, "w");
		cr_assert_not_null(f);
		fputs(cases[i].text, f);
		fclose(f);
		struct http *h = (struct http *)&o; /* must be reset */
		err[0] = '\0';
		cr_expect_eq(http_open(&o, &h, err, sizeof(err)), -EINVAL,
			     "case %zu accepted", i);
		cr_expect_null(h, "case %zu: *out left set", i);
		cr_expect_not_null(strstr(err, cases[i].reason), "case %zu: %s",
				   i, err);
		cr_expect_null(strstr(err, "SEC"), "case %zu leaks: %s", i,
			       err);
	}
	unlink(path);
	{
		struct http_opts o = {.header_file = path};
		struct http *h = (struct http *)&o;
		cr_expect_eq(http_open(&o, &h, err, sizeof(err)), -ENOENT);
		cr_expect_null(h);
		cr_expect_not_null(strstr(err, "No such file"), "%s", err);
	}
	rmdir(dir);
}

Test(http_offline, redact_table)
{
	static const struct {
		const char *in;
		const char *out;
	} cases[] = {
		{"https://h/a/b.tar", "https://h/a/b.tar"},
		{"https://user:pw@h/x.tar", "https://***@h/x.tar"},
		{"https://user@h:8443/x", "https://***@h:8443/x"},
		{"https://h/x.tar?X-Amz-Signature=abc&t=1",
		 "https://h/x.tar?***"},
		{"https://h/x.tar#frag", "https://h/x.tar#***"},
		{"https://h/x?q#f", "https://h/x?***"},
		{"https://u:p@h?sig=1", "https://***@h?***"},
		{"https://h/p@q/x", "https://h/p@q/x"}, /* '@' in the path */
		{"https://a@b@h/x",
		 "https://***@h/x"}, /* last '@' ends userinfo */
		{"/local/path?x=1", "/local/path?***"},
		{"", ""},
	};
	char buf[128], tiny[12];

	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++)
		cr_expect_str_eq(http_redact(cases[i].in, buf, sizeof(buf)),
				 cases[i].out, "%s", cases[i].in);
	/* truncated to fit, never overflowing, never showing the secret */
	cr_expect_str_eq(
		http_redact("https://user:pw@host/x", tiny, sizeof(tiny)),
		"https://***");
	cr_expect_eq(http_redact("https://h/", tiny, 0), tiny);
}

/* The published form; the stored one (http_strip_secrets): test_redact.c */
Test(http_offline, strip_query_table)
{
	static const struct {
		const char *in;
		const char *out;
	} cases[] = {
		{"https://h/a/b.tar", "https://h/a/b.tar"},
		{"https://user:pw@h/x.tar", "https://h/x.tar"},
		{"https://user@h:8443/x?t=1", "https://h:8443/x"},
		{"https://h/x.tar?X-Amz-Signature=abc&t=1", "https://h/x.tar"},
		{"https://h/x.tar#frag", "https://h/x.tar"},
		{"https://u:p@h?sig=1", "https://h"},
		{"https://h/p@q/x", "https://h/p@q/x"}, /* '@' in the path */
		{"https://a@b@h/x", "https://h/x"},
		{"/local/path?x=1", "/local/path?x=1"}, /* not a URL */
		{"", ""},
	};

	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		char *got = http_strip_query(cases[i].in);
		cr_expect_str_eq(got, cases[i].out, "%s", cases[i].in);
		free(got);
	}
}

Test(http_offline, bad_arguments)
{
	struct http_opts o = {0};
	char err[64], etag[HTTP_ETAG_MAX + 1];
	struct http *h;
	unsigned char b[4];

	cr_assert_eq(http_open(&o, &h, err, sizeof(err)), 0);
	memset(etag, 'x', sizeof(etag) - 1);
	etag[sizeof(etag) - 1] = '\0';
	cr_expect_eq(http_get_range(h, "http://127.0.0.1:1/x", etag, 0, 4, b),
		     -EINVAL);
	cr_expect_eq(http_get_range(h, "http://127.0.0.1:1/x", NULL,
				    UINT64_MAX - 1, 4, b),
		     -EINVAL);
	cr_expect_eq(http_get_range(h, "ftp://127.0.0.1/x", NULL, 0, 4, b),
		     -EPROTO);
	http_free(h);
	http_free(NULL);
}

Test(http_offline, stall_timeout_default_and_set)
{
	struct http_opts o = {0};
	char err[64];
	struct http *h;

	cr_assert_eq(http_open(&o, &h, err, sizeof(err)), 0, "%s", err);
	cr_expect_float_eq(http_stall_timeout(h), 10.0, 1e-9);
	http_free(h);
	o.low_speed_time_s = 2;
	cr_assert_eq(http_open(&o, &h, err, sizeof(err)), 0, "%s", err);
	cr_expect_float_eq(http_stall_timeout(h), 2.0, 1e-9);
	http_free(h);
}

/* ---- concurrency -------------------------------------------------------- */

struct worker {
	struct http *h;
	int rc;
	size_t off, bad;
};

static int check_sink(void *ud, const void *data, size_t len)
{
	struct worker *w = ud;
	if (w->off + len > BIG_LEN || memcmp(g_big + w->off, data, len) != 0)
		w->bad++;
	w->off += len;
	return 0;
}

static void *stream_worker(void *arg)
{
	struct worker *w = arg;
	w->rc = http_stream(w->h, url("/big.bin"), NULL, BIG_LEN, check_sink,
			    w);
	return NULL;
}

Test(http, concurrent_streams_share_few_connections)
{
	NEED_SERVER();
	struct http_opts o = {
		.connections = 2, .retry_budget_s = 5, .backoff_base_s = 0.01};
	char err[128];
	struct http *h = NULL;
	struct worker w[8];
	pthread_t t[8];
	uint64_t conns, max_open;

	cr_assert_eq(http_open(&o, &h, err, sizeof(err)), 0, "%s", err);
	cr_assert_eq(ctl("POST", "/_reset_stats", "", NULL, 0), 200);
	for (int i = 0; i < 8; i++) {
		w[i] = (struct worker){.h = h};
		cr_assert_eq(pthread_create(&t[i], NULL, stream_worker, &w[i]),
			     0);
	}
	for (int i = 0; i < 8; i++) {
		pthread_join(t[i], NULL);
		cr_expect_eq(w[i].rc, 0, "worker %d: %d", i, w[i].rc);
		cr_expect_eq(w[i].off, BIG_LEN, "worker %d", i);
		cr_expect_eq(w[i].bad, 0, "worker %d got wrong bytes", i);
	}
	max_open = server_stat("max_open");
	conns = server_stat("connections") - 2; /* minus our two /_stats asks */
	cr_expect_eq(server_stat("requests"), 8);
	cr_expect_leq(conns, 3, "opened %llu connections for 8 transfers",
		      (unsigned long long)conns);
	/* two transfers plus at most one idle or control connection */
	cr_expect_leq(max_open, 3, "max_open %llu",
		      (unsigned long long)max_open);
	cr_expect_eq(stats_of(h).requests, 8);
	http_free(h);
}

/* ---- deadlines and cancellation ----------------------------------------- */

static struct http *mk_rate(double budget, double window)
{
	struct http_opts o = {.connections = 4,
			      .retry_budget_s = budget,
			      .connect_timeout_s = 1,
			      .backoff_base_s = 0.01,
			      .min_rate = 64 * 1024,
			      .rate_window_s = window};
	char err[256] = "";
	struct http *h;
	cr_assert_eq(http_open(&o, &h, err, sizeof(err)), 0, "http_open: %s",
		     err);
	return h;
}

/* A body trickling at 20 KB/s never trips the 1 B/s low-speed limit; each
 * 1 s rate window breaks it off below 64 KiB/s and the resume (16 KB further
 * on, past the 4 KiB it asks again) restarts the budget: on its own the call
 * would finish 200 KB in about 12 s and succeed. The total deadline, 1 + 1 +
 * 0.5 + 200000 / 65536 s, ends it first with -ETIMEDOUT, after resuming (so
 * the budget did not end it). */
Test(http, trickle_ends_by_the_total_deadline)
{
	NEED_SERVER();
	struct http *h = mk_rate(0.5, 1);
	unsigned char *buf = xmalloc(200000);

	set_faults("/big.bin=slow:20000");
	cr_expect_eq(http_get_range(h, url("/big.bin"), NULL, 0, 200000, buf),
		     -ETIMEDOUT);
	cr_expect_geq(stats_of(h).resumes, 1);
	cr_expect_lt(stats_of(h).bytes, 200000);
	cr_expect_eq(server_stat("requests"),
		     1 + stats_of(h).resumes + stats_of(h).retries);
	cr_expect(strstr(http_reason(-ETIMEDOUT), "of 200000") != NULL,
		  "reason: %s", http_reason(-ETIMEDOUT));
	free(buf);
	http_free(h);
}

Test(http, thread_deadline_bounds_a_call)
{
	NEED_SERVER();
	struct http *h = mk_rate(3600, 10);
	struct collect *c = collect_new();
	double old;

	/* An hour of budget against a stall of an hour: only the thread's
	 * deadline can end the call in time, inside its first attempt (the
	 * 10 s rate window would end that attempt, then retry). Without it the
	 * call outlasts the suite's timeout. */
	set_faults("/big.bin=stall:3600");
	old = http_thread_deadline(now_mono() + 1.0);
	cr_expect_eq(
		http_stream(h, url("/big.bin"), NULL, BIG_LEN, collect_sink, c),
		-ETIMEDOUT);
	http_thread_deadline(old);
	cr_expect_eq(server_stat("requests"), 1);
	cr_expect_eq(stats_of(h).retries, 0);
	cr_expect_eq(c->len, 0);
	collect_free(c);
	http_free(h);
}

struct cancel_worker {
	struct http *h;
	const char *path;
	int rc;
};

static void *cancel_main(void *arg)
{
	struct cancel_worker *w = arg;
	struct collect *c = collect_new();
	w->rc = http_stream(w->h, url(w->path), NULL, BIG_LEN, collect_sink, c);
	collect_free(c);
	return NULL;
}

/* One transfer stalled after its headers, one in an hour's Retry-After
 * backoff, two waiting for a connection slot: http_cancel ends them all with
 * -ECANCELED. Each would otherwise wait an hour (the budget is one too), so
 * one that the cancel does not wake outlasts the suite's timeout. */
Test(http, cancel_ends_every_transfer_promptly)
{
	NEED_SERVER();
	struct http_opts o = {
		.connections = 2, .retry_budget_s = 3600, .backoff_base_s = 0.01};
	char err[128];
	struct http *h = NULL;
	const char *paths[] = {"/big.bin", "/busy.bin", "/big.bin", "/big.bin"};
	struct cancel_worker w[4];
	pthread_t t[4];

	cr_assert_eq(http_open(&o, &h, err, sizeof(err)), 0, "%s", err);
	write_file(g_root, "busy.bin", "x", 1);
	set_faults(
		"/big.bin=stall:3600\n/busy.bin=status:503,retry_after=3600");
	for (int i = 0; i < 4; i++) {
		w[i] = (struct cancel_worker){.h = h, .path = paths[i]};
		cr_assert_eq(pthread_create(&t[i], NULL, cancel_main, &w[i]),
			     0);
		usleep(100000);
	}
	usleep(700000);
	http_cancel(h);
	for (int i = 0; i < 4; i++) {
		pthread_join(t[i], NULL);
		cr_expect_eq(w[i].rc, -ECANCELED, "worker %d: %d", i, w[i].rc);
	}
	/* the backoff was cut short, not waited out and retried */
	cr_expect_eq(stats_of(h).errors_5xx, 1);
	cr_expect_eq(http_get_range(h, url("/big.bin"), NULL, 0, 1, err),
		     -ECANCELED);
	http_free(h);
}

/* Issue 20: a credential source's request (STS, IMDS, ECS, Google's token
 * endpoint) goes through the one client: a private CA's server is refused
 * as untrusted (-EKEYREJECTED, not -EHOSTUNREACH), and trusted with ca_file.
 */
Test(http, cred_request_uses_tls_options)
{
	NEED_SERVER();
	char cert[256], key[256], u[256], *out = NULL;
	struct fx_server tls = {0};
	const char *hdr = "X-Test: 1";
	struct cred_http_req r = {.url = u, .hdrs = &hdr, .nhdrs = 1};
	long status = 0;

	if (make_cert(cert, key, sizeof(cert)))
		cr_skip_test("openssl could not make a test certificate");
	cr_assert_eq(server_start(&tls, "tls", cert, key, NULL), 0);
	snprintf(u, sizeof(u), "https://127.0.0.1:%d/small.txt", tls.port);
	cr_expect_eq(cred_http_call(&r, &status, &out), -EKEYREJECTED);
	cr_expect_null(out);
	r.ca_file = cert;
	cr_expect_eq(cred_http_call(&r, &status, &out), 0);
	cr_expect_eq(status, 200);
	cr_expect_str_eq(out ? out : "", SMALL_TEXT);
	free(out);
	fx_server_stop(&tls);
}
