"""test_echo_liveness.py - an echo mount never starves a reader: one class
only, class-sorted, `cp -r`, 64 shuffled readers all finish within a bound
with a small mem_size, and a reader killed while its lookup waits leaves no
binding behind (issue 9)."""

import json
import os
import signal
import subprocess
import time

import helpers
from helpers import PYTHON

# Fashion-MNIST test split: 10 classes of 1000 samples (~1 KB each); 1M (the
# smallest mem_size) holds about a class's worth, mixed from all classes.
SMALL_MEM = "1M"

# Readers run in their own process: a stuck FUSE wait cannot hang pytest,
# and the bound is the subprocess timeout.
READER = r"""
import json, os, random, sys, threading
root, mode, n, threads = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
classes = sorted(d for d in os.listdir(root) if not d.startswith("."))
files = {c: sorted(os.listdir(os.path.join(root, c))) for c in classes}
if mode == "class0":
    # Until every sample of class 0 was seen (or n opens), class 0 only.
    paths = [os.path.join(classes[0], f) for f in files[classes[0]]]
    paths = (paths * (n // len(paths) + 1))[:n]
elif mode == "sorted":
    paths = [os.path.join(c, f) for c in classes for f in files[c][:n]]
else:
    paths = [os.path.join(c, f) for c in classes for f in files[c]]
    random.Random(5).shuffle(paths)
    paths = paths[:n]
out, lock = {}, threading.Lock()
want = set()
def work(chunk):
    for rel in chunk:
        if mode == "class0" and len(want) >= len(files[classes[0]]):
            return
        with open(os.path.join(root, rel), "rb") as f:
            data = f.read()
            src = os.getxattr(f.fileno(), "user.echofs.source").decode()
        with lock:
            out[rel] = src
            if mode == "class0":
                want.add(src)
ts = [threading.Thread(target=work, args=(paths[i::threads],)) for i in range(threads)]
[t.start() for t in ts]
[t.join() for t in ts]
seen = want if mode == "class0" else set(out.values())
print(json.dumps({"opens": len(out), "sources": sorted(seen),
                  "class0_files": len(files[classes[0]])}))
"""


def echo_mount(mounter, nginx, **opts):
    o = {"index": nginx.test_index, "echo": 2, "seed": 3, "mem_size": SMALL_MEM}
    o.update(opts)
    return mounter(helpers.source_of(nginx.url, "test"), opts=o)


def run_reader(m, mode, n, threads=1, bound=90):
    t0 = time.monotonic()
    try:
        r = subprocess.run([PYTHON, "-c", READER, m.mnt, mode, str(n), str(threads)],
                           capture_output=True, text=True, timeout=bound)
    except subprocess.TimeoutExpired:
        raise AssertionError("%s reader did not finish within %d s; stats: %s"
                             % (mode, bound, m.stats()))
    assert r.returncode == 0, "%s reader failed: %s\nstats: %s" % (
        mode, r.stderr[-2000:], m.stats())
    return json.loads(r.stdout), time.monotonic() - t0


def key_class(dataset):
    out = {}
    for rel in dataset.ref_hashes("test"):
        cls, name = rel.split(os.sep)
        out[os.path.splitext(name)[0]] = cls
    return out


def test_class_only_reader_gets_every_sample_of_its_class(mounter, nginx, dataset):
    # The pool's promise: exact_first=0, or once the shards are local every
    # path is served its own sample, and a reader drawing paths at random
    # sees what it draws (about 86% of the class in 2000 draws).
    m = echo_mount(mounter, nginx, exact_first=0)
    res, took = run_reader(m, "class0", 2000)
    classes = key_class(dataset)
    first = sorted(os.listdir(m.mnt))[0]
    assert all(classes[s] == first for s in res["sources"]), "a sample of another class"
    # echo=2 adaptive: at most 2 serves per fresh sample, so 2000 opens
    # reach every one of the class's 1000 samples.
    assert len(res["sources"]) == res["class0_files"], (
        "got %d of %d samples of class %s in %.1f s; stats: %s"
        % (len(res["sources"]), res["class0_files"], first, took, m.stats()))


def test_class_only_reader_fixed_mode(mounter, nginx, dataset):
    m = echo_mount(mounter, nginx, echo_mode="fixed", echo=3)
    res, _ = run_reader(m, "class0", 6000, bound=120)
    assert len(res["sources"]) == res["class0_files"], "%d %s" % (len(res["sources"]), m.stats())


def test_class_sorted_walk_finishes(mounter, nginx):
    m = echo_mount(mounter, nginx)
    res, _ = run_reader(m, "sorted", 200)
    assert res["opens"] == 2000
    st = m.stats()
    assert st["fresh_served"] + st["echoes_served"] == 2000, st


def test_cp_r_of_an_echo_mount_finishes(mounter, nginx, tmp_path):
    m = echo_mount(mounter, nginx)
    dest = str(tmp_path / "copy")
    try:
        subprocess.run(["cp", "-r", m.mnt, dest], check=True, timeout=150,
                       capture_output=True)
    except subprocess.TimeoutExpired:
        raise AssertionError("cp -r did not finish within 150 s; stats: %s" % m.stats())
    n = sum(len(files) for _, _, files in os.walk(dest))
    # The ten classes' 10000 files (.echofs is not listed).
    assert n == 10000, n


def test_sixty_four_shuffled_readers(mounter, nginx, dataset):
    m = echo_mount(mounter, nginx, echo_mode="fixed", echo=2)
    res, _ = run_reader(m, "shuffled", 3200, threads=64)
    assert res["opens"] == 3200
    classes = key_class(dataset)
    assert all(s in classes for s in res["sources"])
    st = m.stats()
    assert st["fresh_served"] + st["echoes_served"] == 3200, st


def wait_for(pred, timeout, step=0.1):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if pred():
            return True
        time.sleep(step)
    return pred()


STALL_S = 25  # under the default read_timeout (30 s)


def test_killed_waiting_reader_leaves_no_binding(mounter, fault_server):
    """A lookup parked while no data has arrived; its reader is killed; the
    data then arrives: no binding may stay behind."""
    # The data comes only when the stall ends (STALL_S): the reader must be
    # gone, and no sample in the pool, long before that.
    fault_server.set_faults("*.tar=stall:%d" % STALL_S)
    # stall_timeout=1: once the stall is lifted, the stalled transfer is
    # retried within about a second, not after libcurl's default 10 s.
    m = mounter(fault_server.source, opts={
        "index": fault_server.index, "echo": 2, "mem_size": SMALL_MEM,
        "stall_timeout": 1})
    cls = sorted(os.listdir(m.mnt))[0]
    name = sorted(os.listdir(m.path(cls)))[0]
    reader = subprocess.Popen([PYTHON, "-c", "open(%r, 'rb').read()" % m.path(cls, name)],
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    time.sleep(1.5)
    assert reader.poll() is None, "the reader should still wait for data: %s %s" % (
        reader.stderr.read(), m.stats())
    reader.send_signal(signal.SIGKILL)
    try:
        reader.wait(STALL_S - 10)
    except subprocess.TimeoutExpired:
        raise AssertionError("a killed reader stayed in the lookup for %d s"
                             % (STALL_S - 10))
    # Interrupts are answered at once, not when data comes: none has.
    st = m.stats()
    assert st["bytes_fetched"] == 0 and st["fresh_served"] == 0, json.dumps(st)
    fault_server.set_faults()
    assert wait_for(lambda: m.stats()["bytes_fetched"] > 0, 60), m.stats()
    # Longer than the 5 s expiry of unopened bindings.
    time.sleep(7)
    st = m.stats()
    assert st["bindings"] == 0, "a binding leaked: %s" % st
    assert st["fresh_served"] == 0
