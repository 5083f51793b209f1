/* test_http_resume.c - fetch/http's resumes and verification against
 * tests/fault_server.py: broken bodies resumed from the next byte, Range,
 * Content-Range, ETag and length checks, the overlap a resume compares. */
#include "fetch/net/http.h"

#include "common/file.h"
#include "common/log.h"
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

TestSuite(http_resume, .init = http_fx_setup, .fini = http_fx_teardown,
	  .timeout = 30);

/* ---- resumes and verification ------------------------------------------- */

Test(http_resume, truncated_body_is_resumed)
{
	NEED_SERVER();
	struct http *h = mk(2, NULL);
	struct collect *c = collect_new();

	set_faults("/big.bin=truncate:100000,count=2");
	cr_assert_eq(
		http_stream(h, url("/big.bin"), NULL, BIG_LEN, collect_sink, c),
		0);
	expect_big(c);
	cr_expect_eq(stats_of(h).resumes, 2);
	cr_expect_eq(stats_of(h).retries, 0);
	cr_expect_eq(server_stat("ranges"), 2);
	collect_free(c);
	http_free(h);
}

Test(http_resume, truncated_range_is_resumed)
{
	NEED_SERVER();
	struct http *h = mk(2, NULL);
	unsigned char *buf = xmalloc(500000);

	set_faults("/big.bin=truncate:1000,count=1");
	cr_assert_eq(http_get_range(h, url("/big.bin"), NULL, 10, 500000, buf),
		     0);
	cr_expect(memcmp(buf, g_big + 10, 500000) == 0, "bytes differ");
	cr_expect_eq(stats_of(h).resumes, 1);
	free(buf);
	http_free(h);
}

Test(http_resume, server_ignoring_range)
{
	NEED_SERVER();
	struct http *h = mk(2, NULL);
	struct collect *c = collect_new();
	unsigned char *buf = xmalloc(5000);

	set_faults("/big.bin=ignore-range");
	cr_assert_eq(
		http_get_range(h, url("/big.bin"), NULL, 1000000, 5000, buf),
		0);
	cr_expect(memcmp(buf, g_big + 1000000, 5000) == 0,
		  "range bytes differ");
	cr_assert_eq(
		http_get_range(h, url("/big.bin"), NULL, BIG_LEN - 7, 7, buf),
		0);
	cr_expect(memcmp(buf, g_big + BIG_LEN - 7, 7) == 0,
		  "tail bytes differ");

	set_faults("/big.bin=truncate:50000,count=1\n/big.bin=ignore-range");
	cr_assert_eq(
		http_stream(h, url("/big.bin"), NULL, BIG_LEN, collect_sink, c),
		0);
	expect_big(c);
	cr_expect_geq(stats_of(h).resumes, 1);
	free(buf);
	collect_free(c);
	http_free(h);
}

Test(http_resume, etag_mismatch_is_stale)
{
	NEED_SERVER();
	struct http *h = mk(2, NULL);
	struct collect *c = collect_new();
	char etag[HTTP_ETAG_MAX];
	unsigned char buf[16];
	uint64_t size;

	cr_expect_eq(http_stream(h, url("/big.bin"), "\"nope\"", BIG_LEN,
				 collect_sink, c),
		     -ESTALE);
	cr_expect_eq(http_get_range(h, url("/big.bin"), "\"nope\"", 0, 16, buf),
		     -ESTALE);
	/* a server that reports another ETag (weak tags skip If-Match and are
	 * caught by comparing the response) */
	cr_assert_eq(http_stat(h, url("/big.bin"), &size, etag, sizeof(etag)),
		     0);
	set_faults("/big.bin=etag:W/\"other\"");
	cr_expect_eq(
		http_stream(h, url("/big.bin"), etag, size, collect_sink, c),
		-ESTALE);
	cr_expect_eq(http_stream(h, url("/big.bin"), "W/\"mine\"", size,
				 collect_sink, c),
		     -ESTALE);
	cr_expect_eq(c->len, 0, "no byte of a stale object reaches the sink");
	cr_expect_eq(stats_of(h).retries, 0);
	collect_free(c);
	http_free(h);
}

Test(http_resume, object_changing_mid_stream_never_mixes)
{
	NEED_SERVER();
	struct http *h = mk(2, NULL);
	struct collect *c = collect_new();

	/* the first body breaks off; before the resume the file's mtime (so
	 * its ETag) changes */
	set_faults("/big.bin=truncate:200000,count=1");
	c->touch_after = 1;
	cr_expect_eq(
		http_stream(h, url("/big.bin"), NULL, BIG_LEN, collect_sink, c),
		-ESTALE);
	cr_expect_leq(c->len, 200000);
	cr_expect(memcmp(c->buf, g_big, c->len) == 0,
		  "delivered prefix differs");
	collect_free(c);
	http_free(h);
}

Test(http_resume, lying_content_range_is_eproto)
{
	NEED_SERVER();
	struct http *h = mk(2, NULL);
	unsigned char buf[100];

	set_faults("/big.bin=lie-range");
	cr_expect_eq(
		http_get_range(h, url("/big.bin"), NULL, 10, sizeof(buf), buf),
		-EPROTO);
	cr_expect_eq(stats_of(h).errors_verify, 1);
	cr_expect_eq(stats_of(h).retries, 0);
	http_free(h);
}

/* Issue 21 finding 2: a body cut short, then the resume answered from
 * offset 0 under the right Content-Range. Only the bytes themselves can tell:
 * the resume asks again for the last bytes already delivered and compares. */
Test(http_resume, resume_answered_from_offset_zero_is_eproto)
{
	NEED_SERVER();
	struct http *h = mk(2, NULL);
	struct collect *c = collect_new();

	set_faults("/big.bin=truncate:100000,count=1\n"
		   "/big.bin=range-from-zero");
	cr_expect_eq(
		http_stream(h, url("/big.bin"), NULL, BIG_LEN, collect_sink, c),
		-EPROTO);
	cr_expect_leq(c->len, 100000, "bytes of offset 0 went on as %zu",
		      c->len);
	cr_expect(memcmp(c->buf, g_big, c->len) == 0, "delivered bytes differ");
	cr_expect_eq(stats_of(h).errors_verify, 1);
	cr_expect_eq(stats_of(h).retries, 0);
	cr_expect_eq(server_stat("ranges"), 1);
	collect_free(c);
	http_free(h);
}

/* The same inside a range read that is resumed. */
Test(http_resume, resumed_range_answered_from_offset_zero_is_eproto)
{
	NEED_SERVER();
	struct http *h = mk(2, NULL);
	unsigned char *buf = xmalloc(500000);

	set_faults("/big.bin=truncate:100000,count=1\n"
		   "/big.bin=range-from-zero");
	cr_expect_eq(
		http_get_range(h, url("/big.bin"), NULL, 5000, 500000, buf),
		-EPROTO);
	cr_expect_eq(stats_of(h).errors_verify, 1);
	free(buf);
	http_free(h);
}

/* A resume answered honestly from 0 (206 "bytes 0-...") is refused, not
 * taken for the rest of the body. */
Test(http_resume, resume_restarted_at_zero_is_eproto)
{
	NEED_SERVER();
	struct http *h = mk(2, NULL);
	struct collect *c = collect_new();

	set_faults("/big.bin=truncate:100000,count=1\n"
		   "/big.bin=range-restart");
	cr_expect_eq(
		http_stream(h, url("/big.bin"), NULL, BIG_LEN, collect_sink, c),
		-EPROTO);
	cr_expect_leq(c->len, 100000);
	cr_expect_eq(stats_of(h).errors_verify, 1);
	collect_free(c);
	http_free(h);
}

/* A 200 to the resume is skipped to the next byte only when the bytes it
 * skips end as the ones delivered did: here the file is rewritten between
 * the two requests with its size and mtime (so its ETag) kept. */
Test(http_resume, full_body_to_a_resume_is_compared)
{
	NEED_SERVER();
	struct http *h = mk(2, NULL);
	struct collect *c = collect_new();

	c->swap_after = 100000; /* all the cut body: the server is done */
	set_faults("/big.bin=truncate:100000,count=1\n"
		   "/big.bin=ignore-range");
	cr_expect_eq(
		http_stream(h, url("/big.bin"), NULL, BIG_LEN, collect_sink, c),
		-EPROTO);
	cr_expect_leq(c->len, 100000);
	cr_expect(memcmp(c->buf, g_big, c->len) == 0, "delivered bytes differ");
	cr_expect_eq(stats_of(h).errors_verify, 1);
	collect_free(c);
	http_free(h);
	write_file(g_root, "big.bin", g_big, BIG_LEN);
}

/* Issue 21 finding 4: a server whose Content-Length (HEAD and GET) is longer
 * than the body it sends, keeping the connection open. The call fails, and
 * its reason says the body was short, not that something timed out. */
Test(http_resume, body_shorter_than_content_length_says_so)
{
	NEED_SERVER();
	struct http *h = mk(2, NULL);
	struct collect *c = collect_new();
	uint64_t size = 0;
	int rc;

	set_faults("/small.txt=long-length:100");
	cr_assert_eq(http_stat(h, url("/small.txt"), &size, NULL, 0), 0);
	cr_assert_eq(size, strlen(SMALL_TEXT) + 100);
	rc = http_stream(h, url("/small.txt"), NULL, size, collect_sink, c);
	cr_expect_eq(rc, -EPROTO, "got %d (%s)", rc, http_reason(rc));
	cr_expect(strstr(http_reason(rc), "shorter than") != NULL, "reason: %s",
		  http_reason(rc));
	cr_expect_eq(c->len, strlen(SMALL_TEXT));
	cr_expect_geq(stats_of(h).errors_verify, 1);
	collect_free(c);
	http_free(h);
}

Test(http_resume, wrong_expected_size_is_eproto)
{
	NEED_SERVER();
	struct http *h = mk(2, NULL);
	struct collect *c = collect_new();

	cr_expect_eq(http_stream(h, url("/big.bin"), NULL, BIG_LEN + 1,
				 collect_sink, c),
		     -EPROTO);
	cr_expect_eq(http_stream(h, url("/big.bin"), NULL, BIG_LEN - 1,
				 collect_sink, c),
		     -EPROTO);
	cr_expect_eq(c->len, 0);
	cr_expect_eq(stats_of(h).errors_verify, 2);
	cr_expect_eq(stats_of(h).retries, 0);
	collect_free(c);
	http_free(h);
}

/* Range reads of an object of known size: a reply for another size (its
 * Content-Range total) is refused even without an ETag; every request asks
 * for the bytes as stored. */
Test(http_resume, range_total_and_identity_encoding)
{
	NEED_SERVER();
	struct http *h = mk(1, NULL);
	unsigned char buf[100];
	char out[4096];

	cr_expect_eq(http_get_range_of(h, url("/big.bin"), NULL, BIG_LEN, 1000,
				       sizeof(buf), buf),
		     0);
	cr_expect(memcmp(buf, g_big + 1000, sizeof(buf)) == 0);
	cr_expect_eq(http_get_range_of(h, url("/big.bin"), NULL, BIG_LEN + 512,
				       1000, sizeof(buf), buf),
		     -EPROTO);
	cr_expect_eq(stats_of(h).errors_verify, 1);
	cr_assert_eq(ctl("GET", "/_last_headers", "", out, sizeof(out)), 200);
	cr_expect_not_null(strstr(out, "\"Accept-Encoding\": \"identity\""),
			   "%s", out);
	http_free(h);
}

/* ---- stalls ------------------------------------------------------------- */

/* The log of this test (Criterion runs each in its own process) in a file
 * of g_dir named after tag. */
static void log_to(const char *tag, char *path, size_t n)
{
	snprintf(path, n, "%s/%s.log", g_dir, tag);
	unlink(path);
	cr_assert_eq(log_set_file(path), 0);
}

static char *log_text(const char *path)
{
	char *text = NULL;
	size_t len;

	cr_assert_eq(file_read_all(path, 1 << 20, &text, &len), 0);
	return text;
}

/* A body that goes silent after 100000 bytes: curl's low-speed limit
 * (stall_timeout, 1 s) breaks it off and the call resumes there. Counted as
 * a stall and a resume, not a connection error, and logged in those words,
 * not libcurl's ("Timeout was reached"). */
Test(http_resume, silent_body_is_a_stall_not_a_connection_error)
{
	NEED_SERVER();
	struct http_opts o = {.connections = 4,
			      .retry_budget_s = 5,
			      .connect_timeout_s = 1,
			      .low_speed_time_s = 1,
			      .backoff_base_s = 0.01,
			      .rate_window_s = 3600};
	char err[256] = "", path[256];
	struct http *h = NULL;
	struct collect *c = collect_new();
	char *text;

	log_to("silent", path, sizeof(path));
	cr_assert_eq(http_open(&o, &h, err, sizeof(err)), 0, "%s", err);
	set_faults("/big.bin=stall-at:100000,count=1");
	cr_assert_eq(
		http_stream(h, url("/big.bin"), NULL, BIG_LEN, collect_sink, c),
		0);
	expect_big(c);
	cr_expect_eq(stats_of(h).errors_conn, 0);
	cr_expect_eq(stats_of(h).stalls, 1);
	cr_expect_eq(stats_of(h).resumes, 1);
	text = log_text(path);
	cr_expect(strstr(text, "no data for 1 s (stall_timeout), resuming at "
			       "byte 100000") != NULL,
		  "log: %s", text);
	cr_expect(strstr(text, "Timeout was reached") == NULL, "log: %s", text);
	free(text);
	collect_free(c);
	http_free(h);
}

/* A body at 20 KB/s on a link that should give 64 KiB/s (min_rate, over a
 * 1 s window): broken off by the rate floor and resumed at full speed.
 * Counted as a stall and a resume, not a connection error, and logged in
 * those words, not libcurl's ("Operation was aborted by an application
 * callback"). */
Test(http_resume, slow_body_is_a_stall_not_a_connection_error)
{
	NEED_SERVER();
	struct http_opts o = {.connections = 4,
			      .retry_budget_s = 5,
			      .connect_timeout_s = 1,
			      .backoff_base_s = 0.01,
			      .min_rate = 64 * 1024,
			      .rate_window_s = 1};
	char err[256] = "", path[256];
	struct http *h = NULL;
	struct collect *c = collect_new();
	char *text;

	log_to("slow", path, sizeof(path));
	cr_assert_eq(http_open(&o, &h, err, sizeof(err)), 0, "%s", err);
	set_faults("/big.bin=slow:20000,count=1");
	cr_assert_eq(
		http_stream(h, url("/big.bin"), NULL, BIG_LEN, collect_sink, c),
		0);
	expect_big(c);
	cr_expect_eq(stats_of(h).errors_conn, 0);
	cr_expect_eq(stats_of(h).stalls, 1);
	cr_expect_eq(stats_of(h).resumes, 1);
	text = log_text(path);
	cr_expect(strstr(text, "under min_rate") != NULL, "log: %s", text);
	cr_expect(strstr(text, ", resuming at byte ") != NULL, "log: %s", text);
	cr_expect(strstr(text, "aborted by an application callback") == NULL,
		  "log: %s", text);
	free(text);
	collect_free(c);
	http_free(h);
}
