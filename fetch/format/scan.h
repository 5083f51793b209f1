/* scan.h - turn one shard's tar stream into index samples, following the
 * WebDataset conventions.
 *
 * A sample is the run of adjacent members sharing a key (the member name up
 * to the first dot of its last path component, directory part kept:
 * "dir/abc.seg.jpg" has key "dir/abc"). A key seen again after another key
 * starts a new sample, as in WebDataset. Members the tar parser rejects, and
 * names without a key or extension ("README", ".hidden"), and members under
 * a hidden directory (a component starting with '.', as ImageFolder skips
 * them: ".git/x.jpg"), are skipped and counted without ending the current
 * sample.
 *
 * Image: the first member whose LAST extension (case-insensitive) is jpg,
 * jpeg, png, ppm or webp; the index records that extension lower-cased.
 * Label: the content of the member whose whole extension is "cls"
 * (case-insensitive; the first one counts): a non-negative decimal integer,
 * surrounding whitespace allowed, stored canonically ("007" -> "7"); anything
 * else skips the sample (skipped_bad_label). Without a .cls member, the name
 * of the image's parent directory ("train/n01440764/x.JPEG" -> "n01440764");
 * without one, the sample is skipped (skipped_no_label).
 *
 * Members: every member with a key and an extension (rejected, hidden and
 * keyless ones aside) is also added to the index's member list
 * (index_add_member, format 3), whatever its sample's label or image: the
 * samples layout shows them all. scan_new marks the index has_members. */
#ifndef ECHOFS_SCAN_H
#define ECHOFS_SCAN_H

#include "common/attrs.h"
#include <stddef.h>
#include <stdint.h>

struct index;

struct scan_counts {
	uint64_t samples;	   /* added to the index */
	uint64_t members;	   /* tar entries seen */
	uint64_t skipped_members;  /* rejected: links, bad names, no key... */
	uint64_t skipped_no_image; /* key groups without an image member */
	uint64_t skipped_no_label; /* images with neither .cls nor parent dir */
	uint64_t skipped_bad_label; /* .cls that is not a decimal integer */
	uint64_t extra_images;	    /* further images of one key, ignored */
	uint64_t unlisted_members;  /* not in the member list: bad name */
};

struct scan;

/* Scan shard number `shard` of ix. Caller frees with scan_free. */
struct scan *scan_new(struct index *ix, uint32_t shard);
void scan_free(struct scan *s);

/* Feed the shard's bytes in order. Returns 0 or -EBADMSG (malformed tar; see
 * scan_error). */
MUST_CHECK
int scan_feed(struct scan *s, const void *buf, size_t len);
/* End of the shard: flushes the last sample. Returns 0 or -EBADMSG. */
MUST_CHECK
int scan_finish(struct scan *s);
const char *scan_error(const struct scan *s);
/* Counts so far (borrowed). scan_for_each_skip lists the reasons. */
const struct scan_counts *scan_counts(const struct scan *s);

/* Each distinct reason a member or sample was skipped, with its count, e.g.
 * ("symlink", 3). For logging by the caller. */
void scan_for_each_skip(const struct scan *s,
			void (*fn)(void *ud, const char *reason, uint64_t n),
			void *ud);

#endif
