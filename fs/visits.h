/* visits.h - whole-sample echo for the samples layout: the members of one
 * key that a reader opens within one visit are all members of one
 * substituted sample, so an echoed key.jpg comes with the caption, the
 * mask or the metadata of the same substitute.
 *
 * DESIGN
 * - Keys: every file of the samples tree is a member of a key (its
 *   WebDataset key within its shard). Keys with the same label (the label
 *   of the key's labelled sample: its .cls or its directory; none for an
 *   unlabelled key) and the same member extensions form one echo class: a
 *   substitute has a member for every file the key shows, and a labelled
 *   key keeps its label.
 * - The pool streams one member per key, the key's largest (usually its
 *   image; dataset_echo_start_members): a take is a key.
 * - A visit of key K starts with the first take for one of K's files and
 *   binds K to the key S that the pool gave. Each of K's files takes once
 *   per visit and is given a share of that take (dataset_echo_share): the
 *   file serves S's member of the same extension (visits_member). The take
 *   is one serve, however many of K's files are opened.
 * - A visit ends when every file of K has taken, when one of them takes a
 *   second time (the next epoch, or a path opened again after its binding
 *   was spent), or VISIT_S seconds after it started (a reader that opens
 *   only some members: the others are simply not served). Then the next
 *   take for a file of K starts a new visit with a new substitute.
 * - A take that has to wait: the visit's first take parks in the pool;
 *   takes for K's other files meanwhile wait on the visit (no thread
 *   waits) and are answered with shares when it is answered. If the first
 *   take was interrupted, each waiting take is started anew; other
 *   failures (-ETIMEDOUT, -ESHUTDOWN) are theirs too.
 * - Locking: one mutex guards the visits; it is never held while a done
 *   callback runs or the pool is asked to take. Lock order: visits, then
 *   the pool's lock (dataset_echo_share).
 */
#ifndef ECHOFS_VISITS_H
#define ECHOFS_VISITS_H

#include "common/attrs.h"
#include <stddef.h>
#include <stdint.h>

#include "cache/dataset.h" /* dataset_echo_done_fn */

struct namespace;
struct visits;

/* How long a visit lasts at most, in seconds. */
#define VISIT_S 10.0

/* visits_member's answer for the file that is the taken member itself:
 * it serves the sample's held bytes. */
#define VISITS_HELD UINT32_MAX

/* Group the files of ns (a samples layout tree of ds) into keys and echo
 * classes, and start ds's echo pool over them. Returns 0 with *out set, or
 * -errno with a one-line reason in err. */
MUST_CHECK
int visits_start(struct dataset *ds, const struct namespace *ns,
		 struct visits **out, char *err, size_t errlen);
/* Every take still waiting is answered -ESHUTDOWN (a visit's first take,
 * parked in the pool, through dataset_echo_cancel_all: every take of ds's
 * pool is a visit's), every visit's take is let go of. No take may be in
 * progress in another thread. Accepts NULL. */
void visits_free(struct visits *v);

/* dataset_echo_take_async for namespace file `file`: 0 with *out (a
 * reference of the file's visit's take) now, -EINPROGRESS when parked
 * (done(ud, ...) is called exactly once, maybe from another thread), or
 * -errno. tag names the take for visits_cancel. */
MUST_CHECK
int visits_take_async(struct visits *v, uint32_t file, const void *tag,
		      dataset_echo_done_fn done, void *ud,
		      struct dataset_sample **out);
/* The blocking form (waits up to the pool's wait). */
MUST_CHECK
int visits_take(struct visits *v, uint32_t file, struct dataset_sample **out);

/* What file serves of s, a take of its visit: the dataset number of the
 * substitute's member with the file's extension (read with dataset_read),
 * or VISITS_HELD for the member the pool holds (dataset_sample_data). */
uint32_t visits_member(const struct visits *v, uint32_t file,
		       const struct dataset_sample *s);

/* Answer the take named tag that waits on a visit with -EINTR; 1 if one
 * was waiting. (A visit's first take is the pool's: dataset_echo_cancel.) */
int visits_cancel(struct visits *v, const void *tag);
/* Answer every take waiting on a visit with -ESHUTDOWN. */
void visits_cancel_all(struct visits *v);

#endif
