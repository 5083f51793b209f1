/* daemon.h - going to the background so that the command returns only once
 * the mount is ready, or fails with the reason; and shutting down on signals
 * or a lazy unmount. */
#ifndef ECHOFS_DAEMON_H
#define ECHOFS_DAEMON_H

/* Fork. The parent waits and exits: 0 after daemon_ready, 1 after printing
 * the message of daemon_fail or when the child dies first. Only the child
 * returns (0), keeping stderr until daemon_ready so progress shows. Call it
 * before creating any thread. With foreground set it does nothing. */
int daemon_start(int foreground);

/* The mount is up: release the parent and detach from the terminal
 * (stdin/stdout/stderr to /dev/null, new session). */
void daemon_ready(void);

/* Start-up failed: the parent prints "echofs: error: <msg>" and exits 1.
 * In the foreground the message is printed here. */
void daemon_fail(const char *msg);

/* Shutdown (DESIGN)
 * - SIGTERM, SIGINT and SIGHUP run a handler that only does what is
 *   async-signal-safe: it marks the FUSE session exited and writes a byte
 *   into a pipe.
 * - One watcher thread waits on that pipe and, every WATCH_PERIOD, checks
 *   that the mount is still attached: a lazy unmount (fusermount3 -uz) would
 *   otherwise leave the daemon serving the files still open, as long as any
 *   read blocks.
 * - On either it calls the cancel hook once (blocked reads and transfers
 *   end at once), marks the session exited and wakes the main thread (it may
 *   sit in libfuse's loop waiting for a worker that the signal missed) with
 *   SIGTERM, which the handler takes again, harmlessly.
 * - The main thread then leaves the loop (libfuse waits for the workers,
 *   which finish their cancelled requests), calls daemon_unwatch, unmounts
 *   and frees. No lock: the watcher shares only atomics with the others. */
struct fuse_session;

/* Install the handlers and start the watcher. mount_id: our mount in
 * /proc/self/mountinfo, or -1 to skip the lazy-unmount check. cancel(ud) is
 * called at most once, from the watcher thread. Returns 0 or -errno. */
int daemon_watch(struct fuse_session *se, int mount_id,
		 void (*cancel)(void *ud), void *ud);

/* Stop the watcher and restore the default signal actions. Returns the
 * signal that stopped the daemon, or 0 (unmounted, or no signal). */
int daemon_unwatch(void);

/* 1 when the watcher saw the mount gone (then there is nothing to unmount). */
int daemon_mount_gone(void);

#endif
