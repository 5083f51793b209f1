/* test_http_part.c - http_get_part, the range read of demand-first reads,
 * against tests/fault_server.py: the bytes of a range, a refusal (200 with
 * the whole object, or 416) as -ERANGE before the body is taken, and the
 * response header bytes counted. */
#include "fetch/net/http.h"

#include "common/util.h"
#include "fixtures.h"
#include "http_fx.h"

#include <criterion/criterion.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

TestSuite(http_part, .init = http_fx_setup, .fini = http_fx_teardown,
	  .timeout = 30);

Test(http_part, range_bytes_and_headers_counted)
{
	NEED_SERVER();
	struct http *h = mk(2, NULL);
	unsigned char buf[700];
	struct http_stats s;

	cr_assert_eq(http_get_part(h, url("/big.bin"), NULL, BIG_LEN, 123456,
				   sizeof(buf), buf),
		     0);
	cr_expect(memcmp(buf, g_big + 123456, sizeof(buf)) == 0);
	s = stats_of(h);
	cr_expect_eq(s.bytes, sizeof(buf));
	/* a status line and a few headers: more than nothing, far less than
	 * a body */
	cr_expect(s.header_bytes > 60 && s.header_bytes < 2000, "%llu",
		  (unsigned long long)s.header_bytes);
	http_free(h);
}

/* A server that ignores Range: http_get_range_of reads the object up to
 * the range's end; http_get_part stops at the headers. */
Test(http_part, ignored_range_is_erange_without_the_body)
{
	NEED_SERVER();
	struct http *h = mk(2, NULL);
	unsigned char *buf = xmalloc(5000);

	set_faults("/big.bin=ignore-range");
	cr_assert_eq(http_get_part(h, url("/big.bin"), NULL, BIG_LEN, 2000000,
				   5000, buf),
		     -ERANGE);
	cr_expect(stats_of(h).bytes < 1000000,
		  "%llu body bytes taken for a refused range",
		  (unsigned long long)stats_of(h).bytes);
	cr_expect_eq(stats_of(h).requests, 1, "a refusal is not retried");
	cr_expect_str_eq(http_reason(-ERANGE),
			 "the server refuses ranges (answered a range with "
			 "the whole object or 416)");
	/* the lenient call still serves it */
	cr_assert_eq(http_get_range_of(h, url("/big.bin"), NULL, BIG_LEN,
				       2000000, 5000, buf),
		     0);
	cr_expect(memcmp(buf, g_big + 2000000, 5000) == 0);
	set_faults("");
	free(buf);
	http_free(h);
}

Test(http_part, status_416_is_erange)
{
	NEED_SERVER();
	struct http *h = mk(2, NULL);
	unsigned char buf[64];

	set_faults("/big.bin=status:416");
	cr_expect_eq(http_get_part(h, url("/big.bin"), NULL, BIG_LEN, 10,
				   sizeof(buf), buf),
		     -ERANGE);
	set_faults("");
	http_free(h);
}
