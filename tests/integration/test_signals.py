"""test_signals.py - signals a user may send to a mounted daemon: none but
SIGTERM and SIGINT (and SIGHUP in the foreground, test_liveness.py) ends it.
SIGUSR1 and, in the background, SIGHUP reopen log_file (logrotate's
postrotate convention); the others are ignored and the mount keeps
serving."""

import os
import signal
import time

import pytest

import helpers
from helpers import source_of

# Signals whose default action would kill the daemon and leave a dead mount.
IGNORED = [signal.SIGUSR2, signal.SIGALRM, signal.SIGPIPE, signal.SIGVTALRM,
           signal.SIGIO, signal.SIGPWR, signal.SIGXFSZ, signal.SIGRTMIN + 3,
           signal.SIGRTMAX]
REOPEN = [signal.SIGUSR1, signal.SIGHUP]


def daemon_pid(m):
    pids = helpers.echofs_pids(m.mnt)
    assert len(pids) == 1, "want one daemon for %s, got %r" % (m.mnt, pids)
    return pids[0]


def pending(pid, sig):
    """True while sig is queued (not yet taken) for the process; None when
    the process is gone."""
    bit = 1 << (sig - 1)
    try:
        with open("/proc/%d/status" % pid) as f:
            status = f.read()
    except OSError:
        return None
    for line in status.splitlines():
        if line.startswith(("ShdPnd:", "SigPnd:")) and int(line.split()[1], 16) & bit:
            return True
    return False


def send_and_settle(pid, sig):
    """Send sig and wait until the daemon took it or died (the bound is
    only a guard against a hang, not a measurement)."""
    os.kill(pid, sig)
    deadline = time.monotonic() + 30
    while pending(pid, sig) and time.monotonic() < deadline:
        time.sleep(0.02)
    # A default action kills the whole group right after dequeuing: let a
    # dying daemon finish dying before looking.
    for _ in range(10):
        if pending(pid, sig) is None:
            break
        time.sleep(0.02)


def serves(m, files):
    for path in files:
        with open(path, "rb") as f:
            assert f.read(), path


def some_files(m, n=3):
    out = []
    for d in sorted(os.listdir(m.mnt)):
        if d.startswith("."):
            continue
        for name in sorted(os.listdir(os.path.join(m.mnt, d)))[:n]:
            out.append(os.path.join(m.mnt, d, name))
        if len(out) >= n:
            return out
    return out


def wait_for(pred, what):
    deadline = time.monotonic() + 30
    while not pred():
        assert time.monotonic() < deadline, what
        time.sleep(0.05)


@pytest.fixture
def mounted(nginx, mounter):
    return mounter(source_of(nginx.url, "train"))


def test_user_signals_leave_the_mount_serving(mounted):
    m = mounted
    pid = daemon_pid(m)
    files = some_files(m)
    serves(m, files)
    for sig in IGNORED + REOPEN:
        send_and_settle(pid, sig)
        assert pending(pid, sig) is not None, \
            "signal %d killed the daemon: %s" % (sig, m.log()[-2000:])
        assert helpers.mount_entry(m.mnt) is not None, "unmounted by %d" % sig
        serves(m, files)
    assert daemon_pid(m) == pid
    assert m.stats()["errors"]["read"] == 0


@pytest.mark.parametrize("sig", REOPEN, ids=["USR1", "HUP"])
def test_signal_after_logrotate_makes_a_new_log_file(mounted, sig):
    m = mounted
    pid = daemon_pid(m)
    rotated = m.log_file + ".1"
    os.rename(m.log_file, rotated)
    send_and_settle(pid, sig)
    assert pending(pid, sig) is not None, "signal %d killed the daemon" % sig
    wait_for(lambda: os.path.exists(m.log_file),
             "no new log file after signal %d" % sig)
    wait_for(lambda: "reopened log_file" in m.log(),
             "the new log does not say it was reopened: %r" % m.log())
    with open(rotated) as f:
        assert "reopened" not in f.read(), "the old file got the new lines"
    serves(m, some_files(m))
    assert daemon_pid(m) == pid
