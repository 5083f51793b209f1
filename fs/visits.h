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
 * - Visits are per reader (the requesting thread: FUSE's pid of the
 *   request), and a reader's visit is the run of its takes for files of
 *   one key: reader r's first take for a file of key K starts r's visit of
 *   K and binds it to the key S the pool gave; every later take by r for a
 *   file of K (the caption after the image, the image again, a member
 *   read twice) is given a share of that take (dataset_echo_share) and
 *   serves S's member of the same extension (visits_member). The visit
 *   ends when r takes for a file of another key. The take is one serve,
 *   however many of K's files are opened. So what one reader reads of a
 *   key, in any order and with any members left unread, is one sample,
 *   whatever other readers, earlier passes or an image-only pass did: no
 *   visit is shared between readers and none ends by a clock. Different
 *   readers of one key get their own substitutes (that is echo).
 * - Memory: one visit per reader; beyond VISITS_MAX the least recently
 *   used visit not taking is ended (a reader gone idle, a worker process
 *   that exited). Each visit holds one take.
 * - A take that has to wait: the visit's first take parks in the pool;
 *   takes for the same visit meanwhile wait on it (no thread waits) and
 *   are answered with shares when it is answered. If the first take was
 *   interrupted, each waiting take is started anew; other failures
 *   (-ETIMEDOUT, -ESHUTDOWN) are theirs too.
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

/* Most visits (readers) kept at once. */
#define VISITS_MAX 1024

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

/* dataset_echo_take_async for namespace file `file` on behalf of reader
 * (an id of the requesting thread): 0 with *out (a reference of the
 * reader's visit's take) now, -EINPROGRESS when parked (done(ud, ...) is
 * called exactly once, maybe from another thread), or -errno. tag names
 * the take for visits_cancel. */
MUST_CHECK
int visits_take_async(struct visits *v, uint32_t file, uint32_t reader,
		      const void *tag, dataset_echo_done_fn done, void *ud,
		      struct dataset_sample **out);

/* The sample number (dataset_sample_id) of the take of reader's current
 * visit when that visit is of file's key and holds its take, else
 * VISITS_NONE. A binding of file that reader made serves its run of the
 * key only if its take has this number: one made in an earlier visit of
 * the key may serve another substitute (fs/bindings.c). */
#define VISITS_NONE UINT32_MAX
uint32_t visits_unit(struct visits *v, uint32_t reader, uint32_t file);

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
