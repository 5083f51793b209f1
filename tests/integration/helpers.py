"""helpers.py - shared pieces of the echofs integration tests: paths, the
mount wrapper, tree walking and an index writer (the documented text format
of fetch/format/index.h, written independently of echofs so the tests check it),
and what the tests that run loopback stand-ins (s3, gcs) share: free ports,
starting and stopping helper processes, JSON-line logs, tree and failed-mount
checks."""

import errno
import hashlib
import json
import multiprocessing
import os
import re
import signal
import subprocess
import sys
import threading
import time
import urllib.request

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BUILD = os.path.abspath(os.environ.get("ECHOFS_BUILD", os.path.join(REPO, "build")))
ECHOFS = os.path.join(BUILD, "echofs")
PACK = os.path.join(BUILD, "tools", "echofs-pack")
PYTHON = "/usr/bin/python3"
FAULT_SERVER = os.path.join(REPO, "tests", "fault_server.py")
# free_port, wait_port and the port-file server start: one copy, in the benches' helper module (tools/
# must not import from tests/, so the shared code lives there).
sys.path.insert(0, os.path.join(REPO, "tools", "bench"))
import benchlib  # noqa: E402

free_port = benchlib.free_port
wait_port = benchlib.wait_port
cache_bytes = benchlib.cache_bytes

TRAIN_SHARDS = 60
TEST_SHARDS = 10

ERROR_KEYS = ("http_4xx", "http_5xx", "connection", "verify", "shard_failed",
              "read", "cache_corrupt", "cache_write", "tar_skipped", "image",
              "bad_label", "duplicate_key")


def source_of(base_url, split):
    """The brace-range SOURCE of a split served at base_url/<split>/."""
    n = TRAIN_SHARDS if split == "train" else TEST_SHARDS
    return "%s/%s/%s-{000000..%06d}.tar" % (base_url, split, split, n - 1)


def sha256_file(path):
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def walk(root, procs=2):
    """{relative path: sha256} of every file below root (by readdir), hashed
    by `procs` processes (the machines have 2 cores)."""
    paths = sorted(list_paths(root))
    full = [os.path.join(root, p) for p in paths]
    if procs <= 1 or len(full) < 1000:
        return dict(zip(paths, map(sha256_file, full)))
    with multiprocessing.get_context("fork").Pool(procs) as pool:
        return dict(zip(paths, pool.map(sha256_file, full, chunksize=256)))


def list_paths(root):
    out = set()
    for dirpath, _, files in os.walk(root):
        for name in files:
            out.add(os.path.relpath(os.path.join(dirpath, name), root))
    return out


def http_get(url, data=None, method=None, timeout=10):
    req = urllib.request.Request(url, data=data, method=method)
    with urllib.request.urlopen(req, timeout=timeout) as r:
        return r.read()


def http_etag(url):
    req = urllib.request.Request(url, method="HEAD")
    with urllib.request.urlopen(req, timeout=10) as r:
        return r.headers.get("ETag") or "-"


def ustar_members(path):
    """(name, data offset, size, data) of the regular files of a plain ustar
    archive; data only for small members. Fast enough for 60 shards (tarfile
    takes seconds)."""
    with open(path, "rb") as f:
        buf = f.read()
    pos = 0
    while pos + 512 <= len(buf) and buf[pos:pos + 512].strip(b"\0"):
        h = buf[pos:pos + 512]
        name = h[0:100].split(b"\0", 1)[0]
        prefix = h[345:500].split(b"\0", 1)[0]
        if prefix:
            name = prefix + b"/" + name
        size = int(h[124:136].split(b"\0", 1)[0].strip() or b"0", 8)
        off = pos + 512
        if h[156:157] in (b"0", b"\0"):
            yield (name.decode(), off, size,
                   buf[off:off + size] if size <= 256 else None)
        pos = off + (size + 511) // 512 * 512


def shard_samples(path):
    """[(offset, size, label, key, ext)] of a WebDataset shard, in order."""
    images, labels = [], {}
    for name, off, size, data in ustar_members(path):
        base = name.rsplit("/", 1)[-1]
        if "." not in base:
            continue
        stem, ext = base.split(".", 1)
        key = name[: len(name) - len(base)] + stem
        if ext == "cls":
            labels[key] = data.decode().strip()
        elif ext.lower() in ("jpg", "jpeg", "png"):
            images.append((off, size, key, ext.lower()))
    return [(off, size, labels[key], key, ext)
            for off, size, key, ext in images if key in labels]


def write_index(path, shards):
    """Write an echofs index for shards = [(url, local path, etag)]."""
    lines = ["echofs-index 1"]
    samples = []
    for n, (url, local, etag) in enumerate(shards):
        lines.append("S\t%s\t%d\t%s" % (url, os.path.getsize(local), etag or "-"))
        for off, size, label, key, ext in shard_samples(local):
            samples.append("M\t%d\t%d\t%d\t%s\t%s\t%s" % (n, off, size, label, key, ext))
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        f.write("\n".join(lines + samples) + "\n")
    os.rename(tmp, path)


def proc_mounts():
    with open("/proc/mounts") as f:
        return [line.split() for line in f]


def mount_entry(mnt):
    for fields in proc_mounts():
        if fields[1] == mnt:
            return fields
    return None


def echofs_pids(mnt):
    """Pids of echofs daemons whose command line names this mountpoint."""
    pids = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open("/proc/%s/cmdline" % pid, "rb") as f:
                argv = f.read().split(b"\0")
        except OSError:
            continue
        if argv and os.path.basename(argv[0]) == b"echofs" and mnt.encode() in argv:
            pids.append(int(pid))
    return pids


class Mount:
    """One echofs mount driven by a test. umount() is idempotent."""

    def __init__(self, workdir, source, cache_dir=None, opts=None, name="mnt"):
        self.dir = os.path.join(workdir, name)
        self.mnt = os.path.join(self.dir, "mnt")
        self.cache_dir = cache_dir or os.path.join(self.dir, "cache")
        self.log_file = os.path.join(self.dir, "echofs.log")
        self.source = source
        self.opts = dict(opts or {})
        self.mounted = False
        self.result = None
        self.elapsed = None
        os.makedirs(self.mnt, exist_ok=True)
        os.makedirs(self.cache_dir, exist_ok=True)

    def argv(self):
        o = {"cache_dir": self.cache_dir, "log_file": self.log_file,
             "log_level": "info"}
        o.update(self.opts)
        optstr = ",".join(k if v is None else "%s=%s" % (k, v) for k, v in o.items())
        return [ECHOFS, "-o", optstr, self.source, self.mnt]

    def start(self, timeout=120):
        """Run echofs (it daemonizes once the tree is ready)."""
        t0 = time.monotonic()
        self.result = subprocess.run(self.argv(), capture_output=True, text=True,
                                     timeout=timeout, stdin=subprocess.DEVNULL)
        self.elapsed = time.monotonic() - t0
        ent = mount_entry(self.mnt)
        self.mounted = ent is not None
        if self.result.returncode == 0:
            assert ent is not None, "echofs exited 0 but %s is not mounted" % self.mnt
            assert ent[2] == "fuse.echofs", "fstype is %s" % ent[2]
        return self.result

    def path(self, *parts):
        return os.path.join(self.mnt, *parts)

    def stats(self):
        with open(self.path(".echofs", "stats")) as f:
            return json.load(f)

    def log(self):
        try:
            with open(self.log_file, errors="replace") as f:
                return f.read()
        except OSError:
            return "(no log file)"

    def umount(self):
        # Not mounted (any more): a test may have ended the daemon by a
        # signal or -uz; fusermount3 -u would fail 20 times, 5 s.
        if mount_entry(self.mnt) is None:
            self.mounted = False
            self.wait_daemon()
            return
        for _ in range(20):
            r = subprocess.run(["fusermount3", "-u", self.mnt], capture_output=True)
            if r.returncode == 0 or mount_entry(self.mnt) is None:
                break
            time.sleep(0.25)
        else:
            subprocess.run(["fusermount3", "-uz", self.mnt], capture_output=True)
        self.mounted = False
        self.wait_daemon()

    def wait_daemon(self, timeout=15):
        """The daemon must exit after unmount (it may hold the cache lock)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if not echofs_pids(self.mnt):
                return True
            time.sleep(0.1)
        for pid in echofs_pids(self.mnt):
            os.kill(pid, signal.SIGKILL)
        return False


def read_errno(path):
    """0 if path reads fully, else the errno of the failure."""
    try:
        with open(path, "rb") as f:
            f.read()
        return 0
    except OSError as e:
        return e.errno or errno.EIO


# ---- loopback stand-ins and their checks (test_s3, test_gcs, s3stack) ----

def stop_proc(proc):
    """SIGTERM, then SIGKILL after 10 s; reaps proc."""
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def take_json_lines(path):
    """The JSON lines a stand-in logged to path since the last call (the
    file is emptied); [] when there is none yet."""
    try:
        with open(path) as f:
            lines = [json.loads(x) for x in f]
    except FileNotFoundError:
        lines = []
    open(path, "w").close()
    return lines


def check_tree(m, dataset, split="test"):
    """Mount m shows exactly the split's files, byte for byte; returns
    {path: sha256} of the mount."""
    got = walk(m.mnt)
    want = dataset.ref_hashes(split)
    assert set(got) == set(want)
    bad = [p for p in want if got[p] != want[p]]
    assert not bad, "%d files differ, e.g. %s" % (len(bad), bad[:3])
    return got


def read_checked_until(m, want, done, guard=120):
    """Reads files of mount m (every 97th of the sorted paths, round and
    round), each checked against want {path: sha256}, until done() holds
    (asked every 10 reads) or, as a hang guard only, guard seconds passed;
    returns how many were read. The caller asserts what done() waits for."""
    paths = sorted(want)
    deadline = time.monotonic() + guard
    reads = 0
    while time.monotonic() < deadline:
        p = paths[reads * 97 % len(paths)]
        assert sha256_file(m.path(p)) == want[p], p
        reads += 1
        if reads % 10 == 0 and done():
            break
    return reads


def read_checked_every(m, want, step):
    """Reads every step-th file of mount m (sorted paths), each checked
    against want {path: sha256}; returns how many were read."""
    paths = sorted(want)[::step]
    for p in paths:
        assert sha256_file(m.path(p)) == want[p], p
    return len(paths)


# fs/main.c's BOOT_RETRY_BUDGET_S: how long a mount (or --check) retries a
# failing request before it gives up
BOOT_RETRY_BUDGET_S = 6.0


def retries_logged(log):
    """(url, delay) of each retry echofs scheduled, from a debug log: the
    delays it chose, which no machine load changes."""
    return [(mo.group(1), float(mo.group(2))) for mo in re.finditer(
        r"debug: http: (\S+) failed \([^)]*\), retrying in ([0-9.]+)s", log)]


def failed_mount(mounter, source, opts, timeout=120, one_line=True):
    """Mounts source, which must fail, and returns echofs's stderr; with
    one_line, nothing may be left mounted and the error is one line."""
    m = mounter(source, opts=opts, check=False, timeout=timeout)
    assert m.result.returncode != 0, "the mount should have failed"
    err = m.result.stderr.strip()
    if one_line:
        assert not m.mounted
        assert len(err.splitlines()) == 1, err
    return err


class CacheSampler(threading.Thread):
    """cache_bytes every `period` seconds until stopped; keeps the maximum."""

    def __init__(self, cache_dir, period):
        super().__init__(daemon=True)
        self.cache_dir = cache_dir
        self.period = period
        self.stop = threading.Event()
        self.max = 0
        self.samples = 0

    def run(self):
        while not self.stop.is_set():
            self.max = max(self.max, cache_bytes(self.cache_dir))
            self.samples += 1
            self.stop.wait(self.period)


def start_port_file_server(cmd, port_file, log, timeout=30, what="server"):
    """benchlib.start_port_file_server, returning (proc, its URL)."""
    proc, port = benchlib.start_port_file_server(cmd, port_file, log,
                                                 timeout, what)
    return proc, "http://127.0.0.1:%d" % port
