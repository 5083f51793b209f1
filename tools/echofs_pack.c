/* echofs_pack.c - pack a user's own files (an ImageFolder tree, a
 * directory of samples or a file list: tools/pack_input.c, written by
 * tools/pack_write.c) or Fashion-MNIST (idx gz files, the demo's input)
 * into WebDataset tar shards. For Fashion-MNIST: key.jpg + key.cls
 * members, and optionally an ImageFolder tree of the same JPEG bytes as a
 * reference copy. Output is deterministic. */
#include <errno.h>
#include <getopt.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <turbojpeg.h>
#include <unistd.h>
#include <zlib.h>

#include "common/util.h"
#include "tools/pack_input.h"
#include "tools/pack_write.h"

#define DATA_DIR "/usr/share/datasets/fashion-mnist"
#define IDX_IMAGES_MAGIC 0x00000803u
#define IDX_LABELS_MAGIC 0x00000801u
#define IMG_SIDE 28
#define IMG_PIXELS (IMG_SIDE * IMG_SIDE)
#define MAX_SAMPLES 10000000u
/* Fashion-MNIST has ten classes; the --tree layout makes one dir each. */
#define MAX_LABEL 9u
#define TAR_BLOCK 512
/* Fixed member mtime (2020-01-01T00:00:00Z) so output is byte-reproducible. */
#define FIXED_MTIME 1577836800u

struct opts {
	const char *split;
	const char *images;
	const char *labels;
	const char *out;
	const char *prefix;
	const char *tree;
	uint64_t per_shard;
	uint64_t limit; /* 0 = all */
	int quality;
	/* A user's own files: one of these three, and how to cut shards. */
	const char *imagefolder, *samples, *files, *base, *base_url;
	uint64_t shards, shard_size, threads, seed;
	int per_shard_set, fashion_set; /* given on the command line */
	int follow_links;		/* --follow-symlinks */
};

struct dataset {
	uint8_t *pixels; /* n * IMG_PIXELS */
	uint8_t *labels; /* n */
	uint32_t n;
};

/* One shard being written: a temp file renamed into place when complete. */
struct shard_out {
	FILE *f;
	char tmp[4096];
	char final[4096];
};

static void usage(FILE *f)
{
	fprintf(f, "usage: echofs-pack [options]\n"
		   "Pack Fashion-MNIST into WebDataset tar shards "
		   "(<prefix>-NNNNNN.tar of key.jpg + key.cls).\n\n"
		   "  --split train|test  which Debian files to read (default "
		   "train)\n"
		   "  --images FILE       images idx(.gz) file (overrides "
		   "--split)\n"
		   "  --labels FILE       labels idx(.gz) file (overrides "
		   "--split)\n"
		   "  --out DIR           output directory (default .)\n"
		   "  --prefix NAME       shard and key prefix (default: split "
		   "name)\n"
		   "  --per-shard N       samples per shard (default 1000)\n"
		   "  --limit N           pack only the first N samples\n"
		   "  --quality Q         JPEG quality 1..100 (default 90)\n"
		   "  --tree DIR          also write DIR/<label>/<key>.jpg\n"
		   "  -h, --help          this help\n\n"
		   "Or pack your own files (samples shuffled across shards, "
		   "<prefix>.echofs-index\nwritten beside them):\n"
		   "  --imagefolder DIR   DIR/<class>/<name>.<image ext>: "
		   "key <class>/<name>,\n"
		   "                      members the image and .cls (class "
		   "index; the index\n"
		   "                      keeps the class names)\n"
		   "  --samples DIR       every file under DIR; files sharing "
		   "<dir>/<name> (up to\n"
		   "                      the first dot) make one sample\n"
		   "  --files LIST        the files LIST names (one path a "
		   "line, - for stdin),\n"
		   "                      relative to --base DIR (default .), "
		   "grouped the same way\n"
		   "  --shards N          write N shards\n"
		   "  --shard-size SIZE   or shards of at most SIZE bytes "
		   "(default 256M; K/M/G)\n"
		   "  --per-shard N       or N samples a shard\n"
		   "  --seed N            seed of the shuffle (default 0)\n"
		   "  --threads N         shards written at a time (default: "
		   "cores)\n"
		   "  --base-url URL      index URLs URL/<shard> (default: the "
		   "shards' paths)\n"
		   "  --follow-symlinks   follow a symlink whose target is "
		   "inside the input tree\n"
		   "                      (default: skip every symlink; one "
		   "leading out of the\n"
		   "                      tree is always skipped, a directory "
		   "loop too)\n"
		   "  --out, --prefix     as above (prefix default: data)\n"
		   "A symlink not followed, a FIFO, socket or device, an "
		   "unreadable file: each is\nskipped with a line on stderr "
		   "and counted, and the rest packed (exit 0).\n");
}

/* Print one "echofs-pack: ..." line on stderr; returns 1 (the exit code). */
__attribute__((format(printf, 1, 2))) static int fail(const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	fputs("echofs-pack: ", stderr);
	vfprintf(stderr, fmt, ap);
	fputc('\n', stderr);
	va_end(ap);
	return 1;
}

static int parse_num(const char *opt, const char *s, uint64_t lo, uint64_t hi,
		     uint64_t *out)
{
	if (parse_u64(s, out) < 0 || *out < lo || *out > hi)
		return fail("invalid value for %s: '%s'", opt, s);
	return 0;
}

/* String options, in the order of their getopt values. */
static const char **string_opt(struct opts *o, int c)
{
	switch (c) {
	case 's':
		return &o->split;
	case 'i':
		return &o->images;
	case 'l':
		return &o->labels;
	case 'o':
		return &o->out;
	case 'p':
		return &o->prefix;
	case 't':
		return &o->tree;
	case 'F':
		return &o->imagefolder;
	case 'S':
		return &o->samples;
	case 'f':
		return &o->files;
	case 'b':
		return &o->base;
	case 'u':
		return &o->base_url;
	default:
		return NULL;
	}
}

static int number_opt(struct opts *o, int c, const char *arg, uint64_t *q)
{
	switch (c) {
	case 'n':
		o->per_shard_set = 1;
		return parse_num("--per-shard", arg, 1, MAX_SAMPLES,
				 &o->per_shard);
	case 'N':
		return parse_num("--shards", arg, 1, MAX_SAMPLES, &o->shards);
	case 'T':
		return parse_num("--threads", arg, 1, 1024, &o->threads);
	case 'e':
		return parse_num("--seed", arg, 0, UINT64_MAX, &o->seed);
	case 'z':
		if (parse_size(arg, &o->shard_size) || o->shard_size < 4096)
			return fail("invalid value for --shard-size: '%s' "
				    "(at least 4K)", arg);
		return 0;
	case 'L':
		return parse_num("--limit", arg, 1, MAX_SAMPLES, &o->limit);
	case 'q':
		return parse_num("--quality", arg, 1, 100, q);
	default:
		usage(stderr);
		return 2;
	}
}

static int parse_args(int argc, char **argv, struct opts *o)
{
	static const struct option lopts[] = {
		{"split", required_argument, NULL, 's'},
		{"images", required_argument, NULL, 'i'},
		{"labels", required_argument, NULL, 'l'},
		{"out", required_argument, NULL, 'o'},
		{"prefix", required_argument, NULL, 'p'},
		{"per-shard", required_argument, NULL, 'n'},
		{"limit", required_argument, NULL, 'L'},
		{"quality", required_argument, NULL, 'q'},
		{"tree", required_argument, NULL, 't'},
		{"imagefolder", required_argument, NULL, 'F'},
		{"samples", required_argument, NULL, 'S'},
		{"files", required_argument, NULL, 'f'},
		{"base", required_argument, NULL, 'b'},
		{"base-url", required_argument, NULL, 'u'},
		{"shards", required_argument, NULL, 'N'},
		{"shard-size", required_argument, NULL, 'z'},
		{"threads", required_argument, NULL, 'T'},
		{"seed", required_argument, NULL, 'e'},
		{"follow-symlinks", no_argument, NULL, 'Y'},
		{"help", no_argument, NULL, 'h'},
		{NULL, 0, NULL, 0},
	};
	uint64_t q = 90;
	int c, rc = 0;

	while (rc == 0 &&
	       (c = getopt_long(argc, argv, "h", lopts, NULL)) != -1) {
		const char **str = string_opt(o, c);

		if (c == 'h') {
			usage(stdout);
			exit(0);
		}
		if (c == 'Y') {
			o->follow_links = 1;
			continue;
		}
		if (strchr("siltLq", c))
			o->fashion_set = 1;
		if (str)
			*str = optarg;
		else
			rc = number_opt(o, c, optarg, &q);
	}
	if (rc)
		return rc;
	if (optind < argc)
		return fail("unexpected argument '%s'", argv[optind]);
	o->quality = (int)q;
	return 0;
}

/* Fill in the file names implied by --split. Returns 0 or 2 (usage). */
static int resolve_split(struct opts *o, char *img, char *lab, size_t len)
{
	const char *base;

	if (strcmp(o->split, "train") == 0)
		base = "train";
	else if (strcmp(o->split, "test") == 0)
		base = "t10k";
	else
		return fail("--split must be train or test, not '%s'",
			    o->split) *
		       2;
	snprintf(img, len, "%s/%s-images-idx3-ubyte.gz", DATA_DIR, base);
	snprintf(lab, len, "%s/%s-labels-idx1-ubyte.gz", DATA_DIR, base);
	if (!o->images)
		o->images = img;
	if (!o->labels)
		o->labels = lab;
	if (!o->prefix)
		o->prefix = o->split;
	return 0;
}

/* Read exactly len bytes from a gz (or plain) file. */
static int gz_read_all(gzFile g, void *buf, size_t len)
{
	uint8_t *p = buf;

	while (len > 0) {
		unsigned chunk = len > (1u << 30) ? (1u << 30) : (unsigned)len;
		int n = gzread(g, p, chunk);

		if (n <= 0)
			return -EBADMSG;
		p += n;
		len -= (size_t)n;
	}
	return 0;
}

static uint32_t be32(const uint8_t *b)
{
	return (uint32_t)b[0] << 24 | (uint32_t)b[1] << 16 |
	       (uint32_t)b[2] << 8 | b[3];
}

/* Open an idx file, check its magic and read `ndims` big-endian dimensions. */
static int idx_open(const char *path, uint32_t magic, uint32_t *dims, int ndims,
		    gzFile *out)
{
	uint8_t hdr[16];
	gzFile g = gzopen(path, "rb");

	if (!g)
		return fail("%s: cannot open: %s", path, strerror(errno));
	if (gz_read_all(g, hdr, 4 + 4 * (size_t)ndims) < 0) {
		gzclose(g);
		return fail("%s: %s", path, "truncated idx header");
	}
	if (be32(hdr) != magic) {
		gzclose(g);
		return fail("%s: %s", path,
			    magic == IDX_IMAGES_MAGIC
				    ? "not an idx3 images file (bad magic)"
				    : "not an idx1 labels file (bad magic)");
	}
	for (int i = 0; i < ndims; i++)
		dims[i] = be32(hdr + 4 + 4 * i);
	*out = g;
	return 0;
}

static int load_images(const char *path, struct dataset *ds)
{
	uint32_t dims[3];
	gzFile g;
	int rc = idx_open(path, IDX_IMAGES_MAGIC, dims, 3, &g);

	if (rc)
		return rc;
	if (dims[1] != IMG_SIDE || dims[2] != IMG_SIDE || dims[0] == 0 ||
	    dims[0] > MAX_SAMPLES) {
		gzclose(g);
		return fail("%s: %s", path,
			    "unexpected dimensions (want N x 28 x 28)");
	}
	ds->n = dims[0];
	ds->pixels = malloc((size_t)ds->n * IMG_PIXELS);
	if (!ds->pixels) {
		gzclose(g);
		return fail("%s: %s", path, "out of memory");
	}
	rc = gz_read_all(g, ds->pixels, (size_t)ds->n * IMG_PIXELS);
	gzclose(g);
	if (rc < 0)
		return fail("%s: %s", path, "truncated image data");
	return 0;
}

static int load_labels(const char *path, struct dataset *ds)
{
	uint32_t n;
	gzFile g;
	int rc = idx_open(path, IDX_LABELS_MAGIC, &n, 1, &g);

	if (rc)
		return rc;
	if (n != ds->n) {
		gzclose(g);
		return fail("%s: %s", path,
			    "label count differs from image count");
	}
	ds->labels = malloc(n);
	if (!ds->labels) {
		gzclose(g);
		return fail("%s: %s", path, "out of memory");
	}
	rc = gz_read_all(g, ds->labels, n);
	gzclose(g);
	if (rc < 0)
		return fail("%s: %s", path, "truncated label data");
	return 0;
}

/* Octal field of width w: w-1 zero-padded digits and a NUL. */
static void tar_octal(char *field, size_t w, uint64_t v)
{
	char tmp[32];

	snprintf(tmp, sizeof(tmp), "%0*llo", (int)(w - 1),
		 (unsigned long long)v);
	memcpy(field, tmp, w - 1);
	field[w - 1] = '\0';
}

/* A ustar header for a regular file (name must fit in 100 bytes). */
static void tar_header(uint8_t blk[TAR_BLOCK], const char *name, uint64_t size)
{
	char *h = (char *)blk;
	unsigned sum = 0;

	memset(blk, 0, TAR_BLOCK);
	memcpy(h, name, strlen(name));
	tar_octal(h + 100, 8, 0644);
	tar_octal(h + 108, 8, 0);
	tar_octal(h + 116, 8, 0);
	tar_octal(h + 124, 12, size);
	tar_octal(h + 136, 12, FIXED_MTIME);
	h[156] = '0';
	memcpy(h + 257, "ustar", 6); /* magic "ustar\0" */
	memcpy(h + 263, "00", 2);
	memset(h + 148, ' ', 8); /* checksum counts its own field as spaces */
	for (int i = 0; i < TAR_BLOCK; i++)
		sum += blk[i];
	snprintf(h + 148, 8, "%06o", sum); /* six digits, NUL, then space */
	h[155] = ' ';
}

static int tar_member(FILE *f, const char *name, const void *data, size_t len)
{
	uint8_t blk[TAR_BLOCK];
	size_t pad = (TAR_BLOCK - len % TAR_BLOCK) % TAR_BLOCK;

	tar_header(blk, name, len);
	if (fwrite(blk, 1, TAR_BLOCK, f) != TAR_BLOCK ||
	    fwrite(data, 1, len, f) != len)
		return -EIO;
	memset(blk, 0, sizeof(blk));
	if (pad && fwrite(blk, 1, pad, f) != pad)
		return -EIO;
	return 0;
}

/* Create the temp file that becomes `final` on commit. */
static int out_open(struct shard_out *so, const char *final)
{
	int n = snprintf(so->final, sizeof(so->final), "%s", final);
	int m = snprintf(so->tmp, sizeof(so->tmp), "%s.tmp.%ld", final,
			 (long)getpid());

	if (n < 0 || (size_t)n >= sizeof(so->final) || m < 0 ||
	    (size_t)m >= sizeof(so->tmp))
		return fail("%s: path too long", final);
	so->f = fopen(so->tmp, "wb");
	if (!so->f)
		return fail("%s: %s", so->tmp, strerror(errno));
	return 0;
}

/* Flush (and for shards sync) then rename into place; on write errors remove
 * the temp file so a partial file never carries the final name. */
static int out_commit(struct shard_out *so, int write_rc, int sync)
{
	int rc = write_rc;

	if (rc == 0 && fflush(so->f) != 0)
		rc = -errno;
	if (rc == 0 && sync && fsync(fileno(so->f)) != 0)
		rc = -errno;
	if (fclose(so->f) != 0 && rc == 0)
		rc = -errno;
	so->f = NULL;
	if (rc == 0 && rename(so->tmp, so->final) != 0)
		rc = -errno;
	if (rc) {
		unlink(so->tmp);
		return fail("%s: write failed: %s", so->final, strerror(-rc));
	}
	return 0;
}

static int write_file(const char *path, const void *data, size_t len)
{
	struct shard_out so;
	int rc = out_open(&so, path);

	if (rc)
		return rc;
	rc = fwrite(data, 1, len, so.f) == len ? 0 : -EIO;
	return out_commit(&so, rc, 0);
}

/* mkdir -p: the parents of --out and --tree are created too. */
static int make_dir(const char *path)
{
	char buf[4096];
	size_t len = strlen(path);

	if (len >= sizeof(buf))
		return fail("%s: path too long", path);
	memcpy(buf, path, len + 1);
	for (char *p = buf + 1; *p; p++) {
		if (*p != '/')
			continue;
		*p = '\0';
		if (mkdir(buf, 0755) != 0 && errno != EEXIST)
			return fail("%s: cannot create directory: %s", buf,
				    strerror(errno));
		*p = '/';
	}
	if (mkdir(buf, 0755) == 0 || errno == EEXIST)
		return 0;
	return fail("%s: cannot create directory: %s", path, strerror(errno));
}

struct packer {
	const struct opts *o;
	const struct dataset *ds;
	tjhandle tj;
	unsigned char *jpg; /* tjBufSize-sized, never reallocated */
	unsigned long jpg_len;
};

static int encode(struct packer *pk, uint32_t i)
{
	pk->jpg_len = tjBufSize(IMG_SIDE, IMG_SIDE, TJSAMP_GRAY);
	if (tjCompress2(pk->tj, pk->ds->pixels + (size_t)i * IMG_PIXELS,
			IMG_SIDE, IMG_SIDE, IMG_SIDE, TJPF_GRAY, &pk->jpg,
			&pk->jpg_len, TJSAMP_GRAY, pk->o->quality,
			TJFLAG_NOREALLOC) != 0)
		return fail("JPEG encoding failed: %s", tjGetErrorStr2(pk->tj));
	return 0;
}

static int write_tree_copy(struct packer *pk, const char *key, unsigned label)
{
	char path[4096];

	snprintf(path, sizeof(path), "%s/%u/%s.jpg", pk->o->tree, label, key);
	return write_file(path, pk->jpg, pk->jpg_len);
}

static int pack_sample(struct packer *pk, FILE *f, uint32_t i)
{
	char key[256], name[300], cls[8];
	unsigned label = pk->ds->labels[i];
	int rc;

	snprintf(key, sizeof(key), "%s_%06lu", pk->o->prefix, (unsigned long)i);
	rc = encode(pk, i);
	if (rc)
		return rc;
	snprintf(name, sizeof(name), "%s.jpg", key);
	if (tar_member(f, name, pk->jpg, pk->jpg_len) < 0)
		return -EIO;
	snprintf(name, sizeof(name), "%s.cls", key);
	snprintf(cls, sizeof(cls), "%u", label);
	if (tar_member(f, name, cls, strlen(cls)) < 0)
		return -EIO;
	return pk->o->tree ? write_tree_copy(pk, key, label) : 0;
}

/* Write shard number s holding samples [first, end). */
static int pack_shard(struct packer *pk, uint64_t s, uint32_t first,
		      uint32_t end)
{
	static const uint8_t zeros[2 * TAR_BLOCK];
	struct shard_out so;
	char path[4096];
	int rc = 0;

	snprintf(path, sizeof(path), "%s/%s-%06llu.tar", pk->o->out,
		 pk->o->prefix, (unsigned long long)s);
	if (out_open(&so, path))
		return 1;
	for (uint32_t i = first; i < end && rc == 0; i++)
		rc = pack_sample(pk, so.f, i);
	if (rc > 0) { /* an error already reported */
		fclose(so.f);
		unlink(so.tmp);
		return rc;
	}
	/* End of archive: two zero blocks. */
	if (rc == 0 && fwrite(zeros, 1, sizeof(zeros), so.f) != sizeof(zeros))
		rc = -EIO;
	return out_commit(&so, rc, 0);
}

static int make_dirs(const struct opts *o)
{
	char path[4096];

	if (make_dir(o->out))
		return 1;
	if (!o->tree)
		return 0;
	if (make_dir(o->tree))
		return 1;
	for (unsigned l = 0; l <= MAX_LABEL; l++) {
		snprintf(path, sizeof(path), "%s/%u", o->tree, l);
		if (make_dir(path))
			return 1;
	}
	return 0;
}

static int check_labels(const struct dataset *ds, uint32_t n)
{
	for (uint32_t i = 0; i < n; i++)
		if (ds->labels[i] > MAX_LABEL)
			return fail("sample %lu: label %u out of range 0..%u",
				    (unsigned long)i, ds->labels[i], MAX_LABEL);
	return 0;
}

static int pack_all(const struct opts *o, const struct dataset *ds)
{
	struct packer pk = {.o = o, .ds = ds};
	uint32_t n = ds->n;
	uint64_t shard = 0;
	int rc = 0;

	if (o->limit && o->limit < n)
		n = (uint32_t)o->limit;
	if (check_labels(ds, n) || make_dirs(o))
		return 1;
	pk.tj = tjInitCompress();
	pk.jpg = tjAlloc((int)tjBufSize(IMG_SIDE, IMG_SIDE, TJSAMP_GRAY));
	if (!pk.tj || !pk.jpg)
		rc = fail("cannot initialise TurboJPEG");
	for (uint32_t i = 0; rc == 0 && i < n; i += (uint32_t)o->per_shard) {
		uint64_t end = i + o->per_shard;

		rc = pack_shard(&pk, shard++, i, end < n ? (uint32_t)end : n);
	}
	tjFree(pk.jpg);
	if (pk.tj)
		tjDestroy(pk.tj);
	if (rc == 0)
		printf("echofs-pack: %lu samples in %llu shards under %s\n",
		       (unsigned long)n, (unsigned long long)shard, o->out);
	return rc ? 1 : 0;
}

/* s on f, its control bytes (a newline could forge a line) as \xNN. */
static void put_escaped(FILE *f, const char *s)
{
	for (; *s; s++) {
		unsigned char c = (unsigned char)*s;
		if (c < 0x20 || c == 0x7f || c == '\\')
			fprintf(f, "\\x%02x", c);
		else
			fputc(c, f);
	}
}

/* One line for each entry left out of the pack (pack_input.h). */
static void print_skip(void *arg, enum pack_skip reason, const char *path,
		       const char *why)
{
	(void)arg;
	(void)reason;
	fputs("echofs-pack: skipped ", stderr);
	put_escaped(stderr, path);
	fputs(": ", stderr);
	put_escaped(stderr, why);
	fputc('\n', stderr);
}

/* "N skipped: 1 hidden or ignored, 2 symlinks out of the tree, ..." into
 * buf: the total, then each reason met. */
static void skip_summary(const struct pack_input *in, char *buf, size_t len)
{
	static const char *const what[PACK_SKIP_NREASONS][2] = {
		[PACK_SKIP_IGNORED] = {"hidden or ignored", NULL},
		[PACK_SKIP_LINK_OUT] = {"symlink out of the tree",
					"symlinks out of the tree"},
		[PACK_SKIP_LINK] = {"symlink not followed",
				    "symlinks not followed"},
		[PACK_SKIP_LINK_BROKEN] = {"broken symlink", "broken symlinks"},
		[PACK_SKIP_LOOP] = {"directory loop", "directory loops"},
		[PACK_SKIP_SPECIAL] = {"special file", "special files"},
		[PACK_SKIP_UNREADABLE] = {"unreadable", NULL},
	};
	const char *sep = ":";
	uint64_t total = 0;
	size_t used;

	for (int r = 0; r < PACK_SKIP_NREASONS; r++)
		total += in->skipped[r];
	used = (size_t)snprintf(buf, len, "%llu skipped",
				(unsigned long long)total);
	for (int r = 0; r < PACK_SKIP_NREASONS && used < len; r++) {
		uint64_t n = in->skipped[r];
		if (n == 0)
			continue;
		used += (size_t)snprintf(buf + used, len - used, "%s %llu %s",
					 sep, (unsigned long long)n,
					 n > 1 && what[r][1] ? what[r][1]
							     : what[r][0]);
		sep = ",";
	}
}

/* --imagefolder, --samples or --files: the user's own files. */
static int own_input(const struct opts *o, struct pack_input *in)
{
	int given = !!o->imagefolder + !!o->samples + !!o->files, r;

	if (given != 1)
		return fail("give one of --imagefolder, --samples and --files");
	if (o->fashion_set)
		return fail("--split, --images, --labels, --limit, --quality "
			    "and --tree are for Fashion-MNIST, not for your "
			    "own files");
	in->threads = (unsigned)o->threads;
	in->follow_links = o->follow_links;
	in->on_skip = print_skip;
	if (!in->threads) {
		long n = sysconf(_SC_NPROCESSORS_ONLN);
		in->threads = n > 0 ? (unsigned)n : 1;
	}
	if (o->imagefolder)
		r = pack_input_imagefolder(in, o->imagefolder);
	else if (o->samples)
		r = pack_input_dir(in, o->samples);
	else
		r = pack_input_list(in, o->files, o->base ? o->base : ".");
	return r ? fail("%s", in->err) : 0;
}

static int pack_own(const struct opts *o)
{
	struct pack_write_opts w = {
		.out = o->out, .prefix = o->prefix ? o->prefix : "data",
		.base_url = o->base_url, .shards = o->shards,
		.shard_size = o->shard_size, .seed = o->seed,
		.threads = (unsigned)o->threads,
		.per_shard = o->per_shard_set ? o->per_shard : 0};
	struct pack_write_result res;
	struct pack_input in = {0};
	char err[640], skips[400];
	int rc = own_input(o, &in);

	if (!w.shards && !w.per_shard && !w.shard_size)
		w.shard_size = 256ull << 20;
	if (!w.threads) {
		long n = sysconf(_SC_NPROCESSORS_ONLN);
		w.threads = n > 0 ? (unsigned)n : 1;
	}
	if (rc == 0 && (strchr(w.prefix, '/') || !w.prefix[0] ||
			strlen(w.prefix) > 200))
		rc = fail("--prefix '%s' must be a short name without '/'",
			  w.prefix);
	if (rc == 0 && make_dir(o->out))
		rc = 1;
	if (rc == 0 && pack_write(&in, &w, &res, err, sizeof(err)))
		rc = fail("%s", err);
	skip_summary(&in, skips, sizeof(skips));
	if (rc == 0)
		printf("echofs-pack: %llu samples (%llu members, %s) "
		       "in %zu shards, %.1f MB, under %s; index %s/%s.echofs-"
		       "index\n",
		       (unsigned long long)res.samples,
		       (unsigned long long)res.files, skips, res.shards,
		       (double)res.bytes / 1e6, o->out, o->out, w.prefix);
	pack_input_free(&in);
	return rc;
}

int main(int argc, char **argv)
{
	struct opts o = {.split = "train", .out = ".", .per_shard = 1000};
	struct dataset ds = {0};
	char img[4096], lab[4096];
	int rc = parse_args(argc, argv, &o);

	if (rc == 0 && (o.imagefolder || o.samples || o.files))
		return pack_own(&o);
	if (rc == 0 && (o.shards || o.shard_size || o.base || o.base_url ||
			o.threads || o.seed || o.follow_links))
		rc = fail("--shards, --shard-size, --threads, --seed, --base, "
			  "--base-url and --follow-symlinks are for your own "
			  "files "
			  "(--imagefolder, --samples or --files)");
	if (rc == 0)
		rc = resolve_split(&o, img, lab, sizeof(img));
	if (rc == 0 && strlen(o.prefix) + 16 > 90)
		rc = fail("--prefix '%s' is too long", o.prefix);
	if (rc == 0 && (strchr(o.prefix, '/') || o.prefix[0] == '\0'))
		rc = fail("--prefix '%s' must be a non-empty name without '/'",
			  o.prefix);
	if (rc == 0)
		rc = load_images(o.images, &ds);
	if (rc == 0)
		rc = load_labels(o.labels, &ds);
	if (rc == 0)
		rc = pack_all(&o, &ds);
	free(ds.pixels);
	free(ds.labels);
	return rc;
}
