/* pack_input.c - find the samples echofs-pack packs from a user's files
 * (see pack_input.h). */
#include "tools/pack_input.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/openat2.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <sys/syscall.h>
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

/* One file: real (its path from the root, no symlink in it) to read,
 * name its member name. Its size comes later, from stat_members. */
static int add_file(struct pack_input *in, const char *real, const char *name)
{
	const char *why = name_problem(name);
	struct pack_member *m;
	char *path;
	size_t len = strlen(in->root) + strlen(real) + 2;

	if (why)
		return bad(in, -EINVAL,
			   "%s/%s: cannot be a WebDataset member: %s", in->root,
			   name, why);
	path = xmalloc(len);
	snprintf(path, len, "%s/%s", in->root, real);
	m = new_member(in);
	m->path = path;
	m->rel = strlen(in->root) + 1;
	set_name(m, xstrdup(name));
	return 0;
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

/* The entries of the directory fd (name: its path from the root, for
 * messages), sorted by name (strcmp: the same order everywhere); *n of
 * them, each its dirent d_type byte then its name; caller frees each and
 * the array. */
static int list_dir(struct pack_input *in, int fd, const char *name,
		    char ***out, size_t *n)
{
	int dup = fcntl(fd, F_DUPFD_CLOEXEC, 0);
	DIR *d = dup >= 0 ? fdopendir(dup) : NULL;
	struct dirent *e;
	size_t cap = 0;

	*out = NULL;
	*n = 0;
	if (!d) {
		int err = errno;
		if (dup >= 0)
			close(dup);
		return bad(in, -err, "%s/%s: %s", in->root, name,
			   strerror(err));
	}
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
	closedir(d);
	if (*n > 1) /* an empty directory leaves *out NULL: not for qsort */
		qsort(*out, *n, sizeof(**out), name_cmp);
	return 0;
}

/* What a listing walks with: the root, open, and its real path, against
 * which a symlink's target is judged. */
struct lister {
	struct pack_input *in;
	int rootfd;
	char real[PATH_MAX]; /* realpath of in->root */
	bool images_only;    /* ImageFolder: other files are ignored */
	bool typed;	     /* a walk: the directory said each file's type */
	uint32_t cls;	     /* the class being walked */
};

/* A directory on the walk's current path: a loop is a directory that is
 * one of them already. */
struct walk_dir {
	const struct walk_dir *up;
	int fd;
	dev_t dev;
	ino_t ino;
	const char *real; /* path from the root, no symlink in it ("": root) */
	const char *name; /* path from the root in member names */
};

/* dir "/" entry into buf (entry alone when dir is ""). */
static int join(char buf[PATH_MAX], const char *dir, const char *entry)
{
	int n = snprintf(buf, PATH_MAX, "%s%s%s", dir, dir[0] ? "/" : "",
			 entry);

	return n < 0 || n >= PATH_MAX ? -ENAMETOOLONG : 0;
}

static void report(struct pack_input *in, enum pack_skip reason,
		   const char *name, const char *why)
{
	char path[PATH_MAX + 2];

	in->skipped[reason]++;
	if (!in->on_skip || reason == PACK_SKIP_IGNORED)
		return;
	snprintf(path, sizeof(path), "%s%s%s", in->root, name[0] ? "/" : "",
		 name);
	in->on_skip(in->on_skip_arg, reason, path, why);
}

__attribute__((format(printf, 4, 5))) static void skip(struct pack_input *in,
						       enum pack_skip reason,
						       const char *name,
						       const char *fmt, ...)
{
	char why[2 * PATH_MAX];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(why, sizeof(why), fmt, ap);
	va_end(ap);
	report(in, reason, name, why);
}

/* Without openat2 (kernels before 5.6, some seccomp filters): one
 * component at a time, none of them a symlink or "..". */
static int open_by_parts(int rootfd, const char *rel, int flags)
{
	char buf[PATH_MAX], *p = buf;
	int dfd = rootfd, fd;

	if (snprintf(buf, sizeof(buf), "%s", rel) >= (int)sizeof(buf))
		return -ENAMETOOLONG;
	for (;;) {
		char *slash = strchr(p, '/');
		struct stat st;

		if (slash)
			*slash = '\0';
		if (strcmp(p, "..") == 0)
			fd = -EXDEV;
		else if ((fd = openat(dfd, p[0] ? p : ".",
				      slash ? O_PATH | O_NOFOLLOW | O_CLOEXEC
					    : flags)) < 0)
			fd = -errno;
		else if (slash && fstat(fd, &st) == 0 && !S_ISDIR(st.st_mode)) {
			close(fd);
			fd = S_ISLNK(st.st_mode) ? -ELOOP : -ENOTDIR;
		}
		if (dfd != rootfd)
			close(dfd);
		if (fd < 0 || !slash)
			return fd;
		dfd = fd;
		p = slash + 1;
	}
}

int pack_input_open(int rootfd, const char *rel, int flags, struct stat *st)
{
	/* openat2 refuses O_PATH with flags beyond these. */
	int extra = flags & O_PATH ? 0 : O_NONBLOCK | O_NOCTTY;
	struct open_how how = {
		.flags = (uint64_t)(flags | extra | O_NOFOLLOW | O_CLOEXEC),
		.resolve = RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS |
			   RESOLVE_NO_MAGICLINKS};
	const char *p = rel[0] ? rel : ".";
	long fd = syscall(SYS_openat2, rootfd, p, &how, sizeof(how));

	if (fd < 0 && errno == ENOSYS)
		fd = open_by_parts(rootfd, p, (int)how.flags);
	else if (fd < 0)
		fd = -errno;
	if (fd >= 0 && fstat((int)fd, st)) {
		fd = -errno;
		close((int)fd);
	}
	return (int)fd;
}

/* Where the symlink at real (a path from the root), or a path through
 * one, leads. PACK_SKIP_NREASONS, with the target's path from the root in
 * to, when it is to be followed; otherwise why not, with the line in why.
 * Thread-safe: the stat threads call it for listed files. The final open
 * is pack_input_open's, beneath the root: a target swapped after this
 * check still cannot lead out. */
static enum pack_skip resolve_link(const struct lister *l, const char *real,
				   char *to, size_t tolen, char *why,
				   size_t whylen)
{
	char abs[2 * PATH_MAX], target[PATH_MAX], res[PATH_MAX];
	size_t rl = strlen(l->real);
	ssize_t n = readlinkat(l->rootfd, real, target, sizeof(target) - 1);
	const char *what =
		n >= 0 ? "symlink to " : "a symlink on its path, to ";

	if (n >= 0)
		target[n] = '\0';
	snprintf(abs, sizeof(abs), "%s/%s", l->real, real);
	if (!realpath(abs, res)) {
		snprintf(why, whylen, "%s%s (broken: %s)", what,
			 n >= 0 ? target : real, strerror(errno));
		return PACK_SKIP_LINK_BROKEN;
	}
	if (n < 0)
		snprintf(target, sizeof(target), "%s", res);
	if (rl > 1 && (strncmp(res, l->real, rl) != 0 ||
		       (res[rl] != '\0' && res[rl] != '/'))) {
		snprintf(why, whylen, "%s%s (leaves the input tree)", what,
			 target);
		return PACK_SKIP_LINK_OUT;
	}
	if (!l->in->follow_links) {
		snprintf(why, whylen,
			 "%s%s (inside the input tree, not followed without "
			 "--follow-symlinks)",
			 what, target);
		return PACK_SKIP_LINK;
	}
	const char *rel = res + (rl > 1 ? rl : 0);
	while (*rel == '/')
		rel++;
	if ((size_t)snprintf(to, tolen, "%s", rel) >= tolen) {
		snprintf(why, whylen, "%s%s (path too long)", what, target);
		return PACK_SKIP_LINK_BROKEN;
	}
	return PACK_SKIP_NREASONS;
}

/* A symlink the walk met: true with its target in to when it is to be
 * followed, else skipped here with its line. */
static bool follow_link(struct lister *l, const char *real, const char *name,
			char to[PATH_MAX])
{
	char why[3 * PATH_MAX];
	enum pack_skip r =
		resolve_link(l, real, to, PATH_MAX, why, sizeof(why));

	if (r == PACK_SKIP_NREASONS)
		return true;
	report(l->in, r, name, why);
	return false;
}

static const char *kind(mode_t mode)
{
	if (S_ISFIFO(mode))
		return "a FIFO";
	if (S_ISSOCK(mode))
		return "a socket";
	if (S_ISCHR(mode))
		return "a character device";
	if (S_ISBLK(mode))
		return "a block device";
	if (S_ISDIR(mode))
		return "a directory";
	return S_ISLNK(mode) ? "a symlink" : "of an unknown type";
}

/* A file or directory that would not open: skipped when the cause is
 * the entry itself (permissions, a symlink swapped in), else fatal. */
static int open_failed(struct lister *l, const char *name, int err)
{
	if (err == EACCES || err == EPERM) {
		skip(l->in, PACK_SKIP_UNREADABLE, name, "unreadable: %s",
		     strerror(err));
		return 0;
	}
	if (err == ELOOP || err == EXDEV) {
		skip(l->in, PACK_SKIP_LINK, name,
		     "became a symlink while listing (not followed)");
		return 0;
	}
	return bad(l->in, -err, "%s/%s: %s", l->in->root, name, strerror(err));
}

/* One file of the walk: real to open, name its member name. */
static int add_entry(struct lister *l, const char *real, const char *name)
{
	if (l->images_only && !is_image(name)) {
		l->in->skipped[PACK_SKIP_IGNORED]++;
		return 0;
	}
	int rc = add_file(l->in, real, name);
	if (rc == 0)
		l->in->m[l->in->nm - 1].cls = l->cls;
	return rc;
}

static int walk(struct lister *l, const struct walk_dir *d);

/* Walk the directory fd (closed here) below up, unless it is on the
 * walk's path already (a loop: *looped set when given). */
static int enter(struct lister *l, const struct walk_dir *up, int fd,
		 const char *real, const char *name, bool *looped)
{
	struct walk_dir d = {.up = up, .fd = fd, .real = real, .name = name};
	struct stat st;
	int rc = 0;

	if (fstat(fd, &st)) {
		rc = bad(l->in, -errno, "%s/%s: %s", l->in->root, name,
			 strerror(errno));
		close(fd);
		return rc;
	}
	for (const struct walk_dir *a = up; a; a = a->up) {
		if (a->dev != st.st_dev || a->ino != st.st_ino)
			continue;
		skip(l->in, PACK_SKIP_LOOP, name,
		     "a directory loop (the same directory as %s%s%s)",
		     l->in->root, a->name[0] ? "/" : "", a->name);
		if (looped)
			*looped = true;
		close(fd);
		return 0;
	}
	d.dev = st.st_dev;
	d.ino = st.st_ino;
	rc = walk(l, &d);
	close(fd);
	return rc;
}

/* A symlink in the walk: followed only into the tree, when asked. */
static int walk_link(struct lister *l, const struct walk_dir *d,
		     const char *real, const char *name)
{
	char to[PATH_MAX];
	struct stat st;
	int fd;

	if (!follow_link(l, real, name, to))
		return 0;
	if (fstatat(l->rootfd, to[0] ? to : ".", &st, AT_SYMLINK_NOFOLLOW))
		return open_failed(l, name, errno);
	if (S_ISREG(st.st_mode))
		return add_entry(l, to, name);
	if (!S_ISDIR(st.st_mode)) {
		skip(l->in, PACK_SKIP_SPECIAL, name,
		     "symlink to %s (not a regular file)", kind(st.st_mode));
		return 0;
	}
	fd = pack_input_open(l->rootfd, to, O_RDONLY | O_DIRECTORY, &st);
	return fd < 0 ? open_failed(l, name, -fd)
		      : enter(l, d, fd, to, name, NULL);
}

/* One entry of directory d, of dirent type type. */
static int walk_entry(struct lister *l, const struct walk_dir *d,
		      const char *entry, unsigned char type)
{
	char real[PATH_MAX], name[PATH_MAX];
	struct stat st;
	int fd;

	if (entry[0] == '.') {
		l->in->skipped[PACK_SKIP_IGNORED]++;
		return 0;
	}
	if (join(real, d->real, entry) || join(name, d->name, entry))
		return bad(l->in, -ENAMETOOLONG, "%s/%s/%s: path too long",
			   l->in->root, d->name, entry);
	if (type == DT_UNKNOWN) { /* the file system did not say */
		if (fstatat(d->fd, entry, &st, AT_SYMLINK_NOFOLLOW))
			return open_failed(l, name, errno);
		type = IFTODT(st.st_mode);
	}
	switch (type) {
	case DT_REG:
		return add_entry(l, real, name);
	case DT_DIR:
		fd = openat(d->fd, entry,
			    O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
		return fd < 0 ? open_failed(l, name, errno)
			      : enter(l, d, fd, real, name, NULL);
	case DT_LNK:
		return walk_link(l, d, real, name);
	default: /* never opened: a FIFO would block, a device act */
		skip(l->in, PACK_SKIP_SPECIAL, name, "%s (not a regular file)",
		     kind(DTTOIF(type)));
		return 0;
	}
}

/* Every file below d; only images when l->images_only. */
static int walk(struct lister *l, const struct walk_dir *d)
{
	char **names;
	size_t n;
	int rc = list_dir(l->in, d->fd, d->name, &names, &n);

	for (size_t i = 0; rc == 0 && i < n; i++)
		rc = walk_entry(l, d, names[i] + 1, (unsigned char)names[i][0]);
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

/* What stat_members found of one member. */
struct verdict {
	int err;	       /* an errno: fatal */
	enum pack_skip reason; /* below PACK_SKIP_NREASONS: skipped */
	char *why;	       /* its line (owned) */
};

struct stat_job {
	const struct lister *l;
	size_t from, to;
	struct verdict *v;
};

/* A listed path through a symlink: followed into the tree when asked
 * (m->path then names the target), else the verdict says why not. */
static bool repoint(const struct lister *l, struct pack_member *m,
		    struct verdict *v)
{
	char to[PATH_MAX], why[3 * PATH_MAX], *p;
	enum pack_skip r = resolve_link(l, m->path + m->rel, to, sizeof(to),
					why, sizeof(why));
	size_t len = strlen(l->in->root) + strlen(to) + 2;

	if (r != PACK_SKIP_NREASONS) {
		v->reason = r;
		v->why = xstrdup(why);
		return false;
	}
	p = xmalloc(len);
	snprintf(p, len, "%s/%s", l->in->root, to);
	free(m->path);
	m->path = p;
	return true;
}

static int open_member(const struct lister *l, const struct pack_member *m,
		       int flags, struct stat *st)
{
	int fd = pack_input_open(l->rootfd, m->path + m->rel, flags, st);

	if (fd >= 0 && S_ISLNK(st->st_mode)) { /* O_PATH opens the link */
		close(fd);
		return -ELOOP;
	}
	return fd;
}

static void open_verdict(struct verdict *v, int err)
{
	char why[128];

	if (err == EACCES || err == EPERM) {
		snprintf(why, sizeof(why), "unreadable: %s", strerror(err));
		v->reason = PACK_SKIP_UNREADABLE;
	} else if (err == ELOOP || err == EXDEV) {
		snprintf(why, sizeof(why),
			 "became a symlink while listing (not followed)");
		v->reason = PACK_SKIP_LINK;
	} else {
		v->err = err;
		return;
	}
	v->why = xstrdup(why);
}

/* Open m as the writer will, so what cannot be read is skipped now, not
 * fatal later. A listed file is first opened O_PATH: it may be anything,
 * and a device is never opened for reading. */
static void check_member(const struct lister *l, struct pack_member *m,
			 struct verdict *v)
{
	struct stat st;
	int fd = open_member(l, m, l->typed ? O_RDONLY : O_PATH, &st);

	if (!l->typed && (fd == -ELOOP || fd == -EXDEV)) {
		if (!repoint(l, m, v))
			return;
		fd = open_member(l, m, O_PATH, &st);
	}
	if (fd >= 0 && !l->typed && S_ISREG(st.st_mode)) {
		close(fd);
		fd = open_member(l, m, O_RDONLY, &st);
	}
	if (fd < 0) {
		open_verdict(v, -fd);
		return;
	}
	close(fd);
	if (S_ISREG(st.st_mode)) {
		m->size = (uint64_t)st.st_size;
		return;
	}
	char why[64];
	snprintf(why, sizeof(why), "%s (not a regular file)", kind(st.st_mode));
	v->reason = PACK_SKIP_SPECIAL;
	v->why = xstrdup(why);
}

static void *stat_range(void *arg)
{
	struct stat_job *j = arg;

	for (size_t i = j->from; i < j->to; i++)
		if (j->l->in->m[i].path)
			check_member(j->l, &j->l->in->m[i], &j->v[i]);
	return NULL;
}

static void run_stat_jobs(const struct lister *l, struct verdict *v)
{
	struct pack_input *in = l->in;
	unsigned nt = in->threads ? in->threads : 1;

	if (nt > in->nm / 256 + 1)
		nt = (unsigned)(in->nm / 256 + 1); /* small inputs: one */
	struct stat_job *jobs = xcalloc(nt, sizeof(*jobs));
	pthread_t *t = xcalloc(nt, sizeof(*t));
	bool *joined = xcalloc(nt, sizeof(*joined));
	for (unsigned k = 0; k < nt; k++)
		jobs[k] = (struct stat_job){l, in->nm * k / nt,
					    in->nm * (k + 1) / nt, v};
	for (unsigned k = 1; k < nt; k++)
		joined[k] =
			pthread_create(&t[k], NULL, stat_range, &jobs[k]) == 0;
	stat_range(&jobs[0]);
	for (unsigned k = 1; k < nt; k++) {
		if (joined[k])
			pthread_join(t[k], NULL);
		else
			stat_range(&jobs[k]); /* no thread: here */
	}
	free(joined);
	free(jobs);
	free(t);
}

/* Every member opened and sized, on in->threads threads (an open is
 * most of a walk's time); the skipped ones reported in member order and
 * left out; the first fatal failure in member order is the error. */
static int stat_members(const struct lister *l)
{
	struct pack_input *in = l->in;
	struct verdict *v = xcalloc(in->nm + 1, sizeof(*v));
	size_t kept = 0;
	int rc = 0;

	for (size_t i = 0; i < in->nm; i++)
		v[i].reason = PACK_SKIP_NREASONS;
	run_stat_jobs(l, v);
	for (size_t i = 0; i < in->nm; i++) {
		struct pack_member *m = &in->m[i];
		if (rc == 0 && v[i].err)
			rc = bad(in, -v[i].err, "%s/%s: %s", in->root, m->name,
				 strerror(v[i].err));
		else if (rc == 0 && v[i].why)
			report(in, v[i].reason, m->name, v[i].why);
		free(v[i].why);
		if (v[i].err || v[i].reason != PACK_SKIP_NREASONS) {
			free(m->path);
			free(m->name);
		} else {
			in->m[kept++] = *m;
		}
	}
	in->nm = kept;
	free(v);
	return rc;
}

/* The root, opened (following a link the user named as root) and
 * resolved; top: the walk's first directory. */
static int lister_open(struct lister *l, struct pack_input *in,
		       const char *root, struct walk_dir *top)
{
	struct stat st;

	l->in = in;
	in->root = xstrdup(root);
	l->rootfd = open(root, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (l->rootfd < 0 || fstat(l->rootfd, &st) || !realpath(root, l->real))
		return bad(in, -errno, "%s: %s", root, strerror(errno));
	*top = (struct walk_dir){.fd = l->rootfd,
				 .dev = st.st_dev,
				 .ino = st.st_ino,
				 .real = "",
				 .name = ""};
	return 0;
}

int pack_input_dir(struct pack_input *in, const char *root)
{
	struct lister l = {.rootfd = -1, .typed = true};
	struct walk_dir top;
	int rc = lister_open(&l, in, root, &top);

	if (rc == 0)
		rc = walk(&l, &top);
	if (rc == 0)
		rc = stat_members(&l);
	if (l.rootfd >= 0)
		close(l.rootfd);
	return rc ? rc : group(in);
}

/* One line of a file list: a path relative to the base. */
static int add_listed(struct pack_input *in, char *line)
{
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
		in->skipped[PACK_SKIP_IGNORED]++;
		return 0;
	}
	if (strlen(line) >= PATH_MAX)
		return bad(in, -ENAMETOOLONG, "%s: path too long", line);
	return add_file(in, line, line);
}

int pack_input_list(struct pack_input *in, const char *list, const char *base)
{
	struct lister l = {.rootfd = -1};
	struct walk_dir top;
	FILE *f = NULL;
	char *line = NULL;
	size_t cap = 0;
	int rc = lister_open(&l, in, base, &top);

	if (rc == 0) {
		f = strcmp(list, "-") == 0 ? stdin : fopen(list, "r");
		if (!f)
			rc = bad(in, -errno, "%s: %s", list, strerror(errno));
	}
	while (rc == 0 && getline(&line, &cap, f) >= 0)
		rc = add_listed(in, line);
	free(line);
	if (f && f != stdin)
		fclose(f);
	if (rc == 0)
		rc = stat_members(&l);
	if (l.rootfd >= 0)
		close(l.rootfd);
	return rc ? rc : group(in);
}

/* The class directories of the root, sorted (strcmp, as torchvision's
 * ImageFolder sorts them), hidden ones and files beside them left out;
 * reals[c]: class c's path from the root (a followed link's target). */
static int find_classes(struct lister *l, const struct walk_dir *top,
			char ***reals)
{
	struct pack_input *in = l->in;
	char **names, to[PATH_MAX];
	size_t n;
	int rc = list_dir(in, top->fd, "", &names, &n);

	in->classes = xcalloc(n + 1, sizeof(*in->classes));
	*reals = xcalloc(n + 1, sizeof(**reals));
	for (size_t i = 0; rc == 0 && i < n; i++) {
		const char *e = names[i] + 1, *real = e;
		unsigned char type = (unsigned char)names[i][0];
		struct stat st;
		if (e[0] != '.' && type == DT_UNKNOWN &&
		    fstatat(top->fd, e, &st, AT_SYMLINK_NOFOLLOW) == 0)
			type = IFTODT(st.st_mode);
		if (e[0] != '.' && type == DT_LNK) {
			if (!follow_link(l, e, e, to))
				continue;
			if (fstatat(l->rootfd, to[0] ? to : ".", &st,
				    AT_SYMLINK_NOFOLLOW) == 0 &&
			    S_ISDIR(st.st_mode)) {
				type = DT_DIR;
				real = to;
			}
		}
		if (e[0] == '.' || type != DT_DIR) {
			in->skipped[PACK_SKIP_IGNORED]++;
			continue;
		}
		in->classes[in->nclasses] = xstrdup(e);
		(*reals)[in->nclasses++] = xstrdup(real);
	}
	free_list(names, n);
	return rc;
}

/* Walk class c (its directory at real); *dropped when the directory
 * itself was skipped (a loop, unreadable), so the class goes too. */
static int walk_class(struct lister *l, const struct walk_dir *top, uint32_t c,
		      const char *real, bool *dropped)
{
	struct stat st;
	int fd = pack_input_open(l->rootfd, real, O_RDONLY | O_DIRECTORY, &st);
	int rc;

	l->cls = c;
	*dropped = false;
	if (fd >= 0)
		return enter(l, top, fd, real, l->in->classes[c], dropped);
	rc = open_failed(l, l->in->classes[c], -fd);
	*dropped = rc == 0;
	return rc;
}

/* The classes left after the walk: dropped ones out, indexes renumbered. */
static void drop_classes(struct pack_input *in, const bool *dropped)
{
	uint32_t *to = xcalloc(in->nclasses + 1, sizeof(*to));
	size_t kept = 0;

	for (size_t c = 0; c < in->nclasses; c++) {
		to[c] = (uint32_t)kept;
		if (dropped[c])
			free(in->classes[c]);
		else
			in->classes[kept++] = in->classes[c];
	}
	in->nclasses = kept;
	for (size_t i = 0; i < in->nm; i++)
		in->m[i].cls = to[in->m[i].cls];
	free(to);
}

/* The .cls member of each image: its class's index. */
static void add_labels(struct pack_input *in)
{
	size_t nfiles = in->nm;

	for (size_t i = 0; i < nfiles; i++) {
		size_t klen = key_len(&in->m[i]);
		uint32_t cls = in->m[i].cls;
		char *cname = xmalloc(klen + 5);
		struct pack_member *m;

		memcpy(cname, in->m[i].name, klen);
		memcpy(cname + klen, ".cls", 5);
		m = new_member(in); /* may move in->m: cname copied first */
		set_name(m, cname);
		m->size = (uint64_t)snprintf(m->data, sizeof(m->data), "%u",
					     (unsigned)cls);
	}
}

int pack_input_imagefolder(struct pack_input *in, const char *root)
{
	struct lister l = {.rootfd = -1, .typed = true, .images_only = true};
	struct walk_dir top;
	char **reals = NULL;
	bool *dropped = NULL;
	int rc = lister_open(&l, in, root, &top);

	if (rc == 0)
		rc = find_classes(&l, &top, &reals);
	dropped = xcalloc(in->nclasses + 1, sizeof(*dropped));
	for (size_t c = 0; rc == 0 && c < in->nclasses; c++)
		rc = walk_class(&l, &top, (uint32_t)c, reals[c], &dropped[c]);
	for (size_t c = 0; reals && c < in->nclasses; c++)
		free(reals[c]);
	free(reals);
	if (rc == 0)
		drop_classes(in, dropped);
	free(dropped);
	if (rc == 0 && in->nm == 0)
		rc = bad(in, -ENODATA, "%s: no images in class directories",
			 root);
	if (rc == 0)
		rc = stat_members(&l);
	if (rc == 0)
		add_labels(in);
	if (l.rootfd >= 0)
		close(l.rootfd);
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
