"""test_check.py - `echofs --check SOURCE`: without mounting or writing the
cache, says whether the source is reachable, which index a mount would use
and how fast a shard comes; fails with one line when the source is bad."""

import os
import socket
import subprocess

import helpers
from helpers import ECHOFS, source_of


def check(*args, cache_dir, opts=""):
    r = subprocess.run([ECHOFS, "--check", "-o", "cache_dir=%s%s" % (cache_dir, opts)] +
                       list(args), capture_output=True, text=True, timeout=60,
                       stdin=subprocess.DEVNULL)
    return r


def test_check_with_index_beside(nginx, tmp_path):
    cache = tmp_path / "cache"
    r = check(source_of(nginx.url, "train"), cache_dir=cache)
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert lines[0].endswith("(60 shards)"), lines
    assert lines[1] == "index: beside the shards, 60000 samples", lines
    assert lines[2].startswith("first shard: ") and "MB/s" in lines[2], lines
    assert lines[-1] == "ok"
    # Nothing written: no cache entries, no index copy.
    assert not cache.exists() or not any(cache.rglob("*"))


def test_check_without_index_says_it_would_build(nginx, tmp_path):
    r = check(source_of(nginx.url, "test"), cache_dir=tmp_path / "c")
    assert r.returncode == 0, r.stderr
    assert "index: none: a mount would build one" in r.stdout
    assert "first shard: " in r.stdout


def test_check_unreachable_fails_with_one_line(tmp_path):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    log = tmp_path / "check.log"
    r = check("http://127.0.0.1:%d/ds/x-{0..3}.tar" % port,
              cache_dir=tmp_path / "c", opts=",log_file=%s,log_level=debug" % log)
    assert r.returncode == 1
    err = [l for l in r.stderr.splitlines() if l.startswith("echofs: error: ")]
    assert len(err) == 1, r.stderr
    # Fails fast for its own reason: the refused connection, retried only
    # on the first request and within the boot budget (the delays echofs
    # chose, not wall time; the subprocess timeout only guards a hang).
    assert "connection refused" in err[0], err[0]
    retries = helpers.retries_logged(log.read_text())
    assert len(retries) >= 1 and {u for u, _ in retries} == {retries[0][0]}, retries
    assert retries[0][0] in err[0], (retries, err[0])
    assert sum(d for _, d in retries) <= helpers.BOOT_RETRY_BUDGET_S + 0.01 * len(retries), retries


def test_check_takes_source_alone(nginx, tmp_path):
    r = check(source_of(nginx.url, "test"), str(tmp_path), cache_dir=tmp_path / "c")
    assert r.returncode != 0
    assert "--check takes SOURCE alone" in r.stderr
