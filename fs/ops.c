/* ops.c - the FUSE request handlers (low-level API).
 *
 * Each fs_op_<name> sends exactly one reply; the work is done by helpers
 * that return 0 or a negative errno. The tree is immutable and file bytes
 * never change, so entries and attributes are cached by the kernel for a
 * long time and file pages are kept across opens (keep_cache): a second
 * epoch is served from the page cache. */
#include "fs/ops.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>

#include "cache/shards.h"
#include "common/log.h"
#include "common/util.h"
#include "fetch/index.h"
#include "fs/namespace.h"

/* A snapshot of a control file, taken at open and read from the handle. */
struct control_handle {
	char *buf;
	size_t len;
};

static struct fs_ctx *ctx_of(fuse_req_t req)
{
	return fuse_req_userdata(req);
}

static int fill_attr(const struct fs_ctx *fs, fuse_ino_t ino, struct stat *st)
{
	uint32_t num;

	memset(st, 0, sizeof(*st));
	st->st_ino = ino;
	st->st_uid = fs->uid;
	st->st_gid = fs->gid;
	st->st_atim = st->st_mtim = st->st_ctim = fs->mtime;
	st->st_blksize = 65536;
	switch (ns_kind_of(fs->ns, ino, &num)) {
	case NS_ROOT:
		st->st_mode = S_IFDIR | 0555;
		st->st_nlink = 2 + fs->ns->nclasses;
		return 0;
	case NS_CONTROL_DIR:
	case NS_CLASS:
		st->st_mode = S_IFDIR | 0555;
		st->st_nlink = 2;
		return 0;
	case NS_CONTROL_FILE:
		/* Size 0 with direct_io: readers read to EOF. */
		st->st_mode = S_IFREG | 0444;
		st->st_nlink = 1;
		return 0;
	case NS_FILE:
		st->st_mode = S_IFREG | 0444;
		st->st_nlink = 1;
		st->st_size = (off_t)ns_file_size(fs->ns, num);
		st->st_blocks = (st->st_size + 511) / 512;
		return 0;
	default:
		return -ENOENT;
	}
}

static void fs_op_lookup(fuse_req_t req, fuse_ino_t parent, const char *name)
{
	struct fs_ctx *fs = ctx_of(req);
	struct fuse_entry_param e;

	memset(&e, 0, sizeof(e));
	e.attr_timeout = fs->timeout;
	e.entry_timeout = fs->timeout;
	e.ino = ns_lookup(fs->ns, parent, name);
	/* ino 0 is a negative entry, cached by the kernel like a positive one. */
	if (e.ino)
		fill_attr(fs, e.ino, &e.attr);
	fuse_reply_entry(req, &e);
}

static void fs_op_getattr(fuse_req_t req, fuse_ino_t ino,
			  struct fuse_file_info *fi)
{
	struct fs_ctx *fs = ctx_of(req);
	struct stat st;
	int r;
	(void)fi;

	r = fill_attr(fs, ino, &st);
	if (r)
		fuse_reply_err(req, -r);
	else
		fuse_reply_attr(req, &st, fs->timeout);
}

static void fs_op_opendir(fuse_req_t req, fuse_ino_t ino,
			  struct fuse_file_info *fi)
{
	struct fs_ctx *fs = ctx_of(req);
	uint32_t num;
	enum ns_kind k = ns_kind_of(fs->ns, ino, &num);

	if (k != NS_ROOT && k != NS_CLASS && k != NS_CONTROL_DIR) {
		fuse_reply_err(req, k == NS_NONE ? ENOENT : ENOTDIR);
		return;
	}
	fi->cache_readdir = 1;
	fi->keep_cache = 1;
	fuse_reply_open(req, fi);
}

/* Fill buf with entries starting at off (0 ".", 1 "..", then the listing).
 * Returns the bytes used. */
static size_t fill_dir(fuse_req_t req, const struct fs_ctx *fs, fuse_ino_t ino,
		       off_t off, char *buf, size_t size)
{
	size_t used = 0;
	for (size_t j = (size_t)off;; j++) {
		struct stat st = {0};
		const char *name;
		int is_dir = 1;
		size_t need;

		if (j == 0) {
			name = ".";
			st.st_ino = ino;
		} else if (j == 1) {
			name = "..";
			st.st_ino = NS_INO_ROOT;
		} else {
			st.st_ino = ns_list(fs->ns, ino, j - 2, &name, &is_dir);
			if (!st.st_ino)
				break;
		}
		st.st_mode = is_dir ? S_IFDIR : S_IFREG;
		need = fuse_add_direntry(req, buf + used, size - used, name, &st,
					 (off_t)(j + 1));
		if (need > size - used)
			break;
		used += need;
	}
	return used;
}

static void fs_op_readdir(fuse_req_t req, fuse_ino_t ino, size_t size,
			  off_t off, struct fuse_file_info *fi)
{
	struct fs_ctx *fs = ctx_of(req);
	char *buf;
	(void)fi;

	if (size > 1 << 20)
		size = 1 << 20;
	buf = malloc(size);
	if (!buf) {
		fuse_reply_err(req, ENOMEM);
		return;
	}
	fuse_reply_buf(req, buf, fill_dir(req, fs, ino, off, buf, size));
	free(buf);
}

static int open_control(struct fs_ctx *fs, fuse_ino_t ino,
			struct fuse_file_info *fi)
{
	struct control_handle *h = xcalloc(1, sizeof(*h));
	enum control_file which = ino == NS_INO_STATS ? CONTROL_STATS_JSON
						      : CONTROL_STATS_PROM;
	int r = control_render(fs->ctl, which, &h->buf, &h->len);
	if (r) {
		free(h);
		return r;
	}
	fi->fh = (uint64_t)(uintptr_t)h;
	fi->direct_io = 1;
	return 0;
}

static int do_open(struct fs_ctx *fs, fuse_ino_t ino,
		   struct fuse_file_info *fi)
{
	uint32_t num;

	if ((fi->flags & O_ACCMODE) != O_RDONLY)
		return -EROFS;
	switch (ns_kind_of(fs->ns, ino, &num)) {
	case NS_CONTROL_FILE:
		return open_control(fs, ino, fi);
	case NS_FILE:
		fi->fh = 0;
		fi->keep_cache = 1;
		fi->noflush = 1;
		return 0;
	case NS_NONE:
		return -ENOENT;
	default:
		return -EISDIR;
	}
}

static void fs_op_open(fuse_req_t req, fuse_ino_t ino,
		       struct fuse_file_info *fi)
{
	struct fs_ctx *fs = ctx_of(req);
	int r = do_open(fs, ino, fi);

	if (r) {
		fuse_reply_err(req, -r);
		return;
	}
	fs->counters.opens++;
	fs->counters.open_handles++;
	if (fuse_reply_open(req, fi) == -ENOENT) {
		/* The opener was interrupted: release will not come. */
		fs->counters.open_handles--;
		if (fi->fh)
			free(((struct control_handle *)(uintptr_t)fi->fh)->buf);
		free((void *)(uintptr_t)fi->fh);
	}
}

/* Read a sample's bytes into a new buffer. Returns the length or -errno. */
static ssize_t read_sample(struct fs_ctx *fs, uint32_t file, size_t size,
			   off_t off, char **out)
{
	const struct index_sample *s =
		&fs->ns->ix->samples[fs->ns->files[file].sample];
	ssize_t r;

	*out = NULL;
	if (off < 0 || (uint64_t)off >= s->size)
		return 0;
	if (size > s->size - (uint64_t)off)
		size = (size_t)(s->size - (uint64_t)off);
	*out = malloc(size);
	if (!*out)
		return -ENOMEM;
	r = shards_read(fs->sh, s->shard, s->offset + (uint64_t)off, size, *out);
	if (r >= 0 && (size_t)r != size)
		r = -EIO; /* the index promised these bytes */
	return r;
}

static void fs_op_read(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off,
		       struct fuse_file_info *fi)
{
	struct fs_ctx *fs = ctx_of(req);
	uint32_t num;
	char *buf;
	ssize_t r;

	fs->counters.reads++;
	if (ns_kind_of(fs->ns, ino, &num) == NS_CONTROL_FILE) {
		struct control_handle *h = (void *)(uintptr_t)fi->fh;
		size_t o = (size_t)off < h->len ? (size_t)off : h->len;
		size_t n = h->len - o < size ? h->len - o : size;
		fuse_reply_buf(req, h->buf + o, n);
		return;
	}
	if (ns_kind_of(fs->ns, ino, &num) != NS_FILE) {
		fuse_reply_err(req, EISDIR);
		return;
	}
	r = read_sample(fs, num, size, off, &buf);
	if (r < 0) {
		fs->counters.read_errors++;
		fuse_reply_err(req, (int)-r);
	} else {
		fs->counters.bytes_served += (uint64_t)r;
		fuse_reply_buf(req, buf, (size_t)r);
	}
	free(buf);
}

static void fs_op_release(fuse_req_t req, fuse_ino_t ino,
			  struct fuse_file_info *fi)
{
	struct fs_ctx *fs = ctx_of(req);
	struct control_handle *h = (void *)(uintptr_t)fi->fh;
	(void)ino;

	if (h) {
		free(h->buf);
		free(h);
	}
	fs->counters.open_handles--;
	fuse_reply_err(req, 0);
}

static void fs_op_statfs(fuse_req_t req, fuse_ino_t ino)
{
	struct fs_ctx *fs = ctx_of(req);
	const struct index *ix = fs->ns->ix;
	struct statvfs sv;
	uint64_t bytes = 0;
	(void)ino;

	for (size_t i = 0; i < ix->nshards; i++)
		bytes += ix->shards[i].size;
	memset(&sv, 0, sizeof(sv));
	sv.f_bsize = sv.f_frsize = 4096;
	sv.f_blocks = (bytes + 4095) / 4096;
	sv.f_files = fs->ns->nfiles + fs->ns->nclasses + NS_INO_FIRST_CLASS;
	sv.f_namemax = 255;
	sv.f_flag = ST_RDONLY | ST_NOSUID | ST_NODEV;
	fuse_reply_statfs(req, &sv);
}

const struct fuse_lowlevel_ops fs_ops = {
	.lookup = fs_op_lookup,
	.getattr = fs_op_getattr,
	.opendir = fs_op_opendir,
	.readdir = fs_op_readdir,
	.open = fs_op_open,
	.read = fs_op_read,
	.release = fs_op_release,
	.statfs = fs_op_statfs,
};
