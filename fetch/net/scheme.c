/* scheme.c - which transport a URL needs (see scheme.h). */
#include "fetch/net/scheme.h"

#include "fetch/net/gcs.h"
#include "fetch/net/s3.h"
#include "fetch/net/shardlist.h"

#include <string.h>
#include <strings.h>

enum fetch_scheme fetch_scheme_of(const char *url)
{
	if (!url)
		return FETCH_SCHEME_FILE;
	if (strncasecmp(url, "http://", 7) == 0 ||
	    strncasecmp(url, "https://", 8) == 0)
		return FETCH_SCHEME_HTTP;
	if (s3_is_url(url))
		return FETCH_SCHEME_S3;
	if (gcs_is_url(url))
		return FETCH_SCHEME_GS;
	return strstr(url, "://") ? FETCH_SCHEME_OTHER : FETCH_SCHEME_FILE;
}

int fetch_source_has(const char *source, enum fetch_scheme s)
{
	static const char *const prefix[] = {
		[FETCH_SCHEME_HTTP] = "http", /* http:// and https:// */
		[FETCH_SCHEME_S3] = "s3://",
		[FETCH_SCHEME_GS] = "gs://",
	};
	enum fetch_scheme own = fetch_scheme_of(source);

	if (own == s)
		return 1;
	if (own != FETCH_SCHEME_FILE || s >= sizeof(prefix) / sizeof(*prefix) ||
	    !prefix[s])
		return 0;
	return shardlist_file_has(source, prefix[s]);
}

const char *fetch_url_authority(const char *url)
{
	const char *sep = strstr(url, "://");

	return sep ? sep + 3 : url;
}
