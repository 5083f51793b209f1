"""test_echo_serve.py - echo before augment with format=ppm renders each
READ straight into the reply (crop, flip and header in one pass, nothing
kept per binding): a binding's file is the same bytes however and however
often the kernel asks for them."""

import hashlib
import mmap
import os

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
