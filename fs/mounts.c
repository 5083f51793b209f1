/* mounts.c - /proc/self/mountinfo queries: FUSE mounts already on a
 * directory (refused), and whether our own mount is still attached. */
#include "fs/mounts.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define MOUNTINFO "/proc/self/mountinfo"

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
