/* bindings.h - on echo mounts, every path that is looked up is bound to a
 * sample from the echo pool, under an inode whose size and bytes do not
 * change while the binding lasts: page cache, mmap, fstat and concurrent
 * readers all see one coherent file, while the next use of the path gets
 * another sample.
 *
 * DESIGN
 * - The rule (docs/ARCHITECTURE.md, "What a path serves"): a node id that
 *   the kernel was told about serves one sample, with one size, one mtime
 *   and the same bytes, for as long as it serves at all: no open, release
 *   or timer binds another sample to a known inode, so every open file
 *   description reads one sample whose size, bytes and user.echofs.source
 *   agree, and the kernel's attributes and pages can never be out of step
 *   with it. And an OPEN of an inode whose LOOKUP was answered within the
 *   last expire_s always finds its sample (no ESTALE), whatever other opens
 *   and releases of the path came between.
 * - A lookup of a path returns its current binding, making one (a new node
 *   id, dataset_echo_take_async) when there is none. With visits (the
 *   samples layout) that is the reader's own binding made from the take
 *   of its current visit of the key: one made in an earlier visit is not,
 *   since it may serve another substitute. bindings_lookup_async never
 *   waits: when the pool has no sample yet the lookup is parked in the
 *   pool and finished (bound, then the caller's done callback) by the
 *   thread that makes a sample ready, or failed by the pool's timer or
 *   bindings_cancel. The binding stays the path's until it has been opened
 *   and every handle released (spent) or it was given back unopened
 *   (expired); the next lookup then binds a new sample under a new node id
 *   (the kernel's revalidation sees another node id and looks the path up
 *   again, unless the entry was dropped: below).
 * - A binding counts its LOOKUP replies and its OPENs. Spent while a
 *   lookup answered with it has not opened it yet (another reader between
 *   its LOOKUP and its OPEN), it keeps its sample on the held list; so does
 *   one never opened. The held list gives samples back expire_s after the
 *   binding's last lookup (dataset_echo_untake if never opened: looking at
 *   files consumes no sample); a spent binding every lookup of which was
 *   opened gives its sample back at its last release (or reply). A
 *   binding counts as served (dataset_echo_commit) when first opened.
 * - When a binding is done, the path's entry is dropped (the inval hook,
 *   fs/inval.h), so that the next walk of the path sends one LOOKUP
 *   rather than a revalidation and a second LOOKUP.
 * - The kernel may send RELEASE while a READ of the same handle is still
 *   being answered (seen on Linux 6.18), so a read pins the bytes
 *   (bindings_read ... bindings_read_done) and the later of the last release
 *   and the last reply gives them back.
 * - A binding is freed, and its sample dropped, when the kernel has
 *   forgotten it (nlookup 0), no handle is open and no reply is being sent.
 * - Binding at open (bindings_bind_at_open: every rendering has one size,
 *   known before any sample is taken, e.g. PPM with a crop): a lookup binds
 *   nothing. It returns the path's one inode with that size and a fixed
 *   mtime, and the kernel may cache the entry and the attributes (stable),
 *   so a reopen sends no LOOKUP at all. The OPEN binds: when the inode
 *   holds no sample it takes one (parked in the pool like a lookup, never
 *   blocking a FUSE thread), and the store hook writes the new sample's
 *   bytes over the whole of the inode's page cache before any open of it
 *   is answered. OPENs that arrive meanwhile wait for that and share the
 *   sample, as do OPENs while it is open. When the store fails, the opens
 *   are told to drop the pages (keep_cache off) and READs serve the bytes.
 *   A spent inode whose last READ reply is still being sent takes its next
 *   sample when that reply is done. The taking OPEN's request is the
 *   pool's tag: an INTERRUPT cancels it there, and the OPENs waiting on it
 *   take anew; an INTERRUPT of a waiting OPEN answers it at once. Bound at
 *   open, every sample has the inode's one size and the store replaces
 *   all of its pages before an open is answered, so the rule above holds
 *   for what a reader sees, although the inode's sample changes.
 * - Locking: one mutex guards the table, the per-path current bindings and
 *   every binding's counters; takes, renders and stores run without it. A
 *   binding's bytes are immutable, so a pinned reply is copied out without
 *   the lock.
 */
#ifndef ECHOFS_BINDINGS_H
#define ECHOFS_BINDINGS_H

#include "common/attrs.h"
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

struct dataset;
struct namespace;

struct binding_attr {
	uint64_t ino;
	uint64_t size;
	uint64_t gen; /* serial of the sample bound: the mtime */
	int stable;   /* bound at open: entry and attributes may be cached */
};

struct bindings_stats {
	uint64_t live;    /* bindings the kernel still knows */
	uint64_t open;    /* open handles */
	uint64_t expired; /* bindings given back unopened */
	uint64_t rebound; /* bound at open: later samples in an inode */
};

struct bindings;
struct binding;

/* Optional: the bytes a binding serves, made from its pool sample (echo
 * before augment: each binding crops, flips and encodes the decoded image
 * anew). rand differs for every binding. Returns 0 with a malloc'd *out or
 * -errno. Without it a binding serves the pool sample's bytes. */
typedef int (*bindings_make_fn)(void *ud, const uint8_t *data, size_t len,
				uint64_t rand, uint8_t **out, size_t *outlen);

/* Optional, instead of a make hook: the binding's bytes are rendered at
 * each READ, straight into the reply buffer (echo before augment with PPM
 * output: crop, flip and header in one pass, nothing kept per binding).
 * size gives the length for a pool sample; range writes bytes
 * [off, off + n) of the rendering for rand to dst and returns the count or
 * -errno. The same rand always renders the same bytes, so the inode stays
 * immutable. Both run without the bindings lock. */
struct bindings_render {
	ssize_t (*size)(void *ud, const uint8_t *data, size_t len);
	ssize_t (*range)(void *ud, const uint8_t *data, size_t len,
			 uint64_t rand, uint64_t off, uint8_t *dst, size_t n);
	void *ud;
};

/* Use r (copied) for every binding made from now on. Call before the mount
 * serves, after bindings_new. */
void bindings_set_render(struct bindings *b, const struct bindings_render *r);

/* Every binding decodes and transforms its sample anew
 * (dataset_echo_decode: echo_stage=encoded) instead of a make or render
 * hook; a sample that fails to decode is discarded from the pool
 * (dataset_echo_discard) and the lookup or open takes another, so readers
 * never see a bad sample, as with a pool that decodes at ingest. Call
 * before the mount serves. */
void bindings_set_decode(struct bindings *b);

/* Ask the kernel to drop namespace file `file`'s entry (fs/inval.h):
 * called without the lock when the path's binding is spent or expires.
 * Without it the next walk of the path costs two LOOKUPs. Call before the
 * mount serves. */
typedef void (*bindings_inval_fn)(void *ud, uint32_t file);
void bindings_set_inval(struct bindings *b, bindings_inval_fn fn, void *ud);

/* The samples layout's whole-sample echo: takes go through v (owned
 * from now on, freed by bindings_free), and a binding serves the member
 * visits_member names, read at each READ with dataset_read. Call before
 * the mount serves; not with a make, decode or render hook. */
struct visits;
void bindings_set_visits(struct bindings *b, struct visits *v);

/* Page-cache store of binding at open: write the whole of h's bytes (size,
 * read with bindings_read) into the page cache of inode ino. 0 or -errno.
 * Called without the bindings lock, before any open of h is answered. */
typedef int (*bindings_store_fn)(void *ud, uint64_t ino, struct binding *h,
				 uint64_t size);

/* Bind at open (see DESIGN): every binding's bytes are `size` long (the
 * render hook's, or the pool sample's without one; a sample of another
 * size fails its open with EIO). Call before the mount serves, after
 * bindings_set_render or bindings_set_decode; not with a make hook. */
void bindings_bind_at_open(struct bindings *b, uint64_t size,
			   bindings_store_fn store, void *ud);

/* ds (an echo mount's dataset: dataset_echo_start) and ns borrowed. Binding inodes are numbered from first_ino up.
 * Starts the reaper. Returns 0 with *out set, or -errno with *out NULL (the
 * reaper could not start). The x_open rule of docs/ARCHITECTURE.md under
 * another name: bindings_open opens one binding. */
MUST_CHECK
int bindings_start(struct dataset *ds, const struct namespace *ns,
		   uint64_t first_ino, double expire_s, bindings_make_fn make,
		   void *make_ud, struct bindings **out);
/* Fails parked lookups (-ESHUTDOWN), stops the reaper, gives every sample
 * back, frees. Accepts NULL. */
void bindings_free(struct bindings *b);

/* 1 if ino is a binding inode (known or not). */
int bindings_owns(const struct bindings *b, uint64_t ino);

/* Completion of a parked lookup: err 0 with attr (one kernel lookup
 * counted), or -ETIMEDOUT / -EINTR / -ESHUTDOWN / -errno with attr NULL. */
typedef void (*bindings_done_fn)(void *ud, int err,
				 const struct binding_attr *attr);

/* Current binding of namespace file `file`, made if needed (a take of
 * the pool, dataset_echo_take_async, or of the reader's visit), counting
 * one kernel lookup; it never waits: 0 with *out set now, -EINPROGRESS
 * when parked (done(ud, ...) is then called exactly once, from another
 * thread, maybe before this returns), or -errno. tag names the lookup for
 * bindings_cancel. reader names the requesting thread: with visits (the
 * samples layout) a path's binding is the reader's own, taken through
 * its visit (fs/visits.h), so one reader's members of a key are one
 * sample; otherwise it is ignored. */
MUST_CHECK
int bindings_lookup_async(struct bindings *b, uint32_t file, uint32_t reader,
			  const void *tag, bindings_done_fn done, void *ud,
			  struct binding_attr *out);

/* 1 if namespace file `file` has a live binding now (holding a sample, not
 * spent): its next lookup returns that binding, so a stat and the open
 * after it see one inode. */
int bindings_is_bound(struct bindings *b, uint32_t file);

/* Fail the parked lookup or open named tag with -EINTR. 1 if it was
 * parked. */
int bindings_cancel(struct bindings *b, const void *tag);

/* Attributes of a known binding inode: 0 or -ENOENT. */
MUST_CHECK
int bindings_getattr(struct bindings *b, uint64_t ino, struct binding_attr *out);

/* Open a binding: *out set (a handle for bindings_read/release) and 0, or
 * 1 when the kernel's cached pages of ino must be dropped at this open
 * (bound at open: keep_cache off when the store failed); -ESTALE (its
 * sample was given back: no lookup of it within expire_s), -ENOENT. A
 * spent binding that still holds its sample opens and serves it. */
MUST_CHECK
int bindings_open(struct bindings *b, uint64_t ino, struct binding **out);
/* Completion of an open: r 0 (keep the pages) or 1 (drop them) with h,
 * or -errno with h NULL. */
typedef void (*bindings_opened_fn)(void *ud, int r, struct binding *h);

/* 1 when the mount binds at open (bindings_bind_at_open was called):
 * only then may bindings_open_async park. */
int bindings_binds_at_open(const struct bindings *b);

/* Binding at open: 1 and the path's file number when an OPEN of inode ino
 * would take a new sample now (it holds none, none is being taken or
 * stored, no handle is open), else 0. A racing OPEN may take first: the
 * answer is a hint (exact first uses it to hand the path back to the
 * tree's own inode, fs/ops.c). */
int bindings_would_take(struct bindings *b, uint64_t ino, uint32_t *file);

/* bindings_open without waiting; with binding at open, the open binds (see
 * DESIGN). Returns 0 or 1 with *out set now, -EINPROGRESS when parked
 * (done(ud, ...) is then called exactly once, maybe from another thread,
 * maybe before this returns), or -errno. tag names the open for
 * bindings_cancel and, while its take is parked, for the pool. */
MUST_CHECK
int bindings_open_async(struct bindings *b, uint64_t ino, const void *tag,
			bindings_opened_fn done, void *ud,
			struct binding **out);

/* 1 the first time it is asked for h's binding, if its size (set in
 * *size) is 1..max: the caller then copies the whole binding
 * (bindings_read) into the kernel's page cache before answering the open,
 * so the reader's READ never reaches the daemon. 0 afterwards: the pages
 * are there, or the kernel dropped them and sends READs. */
int bindings_take_store(struct bindings *b, struct binding *h, uint64_t max,
			uint64_t *size);

/* Bytes of an open binding at off: *data stays valid until the matching
 * bindings_read_done, even if the handle is released meanwhile (the kernel
 * may send RELEASE while a READ is still being answered). With a render
 * hook the bytes are rendered into a buffer of the calling thread, valid
 * until its next bindings_read. Returns the byte count (0 past the end),
 * -ESTALE, or the render hook's -errno (then no bindings_read_done). */
MUST_CHECK
ssize_t bindings_read(struct bindings *b, struct binding *h, uint64_t off,
		      size_t size, const void **data);
void bindings_read_done(struct bindings *b, struct binding *h);
void bindings_release(struct bindings *b, struct binding *h);

/* The kernel dropped n references to ino. */
void bindings_forget(struct bindings *b, uint64_t ino, uint64_t n);

/* Source sample number of a binding (for user.echofs.source): 0 or -ENOENT
 * (a node id the kernel forgot, or never had). */
MUST_CHECK
int bindings_source(struct bindings *b, uint64_t ino, uint32_t *sample);

void bindings_get_stats(struct bindings *b, struct bindings_stats *out);

#endif
