"""test_echo_serve.py - echo before augment with format=ppm renders each
READ straight into the reply (crop, flip and header in one pass, nothing
kept per binding): a binding's file is the same bytes however and however
often the kernel asks for them."""

import hashlib
import mmap
import os
import time

import pytest

PAGE = 4096


def echo_ppm(fault_server, crop=128):
    return {"index": fault_server.index, "echo": 4, "echo_mode": "fixed",
            "seed": 5, "size": crop + 32, "crop": crop, "augment": 1,
            "flip": 1, "format": "ppm"}


def test_echo_ppm_is_the_same_bytes_whatever_the_reads(mounter, fault_server):
    """Read whole, then drop the page cache and read the same open file
    again page by page from the end, and through mmap: every READ is
    rendered anew at its offset and must give the same bytes (the inode
    is immutable). Fails if a READ at an offset renders the wrong slice."""
    m = mounter(fault_server.source, opts=echo_ppm(fault_server))
    want_len = len(b"P6\n128 128\n255\n") + 128 * 128 * 3
    d = m.path("3")
    names = sorted(os.listdir(d))[:12]
    reads0 = m.stats()["reads"]
    for name in names:
        fd = os.open(os.path.join(d, name), os.O_RDONLY)
        try:
            st = os.fstat(fd)
            whole = os.read(fd, st.st_size + 1)
            assert st.st_size == want_len and len(whole) == want_len
            assert whole.startswith(b"P6\n128 128\n255\n")
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            pages = {}
            for off in reversed(range(0, want_len, PAGE)):
                pages[off] = os.pread(fd, PAGE, off)
            again = b"".join(pages[o] for o in sorted(pages))
            assert again == whole, name
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            with mmap.mmap(fd, 0, prot=mmap.PROT_READ) as mm:
                assert mm[want_len - 1000:] == whole[want_len - 1000:]
                assert mm[:] == whole, name
        finally:
            os.close(fd)
    # The dropped pages really went back to the daemon (more READs than
    # one per file), so the slices above were rendered anew.
    assert m.stats()["reads"] - reads0 > 2 * len(names)
    assert m.stats()["errors"]["image"] == 0



def bdi_readahead_kb(path):
    """The read-ahead of the mount at path, from its backing device."""
    st = os.stat(path)
    dev = "%d:%d" % (os.major(st.st_dev), os.minor(st.st_dev))
    with open("/sys/class/bdi/%s/read_ahead_kb" % dev) as f:
        return int(f.read())


def test_echo_file_read_sends_no_read_request(mounter, fault_server):
    """A 224x224 PPM (150,543 bytes) read whole after open costs no FUSE
    READ: the daemon stores the binding's bytes into the new inode's page
    cache before it answers the first OPEN (before that change: one READ
    per file). The mount's read-ahead stays raised (128 KB by default made
    two READs) for files whose pages the kernel dropped."""
    if os.geteuid() != 0:
        import pytest
        pytest.skip("raising read_ahead_kb in sysfs needs root")
    m = mounter(fault_server.source, opts=echo_ppm(fault_server, crop=224))
    d = m.path("3")
    names = sorted(os.listdir(d))[:10]
    # Reading .echofs/stats is itself counted: measure what one costs.
    reads0 = m.stats()["reads"]
    per_stats = m.stats()["reads"] - reads0
    s0 = m.stats()
    reads0 = s0["reads"] + per_stats
    for name in names:
        with open(os.path.join(d, name), "rb", buffering=0) as f:
            data = f.read(1 << 20)
            assert len(data) == len(b"P6\n224 224\n255\n") + 224 * 224 * 3
            assert data.startswith(b"P6\n224 224\n255\n")
            assert f.read(1 << 20) == b""
    s1 = m.stats()
    assert s1["reads"] - reads0 == 0
    assert s1["echo_page_stores"] - s0["echo_page_stores"] == len(names)
    assert bdi_readahead_kb(m.path()) >= 1024


def test_stored_echo_bytes_are_the_samples(mounter, fault_server, dataset):
    """Plain echo (no preprocessing): what a reader gets from the page
    cache filled at open is byte for byte a sample of the file's class, and
    the same bytes READs return once those pages are dropped. Fails if the
    store put other bytes (or another length) than the binding's."""
    by_hash = {}
    for rel, digest in dataset.ref_hashes("test").items():
        by_hash[digest] = rel.split(os.sep)[0]
    m = mounter(fault_server.source, opts={
        "index": fault_server.index, "echo": 4, "echo_mode": "fixed",
        "seed": 3})
    reads0 = m.stats()["reads"]
    per_stats = m.stats()["reads"] - reads0
    reads0 += per_stats
    fds, stored = [], []
    try:
        classes = [c for c in sorted(os.listdir(m.path())) if c[0] != "."]
        for cls in classes[:3]:
            for name in sorted(os.listdir(m.path(cls)))[:5]:
                fd = os.open(m.path(cls, name), os.O_RDONLY)
                fds.append((cls, name, fd))
                size = os.fstat(fd).st_size
                data = os.read(fd, size + 1)
                assert len(data) == size
                digest = hashlib.sha256(data).hexdigest()
                assert by_hash.get(digest) == cls, name
                stored.append(data)
        # Those bytes came from the page cache the opens filled.
        assert m.stats()["reads"] - reads0 - per_stats == 0
        for (cls, name, fd), data in zip(fds, stored):
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            assert os.pread(fd, len(data) + 1, 0) == data, name
    finally:
        for _, _, fd in fds:
            os.close(fd)
    s = m.stats()
    assert len(fds) == 15 and s["echo_page_stores"] >= len(fds)
    # The dropped pages came back through READs.
    assert s["reads"] - reads0 >= len(fds)


def wait_released(m, timeout=10.0):
    """Until no echo file is open (RELEASE is sent after close returns)."""
    until = time.monotonic() + timeout
    while m.stats()["open_handles"] != 0:
        assert time.monotonic() < until, "a handle stays open"
        time.sleep(0.01)


def lookups_per_stats(m):
    """LOOKUPs one read of .echofs/stats costs (its own path walk)."""
    a = m.stats()["lookups"]
    return m.stats()["lookups"] - a


def wait_dropped(m, before):
    """Wait until the daemon has asked the kernel to drop one more done
    binding's entry than `before` (fs/inval.h)."""
    until = time.monotonic() + 10
    while True:
        st = m.stats()
        if st["bindings_entries_dropped"] > before:
            return
        assert st["bindings_entries_kept"] == 0, "entry kept: %s" % st
        assert time.monotonic() < until, "no entry dropped: %s" % st
        time.sleep(0.005)


def reopen_rows(m, names, opens, check, dropped=False):
    """Open each of names `opens` times, one open at a time: read the file
    whole, drop its pages and read it again through READs (rendered anew
    for PPM), which must agree, then once more so that the next open
    starts with this one's pages cached. check(bytes) judges the bytes.
    With dropped, each close waits for the done binding's entry to be
    dropped. Returns (open number, LOOKUPs, rebound) per open and the sizes
    seen."""
    per_stats = lookups_per_stats(m)
    rows, sizes = [], set()
    for p in names:
        for k in range(opens):
            wait_released(m)
            s0 = m.stats()
            fd = os.open(p, os.O_RDONLY)
            try:
                # No read-ahead: no READ after close.
                os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_RANDOM)
                size = os.fstat(fd).st_size
                whole = os.read(fd, size + 1)
                assert len(whole) == size, (p, k)
                os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
                again = os.pread(fd, size + 1, 0)
                assert again == whole, "%s open %d: old pages read" % (p, k)
                assert os.pread(fd, size + 1, 0) == whole
            finally:
                os.close(fd)
            check(whole)
            s1 = m.stats()
            rows.append((k, s1["lookups"] - s0["lookups"] - per_stats,
                         s1["bindings_rebound"] - s0["bindings_rebound"]))
            if dropped:
                wait_dropped(m, s0["bindings_entries_dropped"])
            sizes.add(size)
    return rows, sizes


@pytest.mark.parametrize("case", ["plain", "ppm-unstored"])
def test_reopening_a_path_costs_one_lookup_and_serves_its_new_sample(
        mounter, fault_server, dataset, case):
    """A path opened again after its last close is bound to a new sample
    under a new inode (an inode the kernel knows never changes its sample:
    fs/bindings.h). The daemon asks the kernel to drop the done binding's
    entry, so the next open's walk sends one plain LOOKUP (without the
    drop: a revalidating LOOKUP that finds another node id, then a second
    LOOKUP). What a reader gets is the new sample's bytes, not the pages of
    the old one (reopen_rows). 'ppm-unstored' is larger than the open-time
    store (FS_READAHEAD), so it binds at lookup; PPM renderings all have
    one size. Fails on bytes of the previous binding, on an open that
    served no new sample, or on reopens that cost two LOOKUPs. Smaller PPM
    renderings bind at open: the next test."""
    if case == "plain":
        opts = {"index": fault_server.index, "echo": 4, "echo_mode": "fixed",
                "seed": 3}
    else:
        opts = echo_ppm(fault_server, crop=640)
    by_hash = {}
    for rel, digest in dataset.ref_hashes("test").items():
        by_hash[digest] = rel.split(os.sep)[0]
    m = mounter(fault_server.source, opts=opts)
    d = m.path("3")
    names = [os.path.join(d, n) for n in sorted(os.listdir(d))[:3]]
    opens = 6

    def check(whole):
        if case == "plain":
            assert by_hash.get(hashlib.sha256(whole).hexdigest()) == "3"
        else:
            assert whole.startswith(b"P6\n")
    rows, sizes = reopen_rows(m, names, opens, check, dropped=True)
    st = m.stats()
    assert st["errors"]["image"] == 0
    assert st["fresh_served"] + st["echoes_served"] == len(names) * opens, \
        "an open served no new sample"
    # (open, LOOKUPs, rebound): every open one plain lookup, none rebound.
    assert rows == [(k, 1, 0) for _ in names for k in range(opens)], rows
    if case == "plain":
        assert len(sizes) > 1, "plain samples of one size: no size change tried"


def test_a_fixed_size_echo_path_binds_at_open_and_reopens_without_a_lookup(
        mounter, fault_server):
    """PPM renderings with a crop all have one size, small enough for one
    page-cache store: such a mount binds at open (fs/bindings.h). The
    kernel keeps the path's entry and inode, so a reopen sends no LOOKUP
    (on 9e4b89c each cost one), and each OPEN binds a new sample whose
    bytes the store writes over the old pages before the open is answered.
    Checks: every open serves a new sample and reads its own bytes (also
    through READs after dropping the pages, reopen_rows), a reopen costs
    no LOOKUP and keeps the inode, a file read with read-ahead costs no
    READ, and two descriptors open at once share one sample."""
    m = mounter(fault_server.source, opts=echo_ppm(fault_server))
    want_len = len(b"P6\n128 128\n255\n") + 128 * 128 * 3
    d = m.path("3")
    names = [os.path.join(d, n) for n in sorted(os.listdir(d))[:3]]
    opens = 6
    seen = []

    def check(whole):
        assert whole.startswith(b"P6\n128 128\n255\n")
        seen.append(whole)
    inos = {p: os.stat(p).st_ino for p in names}
    rows, sizes = reopen_rows(m, names, opens, check)
    st = m.stats()
    assert st["errors"]["image"] == 0
    assert sizes == {want_len}
    assert st["fresh_served"] + st["echoes_served"] == len(names) * opens, \
        "an open served no new sample"
    # Consecutive opens of a path read different renderings (a new crop
    # and flip of a new sample; equal bytes would mean old pages).
    for i in range(len(names)):
        run = seen[i * opens:(i + 1) * opens]
        assert all(a != b for a, b in zip(run, run[1:])), i
    # (open, LOOKUPs, rebound): the os.stat above looked every path up.
    assert rows == [(k, 0, 1 if k else 0) for _ in names
                    for k in range(opens)], rows
    assert {p: os.stat(p).st_ino for p in names} == inos

    # Read-ahead on: the stored pages answer every read, no READ.
    wait_released(m)
    reads_per_stats = -m.stats()["reads"] + m.stats()["reads"]
    r0 = m.stats()
    for p in names:
        with open(p, "rb") as f:
            assert len(f.read()) == want_len
    r1 = m.stats()
    assert r1["reads"] - r0["reads"] - reads_per_stats == 0
    assert r1["echo_page_stores"] - r0["echo_page_stores"] == len(names)

    # Two descriptors at once: one sample, one store.
    wait_released(m)
    a = os.open(names[0], os.O_RDONLY)
    try:
        b = os.open(names[0], os.O_RDONLY)
        try:
            assert os.read(a, want_len + 1) == os.read(b, want_len + 1)
        finally:
            os.close(b)
    finally:
        os.close(a)
    r2 = m.stats()
    assert r2["echo_page_stores"] - r1["echo_page_stores"] == 1
    assert r2["fresh_served"] + r2["echoes_served"] == \
        r1["fresh_served"] + r1["echoes_served"] + 1
