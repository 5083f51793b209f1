"""test_fd_mount.py - echofs without mount privileges (issue 49): a
privileged side opens /dev/fuse and mounts it, as a CSI driver would, and
echofs, run as nobody with no capabilities in a mount namespace of its own
without that mount, serves the descriptor it is handed as
/dev/fd/N: inherited, or received over a unix socket with echofs-fdpass. The
tree is read from the test's own mount namespace and compared with what
`tar -x` makes of the shards."""

import ctypes
import hashlib
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import urllib.error
import urllib.request

import pytest

import helpers
from helpers import BUILD, ECHOFS, source_of

NOBODY = 65534
FDPASS = os.path.join(BUILD, "tools", "echofs-fdpass")
MS_RDONLY, MS_NOSUID, MS_NODEV = 1, 2, 4
MNT_DETACH = 2

libc = ctypes.CDLL(None, use_errno=True)


def no_caps():
    """The prefix that runs a command as nobody with no capabilities."""
    return ["setpriv", "--reuid=%d" % NOBODY, "--regid=%d" % NOBODY,
            "--clear-groups", "--inh-caps=-all", "--bounding-set=-all"]


def hidden(mnt):
    """The prefix that runs a command in a new mount namespace without the
    mount on mnt (detached there alone): the daemon cannot see the mount it
    serves, as in a container that was handed only the descriptor."""
    return ["unshare", "--mount", "--propagation", "private", "sh", "-c",
            'umount -l "$0" && exec "$@"', mnt]


def fuse_mount(mnt):
    """Open /dev/fuse and mount it on mnt (what the privileged side does);
    returns the descriptor."""
    fd = os.open("/dev/fuse", os.O_RDWR | os.O_CLOEXEC)
    data = ("fd=%d,rootmode=40000,user_id=%d,group_id=%d,allow_other,"
            "default_permissions" % (fd, NOBODY, NOBODY))
    if libc.mount(b"echofs", mnt.encode(), b"fuse.echofs",
                  MS_RDONLY | MS_NOSUID | MS_NODEV, data.encode()) != 0:
        e = ctypes.get_errno()
        os.close(fd)
        raise OSError(e, "mount: " + os.strerror(e))
    return fd


def fuse_umount(mnt):
    if helpers.mount_entry(mnt) is None:
        return
    if libc.umount2(mnt.encode(), 0) != 0:
        libc.umount2(mnt.encode(), MNT_DETACH)


@pytest.fixture
def place(tmp_path):
    """A world-traversable directory with the mountpoint (top/mnt), and a
    cache directory and log directory that nobody owns."""
    if os.geteuid() != 0:
        pytest.skip("mount(2) of /dev/fuse needs root")
    for tool in ("setpriv", "unshare"):
        if shutil.which(tool) is None:
            pytest.skip("%s (util-linux) is missing" % tool)
    top = tempfile.mkdtemp(prefix="echofs-fd-", dir="/tmp")
    own = tempfile.mkdtemp(prefix="echofs-fd-own-", dir="/tmp")
    os.chmod(top, 0o755)
    os.chmod(own, 0o755)
    p = {"top": top, "mnt": os.path.join(top, "mnt"),
         "cache": os.path.join(own, "cache"), "logs": os.path.join(own, "logs"),
         "sock": os.path.join(own, "logs", "fd.sock")}
    os.mkdir(p["mnt"])
    for d in ("cache", "logs"):
        os.mkdir(p[d])
        os.chown(p[d], NOBODY, NOBODY)
    p["log"] = os.path.join(p["logs"], "echofs.log")
    procs = []
    p["procs"] = procs
    yield p
    for proc in procs:
        helpers.stop_proc(proc)
    fuse_umount(p["mnt"])
    shutil.rmtree(top, ignore_errors=True)
    shutil.rmtree(own, ignore_errors=True)


def echofs_argv(p, source, index, dev):
    # a copy nobody can read (pytest's directories are 0700)
    shutil.copy(index, p["logs"])
    index = os.path.join(p["logs"], os.path.basename(index))
    return [ECHOFS, "-f", "-o", "cache_dir=%s,log_file=%s,index=%s,mounted_at=%s"
            % (p["cache"], p["log"], index, p["mnt"]), source, dev]


def log_of(p):
    try:
        with open(p["log"], errors="replace") as f:
            return f.read()
    except OSError:
        return "(no log)"


def wait_mounted(p, proc, guard=120):
    """Until the daemon logs its tree mounted; fails if it exits first.
    (The tree is not stat()ed meanwhile: that would wait in the kernel for
    the daemon's answer to INIT.)"""
    deadline = time.monotonic() + guard
    while "mounted " not in log_of(p):
        if proc.poll() is not None:
            pytest.fail("echofs exited %s: %s\nlog: %s" % (
                proc.returncode, proc.stderr.read().decode(errors="replace"),
                log_of(p)[-3000:]))
        assert time.monotonic() < deadline, "not mounted: %s" % log_of(p)[-3000:]
        time.sleep(0.1)


def start_sender(p):
    """echofs-fdpass send as root, once its mount is there."""
    sender = subprocess.Popen([FDPASS, "send", p["sock"], p["mnt"]],
                              stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True)
    p["procs"].append(sender)
    deadline = time.monotonic() + 30
    while helpers.mount_entry(p["mnt"]) is None:
        assert sender.poll() is None, sender.stderr.read()
        assert time.monotonic() < deadline, "echofs-fdpass send mounted nothing"
        time.sleep(0.05)
    return sender


def tar_x_tree(dataset, split, dest):
    """{<label>/<key>.jpg: sha256} of the split's shards as `tar -x` writes
    them: <key>.jpg and its label in <key>.cls."""
    os.makedirs(dest)
    for shard in dataset.shards(split):
        subprocess.run(["tar", "-x", "-f", shard, "-C", dest], check=True)
    want = {}
    for name in os.listdir(dest):
        if name.endswith(".cls"):
            key = name[:-4]
            with open(os.path.join(dest, name)) as f:
                label = f.read().strip()
            want["%s/%s.jpg" % (label, key)] = helpers.sha256_file(
                os.path.join(dest, key + ".jpg"))
    assert len(want) == 10000, len(want)
    return want


def check_tree_and_stop(p, proc, want):
    """The mount shows exactly want, byte for byte, to this (another) mount
    namespace; then SIGTERM stops the daemon cleanly (status 0)."""
    got = helpers.walk(p["mnt"])
    assert set(got) == set(want), "paths differ: %s" % sorted(
        set(got) ^ set(want))[:5]
    bad = [k for k in want if got[k] != want[k]]
    assert not bad, "%d files differ, e.g. %s" % (len(bad), bad[:3])
    st = os.stat(p["mnt"] + "/.echofs/stats")
    assert st.st_uid == NOBODY
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(30) == 0, log_of(p)[-3000:]
    log = log_of(p)
    # The daemon could not see the path it was told: it says so once and
    # names it in its messages.
    assert "%s not in this mount namespace" % p["mnt"] in log, log[-3000:]
    assert "mounted 10000 files in 10 classes on %s" % p["mnt"] in log


def test_inherited_descriptor_served_by_nobody(place, nginx, dataset, tmp_path):
    """The mounting side opens and mounts /dev/fuse; echofs, as nobody with
    no capabilities and unable to see the mount, serves it as /dev/fd/N."""
    p = place
    want = tar_x_tree(dataset, "test", str(tmp_path / "x"))
    fd = fuse_mount(p["mnt"])
    try:
        proc = subprocess.Popen(
            hidden(p["mnt"]) + no_caps() + echofs_argv(
                p, source_of(nginx.url, "test"), nginx.test_index,
                "/dev/fd/%d" % fd),
            pass_fds=(fd,), stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
            stderr=subprocess.PIPE)
    finally:
        os.close(fd)  # the daemon's copy is the connection's only one now
    p["procs"].append(proc)
    wait_mounted(p, proc)
    check_tree_and_stop(p, proc, want)
    # The daemon is gone: the mount is dead until its mounter unmounts it.
    with pytest.raises(OSError) as e:
        os.listdir(p["mnt"])  # not from the kernel's caches
    assert e.value.errno == 107  # ENOTCONN
    fuse_umount(p["mnt"])
    assert helpers.mount_entry(p["mnt"]) is None


def test_descriptor_over_a_unix_socket(place, nginx, dataset, tmp_path):
    """echofs-fdpass send (root) mounts and hands the descriptor over a unix
    socket; echofs-fdpass recv (nobody, no capabilities) runs echofs on it;
    on SIGTERM echofs exits 0 and the sender unmounts."""
    p = place
    want = tar_x_tree(dataset, "test", str(tmp_path / "x"))
    sender = start_sender(p)
    proc = subprocess.Popen(
        hidden(p["mnt"]) + no_caps() + [FDPASS, "recv", p["sock"], "--"] +
        echofs_argv(p, source_of(nginx.url, "test"), nginx.test_index,
                    "/dev/fd/%d"),
        stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    p["procs"].append(proc)
    wait_mounted(p, proc)
    assert helpers.mount_entry(p["mnt"])[2] == "fuse.echofs"
    check_tree_and_stop(p, proc, want)
    # The sender saw the daemon go, unmounted and removed its socket.
    out, err = sender.communicate(timeout=30)
    assert sender.returncode == 0, err
    assert helpers.mount_entry(p["mnt"]) is None, err
    assert not os.path.exists(p["sock"])


def test_sender_stopped_first_unmounts_and_the_daemon_exits(place, nginx, tmp_path):
    """SIGTERM to the mounting side: it unmounts, the daemon's connection
    ends and it exits 0."""
    p = place
    sender = start_sender(p)
    proc = subprocess.Popen(
        no_caps() + [FDPASS, "recv", p["sock"], "--"] +
        echofs_argv(p, source_of(nginx.url, "test"), nginx.test_index,
                    "/dev/fd/%d"),
        stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    p["procs"].append(proc)
    wait_mounted(p, proc)
    assert len(os.listdir(p["mnt"])) == 10
    sender.send_signal(signal.SIGTERM)
    out, err = sender.communicate(timeout=30)
    assert sender.returncode == 0, err
    assert helpers.mount_entry(p["mnt"]) is None
    assert proc.wait(30) == 0, log_of(p)[-3000:]


@pytest.mark.parametrize("case", ["closed", "not_fuse", "unmounted", "stdio",
                                  "mounted_at"])
def test_bad_descriptor_is_one_line(place, nginx, case):
    """A /dev/fd/N that is not an open /dev/fuse descriptor, one nobody
    mounted, one of 0-2, or mounted_at= without /dev/fd/N: one clear line,
    nothing served."""
    p = place
    with open(p["log"] + ".txt", "w") as f, \
            open("/dev/fuse", "rb", buffering=0) as unmounted:
        shutil.copy(nginx.test_index, p["logs"])
        opts = "cache_dir=%s,index=%s" % (p["cache"], os.path.join(
            p["logs"], os.path.basename(nginx.test_index)))
        dev, fds, want = "/dev/fd/%d" % f.fileno(), (f.fileno(),), \
            "not a /dev/fuse descriptor"
        if case == "closed":
            dev, fds, want = "/dev/fd/250", (), "not open"
        elif case == "unmounted":
            dev, fds, want = "/dev/fd/%d" % unmounted.fileno(), \
                (unmounted.fileno(),), "not mounted"
        elif case == "stdio":
            dev, fds, want = "/dev/fd/1", (), "3 or above"
        elif case == "mounted_at":
            dev, fds, want = p["mnt"], (), "mounted_at="
            opts += ",mounted_at=/srv/x"
        r = subprocess.run(no_caps() + [ECHOFS, "-o", opts,
                                        source_of(nginx.url, "test"), dev],
                           pass_fds=fds, capture_output=True, text=True,
                           timeout=60, stdin=subprocess.DEVNULL)
    assert r.returncode == 1
    err = r.stderr.strip().splitlines()
    assert err and err[0].startswith("echofs: error: ") and want in err[0], \
        r.stderr
    assert helpers.mount_entry(p["mnt"]) is None


def healthz(port):
    """(status, body) of GET /healthz, or (None, reason) when refused."""
    try:
        with urllib.request.urlopen("http://127.0.0.1:%d/healthz" % port,
                                    timeout=10) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()
    except (urllib.error.URLError, ConnectionError) as e:
        return None, str(e)


def test_healthz_answers_probes(nginx, mounter):
    """/healthz on the metrics listener: 200 "ok" once the tree is up, and
    failing (503, then refused) once the mount is gone, here lazily
    unmounted; /metrics is unchanged beside it."""
    port = helpers.free_port()
    m = mounter(source_of(nginx.url, "test"),
                opts={"index": nginx.test_index, "metrics": port})
    assert healthz(port) == (200, "ok\n")
    assert "echofs_" in helpers.http_get("http://127.0.0.1:%d/metrics" % port).decode()
    subprocess.run(["fusermount3", "-uz", m.mnt], check=True)
    deadline = time.monotonic() + 30
    while healthz(port)[0] == 200:
        assert time.monotonic() < deadline, "healthy 30 s after the unmount"
        time.sleep(0.1)
    assert healthz(port)[0] in (503, None)
    assert m.wait_daemon()
