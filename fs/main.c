/* main.c - echofs: mount WebDataset tar shards served over HTTP(S) as a
 * read-only ImageFolder tree. Start-up order matters: parse, fork (no thread
 * exists yet), build the index and tree, mount, release the parent, loop. */
#define FUSE_USE_VERSION 314
#include <errno.h>
#include <fuse_log.h>
#include <fuse_lowlevel.h>
#include <limits.h>
#include <malloc.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "cache/dataset.h"
#include "common/log.h"
#include "common/util.h"
#include "fs/bindings.h"
#include "fs/inval.h"
#include "fs/control.h"
#include "fs/daemon.h"
#include "fs/metrics.h"
#include "fs/mounts.h"
#include "fs/namespace.h"
#include "fs/ops.h"
#include "fs/options.h"
#include "fs/push.h"
#include "fs/visits.h"

/* Retries at mount time stop sooner, so a refused connection fails the
 * mount in about 6 s (a server that never answers: stall_timeout, 10 s by
 * default); once mounted, a read may retry for up to 30 s. */
#define BOOT_RETRY_BUDGET_S 6.0
#define RUN_RETRY_BUDGET_S 30.0
#define CACHE_TIMEOUT_S 86400.0
/* A read waiting this long for a whole-shard stream takes a range GET. */
#define RANGE_AFTER_S 0.3
/* An echo binding nobody opens within this long (ls -l) goes back. */
#define BINDING_EXPIRE_S 5.0

struct app {
	struct fs_options o;
	struct dataset *ds;
	struct namespace *ns;
	struct control *ctl;
	struct push *push;
	struct bindings *bind;   /* echo mounts only */
	struct inval *inval;     /* echo mounts binding at lookup only */
	struct metrics *metrics; /* -o metrics= only */
	struct fs_ctx fs;
	struct fuse_session *se;
	struct fuse_loop_config *loop_cfg; /* made before the mount */
};

/* libfuse writes one line in several calls: the pieces are gathered here
 * (under fuse_log_lock) and logged as one line. The last error line is kept
 * for the one-line error of a failed start. */
static pthread_mutex_t fuse_log_lock = PTHREAD_MUTEX_INITIALIZER;
static char fuse_line[512];
static char fuse_last_error[512];
static int fuse_log_quiet; /* 1 while options are tried: keep, don't log */

static void fuse_log_to_ours(enum fuse_log_level level, const char *fmt,
			     va_list ap)
{
	size_t n;

	pthread_mutex_lock(&fuse_log_lock);
	n = strlen(fuse_line);
	vsnprintf(fuse_line + n, sizeof(fuse_line) - n, fmt, ap);
	n = strlen(fuse_line);
	if (n && fuse_line[n - 1] != '\n' && n + 1 < sizeof(fuse_line)) {
		pthread_mutex_unlock(&fuse_log_lock);
		return; /* more of this line to come */
	}
	while (n && fuse_line[n - 1] == '\n')
		fuse_line[--n] = '\0';
	if (level <= FUSE_LOG_ERR)
		memcpy(fuse_last_error, fuse_line, n + 1);
	if (!fuse_log_quiet)
		log_msg(level <= FUSE_LOG_ERR ? LOG_LEVEL_ERROR
			: level <= FUSE_LOG_WARNING ? LOG_LEVEL_WARN
			: level <= FUSE_LOG_INFO ? LOG_LEVEL_INFO : LOG_LEVEL_DEBUG,
			"libfuse: %s", fuse_line);
	fuse_line[0] = '\0';
	pthread_mutex_unlock(&fuse_log_lock);
}

/* Bindings hook (echo before augment): a new crop/flip for every serve. */
static int augment_binding(void *ud, const uint8_t *data, size_t len,
			   uint64_t rand, uint8_t **out, size_t *outlen)
{
	return dataset_echo_augment(ud, data, len, rand, out, outlen);
}

/* Render hooks (echo before augment, format=ppm): each READ renders its
 * slice of the binding's crop/flip straight into the reply buffer. */
static ssize_t augment_size(void *ud, const uint8_t *data, size_t len)
{
	return dataset_echo_render_size(ud, data, len);
}

static ssize_t augment_range(void *ud, const uint8_t *data, size_t len,
			     uint64_t rand, uint64_t off, uint8_t *dst,
			     size_t n)
{
	return dataset_echo_render_range(ud, data, len, rand, off, dst, n);
}

/* The samples layout's echo mount: the pool streams one member per key,
 * and the bindings take through the keys' visits (fs/visits.h). */
static int start_visits(struct app *a, char *err, size_t errlen)
{
	struct visits *v;
	int r;

	r = visits_start(a->ds, a->ns, &v, err, errlen);
	if (r)
		return r;
	r = bindings_start(a->ds, a->ns, ns_file_ino(a->ns,
						     (uint32_t)a->ns->nfiles),
			   BINDING_EXPIRE_S, NULL, NULL, &a->bind);
	if (r) {
		visits_free(v);
		snprintf(err, errlen, "cannot start bindings: %s",
			 strerror(-r));
		return r;
	}
	bindings_set_visits(a->bind, v);
	log_info("echo mount: echo=%g echo_mode=%s, whole samples",
		 a->o.echo.echo, dataset_echo_mode_name(a->o.echo.mode));
	return 0;
}

/* The echo pool and path bindings of an echo mount: the pool serves the
 * tree's classes. */
static int start_echo(struct app *a, char *err, size_t errlen)
{
	const struct namespace *ns = a->ns;
	size_t nsamples = dataset_nsamples(a->ds);
	enum dataset_echo_serve serve = dataset_echo_serving(a->ds);
	uint32_t *class_of;
	ssize_t fixed;
	int r;

	if (a->o.layout == FS_LAYOUT_SAMPLES)
		return start_visits(a, err, errlen);
	class_of = xmalloc((nsamples ? nsamples : 1) * sizeof(*class_of));
	for (size_t i = 0; i < nsamples; i++) {
		uint32_t c = ns_sample_class(ns, (uint32_t)i);
		class_of[i] = c != NS_NO_CLASS ? c : DATASET_NO_CLASS;
	}
	r = dataset_echo_start(a->ds, class_of, (uint32_t)ns->nclasses, err,
			       errlen);
	free(class_of);
	if (r)
		return r;
	r = bindings_start(a->ds, ns, ns_file_ino(ns, (uint32_t)ns->nfiles),
			   BINDING_EXPIRE_S,
			   serve == DATASET_SERVE_AUGMENT ? augment_binding
							  : NULL,
			   a->ds, &a->bind);
	if (r) {
		snprintf(err, errlen, "cannot start bindings: %s",
			 strerror(-r));
		return r;
	}
	if (serve == DATASET_SERVE_DECODE)
		bindings_set_decode(a->bind);
	if (serve == DATASET_SERVE_RENDER)
		bindings_set_render(a->bind, &(struct bindings_render){
			.size = augment_size, .range = augment_range,
			.ud = a->ds});
	/* Every rendering one size, small enough for one store: bind at open
	 * (bindings.h), so reopening a path costs no LOOKUP. */
	fixed = dataset_output_fixed_size(a->ds);
	if (serve != DATASET_SERVE_AUGMENT && fixed > 0 &&
	    fixed <= (ssize_t)FS_READAHEAD)
		bindings_bind_at_open(a->bind, (uint64_t)fixed, fs_store_binding,
				      &a->fs);
	log_info("echo mount: echo=%g echo_mode=%s", a->o.echo.echo,
		 dataset_echo_mode_name(a->o.echo.mode));
	return 0;
}

/* Everything before the mount: the dataset (HTTP, cache, index, shard
 * readers), the tree, the echo pool or the preprocessing. */
static struct dataset_opts dataset_opts_of(const struct fs_options *o)
{
	struct dataset_opts d = {
		.source = o->source, .index = o->index,
		.cache_dir = o->cache_dir, .cache_size = o->cache_size,
		.connections = o->connections,
		.header_file = o->header_file,
		.ca_file = o->ca_file, .ca_path = o->ca_path,
		.min_rate = o->min_rate, .read_timeout_s = o->read_timeout_s,
		.stall_timeout_s = o->stall_timeout_s,
		.s3 = {.endpoint = o->endpoint, .region = o->region,
		       .profile = o->profile, .path_style = o->path_style,
		       .requester_pays = o->requester_pays,
		       .no_sign = o->no_sign},
		.gcs = {.endpoint = o->endpoint,
			.no_sign = o->no_sign},
		.boot_retry_budget_s = BOOT_RETRY_BUDGET_S,
		.run_retry_budget_s = RUN_RETRY_BUDGET_S,
		.range_after_s = RANGE_AFTER_S,
		.progress = 1,
		.rank = o->rank, .world = o->world, .seed = o->seed,
		.echo = o->echo,
		.image = o->image,
	};
	d.echo.interrupted = fs_req_interrupted; /* tags are FUSE requests */
	return d;
}

/* The tree of the layout asked for (-o layout). */
static int open_tree(struct app *a, char *err, size_t errlen)
{
	static const char *const exts[] = {NULL, "jpg", "ppm"};
	int r;

	if (a->o.layout == FS_LAYOUT_SAMPLES)
		r = ns_open_samples(a->ds, &a->ns);
	else
		r = ns_open(a->ds, exts[a->o.image.format], &a->ns);
	if (r == -ENOTSUP)
		snprintf(err, errlen,
			 "layout=samples needs an index that lists every "
			 "member (format 3): this one is older; rebuild it "
			 "with echofs-index, or remove it from the cache");
	else if (r)
		snprintf(err, errlen, "cannot build the tree: %s", strerror(-r));
	if (!r && (a->ns->counts.skipped_hidden || a->ns->counts.skipped_clash))
		log_warn("%llu members skipped (hidden name), %llu skipped "
			 "(a directory of the same name)",
			 (unsigned long long)a->ns->counts.skipped_hidden,
			 (unsigned long long)a->ns->counts.skipped_clash);
	return r;
}

/* One line for the samples renamed because an earlier one has their
 * name, with the first pair's key and both shards (numbered from 1 in
 * SOURCE's order, as the shard list's own messages number them, and by
 * their redacted URLs: which files to fix). */
static void warn_duplicates(const struct app *a)
{
	const struct ns_counts *c = &a->ns->counts;
	unsigned long long n = c->duplicate_keys;
	uint32_t first = dataset_group(a->ds, c->dup_first);
	uint32_t again = dataset_group(a->ds, c->dup_again);
	char u1[384], u2[384];

	if (!n)
		return;
	log_warn("%llu sample%s renamed whole (\"_dup<n>\"): %s key of an "
		 "earlier sample; the first: \"%s\" in shard %u and again in "
		 "shard %u (%s, %s)",
		 n, n == 1 ? "" : "s", n == 1 ? "it has the" : "they have the",
		 dataset_key(a->ds, c->dup_first), first + 1, again + 1,
		 dataset_group_url(a->ds, first, u1, sizeof(u1)),
		 dataset_group_url(a->ds, again, u2, sizeof(u2)));
}

static int prepare(struct app *a, char *err, size_t errlen)
{
	struct dataset_opts dopt = dataset_opts_of(&a->o);
	int r;

	r = dataset_open(&dopt, &a->ds, err, errlen);
	if (r)
		return r;
	r = open_tree(a, err, errlen);
	if (r)
		return r;
	if (a->ns->counts.skipped_bad_label || a->ns->counts.renamed_duplicates)
		log_warn("%llu samples skipped (label unusable as a directory "
			 "name), %llu files renamed to keep names unique",
			 (unsigned long long)a->ns->counts.skipped_bad_label,
			 (unsigned long long)a->ns->counts.renamed_duplicates);
	warn_duplicates(a);
	if (a->o.echo.on)
		return start_echo(a, err, errlen);
	return 0;
}

static void init_ctx(struct app *a)
{
	struct control_sources cs = {
		.ns = a->ns, .ds = a->ds,
		.fc = &a->fs.counters, .push = a->push,
		.bind = a->bind, .inval = a->inval,
		.tar_skipped = dataset_tar_skipped(a->ds),
		.bad_label = dataset_bad_label(a->ds),
	};
	fs_ctx_init(&a->fs);
	a->fs.ns = a->ns;
	a->fs.read_failed = xcalloc(a->ns->nfiles ? a->ns->nfiles : 1, 1);
	a->fs.ds = a->ds;
	a->fs.bind = a->bind;
	a->fs.se = a->se;
	a->fs.timeout = CACHE_TIMEOUT_S;
	a->fs.zerocopy = a->o.zerocopy;
	dataset_set_zerocopy(a->ds, a->o.zerocopy);
	a->fs.uid = getuid();
	a->fs.gid = getgid();
	clock_gettime(CLOCK_REALTIME, &a->fs.mtime);
	a->ctl = control_new(&cs);
	a->fs.ctl = a->ctl;
}

/* Shutdown, first step (any thread): everything blocked below the FUSE
 * handlers ends now: waiting reads, shard streams, transfers, backoffs. */
static void app_cancel(void *ud)
{
	struct app *a = ud;

	dataset_echo_stop(a->ds);
	dataset_echo_cancel_all(a->ds); /* parked lookups get their answer now */
	dataset_cancel(a->ds);
}

/* Exact mounts: the cache keeps what the current pass has not read yet
 * (cache/store/shards.h, shards_track). Echo mounts stream whole shards on
 * purpose and preprocessed ones read through outputs: neither is tracked. */
static void track_pass(struct app *a)
{
	uint32_t *v = xmalloc((a->ns->nfiles + 1) * sizeof(*v));

	for (size_t f = 0; f < a->ns->nfiles; f++)
		v[f] = a->ns->files[f].sample;
	if (dataset_track_pass(a->ds, v, a->ns->nfiles) != 0)
		log_warn("cache policy: passes not tracked");
	free(v);
}

/* Where the mount is, for messages and mountinfo: MOUNTPOINT, or for
 * /dev/fd/N the mounted_at= path when given. */
static const char *mount_name(const struct app *a)
{
	return a->o.mounted_at ? a->o.mounted_at : a->o.mountpoint;
}

/* Our mount's ID in mountinfo, or -1: then a lazy unmount does not stop
 * echofs at once (the kernel ends the session when the last file using
 * it closes). A descriptor's mount may be unnamed, or outside this mount
 * namespace (a container handed the descriptor alone): echofs serves it
 * all the same, and its mounter unmounts it. */
static int find_mount(const struct app *a)
{
	const char *where = mount_name(a);
	char type[64] = "";
	int id, r;

	if (a->o.fuse_fd >= 0 && !a->o.mounted_at) {
		log_info("serving %s, mounted elsewhere (no -o mounted_at): no "
			 "lazy-unmount check",
			 where);
		return -1;
	}
	r = mounts_find(where, &id, type, sizeof(type));
	if (a->o.fuse_fd < 0) {
		if (r == 0)
			return id;
		log_warn("%s not found in mountinfo: a lazy unmount will not "
			 "stop echofs",
			 where);
		return -1;
	}
	if (r == 0 && strncmp(type, "fuse", 4) == 0)
		return id;
	log_info("%s not in this mount namespace as a FUSE mount: no "
		 "lazy-unmount check; its mounter unmounts it",
		 where);
	return -1;
}

static int mount_fs(struct app *a, struct fuse_args *args, char *err,
		    size_t errlen)
{
	int id, r;

	a->se = fuse_session_new(args, &fs_ops, sizeof(fs_ops), &a->fs);
	if (!a->se) {
		snprintf(err, errlen, "libfuse rejected the options: %s",
			 fuse_last_error[0] ? fuse_last_error : "see the log");
		return -EINVAL;
	}
	/* Made before the mount, so that failing is a failed start with its
	 * one-line error, not a crash of a mounted daemon. */
	a->loop_cfg = fuse_loop_cfg_create();
	if (!a->loop_cfg) {
		snprintf(err, errlen,
			 "out of memory for libfuse's loop settings");
		return -ENOMEM;
	}
	fuse_loop_cfg_set_idle_threads(a->loop_cfg, 16);
	fuse_loop_cfg_set_max_threads(a->loop_cfg, 64);
	/* Before any request can arrive: handlers read fs.push unlocked.
	 * Echo files are served from the pool, not pushed. */
	if (!a->bind && !a->o.image.on &&
	    (r = push_open(a->se, a->ns, a->ds, &a->push)) != 0)
		log_warn("no page-cache pusher: %s", strerror(-r));
	if (!a->bind && !a->o.image.on)
		track_pass(a);
	/* Done bindings let their samples go when the kernel forgets them:
	 * their entries are dropped so that it does so soon (fs/inval.h). */
	if (a->bind && !bindings_binds_at_open(a->bind)) {
		r = inval_open(a->se, a->ns, a->ds, &a->inval);
		if (r == 0)
			bindings_set_inval(a->bind, inval_path, a->inval);
		else
			log_warn("done echo bindings wait for the kernel to "
				 "forget them: %s", strerror(-r));
	}
	a->fs.push = a->push;
	init_ctx(a);
	if (a->o.metrics &&
	    (r = metrics_open(a->o.metrics, a->ctl, &a->metrics, err,
			      errlen)) != 0)
		return r;
	/* With /dev/fd/N libfuse only takes the descriptor (its mounter
	 * mounted it already), checked in setup. */
	if (fuse_session_mount(a->se, a->o.mountpoint) != 0) {
		snprintf(err, errlen, "cannot mount on %s (is /dev/fuse there, "
			 "and fusermount3 installed?)", a->o.mountpoint);
		return -EIO;
	}
	id = find_mount(a);
	/* One READ per file up to 1 MB (the largest FUSE request) instead of
	 * one per 128 KB: a 224x224 PPM echo took two round trips. Before the
	 * session answers INIT, which keeps the smaller of this and
	 * FS_READAHEAD (fs_op_init). */
	if (id >= 0 &&
	    (r = mounts_raise_readahead(id, FS_READAHEAD >> 10)) != 0)
		log_info("read-ahead left at the kernel's default: %s",
			 strerror(-r));
	r = daemon_watch(a->se, id, app_cancel, a);
	if (r) {
		snprintf(err, errlen, "cannot watch for signals: %s",
			 strerror(-r));
		fuse_session_unmount(a->se);
		return r;
	}
	metrics_set_mounted(a->metrics, id); /* /healthz: ready */
	return 0;
}

static int loop(struct app *a)
{
	char type[64];
	int r, sig, id;

	r = fuse_session_loop_mt(a->se, a->loop_cfg);
	/* No new requests now; whatever ended the loop, work still blocked
	 * (the pusher, the echo streamer) ends before anything is freed. */
	app_cancel(a);
	sig = daemon_unwatch();
	/* After a lazy unmount, unmount again only when nothing else was
	 * mounted on the path since (it also frees libfuse's copy of it). */
	if (!daemon_mount_gone() ||
	    mounts_find(a->o.mountpoint, &id, type, sizeof(type)) == -ENOENT)
		fuse_session_unmount(a->se);
	if (sig && a->o.fuse_fd >= 0)
		log_info("stopped serving %s after signal %d; its mounter "
			 "unmounts it",
			 mount_name(a), sig);
	else if (sig)
		log_info("unmounted %s after signal %d", a->o.mountpoint, sig);
	/* A signal (libfuse returns its number) is a clean stop, not an
	 * error: systemd must not mark the unit failed. */
	return r < 0 ? r : 0;
}

static void app_free(struct app *a)
{
	metrics_stop(a->metrics); /* it renders from the control */
	push_free(a->push); /* it sends to the session */
	inval_stop(a->inval); /* so does it */
	/* parked lookups reply to the session */
	dataset_echo_cancel_all(a->ds);
	if (a->se)
		fuse_session_destroy(a->se);
	if (a->loop_cfg)
		fuse_loop_cfg_destroy(a->loop_cfg);
	if (a->ctl)
		fs_ctx_destroy(&a->fs);
	bindings_free(a->bind);
	inval_free(a->inval); /* after the reaper, which queues to it */
	control_free(a->ctl);
	ns_free(a->ns);
	/* the echo pool, decode workers, outputs, then the fetch threads */
	dataset_close(a->ds);
	options_free(&a->o);
}

static void print_version(void)
{
	char img[256];

	dataset_image_versions(img, sizeof(img));
	printf("echofs %s\nlibfuse %s, libmicrohttpd %s\n%s\n%s\n",
	       ECHOFS_VERSION, fuse_pkgversion(), metrics_version(), img,
	       dataset_net_version());
}

/* echofs --check SOURCE: what a mount would find, on stdout. */
static int check_source(const struct fs_options *o)
{
	static const char *const where[][2] = {
		{"option", "the index= option"}, {"cache", "the cache_dir copy"},
		{"beside", "beside the shards"},
		{"none", "none: a mount would build one by reading every shard"},
	};
	struct dataset_opts d = dataset_opts_of(o);
	struct dataset_check c;
	char err[1024] = "", red[1024];
	const char *from = "not looked for";
	int r;

	d.progress = 0;
	r = dataset_check(&d, &c, err, sizeof(err));
	printf("source: %s (%zu shards)\n",
	       dataset_redact(o->source, red, sizeof(red)), c.shards);
	for (size_t i = 0; c.index_from && i < 4; i++)
		if (strcmp(c.index_from, where[i][0]) == 0)
			from = where[i][1];
	if (c.index_from && c.samples)
		printf("index: %s, %zu samples\n", from, c.samples);
	else if (c.index_from)
		printf("index: %s\n", from);
	if (c.shard_bytes)
		printf("first shard: %.1f MB in %.2f s (%.1f MB/s)\n",
		       (double)c.shard_bytes / 1e6, c.shard_s,
		       c.shard_s > 0 ? (double)c.shard_bytes / 1e6 / c.shard_s : 0);
	if (r) {
		fprintf(stderr, "echofs: error: %s\n", err);
		return 1;
	}
	printf("ok\n");
	return 0;
}

/* Options echofs does not know go to libfuse: try them on a throwaway
 * session now, so a typo in an fstab line fails at once, not after the
 * index is built. */
static int check_fuse_args(const struct fuse_args *args, char *err,
			   size_t errlen)
{
	struct fuse_args copy = FUSE_ARGS_INIT(0, NULL);
	struct fuse_lowlevel_ops none = {0};
	struct fuse_session *se;

	for (int i = 0; i < args->argc; i++)
		if (fuse_opt_add_arg(&copy, args->argv[i]) != 0) {
			fuse_opt_free_args(&copy);
			snprintf(err, errlen, "out of memory");
			return -ENOMEM;
		}
	fuse_log_quiet = 1;
	se = fuse_session_new(&copy, &none, sizeof(none), NULL);
	fuse_log_quiet = 0;
	fuse_opt_free_args(&copy);
	if (!se) {
		snprintf(err, errlen, "%s", fuse_last_error[0] ? fuse_last_error
			 : "libfuse rejected the options");
		return -EINVAL;
	}
	fuse_session_destroy(se);
	return 0;
}

/* Paths are resolved now: the daemon changes to "/". */
static int absolutize(char **path, int must_exist, char *err, size_t errlen)
{
	char buf[PATH_MAX], cwd[PATH_MAX];
	struct stat st;

	if (must_exist) {
		if (!realpath(*path, buf) || stat(buf, &st) != 0 ||
		    !S_ISDIR(st.st_mode)) {
			snprintf(err, errlen, "mountpoint %s is not a directory",
				 *path);
			return -ENOTDIR;
		}
	} else if ((*path)[0] == '/') {
		return 0;
	} else if (!getcwd(cwd, sizeof(cwd)) ||
		   snprintf(buf, sizeof(buf), "%s/%s", cwd, *path) >= (int)sizeof(buf)) {
		snprintf(err, errlen, "path too long: %s", *path);
		return -ENAMETOOLONG;
	}
	free(*path);
	*path = xstrdup(buf);
	return 0;
}

static int setup(struct app *a, char *err, size_t errlen)
{
	int r;
	/* /dev/fd/N: a descriptor to serve, no directory to check. */
	if (a->o.fuse_fd >= 0 &&
	    (r = mounts_check_fuse_fd(a->o.fuse_fd, a->o.mountpoint, err,
				      errlen)))
		return r;
	if ((a->o.fuse_fd < 0 && a->o.mountpoint &&
	     ((r = mounts_check_free(a->o.mountpoint, err, errlen)) ||
	      (r = absolutize(&a->o.mountpoint, 1, err, errlen)))) ||
	    (r = absolutize(&a->o.cache_dir, 0, err, errlen)))
		return r;
	if (a->o.header_file && (r = absolutize(&a->o.header_file, 0, err, errlen)))
		return r;
	if ((a->o.ca_file && (r = absolutize(&a->o.ca_file, 0, err, errlen))) ||
	    (a->o.ca_path && (r = absolutize(&a->o.ca_path, 0, err, errlen))))
		return r;
	if (a->o.index && a->o.index[0] != '/' && !strstr(a->o.index, "://") &&
	    (r = absolutize(&a->o.index, 0, err, errlen)))
		return r;
	/* Before the mount is ready a background start shows only warnings
	 * and errors on the terminal; the level asked for applies after. */
	log_set_level(a->o.foreground || a->o.log_file ||
				      a->o.log_level < LOG_LEVEL_WARN
			      ? a->o.log_level
			      : LOG_LEVEL_WARN);
	if (a->o.log_file && (r = log_set_file(a->o.log_file)) != 0) {
		snprintf(err, errlen, "cannot open log_file %s: %s",
			 a->o.log_file, log_file_strerror(r));
		return r;
	}
	return 0;
}

/* Blank userinfo and query strings of the URLs in one argument, in place
 * (the tail is zeroed), so that ps and /proc/PID/cmdline no longer show
 * them. In an -o list a ',' ends a URL. */
static void wipe_url_secrets(char *s, int in_opts)
{
	size_t len = strlen(s), w = 0, r = 0;
	const char *sep;

	while ((sep = strstr(s + r, "://")) != NULL) {
		size_t upto = (size_t)(sep - s) + 3, n, at = 0;
		memmove(s + w, s + r, upto - r);
		w += upto - r;
		r = upto;
		n = strcspn(s + r, in_opts ? "/?#," : "/?#");
		for (size_t k = 0; k < n; k++)
			if (s[r + k] == '@')
				at = k + 1; /* the last '@' ends the userinfo */
		r += at;
		n = strcspn(s + r, in_opts ? "?#," : "?#");
		memmove(s + w, s + r, n);
		w += n;
		r += n;
		if (s[r] == '?' || s[r] == '#')
			r += strcspn(s + r, in_opts ? "," : "");
	}
	memmove(s + w, s + r, len - r);
	w += len - r;
	memset(s + w, 0, len - w);
}

/* After parsing: the daemon keeps its own copies of SOURCE and -o values. */
static void wipe_argv_secrets(int argc, char **argv)
{
	for (int i = 1; i < argc; i++) {
		int in_opts = strcmp(argv[i - 1], "-o") == 0 ||
			      (strncmp(argv[i], "-o", 2) == 0 && argv[i][2]);
		wipe_url_secrets(argv[i], in_opts);
	}
}

/* Keep freed memory for the next sample instead of giving it back to the
 * kernel. Every decode allocates and frees buffers of 50 KB to a few MB
 * (the shard bytes, the decoded photo, its resized copy, a served
 * rendering); glibc's defaults serve those above 128 KiB with mmap (its
 * dynamic threshold rises only to the largest chunk freed) and trim a
 * heap's free top beyond 128 KiB, so each decode faulted fresh zeroed pages
 * in: 5% of the daemon's CPU in a profile of an echo=4 mount (BENCHMARKS.md
 * section 15, "Profiles of the decode"). With chunks up to 32 MiB (glibc's
 * largest) from the heaps and up to 64 MiB of free top kept per heap,
 * freed buffers are reused; the daemon's resident memory stays near its
 * peak use (mem_size and decode_mem bound that) instead of returning to
 * the kernel between samples. */
static void keep_freed_memory(void)
{
#if defined(M_MMAP_THRESHOLD) && defined(M_TRIM_THRESHOLD)
	/* Silent when refused (a sanitizer's allocator refuses both): the
	 * defaults only cost speed. */
	(void)mallopt(M_MMAP_THRESHOLD, 32 << 20);
	(void)mallopt(M_TRIM_THRESHOLD, 64 << 20);
#endif
}

int main(int argc, char **argv)
{
	struct fuse_args args = FUSE_ARGS_INIT(argc, argv);
	struct app a = {0};
	char err[1024] = "";
	int r;

	fuse_set_log_func(fuse_log_to_ours);
	keep_freed_memory();
	if (options_parse(&args, &a.o, err, sizeof(err)) != 0) {
		fprintf(stderr, "echofs: error: %s\n", err);
		fprintf(stderr, "usage: %s [options] SOURCE MOUNTPOINT (see --help)\n", argv[0]);
		r = 1;
		goto out;
	}
	wipe_argv_secrets(argc, argv);
	if (a.o.show_help || a.o.show_version) {
		if (a.o.show_help)
			options_usage(stdout, argv[0]);
		else
			print_version();
		r = 0;
		goto out;
	}
	if (a.o.check) {
		r = setup(&a, err, sizeof(err)) != 0 || dataset_global_init() != 0
			    ? (fprintf(stderr, "echofs: error: %s\n", err), 1)
			    : check_source(&a.o);
		goto out;
	}
	if (check_fuse_args(&args, err, sizeof(err)) != 0 ||
	    setup(&a, err, sizeof(err)) != 0 || dataset_global_init() != 0) {
		fprintf(stderr, "echofs: error: %s\n", err[0] ? err : "cannot start libcurl");
		r = 1;
		goto out;
	}
	if ((r = daemon_start(a.o.foreground, a.o.log_file)) != 0) {
		fprintf(stderr, "echofs: error: cannot start the daemon: %s\n",
			strerror(-r));
		r = 1;
		goto out;
	}
	if (prepare(&a, err, sizeof(err)) != 0 ||
	    mount_fs(&a, &args, err, sizeof(err)) != 0) {
		if (a.o.log_file)
			log_error("%s", err);
		daemon_fail(err);
		r = 1;
		goto out;
	}
	log_info("mounted %zu files in %zu classes on %s", a.ns->nfiles,
		 a.ns->nclasses, mount_name(&a));
	daemon_ready();
	if (!a.o.log_file && !a.o.foreground)
		log_use_syslog();
	log_set_level(a.o.log_level);
	r = loop(&a) == 0 ? 0 : 1;
out:
	app_free(&a);
	log_counted_flush(); /* errors held back by the rate limit */
	fuse_opt_free_args(&args);
	return r;
}
