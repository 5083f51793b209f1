/* fixtures.c - shared unit-test fixtures: temp dirs, tar writer, server */
#include "fixtures.h"

#include "cache/image/transform.h"
#include "common/util.h"
#include "fetch/format/index.h"
#include "fetch/net/http.h"

#include <criterion/criterion.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <libgen.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

/* Port-file polling: 1000 polls 10 ms apart, the 10 s the tests allowed. */
#define POLLS 1000
#define POLL_US 10000
/* Room for the fixed arguments, the caller's extras and the NULL. */
#define MAX_ARGS 32

/* ---- tar writer ---- */

/* Grows t to hold n more bytes and zeroes them (header padding, data
 * padding and end blocks all rely on the zeroes). */
static void reserve(struct tarw *t, size_t n)
{
	if (t->len + n > t->cap) {
		t->cap = (t->len + n) * 2;
		t->buf = xrealloc(t->buf, t->cap);
	}
	memset(t->buf + t->len, 0, n);
}

/* Fills a zeroed 512-byte ustar header for a regular file of n bytes. */
static void put_header(uint8_t *hd, const char *name, size_t n)
{
	unsigned sum = 0;

	snprintf((char *)hd, 100, "%s", name);
	snprintf((char *)hd + 100, 8, "%07o", 0644);
	snprintf((char *)hd + 108, 8, "%07o", 0);
	snprintf((char *)hd + 116, 8, "%07o", 0);
	snprintf((char *)hd + 124, 12, "%011llo", (unsigned long long)n);
	snprintf((char *)hd + 136, 12, "%011o", 1700000000);
	/* The checksum is computed with its own field read as spaces. */
	memset(hd + 148, ' ', 8);
	hd[156] = '0';
	memcpy(hd + 257, "ustar", 6);
	memcpy(hd + 263, "00", 2);
	for (int i = 0; i < 512; i++)
		sum += hd[i];
	snprintf((char *)hd + 148, 8, "%06o", sum);
}

uint64_t tarw_add(struct tarw *t, const char *name, const void *data,
		  size_t n)
{
	uint64_t off;

	reserve(t, 512 + n + 512);
	put_header(t->buf + t->len, name, n);
	off = t->len + 512;
	memcpy(t->buf + off, data, n);
	t->len = off + ((n + 511) / 512) * 512;
	return off;
}

void tarw_end(struct tarw *t)
{
	reserve(t, 1024);
	t->len += 1024;
}

void tarw_free(struct tarw *t)
{
	if (!t)
		return;
	free(t->buf);
	memset(t, 0, sizeof(*t));
}

/* ---- files ---- */

static int rm_cb(const char *p, const struct stat *sb, int flag,
		 struct FTW *ftw)
{
	(void)sb;
	(void)flag;
	(void)ftw;
	return remove(p);
}

void fx_rm_tree(const char *dir)
{
	nftw(dir, rm_cb, 16, FTW_DEPTH | FTW_PHYS);
}

/* fx_repo_root() without failing the test: 0, -ENOENT when
 * $ECHOFS_TEST_DATA is unset, -ENAMETOOLONG when it does not fit. */
static int repo_root_of(char *out, size_t n)
{
	const char *d = getenv("ECHOFS_TEST_DATA");
	char tmp[512];

	if (!d)
		return -ENOENT;
	if (strlen(d) >= sizeof(tmp))
		return -ENAMETOOLONG;
	snprintf(tmp, sizeof(tmp), "%s", d);
	snprintf(out, n, "%s", dirname(dirname(tmp)));
	return 0;
}

void fx_repo_root(char *out, size_t n)
{
	int r = repo_root_of(out, n);

	cr_assert_neq(r, -ENOENT, "ECHOFS_TEST_DATA not set");
	cr_assert_eq(r, 0, "ECHOFS_TEST_DATA too long");
}

void fx_write_file(const char *path, const void *data, size_t n)
{
	FILE *f = fopen(path, "wb");

	cr_assert_not_null(f, "cannot create %s", path);
	cr_assert_eq(fwrite(data, 1, n, f), n, "short write to %s", path);
	cr_assert_eq(fclose(f), 0, "cannot close %s", path);
}

void fx_tree_make(const char *name, char tdir[FX_TDIR_MAX],
		  char root[FX_PATH_MAX], char cdir[FX_PATH_MAX])
{
	snprintf(tdir, FX_TDIR_MAX, "/tmp/echofs-%s-XXXXXX", name);
	cr_assert_not_null(mkdtemp(tdir), "mkdtemp: %s", strerror(errno));
	snprintf(root, FX_PATH_MAX, "%s/www", tdir);
	snprintf(cdir, FX_PATH_MAX, "%s/cache", tdir);
	cr_assert_eq(mkdir(root, 0700), 0, "mkdir %s", root);
}

uint8_t *fx_random_bytes(unsigned *seed, size_t n)
{
	uint8_t *b = xmalloc(n ? n : 1);
	for (size_t i = 0; i < n; i++)
		b[i] = (uint8_t)rand_r(seed);
	return b;
}

void fx_shard_finish(struct tarw *t, const char *root, int n, uint8_t **data,
		     size_t *len)
{
	char path[256];

	tarw_end(t);
	snprintf(path, sizeof(path), "%s/s%d.tar", root, n);
	fx_write_file(path, t->buf, t->len);
	*data = t->buf;
	*len = t->len;
	memset(t, 0, sizeof(*t));
}

struct http *fx_http_open(unsigned connections, double retry_budget_s)
{
	char err[256];
	struct http *h = NULL;
	struct http_opts ho = {.connections = connections,
			       .retry_budget_s = retry_budget_s,
			       .backoff_base_s = 0.05,
			       .low_speed_time_s = 3};

	cr_assert_eq(http_global_init(), 0);
	cr_assert_eq(http_open(&ho, &h, err, sizeof(err)), 0, "http_open: %s",
		     err);
	return h;
}

void fx_shards_teardown(struct fx_server *srv, struct http **h, uint8_t **data,
			int n, const char *tdir)
{
	fx_server_stop(srv);
	http_free(*h);
	*h = NULL;
	for (int s = 0; s < n; s++) {
		free(data[s]);
		data[s] = NULL;
	}
	fx_rm_tree(tdir);
}

/* ---- fault server ---- */

/* Child side of the fork: only async-signal-safe calls, since the test may
 * have other threads running. */
static void exec_server(const char *const *argv)
{
	int fd = open("/dev/null", O_WRONLY);

	/* Die with the test, even when it crashes. */
	prctl(PR_SET_PDEATHSIG, SIGTERM);
	dup2(fd, 1);
	dup2(fd, 2);
	execv(argv[0], (char *const *)argv);
	_exit(127);
}

/* Waits for the port file of the server s->pid; see fx_server_spawn(). */
static int wait_port(struct fx_server *s, const char *portfile)
{
	for (int i = 0; i < POLLS; i++) {
		FILE *f = fopen(portfile, "r");
		if (f) {
			int ok = fscanf(f, "%d", &s->port) == 1;
			fclose(f);
			if (ok && s->port > 0)
				return 0;
		}
		if (waitpid(s->pid, NULL, WNOHANG) != 0) {
			s->pid = 0;
			return -ECHILD;
		}
		usleep(POLL_US);
	}
	fx_server_stop(s);
	return -ETIMEDOUT;
}

int fx_server_spawn(struct fx_server *s, const char *root,
		    const char *portfile, const char *const *extra)
{
	char repo[512], script[600];
	const char *argv[MAX_ARGS];
	int a = 0, r = repo_root_of(repo, sizeof(repo));

	s->pid = 0;
	s->port = 0;
	if (r)
		return r;
	snprintf(script, sizeof(script), "%s/tests/fault_server.py", repo);
	if (access(script, R_OK) != 0)
		return -ENOENT;
	argv[a++] = "/usr/bin/python3";
	argv[a++] = script;
	argv[a++] = "--root";
	argv[a++] = root;
	argv[a++] = "--port-file";
	argv[a++] = portfile;
	for (int i = 0; extra && extra[i]; i++) {
		if (a == MAX_ARGS - 1)
			return -E2BIG;
		argv[a++] = extra[i];
	}
	argv[a] = NULL;
	/* A stale port file would hand back a dead server's port. */
	unlink(portfile);
	s->pid = fork();
	if (s->pid < 0) {
		s->pid = 0;
		return -errno;
	}
	if (s->pid == 0)
		exec_server(argv);
	return wait_port(s, portfile);
}

void fx_server_start(struct fx_server *s, const char *root,
		     const char *workdir, const char *const *faults)
{
	char repo[512], script[600], pf[512];
	const char *extra[2 * FX_MAX_FAULTS + 1];
	int a = 0, r;

	fx_repo_root(repo, sizeof(repo));
	snprintf(script, sizeof(script), "%s/tests/fault_server.py", repo);
	if (access(script, R_OK) != 0)
		cr_skip_test("no %s", script);
	snprintf(pf, sizeof(pf), "%s/port", workdir);
	for (int i = 0; faults && faults[i] && i < FX_MAX_FAULTS; i++) {
		extra[a++] = "--fault";
		extra[a++] = faults[i];
	}
	extra[a] = NULL;
	r = fx_server_spawn(s, root, pf, extra);
	cr_assert_neq(r, -ECHILD, "server died");
	cr_assert_eq(r, 0, "fault server did not start: %s", strerror(-r));
}

void fx_server_stop(struct fx_server *s)
{
	if (s->pid > 0) {
		kill(s->pid, SIGTERM);
		waitpid(s->pid, NULL, 0);
		s->pid = 0;
	}
}

uint8_t *fx_load_data(const char *name, size_t *len)
{
	const char *dir = getenv("ECHOFS_TEST_DATA");
	char path[1024];
	struct stat st;
	uint8_t *b;
	FILE *f;

	if (!dir)
		cr_skip_test("ECHOFS_TEST_DATA not set (run through meson test)");
	snprintf(path, sizeof(path), "%s/%s", dir, name);
	f = fopen(path, "rb");
	cr_assert_not_null(f, "missing fixture %s", path);
	cr_assert_eq(fstat(fileno(f), &st), 0);
	b = malloc((size_t)st.st_size + 1);
	cr_assert_not_null(b);
	*len = fread(b, 1, (size_t)st.st_size, f);
	cr_assert_eq(*len, (size_t)st.st_size, "short read of %s", path);
	fclose(f);
	return b;
}

uint8_t *fx_load_img(const char *name, size_t *len)
{
	char path[256];

	snprintf(path, sizeof(path), "img/%s", name);
	return fx_load_data(path, len);
}

void fx_transform_ref(const struct transform_opts *opts, const uint8_t *in,
		      size_t len, uint64_t rand, uint8_t **out, size_t *outlen)
{
	struct transform_ctx *tc = transform_ctx_new();
	char why[160];

	cr_assert_not_null(tc);
	cr_assert_eq(transform_apply(tc, opts, in, len, rand, out, outlen, why,
				     sizeof(why)),
		     0, "%s", why);
	transform_ctx_free(tc);
}

struct index *fx_shards_index(int port, const size_t *len, int n)
{
	struct index *ix = index_new();

	cr_assert_not_null(ix);
	for (int s = 0; s < n; s++) {
		char url[128];

		snprintf(url, sizeof(url), "http://127.0.0.1:%d/s%d.tar", port,
			 s);
		cr_assert_eq(index_add_shard(ix, url, len[s], ""), (uint32_t)s);
	}
	return ix;
}
