/* echofs_fdpass.c - echofs-fdpass: hand a mounted /dev/fuse descriptor to
 * an echofs that has no privilege, over a unix socket (SCM_RIGHTS). The
 * pattern of a container storage (CSI) driver: its privileged node plugin
 * mounts, the unprivileged pod serves (docs/guide/containers.md).
 *
 *   echofs-fdpass send [--uid U] [--gid G] [--rw] SOCKET MOUNTPOINT
 *   echofs-fdpass recv [--wait S] SOCKET -- COMMAND [ARG...]
 *
 * send (root) opens /dev/fuse, mounts it on MOUNTPOINT, listens on SOCKET
 * (U:G's, mode 0600), sends the descriptor to the first peer and closes its
 * own copy. It then waits: when the peer's connection closes (recv keeps it
 * open across exec, so it closes when the daemon exits) or on SIGTERM,
 * SIGINT or SIGHUP, it unmounts MOUNTPOINT (which ends a daemon still
 * serving), removes SOCKET and exits 0.
 *
 * recv connects (retrying for S seconds while SOCKET is missing or
 * refuses), takes the descriptor, writes its number into every argument
 * that is exactly "/dev/fd/%d" and executes COMMAND. */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "common/util.h"

#define PROG "echofs-fdpass"
#define FD_ARG "/dev/fd/%d"
#define NOBODY 65534u
#define DEFAULT_WAIT_S 30u

struct send_opts {
	unsigned uid, gid;
	int rw;
	const char *sock, *mnt;
};

static int fail(const char *what, int err)
{
	fprintf(stderr, PROG ": error: %s: %s\n", what, strerror(err));
	return 1;
}

static void usage(FILE *f)
{
	fputs("usage: " PROG " send [--uid U] [--gid G] [--rw] SOCKET "
	      "MOUNTPOINT\n"
	      "       " PROG " recv [--wait S] SOCKET -- COMMAND [ARG...]\n"
	      "\n"
	      "send (as root): open /dev/fuse, mount it on MOUNTPOINT "
	      "(fuse.echofs,\n"
	      "  nosuid,nodev,ro,allow_other,default_permissions), listen on "
	      "SOCKET and\n"
	      "  send the descriptor to the first peer; unmount when that peer "
	      "exits or\n"
	      "  on SIGTERM, SIGINT or SIGHUP\n"
	      "  --uid U, --gid G  who may take it: owner of SOCKET and of the "
	      "mount's\n"
	      "                    connection (user_id=, group_id=; default "
	      "65534)\n"
	      "  --rw              mount read-write (echo mounts: "
	      ".echofs/config)\n"
	      "recv (as anyone): connect to SOCKET, take the descriptor and "
	      "run "
	      "COMMAND\n"
	      "  with each argument /dev/fd/%d made /dev/fd/N\n"
	      "  --wait S          retry a missing or refusing SOCKET for S "
	      "seconds\n"
	      "                    (default 30)\n"
	      "  -h, --help        this help\n"
	      "example: " PROG " recv /run/echofs/fd.sock -- echofs -f "
	      "-o mounted_at=/mnt/train\n"
	      "           'http://host/ds/train-{000000..000059}.tar' "
	      "/dev/fd/%d\n",
	      f);
}

static int number(const char *s, unsigned *out)
{
	uint64_t v;

	if (!s || parse_u64(s, &v) || v > 0xfffffffeu)
		return -EINVAL;
	*out = (unsigned)v;
	return 0;
}

static int sock_addr(const char *path, struct sockaddr_un *a)
{
	memset(a, 0, sizeof(*a));
	a->sun_family = AF_UNIX;
	if (strlen(path) >= sizeof(a->sun_path))
		return -ENAMETOOLONG;
	memcpy(a->sun_path, path, strlen(path) + 1);
	return 0;
}

/* Listen on path, U:G's and 0600: only that user may take the descriptor.
 * A socket left by an earlier run is replaced; any other file is not. */
static int listen_on(const struct send_opts *o)
{
	struct sockaddr_un a;
	struct stat st;
	int s, r = sock_addr(o->sock, &a);

	if (r)
		return r;
	if (lstat(o->sock, &st) == 0 && S_ISSOCK(st.st_mode))
		unlink(o->sock);
	s = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (s < 0)
		return -errno;
	if (bind(s, (struct sockaddr *)&a, sizeof(a)) != 0 ||
	    chown(o->sock, o->uid, o->gid) != 0 || chmod(o->sock, 0600) != 0 ||
	    listen(s, 1) != 0) {
		r = -errno;
		close(s);
		return r;
	}
	return s;
}

/* Open /dev/fuse and mount it on o->mnt; the descriptor or -errno. */
static int mount_fuse(const struct send_opts *o)
{
	char data[160];
	int fd = open("/dev/fuse", O_RDWR | O_CLOEXEC), r;

	if (fd < 0)
		return -errno;
	snprintf(data, sizeof(data),
		 "fd=%d,rootmode=40000,user_id=%u,group_id=%u,allow_other,"
		 "default_permissions",
		 fd, o->uid, o->gid);
	if (mount("echofs", o->mnt, "fuse.echofs",
		  MS_NOSUID | MS_NODEV | (o->rw ? 0 : MS_RDONLY), data) != 0) {
		r = -errno;
		close(fd);
		return r;
	}
	return fd;
}

static int send_fd(int conn, int fd)
{
	char byte = 'F';
	struct iovec iov = {.iov_base = &byte, .iov_len = 1};
	union {
		struct cmsghdr h;
		char buf[CMSG_SPACE(sizeof(int))];
	} ctl;
	struct msghdr m = {.msg_iov = &iov,
			   .msg_iovlen = 1,
			   .msg_control = ctl.buf,
			   .msg_controllen = sizeof(ctl.buf)};
	struct cmsghdr *c = CMSG_FIRSTHDR(&m);

	memset(&ctl, 0, sizeof(ctl));
	c->cmsg_level = SOL_SOCKET;
	c->cmsg_type = SCM_RIGHTS;
	c->cmsg_len = CMSG_LEN(sizeof(int));
	memcpy(CMSG_DATA(c), &fd, sizeof(int));
	return sendmsg(conn, &m, MSG_NOSIGNAL) == 1 ? 0 : -errno;
}

/* Until fd is readable (1) or a stopping signal came (0). */
static int wait_for(int fd, int sigfd)
{
	struct pollfd p[2] = {{.fd = fd, .events = POLLIN},
			      {.fd = sigfd, .events = POLLIN}};

	while (poll(p, 2, -1) < 0)
		if (errno != EINTR)
			return -errno;
	return p[1].revents ? 0 : 1;
}

/* Serve one peer: send the descriptor, then wait for it to go. */
static int hand_over(int lsn, int sigfd, int *fuse_fd)
{
	struct ucred cr;
	socklen_t len = sizeof(cr);
	char buf[64];
	int conn, r = wait_for(lsn, sigfd);

	if (r <= 0)
		return r;
	conn = accept4(lsn, NULL, NULL, SOCK_CLOEXEC);
	if (conn < 0)
		return -errno;
	r = send_fd(conn, *fuse_fd);
	if (r == 0) {
		close(*fuse_fd); /* the daemon's copy is the only one now */
		*fuse_fd = -1;
		if (getsockopt(conn, SOL_SOCKET, SO_PEERCRED, &cr, &len) == 0)
			fprintf(stderr,
				PROG ": descriptor sent to pid %d "
				     "(uid %u)\n",
				(int)cr.pid, (unsigned)cr.uid);
		while ((r = wait_for(conn, sigfd)) == 1 &&
		       read(conn, buf, sizeof(buf)) > 0)
			; /* a peer writes nothing; EOF is the daemon gone */
	}
	close(conn);
	return r < 0 ? r : 0;
}

static int unmount(const char *mnt)
{
	if (umount2(mnt, 0) == 0)
		return 0;
	if (errno != EBUSY)
		return -errno;
	/* files still open: detach now, the kernel ends it when they close */
	fprintf(stderr, PROG ": %s busy: unmounted lazily\n", mnt);
	return umount2(mnt, MNT_DETACH) == 0 ? 0 : -errno;
}

static int do_send(const struct send_opts *o)
{
	sigset_t set;
	int sigfd, lsn, fd, r, u;

	sigemptyset(&set);
	sigaddset(&set, SIGTERM);
	sigaddset(&set, SIGINT);
	sigaddset(&set, SIGHUP);
	if (sigprocmask(SIG_BLOCK, &set, NULL) != 0 ||
	    (sigfd = signalfd(-1, &set, SFD_CLOEXEC)) < 0)
		return fail("signalfd", errno);
	fd = mount_fuse(o);
	if (fd < 0)
		return fail(o->mnt, -fd);
	lsn = listen_on(o);
	if (lsn < 0) {
		close(fd);
		(void)unmount(o->mnt);
		return fail(o->sock, -lsn);
	}
	r = hand_over(lsn, sigfd, &fd);
	close(lsn);
	unlink(o->sock);
	if (fd >= 0)
		close(fd);
	if (r)
		fail(o->sock, -r);
	u = unmount(o->mnt);
	if (u)
		return fail(o->mnt, -u);
	return r ? 1 : 0;
}

static int connect_to(const char *path, unsigned wait_s)
{
	struct timespec nap = {0, 100 * 1000 * 1000};
	time_t end = time(NULL) + (time_t)wait_s;
	struct sockaddr_un a;
	int s, r = sock_addr(path, &a);

	if (r)
		return r;
	for (;;) {
		s = socket(AF_UNIX, SOCK_STREAM, 0); /* kept across exec */
		if (s < 0)
			return -errno;
		if (connect(s, (struct sockaddr *)&a, sizeof(a)) == 0)
			return s;
		r = -errno;
		close(s);
		if ((r != -ENOENT && r != -ECONNREFUSED) || time(NULL) >= end)
			return r;
		nanosleep(&nap, NULL);
	}
}

static int recv_fd(int s)
{
	char byte;
	struct iovec iov = {.iov_base = &byte, .iov_len = 1};
	union {
		struct cmsghdr h;
		char buf[CMSG_SPACE(sizeof(int))];
	} ctl;
	struct msghdr m = {.msg_iov = &iov,
			   .msg_iovlen = 1,
			   .msg_control = ctl.buf,
			   .msg_controllen = sizeof(ctl.buf)};
	struct cmsghdr *c;
	ssize_t n;
	int fd;

	while ((n = recvmsg(s, &m, 0)) < 0 && errno == EINTR)
		;
	if (n < 0)
		return -errno;
	c = CMSG_FIRSTHDR(&m);
	if (n != 1 || (m.msg_flags & MSG_CTRUNC) || !c ||
	    c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS ||
	    c->cmsg_len != CMSG_LEN(sizeof(int)))
		return -EPROTO;
	memcpy(&fd, CMSG_DATA(c), sizeof(int));
	if (fd < 3) { /* 0-2 are the daemon's stdio */
		int hi = fcntl(fd, F_DUPFD, 3);
		close(fd);
		fd = hi < 0 ? -errno : hi;
	}
	return fd;
}

static int do_recv(const char *path, unsigned wait_s, char **cmd)
{
	char arg[32];
	int s, fd, used = 0;

	for (int i = 0; cmd[i]; i++)
		used += strcmp(cmd[i], FD_ARG) == 0;
	if (!cmd[0] || !used) {
		fprintf(stderr,
			PROG ": error: recv needs COMMAND with an "
			     "argument %s for the descriptor\n",
			FD_ARG);
		return 2;
	}
	s = connect_to(path, wait_s);
	if (s < 0)
		return fail(path, -s);
	fd = recv_fd(s);
	if (fd < 0)
		return fail(fd == -EPROTO ? "no descriptor came" : path, -fd);
	snprintf(arg, sizeof(arg), "/dev/fd/%d", fd);
	for (int i = 0; cmd[i]; i++)
		if (strcmp(cmd[i], FD_ARG) == 0)
			cmd[i] = arg;
	execvp(cmd[0], cmd);
	fail(cmd[0], errno);
	return 127;
}

int main(int argc, char **argv)
{
	struct send_opts o = {.uid = NOBODY, .gid = NOBODY};
	unsigned wait_s = DEFAULT_WAIT_S;
	int i = 2, bad = 0;

	if (argc < 2 || !strcmp(argv[1], "-h") || !strcmp(argv[1], "--help")) {
		usage(argc < 2 ? stderr : stdout);
		return argc < 2 ? 2 : 0;
	}
	for (; i < argc && argv[i][0] == '-' && strcmp(argv[i], "--"); i++) {
		if (!strcmp(argv[i], "--rw"))
			o.rw = 1;
		else if (!strcmp(argv[i], "--uid"))
			bad |= number(argv[++i], &o.uid);
		else if (!strcmp(argv[i], "--gid"))
			bad |= number(argv[++i], &o.gid);
		else if (!strcmp(argv[i], "--wait"))
			bad |= number(argv[++i], &wait_s);
		else
			bad = 1;
		if (bad || i >= argc)
			break;
	}
	if (!bad && !strcmp(argv[1], "send") && argc - i == 2) {
		o.sock = argv[i];
		o.mnt = argv[i + 1];
		return do_send(&o);
	}
	if (!bad && !strcmp(argv[1], "recv") && argc - i >= 3 &&
	    !strcmp(argv[i + 1], "--"))
		return do_recv(argv[i], wait_s, argv + i + 2);
	fprintf(stderr, PROG ": error: bad arguments (see --help)\n");
	return 2;
}
