"""test_config_write.py - writes to .echofs/config as a careful user makes
them: a write applies all its lines or none, and a line split over two
write(2) calls on one open file is joined (issue 32, review of
fs/control.c)."""
import errno
import os
import time

import pytest


def echo_mount(mounter, fault_server):
    return mounter(fault_server.source,
                   opts={"index": fault_server.index, "echo": 3, "seed": 7})


def config_of(m):
    with open(m.path(".echofs", "config")) as f:
        return dict(line.split("=", 1) for line in f.read().split("\n") if "=" in line)


def write_fd(m):
    return os.open(m.path(".echofs", "config"), os.O_WRONLY)


def test_a_write_with_one_bad_line_changes_nothing(mounter, fault_server):
    m = echo_mount(mounter, fault_server)
    before = config_of(m)
    assert before["echo"] == "3"
    fd = write_fd(m)
    try:
        for text in (b"echo=2\nbogus=1\n", b"echo_mode=fixed\necho=0\n"):
            with pytest.raises(OSError) as e:
                os.write(fd, text)
            assert e.value.errno == errno.EINVAL, e.value
    finally:
        os.close(fd)
    assert config_of(m) == before
    assert m.stats()["echo"] == 3


def test_a_line_split_over_two_writes_is_joined(mounter, fault_server):
    m = echo_mount(mounter, fault_server)
    fd = write_fd(m)
    try:
        assert os.write(fd, b"ec") == 2
        assert os.write(fd, b"ho=5\necho_mode=fi") == 17
        # The complete line applied at once, the open file still open.
        assert config_of(m)["echo"] == "5"
        assert os.write(fd, b"xed\n") == 4
        assert config_of(m)["echo_mode"] == "fixed"
    finally:
        os.close(fd)
    assert m.stats()["echo"] == 5


def test_an_unterminated_last_line_applies_at_close(mounter, fault_server):
    m = echo_mount(mounter, fault_server)
    fd = write_fd(m)
    assert os.write(fd, b"echo=4") == 6
    assert config_of(m)["echo"] == "3", "half a line must wait"
    os.close(fd)
    # RELEASE is sent after close(2) returns: poll a bounded number of reads.
    for _ in range(1000):
        if config_of(m)["echo"] == "4":
            break
        time.sleep(0.01)
    assert config_of(m)["echo"] == "4"


def test_an_over_long_line_is_refused_and_logged(mounter, fault_server):
    m = echo_mount(mounter, fault_server)
    fd = write_fd(m)
    try:
        with pytest.raises(OSError) as e:
            os.write(fd, b"echo=" + b"1" * 2000)
        assert e.value.errno == errno.EINVAL, e.value
        # The refused bytes are not kept: the handle still takes lines.
        assert os.write(fd, b"echo=2\n") == 7
    finally:
        os.close(fd)
    assert config_of(m)["echo"] == "2"
    assert "line too long" in m.log()
