/* inval.c - on echo mounts, ask the kernel to drop the entry of a path
 * whose binding is done, so that the path's next open costs one LOOKUP. */
#define FUSE_USE_VERSION 314
#include "fs/inval.h"

#include <errno.h>
#include <fuse_lowlevel.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "cache/dataset.h"
#include "common/util.h"
#include "common/workq.h"
#include "fs/namespace.h"

struct inval {
	struct fuse_session *se;
	const struct namespace *ns;
	struct dataset *ds;
	struct workq *wq; /* one worker: the only thread that notifies */
	_Atomic uint64_t sent, absent, skipped;
};

struct inval_item {
	struct workq_item it;
	uint32_t file;
};

static void inval_one(void *ctx, struct workq_item *it)
{
	struct inval *v = ctx;
	struct inval_item *x = list_entry(it, struct inval_item, it);
	const struct ns_file *f = &v->ns->files[x->file];
	uint64_t parent = f->cls == NS_NO_CLASS ? NS_INO_ROOT
						: ns_class_ino(v->ns, f->cls);
	int r;

	/* A lookup parked in the pool holds its directory's lock in the
	 * kernel: the notification would wait for it, and every lookup in
	 * that directory behind the notification. Skip it then (the entry
	 * goes the kernel's usual way: the next walk revalidates it). */
	if (dataset_echo_parked(v->ds)) {
		v->skipped++;
		free(x);
		return;
	}
	r = fuse_lowlevel_notify_inval_entry(v->se, parent, f->name,
					     strlen(f->name));
	if (r == 0)
		v->sent++;
	else
		v->absent++; /* -ENOENT: forgotten already */
	free(x);
}

static void inval_cancel(void *ctx, struct workq_item *it)
{
	(void)ctx;
	free(list_entry(it, struct inval_item, it));
}

int inval_open(struct fuse_session *se, const struct namespace *ns,
	       struct dataset *ds, struct inval **out)
{
	struct inval *v = xcalloc(1, sizeof(*v));
	int r;

	*out = NULL;
	v->se = se;
	v->ns = ns;
	v->ds = ds;
	r = workq_open(&(struct workq_opts){.threads = 1, .run = inval_one,
					    .cancel = inval_cancel, .ctx = v},
		       &v->wq);
	if (r) {
		free(v);
		return r;
	}
	*out = v;
	return 0;
}

void inval_stop(struct inval *v)
{
	if (v)
		workq_shutdown(v->wq, WORKQ_CANCEL);
}

void inval_free(struct inval *v)
{
	if (!v)
		return;
	inval_stop(v);
	workq_free(v->wq);
	free(v);
}

void inval_path(void *ud, uint32_t file)
{
	struct inval *v = ud;
	struct inval_item *x = malloc(sizeof(*x));

	if (!x)
		return;
	workq_item_init(&x->it);
	x->file = file;
	if (workq_submit(v->wq, &x->it, WORKQ_NOWAIT) != 0)
		free(x); /* -ESHUTDOWN: the mount is going */
}

void inval_get_stats(struct inval *v, struct inval_stats *out)
{
	memset(out, 0, sizeof(*out));
	if (!v)
		return;
	out->sent = v->sent;
	out->absent = v->absent;
	out->skipped = v->skipped;
}
