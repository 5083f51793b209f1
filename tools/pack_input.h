/* pack_input.h - what echofs-pack packs from a user's own files: samples
 * (a key and its members), found in an ImageFolder tree, a directory of
 * samples or a list of files.
 *
 * A member is a file <key>.<ext> (ext: everything after the first dot of
 * its last component, as WebDataset splits names) or, for an ImageFolder
 * tree, the generated <key>.cls holding the class index. Hidden entries
 * (a component starting with '.') are skipped and counted, like every
 * other file left out; anything that cannot become a member (no
 * extension, a control character, a name too long for a tar header, an
 * unreadable or non-regular file, two files making one member) is an
 * error with a one-line reason. Low-level: it reports, it does not
 * print. */
#ifndef ECHOFS_PACK_INPUT_H
#define ECHOFS_PACK_INPUT_H

#include <stddef.h>
#include <stdint.h>

struct pack_member {
	char *path;	 /* file to copy (owned), or NULL: data below */
	const char *ext; /* into name (owned by the sample's key buffer) */
	char *name;	 /* member name <key>.<ext> (owned) */
	char data[24];	 /* content when path is NULL (a .cls) */
	uint64_t size;	 /* bytes (stat'ed when listed; checked when copied) */
	/* path is in->root "/" (path + rel): a writer opens path + rel
	 * relative to the root, so the kernel looks up fewer components. */
	size_t rel;
};

struct pack_sample {
	uint32_t first, n; /* its members: in.m[first .. first + n) */
	uint64_t bytes;	   /* its members' tar bytes */
};

struct pack_input {
	struct pack_member *m;
	size_t nm, capm;
	struct pack_sample *s;
	size_t ns;
	char *root; /* the tree's root or the list's base (owned) */
	unsigned threads; /* set by the caller: stat's threads (0: one) */
	char **classes; /* ImageFolder: class names by index (owned) */
	size_t nclasses;
	uint64_t skipped; /* hidden entries, non-images of an ImageFolder */
	char err[512];	  /* why the last call failed */
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

void pack_input_free(struct pack_input *in);

#endif
