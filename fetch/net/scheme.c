/* scheme.c - which transport a URL needs (see scheme.h). */
#include "fetch/net/scheme.h"

#include "fetch/net/bucket.h"
#include "fetch/net/shardlist.h"

#include <stdio.h>
#include <string.h>
#include <strings.h>

enum fetch_scheme fetch_scheme_of(const char *url)
{
	const struct bucket_ops *b;

	if (!url)
		return FETCH_SCHEME_FILE;
	if (fetch_has_scheme(url, "http") || fetch_has_scheme(url, "https"))
		return FETCH_SCHEME_HTTP;
	b = bucket_of(url);
	if (b && b->is_url(url))
		return FETCH_SCHEME_BUCKET;
	return strstr(url, "://") ? FETCH_SCHEME_OTHER : FETCH_SCHEME_FILE;
}

int fetch_has_scheme(const char *url, const char *scheme)
{
	size_t n = strlen(scheme);

	return url && strncasecmp(url, scheme, n) == 0 &&
	       strncmp(url + n, "://", 3) == 0;
}

int fetch_source_has(const char *source, const char *scheme)
{
	char prefix[40];

	if (fetch_has_scheme(source, scheme))
		return 1;
	if (fetch_scheme_of(source) != FETCH_SCHEME_FILE ||
	    snprintf(prefix, sizeof(prefix), "%s://", scheme) >=
		    (int)sizeof(prefix))
		return 0;
	return shardlist_file_has(source, prefix);
}

const char *fetch_url_authority(const char *url)
{
	const char *sep = strstr(url, "://");

	return sep ? sep + 3 : url;
}
