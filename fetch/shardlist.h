/* shardlist.h - the list of shard URLs: bash-style brace ranges
 * ("train-{000000..000059}.tar", "{a,b}") and list files (one URL a line). */
#ifndef ECHOFS_SHARDLIST_H
#define ECHOFS_SHARDLIST_H

#include <stddef.h>

struct shardlist {
	char **urls; /* owned */
	size_t n;
};

/* Expand every brace group of pattern (numeric ranges keep the zero padding
 * of the wider bound; comma lists; groups may repeat, not nest). At most
 * max_urls results. Returns 0, -EINVAL on a malformed group, -E2BIG past
 * max_urls. out is filled; free with shardlist_clear. */
int shardlist_expand(const char *pattern, size_t max_urls,
		     struct shardlist *out);

/* Parse a list file's text: one URL a line; blank lines and lines starting
 * with '#' ignored; surrounding whitespace trimmed; each line may itself hold
 * brace groups. Returns 0 or -EINVAL (with the 1-based line in *bad_line). */
int shardlist_parse(const char *text, size_t len, size_t max_urls,
		    struct shardlist *out, size_t *bad_line);

void shardlist_clear(struct shardlist *l);

/* 1 if s looks like an http:// or https:// URL (case-insensitive scheme). */
int shardlist_is_url(const char *s);

#endif
