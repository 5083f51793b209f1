"""test_names.py - names that arrive through an index (not a tar): unsafe
ones are skipped one by one and counted, the rest mounts; duplicate keys with
long names stay within 255 bytes and unique."""

import hashlib
import os

import pytest

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


# ---- one key in two shards (issue 45) ----------------------------------

def write_shard(path, members):
    """A ustar file of (name, bytes) members, in order."""
    import io
    import tarfile
    with tarfile.open(path, "w", format=tarfile.USTAR_FORMAT) as t:
        for name, data in members:
            ti = tarfile.TarInfo(name)
            ti.size = len(data)
            t.addfile(ti, io.BytesIO(data))


def paired_shards(root, stem="dd"):
    """Two shards holding the same keys c/x and c/y: each an image and a
    caption holding the SHA-1 of its image. Returns SOURCE's tail."""
    import random
    rng = random.Random(45)
    os.makedirs(os.path.join(root, stem))
    for s in range(2):
        members = []
        for key in ("c/x", "c/y"):
            img = rng.randbytes(rng.randrange(100, 5000))
            members.append((key + ".jpg", img))
            members.append((key + ".txt", hashlib.sha1(img).hexdigest()
                            .encode()))
        write_shard(os.path.join(root, stem, "%s-%06d.tar" % (stem, s)),
                    members)
    return "%s/%s-{000000..000001}.tar" % (stem, stem)


def dup_warnings(log):
    return [ln for ln in log.splitlines() if "renamed whole" in ln]


def test_key_in_two_shards_is_renamed_whole(mounter, tmp_path):
    """layout=samples: the second shard's x and y are renamed as whole
    samples (one suffix for image and caption), so every caption still
    holds its own image's SHA-1; one warning line names both shards; the
    stats count the two samples. The default layout shows each image as a
    distinct file with the same count."""
    import nginx as nginx_mod
    root = tmp_path / "www"
    root.mkdir()
    srv = nginx_mod.Nginx(str(root), str(tmp_path / "nginx"))
    try:
        src = "%s/%s" % (srv.url, paired_shards(str(root)))
        m = mounter(src, opts={"layout": "samples"})
        files = {}
        for d, _, names in os.walk(m.mnt):
            for n in names:
                with open(os.path.join(d, n), "rb") as f:
                    files[os.path.relpath(os.path.join(d, n), m.mnt)] = f.read()
        stems = {}
        for p, data in files.items():
            stem, ext = p.rsplit(".", 1)
            stems.setdefault(stem, {})[ext] = data
        assert len(stems) == 4, sorted(files)
        for stem, mem in stems.items():
            assert set(mem) == {"jpg", "txt"}, (stem, sorted(files))
            assert mem["txt"].decode() == hashlib.sha1(mem["jpg"]).hexdigest(), \
                "%s: a caption of another sample" % stem
        assert {"c/x", "c/y"} <= set(stems), sorted(stems)
        assert m.stats()["errors"]["duplicate_key"] == 2
        warn = dup_warnings(m.log())
        assert len(warn) == 1, warn
        assert "shard 1 and again in shard 2" in warn[0], warn
        # and both shards' URLs, so the operator knows which files
        urls = [src.replace("{000000..000001}", "%06d" % i) for i in (0, 1)]
        assert "(%s, %s)" % tuple(urls) in warn[0], (urls, warn)

        m2 = mounter(src)
        got = helpers.walk(m2.mnt)
        assert len(got) == 4 and len(set(got.values())) == 4, got
        assert {"c/x.jpg", "c/y.jpg"} <= set(got), got
        assert m2.stats()["errors"]["duplicate_key"] == 2
        warn = dup_warnings(m2.log())
        assert len(warn) == 1 and "shard 1 and again in shard 2" in warn[0], \
            warn
    finally:
        srv.stop()


# ---- one shard spelled two ways (issue 50) ------------------------------

@pytest.mark.parametrize("spelling", [
    "{u}/dd/././dd-000000.tar", "{u}/dd/dd-00000%30.tar",
    "{U}/x/../dd/dd-000000.tar"])
def test_shard_spelled_two_ways_fails_the_mount(mounter, tmp_path, spelling):
    """A list naming one shard twice, the second time in another spelling
    (dot segments, a percent-encoded digit, an upper-case scheme and host
    with the default port), fails the mount as the same spelling twice
    does: one line naming both spellings. Before, it mounted the shard's
    samples twice, as _dup files."""
    import nginx as nginx_mod
    root = tmp_path / "www"
    root.mkdir()
    srv = nginx_mod.Nginx(str(root), str(tmp_path / "nginx"))
    try:
        paired_shards(str(root))
        host = srv.url.split("://", 1)[1]
        second = spelling.format(u=srv.url, U="HTTP://" + host)
        lst = tmp_path / "twice.txt"
        lst.write_text("%s/dd/dd-000001.tar\n%s/dd/dd-000000.tar\n%s\n"
                       % (srv.url, srv.url, second))
        m = mounter(str(lst), check=False)
        if m.result.returncode == 0:
            dups = [p for p in helpers.list_paths(m.mnt) if "_dup" in p]
            pytest.fail("mounted, with %d _dup files: %r" % (len(dups), dups))
        err = m.result.stderr.strip()
        assert len(err.splitlines()) == 1, err
        assert "twice (shards 2 and 3, the second spelled " in err, err
        assert "/dd/dd-000000.tar" in err and second in err, err
    finally:
        srv.stop()
