/* pack_tar.c - ustar headers for the packer (see pack_tar.h). */
#include "tools/pack_tar.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

/* Octal field of width w: w-1 zero-padded digits and a NUL. */
static void octal(char *field, size_t w, uint64_t v)
{
	char tmp[32];

	snprintf(tmp, sizeof(tmp), "%0*llo", (int)(w - 1),
		 (unsigned long long)v);
	memcpy(field, tmp, w - 1);
	field[w - 1] = '\0';
}

/* Where name splits into prefix '/' rest: the last '/' that leaves a
 * prefix of at most 155 bytes and a rest of at most 100; 0 if none. */
static size_t split_at(const char *name, size_t len)
{
	for (size_t i = len < 156 ? len : 156; i-- > 0;)
		if (name[i] == '/' && i > 0 && len - i - 1 <= 100 &&
		    len - i - 1 > 0)
			return i;
	return 0;
}

int pack_tar_header(uint8_t blk[PACK_TAR_BLOCK], const char *name,
		    uint64_t size)
{
	char *h = (char *)blk;
	size_t len = strlen(name), cut = 0;
	unsigned sum = 0;

	if (size > PACK_TAR_SIZE_MAX)
		return -EFBIG;
	if (len == 0)
		return -ENAMETOOLONG;
	if (len > 100 && (cut = split_at(name, len)) == 0)
		return -ENAMETOOLONG;
	memset(blk, 0, PACK_TAR_BLOCK);
	if (cut) {
		memcpy(h + 345, name, cut); /* prefix */
		memcpy(h, name + cut + 1, len - cut - 1);
	} else {
		memcpy(h, name, len);
	}
	octal(h + 100, 8, 0644);
	octal(h + 108, 8, 0);
	octal(h + 116, 8, 0);
	octal(h + 124, 12, size);
	octal(h + 136, 12, PACK_TAR_MTIME);
	h[156] = '0';
	memcpy(h + 257, "ustar", 6); /* magic "ustar\0" */
	memcpy(h + 263, "00", 2);
	memset(h + 148, ' ', 8); /* the checksum counts itself as spaces */
	for (int i = 0; i < PACK_TAR_BLOCK; i++)
		sum += blk[i];
	snprintf(h + 148, 8, "%06o", sum); /* six digits, NUL, then space */
	h[155] = ' ';
	return 0;
}
