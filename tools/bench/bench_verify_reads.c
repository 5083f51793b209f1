/* bench_verify_reads.c - CPU cost of the checksum checks on the read path:
 * every sample of a format 2 index read with shards_read from a warm disk
 * cache, with the checks (format 2) and without (the same index taken as
 * format 1), alternating, in CPU microseconds per sample.
 *   bench_verify_reads INDEX CACHE_DIR [ROUNDS]
 * The first pass fills CACHE_DIR from the index's URLs. */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "cache/store/shards.h"
#include "cache/store/store.h"
#include "common/log.h"
#include "fetch/format/index.h"
#include "fetch/net/http.h"

static double cpu_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* One pass over every sample; CPU seconds, or -1 on a read error. */
static double pass(struct index *ix, struct http *h, struct store *st,
		   uint8_t *buf)
{
	struct shards_opts so = {.workers = 2};
	struct shards *sh;
	double t0 = cpu_s();

	if (shards_open(ix, h, st, &so, &sh))
		return -1;
	for (size_t i = 0; i < ix->nsamples; i++) {
		const struct index_sample *s = &ix->samples[i];
		if (shards_read(sh, s->shard, s->offset, (size_t)s->size,
				buf) != (ssize_t)s->size) {
			shards_free(sh);
			return -1;
		}
	}
	t0 = cpu_s() - t0;
	shards_free(sh);
	return t0;
}

int main(int argc, char **argv)
{
	char err[512];
	struct index *ix;
	struct http *h;
	struct store *st;
	uint8_t *buf = malloc(64 << 20);
	int rounds = argc > 3 ? atoi(argv[3]) : 5;
	double on = 0, off = 0;

	if (argc < 3 || !buf)
		return 2;
	log_set_level(LOG_LEVEL_ERROR);
	if (index_load(argv[1], &ix, err, sizeof(err)) || !ix->has_sums ||
	    http_global_init() ||
	    http_open(&(struct http_opts){0}, &h, err, sizeof(err)) ||
	    store_open(argv[2], 1ULL << 34, &st, err, sizeof(err))) {
		fprintf(stderr, "bench_verify_reads: %s\n", err);
		return 1;
	}
	if (pass(ix, h, st, buf) < 0) /* fill the cache */
		return 1;
	for (int r = 0; r < rounds; r++) {
		ix->has_sums = false;
		off += pass(ix, h, st, buf);
		ix->has_sums = true;
		on += pass(ix, h, st, buf);
	}
	printf("| samples | format 1 CPU µs/sample | format 2 CPU µs/sample | "
	       "extra |\n|---:|---:|---:|---:|\n| %zu | %.2f | %.2f | %.1f%% "
	       "|\n",
	       ix->nsamples, off / rounds / (double)ix->nsamples * 1e6,
	       on / rounds / (double)ix->nsamples * 1e6,
	       (on - off) / off * 100);
	store_close(st);
	http_free(h);
	index_free(ix);
	free(buf);
	return 0;
}
