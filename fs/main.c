/* main.c - echofs: mount WebDataset tar shards served over HTTP(S) as a
 * read-only ImageFolder tree. Start-up order matters: parse, fork (no thread
 * exists yet), build the index and tree, mount, release the parent, loop. */
#define FUSE_USE_VERSION 314
#include <errno.h>
#include <fuse_log.h>
#include <fuse_lowlevel.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "cache/index/resolve.h"
#include "cache/echo/pool.h"
#include "cache/image/prep.h"
#include "cache/store/shards.h"
#include "cache/store/store.h"
#include "common/log.h"
#include "common/util.h"
#include "fetch/net/http.h"
#include "fetch/format/index.h"
#include "fs/bindings.h"
#include "fs/control.h"
#include "fs/daemon.h"
#include "fs/namespace.h"
#include "fs/ops.h"
#include "fs/options.h"
#include "cache/image/outputs.h"
#include "fs/push.h"

/* Retries at mount time stop sooner, so a dead server fails the mount well
 * within 15 s; once mounted, a read may retry for up to 30 s. */
#define BOOT_RETRY_BUDGET_S 6.0
#define RUN_RETRY_BUDGET_S 30.0
#define CACHE_TIMEOUT_S 86400.0
/* A read waiting this long for a whole-shard stream takes a range GET. */
#define RANGE_AFTER_S 0.3
/* An echo binding nobody opens within this long (ls -l) goes back. */
#define BINDING_EXPIRE_S 5.0

struct app {
	struct fs_options o;
	struct http *http;
	struct store *store;
	struct index *ix;
	struct namespace *ns;
	struct shards *sh;
	struct control *ctl;
	struct push *push;
	struct pool *pool;
	struct bindings *bind;
	struct prep *prep;       /* preprocessing mounts only */
	struct outputs *outputs; /* preprocessing exact mounts only */
	_Atomic uint64_t ingested;
	struct fs_ctx fs;
	struct fuse_session *se;
	uint64_t tar_skipped;
};

static void fuse_log_to_ours(enum fuse_log_level level, const char *fmt,
			     va_list ap)
{
	char msg[512];
	size_t n;
	vsnprintf(msg, sizeof(msg), fmt, ap);
	n = strlen(msg);
	while (n && msg[n - 1] == '\n')
		msg[--n] = '\0';
	log_msg(level <= FUSE_LOG_ERR ? LOG_LEVEL_ERROR
		: level <= FUSE_LOG_WARNING ? LOG_LEVEL_WARN
		: level <= FUSE_LOG_INFO ? LOG_LEVEL_INFO : LOG_LEVEL_DEBUG,
		"libfuse: %s", msg);
}

static struct http *open_http(const struct fs_options *o, double budget,
			      char *err, size_t errlen)
{
	struct http_opts ho = {
		.connections = o->connections,
		.header_file = o->header_file,
		.retry_budget_s = budget,
	};
	return http_new(&ho, err, errlen);
}

/* Echo pool hook: what the pool keeps of a sample when preprocessing. */
static int ingest_sample(void *ud, uint32_t sample, const uint8_t *in,
			 size_t len, uint8_t **out, size_t *outlen)
{
	struct app *a = ud;
	char why[200];
	int r;

	if (a->o.after_augment) {
		uint64_t n = a->ingested++;
		uint64_t rand = hash64(&n, sizeof(n), a->o.seed);
		r = prep_apply(a->prep, in, len, rand, out, outlen, why, sizeof(why));
	} else {
		r = prep_prepare(a->prep, in, len, out, outlen, why, sizeof(why));
	}
	if (r)
		log_warn("sample %s skipped: %s", a->ix->samples[sample].key, why);
	return r;
}

/* Bindings hook (echo before augment): a new crop/flip for every serve. */
static int augment_binding(void *ud, const uint8_t *data, size_t len,
			   uint64_t rand, uint8_t **out, size_t *outlen)
{
	struct app *a = ud;
	char why[200];
	int r = prep_augment(a->prep, data, len, rand ^ a->o.seed, out, outlen,
			     why, sizeof(why));
	if (r)
		log_warn("cannot augment a sample: %s", why);
	return r;
}

static int start_prep(struct app *a, char *err, size_t errlen)
{
	int random = a->o.echo_mount && a->o.augment;
	struct transform_opts tf = {
		.size = a->o.size, .crop = a->o.crop, .random_crop = random,
		.flip_prob_half = random && a->o.flip,
		.format = (enum transform_format)a->o.format,
		.quality = (int)a->o.quality, .max_pixels = a->o.max_pixels,
	};

	if (a->o.flip && !random)
		log_warn("flip=1 needs an echo mount with augment=1; ignored");
	a->prep = prep_new(&tf, a->o.threads);
	if (!a->prep) {
		snprintf(err, errlen, "cannot start decode workers: %s",
			 strerror(errno));
		return -EINVAL;
	}
	return 0;
}

/* The echo pool and path bindings of an echo mount. */
static int start_echo(struct app *a, char *err, size_t errlen)
{
	const struct namespace *ns = a->ns;
	uint32_t *class_of = xmalloc((a->ix->nsamples ? a->ix->nsamples : 1) *
				     sizeof(*class_of));
	struct pool_opts po = {
		.echo = a->o.echo, .mode = (enum echo_mode)a->o.echo_mode,
		.window = a->o.echo_window, .mem_size = a->o.mem_size,
		.seed = a->o.seed,
		.ingest = a->prep ? ingest_sample : NULL, .ingest_ud = a,
		/* Twice the decode workers: one decoding, one queued each. */
		.ingest_threads = 2 * prep_threads(a->prep),
	};

	for (size_t i = 0; i < a->ix->nsamples; i++)
		class_of[i] = POOL_NO_CLASS;
	for (size_t f = 0; f < ns->nfiles; f++)
		class_of[ns->files[f].sample] = ns->files[f].cls;
	a->pool = pool_new(a->ix, a->sh, class_of, (uint32_t)ns->nclasses, &po);
	free(class_of);
	if (!a->pool) {
		snprintf(err, errlen, "cannot start the echo pool: %s",
			 strerror(errno));
		return -EINVAL;
	}
	a->bind = bindings_new(a->pool, ns,
			       ns_file_ino(ns, (uint32_t)ns->nfiles),
			       BINDING_EXPIRE_S,
			       a->prep && !a->o.after_augment ? augment_binding : NULL,
			       a);
	if (!a->bind) {
		snprintf(err, errlen, "cannot start bindings: %s", strerror(errno));
		return -EINVAL;
	}
	log_info("echo mount: echo=%g echo_mode=%s", a->o.echo,
		 echo_mode_name((enum echo_mode)a->o.echo_mode));
	return 0;
}

/* Everything before the mount: HTTP, cache, index, tree, shard readers. */
static int prepare(struct app *a, char *err, size_t errlen)
{
	struct resolve_opts dopt = {
		.source = a->o.source, .index = a->o.index,
		.cache_dir = a->o.cache_dir, .jobs = a->o.connections,
		.progress = 1,
	};
	struct resolve_info info;
	char serr[512];
	int r;

	a->http = open_http(&a->o, BOOT_RETRY_BUDGET_S, err, errlen);
	if (!a->http)
		return -EINVAL;
	a->store = store_open(a->o.cache_dir, a->o.cache_size, serr, sizeof(serr));
	if (!a->store)
		log_warn("serving without a disk cache: %s", serr);
	r = resolve_open(&dopt, a->http, a->store, &a->ix, &info, err, errlen);
	if (r)
		return r;
	a->tar_skipped = info.tar_skipped;
	log_info("index from %s: %zu shards, %zu samples", info.index_from,
		 a->ix->nshards, a->ix->nsamples);
	http_free(a->http);
	a->http = open_http(&a->o, RUN_RETRY_BUDGET_S, err, errlen);
	if (!a->http)
		return -EINVAL;
	static const char *const exts[] = {NULL, "jpg", "ppm"};
	a->ns = ns_build(a->ix, exts[a->o.format]);
	if (!a->ns) {
		snprintf(err, errlen, "cannot build the tree: %s", strerror(errno));
		return -errno;
	}
	if (a->ns->counts.skipped_bad_label || a->ns->counts.renamed_duplicates)
		log_warn("%llu samples skipped (label unusable as a directory "
			 "name), %llu files renamed to keep names unique",
			 (unsigned long long)a->ns->counts.skipped_bad_label,
			 (unsigned long long)a->ns->counts.renamed_duplicates);
	/* A quarter of the connections (at least one, when there are two or
	 * more) stay free of whole-shard streams for readers' range GETs. */
	unsigned c = a->o.connections;
	struct shards_opts so = {.workers = c > 1 ? c - (c + 3) / 4 : 1,
				 .range_after_s = RANGE_AFTER_S};
	a->sh = shards_new(a->ix, a->http, a->store, &so);
	if (!a->sh) {
		snprintf(err, errlen, "cannot start the fetchers: %s", strerror(errno));
		return -errno;
	}
	if (a->o.preprocess && (r = start_prep(a, err, errlen)) != 0)
		return r;
	if (a->o.echo_mount)
		return start_echo(a, err, errlen);
	if (a->prep)
		a->outputs = outputs_new(a->ix, a->sh, a->prep);
	return 0;
}

static void init_ctx(struct app *a)
{
	struct control_sources cs = {
		.ns = a->ns, .sh = a->sh, .http = a->http, .store = a->store,
		.fc = &a->fs.counters, .push = a->push, .pool = a->pool,
		.bind = a->bind, .outputs = a->outputs,
		.tar_skipped = a->tar_skipped,
	};
	fs_ctx_init(&a->fs);
	a->fs.ns = a->ns;
	a->fs.sh = a->sh;
	a->fs.pool = a->pool;
	a->fs.bind = a->bind;
	a->fs.outputs = a->outputs;
	a->fs.se = a->se;
	a->fs.prep = a->prep;
	a->fs.timeout = CACHE_TIMEOUT_S;
	a->fs.uid = getuid();
	a->fs.gid = getgid();
	clock_gettime(CLOCK_REALTIME, &a->fs.mtime);
	a->ctl = control_new(&cs);
	a->fs.ctl = a->ctl;
}

static int mount_fs(struct app *a, struct fuse_args *args, char *err,
		    size_t errlen)
{
	a->se = fuse_session_new(args, &fs_ops, sizeof(fs_ops), &a->fs);
	if (!a->se) {
		snprintf(err, errlen, "libfuse rejected the options (see the log)");
		return -EINVAL;
	}
	/* Before any request can arrive: handlers read fs.push unlocked.
	 * Echo files are served from the pool, not pushed. */
	a->push = a->bind || a->prep ? NULL : push_new(a->se, a->ns, a->sh);
	if (!a->push && !a->bind && !a->prep)
		log_warn("no page-cache pusher: %s", strerror(errno));
	a->fs.push = a->push;
	init_ctx(a);
	if (fuse_set_signal_handlers(a->se) != 0) {
		snprintf(err, errlen, "cannot install signal handlers");
		return -EINVAL;
	}
	if (fuse_session_mount(a->se, a->o.mountpoint) != 0) {
		snprintf(err, errlen, "cannot mount on %s (is /dev/fuse there, "
			 "and fusermount3 installed?)", a->o.mountpoint);
		fuse_remove_signal_handlers(a->se);
		return -EIO;
	}
	return 0;
}

static int loop(struct app *a)
{
	struct fuse_loop_config *cfg = fuse_loop_cfg_create();
	int r;

	fuse_loop_cfg_set_idle_threads(cfg, 16);
	fuse_loop_cfg_set_max_threads(cfg, 64);
	r = fuse_session_loop_mt(a->se, cfg);
	fuse_loop_cfg_destroy(cfg);
	fuse_session_unmount(a->se);
	fuse_remove_signal_handlers(a->se);
	return r;
}

static void app_free(struct app *a)
{
	push_free(a->push); /* it sends to the session */
	pool_cancel_all(a->pool); /* parked lookups reply to the session */
	if (a->se)
		fuse_session_destroy(a->se);
	if (a->ctl)
		fs_ctx_destroy(&a->fs);
	bindings_free(a->bind);
	pool_free(a->pool);
	outputs_free(a->outputs);
	prep_free(a->prep);
	shards_free(a->sh);
	control_free(a->ctl);
	ns_free(a->ns);
	index_free(a->ix);
	store_close(a->store);
	http_free(a->http);
	options_free(&a->o);
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
	if ((r = absolutize(&a->o.mountpoint, 1, err, errlen)) ||
	    (r = absolutize(&a->o.cache_dir, 0, err, errlen)))
		return r;
	if (a->o.header_file && (r = absolutize(&a->o.header_file, 0, err, errlen)))
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
			 a->o.log_file, strerror(-r));
		return r;
	}
	return 0;
}

int main(int argc, char **argv)
{
	struct fuse_args args = FUSE_ARGS_INIT(argc, argv);
	struct app a = {0};
	char err[1024] = "";
	int r;

	fuse_set_log_func(fuse_log_to_ours);
	if (options_parse(&args, &a.o, err, sizeof(err)) != 0) {
		fprintf(stderr, "echofs: error: %s\n", err);
		fprintf(stderr, "usage: %s [options] SOURCE MOUNTPOINT (see --help)\n", argv[0]);
		r = 1;
		goto out;
	}
	if (a.o.show_help || a.o.show_version) {
		if (a.o.show_help)
			options_usage(stdout, argv[0]);
		else
			printf("echofs %s (libfuse %s)\n", ECHOFS_VERSION, fuse_pkgversion());
		r = 0;
		goto out;
	}
	if (setup(&a, err, sizeof(err)) != 0 || http_global_init() != 0) {
		fprintf(stderr, "echofs: error: %s\n", err[0] ? err : "cannot start libcurl");
		r = 1;
		goto out;
	}
	if ((r = daemon_start(a.o.foreground)) != 0) {
		fprintf(stderr, "echofs: error: cannot fork: %s\n", strerror(-r));
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
		 a.ns->nclasses, a.o.mountpoint);
	daemon_ready();
	if (!a.o.log_file && !a.o.foreground)
		log_use_syslog();
	log_set_level(a.o.log_level);
	r = loop(&a) == 0 ? 0 : 1;
out:
	app_free(&a);
	fuse_opt_free_args(&args);
	return r;
}
