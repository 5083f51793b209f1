"""test_liveness.py - nothing waits without a bound: reads against a server
that trickles or stalls fail by read_timeout (one wait per read(2)), signals
and lazy unmounts end the daemon without waiting for the blocked read (exit
status 0), and echofs refuses to mount over a live or dead FUSE mount.

No elapsed-time upper bounds: a daemon that waited for the blocked read
would wait read_timeout, set here far beyond the generous hang guards
(HANG_S), and the counters and exit statuses show what happened."""

import errno
import os
import signal
import subprocess
import time

import pytest

import helpers
from conftest import index_for
from helpers import PYTHON, Mount, source_of

TRICKLE = os.path.join(helpers.REPO, "tests", "trickle_server.py")
# A guard against hangs only: a daemon that waited for the blocked read
# instead of ending would wait BLOCKED_READ_S (the read_timeout of these
# mounts; the stall server never sends, rate1 needs far longer).
HANG_S = 60
BLOCKED_READ_S = 600
ECHO_HANG_S = 20


class Trickle:
    """tests/trickle_server.py over the test split (index served at once)."""

    def __init__(self, dataset, work, *mode):
        root = os.path.join(work, "root")
        os.makedirs(os.path.join(root, "test"))
        for src in dataset.shards("test"):
            os.link(src, os.path.join(root, "test", os.path.basename(src)))
        port_file = os.path.join(work, "port")
        self.proc = subprocess.Popen(
            [PYTHON, TRICKLE, "--root", root, "--port-file", port_file] + list(mode),
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            stdin=subprocess.DEVNULL)
        deadline = time.monotonic() + 15
        while not os.path.exists(port_file):
            assert self.proc.poll() is None and time.monotonic() < deadline, \
                "trickle server did not start"
            time.sleep(0.05)
        with open(port_file) as f:
            self.url = "http://127.0.0.1:%d" % int(f.read())
        self.index = os.path.join(work, "test.echofs-index")
        index_for(self.url, "test", dataset.shards("test"), self.index)
        self.source = source_of(self.url, "test")

    def stop(self):
        self.proc.kill()
        self.proc.wait()


@pytest.fixture(params=["rate1", "stall"])
def trickle(request, dataset, tmp_path):
    mode = ["--rate", "1"] if request.param == "rate1" else ["--stall"]
    srv = Trickle(dataset, str(tmp_path / "trickle"), *mode)
    yield srv
    srv.stop()


def first_file(mnt):
    for d in sorted(os.listdir(mnt)):
        if not d.startswith("."):
            return os.path.join(mnt, d, sorted(os.listdir(os.path.join(mnt, d)))[0])
    raise AssertionError("empty tree")


def start_reader(path):
    """cat of path in the background (blocks on the trickling shard)."""
    return subprocess.Popen(["cat", path], stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, stdin=subprocess.DEVNULL)


def read_errno(path, box):
    box["errno"] = helpers.read_errno(path)


def test_read_fails_by_read_timeout(trickle, mounter):
    m = mounter(trickle.source, opts={"index": trickle.index, "read_timeout": 4})
    path = first_file(m.mnt)
    err = helpers.read_errno(path)
    assert err in (errno.ETIMEDOUT, errno.EIO), "read gave errno %d" % err
    # One read(2), one wait: not one for the readahead and one for the
    # kernel's synchronous retry (that one fails at once, uncounted here).
    st = m.stats()
    assert st["read_timeouts"] == 1, st
    assert st["errors"]["read"] >= 1, st["errors"]


def foreground(trickle, tmp_path, name, opts=None):
    """An echofs daemon in the foreground (so its exit status is ours)."""
    o = {"index": trickle.index, "read_timeout": BLOCKED_READ_S}
    m = Mount(str(tmp_path), trickle.source, opts=dict(o, **(opts or {})), name=name)
    proc = subprocess.Popen(m.argv() + ["-f"], stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, stdin=subprocess.DEVNULL)
    deadline = time.monotonic() + 60
    while helpers.mount_entry(m.mnt) is None:
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            pytest.fail("echofs -f did not mount (rc %s): %s" % (proc.poll(), m.log()[-2000:]))
        time.sleep(0.05)
    m.mounted = True
    return m, proc


def wait_exit(proc, timeout=HANG_S):
    """proc's exit status, or None (killed) if it hung for timeout s."""
    try:
        return proc.wait(timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
        return None


def wait_until(pred, timeout):
    """True once pred() holds; False if it still does not after timeout s."""
    deadline = time.monotonic() + timeout
    while not pred():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


def blocked_reader(path):
    """cat of path, still blocked after a second (it waits for the shard)."""
    reader = start_reader(path)
    time.sleep(1.0)
    assert reader.poll() is None, "the read should still be blocked"
    return reader


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT, signal.SIGHUP])
def test_signal_during_blocked_read_exits_0(trickle, tmp_path, sig):
    m, proc = foreground(trickle, tmp_path, "sig%d" % sig)
    try:
        reader = blocked_reader(first_file(m.mnt))
        proc.send_signal(sig)
        rc = wait_exit(proc)
        assert rc is not None, "echofs hung %d s after signal %d" % (HANG_S, sig)
        assert rc == 0, "exit status %d after signal %d" % (rc, sig)
        assert helpers.mount_entry(m.mnt) is None, "still mounted"
        assert reader.wait(HANG_S) != 0, "the blocked cat should fail"
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        m.umount()


def test_lazy_unmount_during_blocked_read_ends_daemon(trickle, mounter):
    m = mounter(trickle.source, opts={"index": trickle.index,
                                      "read_timeout": BLOCKED_READ_S})
    reader = blocked_reader(first_file(m.mnt))
    pids = helpers.echofs_pids(m.mnt)
    assert pids, "no daemon found"
    subprocess.run(["fusermount3", "-uz", m.mnt], check=True)
    m.mounted = False
    # The read waits BLOCKED_READ_S: a daemon that waited for it hangs here.
    assert wait_until(lambda: not helpers.echofs_pids(m.mnt), HANG_S), \
        "daemon hung %d s after -uz" % HANG_S
    assert reader.wait(HANG_S) != 0, "the blocked cat should fail"


def refused(m, what):
    r = m.start(timeout=30)
    assert r.returncode != 0, "echofs mounted over a %s FUSE mount" % what
    lines = [l for l in r.stderr.splitlines() if l.strip()]
    assert len(lines) == 1, "want one line on stderr, got %r" % r.stderr
    assert "fusermount3 -u %s" % m.mnt in lines[0], lines[0]
    assert what in lines[0], lines[0]


def test_mount_over_live_fuse_mount_is_refused(nginx, mounter, tmp_path):
    src = source_of(nginx.url, "train")
    a = mounter(src)
    before = len([e for e in helpers.proc_mounts() if e[1] == a.mnt])
    b = Mount(str(tmp_path), src, name="over")
    b.mnt = a.mnt
    refused(b, "live")
    assert len([e for e in helpers.proc_mounts() if e[1] == a.mnt]) == before
    assert os.listdir(a.mnt), "the first mount must still work"


def test_mount_over_dead_fuse_mount_is_refused(nginx, tmp_path):
    src = source_of(nginx.url, "train")
    m = Mount(str(tmp_path), src, name="dead")
    proc = subprocess.Popen(m.argv() + ["-f"], stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, stdin=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 60
        while helpers.mount_entry(m.mnt) is None:
            assert proc.poll() is None and time.monotonic() < deadline, "no mount"
            time.sleep(0.05)
        proc.kill()
        proc.wait()
        with pytest.raises(OSError) as e:
            os.stat(m.mnt)
        assert e.value.errno == errno.ENOTCONN
        again = Mount(str(tmp_path), src, name="again")
        again.mnt = m.mnt
        refused(again, "dead")
        assert len([e for e in helpers.proc_mounts() if e[1] == m.mnt]) == 1
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        while helpers.mount_entry(m.mnt) is not None:
            if subprocess.run(["fusermount3", "-u", m.mnt]).returncode != 0:
                subprocess.run(["fusermount3", "-uz", m.mnt])
                break


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT, signal.SIGHUP])
def test_signal_on_idle_mount_exits_0(nginx, tmp_path, sig):
    src = source_of(nginx.url, "train")
    m = Mount(str(tmp_path), src, name="idle%d" % sig)
    proc = subprocess.Popen(m.argv() + ["-f"], stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, stdin=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 60
        while helpers.mount_entry(m.mnt) is None:
            assert proc.poll() is None and time.monotonic() < deadline, "no mount"
            time.sleep(0.05)
        assert os.listdir(m.mnt)
        proc.send_signal(sig)
        rc = wait_exit(proc)
        assert rc == 0, "exit status %s after signal %d (None: hung)" % (rc, sig)
        assert helpers.mount_entry(m.mnt) is None, "still mounted"
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        m.umount()


def test_sigterm_during_blocked_echo_open_exits_0(trickle, tmp_path):
    # The open waits in the echo pool (no sample of its class can arrive).
    m, proc = foreground(trickle, tmp_path, "echo", opts={"echo": 2})
    try:
        reader = start_reader(first_file(m.mnt))
        time.sleep(1.5)
        assert reader.poll() is None, "the open should still be blocked"
        proc.send_signal(signal.SIGTERM)
        # The open waits in the pool for its 30 s (POOL_WAIT_DEFAULT): a
        # daemon that waited it out instead of cancelling it hangs here.
        rc = wait_exit(proc, ECHO_HANG_S)
        assert rc == 0, "exit status %s (None: hung %d s)" % (rc, ECHO_HANG_S)
        assert helpers.mount_entry(m.mnt) is None, "still mounted"
        assert reader.wait(HANG_S) != 0, "the blocked cat should fail"
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        m.umount()
