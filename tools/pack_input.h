/* pack_input.h - what echofs-pack packs from a user's own files: samples
 * (a key and its members), found in an ImageFolder tree, a directory of
 * samples or a list of files.
 *
 * A member is a file <key>.<ext> (ext: everything after the first dot of
 * its last component, as WebDataset splits names) or, for an ImageFolder
 * tree, the generated <key>.cls holding the class index. Anything that
 * cannot become a member because of its name (no extension, a control
 * character, a name too long for a tar header, two files making one
 * member) is an error with a one-line reason.
 *
 * The input is a tree the user does not fully control (a home directory,
 * a shared tree), so it is read the way careful archivers read one: the
 * walk goes by directory descriptors, and every file is opened beneath
 * the root following no symlink (openat2 RESOLVE_BENEATH |
 * RESOLVE_NO_SYMLINKS), non-blocking, and checked for what it is once
 * open. A symlink is never followed out of the tree; with follow_links,
 * one whose target resolves inside the tree is followed (its target
 * opened the same way, by its resolved path). A directory already on the
 * walk's path (a loop), a FIFO, socket or device (never opened for
 * reading), an unreadable file or directory: each is skipped, counted by
 * reason and reported through on_skip, and the rest is packed. Hidden
 * entries (a component starting with '.') are skipped and counted
 * silently, like non-images of an ImageFolder. Low-level: it reports, it
 * does not print. */
#ifndef ECHOFS_PACK_INPUT_H
#define ECHOFS_PACK_INPUT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/stat.h>

struct pack_member {
	char *path;	 /* file to copy (owned), or NULL: data below */
	const char *ext; /* into name (owned by the sample's key buffer) */
	char *name;	 /* member name <key>.<ext> (owned) */
	char data[24];	 /* content when path is NULL (a .cls) */
	uint64_t size;	 /* bytes (stat'ed when listed; checked when copied) */
	/* path is in->root "/" (path + rel): a writer opens path + rel
	 * relative to the root, so the kernel looks up fewer components. */
	size_t rel;
	uint32_t cls; /* ImageFolder: its class's index */
};

struct pack_sample {
	uint32_t first, n; /* its members: in.m[first .. first + n) */
	uint64_t bytes;	   /* its members' tar bytes */
};

/* Why an entry was left out; pack_input.skipped counts each. */
enum pack_skip {
	PACK_SKIP_IGNORED,     /* hidden, or not an image of an ImageFolder */
	PACK_SKIP_LINK_OUT,    /* a symlink whose target leaves the tree */
	PACK_SKIP_LINK,	       /* a symlink inside it, without follow_links */
	PACK_SKIP_LINK_BROKEN, /* a symlink that resolves to nothing */
	PACK_SKIP_LOOP,	       /* a directory already on the walk's path */
	PACK_SKIP_SPECIAL,     /* a FIFO, socket, device: never read */
	PACK_SKIP_UNREADABLE,  /* open refused (EACCES ...) */
	PACK_SKIP_NREASONS
};

/* Called for every skip but PACK_SKIP_IGNORED, on the caller's thread, in
 * a stable order: path is the entry as the user names it (root "/" its
 * path in the tree), why a short reason ("symlink to T (leaves the input
 * tree)"). Both are raw bytes of file names: escape before printing. */
typedef void pack_skip_fn(void *arg, enum pack_skip reason, const char *path,
			  const char *why);

struct pack_input {
	struct pack_member *m;
	size_t nm, capm;
	struct pack_sample *s;
	size_t ns;
	char *root;	       /* the tree's root or the list's base (owned) */
	unsigned threads;      /* set by the caller: stat's threads (0: one) */
	bool follow_links;     /* set by the caller: follow links inside root */
	pack_skip_fn *on_skip; /* set by the caller, or NULL */
	void *on_skip_arg;
	char **classes; /* ImageFolder: class names by index (owned) */
	size_t nclasses;
	uint64_t skipped[PACK_SKIP_NREASONS]; /* entries left out, by reason */
	char err[512];			      /* why the last call failed */
};

/* Each returns 0 or -errno with the reason in in->err; samples are in
 * key order. An input without any sample is -ENODATA. */
/* root/<class>/.../<stem>.<image ext>: key <class>/.../<stem>, members
 * the image and a .cls with the class's index in sorted class order. */
int pack_input_imagefolder(struct pack_input *in, const char *root);
/* Every file under root; files sharing <dir>/<stem> make one sample. */
int pack_input_dir(struct pack_input *in, const char *root);
/* The files named in list (one path a line, relative to base), grouped
 * as pack_input_dir groups them. */
int pack_input_list(struct pack_input *in, const char *list, const char *base);

/* Open rel (a path from the directory rootfd) beneath rootfd following
 * no symlink on the way ("..": -EXDEV, a symlink: -ELOOP), with flags
 * (O_RDONLY, O_PATH ...) plus O_NOFOLLOW | O_NONBLOCK | O_NOCTTY |
 * O_CLOEXEC so a FIFO never blocks, and fstat it into *st. Returns the
 * descriptor (caller closes) or -errno. The writer opens members with
 * it, so a file swapped for a symlink after listing is refused. */
int pack_input_open(int rootfd, const char *rel, int flags, struct stat *st);

void pack_input_free(struct pack_input *in);

#endif
