/* namespace_int.h - what the two tree builders (namespace.c: imagefolder,
 * namespace_samples.c: samples) share: file names and their renaming. */
#ifndef ECHOFS_NAMESPACE_INT_H
#define ECHOFS_NAMESPACE_INT_H

#include <stddef.h>
#include <stdint.h>

#include "fs/namespace.h"

#define NAME_LEN_MAX 255 /* what a filesystem takes (cp -r, tar) */

/* "<key base><suffix>.<ext>" into p (room for NAME_LEN_MAX + 1 bytes plus
 * the suffix), ext NULL for the sample's own (dataset_ext), at most
 * NAME_LEN_MAX bytes (a base too long is cut at a UTF-8 boundary). Returns
 * the length without the NUL. */
size_t ns_write_name(char *p, const struct dataset *ds, uint32_t sample,
		     const char *ext, const char *suffix);
/* The suffix of a renamed duplicate: "_dup<n>", or "_dup<n>_<round>" when
 * an earlier round's name was taken. buf has NS_SUFFIX_ROOM bytes. */
#define NS_SUFFIX_ROOM 24
#define NS_DUP_ROUNDS 8 /* renaming rounds before giving up on a clash */
void ns_dup_suffix(char *buf, uint32_t n, unsigned round);
/* "<key base><suffix>.<ext>" of sample (or member) s in a buffer of its
 * own, kept by the namespace (a renamed name may not fit the shared one). */
char *ns_renamed_name(struct namespace *ns, uint32_t s, const char *suffix);
/* By name, then by sample number (qsort). */
int ns_file_cmp(const void *a, const void *b);
/* Rename the files of one directory's sorted run f[0..n) whose names
 * repeat ("_dup<sample>"); seen is a bitmap over sample numbers of files
 * renamed before. Returns how many were renamed for the first time. */
size_t ns_rename_duplicates(struct namespace *ns, struct ns_file *f, size_t n,
			    unsigned char *seen);

#endif
