"""test_echo_contention.py - readers meeting on one path of an echo mount:
each open file is one sample (size, bytes and user.echofs.source agree for
its whole life) and no open fails, whatever the other opens of the path do
(issue 45, finding 1)."""

import errno
import hashlib
import os
import random
import multiprocessing
import time

import pytest

import helpers

READERS = 8
PATHS = int(os.environ.get("ECHOFS_CONTENTION_PATHS", "15"))
SECONDS = float(os.environ.get("ECHOFS_CONTENTION_SECONDS", "8"))


@pytest.fixture(scope="module")
def refs(dataset):
    """key -> sha256 of the test split's samples."""
    by_key = {}
    for rel, digest in dataset.ref_hashes("test").items():
        by_key[os.path.splitext(os.path.basename(rel))[0]] = digest
    return by_key


def one_class_paths(m, n):
    """n image paths of one class directory, or of the root where the
    samples layout puts the packed members (one file per key member)."""
    root = sorted(x for x in os.listdir(m.mnt) if not x.startswith("."))
    if any(x.endswith(".jpg") for x in root):
        return [m.path(x) for x in root if x.endswith(".jpg")][:n]
    names = sorted(x for x in os.listdir(m.path(root[3])) if x.endswith(".jpg"))
    return [m.path(root[3], x) for x in names[:n]]


def source_key(xattr):
    """The key user.echofs.source names (the samples layout names the
    member, key.ext)."""
    return os.path.splitext(os.path.basename(xattr.decode()))[0]


def read_in_pieces(path, rng):
    """(size from fstat, bytes read, source) of one open, read 4 KiB at a
    time with short sleeps so other opens of the path come in between."""
    fd = os.open(path, os.O_RDONLY)
    try:
        size = os.fstat(fd).st_size
        src = source_key(os.getxattr(fd, "user.echofs.source"))
        parts = []
        while True:
            b = os.read(fd, 4096)
            if not b:
                break
            parts.append(b)
            time.sleep(rng.random() * 0.002)
        size_after = os.fstat(fd).st_size
        src_after = source_key(os.getxattr(fd, "user.echofs.source"))
    finally:
        os.close(fd)
    assert src == src_after, "source changed while open: %s -> %s" % (src, src_after)
    assert size == size_after, "size changed while open: %d -> %d" % (size, size_after)
    return size, b"".join(parts), src


def reader(paths, refs, stop, seed, out):
    """One reader process: open random paths until stop (monotonic)."""
    rng = random.Random(seed)
    t = {"reads": 0, "wrong": [], "failed": {}}
    while time.monotonic() < stop:
        p = rng.choice(paths)
        try:
            size, data, src = read_in_pieces(p, rng)
        except OSError as e:
            name = errno.errorcode.get(e.errno, str(e.errno))
            t["failed"][name] = t["failed"].get(name, 0) + 1
            continue
        except AssertionError as e:
            t["wrong"].append("%s: %s" % (p, e))
            continue
        t["reads"] += 1
        if len(data) != size or hashlib.sha256(data).hexdigest() != refs.get(src):
            byhash = {v: k for k, v in refs.items()}
            t["wrong"].append("%s: %d bytes, fstat %d, source %s, bytes of %s" % (
                p, len(data), size, src,
                byhash.get(hashlib.sha256(data).hexdigest(), "no sample")))
    out.put(t)


def hammer(paths, refs, seconds, procs=READERS):
    """Run the reader processes (separate processes: no GIL between their
    opens); return their summed tally."""
    ctx = multiprocessing.get_context("fork")
    q = ctx.Queue()
    stop = time.monotonic() + seconds
    ps = [ctx.Process(target=reader, args=(paths, refs, stop, i, q))
          for i in range(procs)]
    for p in ps:
        p.start()
    total = {"reads": 0, "wrong": [], "failed": {}}
    for _ in ps:
        t = q.get(timeout=seconds + 120)
        total["reads"] += t["reads"]
        total["wrong"] += t["wrong"]
        for k, v in t["failed"].items():
            total["failed"][k] = total["failed"].get(k, 0) + v
    for p in ps:
        p.join()
    return total


@pytest.mark.parametrize("layout", ["imagefolder", "samples"])
@pytest.mark.parametrize("mode", ["fixed", "adaptive"])
def test_readers_meeting_on_one_path(mounter, fault_server, refs, mode, layout):
    """8 reader processes on 15 paths of one class: every open serves one
    sample whose size, bytes and source agree, and none fails (ESTALE and
    foreign tails before: 2 of 19,213 opens and 1 read in 10 s, fixed)."""
    opts = {"echo": 4, "echo_mode": mode, "seed": 5}
    if mode == "adaptive":
        opts["exact_first"] = 0  # every shard is local soon: keep echoing
    if layout == "samples":
        opts["layout"] = "samples"  # indexes the shards itself (members)
    else:
        opts["index"] = fault_server.index
    m = mounter(fault_server.source, opts=opts)
    paths = one_class_paths(m, PATHS)
    t = hammer(paths, refs, SECONDS)
    st = m.stats()
    assert t["reads"] > 500, t
    assert not t["failed"], "failed opens %s in %d reads" % (t["failed"], t["reads"])
    assert not t["wrong"], "%d wrong of %d reads: %s" % (
        len(t["wrong"]), t["reads"], t["wrong"][:5])
    assert st["echoes_served"] > 0, "no echo: %s" % st
