"""test_shared_index.py - two mounts of one source on one cache_dir that both
have to build the index at once: each shard is fetched once in all, the
second mount indexing from what the first wrote to the cache."""

import os
import threading

import helpers


def test_two_mounts_indexing_at_once_fetch_each_shard_once(
        mounter, fault_server, dataset, tmp_path):
    # Slow enough that the two index builds overlap shard by shard.
    fault_server.set_faults("/test/*.tar=slow:1500000")
    cache_dir = os.path.join(str(tmp_path), "shared-cache")
    os.makedirs(cache_dir)
    mounts = [None, None]

    def start(i):
        mounts[i] = mounter(fault_server.source, cache_dir=cache_dir,
                            name="m%d" % i, timeout=300)

    threads = [threading.Thread(target=start, args=(i,)) for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert all(mounts), "a mount failed to start"
    for m in mounts:
        assert "building one" in m.log() or "indexed" in m.log(), m.log()[-2000:]
    gets = fault_server.stats()["gets"]
    shards = ["/test/" + os.path.basename(p) for p in dataset.shards("test")]
    got = {p: gets.get(p, 0) for p in shards}
    assert all(n == 1 for n in got.values()), "GETs per shard: %s" % got
    ref = dataset.ref_hashes("test")
    for m in mounts:
        assert helpers.walk(m.mnt) == ref
        assert m.stats()["errors"]["cache_write"] == 0, m.stats()["errors"]
    gets = fault_server.stats()["gets"]
    assert sum(gets.get(p, 0) for p in shards) == len(shards), gets
