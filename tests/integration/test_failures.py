"""test_failures.py - servers and disks that go away: clear and fast mount
failures, per-shard EIO, offline remounts from the cache, caches that can't
hold data."""

import errno
import os
import socket

import helpers
from helpers import source_of


def dead_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def assert_clean_failure(m, r):
    """One line naming the cause, nothing mounted. Fail-fast is checked by
    each test through events (requests, retries), not by a clock: the
    mounter's subprocess timeout only guards against a hang."""
    assert r.returncode != 0, "mount should have failed"
    lines = [l for l in r.stderr.splitlines() if l.strip()]
    assert len(lines) == 1, "want one line on stderr, got %r" % r.stderr
    assert lines[0].startswith("echofs:"), lines[0]
    assert helpers.mount_entry(m.mnt) is None
    return lines[0]


def test_unreachable_server_fails_fast(mounter):
    src = source_of("http://127.0.0.1:%d" % dead_port(), "train")
    m = mounter(src, check=False, opts={"log_level": "debug"})
    line = assert_clean_failure(m, m.result)
    # Its own cause, not a deadline's; retried within the boot budget (the
    # delays it scheduled, not wall time) on the first request only, not
    # once per shard.
    assert "connection refused" in line.lower(), line
    assert "timed out" not in line.lower(), line
    retries = helpers.retries_logged(m.log())
    assert len(retries) >= 1, m.log()
    assert {u for u, _ in retries} == {retries[0][0]}, retries
    assert retries[0][0] in line, (retries[0][0], line)
    assert sum(d for _, d in retries) <= helpers.BOOT_RETRY_BUDGET_S + 0.01 * len(retries), retries


def test_shard_404_at_index_time_fails_fast(fault_server, mounter):
    # test-000010.tar does not exist and there is no index beside the shards.
    src = fault_server.url + "/test/test-{000000..000010}.tar"
    m = mounter(src, check=False)
    line = assert_clean_failure(m, m.result)
    assert "test-000010" in line, "the error should name the shard: %s" % line
    assert "404" in line, line
    # A 404 is final: asked once, and no shard's body fetched twice.
    st = fault_server.stats()
    assert st["by_path"].get("/test/test-000010.tar") == 1, st
    assert all(n == 1 for n in st["gets"].values()), st


BAD_INDEXES = {
    "garbage": (b"\x00\x01 this is not an index\n", "line 1: not an echofs index"),
    "bad_version": (b"echofs-index 99\n", "line 1: not an echofs index"),
    "bad_shard_line": (b"echofs-index 1\nS\thttp://x/a.tar\tnotanumber\t-\n",
                       "line 2: bad shard size"),
}


def test_corrupt_index_fails_fast(fault_server, mounter, tmp_path):
    # Also: a well-formed index whose sample lies past its shard's end.
    good = open(fault_server.index, "rb").read().split(b"\n")
    past_end = [l for l in good if not l.startswith(b"M\t0\t")]
    past_end.insert(61, b"M\t0\t999999999\t10\t1\tevil\tjpg")
    cases = dict(BAD_INDEXES, past_end=(b"\n".join(past_end),
                                        "line 62: sample lies outside its shard"))
    for name, (body, why) in cases.items():
        path = tmp_path / ("%s.echofs-index" % name)
        path.write_bytes(body)
        fault_server.reset_stats()
        m = mounter(fault_server.source, opts={"index": str(path)},
                    name=name, check=False)
        line = assert_clean_failure(m, m.result)
        assert "corrupt index %s: %s" % (path, why) in line, line
        # refused while reading the index, before any request
        assert fault_server.stats()["requests"] == 0, (name, fault_server.stats())


def test_shard_404_at_read_time_is_eio_for_that_shard_only(fault_server, dataset, mounter):
    m = mounter(fault_server.source, opts={"index": fault_server.index})
    fault_server.set_faults("/test/test-000003.tar=status:404")
    ref = dataset.ref_hashes("test")
    wrong, eio_ok, other_errors = [], 0, []
    for p, digest in sorted(ref.items()):
        in_shard3 = 3000 <= int(p.split("_")[-1][:6]) < 4000
        err = helpers.read_errno(m.path(p))
        if in_shard3:
            if err == errno.EIO:
                eio_ok += 1
            else:
                wrong.append((p, err))
        elif err:
            other_errors.append((p, err))
        elif helpers.sha256_file(m.path(p)) != digest:
            wrong.append((p, "bytes"))
    assert other_errors == [], other_errors[:5]
    assert wrong == [], wrong[:5]
    assert eio_ok == 1000
    s = m.stats()
    assert s["errors"]["shard_failed"] >= 1 or s["errors"]["http_4xx"] >= 1, s["errors"]


def test_remount_offline_from_cache(private_nginx, dataset, mounter, tmp_path):
    cache = str(tmp_path / "shared-cache")
    src = source_of(private_nginx.url, "test")
    m1 = mounter(src, cache_dir=cache, name="first")
    assert helpers.walk(m1.mnt) == dataset.ref_hashes("test")
    m1.umount()
    private_nginx.stop()
    m2 = mounter(src, cache_dir=cache, name="offline")
    assert helpers.walk(m2.mnt) == dataset.ref_hashes("test")
    s = m2.stats()
    assert s["shards_cached"] == 10
    assert s["errors"]["shard_failed"] == 0


def sample_paths(ref, step):
    return sorted(ref)[::step]


def check_uncached(m, ref, step):
    for p in sample_paths(ref, step):
        assert helpers.sha256_file(m.path(p)) == ref[p], p
    log = m.log()
    assert " warn: " in log or " error: " in log, "expected a warning about the cache"


def test_tiny_tmpfs_cache_serves_uncached(nginx, dataset, mounter, tmpfs):
    cache = tmpfs("512k")
    m = mounter(source_of(nginx.url, "test"), cache_dir=cache)
    check_uncached(m, dataset.ref_hashes("test"), 10)
    s = m.stats()
    assert s["range_reads"] > 0, "reads should fall back to range GETs"


def test_unwritable_cache_dir_serves_uncached(nginx, dataset, mounter, tmpfs):
    # Root ignores permission bits; a read-only filesystem really refuses.
    cache = tmpfs("1m", ro=True)
    m = mounter(source_of(nginx.url, "test"), cache_dir=cache)
    check_uncached(m, dataset.ref_hashes("test"), 25)
    assert m.stats()["range_reads"] > 0
