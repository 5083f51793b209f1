/* bench_checksum.c - throughput of the member checksum echofs checks on
 * every first read (XXH3-64, xxhash) beside zlib's crc32, per member size.
 *   bench_checksum [SECONDS_PER_CASE]
 * Prints a markdown table: member size, GB/s and ns per member for each. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <xxhash.h>
#include <zlib.h>

#include "common/util.h"

struct algo {
	const char *name;
	uint64_t (*fn)(const void *p, size_t n);
};

static uint64_t xxh3(const void *p, size_t n)
{
	return XXH3_64bits(p, n);
}

static uint64_t crc(const void *p, size_t n)
{
	return crc32(0L, p, (uInt)n);
}

/* Members of n bytes hashed for about `secs`: bytes per second. */
static double rate(const struct algo *a, const uint8_t *buf, size_t n,
		   double secs)
{
	volatile uint64_t sink = 0;
	uint64_t done = 0;
	double t0 = now_mono(), el;

	do {
		for (int i = 0; i < 64; i++)
			sink ^= a->fn(buf + (done++ % 16) * 64, n);
		el = now_mono() - t0;
	} while (el < secs);
	(void)sink;
	return (double)done * (double)n / el;
}

int main(int argc, char **argv)
{
	static const size_t sizes[] = {900, 16 << 10, 110 << 10, 1 << 20};
	static const struct algo algos[] = {{"XXH3-64", xxh3},
					    {"crc32 (zlib)", crc}};
	double secs = argc > 1 ? atof(argv[1]) : 1.0;
	uint8_t *buf = malloc((1 << 20) + 1024);

	if (!buf)
		return 1;
	for (size_t i = 0; i < (1 << 20) + 1024; i++)
		buf[i] = (uint8_t)(i * 2654435761u >> 13);
	printf("| member size | checksum | GB/s | ns per member |\n");
	printf("|---:|---|---:|---:|\n");
	for (size_t s = 0; s < sizeof(sizes) / sizeof(sizes[0]); s++) {
		for (size_t a = 0; a < 2; a++) {
			double r = rate(&algos[a], buf, sizes[s], secs);
			printf("| %zu | %s | %.2f | %.0f |\n", sizes[s],
			       algos[a].name, r / 1e9,
			       (double)sizes[s] / r * 1e9);
		}
	}
	free(buf);
	return 0;
}
