/* http_fx.h - helpers the http suites share (http_fx.c): a fault server on
 * a directory of known objects, its control endpoints, collecting sinks. */
#ifndef ECHOFS_TESTS_HTTP_FX_H
#define ECHOFS_TESTS_HTTP_FX_H

#include "fetch/net/http.h"
#include "fixtures.h"

#include <stddef.h>
#include <stdint.h>

#define BIG_LEN (3u * 1024 * 1024)
#define SMALL_TEXT "hello from the fault server\n"

extern char g_dir[128];	 /* temp dir: port files, header files, certs */
extern char g_root[192]; /* served directory: big.bin, small.txt, empty.bin */
extern char g_skip[256]; /* why the server tests cannot run, or "" */
extern struct fx_server g_srv;
extern unsigned char *g_big; /* big.bin's BIG_LEN bytes */

/* Suite init and fini: the objects, http_global_init, the main server. */
void http_fx_setup(void);
void http_fx_teardown(void);

#define NEED_SERVER()                                                          \
	do {                                                                   \
		if (g_skip[0])                                                 \
			cr_skip_test("%s", g_skip);                            \
	} while (0)

/* Creates dir/name holding len bytes of data. */
void write_file(const char *dir, const char *name, const void *data,
		size_t len);
/* Starts fault_server.py on g_root, its port file named after tag; cert/key
 * for HTTPS and one --fault rule are optional. Returns 0 or a negative errno
 * (see fx_server_spawn). */
int server_start(struct fx_server *s, const char *tag, const char *cert,
		 const char *key, const char *fault);

/* http://127.0.0.1:port/path (the main server's for url), in a buffer of
 * the calling thread's that the next call overwrites. */
const char *url_on(int port, const char *path);
const char *url(const char *path);
/* A tiny raw client for the main server's control endpoints, so the test
 * does not depend on the code under test: the status; out gets the body. */
int ctl(const char *method, const char *path, const char *body, char *out,
	size_t outlen);
/* PUT /_faults rules, which must be accepted. */
void set_faults(const char *rules);
/* The server's counter key from /_stats. */
uint64_t server_stat(const char *key);
/* A client with a retry budget, short timeouts and backoff, an optional
 * header_file. */
struct http *mk(double budget, const char *header_file);

struct collect {
	unsigned char *buf;
	size_t len, cap;
	size_t touch_after; /* change big.bin's mtime once this much arrived */
	size_t swap_after;  /* rewrite big.bin (same size and mtime) once this
			       much arrived */
	int fail_with;	    /* sink returns this on the first call */
};

/* A sink into c (ud), room for big.bin plus one byte; the touch and swap
 * above happen on the way. */
int collect_sink(void *ud, const void *data, size_t len);
struct collect *collect_new(void);
void collect_free(struct collect *c);
/* c holds exactly big.bin's bytes. */
void expect_big(const struct collect *c);
struct http_stats stats_of(struct http *h);

#endif
