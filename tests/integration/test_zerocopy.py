"""test_zerocopy.py - cold reads spliced from verified cache files (-o
zerocopy, on by default) serve the same bytes as copied ones, never a byte
that changed on disk after the cache checked it, and Python's open() costs
exactly one FUSE_IOCTL (isatty) per file, answered ENOTTY."""

import http.server
import io
import json
import os
import random
import subprocess
import sys
import tarfile
import threading
import time

import pytest

import helpers

sys.path.insert(0, os.path.join(helpers.REPO, "tools", "dev"))
import nginx as nginx_mod  # noqa: E402  (tools/dev/nginx.py)

INDEXER = os.path.join(helpers.BUILD, "tools", "echofs-index")
NSHARDS = 2
PER_SHARD = 24


def sample_bytes(rng, i):
    # Mostly over two pages (spliced); every sixth under (always copied).
    size = rng.randrange(500, 4000) if i % 6 == 0 else rng.randrange(9000, 90000)
    return bytes(rng.getrandbits(8) for _ in range(size))


def add_member(tar, name, data):
    info = tarfile.TarInfo(name)
    info.size = len(data)
    tar.addfile(info, io.BytesIO(data))


@pytest.fixture(scope="module")
def photo_site(tmp_path_factory):
    """Two shards of random-byte .jpg members behind a private nginx, with
    an index (checksums included) written by echofs-index."""
    root = str(tmp_path_factory.mktemp("zc"))
    www = os.path.join(root, "www")
    os.makedirs(www)
    rng = random.Random(11)
    want = {}
    for s in range(NSHARDS):
        with tarfile.open(os.path.join(www, "zc-%06d.tar" % s), "w",
                          format=tarfile.USTAR_FORMAT) as tar:
            for j in range(PER_SHARD):
                key = "k%02d%03d" % (s, j)
                label = str(j % 3)
                data = sample_bytes(rng, j)
                add_member(tar, key + ".jpg", data)
                add_member(tar, key + ".cls", label.encode())
                want[os.path.join(label, key + ".jpg")] = data
    srv = nginx_mod.Nginx(www, os.path.join(root, "nginx"))
    try:
        index = os.path.join(root, "zc.echofs-index")
        shards = [os.path.join(www, "zc-%06d.tar" % s) for s in range(NSHARDS)]
        subprocess.run([INDEXER, "--base-url", srv.url, "-o", index] + shards,
                       check=True, capture_output=True)
        source = "%s/zc-{000000..%06d}.tar" % (srv.url, NSHARDS - 1)
        yield {"source": source, "index": index, "want": want, "www": www}
    finally:
        srv.stop()


def read_all(m, paths):
    got = {}
    for p in paths:
        fd = os.open(m.path(p), os.O_RDONLY)
        try:
            chunks = []
            while True:
                b = os.read(fd, 1 << 20)
                if not b:
                    break
                chunks.append(b)
        finally:
            os.close(fd)
        got[p] = b"".join(chunks)
    return got


def ioctls(m):
    """stats' ioctl count, read with os.open (no isatty of its own)."""
    data = read_all(m, [os.path.join(".echofs", "stats")])
    return json.loads(next(iter(data.values())))["ioctls"]


def wait_views(m, least=1, timeout=10.0):
    """zerocopy_reads once it reaches `least`: a READ is a view only when the
    kernel asks for the whole file at once (readahead may split it), and the
    pusher's views of a touched shard come a moment later."""
    deadline = time.monotonic() + timeout
    while True:
        n = m.stats()["zerocopy_reads"]
        if n >= least or time.monotonic() > deadline:
            return n
        time.sleep(0.05)


def big(want):
    return [p for p, d in want.items() if len(d) >= 8192]


def test_spliced_reads_same_bytes_and_off_switch(photo_site, mounter, tmp_path):
    want = photo_site["want"]
    cache = str(tmp_path / "cache")
    opts = {"index": photo_site["index"]}
    # Cold: fetched into the cache while read.
    m = mounter(photo_site["source"], cache, opts, name="cold")
    assert read_all(m, sorted(want)) == want
    m.umount()
    # Warm disk cache, cold page cache: every big file is a view.
    m = mounter(photo_site["source"], cache, opts, name="warm")
    assert read_all(m, sorted(want)) == want
    assert wait_views(m) >= 1
    st = m.stats()
    assert st["errors"]["verify"] == 0 and st["errors"]["cache_corrupt"] == 0
    m.umount()
    # -o zerocopy=0: the same bytes, copied.
    m = mounter(photo_site["source"], cache, dict(opts, zerocopy=0), name="off")
    assert read_all(m, sorted(want)) == want
    assert m.stats()["zerocopy_reads"] == 0


def cache_file_of(cache, shard_path):
    with open(shard_path, "rb") as f:
        head = f.read(4096)
    d = os.path.join(cache, "shards")
    for n in os.listdir(d):
        if n.endswith(".shard"):
            with open(os.path.join(d, n), "rb") as f:
                if f.read(4096) == head:
                    return os.path.join(d, n)
    raise AssertionError("no cache file holds %s" % shard_path)


def test_bytes_changed_on_disk_after_the_check_are_not_spliced(photo_site, mounter,
                                                                tmp_path):
    """Shard 0 cached and mapped (files A0, A read, A as a view), then B's bytes
    are changed in the cache file: B's READ must not splice them. The view
    hashes B against the index first, sees the mismatch and leaves the read
    to the copying path, which drops the entry and fetches the shard again."""
    want = photo_site["want"]
    cache = str(tmp_path / "cache")
    opts = {"index": photo_site["index"]}
    m = mounter(photo_site["source"], cache, opts, name="fill")
    read_all(m, sorted(want))
    m.umount()
    shard0 = os.path.join(photo_site["www"], "zc-000000.tar")
    members = {key + "." + ext: (off, size)
               for off, size, _, key, ext in helpers.shard_samples(shard0)}
    paths = [p for p in big(want) if os.path.basename(p).startswith("k00")]
    a0, a, b = paths[0], paths[1], paths[2]
    m = mounter(photo_site["source"], cache, opts, name="check")
    # By path only (no listing): the pusher cannot store B beforehand. The
    # first read of a shard in a mount is copied (it pins the entry); the
    # next one, or the pusher's store of it, is a view and maps the file.
    assert read_all(m, [a0, a]) == {a0: want[a0], a: want[a]}
    assert wait_views(m) >= 1
    off, size = members[os.path.basename(b)]
    with open(cache_file_of(cache, shard0), "r+b") as f:
        f.seek(off + size // 2)
        f.write(bytes(x ^ 0xFF for x in want[b][size // 2:size // 2 + 64]))
    assert read_all(m, [b]) == {b: want[b]}
    st = m.stats()
    assert st["errors"]["cache_corrupt"] + st["errors"]["verify"] >= 1, st


def test_python_open_costs_one_ioctl_per_file(photo_site, mounter, tmp_path):
    """The kernel forwards isatty()'s TCGETS on every open (fs/fuse/ioctl.c
    keeps no memory of the answer): one FUSE_IOCTL per Python open(), none
    per os.open(), and the bytes are the same."""
    want = photo_site["want"]
    m = mounter(photo_site["source"], str(tmp_path / "cache"),
                {"index": photo_site["index"]})
    paths = sorted(want)[:20]
    before = ioctls(m)
    for p in paths:
        with open(m.path(p), "rb") as f:
            assert f.read() == want[p]
            with pytest.raises(OSError):
                os.tcgetpgrp(f.fileno())  # an ioctl too: ENOTTY
    mid = ioctls(m)
    assert mid - before == 2 * len(paths), (before, mid)
    assert read_all(m, paths) == {p: want[p] for p in paths}
    assert ioctls(m) == mid


# ---- shards still downloading ----

SLOW_RATE = "200k"  # nginx limit_rate: a shard of about 1 MB takes ~5 s


def throttled_site(photo_site, tmp_path_factory, rate):
    """The same shards behind a second nginx that sends each response at
    rate, with its own index (the index holds the URLs)."""
    root = str(tmp_path_factory.mktemp("zcslow"))
    srv = nginx_mod.Nginx(photo_site["www"], os.path.join(root, "nginx"),
                          limit_rate=rate)
    try:
        index = os.path.join(root, "slow.echofs-index")
        shards = [os.path.join(photo_site["www"], "zc-%06d.tar" % s)
                  for s in range(NSHARDS)]
        subprocess.run([INDEXER, "--base-url", srv.url, "-o", index] + shards,
                       check=True, capture_output=True)
        source = "%s/zc-{000000..%06d}.tar" % (srv.url, NSHARDS - 1)
        yield dict(photo_site, source=source, index=index)
    finally:
        srv.stop()


@pytest.fixture(scope="module")
def slow_site(photo_site, tmp_path_factory):
    yield from throttled_site(photo_site, tmp_path_factory, SLOW_RATE)


def shard0_big(site):
    """Shard 0's files of 8 KiB and more in tar order, with (offset, size)
    of each member in the shard."""
    shard0 = os.path.join(site["www"], "zc-000000.tar")
    members = {key + "." + ext: (off, size)
               for off, size, _, key, ext in helpers.shard_samples(shard0)}
    paths = sorted((p for p in big(site["want"])
                    if os.path.basename(p).startswith("k00")),
                   key=lambda p: members[os.path.basename(p)][0])
    return paths, {p: members[os.path.basename(p)] for p in paths}


def wait_fetched(m, least, timeout=30.0):
    """Until the (only) stream has delivered `least` bytes of its shard."""
    deadline = time.monotonic() + timeout
    while m.stats()["bytes_fetched"] < least:
        assert time.monotonic() < deadline, m.stats()
        time.sleep(0.05)


def streaming(m):
    st = m.stats()
    return st["fetches_active"] >= 1 and st["shards_cached"] == 0


def test_streaming_shard_files_spliced_from_the_download(slow_site, mounter,
                                                         tmp_path):
    """Files of shard 0 whose bytes have arrived, read while the shard is
    still downloading, are spliced from the download's temp file (counted in
    zerocopy_streaming_reads) and byte-exact."""
    want = slow_site["want"]
    paths, where = shard0_big(slow_site)
    m = mounter(slow_site["source"], str(tmp_path / "cache"),
                {"index": slow_site["index"]})
    # The first READ starts the stream and waits for its bytes (copied).
    assert read_all(m, paths[:1]) == {paths[0]: want[paths[0]]}
    early = paths[1:5]
    off, size = where[early[-1]]
    wait_fetched(m, off + size)
    assert streaming(m), m.stats()
    assert read_all(m, early) == {p: want[p] for p in early}
    st = m.stats()
    assert streaming(m), "the shard finished before the reads: %s" % st
    # A READ is a view only when the kernel asks for the whole file at once.
    assert st.get("zerocopy_streaming_reads", 0) >= 1, st
    assert st["zerocopy_reads"] >= st["zerocopy_streaming_reads"]
    assert st["errors"]["verify"] == 0 and st["errors"]["cache_corrupt"] == 0
    # The rest, and everything once more after the commit.
    assert read_all(m, paths) == {p: want[p] for p in paths}


def temp_file_of(cache):
    d = os.path.join(cache, "shards")
    tmp = [n for n in os.listdir(d) if n.startswith(".tmp-")]
    assert len(tmp) == 1, tmp
    return os.path.join(d, tmp[0])


class HoldingServer:
    """A static server (HEAD, GET, single Range, a strong ETag) over www
    whose GETs of hold_path send the body up to byte hold_at at once and
    the rest only after release(): the download of that shard cannot end
    before the test lets it, however loaded the machine."""

    def __init__(self, www, hold_path, hold_at):
        self.www, self.hold_path, self.hold_at = www, hold_path, hold_at
        self.released = threading.Event()
        outer = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, fmt, *args):
                pass

            def do_HEAD(self):
                outer.serve(self, body=False)

            def do_GET(self):
                outer.serve(self, body=True)

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.url = "http://127.0.0.1:%d" % self.httpd.server_address[1]
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def serve(self, h, body):
        path = os.path.join(self.www, os.path.basename(h.path.split("?")[0]))
        if not os.path.isfile(path):
            h.send_error(404)
            return
        with open(path, "rb") as f:
            data = f.read()
        st = os.stat(path)
        start, end = 0, len(data)
        rng = h.headers.get("Range", "")
        if rng.startswith("bytes="):
            a, _, b = rng[6:].partition("-")
            start, end = int(a), (int(b) + 1 if b else len(data))
        h.send_response(206 if rng else 200)
        h.send_header("Content-Length", str(end - start))
        h.send_header("ETag", '"%x-%x"' % (st.st_size, st.st_mtime_ns))
        h.send_header("Accept-Ranges", "bytes")
        if rng:
            h.send_header("Content-Range", "bytes %d-%d/%d" % (start, end - 1, len(data)))
        h.end_headers()
        if not body:
            return
        try:
            cut = end
            if h.path.split("?")[0] == self.hold_path:
                cut = min(end, max(start, self.hold_at))
            h.wfile.write(data[start:cut])
            h.wfile.flush()
            if cut < end:
                # a guard against hanging forever if the test fails first
                self.released.wait(300)
                h.wfile.write(data[cut:end])
        except OSError:
            pass  # the client broke it off (a resume)

    def release(self):
        self.released.set()

    def stop(self):
        self.released.set()
        self.httpd.shutdown()
        self.httpd.server_close()


def wait_stats(m, done, guard=120.0):
    """Stats once done(stats) holds. guard only keeps a broken mount from
    hanging the run; it is no claim about speed."""
    deadline = time.monotonic() + guard
    while True:
        st = m.stats()
        if done(st):
            return st
        assert time.monotonic() < deadline, ("never happened", st)
        time.sleep(0.05)


def test_changed_download_bytes_are_not_spliced(photo_site, mounter, tmp_path):
    """A file's bytes changed in the download's temp file after they arrived
    (and before the file is read): the READ must not splice them. The view
    hashes the file against the index first, sees the mismatch, counts it
    (zerocopy_refused) and leaves the read to the copying path, which counts
    the damage and serves a good copy. The server holds the rest of the
    shard until b's READ has met the changed bytes, so the download cannot
    finish (and be fetched again, which a view may then legitimately serve)
    first: every count is exact."""
    want = photo_site["want"]
    paths, where = shard0_big(photo_site)
    b = paths[2]
    off, size = where[b]
    srv = HoldingServer(photo_site["www"], "/zc-000000.tar", off + size + 512)
    try:
        index = str(tmp_path / "held.echofs-index")
        subprocess.run([INDEXER, "--base-url", srv.url, "-o", index] +
                       [os.path.join(photo_site["www"], "zc-%06d.tar" % s)
                        for s in range(NSHARDS)], check=True, capture_output=True)
        source = "%s/zc-{000000..%06d}.tar" % (srv.url, NSHARDS - 1)
        cache = str(tmp_path / "cache")
        m = mounter(source, cache, {"index": index})
        assert read_all(m, paths[:1]) == {paths[0]: want[paths[0]]}
        wait_fetched(m, off + size)
        assert streaming(m), m.stats()
        with open(temp_file_of(cache), "r+b") as f:
            f.seek(off + size // 2)
            f.write(bytes(x ^ 0xFF for x in want[b][size // 2:size // 2 + 64]))
        before = m.stats()
        assert before["zerocopy_refused"] == 0, before
        got = {}
        reader = threading.Thread(target=lambda: got.update(read_all(m, [b])))
        reader.start()
        # b's READ: its view refused, the copying path finds the damage
        # and waits for the next copy, which the held shard cannot give yet
        # (or, broken, spliced or answered: then the asserts say how)
        st = wait_stats(m, lambda s: (s["zerocopy_refused"] >= 1 and
                                      s["errors"]["verify"] >= 1) or
                        s["zerocopy_reads"] != before["zerocopy_reads"] or
                        not reader.is_alive())
        assert streaming(m), st
        assert st["zerocopy_refused"] == 1, st
        assert st["errors"]["verify"] == 1, st
        assert st["zerocopy_reads"] == before["zerocopy_reads"], st
        assert st["zerocopy_streaming_reads"] == before["zerocopy_streaming_reads"], st
        srv.release()
        reader.join()
        assert got == {b: want[b]}
        # nothing else read b or any file from a download since
        st = m.stats()
        assert st["zerocopy_streaming_reads"] == before["zerocopy_streaming_reads"], st
    finally:
        srv.release()
        if "m" in locals():
            m.umount()
        srv.stop()
