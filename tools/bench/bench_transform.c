/* bench_transform.c - times transform_apply on JPEG files in memory, one
 * thread: decode (DCT-scaled) -> resize shorter side -> centre crop -> JPEG.
 * Used by tools/bench/bench_transform.sh; prints "echofs <images/s>" per run.
 * With --resize 1: decodes every file once (DCT-scaled for --size), then
 * times transform_resize alone, the whole image to shorter side --size (an
 * echo pool's resize of each fresh sample); prints "resize <us/image>" per
 * run and an XXH3 hash over every output, equal across builds whose resize
 * makes the same bytes. */
#include "cache/image/transform.h"
#include "common/file.h"
#include "common/util.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

struct file {
	uint8_t *data;
	size_t len;
};

#define MAX_IMAGE_FILE (256u << 20)

static int load(const char *path, struct file *f)
{
	char *data;
	int r = file_read_all(path, MAX_IMAGE_FILE, &data, &f->len);
	if (r)
		return r;
	f->data = (uint8_t *)data;
	return f->len ? 0 : -EIO;
}

/* One pass over all files; returns images/s, or -1 on a failed image. */
static double run(struct transform_ctx *tc, const struct transform_opts *o,
		  const struct file *fs, int n)
{
	double t0 = now_mono();
	for (int i = 0; i < n; i++) {
		uint8_t *out;
		size_t len;
		char why[128] = "";
		if (transform_apply(tc, o, fs[i].data, fs[i].len, (uint64_t)i,
				    &out, &len, why, sizeof(why)) < 0) {
			fprintf(stderr, "image %d: %s\n", i, why);
			return -1;
		}
		free(out);
	}
	return n / (now_mono() - t0);
}

/* transform_apply, warmed, then timed runs times: 0, or 1 on a failure. */
static int bench_apply(struct transform_ctx *tc, const struct transform_opts *o,
		       const struct file *fs, int n, uint64_t runs)
{
	run(tc, o, fs, n < 20 ? n : 20); /* warm caches */
	for (uint64_t r = 0; r < runs; r++) {
		double ips = run(tc, o, fs, n);
		if (ips < 0)
			return 1;
		printf("echofs %.1f\n", ips);
	}
	return 0;
}

/* One pass of transform_resize over the decoded images: us/image, or -1. */
static double run_resize(const struct image *im, int n, unsigned size,
			 uint64_t *hash)
{
	double t0 = now_mono();
	for (int i = 0; i < n; i++) {
		struct image o;
		if (transform_resize(&im[i], size, &o) < 0)
			return -1;
		if (hash)
			*hash = XXH3_64bits_withSeed(o.rgb, (size_t)o.w * o.h * 3,
						     *hash);
		transform_image_free(&o);
	}
	return 1e6 * (now_mono() - t0) / n;
}

static int bench_resize(struct transform_ctx *tc, const struct file *fs,
			int n, unsigned size, uint64_t runs)
{
	struct image *im = xcalloc((size_t)n, sizeof(*im));
	uint64_t hash = 0;
	int r = 0;

	for (int i = 0; i < n && !r; i++) {
		char why[128] = "";
		if (transform_decode(tc, fs[i].data, fs[i].len, size, 0, &im[i],
				     why, sizeof(why)) < 0) {
			fprintf(stderr, "image %d: %s\n", i, why);
			r = 1;
		}
	}
	if (!r && run_resize(im, n, size, &hash) < 0) /* warm, and the hash */
		r = 1;
	for (uint64_t k = 0; !r && k < runs; k++) {
		double us = run_resize(im, n, size, NULL);
		if (us < 0)
			r = 1;
		else
			printf("resize %.1f\n", us);
	}
	if (!r)
		printf("hash %016llx (%ux%u -> shorter side %u)\n",
		       (unsigned long long)hash, im[0].w, im[0].h, size);
	for (int i = 0; i < n; i++)
		transform_image_free(&im[i]);
	free(im);
	return r;
}

int main(int argc, char **argv)
{
	uint64_t runs = 5, size = 256, crop = 224, q = 90, resize = 0;
	int a = 1;
	for (; a + 1 < argc && argv[a][0] == '-'; a += 2) {
		uint64_t *v = !strcmp(argv[a], "--runs")      ? &runs
			      : !strcmp(argv[a], "--size")    ? &size
			      : !strcmp(argv[a], "--crop")    ? &crop
			      : !strcmp(argv[a], "--quality") ? &q
			      : !strcmp(argv[a], "--resize")  ? &resize
							      : NULL;
		if (!v || parse_u64(argv[a + 1], v) < 0 || *v > 65500) {
			fprintf(stderr, "bad option %s\n", argv[a]);
			return 2;
		}
	}
	if (a >= argc) {
		fprintf(stderr, "usage: bench_transform [--runs N] [--size S] "
				"[--crop C] [--quality Q] [--resize 1] "
				"FILE.jpg...\n");
		return 2;
	}
	int n = argc - a;
	struct file *fs = xcalloc((size_t)n, sizeof(*fs));
	for (int i = 0; i < n; i++)
		if (load(argv[a + i], &fs[i]) < 0) {
			fprintf(stderr, "%s: cannot read\n", argv[a + i]);
			return 1;
		}
	struct transform_opts o = {.size = (unsigned)size,
				   .crop = (unsigned)crop,
				   .format = TF_JPEG,
				   .quality = (int)q};
	struct transform_ctx *tc = transform_ctx_new();
	int r = resize ? bench_resize(tc, fs, n, (unsigned)size, runs)
		       : bench_apply(tc, &o, fs, n, runs);
	transform_ctx_free(tc);
	for (int i = 0; i < n; i++)
		free(fs[i].data);
	free(fs);
	return r;
}
