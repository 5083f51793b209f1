"""test_echo_serve.py - echo before augment with format=ppm renders each
READ straight into the reply (crop, flip and header in one pass, nothing
kept per binding): a binding's file is the same bytes however and however
often the kernel asks for them."""

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


def test_one_read_request_per_echo_file(mounter, fault_server):
    """A 224x224 PPM (150,543 bytes) read with one read() costs one FUSE
    READ: the daemon raises its mount's read-ahead (128 KB by default,
    which made it two)."""
    if os.geteuid() != 0:
        import pytest
        pytest.skip("raising read_ahead_kb in sysfs needs root")
    m = mounter(fault_server.source, opts=echo_ppm(fault_server, crop=224))
    d = m.path("3")
    names = sorted(os.listdir(d))[:10]
    # Reading .echofs/stats is itself counted: measure what one costs.
    reads0 = m.stats()["reads"]
    per_stats = m.stats()["reads"] - reads0
    reads0 += per_stats
    for name in names:
        with open(os.path.join(d, name), "rb", buffering=0) as f:
            data = f.read(1 << 20)
            assert len(data) == len(b"P6\n224 224\n255\n") + 224 * 224 * 3
            assert f.read(1 << 20) == b""
    assert m.stats()["reads"] - reads0 - per_stats == len(names)
    assert bdi_readahead_kb(m.path()) >= 1024
