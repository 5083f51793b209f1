/* echofs_index.c - echofs-index: build a dataset index from tar shards (local
 * files or HTTP(S) URLs), in the binary or the text format, convert one
 * format to the other, or check that an index file loads. */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <limits.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cache/index/indexer.h"
#include "common/log.h"
#include "common/util.h"
#include "fetch/format/index.h"
#include "fetch/format/index_bin.h"
#include "fetch/format/scan.h"
#include "fetch/format/sums.h"
#include "fetch/net/bucket.h"
#include "fetch/net/http.h"
#include "fetch/net/shardlist.h"

#define PROG "echofs-index"
#define MAX_SHARDS 1000000
#define MAX_JOBS 64
#define READ_CHUNK (1 << 20)

struct opts {
	const char *out;	 /* NULL: stdout */
	const char *base_url;	 /* for local files */
	const char *header_file; /* extra HTTP headers */
	const char *check;	 /* --check FILE */
	const char *convert;	 /* --convert FILE */
	bool text;		 /* --format text */
	bool allow_paths;
	unsigned jobs;
};

enum {
	OPT_BASE_URL = 256,
	OPT_HEADER_FILE,
	OPT_CHECK,
	OPT_ALLOW_PATHS,
	OPT_FORMAT,
	OPT_CONVERT
};

/* What is written when --format is not given. */
#define DEFAULT_TEXT true

static void usage(FILE *f)
{
	fprintf(f,
		"usage: " PROG " [options] SHARD...\n"
		"       " PROG " --check FILE\n"
		"       " PROG " --convert FILE [-o OUT] [--format FMT]\n"
		"\n"
		"Scan WebDataset tar shards and write an echofs index.\n"
		"SHARD is a local tar file or an http(s) URL; URLs may hold "
		"bash\n"
		"brace ranges such as train-{000000..000146}.tar (quote "
		"them).\n"
		"s3://BUCKET/KEY URLs are signed with the AWS credential "
		"chain; region\nand endpoint come from AWS_REGION, "
		"AWS_ENDPOINT_URL(_S3) or the profile\n(else the region "
		"from the bucket).\n"
		"gs://BUCKET/KEY URLs carry a token from the Google "
		"credential chain;\nthe endpoint comes from "
		"STORAGE_EMULATOR_HOST, else storage.googleapis.com.\n"
		"\n"
		"  -o, --output FILE     write the index to FILE atomically "
		"(default: stdout)\n"
		"      --base-url URL    record local shards as URL/<file "
		"name>\n"
		"      --allow-paths     record local shards by absolute path\n"
		"  -j, --jobs N          shards fetched at a time for URLs "
		"(default 4)\n"
		"      --header-file F   extra HTTP header lines for URLs\n"
		"      --format FMT      binary (fixed records, checksummed: "
		"index-format.md)\n"
		"                        or text (the line format); default "
		"%s\n"
		"      --convert FILE    read an index (text or binary) and "
		"write it in FMT\n"
		"      --check FILE      load an index (text or binary), print "
		"its size and\n"
		"                        load time\n"
		"  -h, --help            this help\n"
		"  -V, --version         print the version\n",
		DEFAULT_TEXT ? "text" : "binary");
}

static int fail(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* One line on stderr; returns the exit status. */
static int fail(const char *fmt, ...)
{
	va_list ap;

	fputs(PROG ": ", stderr);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
	return 1;
}

static int parse_opts(int argc, char **argv, struct opts *o)
{
	static const struct option longs[] = {
		{"output", required_argument, NULL, 'o'},
		{"base-url", required_argument, NULL, OPT_BASE_URL},
		{"allow-paths", no_argument, NULL, OPT_ALLOW_PATHS},
		{"jobs", required_argument, NULL, 'j'},
		{"header-file", required_argument, NULL, OPT_HEADER_FILE},
		{"check", required_argument, NULL, OPT_CHECK},
		{"format", required_argument, NULL, OPT_FORMAT},
		{"convert", required_argument, NULL, OPT_CONVERT},
		{"help", no_argument, NULL, 'h'},
		{"version", no_argument, NULL, 'V'},
		{NULL, 0, NULL, 0},
	};
	uint64_t v;
	int c;

	o->jobs = 4;
	o->text = DEFAULT_TEXT;
	while ((c = getopt_long(argc, argv, "o:j:hV", longs, NULL)) != -1) {
		switch (c) {
		case 'o':
			o->out = optarg;
			break;
		case OPT_BASE_URL:
			o->base_url = optarg;
			break;
		case OPT_ALLOW_PATHS:
			o->allow_paths = true;
			break;
		case 'j':
			if (parse_u64(optarg, &v) || v < 1 || v > MAX_JOBS) {
				fail("-j wants a number from 1 to %d",
				     MAX_JOBS);
				return -1;
			}
			o->jobs = (unsigned)v;
			break;
		case OPT_HEADER_FILE:
			o->header_file = optarg;
			break;
		case OPT_CHECK:
			o->check = optarg;
			break;
		case OPT_CONVERT:
			o->convert = optarg;
			break;
		case OPT_FORMAT:
			if (strcmp(optarg, "text") &&
			    strcmp(optarg, "binary")) {
				fail("--format wants binary or text, not '%s'",
				     optarg);
				return -1;
			}
			o->text = strcmp(optarg, "text") == 0;
			break;
		case 'h':
			usage(stdout);
			exit(0);
		case 'V':
			printf(PROG " " ECHOFS_VERSION "\n");
			exit(0);
		default:
			usage(stderr);
			return -1;
		}
	}
	return optind;
}

static int run_check(const char *path)
{
	double t0 = now_mono();
	struct index *ix;
	char err[512];
	int r = index_load(path, &ix, err, sizeof(err));

	if (r == -EBADMSG)
		return fail("%s: %s", path, err);
	if (r)
		return fail("%s", err);
	printf("%zu shards, %zu samples, %.3f s\n", ix->nshards, ix->nsamples,
	       now_mono() - t0);
	index_free(ix);
	return 0;
}

/* The URL a local shard is recorded under: base URL + file name, or the
 * absolute path with --allow-paths. Caller frees. */
static char *local_url(const struct opts *o, const char *path)
{
	const char *name = strrchr(path, '/');
	char abs[PATH_MAX], *url;
	size_t n;

	name = name ? name + 1 : path;
	if (!o->base_url)
		return realpath(path, abs) ? xstrdup(abs) : NULL;
	n = strlen(o->base_url);
	url = xmalloc(n + strlen(name) + 2);
	/* "http://h/data" and "http://h/data/" mean the same directory. */
	snprintf(url, n + strlen(name) + 2, "%s%s%s", o->base_url,
		 n && o->base_url[n - 1] == '/' ? "" : "/", name);
	return url;
}

struct skip_ctx {
	const char *path;
};

static void warn_skip(void *ud, const char *reason, uint64_t n)
{
	const struct skip_ctx *c = ud;
	fprintf(stderr, PROG ": warning: %s: %llu skipped: %s\n", c->path,
		(unsigned long long)n, reason);
}

static int feed_file(int fd, struct scan *s, struct sums *sums,
		     const char *path)
{
	char *buf = malloc(READ_CHUNK);
	ssize_t n;
	int r = 0;

	if (!buf)
		return fail("out of memory");
	while ((n = read(fd, buf, READ_CHUNK)) != 0) {
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0) {
			r = fail("%s: %s", path, strerror(errno));
			break;
		}
		if (scan_feed(s, buf, (size_t)n) ||
		    sums_feed(sums, buf, (size_t)n)) {
			r = fail("%s: bad tar: %s", path, scan_error(s));
			break;
		}
	}
	free(buf);
	if (!r && scan_finish(s))
		r = fail("%s: bad tar: %s", path, scan_error(s));
	return r;
}

static int scan_local(struct index *ix, const struct opts *o, const char *path)
{
	struct skip_ctx ctx = {path};
	struct sums *sums;
	struct stat st;
	struct scan *s;
	uint32_t n;
	char *url;
	int fd, r;

	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return fail("%s: %s", path, strerror(errno));
	if (fstat(fd, &st) || !S_ISREG(st.st_mode)) {
		close(fd);
		return fail("%s: not a regular file", path);
	}
	url = local_url(o, path);
	if (!url) {
		close(fd);
		return fail("%s: %s", path, strerror(errno));
	}
	/* ETag unknown for local files: written as "-". */
	n = index_add_shard(ix, url, (uint64_t)st.st_size, "");
	s = scan_new(ix, n);
	free(url);
	sums = sums_new();
	r = feed_file(fd, s, sums, path);
	close(fd);
	/* The sums come from the bytes the scanner saw: a mismatch here is a
	 * bug, never the file's fault. */
	if (!r && sums_fill(sums, ix, n))
		r = fail("%s: checksums do not match the scan", path);
	if (!r)
		scan_for_each_skip(s, warn_skip, &ctx);
	scan_free(s);
	sums_free(sums);
	return r;
}

static int build_local(int n, char **paths, const struct opts *o,
		       struct index **out)
{
	struct index *ix = index_new();

	if (!o->base_url && !o->allow_paths) {
		index_free(ix);
		return fail("local shards need --base-url URL (or "
			    "--allow-paths to record file paths)");
	}
	for (int i = 0; i < n; i++) {
		if (scan_local(ix, o, paths[i])) {
			index_free(ix);
			return 1;
		}
	}
	ix->has_sums = true;
	*out = ix;
	return 0;
}

static void progress(void *ud, size_t done, size_t total,
		     unsigned long long bytes)
{
	(void)ud;
	if (!isatty(STDERR_FILENO))
		return;
	fprintf(stderr, "\r" PROG ": %zu/%zu shards, %.1f MB", done, total,
		(double)bytes / 1e6);
	if (done == total)
		fputc('\n', stderr);
}

/* Expand every URL argument's brace groups into one list. */
static int expand_urls(int n, char **args, struct shardlist *all)
{
	for (int i = 0; i < n; i++) {
		struct shardlist one = {0};
		int r = shardlist_expand(args[i], MAX_SHARDS - all->n, &one);
		char shown[512];
		if (r)
			/* URLs may carry credentials: never print them raw. */
			return fail("%s: %s",
				    http_redact(args[i], shown, sizeof(shown)),
				    r == -E2BIG ? "too many shards"
						: "malformed brace group");
		all->urls = xrealloc(all->urls,
				     (all->n + one.n) * sizeof(*all->urls));
		memcpy(all->urls + all->n, one.urls, one.n * sizeof(*one.urls));
		all->n += one.n;
		one.n = 0; /* the strings moved to all */
		shardlist_clear(&one);
	}
	return 0;
}

static int build_remote(int n, char **args, const struct opts *o,
			struct index **out)
{
	struct http_opts ho = {.connections = o->jobs,
			       .header_file = o->header_file};
	struct shardlist list = {0};
	struct http *h = NULL;
	struct buckets *bk = NULL;
	struct bucket_conf bc = {0};
	char err[512];
	int r;

	if (expand_urls(n, args, &list)) {
		shardlist_clear(&list);
		return 1;
	}
	if (http_global_init()) {
		shardlist_clear(&list);
		return fail("cannot initialise libcurl");
	}
	/* bucket shards (s3://, gs://): endpoint, region and credentials from
	 * each service's environment and files, as its own CLI takes them */
	if (buckets_open(&bc, (const char *const *)list.urls, list.n, &bk, err,
			 sizeof(err))) {
		shardlist_clear(&list);
		return fail("%s", err);
	}
	ho.auth = buckets_hooks(bk);
	if (http_open(&ho, &h, err, sizeof(err))) {
		shardlist_clear(&list);
		buckets_free(bk);
		return fail("%s", err);
	}
	/* e.g. S3 with no region given asks the first bucket */
	buckets_ready(bk, h, (const char *const *)list.urls, list.n);
	r = indexer_build(h, NULL, &list, o->jobs, progress, NULL, out, NULL,
			  err, sizeof(err));
	http_free(h);
	buckets_free(bk);
	shardlist_clear(&list);
	return r ? fail("%s", err) : 0;
}

/* An index is meant to be published: it never holds userinfo or a query
 * string (echofs matches its URLs to SOURCE's without them). */
static void strip_secrets(struct index *ix)
{
	size_t n = 0;
	for (size_t i = 0; i < ix->nshards; i++) {
		char *u = http_strip_query(ix->shards[i].url);
		if (strcmp(u, ix->shards[i].url) != 0) {
			index_set_url(ix, (uint32_t)i, u);
			n++;
		}
		free(u);
	}
	if (n)
		fprintf(stderr,
			PROG
			": warning: %zu shard URL%s held userinfo or "
			"a query string; stripped from the index (pass the "
			"credentials to echofs in SOURCE or -o header_file)\n",
			n, n == 1 ? "" : "s");
}

/* The binary writer seeks back to its header: through a temporary file
 * when standard output is a pipe. */
static int write_bin_stdout(const struct index *ix)
{
	char buf[1 << 16];
	FILE *t;
	size_t n;
	int r;

	if (isatty(STDOUT_FILENO))
		return -ENOTTY;
	/* A file at its start, not appended to: written in place. */
	if (lseek(STDOUT_FILENO, 0, SEEK_CUR) == 0 &&
	    !(fcntl(STDOUT_FILENO, F_GETFL) & O_APPEND))
		return index_bin_write(ix, stdout);
	if (!(t = tmpfile()))
		return -errno;
	r = index_bin_write(ix, t);
	if (!r && fseeko(t, 0, SEEK_SET))
		r = -EIO;
	while (!r && (n = fread(buf, 1, sizeof(buf), t)) > 0)
		if (fwrite(buf, 1, n, stdout) != n)
			r = -EIO;
	if (!r && (ferror(t) || fflush(stdout)))
		r = -EIO;
	fclose(t);
	return r;
}

static int write_index(const struct index *ix, const struct opts *o)
{
	int r;

	if (o->out) {
		r = o->text ? index_save(ix, o->out)
			    : index_bin_save_mode(ix, o->out, 0644);
		return r ? fail("%s: %s", o->out, strerror(-r)) : 0;
	}
	r = o->text ? index_write(ix, stdout) : write_bin_stdout(ix);
	if (r == -ENOTTY)
		return fail("not writing a binary index to a terminal: give "
			    "-o FILE or --format text");
	return r ? fail("writing the index: %s", strerror(-r)) : 0;
}

/* --convert: any index in, the chosen format out. */
static int run_convert(const struct opts *o)
{
	struct index *ix;
	char err[512];
	int r = index_load(o->convert, &ix, err, sizeof(err));

	if (r == -EBADMSG)
		return fail("%s: %s", o->convert, err);
	if (r)
		return fail("%s", err);
	r = write_index(ix, o);
	if (!r)
		fprintf(stderr, PROG ": %zu shards, %zu samples\n", ix->nshards,
			ix->nsamples);
	index_free(ix);
	return r;
}

int main(int argc, char **argv)
{
	struct opts o = {0};
	struct index *ix = NULL;
	int first, nurl = 0, r;

	first = parse_opts(argc, argv, &o);
	if (first < 0)
		return 1;
	if (o.check)
		return run_check(o.check);
	if (o.convert && first != argc)
		return fail("--convert takes no shards");
	if (o.convert)
		return run_convert(&o);
	if (first == argc)
		return fail("no shards given (see --help)");
	log_set_level(LOG_LEVEL_WARN);
	for (int i = first; i < argc; i++)
		nurl += shardlist_is_url(argv[i]) ? 1 : 0;
	if (nurl && nurl != argc - first)
		return fail("cannot mix local files and URLs in one index");
	if (nurl)
		r = build_remote(argc - first, argv + first, &o, &ix);
	else
		r = build_local(argc - first, argv + first, &o, &ix);
	if (r)
		return r;
	strip_secrets(ix);
	r = write_index(ix, &o);
	if (!r) {
		fprintf(stderr, PROG ": %zu shards, %zu samples\n", ix->nshards,
			ix->nsamples);
		if (ix->nsamples == 0)
			fprintf(stderr, PROG ": warning: no samples found\n");
	}
	index_free(ix);
	return r;
}
