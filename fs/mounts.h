/* mounts.h - what /proc/self/mountinfo says about a directory: whether a
 * FUSE mount (live or dead) already sits on it, and whether our own mount is
 * still attached. */
#ifndef ECHOFS_MOUNTS_H
#define ECHOFS_MOUNTS_H

#include "common/attrs.h"
#include <stddef.h>

/* The topmost mount whose mount point is exactly dir (an absolute path
 * without symlinks): its mount ID and file system type ("fuse.echofs").
 * Returns 0, -ENOENT when dir is no mount point, or another -errno. */
MUST_CHECK
int mounts_find(const char *dir, int *id, char *fstype, size_t typelen);

/* 1 while the mount with this ID is attached, 0 once it is gone (unmounted,
 * also lazily), -errno when mountinfo cannot be read. */
MUST_CHECK
int mounts_attached(int id);

/* Mount hygiene before mounting on dir: 0 when dir is free of FUSE mounts;
 * else -EBUSY (a live FUSE mount) or -ENOTCONN (a dead one: its daemon is
 * gone) with a one-line message in err that says how to clear it. dir is
 * checked as given, before any realpath (which fails on a dead mount). */
MUST_CHECK
int mounts_check_free(const char *dir, char *err, size_t errlen);

/* MOUNTPOINT /dev/fd/N: 0 when fd is an open /dev/fuse descriptor (the
 * character device 10:229) that a mount uses; else -EBADF (not open),
 * -ENODEV (something else) or -ENOTCONN (not mounted) with a one-line
 * message in err naming path. */
MUST_CHECK
int mounts_check_fuse_fd(int fd, const char *path, char *err, size_t errlen);

/* Raise the read-ahead of the mount with this ID (its backing device's
 * /sys/class/bdi/MAJ:MIN/read_ahead_kb, root only) to at least kb: the
 * kernel sends one READ per read-ahead window, 128 KB by default, so a
 * 150 KB file costs two round trips where one would do. Never lowers it.
 * Returns 0, -ENOENT (no such mount) or the -errno of the sysfs write. */
MUST_CHECK
int mounts_raise_readahead(int id, unsigned kb);

#endif
