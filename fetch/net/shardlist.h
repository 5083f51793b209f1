/* shardlist.h - the list of shard URLs: bash-style brace ranges
 * ("train-{000000..000059}.tar", "{a,b}") and list files (one URL a line). */
#ifndef ECHOFS_SHARDLIST_H
#define ECHOFS_SHARDLIST_H

#include <stddef.h>

struct shardlist {
	char **urls; /* owned */
	size_t n;
};

/* Expand every brace group of pattern, as bash does: numeric ranges
 * "{A..B}" of unsigned decimals, ascending or descending ("{3..1}" gives 3 2
 * 1); when either bound is written with a leading zero ("{000..059}",
 * "{8..010}") every value is zero-padded to the wider bound's width. Comma
 * lists "{a,b,}" (empty items allowed). Groups may repeat (at most 16), not
 * nest; the right-most group varies fastest. No letter ranges or steps.
 * At most max_urls results (and never more than 2^24). Returns 0, -EINVAL on
 * a malformed group (unclosed, stray '}', empty, nested, neither list nor
 * range, overflow) or a pattern over 4096 bytes, -E2BIG past max_urls.
 * out is overwritten (not freed first); on error it is left empty. Free with
 * shardlist_clear. */
int shardlist_expand(const char *pattern, size_t max_urls,
		     struct shardlist *out);

/* Parse a list file's text (len bytes, need not be NUL-terminated): one URL
 * a line, LF or CRLF; blank lines and lines starting with '#' ignored;
 * surrounding spaces and tabs trimmed; a line with inner whitespace or
 * control characters (NUL included) is -EINVAL; each line may itself hold
 * brace groups. max_urls bounds the total. Returns 0, -EINVAL or -E2BIG with
 * the 1-based line in *bad_line (0 on success; bad_line may be NULL). On
 * error out is left empty. */
int shardlist_parse(const char *text, size_t len, size_t max_urls,
		    struct shardlist *out, size_t *bad_line);

void shardlist_clear(struct shardlist *l);

/* url in a form equal for two spellings of one http(s) resource (RFC 3986
 * section 6.2.2 and 6.2.3), for comparing list entries, never for
 * fetching: scheme and host lower case; percent-encoded unreserved
 * characters decoded ("%30" is "0") and the other encodings' hex upper
 * case; dot segments removed from the path ("/./", "/a/../"); an empty
 * path "/"; a default port (80, 443) or an empty one dropped. Userinfo,
 * query and fragment keep their case. Other schemes get a lower-case
 * scheme only: an s3:// or gs:// path is an object key, whose "./" and
 * "%30" are bytes of its name. Caller frees. */
char *shardlist_normalise(const char *url);

/* 1 if s looks like an http:// or https:// URL (case-insensitive scheme)
 * with something after the "//" that is not another '/', or a URL of a
 * registered bucket backend (s3://, gs://: fetch/net/bucket.h) with a valid
 * bucket name; 0 otherwise and for NULL. */
int shardlist_is_url(const char *s);

/* 1 if path is a local shard list file (not a URL) with a line starting
 * with scheme (e.g. "gs://"), so a mount of it needs that scheme's hooks;
 * 0 otherwise (NULL, unreadable). */
int shardlist_file_has(const char *path, const char *scheme);

#endif
