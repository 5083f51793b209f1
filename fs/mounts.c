/* mounts.c - /proc/self/mountinfo queries: FUSE mounts already on a
 * directory (refused), and whether our own mount is still attached. */
#include "fs/mounts.h"

#include <errno.h>
#include <limits.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>

#define MOUNTINFO "/proc/self/mountinfo"
/* /dev/fuse's device number (Documentation/admin-guide/devices.txt). */
#define FUSE_MAJOR 10
#define FUSE_MINOR 229

/* mountinfo escapes space, tab, newline and backslash as \ooo. */
static void unescape(char *s)
{
	char *o = s;

	for (; *s; s++) {
		if (s[0] == '\\' && s[1] >= '0' && s[1] <= '3' && s[2] >= '0' &&
		    s[2] <= '7' && s[3] >= '0' && s[3] <= '7') {
			*o++ = (char)((s[1] - '0') * 64 + (s[2] - '0') * 8 +
				      (s[3] - '0'));
			s += 3;
		} else {
			*o++ = *s;
		}
	}
	*o = '\0';
}

/* A line's leading mount ID, or -1. */
static int line_id(const char *line)
{
	char *end;
	long v;

	errno = 0;
	v = strtol(line, &end, 10);
	return errno || end == line || *end != ' ' || v < 0 || v > INT_MAX
		       ? -1
		       : (int)v;
}

/* Fields of one line: "ID PARENT MAJ:MIN ROOT MOUNTPOINT OPTS [TAGS] - TYPE
 * SOURCE SUPEROPTS". Returns 0 when the line parses. */
static int parse_line(char *line, int *id, char **mnt, char **type)
{
	char *save = NULL, *tok;
	int field = 0;

	*mnt = *type = NULL;
	*id = line_id(line);
	for (tok = strtok_r(line, " \n", &save); tok;
	     tok = strtok_r(NULL, " \n", &save), field++) {
		if (field == 4)
			*mnt = tok;
		else if (field > 5 && strcmp(tok, "-") == 0) {
			*type = strtok_r(NULL, " \n", &save);
			break;
		}
	}
	if (!*mnt || !*type)
		return -EINVAL;
	unescape(*mnt);
	return 0;
}

int mounts_find(const char *dir, int *id, char *fstype, size_t typelen)
{
	FILE *f = fopen(MOUNTINFO, "re");
	char line[4 * PATH_MAX], *mnt, *type;
	int r = -ENOENT, lid;

	if (!f)
		return -errno;
	/* Later lines are mounted later: the last match is on top. */
	while (fgets(line, sizeof(line), f)) {
		if (parse_line(line, &lid, &mnt, &type) || strcmp(mnt, dir))
			continue;
		*id = lid;
		snprintf(fstype, typelen, "%s", type);
		r = 0;
	}
	fclose(f);
	return r;
}

int mounts_attached(int id)
{
	FILE *f = fopen(MOUNTINFO, "re");
	char line[4 * PATH_MAX];
	int found = 0;

	if (!f)
		return -errno;
	while (!found && fgets(line, sizeof(line), f))
		found = line_id(line) == id;
	fclose(f);
	return found;
}

/* The "MAJ:MIN" field of the mountinfo line of mount id into dev. */
static int mount_dev(int id, char *dev, size_t devlen)
{
	FILE *f = fopen(MOUNTINFO, "re");
	char line[4 * PATH_MAX], *save = NULL, *tok;
	int r = -ENOENT;

	if (!f)
		return -errno;
	while (r == -ENOENT && fgets(line, sizeof(line), f)) {
		if (line_id(line) != id)
			continue;
		strtok_r(line, " ", &save);	     /* ID */
		strtok_r(NULL, " ", &save);	     /* parent */
		tok = strtok_r(NULL, " ", &save); /* MAJ:MIN */
		r = tok && strlen(tok) < devlen && !strchr(tok, '/') ? 0 : -EINVAL;
		if (r == 0)
			snprintf(dev, devlen, "%s", tok);
	}
	fclose(f);
	return r;
}

int mounts_raise_readahead(int id, unsigned kb)
{
	char dev[64], path[128];
	unsigned cur = 0;
	int r = mount_dev(id, dev, sizeof(dev));
	FILE *f;

	if (r)
		return r;
	snprintf(path, sizeof(path), "/sys/class/bdi/%s/read_ahead_kb", dev);
	f = fopen(path, "re");
	if (!f)
		return -errno;
	r = fscanf(f, "%u", &cur) == 1 ? 0 : -EINVAL;
	fclose(f);
	if (r || cur >= kb)
		return r;
	f = fopen(path, "we");
	if (!f)
		return -errno;
	r = fprintf(f, "%u\n", kb) < 0 ? -EIO : 0;
	if (fclose(f) != 0 && r == 0)
		r = -errno;
	return r;
}

int mounts_check_free(const char *dir, char *err, size_t errlen)
{
	char real[PATH_MAX], type[64];
	struct stat st;
	int id;

	if (stat(dir, &st) != 0 && errno == ENOTCONN) {
		snprintf(err, errlen,
			 "%s is a dead FUSE mount (its daemon is "
			 "gone); clear it with: fusermount3 -u %s",
			 dir, dir);
		return -ENOTCONN;
	}
	if (!realpath(dir, real))
		return 0; /* the caller reports a missing mountpoint */
	if (mounts_find(real, &id, type, sizeof(type)) == 0 &&
	    (strcmp(type, "fuse") == 0 || strncmp(type, "fuse.", 5) == 0 ||
	     strcmp(type, "fuseblk") == 0)) {
		snprintf(err, errlen,
			 "%s is already a FUSE mount (%s); unmount "
			 "it first: fusermount3 -u %s",
			 dir, type, dir);
		return -EBUSY;
	}
	return 0;
}

int mounts_check_fuse_fd(int fd, const char *path, char *err, size_t errlen)
{
	struct pollfd pfd = {.fd = fd, .events = POLLIN};
	struct stat st;

	if (fstat(fd, &st) != 0) {
		snprintf(err, errlen,
			 "MOUNTPOINT %s: descriptor %d is not open "
			 "(the mounting side passes its /dev/fuse descriptor "
			 "as it)",
			 path, fd);
		return -EBADF;
	}
	if (!S_ISCHR(st.st_mode) || major(st.st_rdev) != FUSE_MAJOR ||
	    minor(st.st_rdev) != FUSE_MINOR) {
		snprintf(err, errlen,
			 "MOUNTPOINT %s: not a /dev/fuse "
			 "descriptor (%s)",
			 path,
			 S_ISREG(st.st_mode)	? "a regular file"
			 : S_ISDIR(st.st_mode)	? "a directory"
			 : S_ISSOCK(st.st_mode) ? "a socket"
			 : S_ISFIFO(st.st_mode) ? "a pipe"
						: "another device");
		return -ENODEV;
	}
	/* The kernel answers POLLERR on a /dev/fuse no mount uses (never
	 * mounted, or unmounted since): libfuse's loop would fail only after
	 * the start was reported ready. A mounted one has INIT waiting. */
	if (poll(&pfd, 1, 0) == 1 && (pfd.revents & POLLERR)) {
		snprintf(err, errlen,
			 "MOUNTPOINT %s: this /dev/fuse descriptor is not "
			 "mounted (the mounting side mounts it, fd=%d in its "
			 "mount options, before passing it)",
			 path, fd);
		return -ENOTCONN;
	}
	return 0;
}
