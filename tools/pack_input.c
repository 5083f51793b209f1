/* pack_input.c - find the samples echofs-pack packs from a user's files
 * (see pack_input.h). */
#include "tools/pack_input.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/util.h"
#include "tools/pack_tar.h"

#define COMPONENT_MAX 255

__attribute__((format(printf, 3, 4))) static int
bad(struct pack_input *in, int err, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(in->err, sizeof(in->err), fmt, ap);
	va_end(ap);
	return err;
}

static bool hidden(const char *rel)
{
	for (const char *p = rel; p; p = strchr(p, '/'), p = p ? p + 1 : p)
		if (p[0] == '.')
			return true;
	return false;
}

/* Why rel cannot be a member name echofs shows, or NULL. */
static const char *name_problem(const char *rel)
{
	uint8_t blk[PACK_TAR_BLOCK];
	const char *base = strrchr(rel, '/'), *dot;
	size_t start = 0, len = strlen(rel);

	for (size_t i = 0; i < len; i++)
		if ((unsigned char)rel[i] < 0x20 || rel[i] == 0x7f)
			return "a control character in the name";
	for (size_t i = 0; i <= len; i++) {
		if (i < len && rel[i] != '/')
			continue;
		if (i == start)
			return "an empty path component";
		if (i - start > COMPONENT_MAX)
			return "a name component over 255 bytes";
		start = i + 1;
	}
	base = base ? base + 1 : rel;
	dot = strchr(base, '.');
	if (!dot || dot[1] == '\0')
		return "no extension (members are <key>.<ext>)";
	if (pack_tar_header(blk, rel, 0))
		return "too long for a tar header (100 bytes, or a 155-byte "
		       "directory prefix)";
	return NULL;
}

static struct pack_member *new_member(struct pack_input *in)
{
	if (in->nm == in->capm) {
		in->capm = in->capm ? 2 * in->capm : 1024;
		in->m = xrealloc(in->m, in->capm * sizeof(*in->m));
	}
	memset(&in->m[in->nm], 0, sizeof(in->m[0]));
	return &in->m[in->nm++];
}

static void set_name(struct pack_member *m, char *name)
{
	const char *base = strrchr(name, '/');

	m->name = name;
	m->ext = strchr(base ? base + 1 : name, '.') + 1;
}

/* One file: abs (in->root "/" rel) to read, rel its member name. Its
 * size comes later, from stat_members. */
static int add_file(struct pack_input *in, const char *abs, const char *rel)
{
	const char *why = name_problem(rel);
	struct pack_member *m;

	if (why)
		return bad(in, -EINVAL, "%s: cannot be a WebDataset member: %s",
			   abs, why);
	m = new_member(in);
	m->path = xstrdup(abs);
	m->rel = strlen(in->root) + 1;
	set_name(m, xstrdup(rel));
	return 0;
}

struct stat_job {
	struct pack_input *in;
	int rootfd;
	size_t from, to;
	int *err; /* per member: 0, errno, or -1 (not a regular file) */
};

static void *stat_range(void *arg)
{
	struct stat_job *j = arg;
	struct stat st;

	for (size_t i = j->from; i < j->to; i++) {
		struct pack_member *m = &j->in->m[i];
		if (!m->path)
			continue;
		if (fstatat(j->rootfd, m->path + m->rel, &st, 0))
			j->err[i] = errno;
		else if (!S_ISREG(st.st_mode))
			j->err[i] = -1;
		else
			m->size = (uint64_t)st.st_size;
	}
	return NULL;
}

/* Every member's size, on in->threads threads (a stat is most of a walk's
 * time: one system call a file); the first failure in member order is the
 * error. */
static int stat_members(struct pack_input *in)
{
	unsigned nt = in->threads ? in->threads : 1;
	struct stat_job *jobs;
	pthread_t *t;
	int rootfd = open(in->root, O_PATH | O_DIRECTORY | O_CLOEXEC);
	int *err, rc = 0;

	if (rootfd < 0)
		return bad(in, -errno, "%s: %s", in->root, strerror(errno));
	if (nt > in->nm / 256 + 1)
		nt = (unsigned)(in->nm / 256 + 1); /* small inputs: one */
	err = xcalloc(in->nm + 1, sizeof(*err));
	jobs = xcalloc(nt, sizeof(*jobs));
	t = xcalloc(nt, sizeof(*t));
	for (unsigned k = 0; k < nt; k++)
		jobs[k] = (struct stat_job){in, rootfd, in->nm * k / nt,
					    in->nm * (k + 1) / nt, err};
	bool *joined = xcalloc(nt, sizeof(*joined));
	for (unsigned k = 1; k < nt; k++)
		joined[k] = pthread_create(&t[k], NULL, stat_range, &jobs[k]) == 0;
	stat_range(&jobs[0]);
	for (unsigned k = 1; k < nt; k++) {
		if (joined[k])
			pthread_join(t[k], NULL);
		else
			stat_range(&jobs[k]); /* no thread: here */
	}
	free(joined);
	for (size_t i = 0; rc == 0 && i < in->nm; i++) {
		if (err[i] > 0)
			rc = bad(in, -err[i], "%s: %s", in->m[i].path,
				 strerror(err[i]));
		else if (err[i] < 0)
			rc = bad(in, -EINVAL, "%s: not a regular file",
				 in->m[i].path);
	}
	close(rootfd);
	free(err);
	free(jobs);
	free(t);
	return rc;
}

/* Images as the scanner takes them (fetch/format/scan.h). */
static bool is_image(const char *name)
{
	static const char *const exts[] = {"jpg", "jpeg", "png", "ppm", "webp"};
	const char *dot = strrchr(name, '.');

	for (size_t i = 0; dot && i < ARRAY_SIZE(exts); i++)
		if (strcasecmp(dot + 1, exts[i]) == 0)
			return true;
	return false;
}

/* list_dir's entries: a type byte, then the name. */
static int name_cmp(const void *a, const void *b)
{
	return strcmp(*(char *const *)a + 1, *(char *const *)b + 1);
}

static void free_list(char **v, size_t n)
{
	for (size_t i = 0; i < n; i++)
		free(v[i]);
	free(v);
}

/* The entries of dir, sorted by name (strcmp: the same order
 * everywhere); *n of them, each its dirent d_type byte then its name;
 * caller frees each and the array. With dfd, also a descriptor of dir
 * (caller closes) to look the names up in. */
static int list_dir(struct pack_input *in, const char *dir, char ***out,
		    size_t *n, int *dfd)
{
	DIR *d = opendir(dir);
	struct dirent *e;
	size_t cap = 0;

	*out = NULL;
	*n = 0;
	if (!d)
		return bad(in, -errno, "%s: %s", dir, strerror(errno));
	while ((e = readdir(d)) != NULL) {
		if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
			continue;
		if (*n == cap) {
			cap = cap ? 2 * cap : 64;
			*out = xrealloc(*out, cap * sizeof(**out));
		}
		/* The entry's type (dirent d_type) before its name, so
		 * sorting by name + 1 keeps them together. */
		size_t len = strlen(e->d_name);
		char *v = xmalloc(len + 2);
		v[0] = (char)e->d_type;
		memcpy(v + 1, e->d_name, len + 1);
		(*out)[(*n)++] = v;
	}
	if (dfd)
		*dfd = fcntl(dirfd(d), F_DUPFD_CLOEXEC, 0);
	closedir(d);
	if (dfd && *dfd < 0) {
		free_list(*out, *n);
		*out = NULL;
		*n = 0;
		return bad(in, -errno, "%s: %s", dir, strerror(errno));
	}
	if (*n > 1) /* an empty directory leaves *out NULL: not for qsort */
		qsort(*out, *n, sizeof(**out), name_cmp);
	return 0;
}

/* Every file below abs (rel: its path from the input's root, "" at the
 * root); only images when images_only (the rest counted as skipped). */
static int walk(struct pack_input *in, const char *abs, const char *rel,
		bool images_only)
{
	char **names, a[PATH_MAX], r[PATH_MAX];
	size_t n;
	int dfd = -1;
	int rc = list_dir(in, abs, &names, &n, &dfd);

	if (rc)
		return rc;
	for (size_t i = 0; rc == 0 && i < n; i++) {
		const char *name = names[i] + 1;
		unsigned char type = (unsigned char)names[i][0];
		struct stat st;
		if (name[0] == '.') {
			in->skipped++;
			continue;
		}
		if ((size_t)snprintf(a, sizeof(a), "%s/%s", abs, name) >=
			    sizeof(a) ||
		    (size_t)snprintf(r, sizeof(r), "%s%s%s", rel,
				     rel[0] ? "/" : "", name) >= sizeof(r)) {
			rc = bad(in, -ENAMETOOLONG, "%s/%s: path too long", abs,
				 name);
			break;
		}
		/* The file system said what it is, or (a symbolic link,
		 * or no d_type) ask, following links as stat does. */
		if (type != DT_DIR && type != DT_REG) {
			if (fstatat(dfd, name, &st, 0)) {
				rc = bad(in, -errno, "%s: %s", a,
					 strerror(errno));
				break;
			}
			type = S_ISDIR(st.st_mode) ? DT_DIR : DT_REG;
		}
		if (type == DT_DIR)
			rc = walk(in, a, r, images_only);
		else if (images_only && !is_image(name))
			in->skipped++;
		else
			rc = add_file(in, a, r);
	}
	close(dfd);
	free_list(names, n);
	return rc;
}

static size_t key_len(const struct pack_member *m)
{
	return (size_t)(m->ext - 1 - m->name);
}

/* By key, then extension: a sample's members side by side. */
static int member_cmp(const void *a, const void *b)
{
	const struct pack_member *x = a, *y = b;
	size_t xl = key_len(x), yl = key_len(y);
	int c = memcmp(x->name, y->name, xl < yl ? xl : yl);

	if (c == 0 && xl != yl)
		c = xl < yl ? -1 : 1;
	return c ? c : strcmp(x->ext, y->ext);
}

static bool same_key(const struct pack_member *x, const struct pack_member *y)
{
	return key_len(x) == key_len(y) &&
	       memcmp(x->name, y->name, key_len(x)) == 0;
}

/* Sort the members into samples; a name twice is an error. */
static int group(struct pack_input *in)
{
	size_t i = 0;

	if (in->nm == 0)
		return bad(in, -ENODATA, "no files to pack");
	qsort(in->m, in->nm, sizeof(*in->m), member_cmp);
	in->s = xcalloc(in->nm, sizeof(*in->s));
	while (i < in->nm) {
		struct pack_sample *s = &in->s[in->ns++];
		s->first = (uint32_t)i;
		for (; i < in->nm && same_key(&in->m[s->first], &in->m[i]);
		     i++) {
			if (i > s->first &&
			    strcmp(in->m[i].name, in->m[i - 1].name) == 0)
				return bad(in, -EINVAL,
					   "%s: two inputs make this member "
					   "(a file listed twice, or two "
					   "images with one name before the "
					   "first dot)",
					   in->m[i].name);
			s->bytes += pack_tar_member_bytes(in->m[i].size);
			s->n++;
		}
	}
	return 0;
}

int pack_input_dir(struct pack_input *in, const char *root)
{
	in->root = xstrdup(root);
	int rc = walk(in, root, "", false);
	if (rc == 0)
		rc = stat_members(in);
	return rc ? rc : group(in);
}

/* One line of a file list: a path relative to base. */
static int add_listed(struct pack_input *in, const char *base, char *line)
{
	char a[PATH_MAX];

	line[strcspn(line, "\n")] = '\0';
	if (line[0] == '\0')
		return 0;
	while (line[0] == '.' && line[1] == '/')
		line += 2;
	if (line[0] == '/')
		return bad(in, -EINVAL,
			   "%s: absolute path in the list (give "
			   "paths relative to --base)",
			   line);
	if (hidden(line)) {
		in->skipped++;
		return 0;
	}
	if ((size_t)snprintf(a, sizeof(a), "%s/%s", base, line) >= sizeof(a))
		return bad(in, -ENAMETOOLONG, "%s: path too long", line);
	return add_file(in, a, line);
}

int pack_input_list(struct pack_input *in, const char *list, const char *base)
{
	FILE *f = strcmp(list, "-") == 0 ? stdin : fopen(list, "r");
	char *line = NULL;
	size_t cap = 0;
	int rc = 0;

	in->root = xstrdup(base);
	if (!f)
		return bad(in, -errno, "%s: %s", list, strerror(errno));
	while (rc == 0 && getline(&line, &cap, f) >= 0)
		rc = add_listed(in, base, line);
	free(line);
	if (f != stdin)
		fclose(f);
	if (rc == 0)
		rc = stat_members(in);
	return rc ? rc : group(in);
}

/* The class directories of root, sorted (strcmp, as torchvision's
 * ImageFolder sorts them), hidden ones left out. */
static int find_classes(struct pack_input *in, const char *root)
{
	char **names, a[PATH_MAX];
	size_t n;
	int rc = list_dir(in, root, &names, &n, NULL);

	in->classes = xcalloc(n + 1, sizeof(*in->classes));
	for (size_t i = 0; rc == 0 && i < n; i++) {
		struct stat st;
		snprintf(a, sizeof(a), "%s/%s", root, names[i] + 1);
		if (names[i][1] == '.' || stat(a, &st) ||
		    !S_ISDIR(st.st_mode)) {
			in->skipped++; /* files beside the classes */
			continue;
		}
		in->classes[in->nclasses++] = xstrdup(names[i] + 1);
	}
	free_list(names, n);
	return rc;
}

/* The .cls member of each image in in->m[from ..): class cls. */
static void add_labels(struct pack_input *in, size_t from, size_t cls)
{
	size_t nfiles = in->nm;

	for (size_t i = from; i < nfiles; i++) {
		size_t klen = key_len(&in->m[i]);
		char *cname = xmalloc(klen + 5);
		struct pack_member *m;

		memcpy(cname, in->m[i].name, klen);
		memcpy(cname + klen, ".cls", 5);
		m = new_member(in); /* may move in->m: cname copied first */
		set_name(m, cname);
		m->size = (uint64_t)snprintf(m->data, sizeof(m->data), "%zu",
					     cls);
	}
}

int pack_input_imagefolder(struct pack_input *in, const char *root)
{
	char a[PATH_MAX];
	int rc;

	in->root = xstrdup(root);
	rc = find_classes(in, root);

	for (size_t c = 0; rc == 0 && c < in->nclasses; c++) {
		size_t from = in->nm;
		snprintf(a, sizeof(a), "%s/%s", root, in->classes[c]);
		rc = walk(in, a, in->classes[c], true);
		if (rc == 0)
			add_labels(in, from, c);
	}
	if (rc)
		return rc;
	if (in->nm == 0)
		return bad(in, -ENODATA, "%s: no images in class directories",
			   root);
	rc = stat_members(in);
	return rc ? rc : group(in);
}

void pack_input_free(struct pack_input *in)
{
	for (size_t i = 0; i < in->nm; i++) {
		free(in->m[i].path);
		free(in->m[i].name);
	}
	free(in->m);
	free(in->s);
	free(in->root);
	for (size_t i = 0; i < in->nclasses; i++)
		free(in->classes[i]);
	free(in->classes);
	memset(in, 0, sizeof(*in));
}
