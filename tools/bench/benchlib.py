"""benchlib.py - small helpers the tools/bench Python scripts share (free
loopback ports, waiting for a server's port, reading a mount's stats);
tools/ must not import from tests/, so free_port and wait_port live here
and tests/integration/helpers.py imports them."""

import json
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
