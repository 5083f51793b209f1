/* namespace.h - the virtual tree built from a dataset: class directories
 * (imagefolder layout) or the members' own directories (samples layout),
 * file names, inode numbers, lookups and listings.
 *
 * Inodes are stable for a given dataset: 1 is the root, NS_INO_CONTROL_DIR and
 * the control files follow, then one inode per class directory (in sorted
 * order), then one per file (sorted by class, then name). The tree never
 * changes after it is built, so it needs no lock.
 *
 * Both layouts are one shape: "classes" are the directories below the
 * root, numbered so that the root's own come first and every directory's
 * subdirectories are one run (sub_first, sub_count), sorted by name; files
 * are one run per directory (first, count), the root's files first
 * (root_first, root_files). The imagefolder layout has no subdirectories
 * and no files in the root. */
#ifndef ECHOFS_NAMESPACE_H
#define ECHOFS_NAMESPACE_H

#include "common/attrs.h"
#include <stddef.h>
#include <stdint.h>

struct dataset;

#define NS_INO_ROOT 1
#define NS_INO_CONTROL_DIR 2
#define NS_INO_STATS 3
#define NS_INO_STATS_PROM 4
#define NS_INO_CONFIG 5
#define NS_INO_FIRST_CLASS 16
#define NS_CONTROL_DIR_NAME ".echofs"

enum ns_kind {
	NS_NONE,
	NS_ROOT,
	NS_CONTROL_DIR,
	NS_CONTROL_FILE,
	NS_CLASS,
	NS_FILE
};

struct ns_class {
	const char *name;   /* directory name, owned by the namespace */
	uint32_t first;	    /* first file number of this class */
	uint32_t count;	    /* number of files */
	uint32_t sub_first; /* its subdirectories (samples layout) */
	uint32_t sub_count;
};

struct ns_file {
	const char *name; /* file name, owned by the namespace */
	uint32_t sample;  /* sample (or member) number in the dataset */
	uint32_t cls;	  /* class (directory) number; NS_NO_CLASS: root */
};

struct ns_counts {
	uint64_t skipped_bad_label;  /* labels that can't be a directory name */
	uint64_t renamed_duplicates; /* files renamed: names made unique */
	uint64_t skipped_hidden;     /* samples layout: a hidden component */
	uint64_t skipped_clash;	     /* samples layout: path under a file */
	/* Samples shown renamed whole because an earlier sample (in index
	 * order) has their name: imagefolder, one per renamed file; samples
	 * layout, one per key met again, however many members it has. */
	uint64_t duplicate_keys;
	/* The first such pair shown, for the warning: the sample (or member)
	 * that keeps the name and the one renamed; equal when none. */
	uint32_t dup_first, dup_again;
};

struct namespace
{
	const struct dataset *ds; /* borrowed */
	struct ns_class *classes;
	size_t nclasses;
	struct ns_file *files;
	size_t nfiles;
	uint32_t root_dirs;		/* classes[0 .. root_dirs) */
	uint32_t root_first, root_files; /* the root's files */
	struct ns_counts counts;
	char *names;	/* storage for every name as first written */
	char **renamed; /* names given to duplicates, each malloc'd */
	size_t nrenamed, caprenamed;
	int numeric_labels; /* 1 if every label was an integer */
	const char *ext;    /* extension override or NULL (static string) */
	uint32_t *class_of; /* per dataset sample: class, or NS_NO_CLASS */
	/* private: bytes mapped for class_of, files and names (ns_open maps
	 * the big tables with huge pages); 0 when malloc'd */
	size_t map_class_of, map_files, map_names;
};

/* Build the tree. ds is borrowed and must outlive the namespace. ext, when
 * not NULL, replaces every file's extension (e.g. "ppm" when files are
 * served converted). Names are decided over the whole index, then the
 * rank's view is kept: a sample has one name on every mount and rank.
 * Files of one class with one name: the first in index order keeps it, the
 * others become "<name>_dup<sample>" (duplicate_keys). Returns 0 with *out
 * set, or -ENOMEM (the tables are sized by the dataset) or -EOVERFLOW (past
 * 2^32 files) with *out NULL. */
MUST_CHECK
int ns_open(const struct dataset *ds, const char *ext, struct namespace **out);
void ns_free(struct namespace *ns);

/* The samples layout: every member of the dataset's member list
 * (dataset_has_members) in this rank's part, at <key>.<ext>, the key's
 * directory part becoming directories. A path with a hidden component
 * (".x") is left out and counted (skipped_hidden), as is one whose
 * directory would be a file's name (skipped_clash). A sample (the members
 * of one key in one shard) whose key an earlier shard has is renamed
 * whole: every member gets "_dup<n>", n the number of its first member, so
 * a reader never pairs one sample's image with another's text
 * (duplicate_keys). Any name still repeated is renamed as in ns_open. Returns 0 with *out set, -ENOTSUP when the index lists no
 * members (formats 1 and 2), or -ENOMEM / -EOVERFLOW as ns_open. */
MUST_CHECK
int ns_open_samples(const struct dataset *ds, struct namespace **out);

/* What an inode is. For NS_CLASS and NS_FILE, *num receives the class or
 * file number. */
enum ns_kind ns_kind_of(const struct namespace *ns, uint64_t ino,
			uint32_t *num);
uint64_t ns_class_ino(const struct namespace *ns, uint32_t cls);
uint64_t ns_file_ino(const struct namespace *ns, uint32_t file);

/* Inode of `name` in directory `parent`, or 0 if none. The control directory
 * is found by name in the root but is not listed by ns_list. */
uint64_t ns_lookup(const struct namespace *ns, uint64_t parent,
		   const char *name);

/* The i-th entry (from 0, without "." and "..") of directory `dir`: returns
 * its inode and sets *name and *is_dir, or returns 0 past the end. */
uint64_t ns_list(const struct namespace *ns, uint64_t dir, size_t i,
		 const char **name, int *is_dir);

/* The class of a dataset sample (in this rank's view or not), or
 * NS_NO_CLASS when its label can't be a directory name. With a partition
 * (dataset_set_part) every class of the whole dataset has a directory, and
 * only the samples in the rank's view have files. */
#define NS_NO_CLASS UINT32_MAX
uint32_t ns_sample_class(const struct namespace *ns, uint32_t sample);

/* A directory's name for messages: "" for NS_NO_CLASS (the root). */
const char *ns_dir_name(const struct namespace *ns, uint32_t cls);

/* Size of the file (exact sample size). */
uint64_t ns_file_size(const struct namespace *ns, uint32_t file);

#endif
