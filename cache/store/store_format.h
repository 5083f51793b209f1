/* store_format.h - the store's entry file format: where a shard's bytes,
 * block checksums and key sit in "<dir>/shards/<16 hex>.shard", how a file
 * is read back and checked, and how names and keys are made (layout in
 * store_format.c). No state, no locks: callers hold what they need. */
#ifndef ECHOFS_STORE_FORMAT_H
#define ECHOFS_STORE_FORMAT_H

#include "common/attrs.h"
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#define STORE_FMT_KEY_MAX 16384
#define STORE_FMT_NAME_LEN 22 /* 16 hex digits + ".shard" */

/* Blocks of STORE_BLOCK bytes for `size` data bytes (UINT32_MAX: too many).
 */
uint32_t store_fmt_blocks(uint64_t size);
/* Bytes after the data: block crcs, key and the fixed tail. */
uint64_t store_fmt_footer_bytes(uint32_t nblocks, size_t keylen);
/* Data bytes in block b of an entry of `size` bytes. */
size_t store_fmt_block_len(uint64_t size, uint32_t b);
/* zlib's crc32 over any length (the tail's own checksum, and the block
 * checksum of version-1 files). */
uint32_t store_fmt_crc(uint32_t crc, const void *p, size_t n);
/* How an entry file checksums its blocks: version 1 (ECHOFS-STORE-1) with
 * zlib's crc32, version 2 (ECHOFS-STORE-2, every file written now) with
 * the low 32 bits of XXH3-64, about 10x faster to check (perf showed crc32
 * at 27% of a prepared-tier pass). Files of both versions are read. */
enum store_sum { STORE_SUM_CRC32 = 1, STORE_SUM_XXH3 = 2 };
/* The checksum of one whole block of n bytes under `kind`. */
uint32_t store_fmt_block_sum(enum store_sum kind, const void *p, size_t n);
/* pread / pwrite until done (EINTR retried). read: bytes read (short at
 * end of file) or -errno; write: 0 or -errno. */
MUST_CHECK
ssize_t store_fmt_read_full(int fd, void *buf, size_t len, uint64_t off);
int store_fmt_write_full(int fd, const void *buf, size_t len, uint64_t off);
/* The key of (url, etag, size): "url|etag|size", the URL without userinfo
 * or query. Caller frees. */
char *store_fmt_key(const char *url, const char *etag, uint64_t size);
/* The file name of the entry whose key hashes to h (hash64 of the key),
 * into name[STORE_FMT_NAME_LEN + 1]. */
void store_fmt_name(uint64_t h, char *name);
/* Is n named like an entry file? */
bool store_fmt_is_entry_name(const char *n);
/* Open entry file `name` under dirfd to read it, without moving its atime
 * (when it was written) where the kernel allows. A descriptor or -1 with
 * errno set. */
MUST_CHECK
int store_fmt_open(int dirfd, const char *name);
/* Check the tail and footer of an open entry file of fsize bytes named
 * `name`. Returns the block checksums (malloc'd) with *size, *key
 * (malloc'd) and *kind (the file's version) set, or NULL when the file is
 * not a valid entry of that name. */
uint32_t *store_fmt_read_footer(int fd, uint64_t fsize, const char *name,
				uint64_t *size, char **key,
				enum store_sum *kind);
/* Write the footer of an entry (block checksums of `kind`, key, tail)
 * after its `size` data bytes. The store writes STORE_SUM_XXH3 only; tests
 * write version 1 to check that it is still read. Returns 0 or -errno. */
MUST_CHECK
int store_fmt_write_footer(int fd, const char *key, uint64_t size,
			   uint32_t nblocks, const uint32_t *sums,
			   enum store_sum kind);

#endif
