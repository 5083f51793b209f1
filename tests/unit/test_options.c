/* test_options.c - command-line parsing: our options, forced mount options,
 * errors. */
#define FUSE_USE_VERSION 314
#include <criterion/criterion.h>
#include <errno.h>
#include <fuse_lowlevel.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "fs/options.h"

static int parse(int argc, const char **argv, struct fs_options *o,
		 struct fuse_args *args, char *err)
{
	*args = (struct fuse_args)FUSE_ARGS_INIT(argc, (char **)argv);
	args->allocated = 0;
	return options_parse(args, o, err, 256);
}

static int has_arg(const struct fuse_args *a, const char *needle)
{
	for (int i = 0; i < a->argc; i++)
		if (strstr(a->argv[i], needle))
			return 1;
	return 0;
}

Test(options, parses_our_options_and_leaves_the_rest)
{
	const char *argv[] = {"echofs", "-o", "cache_dir=/c,cache_size=2G,allow_other",
			      "-o", "connections=3,log_level=debug,index=/i",
			      "http://h/{0..1}.tar", "/mnt", NULL};
	struct fs_options o;
	struct fuse_args a;
	char err[256];

	cr_assert_eq(parse(7, argv, &o, &a, err), 0, "%s", err);
	cr_assert_str_eq(o.cache_dir, "/c");
	cr_assert_eq(o.cache_size, 2ULL << 30);
	cr_assert_eq(o.connections, 3);
	cr_assert_eq(o.log_level, LOG_LEVEL_DEBUG);
	cr_assert_str_eq(o.index, "/i");
	cr_assert_str_eq(o.source, "http://h/{0..1}.tar");
	cr_assert_str_eq(o.mountpoint, "/mnt");
	cr_assert(has_arg(&a, "allow_other"));
	cr_assert(has_arg(&a, "ro,nosuid,nodev"));
	/* The kernel checks modes too (.echofs/config is 0600). */
	cr_assert(has_arg(&a, "default_permissions"));
	cr_assert_not(has_arg(&a, "cache_dir"));
	options_free(&o);
	fuse_opt_free_args(&a);
}

struct bad_case {
	const char *opt;
	const char *reason;
};

Test(options, rejects_bad_values_with_a_reason)
{
	static const struct bad_case cases[] = {
		{"cache_size=12Q", "cache_size"},
		{"cache_size=", "cache_size"},
		{"connections=0", "connections"},
		{"connections=-1", "connections"},
		{"connections=9999", "connections"},
		{"log_level=loud", "log_level"},
		{"echo=0.5", "echo"},
		{"echo=abc", "echo"},
		{"echo=2x", "echo"},
		{"echo_mode=sometimes", "echo_mode"},
		{"echo_window=0", "echo_window"},
		{"mem_size=10", "mem_size"},
		{"seed=-3", "seed"},
		{"decode_mem=1M", "decode_mem"},
		{"decode_mem=lots", "decode_mem"},
		{"read_timeout=0", "read_timeout"},
		{"read_timeout=abc", "read_timeout"},
		{"read_timeout=5s", "read_timeout"},
		{"min_rate=0", "min_rate"},
		{"min_rate=fast", "min_rate"},
		{"stall_timeout=0", "stall_timeout"},
		{"stall_timeout=2.5", "stall_timeout"},
		{"stall_timeout=3601", "stall_timeout"},
		{"layout=tree", "bad layout"},
		{"layout=samples,echo=2,repartition=1", "repartition needs"},
		{"layout=samples,size=224", "as they are"},
		{"layout=samples,format=ppm", "as they are"},
		{"augment=yes", "augment"},
		{"augment=rrc", "needs crop"},
		{"crop=8,rrc_scale=0.5", "rrc_scale"},
		{"crop=8,rrc_scale=0-1", "rrc_scale"},
		{"crop=8,rrc_scale=0.5-1.5", "rrc_scale"},
		{"crop=8,rrc_scale=0.9-0.1", "rrc_scale"},
		{"crop=8,rrc_ratio=2-1", "rrc_ratio"},
		{"crop=8,rrc_ratio=x-1", "rrc_ratio"},
	};
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		const char *argv[] = {"echofs", "-o", cases[i].opt, "http://h/a.tar",
				      "/mnt", NULL};
		struct fs_options o;
		struct fuse_args a;
		char err[256];
		cr_assert_eq(parse(5, argv, &o, &a, err), -EINVAL, "%s", cases[i].opt);
		cr_assert(strstr(err, cases[i].reason), "%s: %s", cases[i].opt, err);
		options_free(&o);
		fuse_opt_free_args(&a);
	}
}

Test(options, needs_source_and_mountpoint)
{
	const char *argv[] = {"echofs", "http://h/a.tar", NULL};
	struct fs_options o;
	struct fuse_args a;
	char err[256];
	cr_assert_eq(parse(2, argv, &o, &a, err), -EINVAL);
	cr_assert(strstr(err, "SOURCE and MOUNTPOINT"));
	options_free(&o);
	fuse_opt_free_args(&a);
}

Test(options, debug_implies_foreground_and_defaults_fill_in)
{
	const char *argv[] = {"echofs", "-d", "http://h/a.tar", "/mnt", NULL};
	struct fs_options o;
	struct fuse_args a;
	char err[256];
	cr_assert_eq(parse(4, argv, &o, &a, err), 0, "%s", err);
	cr_assert(o.foreground && o.debug);
	cr_assert_eq(o.connections, FS_DEFAULT_CONNECTIONS);
	cr_assert_eq(o.cache_size, FS_DEFAULT_CACHE_SIZE);
	cr_assert_not_null(o.cache_dir);
	options_free(&o);
	fuse_opt_free_args(&a);
}

Test(options, timeouts_parse_and_default)
{
	const char *argv[] = {"echofs", "-o",
			      "read_timeout=2.5,min_rate=16K,stall_timeout=2",
			      "http://h/a.tar", "/mnt", NULL};
	const char *plain[] = {"echofs", "http://h/a.tar", "/mnt", NULL};
	struct fs_options o;
	struct fuse_args a;
	char err[256];

	cr_assert_eq(parse(5, argv, &o, &a, err), 0, "%s", err);
	cr_assert_float_eq(o.read_timeout_s, 2.5, 1e-9);
	cr_assert_float_eq(o.min_rate, 16384.0, 1e-9);
	cr_assert_float_eq(o.stall_timeout_s, 2.0, 1e-9);
	cr_assert_not(has_arg(&a, "read_timeout"));
	cr_assert_not(has_arg(&a, "stall_timeout"));
	options_free(&o);
	fuse_opt_free_args(&a);
	cr_assert_eq(parse(3, plain, &o, &a, err), 0, "%s", err);
	cr_assert_float_eq(o.read_timeout_s, FS_DEFAULT_READ_TIMEOUT_S, 1e-9);
	cr_assert_float_eq(o.min_rate, FS_DEFAULT_MIN_RATE, 1e-9);
	cr_assert_float_eq(o.stall_timeout_s, FS_DEFAULT_STALL_TIMEOUT_S, 1e-9);
	options_free(&o);
	fuse_opt_free_args(&a);
}

Test(options, help_and_version)
{
	const char *argv[] = {"echofs", "--help", NULL};
	struct fs_options o;
	struct fuse_args a;
	char err[256];
	cr_assert_eq(parse(2, argv, &o, &a, err), 0);
	cr_assert(o.show_help);
	options_free(&o);
	fuse_opt_free_args(&a);
}

Test(options, echo_options_make_an_echo_mount)
{
	const char *argv[] = {"echofs", "-o",
			      "echo=2.5,echo_mode=fixed,echo_window=8,mem_size=64M,seed=9",
			      "http://h/a.tar", "/mnt", NULL};
	struct fs_options o;
	struct fuse_args a;
	char err[256];

	cr_assert_eq(parse(5, argv, &o, &a, err), 0, "%s", err);
	cr_assert(o.echo.on);
	cr_assert_float_eq(o.echo.echo, 2.5, 1e-12);
	cr_assert_eq(o.echo.mode, DATASET_ECHO_FIXED);
	cr_assert_eq(o.echo.window, 8);
	cr_assert_eq(o.echo.mem_size, 64ULL << 20);
	cr_assert_eq(o.seed, 9);
	/* rw for the kernel so that .echofs/config can be written. */
	cr_assert(has_arg(&a, "rw,nosuid,nodev"));
	options_free(&o);
	fuse_opt_free_args(&a);
}

Test(options, echo_one_is_an_exact_mount)
{
	const char *argv[] = {"echofs", "-o", "echo=1", "http://h/a.tar", "/mnt", NULL};
	struct fs_options o;
	struct fuse_args a;
	char err[256];

	cr_assert_eq(parse(5, argv, &o, &a, err), 0, "%s", err);
	cr_assert_not(o.echo.on);
	cr_assert(has_arg(&a, "ro,nosuid,nodev"));
	options_free(&o);
	fuse_opt_free_args(&a);
}

/* /proc/mounts and df name the source, without credentials or query, with
 * the commas fuse_opt would split on escaped. */
Test(options, fsname_is_the_redacted_source)
{
	const char *argv[] = {"echofs", "https://u:secret@h/a,b/{0..1}.tar?tok=x",
			      "/mnt", NULL};
	struct fs_options o;
	struct fuse_args a;
	char err[256];

	cr_assert_eq(parse(3, argv, &o, &a, err), 0, "%s", err);
	cr_assert(has_arg(&a, "fsname=https://***@h/a\\,b/{0..1}.tar?***"));
	cr_assert_not(has_arg(&a, "secret"));
	cr_assert_not(has_arg(&a, "tok=x"));
	options_free(&o);
	fuse_opt_free_args(&a);
}

Test(options, decode_mem)
{
	const char *argv[] = {"echofs", "-o", "size=64,decode_mem=512M",
			      "http://h/a.tar", "/mnt", NULL};
	struct fs_options o;
	struct fuse_args a;
	char err[256];
	cr_assert_eq(parse(5, argv, &o, &a, err), 0, "%s", err);
	cr_expect_eq(o.image.decode_mem, 512ULL << 20);
	cr_assert_not(has_arg(&a, "decode_mem"));
	options_free(&o);
	fuse_opt_free_args(&a);
}

Test(options, augment_rrc_and_its_ranges)
{
	const char *argv[] = {"echofs", "-o",
			      "echo=2,size=256,crop=224,augment=rrc,"
			      "rrc_scale=0.25-1,rrc_ratio=0.5-2",
			      "http://h/a.tar", "/mnt", NULL};
	struct fs_options o;
	struct fuse_args a;
	char err[256];
	cr_assert_eq(parse(5, argv, &o, &a, err), 0, "%s", err);
	cr_expect(o.image.augment && o.image.rrc);
	cr_expect(o.image.rrc_scale[0] == 0.25 && o.image.rrc_scale[1] == 1.0);
	cr_expect(o.image.rrc_ratio[0] == 0.5 && o.image.rrc_ratio[1] == 2.0);
	cr_assert_not(has_arg(&a, "rrc"));
	options_free(&o);
	fuse_opt_free_args(&a);
	/* augment=1 stays the fixed-size crop; ranges default to 0 (rrc.h's
	 * torchvision defaults). */
	const char *plain[] = {"echofs", "-o", "echo=2,crop=8,augment=1",
			       "http://h/a.tar", "/mnt", NULL};
	cr_assert_eq(parse(5, plain, &o, &a, err), 0, "%s", err);
	cr_expect(o.image.augment && !o.image.rrc);
	cr_expect(o.image.rrc_scale[0] == 0 && o.image.rrc_ratio[1] == 0);
	options_free(&o);
	fuse_opt_free_args(&a);
}

/* rank/world/repartition: options, else ECHOFS_RANK/ECHOFS_WORLD. */
struct node_case {
	const char *opt, *env_rank, *env_world;
	int r;
	unsigned rank, world;
	const char *reason;
};

Test(options, rank_world_from_options_or_environment)
{
	static const struct node_case cases[] = {
		{"cache_dir=/c", NULL, NULL, 0, 0, 1, NULL},
		{"rank=2,world=3", NULL, NULL, 0, 2, 3, NULL},
		{"cache_dir=/c", "1", "4", 0, 1, 4, NULL},
		{"rank=0,world=2", "1", "4", 0, 0, 2, NULL}, /* options win */
		{"world=2", "1", NULL, 0, 1, 2, NULL},
		{"rank=3,world=3", NULL, NULL, -EINVAL, 0, 0, "not below world"},
		{"world=0", NULL, NULL, -EINVAL, 0, 0, "bad world 0"},
		{"rank=x", NULL, NULL, -EINVAL, 0, 0, "bad rank 'x'"},
		{"world=-1", NULL, NULL, -EINVAL, 0, 0, "bad world '-1'"},
		{"cache_dir=/c", "one", "2", -EINVAL, 0, 0,
		 "bad rank 'one' from ECHOFS_RANK"},
		{"cache_dir=/c", "0", "99999999", -EINVAL, 0, 0, "bad world"},
		{"repartition=2", NULL, NULL, -EINVAL, 0, 0, "bad repartition"},
	};
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		const struct node_case *c = &cases[i];
		const char *argv[] = {"echofs", "-o", c->opt, "http://h/a.tar",
				      "/mnt", NULL};
		struct fs_options o;
		struct fuse_args a;
		char err[256];

		c->env_rank ? setenv("ECHOFS_RANK", c->env_rank, 1)
			    : unsetenv("ECHOFS_RANK");
		c->env_world ? setenv("ECHOFS_WORLD", c->env_world, 1)
			     : unsetenv("ECHOFS_WORLD");
		int r = parse(5, argv, &o, &a, err);
		cr_assert_eq(r, c->r, "%s: %d %s", c->opt, r, err);
		if (r == 0) {
			cr_assert_eq(o.rank, c->rank, "%s", c->opt);
			cr_assert_eq(o.world, c->world, "%s", c->opt);
		} else {
			cr_assert(strstr(err, c->reason), "%s: '%s'", c->opt, err);
		}
		options_free(&o);
		fuse_opt_free_args(&a);
	}
	unsetenv("ECHOFS_RANK");
	unsetenv("ECHOFS_WORLD");
}

Test(options, layout_default_and_samples)
{
	const char *argv1[] = {"echofs", "http://h/a.tar", "/mnt", NULL};
	const char *argv2[] = {"echofs", "-o", "layout=samples",
			       "http://h/a.tar", "/mnt", NULL};
	const char *argv3[] = {"echofs", "-o", "layout=imagefolder",
			       "http://h/a.tar", "/mnt", NULL};
	struct fs_options o;
	struct fuse_args a;
	char err[256];

	cr_assert_eq(parse(3, argv1, &o, &a, err), 0, "%s", err);
	cr_expect_eq(o.layout, FS_LAYOUT_IMAGEFOLDER);
	options_free(&o);
	fuse_opt_free_args(&a);
	cr_assert_eq(parse(5, argv2, &o, &a, err), 0, "%s", err);
	cr_expect_eq(o.layout, FS_LAYOUT_SAMPLES);
	cr_expect_not(has_arg(&a, "layout"));
	options_free(&o);
	fuse_opt_free_args(&a);
	cr_assert_eq(parse(5, argv3, &o, &a, err), 0, "%s", err);
	cr_expect_eq(o.layout, FS_LAYOUT_IMAGEFOLDER);
	options_free(&o);
	fuse_opt_free_args(&a);
}

/* Issue 50: a FIFO named as SOURCE (a shard list), index= or header_file=
 * hung the mount: nothing was printed and echofs never returned. Inputs
 * that are not regular files now fail at once, naming the option. */
Test(options, inputs_that_are_not_regular_files_name_their_option,
     .timeout = 30)
{
	char dir[] = "/tmp/echofs-test-opt.XXXXXX", fifo[64], reg[64], opt[128],
	     err[256];
	struct {
		const char *name; /* NULL: SOURCE */
		const char *path;
		const char *says;
	} cases[] = {
		{NULL, fifo, "SOURCE "},
		{"index", fifo, "index="},
		{"header_file", fifo, "header_file="},
		{"index", "/dev/null", "index="},
		{"header_file", "/tmp", "header_file="},
	};

	cr_assert_not_null(mkdtemp(dir));
	snprintf(fifo, sizeof(fifo), "%s/fifo", dir);
	snprintf(reg, sizeof(reg), "%s/reg", dir);
	cr_assert_eq(mkfifo(fifo, 0600), 0);
	FILE *f = fopen(reg, "w");
	cr_assert_not_null(f);
	fclose(f);
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		const char *argv[] = {
			"echofs", "-o",
			opt,	  cases[i].name ? reg : cases[i].path,
			"/mnt",	  NULL};
		struct fs_options o;
		struct fuse_args a;
		snprintf(opt, sizeof(opt), "%s=%s",
			 cases[i].name ? cases[i].name : "index",
			 cases[i].name ? cases[i].path : reg);
		cr_assert_eq(parse(5, argv, &o, &a, err), -EINVAL, "case %zu",
			     i);
		cr_assert(strstr(err, cases[i].says) &&
				  strstr(err, cases[i].path) &&
				  strstr(err, "not a regular file"),
			  "case %zu: %s", i, err);
		options_free(&o);
		fuse_opt_free_args(&a);
	}
	/* regular files, and a path that does not exist (the reader's own
	 * message says so), parse */
	const char *argv[] = {"echofs", "-o",	"index=/nonexistent/ix",
			      reg,	"/mnt", NULL};
	struct fs_options o;
	struct fuse_args a;
	cr_assert_eq(parse(5, argv, &o, &a, err), 0, "%s", err);
	options_free(&o);
	fuse_opt_free_args(&a);
	unlink(fifo);
	unlink(reg);
	rmdir(dir);
}

/* MOUNTPOINT /dev/fd/N: a descriptor another process mounted (issue 49). */
Test(options, dev_fd_mountpoint_and_mounted_at)
{
	static const struct {
		const char *mp, *opt, *reason;
	} bad[] = {
		{"/dev/fd/x", "seed=1", "bad MOUNTPOINT"},
		{"/dev/fd/7x", "seed=1", "bad MOUNTPOINT"},
		{"/dev/fd/", "seed=1", "bad MOUNTPOINT"},
		{"/dev/fd/-3", "seed=1", "bad MOUNTPOINT"},
		{"/dev/fd/2", "seed=1", "3 or above"},
		{"/dev/fd/7", "mounted_at=mnt/t", "absolute"},
		{"/mnt", "mounted_at=/mnt", "MOUNTPOINT here is /mnt"},
	};
	const char *ok[] = {"echofs",	      "-o",	   "mounted_at=/mnt/t",
			    "http://h/a.tar", "/dev/fd/7", NULL};
	const char *dir[] = {"echofs", "http://h/a.tar", "/mnt", NULL};
	struct fs_options o;
	struct fuse_args a;
	char err[256];

	cr_assert_eq(parse(5, ok, &o, &a, err), 0, "%s", err);
	cr_assert_eq(o.fuse_fd, 7);
	cr_assert_str_eq(o.mounted_at, "/mnt/t");
	cr_assert_str_eq(o.mountpoint, "/dev/fd/7");
	options_free(&o);
	fuse_opt_free_args(&a);
	cr_assert_eq(parse(3, dir, &o, &a, err), 0, "%s", err);
	cr_assert_eq(o.fuse_fd, -1);
	cr_assert_null(o.mounted_at);
	options_free(&o);
	fuse_opt_free_args(&a);
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		const char *argv[] = {"echofs",		"-o",	   bad[i].opt,
				      "http://h/a.tar", bad[i].mp, NULL};
		cr_assert_eq(parse(5, argv, &o, &a, err), -EINVAL, "%s",
			     bad[i].mp);
		cr_assert(strstr(err, bad[i].reason), "%s %s: %s", bad[i].mp,
			  bad[i].opt, err);
		options_free(&o);
		fuse_opt_free_args(&a);
	}
}
