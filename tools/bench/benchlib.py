"""benchlib.py - small helpers the tools/bench Python scripts share (free
loopback ports, waiting for a server's port, reading a mount's stats, an
ImageFolder tree's files, a round of whole-file reads over them and the
reader processes that run them);
tools/ must not import from tests/, so free_port and wait_port live here
and tests/integration/helpers.py imports them."""

import json
import multiprocessing as mp
import os
import socket
import time


def free_port():
    """A loopback TCP port free at the time of asking."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_port(port, proc, what, timeout=30):
    """Waits until 127.0.0.1:port accepts; raises when proc (named what in
    the message) exits first or timeout seconds pass."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError("%s exited with %s" % (what, proc.returncode))
        try:
            socket.create_connection(("127.0.0.1", port), 0.2).close()
            return
        except OSError:
            time.sleep(0.1)
    raise RuntimeError("%s did not start" % what)


def start_port_file_server(cmd, port_file, log, timeout=30, what="server"):
    """Starts cmd (a test server that writes its port to port_file once it
    listens) with stdout and stderr to the open file log, and waits for the
    port; raises when the server exits first or timeout seconds pass.
    Returns (proc, port)."""
    import subprocess
    if os.path.exists(port_file):
        os.unlink(port_file)
    proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT,
                            stdin=subprocess.DEVNULL)
    deadline = time.monotonic() + timeout
    while not os.path.exists(port_file):
        if proc.poll() is not None or time.monotonic() > deadline:
            raise RuntimeError("%s did not start" % what)
        time.sleep(0.05)
    with open(port_file) as f:
        return proc, int(f.read())


def read_stats(root):
    """ROOT/.echofs/stats as a dict, or None when it cannot be read (not an
    echofs mount, or the daemon is gone): a benchmark counts, never stops."""
    try:
        with open(os.path.join(root, ".echofs", "stats")) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def cache_bytes(cache_dir):
    """Bytes of the files under cache_dir/shards (entries, temp files of
    writers in progress, lock files): what cache_size caps."""
    d = os.path.join(cache_dir, "shards")
    n = 0
    try:
        names = os.listdir(d)
    except FileNotFoundError:
        return 0
    for name in names:
        try:
            n += os.lstat(os.path.join(d, name)).st_size
        except FileNotFoundError:
            continue
    return n


def list_tree(root):
    """ROOT/<class>/<file> of an ImageFolder tree, sorted; dot entries (the
    mount's .echofs) and anything beside the class folders are left out."""
    out = []
    for cls in sorted(os.listdir(root)):
        d = os.path.join(root, cls)
        if cls.startswith(".") or not os.path.isdir(d):
            continue
        out += [os.path.join(d, n) for n in sorted(os.listdir(d))]
    return out


def read_round(part, rng, work=None):
    """Shuffles part (in place) with rng, then opens, reads whole and closes
    each file, and calls work(bytes) on it if given. Returns the
    time.monotonic() at which each file was done and how many failed: a
    benchmark counts failures, never stops."""
    rng.shuffle(part)
    done, bad = [], 0
    for p in part:
        try:
            with open(p, "rb") as f:
                if work:
                    work(f.read())
                else:
                    while f.read(1 << 20):
                        pass
            done.append(time.monotonic())
        except OSError:
            bad += 1
    return done, bad


def run_procs(target, argslist, q):
    """Runs target(*args) in a process of its own for each args in argslist;
    each puts one result on q. Returns the results, in the order they came,
    once every process has ended."""
    ps = [mp.Process(target=target, args=args) for args in argslist]
    for p in ps:
        p.start()
    got = [q.get() for _ in ps]
    for p in ps:
        p.join()
    return got
