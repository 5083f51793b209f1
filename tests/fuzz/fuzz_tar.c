/* fuzz_tar.c - libFuzzer target for the tar parser and the WebDataset
 * scanner: any input gives 0 or a negative errno, never a crash; the result
 * does not depend on how the bytes are chunked; accepted names are safe. */
#include "fetch/format/index.h"
#include "fetch/format/scan.h"
#include "fetch/format/tar.h"

#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "common/util.h"

struct trace {
	uint64_t hash; /* over every entry field, in order */
	uint64_t entries;
	uint64_t end; /* bytes fed */
};

static void check_entry(const struct tar_entry *e, uint64_t end)
{
	size_t len = strlen(e->name);

	if (len > TAR_NAME_MAX || e->data_offset % 512 || e->data_offset > end)
		abort();
	if (e->small_data && (e->reject || e->size > TAR_SMALL_MAX))
		abort();
	if (e->reject)
		return;
	/* Accepted names: relative, no "..", "." or empty component. */
	if (len == 0 || e->name[0] == '/' || strstr(e->name, "//") ||
	    strcmp(e->name, "..") == 0 || strncmp(e->name, "../", 3) == 0 ||
	    strstr(e->name, "/../") || strstr(e->name, "/./") ||
	    (len >= 3 && strcmp(e->name + len - 3, "/..") == 0))
		abort();
	for (size_t i = 0; i < len; i++)
		if ((unsigned char)e->name[i] < 0x20 || e->name[i] == 0x7f)
			abort();
}

static int on_entry(void *ud, const struct tar_entry *e)
{
	struct trace *t = ud;
	uint64_t h = t->hash;

	check_entry(e, t->end);
	h = hash64(e->name, strlen(e->name), h);
	h = hash64(&e->type, 1, h);
	h = hash64(&e->data_offset, sizeof(e->data_offset), h);
	h = hash64(&e->size, sizeof(e->size), h);
	if (e->reject)
		h = hash64(e->reject, strlen(e->reject), h);
	if (e->small_data)
		h = hash64(e->small_data, (size_t)e->size, h);
	t->hash = h;
	t->entries++;
	return 0;
}

static int run(const uint8_t *d, size_t n, size_t chunk, struct trace *t)
{
	struct tar_parser *p = tar_parser_new(on_entry, t);
	int r = 0;

	for (size_t off = 0; off < n && !r; off += chunk) {
		size_t k = n - off < chunk ? n - off : chunk;
		t->end = off + k;
		r = tar_parser_feed(p, d + off, k);
	}
	if (!r)
		r = tar_parser_finish(p);
	if (r && r != -EBADMSG)
		abort();
	if (tar_parser_error(p)[0] == '\0' && r)
		abort();
	tar_parser_free(p);
	return r;
}

static void run_scan(const uint8_t *d, size_t n)
{
	struct index *ix = index_new();
	struct scan *s;
	int r;

	index_add_shard(ix, "http://h/s.tar", n, "");
	s = scan_new(ix, 0);
	r = scan_feed(s, d, n);
	if (!r)
		r = scan_finish(s);
	if (r && r != -EBADMSG)
		abort();
	for (size_t i = 0; i < ix->nsamples; i++) {
		const struct index_sample *x = &ix->samples[i];
		if (x->offset + x->size > n || !index_label(ix, x)[0] ||
		    !index_key(ix, x)[0])
			abort();
	}
	scan_free(s);
	index_free(ix);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct trace whole = {0}, split = {0};
	size_t chunk;
	int a, b;

	if (size < 1)
		return 0;
	/* The first byte picks a chunk size for the second run. */
	chunk = 1 + (size_t)data[0] * 3;
	data++;
	size--;
	a = run(data, size, size ? size : 1, &whole);
	b = run(data, size, chunk, &split);
	if (a != b || whole.hash != split.hash ||
	    whole.entries != split.entries)
		abort();
	run_scan(data, size);
	return 0;
}
