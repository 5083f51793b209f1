"""test_cache_policy.py - a disk cache smaller than the data does not thrash:
two class-sorted passes over the test split through a cache of about a fifth
of it fetch little more than the data, with every byte right and the cache
directory never above its cap. And a mount waiting for another mount's
download of a shard reads from that download as it arrives."""

import hashlib
import os
import subprocess
import sys
import threading
import time

import pytest

import helpers
from helpers import source_of

sys.path.insert(0, os.path.join(helpers.REPO, "tools", "dev"))
import nginx as nginx_mod  # noqa: E402  (tools/dev/nginx.py)


def drop_page_cache():
    """So that the second pass asks the daemon again (the page-cache pusher
    filled the kernel's cache in the first)."""
    subprocess.run(["sync"], check=True)
    try:
        with open("/proc/sys/vm/drop_caches", "w") as f:
            f.write("3\n")
    except OSError as e:
        pytest.skip("cannot drop the page cache (%s): the second pass would "
                    "not reach the daemon" % e)


def class_sorted_pass(mnt, paths, ref):
    """Read every file in class order, name order; return the wrong ones."""
    wrong = []
    for p in paths:
        with open(os.path.join(mnt, p), "rb") as f:
            if hashlib.sha256(f.read()).hexdigest() != ref[p]:
                wrong.append(p)
    return wrong


def test_class_sorted_two_passes_do_not_thrash(dataset, nginx, mounter,
                                               tmp_path):
    """Cache of about 1/5 of the test split (two of its ten shards), two
    class-sorted passes with the page cache dropped before each: every class
    directory visits every shard, so LRU refetches each whole shard once per
    class in the second pass (about 10x the data). Keeping what the pass has
    not read yet and serving the other shards by range GETs keeps the two
    passes under 2.5x the data."""
    shards = dataset.shards("test")
    total = sum(os.path.getsize(p) for p in shards)
    biggest = max(os.path.getsize(p) for p in shards)
    cap = 2 * biggest + 2 * 65536  # two shards and their footers
    assert cap < total / 4
    cache_dir = os.path.join(str(tmp_path), "cache")
    m = mounter(source_of(nginx.url, "test"), cache_dir=cache_dir,
                opts={"index": nginx.test_index, "cache_size": str(cap)})
    ref = dataset.ref_hashes("test")
    paths = sorted(ref, key=lambda p: (p.split("/")[0], p))
    assert {p for p in helpers.list_paths(m.mnt) if not p.startswith(".")} == set(ref)
    sampler = helpers.CacheSampler(cache_dir, 0.1)
    sampler.start()
    per_pass = []
    try:
        for _ in range(2):
            drop_page_cache()
            before = m.stats()["bytes_fetched"]
            wrong = class_sorted_pass(m.mnt, paths, ref)
            assert not wrong, "%d wrong files, e.g. %s" % (len(wrong), wrong[:3])
            per_pass.append(m.stats()["bytes_fetched"] - before)
    finally:
        sampler.stop.set()
        sampler.join()
    s = m.stats()
    fetched = sum(per_pass)
    print("dataset %d B, cap %d B, fetched per pass %s = %.2fx, max cache %d B; "
          "shards_fetched %d, range_reads %d, admission_bypass %s, passes %s" % (
              total, cap, per_pass, fetched / total, sampler.max,
              s["shards_fetched"], s["range_reads"], s.get("admission_bypass"),
              s.get("passes_read")))
    assert sampler.samples >= 5
    assert sampler.max <= cap, "cache reached %d B, cap %d B" % (sampler.max, cap)
    assert fetched <= 2.5 * total, "fetched %d B for a %d B dataset (%.2fx)" % (
        fetched, total, fetched / total)
    assert s["errors"]["cache_write"] == 0, s["errors"]


def tmp_files(cache_dir):
    d = os.path.join(cache_dir, "shards")
    try:
        return [n for n in os.listdir(d) if n.startswith(".tmp-")]
    except FileNotFoundError:
        return []


def test_waiting_mount_reads_the_others_download(dataset, mounter, tmp_path):
    """Two mounts on one cache_dir behind a slow server (the test split's
    first shard takes about 12 s to stream). The first mount reads the
    shard's last file, so it streams the whole shard; the second then reads
    the shard's first file: it must not fetch the shard again (the
    fetch-once lock makes it wait), and it is answered from the first
    mount's partial file, checked against the index's sums, while that
    download is still running - before, it waited for the whole shard."""
    state = os.path.join(str(tmp_path), "nginx")
    srv = nginx_mod.Nginx(dataset.www, state, limit_rate="200k")
    try:
        # Format 2 (per-sample sums): what makes a partial file safe to read.
        index = os.path.join(state, "test.echofs-index")
        r = subprocess.run([os.path.join(helpers.BUILD, "tools", "echofs-index"),
                            "--base-url", srv.url + "/test", "-o", index]
                           + dataset.shards("test"), capture_output=True, text=True)
        assert r.returncode == 0, r.stderr
        cache_dir = os.path.join(str(tmp_path), "shared-cache")
        os.makedirs(cache_dir)
        opts = {"index": index}
        first = mounter(source_of(srv.url, "test"), cache_dir=cache_dir,
                        opts=opts, name="first")
        second = mounter(source_of(srv.url, "test"), cache_dir=cache_dir,
                         opts=opts, name="second")
        samples0 = helpers.shard_samples(dataset.shards("test")[0])
        shard0 = ["%s/%s.%s" % (label, key, ext)
                  for _, _, label, key, ext in samples0]
        first_end = samples0[0][0] + samples0[0][1]  # end of its first sample
        ref = dataset.ref_hashes("test")
        got = {}

        def read(m, name, p):
            with open(m.path(p), "rb") as f:
                got[(name, p)] = hashlib.sha256(f.read()).hexdigest()

        t = threading.Thread(target=read, args=(first, "first", shard0[-1]),
                             daemon=True)
        t.start()
        deadline = time.monotonic() + 20
        while not tmp_files(cache_dir) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert tmp_files(cache_dir), "the first mount never started its download"
        # Wait until the first mount has received the first sample's bytes
        # (they go to its temp file as they arrive). The bound only keeps a
        # broken fetch from hanging the test: at 200 KB/s the first sample
        # arrives within a second, so 60 s leaves room for a loaded machine.
        deadline = time.monotonic() + 60
        while (first.stats()["bytes_fetched"] < first_end
               and time.monotonic() < deadline):
            time.sleep(0.05)
        assert first.stats()["bytes_fetched"] >= first_end, (
            "the first mount received %d B in 60 s, the first sample ends at "
            "%d" % (first.stats()["bytes_fetched"], first_end))
        read(second, "second", shard0[0])
        still = tmp_files(cache_dir)
        s2 = second.stats()
        t.join(timeout=120)
        assert not t.is_alive(), "the first mount's read did not finish"
        assert got[("second", shard0[0])] == ref[shard0[0]]
        assert got[("first", shard0[-1])] == ref[shard0[-1]]
        print("second mount: %s" % {k: s2.get(k) for k in (
            "bytes_fetched", "peer_reads", "range_reads", "cache_waits")})
        assert s2["bytes_fetched"] == 0, "the second mount fetched %d B" % (
            s2["bytes_fetched"])
        assert still, ("the second mount's read was answered only after the "
                       "first mount's download ended")
        assert s2.get("peer_reads", 0) >= 1, s2
    finally:
        srv.stop()
