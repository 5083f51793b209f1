/* fuzz_s3_xml.c - libFuzzer target for the XML that S3, GCS and STS send
 * back (untrusted bytes): xml_tag_copy and xml_tag_text (error bodies,
 * credentials), and one ListObjectsV2 page read by s3_list.c. The first
 * input byte picks the listing source, the rest is the body.
 * Checks: only the documented errnos; a copied tag fits its buffer and is
 * NUL-terminated, a text tag holds no control byte; a page gives 0,
 * -EPROTO or -E2BIG, keeps the key limit, lists only s3://BUCKET/PREFIX...
 * URLs, and its continuation token is a string within TOKEN_MAX. */

/* The page reader is static to s3_list.c and not worth a public API of its
 * own: the file is compiled into this target instead of linked. */
#include "../../fetch/net/s3_list.c"

#include "fetch/net/xml_tag.h"

#include <stdint.h>

#define FUZZ_MAX_KEYS 64

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check_tags(const char *body)
{
	static const char *const tags[] = {"Code",	  "Message",
					   "AccessKeyId", "SessionToken",
					   "Expiration",  "a"};
	char out[32];

	for (size_t i = 0; i < ARRAY_SIZE(tags); i++) {
		int rc = xml_tag_copy(body, tags[i], out, sizeof(out));
		if (rc != 0 && rc != -ENOENT && rc != -EINVAL &&
		    rc != -ENAMETOOLONG)
			abort();
		if (memchr(out, '\0', sizeof(out)) == NULL)
			abort();
		if (rc != 0 && out[0])
			abort(); /* out is "" on failure */
		rc = xml_tag_text(body, tags[i], out, sizeof(out));
		if (rc != 0 && rc != -ENOENT && rc != -EINVAL)
			abort();
		for (const char *p = out; *p; p++)
			if ((unsigned char)*p < 0x20 || *p == 0x7f)
				abort();
	}
}

static void check_page(const char *body, size_t len, const char *source)
{
	struct listing l = {0};
	struct shardlist out = {0};
	char *token = malloc(TOKEN_MAX);
	char want[sizeof(l.bucket) + sizeof(l.prefix) + 8];
	size_t skipped = 0; /* keys the tree cannot show */
	int rc;

	if (!token || parse_source(source, &l))
		abort();
	snprintf(want, sizeof(want), "s3://%s/%s", l.bucket, l.prefix);
	rc = read_page(body, len, &l, FUZZ_MAX_KEYS, &out, token, &skipped);
	if (rc != 0 && rc != -EPROTO && rc != -E2BIG)
		abort();
	if (out.n > FUZZ_MAX_KEYS)
		abort();
	for (size_t i = 0; i < out.n; i++)
		if (strncmp(out.urls[i], want, strlen(want)) != 0 ||
		    strlen(out.urls[i]) > strlen(want) + KEY_MAX)
			abort();
	if (rc == 0 && memchr(token, '\0', TOKEN_MAX) == NULL)
		abort();
	shardlist_clear(&out);
	free(token);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static const char *const sources[] = {"s3://b/", "s3://b/p/",
					      "s3://b/p/*.tar",
					      "s3://b/train-[0-9]*"};
	char *text, *exact;

	if (size < 1)
		return 0;
	log_set_level(LOG_LEVEL_ERROR); /* skipped keys warn: not news here */
	/* NUL-terminated for the tag reader; exactly the body, no NUL, for
	 * the page reader (http_get_all's length is what it may read). */
	text = malloc(size);
	exact = malloc(size > 1 ? size - 1 : 1);
	if (!text || !exact)
		abort();
	memcpy(text, data + 1, size - 1);
	text[size - 1] = '\0';
	memcpy(exact, data + 1, size - 1);
	check_tags(text);
	check_page(exact, size - 1, sources[data[0] % ARRAY_SIZE(sources)]);
	free(exact);
	free(text);
	return 0;
}
