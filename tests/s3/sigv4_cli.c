/* sigv4_cli.c - signs requests described on stdin with echofs's SigV4 signer,
 * for the differential test against botocore (tests/integration/
 * test_sigv4_diff.py).
 *
 * Input: one request a line, fields separated by tabs:
 *   METHOD URL REGION AMZDATE ACCESS_KEY SECRET TOKEN [NAME VALUE]...
 * (TOKEN may be empty). Output: one line per request, the Authorization
 * header value, or "ERROR <errno>". */
#include "fetch/net/sigv4.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define LINE_MAX_LEN (64 * 1024)
#define FIELDS_MAX (7 + 2 * SIGV4_MAX_HEADERS)

/* Splits line in place on tabs; returns the number of fields. */
static size_t split(char *line, char **f, size_t max)
{
	size_t n = 0;

	line[strcspn(line, "\r\n")] = '\0';
	while (n < max) {
		f[n++] = line;
		line = strchr(line, '\t');
		if (!line)
			break;
		*line++ = '\0';
	}
	return n;
}

static void sign_line(char *line)
{
	char *f[FIELDS_MAX + 1];
	struct sigv4_header h[SIGV4_MAX_HEADERS];
	size_t n = split(line, f, FIELDS_MAX + 1);
	struct sigv4_creds c;
	struct sigv4_req r = {0};
	struct sigv4_result res;
	int rc;

	if (n < 7 || n > FIELDS_MAX || (n - 7) % 2) {
		printf("ERROR 22\n");
		return;
	}
	r.method = f[0];
	r.url = f[1];
	r.region = f[2];
	r.amz_date = f[3];
	c.access_key = f[4];
	c.secret_key = f[5];
	c.token = f[6];
	for (size_t i = 7; i + 1 < n; i += 2) {
		h[r.nheaders].name = f[i];
		h[r.nheaders].value = f[i + 1];
		r.nheaders++;
	}
	r.headers = h;
	rc = sigv4_sign(&r, &c, &res);
	if (rc)
		printf("ERROR %d\n", -rc);
	else
		printf("%s\n", res.authorization);
}

int main(void)
{
	char *line = malloc(LINE_MAX_LEN);

	if (!line)
		return 1;
	while (fgets(line, LINE_MAX_LEN, stdin))
		sign_line(line);
	free(line);
	return 0;
}
