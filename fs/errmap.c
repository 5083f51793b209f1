/* errmap.c - the one place where an internal error becomes the errno a
 * reader sees (the table is documented in errmap.h). */
#include "fs/errmap.h"

#include <errno.h>
#include <stddef.h>

#include "common/util.h"

/* Errors that mean the same to a reader as to echofs, in every operation. */
static const int passed_on[] = {ETIMEDOUT, ESTALE, ENOMEM, EINTR,  ENOENT,
				ENOTDIR,   EISDIR, EROFS,  EACCES, EPERM,
				ENODATA,   ERANGE, ENOSYS};

/* Errors passed on in some operations only: a bad setting written to
 * .echofs/config is the writer's mistake, elsewhere EINVAL is ours; a
 * setting refused because the mount serves exactly for good is EBUSY. */
static const struct {
	int err;
	unsigned char in[ERRMAP_NOPS];
} passed_in[] = {
	{EINVAL, {[ERRMAP_WRITE] = 1}},
	{EBUSY, {[ERRMAP_WRITE] = 1}}, /* the mount no longer echoes */
};

int errmap_reply(enum errmap_op op, int err)
{
	if (err == 0)
		return 0;
	if (err > 0 || (unsigned)op >= ERRMAP_NOPS)
		return EIO; /* a caller's mistake, kept from the reader */
	err = -err;
	for (size_t i = 0; i < ARRAY_SIZE(passed_on); i++)
		if (passed_on[i] == err)
			return err;
	for (size_t i = 0; i < ARRAY_SIZE(passed_in); i++)
		if (passed_in[i].err == err && passed_in[i].in[op])
			return err;
	return EIO;
}
