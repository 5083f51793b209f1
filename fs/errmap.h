/* errmap.h - the one place where an internal error becomes the errno a
 * reader sees: every fuse_reply_err in fs/ that passes on an error from
 * below (the dataset, the echo pool and bindings, the converted outputs,
 * the control files) goes through errmap_reply; the others pass a constant
 * (tests/check_replies.sh checks this).
 *
 * Why: the layers below return errnos that mean something to echofs (a
 * transfer cancelled at shutdown, a pool that is stopping, a corrupt image,
 * a bad argument), but a reader's program only knows what a file system
 * usually answers. Errors with a meaning for the reader pass through; the
 * rest become EIO (the reason was logged and counted where it arose).
 *
 *   internal errno                         lookup   open     read     write
 *                                          getattr                    (config)
 *   EIO EBADMSG EPROTO EFBIG ENOTSUP       EIO      EIO      EIO      EIO
 *   ECONNREFUSED EHOSTUNREACH ELOOP ...
 *   ECANCELED ESHUTDOWN (stopping)         EIO      EIO      EIO      EIO
 *   EAGAIN ENXIO (internal)                EIO      EIO      EIO      EIO
 *   EINVAL                                 EIO      EIO      EIO      EINVAL
 *   EBUSY (exact when local: echo is off)  EIO      EIO      EIO      EBUSY
 *   ETIMEDOUT (read_timeout, echo wait)    ETIMEDOUT everywhere
 *   ESTALE (echo binding expired: the      ESTALE everywhere
 *     kernel looks the path up again)
 *   ENOMEM EINTR                           passed on everywhere
 *   ENOENT ENOTDIR EISDIR EROFS EACCES     passed on everywhere
 *   EPERM ENODATA ERANGE ENOSYS
 *   anything else, or a positive value     EIO
 *
 * EFBIG stays EIO although "File too large" reads clearly: below, it means
 * a sample over one of echofs's caps (max_pixels, decode_mem, the converted
 * outputs' cap, a partial read of a member over 256 MiB), and since this
 * map goes by errno, not by origin, passing it on would also turn every
 * over-cap image from the documented EIO into EFBIG; read(2) has no EFBIG
 * either. The log line and errors.read or errors.image say which cap.
 *
 * The same table, in users' words, is in docs/guide/operating.md
 * ("Errors a reader sees"). */
#ifndef ECHOFS_ERRMAP_H
#define ECHOFS_ERRMAP_H

#include "common/attrs.h"

enum errmap_op {
	ERRMAP_LOOKUP, /* lookup, getattr, setattr */
	ERRMAP_OPEN,
	ERRMAP_READ,
	ERRMAP_WRITE, /* writes to .echofs/config */
	ERRMAP_NOPS
};

/* The errno (positive, for fuse_reply_err) a reader gets for the internal
 * error err (0 or a negative errno) in operation op. 0 for 0. */
MUST_CHECK
int errmap_reply(enum errmap_op op, int err);

#endif
