/* index_write.c - writing the dataset index's text format (see index.h),
 * to a stream or atomically to a file. */
#include "fetch/format/index_int.h"

#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/util.h"

/* The end of an S or M line: the sum in format 2. */
static void write_sum(FILE *f, const struct index *ix, uint64_t sum)
{
	if (ix->has_sums)
		fprintf(f, "\t%016llx\n", (unsigned long long)sum);
	else
		fputc('\n', f);
}

/* An M line stands for this member (add_implied_members): the same
 * place, size, sum, key and name. */
static bool implied(const struct index *ix, const struct index_places *p,
		    const struct index_sample *m)
{
	int64_t i = index_places_find(p, ix->samples, m);
	const struct index_sample *s = i >= 0 ? &ix->samples[i] : NULL;

	return s && s->size == m->size && s->sum == m->sum &&
	       strcmp(index_key(ix, s), index_key(ix, m)) == 0 &&
	       strcmp(index_ext(ix, s), index_ext(ix, m)) == 0;
}

/* Format 3's F lines: the members no M line stands for. */
static void write_members(const struct index *ix, FILE *f)
{
	struct index_places p;

	index_places_make(&p, ix->samples, ix->nsamples);
	for (size_t i = 0; i < ix->nmembers; i++) {
		const struct index_sample *m = &ix->members[i];
		if (implied(ix, &p, m))
			continue;
		fprintf(f, "F\t%u\t%llu\t%llu\t%s\t%s", m->shard,
			(unsigned long long)m->offset,
			(unsigned long long)m->size, index_key(ix, m),
			index_ext(ix, m));
		write_sum(f, ix, m->sum);
	}
	free(p.slot);
}

int index_write(const struct index *ix, FILE *f)
{
	size_t i;

	for (i = 0; i < ix->nshards; i++) {
		const struct index_shard *s = &ix->shards[i];
		if (!s->url[0] || !index_text_ok(s->url) ||
		    !index_text_ok(s->etag))
			return -EINVAL;
	}
	bool v3 = ix->has_sums && ix->has_members;

	fprintf(f, "%s\n",
		v3	       ? INDEX_MAGIC_V3
		: ix->has_sums ? INDEX_MAGIC_V2
			       : INDEX_MAGIC_V1);
	for (i = 0; i < ix->nshards; i++) {
		const struct index_shard *s = &ix->shards[i];
		fprintf(f, "S\t%s\t%llu\t%s", s->url,
			(unsigned long long)s->size,
			s->etag[0] ? s->etag : "-");
		write_sum(f, ix, s->sum);
	}
	for (i = 0; i < ix->nsamples; i++) {
		const struct index_sample *s = &ix->samples[i];
		fprintf(f, "M\t%u\t%llu\t%llu\t%s\t%s\t%s", s->shard,
			(unsigned long long)s->offset,
			(unsigned long long)s->size, index_label(ix, s),
			index_key(ix, s), index_ext(ix, s));
		write_sum(f, ix, s->sum);
	}
	if (v3)
		write_members(ix, f);
	if (fflush(f) || ferror(f))
		return -EIO;
	return 0;
}

/* The rename is only durable once the directory entry is on disk too. */
static int fsync_dir_of(const char *path)
{
	char *copy = xstrdup(path);
	int fd = open(dirname(copy), O_RDONLY | O_DIRECTORY | O_CLOEXEC), r = 0;

	if (fd < 0 || fsync(fd) != 0)
		r = -errno;
	if (fd >= 0)
		close(fd);
	free(copy);
	return r;
}

int index_save(const struct index *ix, const char *path)
{
	/* an index is meant to be shared */
	return index_save_mode(ix, path, 0644);
}

int index_save_mode(const struct index *ix, const char *path, mode_t mode)
{
	return index_save_with(ix, path, mode, index_write);
}

int index_save_with(const struct index *ix, const char *path, mode_t mode,
		    int (*write)(const struct index *, FILE *))
{
	size_t tlen = strlen(path) + sizeof(".tmp.XXXXXX");
	char *tmp = xmalloc(tlen);
	FILE *f;
	int fd, r;

	snprintf(tmp, tlen, "%s.tmp.XXXXXX", path);
	fd = mkstemp(tmp); /* 0600 from the start */
	if (fd < 0) {
		r = -errno;
		free(tmp);
		return r;
	}
	if ((mode != 0600 && fchmod(fd, mode)) || !(f = fdopen(fd, "w"))) {
		r = -errno;
		close(fd);
		goto out;
	}
	r = write(ix, f);
	if (!r && fsync(fileno(f)))
		r = -errno;
	if (fclose(f) && !r)
		r = -EIO;
	if (!r && rename(tmp, path))
		r = -errno;
	/* renamed but maybe not durable: said, the file is left in place */
	if (!r)
		r = fsync_dir_of(path);
out:
	if (r)
		unlink(tmp);
	free(tmp);
	return r;
}
