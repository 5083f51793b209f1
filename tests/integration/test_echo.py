"""test_echo.py - echo mounts (-o echo=E): every open yields a sample of the
right class, files stay self-consistent for every kind of reader, stat does
not consume samples, and echoing can be tuned at run time."""

import concurrent.futures
import hashlib
import mmap
import os
import random
import shutil
import subprocess

import pytest

import helpers
from helpers import PYTHON

# Per connection: with 8 connections about 1.6 MB/s, some 600 samples/s,
# slower than the readers below, so adaptive echoing has work to do.
THROTTLE = "*.tar=slow:200000"


@pytest.fixture
def refs(dataset):
    """sha256 -> class, and key -> sha256, of the test split's samples."""
    by_hash, by_key = {}, {}
    for rel, digest in dataset.ref_hashes("test").items():
        cls, name = rel.split(os.sep)
        by_hash[digest] = cls
        by_key[os.path.splitext(name)[0]] = digest
    return by_hash, by_key


def echo_mount(mounter, fault_server, **opts):
    o = {"index": fault_server.index, "echo": 3, "seed": 7}
    o.update(opts)
    return mounter(fault_server.source, opts=o)


def paths_of(m):
    return sorted(helpers.list_paths(m.mnt))


def check_served(m, rel, data, refs):
    by_hash, by_key = refs
    digest = hashlib.sha256(data).hexdigest()
    cls = rel.split(os.sep)[0]
    assert by_hash.get(digest) == cls, "%s: bytes of no %s sample" % (rel, cls)


def read_python(path):
    with open(path, "rb") as f:
        size = os.fstat(f.fileno()).st_size
        data = f.read()
        src = os.getxattr(f.fileno(), "user.echofs.source").decode()
    assert len(data) == size, "read %d bytes, fstat says %d" % (len(data), size)
    return data, src


def test_every_open_serves_a_sample_of_its_class(mounter, fault_server, refs):
    fault_server.set_faults(THROTTLE)
    m = echo_mount(mounter, fault_server)
    paths = paths_of(m)
    assert len(paths) == 10000
    random.Random(1).shuffle(paths)
    for rel in paths[:3000]:
        data, src = read_python(m.path(rel))
        check_served(m, rel, data, refs)
        # The source named by the xattr is the sample that was served.
        assert refs[1][src] == hashlib.sha256(data).hexdigest(), rel
    st = m.stats()
    assert st["fresh_served"] + st["echoes_served"] == 3000
    assert st["echoes_served"] > 0, "throttled upstream but no echo: %s" % st
    assert st["effective_echo"] <= 3.0 + 1e-9
    # throttled upstream: the first opens waited for their class's first
    # sample, and that wait is counted (">= 0" could not fail)
    assert st["stall_s"] > 0, st


def test_readers_see_consistent_files(mounter, fault_server, refs, tmp_path):
    """stat/fstat sizes equal the bytes read, for every way of reading."""
    m = echo_mount(mounter, fault_server)
    paths = paths_of(m)[:40]
    from PIL import Image
    for i, rel in enumerate(paths):
        p = m.path(rel)
        how = i % 5
        if how == 0:
            data, _ = read_python(p)
        elif how == 1:
            size = os.stat(p).st_size
            with open(p, "rb") as f:
                data = f.read(size)
                assert f.read() == b"", "bytes past st_size"
            assert len(data) == size
        elif how == 2:
            with open(p, "rb") as f:
                size = os.fstat(f.fileno()).st_size
                with mmap.mmap(f.fileno(), size, prot=mmap.PROT_READ) as mm:
                    data = bytes(mm[:])
        elif how == 3:
            with Image.open(p) as im:
                im.load()
                assert im.size == (28, 28)
            continue
        else:
            out = tmp_path / "copy.jpg"
            subprocess.run(["cp", p, str(out)], check=True)
            data = out.read_bytes()
            cat = subprocess.run(["cat", p], check=True, capture_output=True).stdout
            check_served(m, rel, cat, refs)
        check_served(m, rel, data, refs)


def test_eight_concurrent_readers(mounter, fault_server, refs):
    fault_server.set_faults(THROTTLE)
    m = echo_mount(mounter, fault_server, echo_mode="fixed", echo=2)
    paths = paths_of(m)
    random.Random(2).shuffle(paths)
    chunks = [paths[i::8][:150] for i in range(8)]

    def work(chunk):
        bad = []
        for rel in chunk:
            data, _ = read_python(m.path(rel))
            try:
                check_served(m, rel, data, refs)
            except AssertionError as e:
                bad.append(str(e))
        return bad

    with concurrent.futures.ThreadPoolExecutor(8) as ex:
        bad = sum(ex.map(work, chunks), [])
    assert not bad, bad[:5]
    st = m.stats()
    assert st["fresh_served"] + st["echoes_served"] == 1200


def test_stat_and_ls_do_not_consume_samples(mounter, fault_server):
    m = echo_mount(mounter, fault_server)
    before = m.stats()
    out = subprocess.run(["ls", "-lR", m.mnt], check=True, capture_output=True, text=True)
    assert out.stdout.count(".jpg") == 10000
    for rel in paths_of(m)[:200]:
        os.stat(m.path(rel))
    after = m.stats()
    assert after["fresh_served"] == before["fresh_served"]
    assert after["echoes_served"] == before["echoes_served"]


def test_echo_changes_at_run_time(mounter, fault_server, refs):
    fault_server.set_faults(THROTTLE)
    m = echo_mount(mounter, fault_server)
    cfg = m.path(".echofs", "config")
    with open(cfg) as f:
        assert "echo=3" in f.read()
    with open(cfg, "w") as f:
        f.write("echo=1\necho_mode=fixed\n")
    with open(cfg) as f:
        text = f.read()
    assert "echo=1\n" in text and "echo_mode=fixed" in text
    paths = paths_of(m)
    random.Random(3).shuffle(paths)
    for rel in paths[:300]:
        data, _ = read_python(m.path(rel))
        check_served(m, rel, data, refs)
    st = m.stats()
    assert st["echoes_served"] == 0, "echo=1 must serve fresh samples only"
    assert st["echo"] == 1
    # A bad setting is refused and changes nothing.
    with pytest.raises(OSError):
        with open(cfg, "w") as f:
            f.write("echo=0.5\n")
    assert m.stats()["echo"] == 1


def test_echo_mount_is_read_only_but_config(mounter, fault_server):
    m = echo_mount(mounter, fault_server)
    rel = paths_of(m)[0]
    for action in (lambda: open(m.path(rel), "wb"),
                   lambda: open(m.path("0", "new.jpg"), "wb"),
                   lambda: os.mkdir(m.path("new")),
                   lambda: os.unlink(m.path(rel))):
        with pytest.raises(OSError) as e:
            action()
        assert e.value.errno in (30, 13), e.value  # EROFS or EACCES
