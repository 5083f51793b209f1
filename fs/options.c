/* options.c - the command line: `echofs [options] SOURCE MOUNTPOINT`, with
 * echofs's own -o options taken out and the rest left for libfuse. */
#define FUSE_USE_VERSION 314
#include "fs/options.h"

#include <errno.h>
#include <fuse_lowlevel.h>
#include <fuse_opt.h>
#include <limits.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cache/dataset.h"
#include "common/util.h"
#include "fs/metrics.h"

/* Raw strings as fuse_opt fills them; converted and checked afterwards. */
struct raw_opts {
	char *cache_dir, *cache_size, *index, *connections, *header_file;
	char *log_level, *log_file;
	char *echo, *echo_mode, *echo_window, *mem_size, *seed;
	char *size, *crop, *flip, *augment, *format, *quality, *echo_stage;
	char *threads, *max_pixels, *decode_mem;
	char *rrc_scale, *rrc_ratio;
	char *prepared, *prepared_size;
	char *metrics, *ca_file, *ca_path;
	char *read_timeout, *min_rate, *stall_timeout;
	char *zerocopy, *layout, *mounted_at;
	char *endpoint, *region, *profile, *path_style, *requester_pays, *no_sign;
	char *rank, *world, *repartition, *exact_first, *exact_when_local;
	char *positional[3];
	int npositional;
	int foreground, debug, help, version, check;
	char *bad; /* first unknown dash option, for the error */
};

enum { KEY_HELP, KEY_VERSION, KEY_FOREGROUND, KEY_DEBUG, KEY_CHECK };

#define RAW(name, field) {name "=%s", offsetof(struct raw_opts, field), 0}
static const struct fuse_opt opt_spec[] = {
	RAW("cache_dir", cache_dir),
	RAW("cache_size", cache_size),
	RAW("index", index),
	RAW("connections", connections),
	RAW("header_file", header_file),
	RAW("log_level", log_level),
	RAW("log_file", log_file),
	RAW("echo", echo),
	RAW("echo_mode", echo_mode),
	RAW("echo_window", echo_window),
	RAW("mem_size", mem_size),
	RAW("seed", seed),
	RAW("size", size),
	RAW("crop", crop),
	RAW("flip", flip),
	RAW("augment", augment),
	RAW("format", format),
	RAW("quality", quality),
	RAW("echo_stage", echo_stage),
	RAW("threads", threads),
	RAW("max_pixels", max_pixels),
	RAW("decode_mem", decode_mem),
	RAW("rrc_scale", rrc_scale),
	RAW("rrc_ratio", rrc_ratio),
	RAW("prepared", prepared),
	RAW("prepared_size", prepared_size),
	RAW("metrics", metrics),
	RAW("ca_file", ca_file),
	RAW("ca_path", ca_path),
	RAW("read_timeout", read_timeout),
	RAW("min_rate", min_rate),
	RAW("stall_timeout", stall_timeout),
	RAW("zerocopy", zerocopy),
	RAW("layout", layout),
	RAW("mounted_at", mounted_at),
	RAW("endpoint", endpoint),
	RAW("region", region),
	RAW("profile", profile),
	RAW("path_style", path_style),
	RAW("requester_pays", requester_pays),
	RAW("no_sign", no_sign),
	RAW("rank", rank),
	RAW("world", world),
	RAW("repartition", repartition),
	RAW("exact_first", exact_first),
	RAW("exact_when_local", exact_when_local),
	FUSE_OPT_KEY("-h", KEY_HELP),
	FUSE_OPT_KEY("--help", KEY_HELP),
	FUSE_OPT_KEY("-V", KEY_VERSION),
	FUSE_OPT_KEY("--version", KEY_VERSION),
	FUSE_OPT_KEY("--check", KEY_CHECK),
	FUSE_OPT_KEY("-f", KEY_FOREGROUND),
	FUSE_OPT_KEY("-d", KEY_DEBUG),
	FUSE_OPT_KEY("debug", KEY_DEBUG),
	FUSE_OPT_END,
};

static int opt_proc(void *data, const char *arg, int key,
		    struct fuse_args *outargs)
{
	struct raw_opts *r = data;
	(void)outargs;

	switch (key) {
	case FUSE_OPT_KEY_NONOPT:
		if (r->npositional < 3)
			r->positional[r->npositional] = xstrdup(arg);
		r->npositional++;
		return 0;
	case KEY_HELP:
		r->help = 1;
		return 0;
	case KEY_VERSION:
		r->version = 1;
		return 0;
	case KEY_CHECK:
		r->check = 1;
		return 0;
	case KEY_FOREGROUND:
		r->foreground = 1;
		return 0;
	case KEY_DEBUG:
		r->debug = 1;
		r->foreground = 1;
		return 0;
	default:
		/* -o options we do not know go to libfuse (allow_other...);
		 * other dash arguments are errors. */
		if (key == FUSE_OPT_KEY_OPT && arg[0] == '-' && !r->bad) {
			r->bad = xstrdup(arg);
			return 0;
		}
		return 1;
	}
}

static char *default_cache_dir(void)
{
	const char *xdg = getenv("XDG_CACHE_HOME");
	const char *home = getenv("HOME");
	char buf[4096];

	if (geteuid() == 0)
		return xstrdup("/var/cache/echofs");
	if (xdg && xdg[0] == '/')
		snprintf(buf, sizeof(buf), "%s/echofs", xdg);
	else if (home && home[0] == '/')
		snprintf(buf, sizeof(buf), "%s/.cache/echofs", home);
	else /* per user: the store refuses a directory not the user's */
		snprintf(buf, sizeof(buf), "/tmp/echofs-cache-%u",
			 (unsigned)geteuid());
	return xstrdup(buf);
}

static void raw_free(struct raw_opts *r)
{
	free(r->layout);
	free(r->mounted_at);
	free(r->cache_dir);
	free(r->cache_size);
	free(r->index);
	free(r->connections);
	free(r->header_file);
	free(r->endpoint);
	free(r->region);
	free(r->profile);
	free(r->path_style);
	free(r->requester_pays);
	free(r->no_sign);
	free(r->log_level);
	free(r->log_file);
	free(r->echo);
	free(r->echo_mode);
	free(r->echo_window);
	free(r->mem_size);
	free(r->seed);
	free(r->size);
	free(r->crop);
	free(r->flip);
	free(r->augment);
	free(r->format);
	free(r->quality);
	free(r->echo_stage);
	free(r->threads);
	free(r->max_pixels);
	free(r->decode_mem);
	free(r->rrc_scale);
	free(r->rrc_ratio);
	free(r->prepared);
	free(r->prepared_size);
	free(r->metrics);
	free(r->ca_file);
	free(r->ca_path);
	free(r->read_timeout);
	free(r->min_rate);
	free(r->stall_timeout);
	free(r->rank);
	free(r->world);
	free(r->repartition);
	free(r->exact_first);
	free(r->exact_when_local);
	free(r->zerocopy);
	for (int i = 0; i < 3; i++)
		free(r->positional[i]);
	free(r->bad);
}

/* A real number >= 1, strictly parsed. */
static int parse_echo(const char *s, double *out)
{
	char *end;
	errno = 0;
	double v = strtod(s, &end);
	if (errno || end == s || *end || !(v >= 1.0) || v > 1000.0)
		return -EINVAL;
	*out = v;
	return 0;
}

static int convert_echo(struct raw_opts *r, struct fs_options *o, char *err,
			size_t errlen)
{
	uint64_t v;

	if (r->echo && parse_echo(r->echo, &o->echo.echo)) {
		snprintf(err, errlen, "bad echo '%s' (a number from 1 to 1000)",
			 r->echo);
		return -EINVAL;
	}
	if (r->echo_mode && dataset_echo_mode_parse(r->echo_mode, &o->echo.mode)) {
		snprintf(err, errlen,
			 "bad echo_mode '%s' (adaptive, fixed or greedy)",
			 r->echo_mode);
		return -EINVAL;
	}
	if (r->echo_window && strcmp(r->echo_window, "auto") != 0) {
		if (parse_u64(r->echo_window, &v) || v < 1 || v > 1000000) {
			snprintf(err, errlen,
				 "bad echo_window '%s' (auto, or 1 to 1000000)",
				 r->echo_window);
			return -EINVAL;
		}
		o->echo.window = (unsigned)v;
	}
	if (r->mem_size && (parse_size(r->mem_size, &o->echo.mem_size) ||
			    o->echo.mem_size < (1u << 20))) {
		snprintf(err, errlen, "bad mem_size '%s' (at least 1M)", r->mem_size);
		return -EINVAL;
	}
	if (r->seed && parse_u64(r->seed, &o->seed)) {
		snprintf(err, errlen, "bad seed '%s'", r->seed);
		return -EINVAL;
	}
	o->echo.on = o->echo.echo > 1.0 || r->echo_mode || r->echo_window ||
			r->mem_size;
	return 0;
}

/* An unsigned option within [lo, hi]; unset leaves *out alone. */
static int ranged(const char *name, const char *v, uint64_t lo, uint64_t hi,
		  unsigned *out, char *err, size_t errlen)
{
	uint64_t x;
	if (!v)
		return 0;
	if (parse_u64(v, &x) || x < lo || x > hi) {
		snprintf(err, errlen, "bad %s '%s' (%llu to %llu)", name, v,
			 (unsigned long long)lo, (unsigned long long)hi);
		return -EINVAL;
	}
	*out = (unsigned)x;
	return 0;
}

/* "LO-HI", two positive decimals with LO <= HI <= max. */
static int parse_range(const char *s, double max, double out[2])
{
	char *end;
	errno = 0;
	double lo = strtod(s, &end);
	if (errno || end == s || *end != '-')
		return -EINVAL;
	const char *h = end + 1;
	double hi = strtod(h, &end);
	if (errno || end == h || *end || !(lo > 0) || !(lo <= hi) || hi > max)
		return -EINVAL;
	out[0] = lo;
	out[1] = hi;
	return 0;
}

/* augment=rrc and its ranges (torchvision's RandomResizedCrop). */
static int convert_rrc(struct raw_opts *r, struct fs_options *o, char *err,
		       size_t errlen)
{
	if (r->rrc_scale &&
	    parse_range(r->rrc_scale, 1.0, o->image.rrc_scale) < 0) {
		snprintf(err, errlen, "bad rrc_scale '%s' (LO-HI, 0 < LO <= HI "
			 "<= 1, e.g. 0.08-1)", r->rrc_scale);
		return -EINVAL;
	}
	if (r->rrc_ratio &&
	    parse_range(r->rrc_ratio, 1000.0, o->image.rrc_ratio) < 0) {
		snprintf(err, errlen, "bad rrc_ratio '%s' (LO-HI, 0 < LO <= HI, "
			 "e.g. 0.75-1.333)", r->rrc_ratio);
		return -EINVAL;
	}
	if (o->image.rrc && !o->image.crop) {
		snprintf(err, errlen, "augment=rrc needs crop=C (the output "
			 "size)");
		return -EINVAL;
	}
	return 0;
}

/* prepared=0|1 and prepared_size= (the prepared-sample tier). */
static int convert_prepared(struct raw_opts *r, struct fs_options *o,
			    char *err, size_t errlen)
{
	unsigned on = 1;
	int ret = ranged("prepared", r->prepared, 0, 1, &on, err, errlen);
	if (ret)
		return ret;
	o->image.no_prepared = !on;
	if (r->prepared_size &&
	    (parse_size(r->prepared_size, &o->image.prepared_size) ||
	     o->image.prepared_size < (1u << 20))) {
		snprintf(err, errlen, "bad prepared_size '%s' (at least 1M)",
			 r->prepared_size);
		return -EINVAL;
	}
	return 0;
}

static int convert_prep(struct raw_opts *r, struct fs_options *o, char *err,
			size_t errlen)
{
	unsigned flip = 0, augment = 0;
	int ret;

	if (r->augment && strcmp(r->augment, "rrc") == 0) {
		o->image.rrc = 1;
		augment = 1;
		free(r->augment);
		r->augment = NULL;
	}
	if ((ret = ranged("size", r->size, 1, 16384, &o->image.size, err, errlen)) ||
	    (ret = ranged("crop", r->crop, 1, 16384, &o->image.crop, err, errlen)) ||
	    (ret = ranged("flip", r->flip, 0, 1, &flip, err, errlen)) ||
	    (ret = ranged("augment", r->augment, 0, 1, &augment, err, errlen)) ||
	    (ret = convert_rrc(r, o, err, errlen)) ||
	    (ret = convert_prepared(r, o, err, errlen)) ||
	    (ret = ranged("quality", r->quality, 1, 100, &o->image.quality,
			  err, errlen)) ||
	    (ret = ranged("threads", r->threads, 1, 64, &o->image.threads,
			  err, errlen)))
		return ret;
	o->image.flip = (int)flip;
	o->image.augment = (int)augment;
	if (r->format) {
		static const char *const names[] = {"same", "jpeg", "ppm"};
		int f = -1;
		for (int i = 0; i < 3; i++)
			if (strcmp(r->format, names[i]) == 0)
				f = i;
		if (f < 0) {
			snprintf(err, errlen, "bad format '%s' (same, jpeg or ppm)",
				 r->format);
			return -EINVAL;
		}
		o->image.format = (enum dataset_format)f;
	}
	if (r->echo_stage) {
		static const char *const stages[] = {
			"auto", "encoded", "before_augment", "after_augment"};
		int st = -1;
		for (int i = 0; i < 4; i++)
			if (strcmp(r->echo_stage, stages[i]) == 0)
				st = i;
		if (st < 0) {
			snprintf(err, errlen, "bad echo_stage '%s' (auto, encoded, "
				 "before_augment or after_augment)", r->echo_stage);
			return -EINVAL;
		}
		o->echo.stage = (enum dataset_echo_stage)st;
	}
	if (r->max_pixels && (parse_u64(r->max_pixels, &o->image.max_pixels) ||
			      o->image.max_pixels == 0)) {
		snprintf(err, errlen, "bad max_pixels '%s'", r->max_pixels);
		return -EINVAL;
	}
	if (r->decode_mem && (parse_size(r->decode_mem, &o->image.decode_mem) ||
			      o->image.decode_mem < (16u << 20))) {
		snprintf(err, errlen, "bad decode_mem '%s' (at least 16M)",
			 r->decode_mem);
		return -EINVAL;
	}
	o->image.on = o->image.size || o->image.crop || o->image.flip ||
		      o->image.format;
	return 0;
}

/* stall_timeout: whole seconds, as curl counts its low-speed time. */
static int convert_stall(const char *v, double *out, char *err, size_t errlen)
{
	char *end = NULL;
	long s;

	if (!v)
		return 0;
	errno = 0;
	s = strtol(v, &end, 10);
	if (errno || end == v || *end || s < 1 || s > 3600) {
		snprintf(err, errlen, "bad stall_timeout '%s' (whole seconds, "
			 "1 to 3600)", v);
		return -EINVAL;
	}
	*out = (double)s;
	return 0;
}

/* read_timeout (seconds), min_rate (bytes/s, K/M/G suffixes) and
 * stall_timeout (seconds). */
static int convert_timeouts(struct raw_opts *r, struct fs_options *o,
			    char *err, size_t errlen)
{
	char *end = NULL;
	uint64_t v;

	if (r->read_timeout) {
		errno = 0;
		o->read_timeout_s = strtod(r->read_timeout, &end);
		if (errno || end == r->read_timeout || *end ||
		    !(o->read_timeout_s >= 0.1) || o->read_timeout_s > 86400) {
			snprintf(err, errlen, "bad read_timeout '%s' (seconds, "
				 "0.1 to 86400)", r->read_timeout);
			return -EINVAL;
		}
	}
	if (r->min_rate) {
		if (parse_size(r->min_rate, &v) || v < 1 || v > (1ULL << 40)) {
			snprintf(err, errlen, "bad min_rate '%s' (bytes/s, e.g. "
				 "64K)", r->min_rate);
			return -EINVAL;
		}
		o->min_rate = (double)v;
	}
	return convert_stall(r->stall_timeout, &o->stall_timeout_s, err,
			     errlen);
}

/* A 0/1 switch; NULL leaves *out alone. */
static int flag01(const char *name, const char *v, int *out, char *err,
		  size_t errlen)
{
	if (!v)
		return 0;
	if (strcmp(v, "0") && strcmp(v, "1")) {
		snprintf(err, errlen, "bad %s '%s' (0 or 1)", name, v);
		return -EINVAL;
	}
	*out = v[0] == '1';
	return 0;
}

static int convert_s3(struct raw_opts *r, struct fs_options *o, char *err,
		      size_t errlen)
{
	if (flag01("path_style", r->path_style, &o->path_style, err, errlen) ||
	    flag01("requester_pays", r->requester_pays, &o->requester_pays,
		   err, errlen) ||
	    flag01("no_sign", r->no_sign, &o->no_sign, err, errlen))
		return -EINVAL;
	/* which backends these go to is the dataset's choice (it knows the
	 * URL schemes): fs/ only parses them */
	return 0;
}

/* One of rank/world: the option, else the environment variable (so a
 * Slurm or Kubernetes launcher can set it), else def. */
static int rank_world(const char *name, const char *opt, const char *env,
		      uint64_t def, uint64_t *out, char *err, size_t errlen)
{
	const char *v = opt ? opt : getenv(env);

	*out = def;
	if (!v || (!opt && !v[0]))
		return 0;
	if (parse_u64(v, out) || *out > DATASET_WORLD_MAX) {
		snprintf(err, errlen, "bad %s '%s'%s%s (0 to %u)", name, v,
			 opt ? "" : " from ", opt ? "" : env, DATASET_WORLD_MAX);
		return -EINVAL;
	}
	return 0;
}

/* rank, world, repartition (and exact_first and exact_when_local, flags
 * of echo mounts); rank < world checked here, world <= shards once the index is
 * loaded. */
static int convert_nodes(struct raw_opts *r, struct fs_options *o, char *err,
			 size_t errlen)
{
	uint64_t rank, world;
	int exact_first = -1, when_local = 1;

	if (rank_world("rank", r->rank, "ECHOFS_RANK", 0, &rank, err, errlen) ||
	    rank_world("world", r->world, "ECHOFS_WORLD", 1, &world, err,
		       errlen) ||
	    flag01("repartition", r->repartition, &o->echo.repartition, err,
		   errlen) ||
	    flag01("exact_first", r->exact_first, &exact_first, err, errlen) ||
	    flag01("exact_when_local", r->exact_when_local, &when_local, err,
		   errlen))
		return -EINVAL;
	/* repartition=1 exists to bring other parts' samples in; serving the
	 * own part first would keep them out, so it defaults exact_first to 0 */
	if (exact_first < 0)
		exact_first = !o->echo.repartition;
	o->echo.no_exact_first = !exact_first;
	o->echo.no_exact_when_local = !when_local;
	if (world == 0) {
		snprintf(err, errlen, "bad world 0 (at least 1)");
		return -EINVAL;
	}
	if (rank >= world) {
		snprintf(err, errlen, "rank %llu is not below world %llu "
			 "(ranks count from 0)", (unsigned long long)rank,
			 (unsigned long long)world);
		return -EINVAL;
	}
	o->rank = (uint32_t)rank;
	o->world = (uint32_t)world;
	return 0;
}

/* Turn the raw strings into checked values. */
static int convert(struct raw_opts *r, struct fs_options *o, char *err,
		   size_t errlen)
{
	uint64_t v;

	if (r->cache_size) {
		if (parse_size(r->cache_size, &o->cache_size) != 0) {
			snprintf(err, errlen, "bad cache_size '%s' (use e.g. 512M, 20G)",
				 r->cache_size);
			return -EINVAL;
		}
	}
	if (r->connections) {
		if (parse_u64(r->connections, &v) != 0 || v < 1 || v > 256) {
			snprintf(err, errlen, "bad connections '%s' (1 to 256)",
				 r->connections);
			return -EINVAL;
		}
		o->connections = (unsigned)v;
	}
	if (r->log_level && log_parse_level(r->log_level, &o->log_level)) {
		snprintf(err, errlen,
			 "bad log_level '%s' (error, warn, info or debug)",
			 r->log_level);
		return -EINVAL;
	}
	if (r->debug)
		o->log_level = LOG_LEVEL_DEBUG;
	if (r->metrics && metrics_check_addr(r->metrics, err, errlen) != 0)
		return -EINVAL;
	o->zerocopy = 1;
	if (r->zerocopy) {
		if (parse_u64(r->zerocopy, &v) != 0 || v > 1) {
			snprintf(err, errlen, "bad zerocopy '%s' (0 or 1)",
				 r->zerocopy);
			return -EINVAL;
		}
		o->zerocopy = (int)v;
	}
	int ret = convert_echo(r, o, err, errlen);
	if (ret == 0)
		ret = convert_timeouts(r, o, err, errlen);
	if (!ret)
		ret = convert_s3(r, o, err, errlen);
	if (!ret)
		ret = convert_nodes(r, o, err, errlen);
	return ret ? ret : convert_prep(r, o, err, errlen);
}

static const char *kind_of(mode_t m)
{
	return S_ISFIFO(m)   ? "a FIFO"
	       : S_ISSOCK(m) ? "a socket"
	       : S_ISCHR(m)  ? "a character device"
	       : S_ISBLK(m)  ? "a block device"
	       : S_ISDIR(m)  ? "a directory"
			     : "a special file";
}

/* A user-named input read whole at mount (a shard list, index=,
 * header_file=) must be a regular file: reading a FIFO would wait for a
 * writer, a device may never end. Refused here, where the message can
 * name the option; the readers refuse them too (file_read_all opens
 * without blocking), which covers a file swapped after this check. A
 * missing file is left to the reader's own message. */
static int check_input(const char *what, const char *path, char *err,
		       size_t errlen)
{
	struct stat st;

	if (!path || strstr(path, "://") || stat(path, &st) != 0 ||
	    S_ISREG(st.st_mode))
		return 0;
	snprintf(err, errlen, "%s%s: %s, not a regular file", what, path,
		 kind_of(st.st_mode));
	return -EINVAL;
}

static int check_inputs(const struct raw_opts *r, char *err, size_t errlen)
{
	int ret = check_input("SOURCE ", r->positional[0], err, errlen);

	if (!ret)
		ret = check_input("index=", r->index, err, errlen);
	if (!ret)
		ret = check_input("header_file=", r->header_file, err, errlen);
	return ret;
}

/* The forced mount options, with the source (credentials and query
 * removed) as fsname, so /proc/mounts and df name what is mounted as sshfs
 * and rclone do. fuse_opt splits on ',' and reads '\\' as an escape. */
static int add_mount_opts(struct fuse_args *args, const struct fs_options *o)
{
	char red[1024], opts[2300];
	size_t n = (size_t)snprintf(opts, sizeof(opts), "%s,nosuid,nodev,"
				    "default_permissions,subtype=echofs,fsname=",
				    o->echo.on ? "rw" : "ro");

	dataset_redact(o->source, red, sizeof(red));
	for (const char *p = red; *p && n + 3 < sizeof(opts); p++) {
		if (*p == ',' || *p == '\\')
			opts[n++] = '\\';
		opts[n++] = *p;
	}
	opts[n] = '\0';
	return fuse_opt_add_arg(args, opts);
}

static void take(char **dst, char **src)
{
	*dst = *src;
	*src = NULL;
}

/* The first non-empty of the variables, copied, or NULL. */
static char *env_first(const char *const *names)
{
	for (; *names; names++) {
		const char *v = getenv(*names);
		if (v && v[0])
			return xstrdup(v);
	}
	return NULL;
}

/* -o ca_file/ca_path, else what curl's tool and the AWS SDKs honour. */
static void take_ca(struct fs_options *o, struct raw_opts *r)
{
	static const char *const files[] = {"AWS_CA_BUNDLE", "CURL_CA_BUNDLE",
					    "SSL_CERT_FILE", NULL};
	static const char *const dirs[] = {"SSL_CERT_DIR", NULL};

	take(&o->ca_file, &r->ca_file);
	take(&o->ca_path, &r->ca_path);
	if (!o->ca_file && !o->ca_path) {
		o->ca_file = env_first(files);
		o->ca_path = env_first(dirs);
	}
}

/* layout=imagefolder (default) or samples. A samples layout echo mount
 * echoes whole samples (fs/visits.h); preprocessing is refused (it
 * changes an image member's name and bytes while its siblings are served
 * as they are), as is repartition (the pool's partition weighs samples,
 * not keys). */
static int convert_layout(struct raw_opts *r, struct fs_options *o, char *err,
			  size_t errlen)
{
	o->layout = FS_LAYOUT_IMAGEFOLDER;
	if (!r->layout || strcmp(r->layout, "imagefolder") == 0)
		return 0;
	if (strcmp(r->layout, "samples") != 0) {
		snprintf(err, errlen, "bad layout '%s' (imagefolder or samples)",
			 r->layout);
		return -EINVAL;
	}
	o->layout = FS_LAYOUT_SAMPLES;
	if (o->image.on) {
		snprintf(err, errlen, "layout=samples serves members as they "
				      "are: size, crop, flip and format need "
				      "layout=imagefolder");
		return -EINVAL;
	}
	if (o->echo.on && o->echo.repartition) {
		snprintf(err, errlen, "layout=samples echoes the rank's own "
				      "part: repartition needs "
				      "layout=imagefolder");
		return -EINVAL;
	}
	return 0;
}

/* MOUNTPOINT /dev/fd/N (exactly libfuse's form: digits, nothing after)
 * sets fuse_fd; -o mounted_at= goes with it and nothing else. Descriptors
 * 0 to 2 are refused: a background start points them at /dev/null. */
static int convert_fd(struct raw_opts *r, struct fs_options *o, char *err,
		      size_t errlen)
{
	const char *mp = r->positional[1], *digits;
	uint64_t n;

	o->fuse_fd = -1;
	if (mp && strncmp(mp, "/dev/fd/", 8) == 0) {
		digits = mp + 8;
		if (digits[0] < '0' || digits[0] > '9' ||
		    parse_u64(digits, &n) || n > INT_MAX) {
			snprintf(err, errlen,
				 "bad MOUNTPOINT %s (/dev/fd/N: N the "
				 "number of an open /dev/fuse descriptor)",
				 mp);
			return -EINVAL;
		}
		if (n < 3) {
			snprintf(err, errlen,
				 "MOUNTPOINT %s: pass the FUSE "
				 "descriptor as 3 or above (0 to 2 are stdin, "
				 "stdout and stderr)",
				 mp);
			return -EINVAL;
		}
		o->fuse_fd = (int)n;
	}
	if (r->mounted_at && o->fuse_fd < 0) {
		snprintf(err, errlen,
			 "mounted_at= names where a /dev/fd/N "
			 "MOUNTPOINT is mounted; MOUNTPOINT here is %s",
			 mp);
		return -EINVAL;
	}
	if (r->mounted_at && r->mounted_at[0] != '/') {
		snprintf(err, errlen, "mounted_at=%s: an absolute path, please",
			 r->mounted_at);
		return -EINVAL;
	}
	return 0;
}

int options_parse(struct fuse_args *args, struct fs_options *o, char *err,
		  size_t errlen)
{
	struct raw_opts r = {0};
	int ret = -EINVAL;

	memset(o, 0, sizeof(*o));
	o->cache_size = FS_DEFAULT_CACHE_SIZE;
	o->connections = FS_DEFAULT_CONNECTIONS;
	o->log_level = LOG_LEVEL_INFO;
	o->echo.echo = 1.0;
	o->echo.mode = DATASET_ECHO_ADAPTIVE;
	o->read_timeout_s = FS_DEFAULT_READ_TIMEOUT_S;
	o->min_rate = FS_DEFAULT_MIN_RATE;
	o->stall_timeout_s = FS_DEFAULT_STALL_TIMEOUT_S;
	o->world = 1;
	o->fuse_fd = -1;
	err[0] = '\0';

	if (fuse_opt_parse(args, &r, opt_spec, opt_proc) != 0) {
		snprintf(err, errlen, "cannot parse the command line");
		goto out;
	}
	o->show_help = r.help;
	o->show_version = r.version;
	o->foreground = r.foreground;
	o->debug = r.debug;
	o->check = r.check;
	if (r.help || r.version) {
		ret = 0;
		goto out;
	}
	if (r.bad) {
		snprintf(err, errlen, "unknown option '%s' (see --help)", r.bad);
		goto out;
	}
	if (r.check && r.npositional != 1) {
		snprintf(err, errlen, "--check takes SOURCE alone, got %d argument%s",
			 r.npositional, r.npositional == 1 ? "" : "s");
		goto out;
	}
	if (!r.check && r.npositional != 2) {
		snprintf(err, errlen, "expected SOURCE and MOUNTPOINT, got %d argument%s",
			 r.npositional, r.npositional == 1 ? "" : "s");
		goto out;
	}
	ret = convert(&r, o, err, errlen);
	if (!ret)
		ret = convert_layout(&r, o, err, errlen);
	if (!ret)
		ret = check_inputs(&r, err, errlen);
	if (!ret && !r.check)
		ret = convert_fd(&r, o, err, errlen);
	if (ret)
		goto out;
	take(&o->source, &r.positional[0]);
	if (!r.check)
		take(&o->mountpoint, &r.positional[1]);
	take(&o->index, &r.index);
	take(&o->header_file, &r.header_file);
	take(&o->endpoint, &r.endpoint);
	take(&o->region, &r.region);
	take(&o->profile, &r.profile);
	take(&o->log_file, &r.log_file);
	take(&o->metrics, &r.metrics);
	take(&o->mounted_at, &r.mounted_at);
	take_ca(o, &r);
	take(&o->cache_dir, &r.cache_dir);
	if (!o->cache_dir)
		o->cache_dir = default_cache_dir();
	/* Read-only whatever the user passes: later -o values win in libfuse,
	 * so these go last. An echo mount is not "ro" for the kernel, so that
	 * .echofs/config can be written; echofs itself refuses every other
	 * write with EROFS. default_permissions makes the kernel check modes
	 * (config is 0600, the mounting user's) before echofs checks the uid. */
	if (fuse_opt_add_arg(args, "-o") ||
	    add_mount_opts(args, o)) {
		snprintf(err, errlen, "out of memory");
		ret = -ENOMEM;
		goto out;
	}
	if (o->debug && fuse_opt_add_arg(args, "-d")) {
		ret = -ENOMEM;
		goto out;
	}
	ret = 0;
out:
	raw_free(&r);
	return ret;
}

void options_free(struct fs_options *o)
{
	if (!o)
		return;
	free(o->source);
	free(o->mountpoint);
	free(o->cache_dir);
	free(o->index);
	free(o->header_file);
	free(o->endpoint);
	free(o->region);
	free(o->profile);
	free(o->log_file);
	free(o->metrics);
	free(o->mounted_at);
	free(o->ca_file);
	free(o->ca_path);
	memset(o, 0, sizeof(*o));
}

void options_usage(FILE *f, const char *prog)
{
	fprintf(f,
"usage: %s [options] SOURCE MOUNTPOINT\n"
"\n"
"Mount WebDataset tar shards served over HTTP(S) as a read-only ImageFolder\n"
"tree MOUNTPOINT/<class>/<key>.<ext>. Unmount with: fusermount3 -u MOUNTPOINT\n"
"\n"
"SOURCE  an http(s) URL of tar shards with bash-style brace ranges, e.g.\n"
"        'http://host/ds/train-{000000..000059}.tar', or the path or URL of a\n"
"        text file listing one shard URL a line; or s3://BUCKET/KEY with brace\n"
"        ranges, s3://BUCKET/PREFIX/ (every .tar under PREFIX) or\n"
"        s3://BUCKET/PREFIX/*.tar (listed with ListObjectsV2); gs:// the same\n"
"        through the GCS XML API\n"
"MOUNTPOINT  a directory; or /dev/fd/N, a /dev/fuse descriptor that\n"
"        another (privileged) process opened and mounted, inherited as N:\n"
"        echofs then needs no privilege and does not unmount (its mounter\n"
"        does); see -o mounted_at\n"
"\n"
"options:\n"
"  -o cache_dir=DIR     shard cache directory (default /var/cache/echofs for\n"
"                       root, else $XDG_CACHE_HOME/echofs or ~/.cache/echofs,\n"
"                       else /tmp/echofs-cache-UID); DIR, DIR/shards and\n"
"                       DIR/prepared must be the mounting user's, not\n"
"                       symlinks, not writable by group or others (DIR alone\n"
"                       may be sticky, like /tmp), or the mount refuses\n"
"  -o cache_size=SIZE   cache size cap, K/M/G/T suffixes (default 10G)\n"
"  -o index=URL|PATH    dataset index written by echofs-index (default: the\n"
"                       cached one, else <stem>.echofs-index beside the shards,\n"
"                       else built by streaming every shard once)\n"
"  -o connections=N     HTTP transfers in flight (default 8)\n"
"  -o header_file=PATH  extra HTTP headers ('Name: value' lines), e.g.\n"
"                       Authorization; read from the file, never from argv\n"
"  -o read_timeout=S    a read waits at most S seconds for its data, then\n"
"                       fails with ETIMEDOUT (default 30)\n"
"  -o min_rate=RATE     slowest transfer worth waiting for, bytes/s averaged\n"
"                       over 10 s, K/M suffixes (default 64K); slower ones\n"
"                       are broken off and resumed, within a total deadline\n"
"  -o stall_timeout=S   a transfer that receives nothing for S seconds is\n"
"                       broken off and resumed; a bucket listing that\n"
"                       brings no new shard for S seconds fails (default 10)\n"
"  -o zerocopy=0|1      cold reads of cached files spliced from the cache\n"
"                       file, checked first (default 1; 0: copied)\n"
"  -o layout=L          imagefolder (default: <class>/<key>.<ext>, one image\n"
"                       per labelled sample) or samples (every member of\n"
"                       every sample at <key>.<ext>; echo substitutes whole\n"
"                       samples; no preprocessing)\n"
"  -o endpoint=URL      S3-compatible endpoint (MinIO, Ceph, R2, GCS); default\n"
"                       AWS_ENDPOINT_URL_S3, AWS_ENDPOINT_URL, the profile's\n"
"                       endpoint_url, else AWS\n"
"  -o region=REGION     S3 signing region (default AWS_REGION,\n"
"                       AWS_DEFAULT_REGION, the profile's region, else\n"
"                       the bucket's own from one HEAD)\n"
"  -o profile=NAME      AWS profile (default AWS_PROFILE, else default)\n"
"  -o path_style=1      S3 path-style URLs (host/bucket/key) instead of\n"
"                       virtual-hosted (bucket.host/key)\n"
"  -o requester_pays=1  send x-amz-request-payer: requester\n"
"  -o no_sign=1         anonymous S3 requests (public buckets)\n"
"                       (gs:// sources: endpoint= and no_sign=1 apply to GCS;\n"
"                       default endpoint https://storage.googleapis.com)\n"
"  -o log_level=LEVEL   error, warn, info (default) or debug\n"
"  -o log_file=PATH     log here (default: stderr with -f, else syslog)\n"
,
		prog);
	fputs(
"  -o echo=E            data echoing: each open of <class>/<key> may return\n"
"                       a recently served sample of that class, up to E uses\n"
"                       per sample on average (default 1: exact mount)\n"
"  -o echo_mode=MODE    adaptive (default: echo only while it keeps the\n"
"                       fresh rate: a governor measures fresh samples/s\n"
"                       and picks the factor, 1 to E, that holds 0.95 of\n"
"                       the best), greedy (echo whenever no fresh sample\n"
"                       is ready; can slow a CPU-bound job) or fixed\n"
"                       (every sample served E times; can slow one too)\n"
"  -o echo_window=N     never echo a sample served in the last N opens of\n"
"                       its class, at most half the class's samples held\n"
"                       (default auto: that half)\n"
"  -o mem_size=SIZE     memory for the echo pool (default 512M)\n"
"  -o seed=N            seed of the stream order and echo choices (default 0)\n",
	      f);
	/* In parts: C99 compilers need to take only 4095-byte strings. */
	fputs("  -o exact_first=0     adaptive mode: echo even paths whose own "
	      "sample is\n"
	      "                       on local disk (default 1: such a path is "
	      "served its\n"
	      "                       own sample, as an exact mount would, and "
	      "echoes\n"
	      "                       fill only opens that would wait for the "
	      "network;\n"
	      "                       not with augment=; repartition=1 makes "
	      "it 0)\n"
	      "  -o exact_when_local=0 adaptive mode with exact first: keep "
	      "asking for\n"
	      "                       opens when every shard is on local disk "
	      "(default\n"
	      "                       1: the mount then serves every path its "
	      "own sample\n"
	      "                       for good, with no OPEN or RELEASE, as "
	      "an exact\n"
	      "                       mount; a bad image reads a good one of "
	      "its class;\n"
	      "                       .echofs/config can no longer change "
	      "echo)\n"
	      "  -o rank=R            this node's rank, 0 to W-1 (default "
	      "$ECHOFS_RANK, else\n"
	      "                       0): the mount shows rank R's part of the "
	      "dataset\n"
	      "  -o world=W           number of nodes sharing the dataset "
	      "(default\n"
	      "                       $ECHOFS_WORLD, else 1); each shard goes "
	      "to one rank\n"
	      "  -o repartition=1     echo mounts: a new partition every pass "
	      "(default 0)\n",
	      f);
	fputs(
"  -o size=S            preprocess: resize so the shorter side is S\n"
"  -o crop=C            preprocess: C x C crop (centre; random on echo mounts\n"
"                       with augment=1)\n"
"  -o flip=1            preprocess: random horizontal flip (echo mounts with\n"
"                       augment=1)\n"
"  -o augment=1         draw a new crop/flip for every serve (echo mounts)\n"
"                       (augment=rrc: torchvision's RandomResizedCrop to\n"
"                       crop x crop instead of a fixed-size crop)\n"
"  -o rrc_scale=LO-HI   augment=rrc: area fraction range (default 0.08-1)\n"
"  -o rrc_ratio=LO-HI   augment=rrc: aspect ratio range, drawn log-uniformly\n"
"                       (default 0.75-1.333, i.e. 3/4-4/3)\n"
"  -o format=FMT        same (original bytes, default), jpeg or ppm\n"
"  -o quality=Q         JPEG quality for format=jpeg (default 90)\n"
"  -o echo_stage=STAGE  what the pool keeps: encoded (the sample's bytes,\n"
"                       made anew at every serve), before_augment (decoded,\n"
"                       resized pixels) or after_augment (final bytes);\n"
"                       auto (default): encoded in adaptive mode, else\n"
"                       before_augment\n"
"  -o prepared=0        preprocess: decode every pass instead of keeping each\n"
"                       sample's decoded, resized image in cache_dir/prepared\n"
"                       (default 1: on for size= with format=jpeg or ppm)\n"
"  -o prepared_size=SIZE cap of cache_dir/prepared (default: cache_size)\n"
"  -o threads=N         decode worker threads (default: cores)\n"
"  -o max_pixels=N      refuse images declaring more pixels (default 64000000)\n"
"  -o decode_mem=SIZE   memory the decode workers may use at once (default\n"
"                       256M); an image needing more alone fails with EIO\n"
"  -o ca_file=PATH      CA bundle to trust instead of the system bundle\n"
"                       (as curl --cacert; else $AWS_CA_BUNDLE,\n"
"                       $CURL_CA_BUNDLE, $SSL_CERT_FILE)\n"
"  -o ca_path=DIR       hashed CA directory to trust (as curl --capath;\n"
"                       else $SSL_CERT_DIR)\n"
"  -o mounted_at=PATH   with MOUNTPOINT /dev/fd/N: where that mount is, for\n"
"                       messages and the lazy-unmount check (a descriptor\n"
"                       does not tell)\n"
"  -o metrics=ADDR:PORT serve Prometheus metrics at http://ADDR:PORT/metrics\n"
"                       (PORT alone: 127.0.0.1; [::1]:PORT for IPv6), and\n"
"                       /healthz: 200 while the tree is mounted, else 503\n"
"  -o allow_other       let other users read the mount (libfuse option)\n"
"  -f                   stay in the foreground\n"
"  -d                   debug: foreground, log_level=debug, libfuse tracing\n"
"  -h, --help           this help\n"
"  -V, --version        versions of echofs and of the libraries it uses\n"
"      --check          with SOURCE alone: say whether the source is\n"
"                       reachable, which index a mount would use, and how\n"
"                       fast a shard comes; mounts nothing, writes nothing\n"
"\n"
"The mount is read-only (ro,nosuid,nodev; an echo mount is rw for the kernel\n"
"only so that MOUNTPOINT/.echofs/config can be written). Statistics:\n"
"MOUNTPOINT/.echofs/stats (JSON) and .echofs/stats.prom (Prometheus).\n"
"SIGTERM, SIGINT (and SIGHUP with -f) unmount and exit 0 within 2 s,\n"
"cancelling reads and transfers in progress. SIGUSR1 (and SIGHUP in the\n"
"background) reopens log_file; other user signals are logged and ignored.\n"
"echofs refuses to mount over another FUSE mount, live or dead; clear it\n"
"with: fusermount3 -u MOUNTPOINT\n",
	      f);
}
