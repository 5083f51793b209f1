"""test_nodes.py - many nodes (-o rank=R,world=W): W mounts of one source on
this machine split the dataset by shard, each sample shown by exactly one
rank, every class directory on every rank, equal file counts, each shard
fetched once over all ranks; echo mounts stream only their part."""

import hashlib
import os
import random
import time

import pytest

import helpers
from conftest import FaultServer, index_for

CLASSES = [str(i) for i in range(10)]
EVEN_SHARDS = 9  # train-000000 .. 000008: 9000 samples, 3 shards a rank


@pytest.fixture(scope="module")
def nodes_server(dataset, tmp_path_factory):
    """A counting server over the first 9 train shards (1000 samples each,
    so W=3 divides evenly) and the 10 test shards (W=3 does not)."""
    work = str(tmp_path_factory.mktemp("nodes"))
    root = os.path.join(work, "root")
    for split in ("train", "test"):
        os.makedirs(os.path.join(root, split))
    train = dataset.shards("train")[:EVEN_SHARDS]
    for src in train + dataset.shards("test"):
        split = os.path.basename(os.path.dirname(src))
        os.link(src, os.path.join(root, split, os.path.basename(src)))
    srv = FaultServer(root, work)
    try:
        srv.train = sorted(os.path.join(root, "train", os.path.basename(s))
                           for s in train)
        srv.train_index = os.path.join(work, "train.echofs-index")
        index_for(srv.url, "train", srv.train, srv.train_index)
        srv.train_source = "%s/train/train-{000000..%06d}.tar" % (
            srv.url, EVEN_SHARDS - 1)
        srv.test_index = os.path.join(work, "test.echofs-index")
        index_for(srv.url, "test", dataset.shards("test"), srv.test_index)
        srv.test_source = helpers.source_of(srv.url, "test")
        yield srv
    finally:
        srv.stop()


@pytest.fixture(scope="module")
def even_ref(nodes_server):
    """{class/key.ext: sha256} of the 9 shards, and key -> shard path."""
    ref, shard_of = {}, {}
    for path in nodes_server.train:
        with open(path, "rb") as f:
            blob = f.read()
        for off, size, label, key, ext in helpers.shard_samples(path):
            name = "%s/%s.%s" % (label, key.rsplit("/", 1)[-1], ext)
            ref[name] = hashlib.sha256(blob[off:off + size]).hexdigest()
            shard_of[key.rsplit("/", 1)[-1]] = "/train/" + os.path.basename(path)
    return ref, shard_of


def mount_ranks(mounter, source, index, world, **opts):
    return [mounter(source, opts=dict(index=index, rank=r, world=world, **opts),
                    name="rank%d" % r)
            for r in range(world)]


def shard_gets(server):
    """{path: requests} of shard files since the last reset, and ranges."""
    st = server.stats()
    return ({p: n for p, n in st["by_path"].items() if p.endswith(".tar")},
            st["ranges"])


def test_three_ranks_split_the_dataset_exactly_once(mounter, nodes_server,
                                                      even_ref):
    ref, _ = even_ref
    mounts = mount_ranks(mounter, nodes_server.train_source,
                         nodes_server.train_index, 3)
    trees, fetched = [], []
    for m in mounts:
        nodes_server.reset_stats()
        assert sorted(os.listdir(m.mnt)) == CLASSES, m.mnt
        trees.append(helpers.walk(m.mnt))
        fetched.append(shard_gets(nodes_server))
    counts = [len(t) for t in trees]
    assert counts == [3000, 3000, 3000], counts
    union = {}
    for t in trees:
        assert not set(union) & set(t), "a sample shown by two ranks"
        union.update(t)
    assert union == ref, "union of the ranks differs from the dataset"
    # Each shard is fetched whole by exactly one rank (a reader that waits
    # may add range GETs, counted apart; loopback rarely needs them).
    seen = {}
    for r, (paths, ranges) in enumerate(fetched):
        assert sum(paths.values()) - ranges == 3, (r, paths, ranges)
        for p in paths:
            assert p not in seen, "%s fetched by ranks %d and %d" % (p, seen[p], r)
            seen[p] = r
    assert len(seen) == EVEN_SHARDS, seen
    for r, m in enumerate(mounts):
        s = m.stats()
        assert (s["rank"], s["world"], s["part_shards"], s["part_samples"],
                s["trimmed"], s["samples"]) == (r, 3, 3, 3000, 0, 3000), s
        assert s["classes"] == 10
        assert s["shards_fetched"] == 3, s


def test_uneven_parts_are_trimmed_to_equal_counts(mounter, nodes_server):
    """10 shards over 3 ranks: parts of 4, 3 and 3 shards; every rank shows
    3000 files and the rank with 4 shards counts 1000 trimmed."""
    mounts = mount_ranks(mounter, nodes_server.test_source,
                         nodes_server.test_index, 3)
    stats = [m.stats() for m in mounts]
    assert sorted(s["part_shards"] for s in stats) == [3, 3, 4], stats
    assert sorted(s["trimmed"] for s in stats) == [0, 0, 1000], stats
    keys = [helpers.list_paths(m.mnt) for m in mounts]
    assert [len(k) for k in keys] == [3000, 3000, 3000]
    assert not (keys[0] & keys[1] or keys[0] & keys[2] or keys[1] & keys[2])
    for m, s in zip(mounts, stats):
        assert sorted(os.listdir(m.mnt)) == CLASSES
        assert s["samples"] == 3000
        assert s["part_samples"] - s["trimmed"] == 3000
        with open(m.path(".echofs", "stats.prom")) as f:
            prom = f.read()
        assert "echofs_trimmed %d" % s["trimmed"] in prom, prom[:2000]
        assert "echofs_world 3" in prom


def test_bad_rank_or_world_fails_the_mount(mounter, nodes_server):
    for opts, words in (({"world": 11}, "world=11 but only 10 shards"),
                        ({"rank": 3, "world": 3}, "not below world"),
                        ({"world": 0}, "bad world 0"),
                        ({"rank": "x", "world": 2}, "bad rank 'x'")):
        m = mounter(nodes_server.test_source,
                    opts=dict(index=nodes_server.test_index, **opts),
                    check=False)
        assert m.result.returncode != 0, opts
        assert words in m.result.stderr, (opts, m.result.stderr)
        assert not m.mounted


def test_rank_and_world_from_the_environment(mounter, nodes_server,
                                             monkeypatch):
    monkeypatch.setenv("ECHOFS_RANK", "2")
    monkeypatch.setenv("ECHOFS_WORLD", "3")
    m = mounter(nodes_server.test_source,
                opts={"index": nodes_server.test_index})
    s = m.stats()
    assert (s["rank"], s["world"], s["samples"]) == (2, 3, 3000), s
    # The option wins over the environment.
    m2 = mounter(nodes_server.test_source,
                 opts={"index": nodes_server.test_index, "rank": 0})
    assert m2.stats()["rank"] == 0


def test_echo_ranks_serve_only_their_part(mounter, nodes_server, even_ref):
    ref, shard_of = even_ref
    by_hash = {}
    for name, digest in ref.items():
        by_hash[digest] = name.split("/")[0]
    for r in range(3):
        exact = mounter(nodes_server.train_source,
                        opts=dict(index=nodes_server.train_index, rank=r,
                                  world=3, seed=5), name="exact%d" % r)
        part = {p.split("/")[-1].rsplit(".", 1)[0]
                for p in helpers.list_paths(exact.mnt)}
        part_shards = {shard_of[k] for k in part}
        assert len(part) == 3000 and len(part_shards) == 3
        nodes_server.reset_stats()
        echo = mounter(nodes_server.train_source,
                       opts=dict(index=nodes_server.train_index, rank=r,
                                 world=3, echo=2, seed=5),
                       name="echo%d" % r)
        paths = sorted(helpers.list_paths(echo.mnt))
        assert len(paths) == 3000
        random.Random(r).shuffle(paths)
        for rel in paths[:400]:
            with open(echo.path(rel), "rb") as f:
                data = f.read()
                src = os.getxattr(f.fileno(), "user.echofs.source").decode()
            assert src.rsplit("/", 1)[-1] in part, "rank %d served %s" % (r, src)
            assert by_hash.get(hashlib.sha256(data).hexdigest()) == \
                rel.split("/")[0], rel
        # Outside the part at most the mount's reachability probe: one
        # HEAD of the first shard not in the cache (before the partition
        # is known); every byte streamed came from the part's shards.
        paths, _ = shard_gets(nodes_server)
        outside = {p: n for p, n in paths.items() if p not in part_shards}
        assert len(outside) <= 1 and set(outside.values()) <= {1}, (r, paths)
        st = echo.stats()
        part_bytes = sum(os.path.getsize(os.path.join(
            os.path.dirname(nodes_server.train[0]), os.path.basename(p)))
            for p in part_shards)
        assert st["shards_fetched"] <= 3, st
        assert st["bytes_fetched"] <= part_bytes, (st, part_bytes)
        echo.umount()
        exact.umount()


def test_echo_repartition_moves_to_new_parts(mounter, nodes_server, even_ref):
    """repartition=1: pass 1 streams the mount's part, later passes other
    parts, so samples of other shards arrive; without it (the test above)
    they never do."""
    ref, shard_of = even_ref
    exact = mounter(nodes_server.train_source,
                    opts=dict(index=nodes_server.train_index, rank=0, world=3,
                              seed=5), name="exact")
    part = {p.split("/")[-1].rsplit(".", 1)[0]
            for p in helpers.list_paths(exact.mnt)}
    echo = mounter(nodes_server.train_source,
                   opts=dict(index=nodes_server.train_index, rank=0, world=3,
                             seed=5, echo=2, repartition=1), name="echo")
    paths = sorted(helpers.list_paths(echo.mnt))
    assert len(paths) == 3000
    rng = random.Random(3)
    outside, first_pass_outside = set(), 0
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and len(outside) < 50:
        for rel in rng.sample(paths, 500):
            with open(echo.path(rel), "rb") as f:
                src = os.getxattr(f.fileno(), "user.echofs.source").decode()
            key = src.rsplit("/", 1)[-1]
            if key not in part:
                outside.add(key)
                if echo.stats()["pass"] == 1:
                    first_pass_outside += 1
    st = echo.stats()
    assert first_pass_outside == 0, "pass 1 served samples outside its part"
    assert len(outside) >= 50, ("no new part after %d passes" % st["pass"], st)
    assert st["pass"] >= 2 and st["shards_fetched"] > 3, st
