/* fuzz_index_bin.c - libFuzzer target for the binary index's loader
 * (index_bin_open_mem): any input is accepted or refused with -EBADMSG and
 * one "binary index: ..." line, never a crash or a read outside it.
 * Whatever is accepted copies into an index that writes back to a binary
 * index that loads again to the same text; its tree reads in place
 * (every class and file found again by its name).
 *
 * The first input byte is an option: odd, the target first repairs the
 * checksums of the rest (each section's that lies within the input, then
 * the header's), so mutations reach the checks behind them instead of
 * stopping at a checksum mismatch. */
#include "fetch/format/index.h"
#include "fetch/format/index_bin_int.h"

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

static void repair_sums(unsigned char *p, size_t len)
{
	struct ibin_header h;

	if (len < sizeof(h))
		return;
	memcpy(&h, p, sizeof(h));
	for (int i = 0; i < IBIN_NSECTIONS; i++) {
		const struct ibin_section *s = &h.sec[i];
		if (s->offset <= len && s->size <= len - s->offset)
			h.sec[i].sum = XXH3_64bits(p + s->offset, s->size);
	}
	h.header_sum =
		XXH3_64bits(&h, offsetof(struct ibin_header, header_sum));
	memcpy(p, &h, sizeof(h));
}

static char *text_of(const struct index *ix, size_t *len)
{
	char *buf = NULL;
	FILE *f = open_memstream(&buf, len);

	if (!f || index_write(ix, f))
		abort();
	fclose(f);
	return buf;
}

static void read_tree(const struct index_bin *b)
{
	size_t n;
	uint32_t s;

	for (size_t c = 0; c < index_bin_nclasses(b); c++) {
		const char *name = index_bin_class_name(b, c, &n);
		if (index_bin_find_class(b, name) != (int64_t)c)
			abort();
		for (size_t i = 0; i < n; i++) {
			const char *f = index_bin_file(b, c, i, &s);
			if (s >= index_bin_nsamples(b) ||
			    index_bin_find_file(b, c, f) != (int64_t)i)
				abort();
		}
	}
}

/* ix written in binary and loaded again gives the same text. */
static void rewrite(const struct index *ix)
{
	FILE *f = tmpfile();
	struct index *again;
	char err[256], *buf, *t1, *t2;
	size_t len, l1, l2;

	if (!f || index_bin_write(ix, f))
		abort();
	len = (size_t)ftello(f);
	buf = malloc(len);
	if (fseeko(f, 0, SEEK_SET) || fread(buf, 1, len, f) != len)
		abort();
	fclose(f);
	if (index_parse(buf, len, &again, err, sizeof(err)))
		abort();
	t1 = text_of(ix, &l1);
	t2 = text_of(again, &l2);
	if (l1 != l2 || memcmp(t1, t2, l1))
		abort();
	free(t1);
	free(t2);
	free(buf);
	index_free(again);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct index_bin *b;
	struct index *ix;
	unsigned char *p;
	char err[256];
	int r;

	if (size < 1)
		return 0;
	/* an exact-size copy: ASan catches any read past the input */
	p = malloc(size - 1 ? size - 1 : 1);
	memcpy(p, data + 1, size - 1);
	if (data[0] & 1)
		repair_sums(p, size - 1);
	r = index_bin_open_mem(p, size - 1, &b, err, sizeof(err));
	if (r) {
		if (r != -EBADMSG || b || strncmp(err, "binary index: ", 14) ||
		    strchr(err, '\n'))
			abort();
		free(p);
		return 0;
	}
	read_tree(b);
	r = index_bin_to_index(b, &ix, err, sizeof(err));
	if (r != 0 && r != -EBADMSG)
		abort();
	if (!r) {
		rewrite(ix);
		index_free(ix);
	}
	index_bin_close(b);
	free(p);
	return 0;
}
