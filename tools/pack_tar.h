/* pack_tar.h - ustar headers for the packer: one regular file member,
 * its name split into prefix and name when longer than 100 bytes. */
#ifndef ECHOFS_PACK_TAR_H
#define ECHOFS_PACK_TAR_H

#include <stddef.h>
#include <stdint.h>

#define PACK_TAR_BLOCK 512
/* Fixed member mtime (2020-01-01T00:00:00Z): output is reproducible. */
#define PACK_TAR_MTIME 1577836800u
/* The largest member size an octal size field of 11 digits holds. */
#define PACK_TAR_SIZE_MAX 077777777777ull

/* Fill blk with the header of a regular file called name (mode 0644, uid
 * and gid 0, fixed mtime). Returns 0, or -ENAMETOOLONG when name fits
 * neither the 100-byte name field nor a split at a '/' into a prefix of
 * at most 155 bytes and a name of at most 100, or -EFBIG past
 * PACK_TAR_SIZE_MAX. */
int pack_tar_header(uint8_t blk[PACK_TAR_BLOCK], const char *name,
		    uint64_t size);

/* Bytes a member of size bytes takes: header plus data padded to a
 * block. */
static inline uint64_t pack_tar_member_bytes(uint64_t size)
{
	return PACK_TAR_BLOCK +
	       (size + PACK_TAR_BLOCK - 1) / PACK_TAR_BLOCK * PACK_TAR_BLOCK;
}

#endif
