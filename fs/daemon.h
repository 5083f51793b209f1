/* daemon.h - going to the background so that the command returns only once
 * the mount is ready, or fails with the reason; and shutting down on signals
 * or a lazy unmount. */
#ifndef ECHOFS_DAEMON_H
#define ECHOFS_DAEMON_H

#include "common/attrs.h"

/* Fork. The parent waits and exits: 0 after daemon_ready, 1 after printing
 * the message of daemon_fail or when the child dies first. Only the child
 * returns (0), keeping stderr until daemon_ready so progress shows. With
 * foreground set it does not fork. Either way it blocks the signals of the
 * DESIGN note below and starts the watcher, so call it before creating any
 * other thread. log_file (borrowed, may be NULL) is reopened on SIGUSR1
 * and, in the background, SIGHUP. Returns 0 or -errno. */
MUST_CHECK
int daemon_start(int foreground, const char *log_file);

/* The mount is up: release the parent and detach from the terminal
 * (stdin/stdout/stderr to /dev/null, new session). */
void daemon_ready(void);

/* Start-up failed: the parent prints "echofs: error: <msg>" and exits 1.
 * In the foreground the message is printed here. */
void daemon_fail(const char *msg);

/* Shutdown (DESIGN)
 * - daemon_start blocks, before any thread exists, every signal a user may
 *   send whose default would kill the daemon without unmounting; all later
 *   threads inherit that mask, so no worker is interrupted (EINTR) or
 *   killed by one. A watcher thread reads them from a signalfd:
 *   SIGTERM and SIGINT (and SIGHUP in the foreground, a terminal hang-up)
 *   stop; SIGUSR1 (and SIGHUP in the background, where there is no
 *   terminal) reopen log_file, as logrotate expects; SIGUSR2, SIGALRM,
 *   SIGVTALRM, SIGIO, SIGPWR, SIGSTKFLT, SIGXFSZ and the real-time signals
 *   are counted in the log and ignored. Faults, SIGQUIT, SIGTRAP and
 *   SIGXCPU keep their default (a core dump); SIGPIPE is ignored.
 *   Before daemon_watch a stopping signal ends the process as by default.
 * - daemon_watch unblocks SIGTERM in the main thread alone (libfuse blocks
 *   it in its workers), with a handler that only does what is
 *   async-signal-safe: it marks the FUSE session exited and writes a byte
 *   into a pipe that the watcher also polls.
 * - Every WATCH_PERIOD the watcher checks that the mount is still attached:
 *   a lazy unmount (fusermount3 -uz) would otherwise leave the daemon
 *   serving the files still open, as long as any read blocks.
 * - On either it calls the cancel hook once (blocked reads and transfers
 *   end at once), marks the session exited and wakes the main thread (it may
 *   sit in libfuse's loop waiting for a worker that the signal missed) with
 *   SIGTERM, which the handler takes again, harmlessly.
 * - The main thread then leaves the loop (libfuse waits for the workers,
 *   which finish their cancelled requests), calls daemon_unwatch, unmounts
 *   and frees. No lock: the watcher shares only atomics with the others. */
struct fuse_session;

/* Install the SIGTERM handler and let the watcher stop the session. mount_id: our mount in
 * /proc/self/mountinfo, or -1 to skip the lazy-unmount check. cancel(ud) is
 * called at most once, from the watcher thread. Returns 0 or -errno. */
MUST_CHECK
int daemon_watch(struct fuse_session *se, int mount_id,
		 void (*cancel)(void *ud), void *ud);

/* Stop the watcher (later signals stay blocked: the teardown is bounded
 * and ends with status 0). Returns the
 * signal that stopped the daemon, or 0 (unmounted, or no signal). */
int daemon_unwatch(void);

/* 1 when the watcher saw the mount gone (then there is nothing to unmount). */
int daemon_mount_gone(void);

#endif
