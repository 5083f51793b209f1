/* store_format.c - the store's entry file format: layout, names and keys,
 * reading a file back and checking it, writing its footer.
 *
 * Entry file layout ("<dir>/shards/<16 hex of hash64(key)>.shard"):
 *   data        `size` bytes, the shard itself
 *   sums        nblocks x u32 LE, the checksum of each STORE_BLOCK of data:
 *               version 2, the low 32 bits of XXH3-64; version 1, zlib
 *               crc32 (enum store_sum)
 *   key         keylen bytes, "url|etag|size" (url without userinfo
 *               or query: see http_strip_secrets), no NUL
 *   tail        TAIL_SIZE bytes: magic[16] ("ECHOFS-STORE-2", or -1 for
 *               version 1; NUL padded), u64 size, u64 nblocks, u32 keylen,
 *               u32 crc32 of everything from the first block sum up to and
 *               including keylen (zlib crc32 in both versions).
 * The fixed tail sits at the very end so a file describes itself: it is read
 * from the end, checked, and the key compared before any byte is trusted. */
#include "cache/store/store_format.h"

#include "cache/store/store.h"
#include "common/util.h"
#include "fetch/net/http.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <xxhash.h>
#include <zlib.h>

#define MAGIC_V1 "ECHOFS-STORE-1"
#define MAGIC_V2 "ECHOFS-STORE-2"
#define MAGIC_LEN 16
#define TAIL_SIZE (MAGIC_LEN + 8 + 8 + 4 + 4)

uint32_t store_fmt_blocks(uint64_t size)
{
	uint64_t n = size / STORE_BLOCK + (size % STORE_BLOCK != 0);
	return n > UINT32_MAX ? UINT32_MAX : (uint32_t)n;
}

uint64_t store_fmt_footer_bytes(uint32_t nblocks, size_t keylen)
{
	return 4ULL * nblocks + keylen + TAIL_SIZE;
}

size_t store_fmt_block_len(uint64_t size, uint32_t b)
{
	uint64_t start = (uint64_t)b * STORE_BLOCK;
	uint64_t left = size - start;
	return left < STORE_BLOCK ? (size_t)left : STORE_BLOCK;
}

static void put_le(uint8_t *p, uint64_t v, int n)
{
	for (int i = 0; i < n; i++)
		p[i] = (uint8_t)(v >> (8 * i));
}

static uint64_t get_le(const uint8_t *p, int n)
{
	uint64_t v = 0;
	for (int i = n - 1; i >= 0; i--)
		v = (v << 8) | p[i];
	return v;
}

uint32_t store_fmt_crc(uint32_t crc, const void *p, size_t n)
{
	const uint8_t *b = p;
	/* zlib's crc32 takes a uInt length. */
	while (n > 0) {
		uInt chunk = n > (1u << 30) ? (1u << 30) : (uInt)n;
		crc = (uint32_t)crc32(crc, b, chunk);
		b += chunk;
		n -= chunk;
	}
	return crc;
}

uint32_t store_fmt_block_sum(enum store_sum kind, const void *p, size_t n)
{
	if (kind == STORE_SUM_CRC32)
		return store_fmt_crc((uint32_t)crc32(0, NULL, 0), p, n);
	return (uint32_t)XXH3_64bits(p, n);
}

ssize_t store_fmt_read_full(int fd, void *buf, size_t len, uint64_t off)
{
	size_t done = 0;
	while (done < len) {
		ssize_t r = pread(fd, (char *)buf + done, len - done,
				  (off_t)(off + done));
		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0)
			return -errno;
		if (r == 0)
			break;
		done += (size_t)r;
	}
	return (ssize_t)done;
}

int store_fmt_write_full(int fd, const void *buf, size_t len, uint64_t off)
{
	size_t done = 0;
	while (done < len) {
		ssize_t r = pwrite(fd, (const char *)buf + done, len - done,
				   (off_t)(off + done));
		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0)
			return -errno;
		if (r == 0)
			return -EIO;
		done += (size_t)r;
	}
	return 0;
}

/* The URL without userinfo or query: footers hold no credential, and a
 * mount with a new token finds the same entries. */
char *store_fmt_key(const char *url, const char *etag, uint64_t size)
{
	char *u = http_strip_secrets(url);
	size_t n = strlen(u) + strlen(etag ? etag : "") + 24;
	char *k = xmalloc(n);
	snprintf(k, n, "%s|%s|%" PRIu64, u, etag ? etag : "", size);
	free(u);
	return k;
}

static void name_for_key(const char *key, size_t keylen, char *name)
{
	snprintf(name, STORE_FMT_NAME_LEN + 1, "%016" PRIx64 ".shard",
		 hash64(key, keylen, 0));
}

void store_fmt_name(uint64_t h, char *name)
{
	snprintf(name, STORE_FMT_NAME_LEN + 1, "%016" PRIx64 ".shard", h);
}

bool store_fmt_is_entry_name(const char *n)
{
	if (strlen(n) != STORE_FMT_NAME_LEN || strcmp(n + 16, ".shard") != 0)
		return false;
	for (int i = 0; i < 16; i++)
		if (!((n[i] >= '0' && n[i] <= '9') ||
		      (n[i] >= 'a' && n[i] <= 'f')))
			return false;
	return true;
}

/* Open an entry file for reading without touching its atime (which records
 * when it was written). O_NOATIME needs ownership; fall back without it. */
int store_fmt_open(int dirfd, const char *name)
{
	int fd = openat(dirfd, name,
			O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NOATIME);
	if (fd < 0 && errno == EPERM)
		fd = openat(dirfd, name, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
	return fd;
}

/* Check the tail and footer of an open entry file. Returns the block crcs
 * (malloc'd) and the key, or NULL when the file is not a valid entry. */
uint32_t *store_fmt_read_footer(int fd, uint64_t fsize, const char *name,
				uint64_t *size, char **key,
				enum store_sum *kind)
{
	uint8_t tail[TAIL_SIZE], *foot = NULL;
	uint32_t *crcs = NULL;
	uint64_t nb, klen, flen;
	char want[STORE_FMT_NAME_LEN + 1];

	if (fsize < TAIL_SIZE ||
	    store_fmt_read_full(fd, tail, TAIL_SIZE, fsize - TAIL_SIZE) !=
		    TAIL_SIZE)
		return NULL;
	if (memcmp(tail, MAGIC_V2, sizeof(MAGIC_V2)) == 0)
		*kind = STORE_SUM_XXH3;
	else if (memcmp(tail, MAGIC_V1, sizeof(MAGIC_V1)) == 0)
		*kind = STORE_SUM_CRC32;
	else
		return NULL;
	*size = get_le(tail + MAGIC_LEN, 8);
	nb = get_le(tail + MAGIC_LEN + 8, 8);
	klen = get_le(tail + MAGIC_LEN + 16, 4);
	if (klen == 0 || klen > STORE_FMT_KEY_MAX || *size > fsize ||
	    nb != store_fmt_blocks(*size))
		return NULL;
	flen = 4 * nb + klen;
	if (fsize != *size + flen + TAIL_SIZE || !(foot = malloc(flen)))
		return NULL;
	if (store_fmt_read_full(fd, foot, flen, *size) != (ssize_t)flen ||
	    store_fmt_crc(store_fmt_crc(0, foot, flen), tail, TAIL_SIZE - 4) !=
		    get_le(tail + TAIL_SIZE - 4, 4))
		goto out;
	name_for_key((const char *)foot + 4 * nb, klen, want);
	if (memchr(foot + 4 * nb, 0, klen) || strcmp(want, name) != 0)
		goto out;
	crcs = xmalloc(nb ? 4 * nb : 1);
	for (uint64_t i = 0; i < nb; i++)
		crcs[i] = (uint32_t)get_le(foot + 4 * i, 4);
	*key = xstrndup((const char *)foot + 4 * nb, klen);
out:
	free(foot);
	return crcs;
}

int store_fmt_write_footer(int fd, const char *key, uint64_t size,
			   uint32_t nblocks, const uint32_t *sums,
			   enum store_sum kind)
{
	const char *magic = kind == STORE_SUM_CRC32 ? MAGIC_V1 : MAGIC_V2;
	size_t klen = strlen(key);
	size_t flen = (size_t)store_fmt_footer_bytes(nblocks, klen);
	uint8_t *f = malloc(flen), *t;
	int r;

	if (!f)
		return -ENOMEM;
	for (uint32_t i = 0; i < nblocks; i++)
		put_le(f + 4 * (size_t)i, sums[i], 4);
	memcpy(f + 4 * (size_t)nblocks, key, klen);
	t = f + flen - TAIL_SIZE;
	memset(t, 0, MAGIC_LEN);
	memcpy(t, magic, strlen(magic) + 1);
	put_le(t + MAGIC_LEN, size, 8);
	put_le(t + MAGIC_LEN + 8, nblocks, 8);
	put_le(t + MAGIC_LEN + 16, klen, 4);
	put_le(t + TAIL_SIZE - 4, store_fmt_crc(0, f, flen - 4), 4);
	r = store_fmt_write_full(fd, f, flen, size);
	free(f);
	return r;
}
