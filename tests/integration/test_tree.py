"""test_tree.py - a healthy server: the tree echofs shows is exactly the
dataset, byte for byte, for one reader or many, with sane statistics."""

import gzip
import json
import os
import random
import stat
import subprocess

import pytest

import helpers
from helpers import PYTHON, source_of

LABELS_T10K = "/usr/share/datasets/fashion-mnist/t10k-labels-idx1-ubyte.gz"
CLASSES = [str(i) for i in range(10)]


def diff_trees(got, ref):
    """A short description of how two {path: sha256} maps differ, or ''."""
    missing = sorted(set(ref) - set(got))
    extra = sorted(set(got) - set(ref))
    wrong = sorted(p for p in set(ref) & set(got) if ref[p] != got[p])
    if not (missing or extra or wrong):
        return ""
    return "missing %d %s, extra %d %s, wrong bytes %d %s" % (
        len(missing), missing[:5], len(extra), extra[:5], len(wrong), wrong[:5])


def test_train_tree_byte_identical(nginx, dataset, mounter):
    """60 shards, index beside them: every file equals the --tree copy."""
    m = mounter(source_of(nginx.url, "train"))
    problem = diff_trees(helpers.walk(m.mnt), dataset.ref_hashes("train"))
    assert problem == ""
    s = m.stats()
    assert s["samples"] == 60000 and s["shards"] == 60
    assert {k: v for k, v in s["errors"].items() if v} == {}


def test_test_split_indexed_at_mount(nginx, dataset, mounter):
    """No index beside the shards: echofs builds one, and the tree matches."""
    m = mounter(source_of(nginx.url, "test"))
    assert diff_trees(helpers.walk(m.mnt), dataset.ref_hashes("test")) == ""


def test_layout_listing_and_read_only(nginx, dataset, mounter):
    m = mounter(source_of(nginx.url, "test"))
    root = os.listdir(m.mnt)
    assert sorted(root) == CLASSES, "root lists %r" % sorted(root)
    assert os.path.isdir(m.path(".echofs")), ".echofs must be reachable by path"
    assert os.path.isfile(m.path(".echofs", "stats"))
    ref = dataset.ref_dir("test")
    for cls in CLASSES:
        names = sorted(os.listdir(m.path(cls)))
        assert names == sorted(os.listdir(os.path.join(ref, cls))), "class %s" % cls
        for name in names[:50]:
            st = os.lstat(m.path(cls, name))
            assert stat.S_ISREG(st.st_mode)
            assert st.st_size == os.path.getsize(os.path.join(ref, cls, name))
            assert not st.st_mode & 0o222, "files must not look writable"
    ent = helpers.mount_entry(m.mnt)
    assert "ro" in ent[3].split(","), "mount options %s" % ent[3]
    with pytest.raises(OSError):
        open(m.path(CLASSES[0], "new.jpg"), "wb")
    with pytest.raises(OSError):
        os.mkdir(m.path("newdir"))
    with pytest.raises(FileNotFoundError):
        os.stat(m.path("0", "no-such-file.jpg"))


def test_stats_counts(nginx, dataset, mounter):
    m = mounter(source_of(nginx.url, "train"))
    s0 = m.stats()
    for key in ("samples", "shards", "classes", "shards_cached", "bytes_fetched",
                "fetch_rate_bps", "cache_hits", "cache_misses", "range_reads",
                "retries", "resumes", "http_requests", "open_handles"):
        assert key in s0, "stats lacks %s" % key
        assert isinstance(s0[key], (int, float)) and s0[key] >= 0, key
    assert set(helpers.ERROR_KEYS) <= set(s0["errors"]), s0["errors"]
    assert (s0["samples"], s0["shards"], s0["classes"]) == (60000, 60, 10)
    assert s0["open_handles"] == 0
    # The daemon's memory in its two parts (issue 48): a heap of some MB
    # (the tree of 60,000 files), and the pages of files it maps.
    assert s0["rss_anon_bytes"] > 1e6 and s0["rss_file_bytes"] > 0, s0
    # Shard 0 holds train_000000..train_000999; read them all.
    ref = dataset.ref_dir("train")
    files = sorted(p for p in dataset.ref_hashes("train")
                   if int(p.split("_")[-1][:6]) < 1000)
    # Plain mounts never see OPEN for files (fs/ops.c answers ENOSYS, FUSE
    # "no_open"), so open_handles only counts on echo mounts; a file held
    # open must still read right and leave the gauge at 0 once closed.
    with open(m.path(files[0]), "rb") as f:
        with open(os.path.join(ref, files[0]), "rb") as r:
            assert f.read() == r.read()
    for p in files:
        assert helpers.sha256_file(m.path(p)) == dataset.ref_hashes("train")[p]
    s1 = m.stats()
    assert s1["open_handles"] == 0
    # The first read waits for the shard's stream (a miss), or, when that
    # is slow to come, takes a range GET of its own bytes.
    assert s1["cache_misses"] + s1["range_reads"] >= 1
    assert s1["cache_hits"] >= 1, "1000 reads of one shard should hit the cache"
    assert s1["bytes_fetched"] >= os.path.getsize(dataset.shards("train")[0])
    assert s1["http_requests"] >= s0["http_requests"] + 1
    assert s1["shards_cached"] >= 1
    assert {k: v for k, v in s1["errors"].items() if v} == {}
    for key in ("bytes_fetched", "cache_hits", "cache_misses", "http_requests"):
        assert s1[key] >= s0[key], "%s went down" % key


READER = r"""
import hashlib, json, sys
out = {}
for p in json.load(sys.stdin):
    with open(sys.argv[1] + "/" + p, "rb") as f:
        out[p] = hashlib.sha256(f.read()).hexdigest()
json.dump(out, sys.stdout)
"""


def test_eight_concurrent_readers(nginx, dataset, mounter):
    """Eight processes read disjoint shuffled slices of a cold mount (index
    given, so no shard is cached before the readers start)."""
    m = mounter(source_of(nginx.url, "test"), opts={"index": nginx.test_index})
    assert m.stats()["shards_cached"] == 0
    ref = dataset.ref_hashes("test")
    paths = sorted(ref)
    random.Random(8).shuffle(paths)
    procs = []
    for i in range(8):
        p = subprocess.Popen([PYTHON, "-c", READER, m.mnt], stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        procs.append((p, json.dumps(paths[i::8])))
    got = {}
    for p, todo in procs:
        out, err = p.communicate(todo, timeout=300)
        assert p.returncode == 0, "reader failed: %s" % err[-2000:]
        got.update(json.loads(out))
    assert diff_trees(got, ref) == ""


def idx_labels(path):
    with gzip.open(path) as f:
        data = f.read()
    assert int.from_bytes(data[:4], "big") == 0x801
    return data[8:]


def test_pil_reader_test_split(nginx, mounter):
    """Decode every image like a training loop; labels match Debian's file."""
    from PIL import Image
    labels = idx_labels(LABELS_T10K)
    m = mounter(source_of(nginx.url, "test"))
    seen = 0
    for cls in sorted(os.listdir(m.mnt)):
        for name in os.listdir(m.path(cls)):
            with Image.open(m.path(cls, name)) as im:
                im.load()
                assert im.size == (28, 28) and im.mode == "L"
            i = int(name.split("_")[1].split(".")[0])
            assert labels[i] == int(cls), "%s/%s has label %d" % (cls, name, labels[i])
            seen += 1
    assert seen == len(labels) == 10000
