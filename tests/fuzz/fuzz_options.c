/* fuzz_options.c - libFuzzer target for options_parse (fs/options.c): the
 * command line through libfuse's fuse_opt and echofs's value parsers
 * (sizes, numbers, echo, ranks, formats, URLs). The input is argv after the
 * program name, one argument per NUL-separated piece.
 * Checks: 0, -EINVAL or -ENOMEM only; an error has a reason; an accepted
 * mount has its source and mount point and its values within their ranges;
 * the arguments left for libfuse end with echofs's forced mount options. */
#define FUSE_USE_VERSION 314
#include "fs/options.h"

#include <errno.h>
#include <fuse_opt.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define FUZZ_MAX_ARGS 32

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check_accepted(const struct fs_options *o,
			   const struct fuse_args *args)
{
	if (o->show_help || o->show_version)
		return;
	if (!o->source || (!o->check && !o->mountpoint) || !o->cache_dir)
		abort();
	if (o->world < 1 || o->rank >= o->world || !(o->echo.echo >= 1.0) ||
	    o->connections < 1)
		abort();
	/* the forced mount options come last, so a user's -o cannot undo
	 * them (later values win in libfuse) */
	int last = args->argc - 1 - (o->debug ? 1 : 0); /* "-d" after them */
	if (last < 1 || strcmp(args->argv[last - 1], "-o") != 0 ||
	    strncmp(args->argv[last],
		    o->echo.on ? "rw,nosuid,nodev," : "ro,nosuid,nodev,",
		    16))
		abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char *buf = malloc(size + 1), *argv[FUZZ_MAX_ARGS + 2];
	struct fuse_args args;
	struct fs_options o;
	char err[256];
	int argc = 0, rc;

	if (!buf)
		abort();
	memcpy(buf, data, size);
	buf[size] = '\0';
	argv[argc++] = "echofs";
	for (char *p = buf; p <= buf + size && argc <= FUZZ_MAX_ARGS;
	     p += strlen(p) + 1)
		argv[argc++] = p;
	argv[argc] = NULL;
	args = (struct fuse_args)FUSE_ARGS_INIT(argc, argv);
	/* no host settings: the parser reads these when -o leaves them out */
	unsetenv("ECHOFS_RANK");
	unsetenv("ECHOFS_WORLD");
	rc = options_parse(&args, &o, err, sizeof(err));
	if (rc != 0 && rc != -EINVAL && rc != -ENOMEM)
		abort();
	if (rc != 0 && !err[0])
		abort();
	if (rc == 0)
		check_accepted(&o, &args);
	options_free(&o);
	fuse_opt_free_args(&args);
	free(buf);
	return 0;
}
