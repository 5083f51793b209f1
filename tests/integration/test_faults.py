"""test_faults.py - a misbehaving server (tests/fault_server.py): 503s,
truncated bodies, ignored ranges, custom headers. Faults are switched on after
the mount so they hit the shard fetches, not the mount itself."""

import os

import helpers


def read_all_correct(m, ref, step=1):
    bad = []
    for p in sorted(ref)[::step]:
        err = helpers.read_errno(m.path(p))
        if err or helpers.sha256_file(m.path(p)) != ref[p]:
            bad.append((p, err))
    assert bad == [], "%d bad files, first %r" % (len(bad), bad[:5])


def test_503_is_retried(fault_server, dataset, mounter):
    m = mounter(fault_server.source, opts={"index": fault_server.index})
    fault_server.set_faults("/test/*.tar=status:503,count=3")
    read_all_correct(m, dataset.ref_hashes("test"))
    s = m.stats()
    assert s["retries"] >= 3, s
    assert s["errors"]["shard_failed"] == 0


def test_truncated_body_is_resumed(fault_server, dataset, mounter):
    m = mounter(fault_server.source, opts={"index": fault_server.index})
    fault_server.set_faults("/test/*.tar=truncate:300000,count=3")
    read_all_correct(m, dataset.ref_hashes("test"))
    s = m.stats()
    assert s["resumes"] >= 1, s
    assert fault_server.stats()["ranges"] >= 1, "a resume should ask for a Range"


def test_server_ignoring_range(fault_server, dataset, mounter):
    # Truncations force resumes; the resumes get 200 + the whole body.
    # A demand range GET (issue 46) may take a truncation rule's turn
    # without being cut (its body is under 300000 bytes), and the first
    # one refused turns ranges off: count=5 leaves at least two cuts.
    m = mounter(fault_server.source, opts={"index": fault_server.index})
    fault_server.set_faults("/test/*.tar=truncate:300000,count=5",
                            "/test/*.tar=ignore-range")
    fault_server.reset_stats()
    read_all_correct(m, dataset.ref_hashes("test"))
    # The faults were injected: two bodies were cut and resumed, and a
    # resume answered with the whole body fetched its first 300000 bytes
    # again (without ignore-range, 8 KiB more than the shards).
    s = m.stats()
    shards = sum(os.path.getsize(p) for p in dataset.shards("test"))
    assert s["resumes"] >= 2, s
    assert fault_server.stats()["ranges"] >= 2, fault_server.stats()
    assert s["bytes_fetched"] >= shards + 300000, (s["bytes_fetched"], shards)


def test_ignore_range_uncached(fault_server, dataset, mounter, tmpfs):
    """Range reads (no room to cache) answered with whole shards."""
    cache = tmpfs("512k")
    m = mounter(fault_server.source, cache_dir=cache,
                opts={"index": fault_server.index})
    fault_server.set_faults("/test/*.tar=ignore-range")
    fault_server.reset_stats()
    read_all_correct(m, dataset.ref_hashes("test"), step=487)
    # The fault was injected: the files were read with range GETs, each
    # answered with its whole shard (25 MB fetched for 16 KB served;
    # without the fault, the two are equal).
    s = m.stats()
    assert s["range_reads"] >= 1, s
    assert fault_server.stats()["ranges"] >= 1, fault_server.stats()
    assert s["bytes_fetched"] > 10 * s["bytes_served"], s


def test_header_file_reaches_server(fault_server, dataset, mounter, tmp_path):
    hf = tmp_path / "headers"
    hf.write_text("X-Echofs-Test: hello-42\nAuthorization: Bearer s3cr3t-t0ken\n")
    m = mounter(fault_server.source, opts={"index": fault_server.index,
                                           "header_file": str(hf),
                                           "log_level": "debug"})
    read_all_correct(m, dataset.ref_hashes("test"), step=1000)
    last = fault_server.last_headers()
    headers = {k.lower(): v for k, v in last["headers"].items()}
    assert last["path"].startswith("/test/"), last
    assert headers.get("x-echofs-test") == "hello-42", headers
    assert headers.get("authorization") == "Bearer s3cr3t-t0ken", headers
    assert "s3cr3t-t0ken" not in m.log(), "credentials must not be logged"


def test_content_length_longer_than_body_at_mount(fault_server, mounter):
    """Issue 21 finding 4: a shard whose Content-Length (HEAD and GET) is
    longer than the body it sends, indexed at mount: the mount fails saying
    the body was short, not "timed out"."""
    fault_server.set_faults("/test/test-000001.tar=long-length:1000")
    # The stalled body is noticed after stall_timeout: 1 s, not 10.
    m = mounter(fault_server.source, opts={"stall_timeout": 1}, check=False)
    err = m.result.stderr
    assert m.result.returncode != 0, "mounted over a short shard"
    assert "test-000001.tar" in err, err
    assert "shorter than Content-Length" in err, err
    assert "timed out" not in err, err
