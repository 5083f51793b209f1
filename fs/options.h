/* options.h - the command line: `echofs [options] SOURCE MOUNTPOINT`, with
 * echofs's own -o options taken out and the rest left for libfuse. */
#ifndef ECHOFS_OPTIONS_H
#define ECHOFS_OPTIONS_H

#include "common/attrs.h"
#include <stdint.h>
#include <stdio.h>

#include "cache/dataset_opts.h"
#include "common/log.h"

#define FS_DEFAULT_CACHE_SIZE (10ULL << 30)
#define FS_DEFAULT_CONNECTIONS 8
#define FS_DEFAULT_READ_TIMEOUT_S 30.0
#define FS_DEFAULT_MIN_RATE (64.0 * 1024)
#define FS_DEFAULT_STALL_TIMEOUT_S 10.0

struct fuse_args;

/* What the tree shows (-o layout). */
enum fs_layout {
	FS_LAYOUT_IMAGEFOLDER, /* <class>/<key>.<image ext>, labelled only */
	FS_LAYOUT_SAMPLES,     /* every member at <key>.<ext> */
};

struct fs_options {
	char *source;      /* SOURCE as given (owned) */
	char *mountpoint;  /* MOUNTPOINT as given (owned) */
	/* MOUNTPOINT /dev/fd/N: N, the FUSE descriptor another process opened
	 * and mounted (libfuse's convention); else -1. */
	int fuse_fd;
	/* -o mounted_at=PATH (owned, or NULL): where that descriptor's mount
	 * is, for messages and mountinfo checks; echofs cannot learn it from
	 * the descriptor. Only with /dev/fd/N. */
	char *mounted_at;
	char *cache_dir;   /* owned; a default is filled in when not given */
	uint64_t cache_size;
	char *index;       /* index= URL or path, or NULL (owned) */
	unsigned connections;
	char *header_file; /* owned or NULL */
	/* CA bundle and directory: -o ca_file/ca_path, else the environment
	 * (AWS_CA_BUNDLE, CURL_CA_BUNDLE, SSL_CERT_FILE; SSL_CERT_DIR); owned,
	 * NULL for the system's. */
	char *ca_file, *ca_path;
	enum log_level log_level;
	char *log_file;    /* owned or NULL */
	/* Echoing: an echo mount (echo.on) when echo > 1 or echo_mode,
	 * echo_window or mem_size is given; echo_stage and repartition too. */
	struct dataset_echo_opts echo;
	uint64_t seed;
	/* Many nodes: this mount is rank `rank` of `world` (-o rank/world,
	 * else ECHOFS_RANK/ECHOFS_WORLD; 0 of 1 by default); repartition=1
	 * (echo.repartition) gives the echo pool a new part every pass. */
	uint32_t rank, world;
	/* Preprocessing (image.on when size, crop, flip or format is set). */
	struct dataset_image_opts image;
	char *metrics;     /* -o metrics=ADDR:PORT, owned, or NULL */
	double read_timeout_s; /* longest a read waits for its data */
	double min_rate;       /* bytes/s below which a transfer is resumed */
	double stall_timeout_s; /* no byte this long: transfer resumed */
	int zerocopy;          /* -o zerocopy: splice cold reads (default 1) */
	enum fs_layout layout; /* -o layout (default imagefolder) */
	/* Bucket sources (s3://, gs://): the dataset gives these to the
	 * backends the source needs (cache/dataset_opts.h) */
	char *endpoint, *region, *profile; /* owned or NULL */
	int path_style, requester_pays, no_sign;
	int foreground;
	int debug;
	int show_help;
	int show_version;
	int check;         /* --check: SOURCE alone, no mount */
};

/* Parse argv. Our options are removed from `args`, which keeps what libfuse
 * should see (e.g. -o allow_other); the forced mount options
 * (ro,nosuid,nodev,fsname,subtype) are appended. Returns 0, or -EINVAL with
 * a one-line reason in err. Free with options_free even on error. */
MUST_CHECK
int options_parse(struct fuse_args *args, struct fs_options *o, char *err,
		  size_t errlen);
void options_free(struct fs_options *o);
void options_usage(FILE *f, const char *prog);

#endif
