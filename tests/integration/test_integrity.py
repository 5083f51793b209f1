"""test_integrity.py - a server that answers with wrong bytes under plausible
headers (tests/hostile_server.py): echofs serves every file either with the
right bytes or fails it with EIO, and counts the failure in errors.verify.
Never a wrong byte, never 0 errors."""

import errno
import json
import os
import subprocess
import tarfile
import time

import pytest

import helpers
from helpers import PYTHON

HOSTILE = os.path.join(helpers.REPO, "tests", "hostile_server.py")
INDEXER = os.path.join(helpers.BUILD, "tools", "echofs-index")
SHARDS = ("test-000000.tar", "test-000001.tar")


def xor_images(data, path):
    """The shard with every image member's bytes changed (same layout)."""
    buf = bytearray(data)
    for off, size, _, _, _ in helpers.shard_samples(path):
        buf[off:off + size] = bytes(b ^ 0x5A for b in buf[off:off + size])
    return bytes(buf)


def padded_member(name, size):
    """A ustar member that is not part of any sample: moves the others."""
    info = tarfile.TarInfo(name)
    info.size = size
    return info.tobuf(format=tarfile.USTAR_FORMAT) + b"x" * size


class Hostile:
    def __init__(self, dataset, work):
        self.root = os.path.join(work, "root", "test")
        self.alt = os.path.join(work, "alt", "test")
        self.moved = os.path.join(work, "moved", "test")
        for d in (self.root, self.alt, self.moved):
            os.makedirs(d)
        for name in SHARDS:
            src = os.path.join(dataset.shard_dir("test"), name)
            os.link(src, os.path.join(self.root, name))
            with open(src, "rb") as f:
                data = f.read()
            with open(os.path.join(self.alt, name), "wb") as f:
                f.write(xor_images(data, src))
            with open(os.path.join(self.moved, name), "wb") as f:
                f.write(padded_member("aaa.pad", 1024) + data)
        self.log = open(os.path.join(work, "hostile.log"), "w")
        self.proc = None
        self.port_file = os.path.join(work, "port")

    def start(self, alt):
        self.proc, self.url = helpers.start_port_file_server(
            [PYTHON, HOSTILE, "--root", os.path.dirname(self.root),
             "--alt", os.path.dirname(alt), "--port-file", self.port_file],
            self.port_file, self.log, timeout=15, what="hostile server")
        self.source = "%s/test/test-{000000..000001}.tar" % self.url

    def stop(self):
        if self.proc and self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(10)

    def set_mode(self, mode):
        helpers.http_get(self.url + "/_mode", data=mode.encode(), method="PUT")

    def stats(self):
        return json.loads(helpers.http_get(self.url + "/_stats"))

    def index_v2(self, path):
        """The index echofs-index writes for the shards (no ETags)."""
        r = subprocess.run([INDEXER, "--base-url", self.url + "/test", "-o",
                            path] + [os.path.join(self.root, n) for n in SHARDS],
                           capture_output=True, text=True)
        assert r.returncode == 0, r.stderr
        return path

    def index_v1(self, path):
        """A format 1 index without ETags (no checksums to check against)."""
        helpers.write_index(path, [("%s/test/%s" % (self.url, n),
                                    os.path.join(self.root, n), None)
                                   for n in SHARDS])
        return path


@pytest.fixture
def hostile(dataset, tmp_path):
    h = Hostile(dataset, str(tmp_path / "hostile"))
    started = []

    def start(alt="alt"):
        h.start(h.alt if alt == "alt" else h.moved)
        started.append(h)
        return h

    yield start
    h.stop()
    h.log.close()


def read_tree(m, ref, step=1):
    """(wrong, failed, good): files served with wrong bytes, files failing
    (path, errno), files read right."""
    wrong, failed, good = [], [], 0
    paths = sorted(helpers.list_paths(m.mnt))
    assert paths, "empty tree"
    for p in paths[::step]:
        err = helpers.read_errno(m.path(p))
        if err:
            failed.append((p, err))
        elif helpers.sha256_file(m.path(p)) != ref[p]:
            wrong.append(p)
        else:
            good += 1
    return wrong, failed, good


def assert_refused(m, ref, step=1):
    """Every file right or EIO, some EIO, and errors.verify counts them."""
    wrong, failed, _ = read_tree(m, ref, step)
    assert wrong == [], "%d files served with wrong bytes, e.g. %r" % (
        len(wrong), wrong[:3])
    assert failed, "the hostile server's bytes went unnoticed"
    assert {e for _, e in failed} == {errno.EIO}, failed[:5]
    s = m.stats()
    assert s["errors"]["verify"] > 0, s["errors"]


def uncached(tmpfs):
    """A cache too small for any shard: every read is a range GET."""
    return tmpfs("512k")


def test_honest_server_checks_pass(hostile, dataset, mounter, tmp_path):
    h = hostile()
    m = mounter(h.source, opts={"index": h.index_v2(str(tmp_path / "ix"))})
    wrong, failed, good = read_tree(m, dataset.ref_hashes("test"))
    assert (wrong, failed) == ([], []) and good > 0
    assert m.stats()["errors"]["verify"] == 0


def test_lying_range_on_resume(hostile, dataset, mounter, tmp_path):
    h = hostile()
    ix = h.index_v2(str(tmp_path / "ix"))
    h.set_mode("lie-range")
    m = mounter(h.source, opts={"index": ix})
    assert_refused(m, dataset.ref_hashes("test"))


def test_lying_range_in_range_mode(hostile, dataset, mounter, tmp_path, tmpfs):
    h = hostile()
    ix = h.index_v2(str(tmp_path / "ix"))
    h.set_mode("lie-range")
    m = mounter(h.source, cache_dir=uncached(tmpfs), opts={"index": ix})
    # Every 37th file (55 of 2,000, in both shards): each refused read costs
    # four range GETs from the Python server (about 0.2 s), so every 13th
    # made this test last about 30 s for the same check.
    assert_refused(m, dataset.ref_hashes("test"), step=37)


def test_same_size_html(hostile, dataset, mounter, tmp_path):
    h = hostile()
    ix = h.index_v2(str(tmp_path / "ix"))
    h.set_mode("html")
    m = mounter(h.source, opts={"index": ix})
    assert_refused(m, dataset.ref_hashes("test"))


def test_same_size_gzip(hostile, dataset, mounter, tmp_path):
    h = hostile()
    ix = h.index_v2(str(tmp_path / "ix"))
    m = mounter(h.source, opts={"index": ix})
    # After the mount: its probe (HEAD) would already refuse the encoding.
    h.set_mode("gzip")
    assert_refused(m, dataset.ref_hashes("test"))
    seen = h.stats()["accept_encoding"]
    assert seen and set(seen) == {"identity"}, seen


def test_overwrite_during_transfer(hostile, dataset, mounter, tmp_path):
    h = hostile()
    ix = h.index_v2(str(tmp_path / "ix"))
    cache = str(tmp_path / "cache")
    h.set_mode("overwrite")
    m = mounter(h.source, cache_dir=cache, opts={"index": ix})
    assert_refused(m, dataset.ref_hashes("test"))
    m.umount()
    # No mixed shard may have been kept: the next mount, against an honest
    # server, serves every file right.
    h.set_mode("ok")
    m2 = mounter(h.source, cache_dir=cache, opts={"index": ix})
    wrong, failed, good = read_tree(m2, dataset.ref_hashes("test"))
    assert (wrong, failed) == ([], []) and good > 0


def test_moved_members_without_etag(hostile, dataset, mounter, tmp_path, tmpfs):
    """Format 1 index, no ETags: only the shard size can tell."""
    h = hostile(alt="moved")
    ix = h.index_v1(str(tmp_path / "ix"))
    h.set_mode("moved")
    m = mounter(h.source, cache_dir=uncached(tmpfs), opts={"index": ix})
    assert_refused(m, dataset.ref_hashes("test"), step=13)


def test_echo_and_prep_mounts_see_only_checked_bytes(hostile, dataset, mounter,
                                                     tmp_path):
    """The echo pool and preprocessing read through the same checks: against
    a server lying from the start, they serve nothing wrong, count the
    mismatches and do not hang."""
    h = hostile()
    ix = h.index_v2(str(tmp_path / "ix"))
    h.set_mode("overwrite")
    m = mounter(h.source, opts={"index": ix, "echo": 2, "seed": 3,
                                "size": 24, "format": "ppm"})
    errs = [helpers.read_errno(m.path(cls, name))
            for cls in sorted(os.listdir(m.mnt))[:3]
            for name in sorted(os.listdir(m.path(cls)))[:2]]
    # No read hung: each was served or refused (EIO), none waited out
    # read_timeout (ETIMEDOUT), which is what a hang looks like to a reader.
    assert set(errs) <= {0, errno.EIO}, errs
    assert errs.count(0) > 0, errs
    # Let the pool's streamer go on past the overwrite.
    deadline = time.monotonic() + 20
    while m.stats()["errors"]["verify"] == 0 and time.monotonic() < deadline:
        time.sleep(0.2)
    s = m.stats()
    assert s["errors"]["verify"] > 0, s["errors"]
    # The pool decoded only samples that passed their checks (the changed
    # ones are not JPEGs any more: decoding them would count as image
    # errors).
    assert s["errors"]["image"] == 0, s["errors"]
