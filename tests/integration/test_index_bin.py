"""test_index_bin.py - mounts given a binary index (docs/index-format.md):
the tree equals what tar -x makes of the shards; a text index given by
index= is converted once into cache_dir and its binary copy used by later
mounts; a corrupt binary index fails the mount with one line."""

import glob
import hashlib
import io
import os
import struct
import subprocess
import sys
import tarfile

import helpers
from helpers import source_of

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..",
                                "tools", "dev"))
import nginx as nginx_mod  # noqa: E402  (tools/dev/nginx.py)

INDEXER = os.path.join(helpers.BUILD, "tools", "echofs-index")
MAGIC = b"\x89EFSIDX\n"


def tar_x_tree(shards, where):
    """{class/key.jpg: sha256} from the shards extracted with tar -x."""
    os.makedirs(where)
    for s in shards:
        subprocess.run(["tar", "-x", "-f", s, "-C", where], check=True)
    tree = {}
    for jpg in glob.glob(os.path.join(where, "*.jpg")):
        stem = jpg[:-len(".jpg")]
        with open(stem + ".cls") as f:
            label = f.read().strip()
        with open(jpg, "rb") as f:
            tree["%s/%s" % (label, os.path.basename(jpg))] = \
                hashlib.sha256(f.read()).hexdigest()
    return tree


def binary_index(nginx, dataset, path):
    r = subprocess.run([INDEXER, "--format", "binary", "--base-url",
                        nginx.url + "/test", "-o", path]
                       + dataset.shards("test"), capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    with open(path, "rb") as f:
        assert f.read(8) == MAGIC
    return path


def test_binary_index_mount_equals_tar_x(nginx, dataset, mounter, tmp_path):
    """index= names a binary index: the tree is the shards' tar -x."""
    ix = binary_index(nginx, dataset, str(tmp_path / "test.echofs-index"))
    want = tar_x_tree(dataset.shards("test"), str(tmp_path / "x"))
    assert len(want) == 10000
    m = mounter(source_of(nginx.url, "test"), opts={"index": ix})
    got = helpers.walk(m.mnt)
    assert set(got) == set(want)
    bad = [p for p in want if got[p] != want[p]]
    assert not bad, "%d files differ, e.g. %s" % (len(bad), bad[:3])
    assert "index from option" in m.log()


def test_text_index_converted_once(nginx, dataset, mounter, tmp_path):
    """A text index given by index= is kept in binary under cache_dir,
    keyed by its checksum: the next mount loads the copy, a changed text
    gets a copy of its own."""
    text = str(tmp_path / "test.echofs-index")
    with open(nginx.test_index, "rb") as f:
        body = f.read()
    assert body.startswith(b"echofs-index ")
    with open(text, "wb") as f:
        f.write(body)
    cache = str(tmp_path / "cache")
    src = source_of(nginx.url, "test")

    def copies():
        return sorted(glob.glob(os.path.join(cache, "index", "given-*")))

    m = mounter(src, cache_dir=cache, opts={"index": text})
    assert "its binary copy" not in m.log()
    first = helpers.walk(m.mnt)
    m.umount()
    assert len(copies()) == 1
    with open(copies()[0], "rb") as f:
        assert f.read(8) == MAGIC
    m2 = mounter(src, cache_dir=cache, opts={"index": text})
    assert "its binary copy" in m2.log()
    assert helpers.walk(m2.mnt) == first
    m2.umount()
    with open(text, "ab") as f:
        f.write(b"# changed\n")
    m3 = mounter(src, cache_dir=cache, opts={"index": text})
    assert "its binary copy" not in m3.log()
    assert len(copies()) == 2


def test_corrupt_binary_index_fails_in_one_line(nginx, dataset, mounter,
                                               tmp_path):
    """A flipped byte, or a file cut short, fails the mount with one line
    naming the binary index's check, not a crash or a wrong byte."""
    ix = binary_index(nginx, dataset, str(tmp_path / "good.echofs-index"))
    with open(ix, "rb") as f:
        good = f.read()
    flipped = bytearray(good)
    flipped[len(good) // 2] ^= 0x40
    cases = {"flip": (bytes(flipped), "checksum mismatch"),
             "cut": (good[:len(good) - 100], "truncated")}
    for name, (body, why) in cases.items():
        path = str(tmp_path / ("%s.echofs-index" % name))
        with open(path, "wb") as f:
            f.write(body)
        err = helpers.failed_mount(mounter, source_of(nginx.url, "test"),
                                   {"index": path})
        assert "binary index: " in err and why in err, err


def bin_tree(path):
    """{class/file: sample} read from a binary index as docs/index-format.md
    lays it out (a reader independent of the C one)."""
    with open(path, "rb") as f:
        data = f.read()
    head = struct.unpack_from("<8sIIQII", data, 0)
    assert head[0] == MAGIC and head[1] == 1 and head[3] == len(data)
    secs = [struct.unpack_from("<QQQQ", data, 32 + 32 * i) for i in range(7)]
    strings = data[secs[0][0]:secs[0][0] + secs[0][1]]

    def s(off):
        return strings[off:strings.index(b"\0", off)].decode()

    samples = [struct.unpack_from("<QQIIIIII", data, secs[3][0] + 40 * i)
               for i in range(secs[3][2])]
    order = struct.unpack_from("<%dI" % secs[6][2], data, secs[6][0])
    tree = {}
    for c in range(secs[5][2]):
        name, _label, first, count = struct.unpack_from(
            "<IIII", data, secs[5][0] + 16 * c)
        for i in order[first:first + count]:
            assert samples[i][6] == c
            tree["%s/%s" % (s(name), s(samples[i][7]))] = i
    return tree


def test_write_time_names_are_the_mounts(tmp_path, mounter):
    """The tree a binary index carries (classes, sorted names, _dup
    renames decided when it is written) is the tree echofs builds from
    the same index given as text: repeated keys across shards, numeric
    labels "3" and "03" in one class, and a key that takes a renamed
    file's name (a second renaming round)."""
    www = tmp_path / "www"
    (www / "d").mkdir(parents=True)
    members = [[("a/k", "3"), ("b/k", "3"), ("x", "12"), ("c/k_dup1", "3")],
               [("e/k", "03"), ("f/x", "12"), ("g/k", "3")]]
    shards = []
    for n, samples in enumerate(members):
        path = str(www / "d" / ("d-%06d.tar" % n))
        with tarfile.open(path, "w", format=tarfile.USTAR_FORMAT) as t:
            for key, label in samples:
                for ext, body in (("jpg", ("%s/%d" % (key, n)).encode()),
                                  ("cls", label.encode())):
                    ti = tarfile.TarInfo("%s.%s" % (key, ext))
                    ti.size = len(body)
                    t.addfile(ti, io.BytesIO(body))
        shards.append(path)
    srv = nginx_mod.Nginx(str(www), str(tmp_path / "ngx"))
    try:
        src = "%s/d/d-{000000..000001}.tar" % srv.url
        got = {}
        for fmt in ("binary", "text"):
            ix = str(tmp_path / ("d.%s" % fmt))
            r = subprocess.run([INDEXER, "--format", fmt, "--base-url",
                                srv.url + "/d", "-o", ix] + shards,
                               capture_output=True, text=True)
            assert r.returncode == 0, r.stderr
            m = mounter(src, opts={"index": ix}, name="m-" + fmt)
            got[fmt] = sorted(helpers.list_paths(m.mnt))
        want = bin_tree(str(tmp_path / "d.binary"))
        assert got["binary"] == got["text"] == sorted(want), (got, want)
        assert len(want) == 7 and any("_dup" in p and p.count("_dup") == 2
                                      for p in want), want
    finally:
        srv.stop()
