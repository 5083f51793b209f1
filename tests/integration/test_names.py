"""test_names.py - names that arrive through an index (not a tar): unsafe
ones are skipped one by one and counted, the rest mounts; duplicate keys with
long names stay within 255 bytes and unique."""

import hashlib
import os

import helpers
from helpers import source_of

LONG = "b" * 251  # "<LONG>.jpg" is exactly 255 bytes

# (label, key) of M lines whose names must be skipped: bad labels first.
BAD_LABELS = [" ", ".."]
BAD_KEYS = ["x/" + "a" * 300, "d/..", "d/" + "a" * 252, "k\0nul", "   "]


def crafted_index(src, dst, first_label):
    """The test split's index plus lines reusing its first sample: unsafe
    names, and three keys whose base name is 251 bytes in one class."""
    with open(src, "rb") as f:
        lines = f.read().decode().splitlines()
    m = next(ln for ln in lines if ln.startswith("M\t"))
    shard, off, size = m.split("\t")[1:4]
    extra = []
    for label in BAD_LABELS:
        extra.append((label, "bad/k"))
    for key in BAD_KEYS:
        extra.append((first_label, key))
    for d in ("d1", "d2", "d3"):
        extra.append((first_label, "%s/%s" % (d, LONG)))
    # The bad lines sit between good ones: each is skipped on its own.
    at = len(lines) // 2
    for label, key in extra:
        lines.insert(at, "\t".join(["M", shard, off, size, label, key, "jpg"]))
    with open(dst, "wb") as f:
        f.write(("\n".join(lines) + "\n").encode())
    return int(shard), int(off), int(size)


def test_index_names_are_skipped_one_by_one(mounter, nginx, dataset, tmp_path):
    first = helpers.shard_samples(dataset.shards("test")[0])[0]
    ix = str(tmp_path / "crafted.echofs-index")
    shard, off, size = crafted_index(nginx.test_index, ix, first[2])
    with open(dataset.shards("test")[shard], "rb") as f:
        f.seek(off)
        want = hashlib.sha256(f.read(size)).hexdigest()

    m = mounter(source_of(nginx.url, "test"), opts={"index": ix})
    st = m.stats()
    assert st["errors"]["tar_skipped"] == len(BAD_KEYS), st["errors"]
    assert st["errors"]["bad_label"] == len(BAD_LABELS), st["errors"]
    assert "unsafe names" in m.log(), m.log()[-3000:]

    got = helpers.walk(m.mnt)
    ref = dataset.ref_hashes("test")
    longs = {p: h for p, h in got.items() if LONG[:200] in p}
    assert {p: h for p, h in got.items() if p not in longs} == ref
    # Three files of one key: unique, each name within 255 bytes, readable.
    assert len(longs) == 3, sorted(longs)
    for p, h in longs.items():
        assert len(os.path.basename(p).encode()) <= 255, p
        assert p.endswith(".jpg"), p
        assert h == want, p
    assert os.path.join(os.path.dirname(next(iter(longs))),
                        LONG + ".jpg") in longs
