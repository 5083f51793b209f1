/* test_errmap.c - the errno a reader sees for each internal error, per
 * operation (fs/errmap.c), checked row by row against the table in
 * fs/errmap.h. */
#include <criterion/criterion.h>
#include <errno.h>
#include <string.h>

#include "common/util.h"
#include "fs/errmap.h"

#define ALL(e)                                                                 \
	{                                                                      \
		e, e, e, e                                                     \
	}

/* internal error -> what lookup, open, read and write reply */
static const struct {
	int internal;
	int want[ERRMAP_NOPS];
} table[] = {
	{0, ALL(0)},
	/* data failures: the reason is logged where they arise */
	{-EIO, ALL(EIO)},
	{-EBADMSG, ALL(EIO)},
	{-EPROTO, ALL(EIO)},
	{-EFBIG, ALL(EIO)}, /* an over-cap sample: see errmap.h */
	{-ENOTSUP, ALL(EIO)},
	{-ECONNREFUSED, ALL(EIO)},
	{-EHOSTUNREACH, ALL(EIO)},
	{-ELOOP, ALL(EIO)},
	/* stopping: lookup and read used to disagree (EIO vs ECANCELED) */
	{-ECANCELED, ALL(EIO)},
	{-ESHUTDOWN, ALL(EIO)},
	/* internal signals that must not leak */
	{-EAGAIN, ALL(EIO)},
	{-ENXIO, ALL(EIO)},
	{-EINVAL, {EIO, EIO, EIO, EINVAL}},
	/* meaningful to a reader */
	{-ETIMEDOUT, ALL(ETIMEDOUT)},
	{-ESTALE, ALL(ESTALE)},
	{-ENOMEM, ALL(ENOMEM)},
	{-EINTR, ALL(EINTR)},
	{-ENOENT, ALL(ENOENT)},
	{-ENOTDIR, ALL(ENOTDIR)},
	{-EISDIR, ALL(EISDIR)},
	{-EROFS, ALL(EROFS)},
	{-EACCES, ALL(EACCES)},
	{-EPERM, ALL(EPERM)},
	{-ENODATA, ALL(ENODATA)},
	{-ERANGE, ALL(ERANGE)},
	{-ENOSYS, ALL(ENOSYS)},
	/* unknown or wrong-signed: EIO, never a stray value */
	{-EXDEV, ALL(EIO)},
	{-4095, ALL(EIO)},
	{EIO, ALL(EIO)},
	{ETIMEDOUT, ALL(EIO)},
};

static const char *const op_names[] = {"lookup", "open", "read", "write"};

Test(errmap, every_row_of_the_table)
{
	for (size_t i = 0; i < ARRAY_SIZE(table); i++)
		for (int op = 0; op < ERRMAP_NOPS; op++) {
			int got = errmap_reply((enum errmap_op)op,
					       table[i].internal);
			cr_expect_eq(got, table[i].want[op],
				     "%s of internal %d (%s): got %d (%s), "
				     "want %d",
				     op_names[op], table[i].internal,
				     strerror(table[i].internal < 0
						      ? -table[i].internal
						      : table[i].internal),
				     got, strerror(got), table[i].want[op]);
		}
}

Test(errmap, a_reply_is_never_negative_nor_zero_for_an_error)
{
	for (int e = 1; e < 4096; e++)
		for (int op = 0; op < ERRMAP_NOPS; op++) {
			int got = errmap_reply((enum errmap_op)op, -e);
			cr_expect(got > 0, "op %d errno %d: %d", op, e, got);
		}
}

Test(errmap, an_unknown_operation_gets_eio)
{
	cr_expect_eq(errmap_reply(ERRMAP_NOPS, -ENOENT), EIO);
	cr_expect_eq(errmap_reply((enum errmap_op) - 1, -ENOENT), EIO);
	cr_expect_eq(errmap_reply(ERRMAP_NOPS, 0), 0);
}
