/* store_fx.h - helpers the store suites share (store_fx.c): a scratch
 * directory, entries whose bytes follow a seed, the shards directory. */
#ifndef ECHOFS_TESTS_STORE_FX_H
#define ECHOFS_TESTS_STORE_FX_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

struct store;
struct store_entry;

/* The test's scratch directory (the store's root), made by store_fx_setup. */
extern char tdir[64];

/* Suite init and fini: a new tdir; tdir removed (and a tmpfs a failed test
 * left mounted at tdir/m detached). */
void store_fx_setup(void);
void store_fx_teardown(void);

/* Byte i of the pattern for seed; n of them from offset off into b. */
uint8_t pat(unsigned seed, uint64_t i);
void fill(uint8_t *b, size_t n, unsigned seed, uint64_t off);

/* Writes a whole entry (seed's pattern) in uneven chunks; returns it pinned,
 * or NULL with errno set to why. */
struct store_entry *add(struct store *s, const char *url, const char *etag,
			uint64_t size, unsigned seed);
/* add with ETag "e", then unpinned; fails the test when it fails. */
void add_put(struct store *s, const char *url, uint64_t size, unsigned seed);
/* store_pread of len bytes at off answers want, and the bytes are seed's. */
void check_range(struct store_entry *e, uint64_t off, size_t len, unsigned seed,
		 ssize_t want);
/* A store on tdir with cap bytes, lookups counting as uses at once. */
struct store *open_store(uint64_t cap);
/* How many files in tdir/shards start with prefix. */
size_t count_files(const char *prefix);
/* How many files in tdir/sub start with prefix. */
size_t count_files_in(const char *sub, const char *prefix);
/* An inotify descriptor watching tdir/shards for directory reads, shown
 * to see a readdir there (the test fails otherwise) and emptied. */
int dir_reads_watch(void);
/* Reads of tdir/shards itself (IN_ACCESS events without a name) queued on
 * the descriptor in since the last call. */
int dir_reads(int in);
/* The path of the only entry file in the store. */
void only_entry_path(char *out, size_t outlen);

#endif
