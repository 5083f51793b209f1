"""test_shared_cache.py - several echofs daemons on one cache_dir at once:
right bytes, the cap kept over all of them, each shard fetched once, and no
mount's start-up removing another mount's downloads in progress."""

import hashlib
import json
import os
import subprocess
import sys
import threading
import time

import pytest

import helpers
from helpers import PYTHON, source_of

sys.path.insert(0, os.path.join(helpers.REPO, "tools", "dev"))
import nginx as nginx_mod  # noqa: E402  (tools/dev/nginx.py)

# Readers of the same shards that stay within one shard of each other (a
# shared progress directory): what several jobs reading one dataset in the
# same order do, without one reader falling a cache-size behind on a loaded
# machine (ASan, other jobs) and so fetching evicted shards again, which is
# the cache working, not sharing failing.
LOCKSTEP_READER = r"""
import hashlib, json, os, sys, time
mnt, me, n, prog = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
out = {}

def done(j):
    try:
        with open(os.path.join(prog, str(j))) as f:
            return int(f.read() or -1)
    except (OSError, ValueError):
        return -1

for k, shard in enumerate(json.load(sys.stdin)):
    deadline = time.monotonic() + 120
    while any(done(j) < k - 1 for j in range(n)):
        if time.monotonic() > deadline:
            sys.exit("reader %d: the others did not finish shard %d" % (me, k - 1))
        time.sleep(0.02)
    for p in shard:
        with open(mnt + "/" + p, "rb") as f:
            out[p] = hashlib.sha256(f.read()).hexdigest()
    tmp = os.path.join(prog, "%d.tmp" % me)
    with open(tmp, "w") as f:
        f.write(str(k))
    os.rename(tmp, os.path.join(prog, str(me)))
json.dump(out, sys.stdout)
"""


@pytest.fixture
def slow_nginx(dataset, tmp_path):
    """A private nginx over www whose connections are throttled; start(rate)
    returns it with an index of the test split that names its URLs."""
    made = []

    def start(rate):
        state = os.path.join(str(tmp_path), "nginx%d" % len(made))
        srv = nginx_mod.Nginx(dataset.www, state, limit_rate=rate)
        made.append(srv)
        srv.test_index = os.path.join(state, "test.echofs-index")
        helpers.write_index(srv.test_index, [
            ("%s/test/%s" % (srv.url, os.path.basename(p)), p,
             helpers.http_etag("%s/test/%s" % (srv.url, os.path.basename(p))))
            for p in dataset.shards("test")])
        return srv

    yield start
    for srv in made:
        srv.stop()


def shard_groups(dataset):
    """The files of the test split, one list per shard, in shard order."""
    ref = dataset.ref_hashes("test")
    groups = []
    for shard in dataset.shards("test"):
        groups.append([])
        for _, _, label, key, ext in helpers.shard_samples(shard):
            p = "%s/%s.%s" % (label, key, ext)
            assert p in ref, "no reference file %s" % p
            groups[-1].append(p)
    assert sum(len(g) for g in groups) == len(ref)
    return groups


def shard_order_paths(dataset):
    """Every file of the test split, shard by shard (the order a reader that
    follows the shards uses; a class-sorted walk would visit every shard once
    per class)."""
    return [p for g in shard_groups(dataset) for p in g]


def test_three_mounts_share_one_cache(dataset, slow_nginx, mounter, tmp_path):
    """Three daemons, one cache_dir smaller than the data, the same shards
    read at once by all three (within one shard of each other): no wrong
    byte, the directory never above the cap, and the shards fetched about
    once in total."""
    srv = slow_nginx("3m")
    total = sum(os.path.getsize(p) for p in dataset.shards("test"))
    cap = total * 45 // 100
    cache_dir = os.path.join(str(tmp_path), "shared-cache")
    os.makedirs(cache_dir)
    opts = {"index": srv.test_index, "cache_size": str(cap)}
    mounts = [mounter(source_of(srv.url, "test"), cache_dir=cache_dir,
                      opts=opts, name="m%d" % i) for i in range(3)]
    groups = shard_groups(dataset)
    paths = [p for g in groups for p in g]
    ref = dataset.ref_hashes("test")
    prog = os.path.join(str(tmp_path), "progress")
    os.makedirs(prog)
    sampler = helpers.CacheSampler(cache_dir, 0.2)
    sampler.start()
    procs = []
    try:
        for i, m in enumerate(mounts):
            p = subprocess.Popen([PYTHON, "-c", LOCKSTEP_READER, m.mnt, str(i),
                                  str(len(mounts)), prog], stdin=subprocess.PIPE,
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                 text=True)
            p.stdin.write(json.dumps(groups))
            p.stdin.close()
            procs.append(p)
        got = []
        for p in procs:
            out = p.stdout.read()
            err = p.stderr.read()
            assert p.wait(timeout=300) == 0, "reader failed: %s" % err[-2000:]
            got.append(json.loads(out))
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
        sampler.stop.set()
        sampler.join()
    for i, g in enumerate(got):
        wrong = [p for p in paths if g.get(p) != ref[p]]
        assert not wrong, "mount %d: %d wrong files, e.g. %s" % (i, len(wrong), wrong[:3])
    stats = [m.stats() for m in mounts]
    fetched = sum(s["bytes_fetched"] for s in stats)
    print("dataset %d B, cap %d B, fetched %s = %d B (%.2fx), max cache %d B, "
          "%d samples; shards_fetched %s, range_reads %s" % (
              total, cap, [s["bytes_fetched"] for s in stats], fetched,
              fetched / total, sampler.max, sampler.samples,
              [s["shards_fetched"] for s in stats], [s["range_reads"] for s in stats]))
    assert sampler.samples >= 5
    assert sampler.max <= cap, "cache reached %d B, cap %d B" % (sampler.max, cap)
    assert fetched <= 1.1 * total, "fetched %d B for a %d B dataset (%.2fx)" % (
        fetched, total, fetched / total)
    for s in stats:
        assert s["errors"]["cache_write"] == 0, s["errors"]


def tmp_files(cache_dir):
    d = os.path.join(cache_dir, "shards")
    return sorted(n for n in os.listdir(d) if n.startswith(".tmp-"))


def test_second_mount_keeps_first_mounts_downloads(dataset, slow_nginx, mounter,
                                                   tmp_path):
    """A mount starting on a cache_dir where another mount is downloading
    leaves that download's temp file alone; the first mount finishes it into
    the cache (no cache_write error)."""
    # 300 KB/s: a 2.5 MB shard's download lasts about 8 s, ample time to
    # start the second mount while it runs (100k made the test last 25 s).
    srv = slow_nginx("300k")
    cache_dir = os.path.join(str(tmp_path), "shared-cache")
    os.makedirs(cache_dir)
    opts = {"index": srv.test_index}
    first = mounter(source_of(srv.url, "test"), cache_dir=cache_dir, opts=opts,
                    name="first")
    paths = shard_order_paths(dataset)
    ref = dataset.ref_hashes("test")
    # The last file of the first shard: the read waits for the whole shard.
    shard0 = len(helpers.shard_samples(dataset.shards("test")[0]))
    target = paths[shard0 - 1]
    result = {}

    def read():
        with open(first.path(target), "rb") as f:
            result["data"] = f.read()

    t = threading.Thread(target=read, daemon=True)
    t.start()
    deadline = time.monotonic() + 20
    while not tmp_files(cache_dir) and time.monotonic() < deadline:
        time.sleep(0.05)
    before = tmp_files(cache_dir)
    assert before, "the first mount never started writing a temp file"
    mounter(source_of(srv.url, "test"), cache_dir=cache_dir, opts=opts,
            name="second")
    missing = set(before) - set(tmp_files(cache_dir))
    if missing:
        s = first.stats()
        if s["shards_cached"] >= 1 and s["errors"]["cache_write"] == 0:
            pytest.skip("the download ended (renamed into place) before the "
                        "second mount started: nothing to check")
    assert not missing, "the second mount's start-up removed %s" % sorted(missing)
    t.join(timeout=120)
    assert not t.is_alive(), "read did not finish"
    assert hashlib.sha256(result["data"]).hexdigest() == ref[target]
    # The read may have been answered by a range GET while the shard
    # streams on (range_after_s); the stream must still end in the cache.
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline:
        s = first.stats()
        if s["shards_cached"] >= 1 or s["errors"]["cache_write"]:
            break
        time.sleep(0.25)
    assert s["errors"]["cache_write"] == 0, s["errors"]
    assert s["shards_cached"] >= 1, s
