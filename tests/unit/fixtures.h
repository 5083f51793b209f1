/* fixtures.h - shared unit-test fixtures: temp dirs, tar writer, server */
#ifndef ECHOFS_TESTS_FIXTURES_H
#define ECHOFS_TESTS_FIXTURES_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

/* An in-memory ustar archive under construction. Start it zeroed ({0});
 * buf belongs to the caller: release it with tarw_free() or keep it. */
struct tarw {
	uint8_t *buf;
	size_t len, cap;
};

/* Appends a regular-file member (mode 0644, fixed mtime) holding n bytes of
 * data; name must fit the 100-byte ustar field. Returns the archive offset
 * of the member's data. Aborts on OOM (xrealloc). */
uint64_t tarw_add(struct tarw *t, const char *name, const void *data,
		  size_t n);

/* Appends the end-of-archive marker: two zero blocks. */
void tarw_end(struct tarw *t);

/* Frees the buffer and zeroes t, so it can be reused. Accepts NULL. */
void tarw_free(struct tarw *t);

/* A scratch tree for a suite that serves shards: tdir = a new
 * /tmp/echofs-NAME-XXXXXX, root = tdir/www (made, for the server), cdir =
 * tdir/cache (not made: the store makes it). Fails the test on error. */
#define FX_TDIR_MAX 64
#define FX_PATH_MAX 96
void fx_tree_make(const char *name, char tdir[FX_TDIR_MAX],
		  char root[FX_PATH_MAX], char cdir[FX_PATH_MAX]);

/* n bytes from rand_r(seed) in a new buffer (caller frees): a sample's
 * image, incompressible and reproducible. */
uint8_t *fx_random_bytes(unsigned *seed, size_t n);

/* Ends shard t (tarw_end), writes it to root/s<n>.tar and hands its bytes
 * to *data and *len (t is left zeroed; the caller frees *data). */
void fx_shard_finish(struct tarw *t, const char *root, int n, uint8_t **data,
		     size_t *len);

/* Removes dir and everything under it, without following symlinks; best
 * effort (for teardown, where a failure must not mask the test's result). */
void fx_rm_tree(const char *dir);

/* Writes the source tree's root (two levels above $ECHOFS_TEST_DATA, which
 * tests/meson.build sets to <src>/tests/data) to out. Fails the test when
 * the variable is unset. */
void fx_repo_root(char *out, size_t n);

/* Creates (or truncates) path holding n bytes of data; fails the test on
 * any error, including a failed close. */
void fx_write_file(const char *path, const void *data, size_t n);

/* The bytes of tests/data/<name> in a new buffer (caller frees); skips the
 * test when $ECHOFS_TEST_DATA is unset, fails it when the file is missing. */
uint8_t *fx_load_data(const char *name, size_t *len);

/* fx_load_data("img/<name>"): one of the test images under tests/data/img. */
uint8_t *fx_load_img(const char *name, size_t *len);

struct transform_opts;

/* What transform_apply() makes of in (len bytes) with opts and rand, on a
 * context of its own: the reference a suite compares its module's output
 * with. *out is the caller's to free; fails the test when the transform
 * does. */
void fx_transform_ref(const struct transform_opts *opts, const uint8_t *in,
		      size_t len, uint64_t rand, uint8_t **out, size_t *outlen);

/* A running tests/fault_server.py: its pid (0 when none) and its port. */
struct fx_server {
	pid_t pid;
	int port;
};

/* Most --fault rules fx_server_start() passes on; later ones are ignored. */
#define FX_MAX_FAULTS 4

/* Starts /usr/bin/python3 tests/fault_server.py --root root --port-file
 * portfile, followed by the NULL-terminated extra arguments (may be NULL),
 * and waits up to 10 s for the port file. The server gets stdout and stderr
 * on /dev/null and SIGTERM when the calling thread dies, so a crashed test
 * leaves nothing behind. Returns 0 with s filled in, -ENOENT when the script
 * cannot be found, -ECHILD when the server exited, -ETIMEDOUT when it never
 * wrote its port (then it has been killed), or another negative errno.
 * Does not fail the test: callers that can run without it decide. */
int fx_server_spawn(struct fx_server *s, const char *root,
		    const char *portfile, const char *const *extra);

/* fx_server_spawn() for tests that need the server: serves root, with the
 * port file at workdir/port and up to FX_MAX_FAULTS --fault rules from the
 * NULL-terminated faults (may be NULL). Skips the test when the script is
 * missing and fails it when the server does not come up. */
void fx_server_start(struct fx_server *s, const char *root,
		     const char *workdir, const char *const *faults);

/* Stops the server with SIGTERM and reaps it; a no-op when none runs. */
void fx_server_stop(struct fx_server *s);

struct http;

/* http_global_init() and http_open() for a suite that fetches from the fault
 * server: `connections` handles, retry_budget_s seconds of retries from a
 * 50 ms backoff, 3 s low-speed limit. Fails the test on error; the caller
 * frees the client (fx_shards_teardown() does). */
struct http *fx_http_open(unsigned connections, double retry_budget_s);

struct index;

/* A new index of the n shards the fault server on port serves as
 * /s0.tar, /s1.tar, ... with the given lengths (no ETags, no samples). */
struct index *fx_shards_index(int port, const size_t *len, int n);

/* The teardown of a suite that serves n shards from tdir: stops srv, frees
 * *h and the n buffers in data (set to NULL), removes tdir. */
void fx_shards_teardown(struct fx_server *srv, struct http **h, uint8_t **data,
			int n, const char *tdir);

#endif
