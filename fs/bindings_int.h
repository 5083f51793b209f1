/* bindings_int.h - what fs/bindings.c (lookups, reads, releases, the
 * reaper) and fs/bindings_open.c (binding at open: OPENs that take a
 * sample, wait for it and store its pages) share: the bindings' state
 * under their one lock and the helpers one file calls in the other.
 * Internal: only those two files include it. See bindings.h for the
 * DESIGN. Every function here is called with b->lock held, except where
 * it says otherwise.
 */
#ifndef ECHOFS_BINDINGS_INT_H
#define ECHOFS_BINDINGS_INT_H

#include "common/attrs.h"
#include "fs/bindings.h"

#include <pthread.h>
#include <stdint.h>

struct dataset;
struct dataset_sample;
struct namespace;

struct binding {
	uint64_t ino;
	uint32_t file;          /* the path: namespace file number */
	uint32_t reader;        /* with visits: the reader whose visit took */
	struct dataset_sample *s;  /* NULL once given back (done, or bound at
				    * open: between samples) */
	uint8_t *out;           /* bytes made by the make hook, or NULL */
	uint64_t size;
	uint64_t rand;          /* the render hook's draw for this binding */
	uint32_t sample;        /* source sample, kept after s is dropped */
	uint32_t member;        /* with by_member: the dataset number read */
	uint64_t nlookup;       /* references the kernel holds */
	uint32_t opens;         /* open handles */
	uint32_t reading;       /* READ replies in progress */
	uint32_t looked;        /* lookups and getattrs answered with this sample */
	uint32_t lookups;       /* LOOKUP replies with it (bound at a lookup) */
	uint32_t opened;        /* OPENs of it: a lookup not yet followed by one
				 * may still be (lookups > opened) */
	uint64_t forgot;        /* references the kernel dropped meanwhile */
	unsigned committed : 1; /* opened at least once: counted as served */
	unsigned expired : 1;   /* given back unopened */
	unsigned stored : 1;    /* bindings_take_store said yes once */
	unsigned rebound : 1;   /* bound at open: a later sample in this inode */
	unsigned spent : 1;     /* released: the path binds anew (the bytes stay
				 * while a reply is being sent) */
	/* Binding at open only: */
	unsigned taking : 1;    /* an OPEN's take is under way (taker) */
	unsigned deferred : 1;  /* ... waiting for the last READ reply first */
	unsigned storing : 1;   /* the new sample's pages are being stored */
	unsigned unstored : 1;  /* the store failed: opens drop the pages */
	unsigned bound_once : 1; /* a sample was bound before */
	unsigned by_member : 1; /* serves `member` (a visit's other file) */
	const void *taker;      /* tag of the OPEN whose take is under way */
	uint64_t gen;           /* serial of the sample bound: the mtime */
	double created;         /* its last lookup (the held list's order) */
	struct binding *hnext;            /* hash chain */
	/* The held list, oldest first: bindings unopened, or spent while a
	 * lookup may still open them; given back expire_s after their last
	 * lookup. */
	struct binding *uprev, *unext;
};

struct bindings {
	struct dataset *ds;
	const struct namespace *ns;
	uint64_t first_ino;
	double expire_s;
	bindings_make_fn make;
	void *make_ud;
	struct visits *visits;  /* samples layout: takes go through visits */
	int decode;             /* bindings_set_decode: make = decode */
	struct bindings_render render; /* set before serving; read-only then */
	uint64_t fixed;         /* binding at open: every binding's size, or 0 */
	bindings_store_fn store; /* with fixed: the page-cache store */
	void *store_ud;
	bindings_inval_fn inval; /* set before serving; read-only then */
	void *inval_ud;
	pthread_t reaper;

	pthread_mutex_t lock; /* guards everything below and every binding */
	pthread_cond_t cond;    /* the reaper's timed wait */
	int stop;
	uint64_t next_ino;
	uint64_t gens;          /* samples bound so far: each binding's gen */
	uint64_t made;          /* bindings made, seeds each one's rand */
	struct binding **cur;   /* current binding of each path, or NULL */
	struct binding **table; /* by inode */
	size_t tsize, count;
	struct binding *uhead, *utail;
	struct opener *waiting; /* OPENs waiting for a binding's sample */
	uint64_t open_handles, expired, rebound;
};

/* An OPEN waiting for its binding's sample (binding at open). */
struct opener {
	struct binding *x;
	const void *tag;
	bindings_opened_fn done;
	void *ud;
	struct opener *next;
};

/* The binding of inode ino, or NULL. */
struct binding *bindings_find(const struct bindings *b, uint64_t ino);
/* Put sample s (bytes made: made, outlen; the render hook's draw: rand)
 * into binding x. */
void bindings_set_sample(struct bindings *b, struct binding *x,
			 struct dataset_sample *s, uint8_t *made,
			 size_t outlen, uint64_t rand);
/* The bytes binding taken sample s serves, made (make hook or decode)
 * with draw rand: 0 with *made (NULL: the sample's own bytes) and
 * *outlen, or -errno with s given back, or -EAGAIN: s was bad and is
 * discarded, take another. */
MUST_CHECK
int bindings_make(struct bindings *b, struct dataset_sample *s, uint64_t rand,
		  uint8_t **made, size_t *outlen);
/* A new draw for the make or render hook. */
uint64_t bindings_next_rand(struct bindings *b);
/* Unhash x if neither the kernel, a handle nor a reply refers to it:
 * 1 if so (the caller frees it unlocked). */
int bindings_maybe_unlink(struct bindings *b, struct binding *x);
/* After h's last handle: the sample to drop (unlocked), or NULL. */
struct dataset_sample *bindings_finish(struct binding *h, int *untake);
/* Give s back (untake: never served) or release it. Without the lock. */
void bindings_drop_sample(struct bindings *b, struct dataset_sample *s,
			  int untake);

/* fs/bindings_open.c. Without the lock: */
/* Take a sample for x on behalf of the OPEN named tag (x->taker). */
void bindings_take_for(struct bindings *b, struct binding *x, const void *tag);
/* Answer the waiting OPEN named tag EINTR (see bindings_open.c): 1 if
 * one was waiting. */
int bindings_cancel_open(struct bindings *b, const void *tag);
/* Answer every waiting OPEN -ESHUTDOWN (bindings_free). */
void bindings_cancel_all_opens(struct bindings *b);

#endif
