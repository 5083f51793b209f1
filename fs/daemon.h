/* daemon.h - going to the background so that the command returns only once
 * the mount is ready, or fails with the reason. */
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

#endif
