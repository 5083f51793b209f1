"""test_resume.py - a server that cuts a body short and answers the resume
(a Range request) from offset 0 under a plausible header
(tests/hostile_server.py, mode lie-range), against a mount without index=:
the index built at mount must not take the repeated bytes for new members.
Either every file is right or the mount fails naming the lie; never a
changed dataset (issue 21, finding 2)."""

import json
import os

import pytest

import helpers
from helpers import PYTHON

HOSTILE = os.path.join(helpers.REPO, "tests", "hostile_server.py")


class Server:
    """hostile_server.py over the test split (its shards under test/)."""

    def __init__(self, root, work):
        self.port_file = os.path.join(work, "port")
        self.log = open(os.path.join(work, "hostile.log"), "w")
        self.proc, self.url = helpers.start_port_file_server(
            [PYTHON, HOSTILE, "--root", root, "--alt", root,
             "--port-file", self.port_file],
            self.port_file, self.log, what="hostile server")

    def set_mode(self, mode):
        helpers.http_get(self.url + "/_mode", data=mode.encode(), method="PUT")

    def stats(self):
        return json.loads(helpers.http_get(self.url + "/_stats"))

    def stop(self):
        if self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(10)
        self.log.close()


@pytest.fixture
def lying(dataset, tmp_path):
    work = tmp_path / "hostile"
    work.mkdir()
    s = Server(dataset.www, str(work))
    yield s
    s.stop()


def test_resume_from_offset_zero_fails_the_mount(lying, dataset, mounter):
    # Where the cut falls decides what the replayed bytes look like to the
    # tar scanner: more members (duplicates), or a broken archive blamed on
    # the shard. Either way the server, not the tar, must be named.
    lying.set_mode("lie-range")
    source = helpers.source_of(lying.url, "test")
    m = mounter(source, check=False)
    ranges = lying.stats()["ranges"]
    assert ranges > 0, "no resume was asked for: the test shows nothing"
    ref = dataset.ref_hashes("test")
    if m.result.returncode == 0:
        # Mounted: then it must be the dataset, byte for byte.
        paths = helpers.list_paths(m.mnt)
        dups = sorted(p for p in paths if "_dup" in p)
        assert dups == [], "%d renamed duplicates, e.g. %r; log:\n%s" % (
            len(dups), dups[:3], m.log()[-2000:])
        assert paths == set(ref), "%d files missing" % len(set(ref) - paths)
        assert helpers.walk(m.mnt) == ref
        return
    err = m.result.stderr
    assert "resume" in err and "offset" in err, err
    assert "timed out" not in err, err
    assert "resumed body" in m.log(), m.log()[-2000:]


def free_port():
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_stalled_body_is_counted_and_logged_as_a_stall(fault_server, dataset,
                                                        mounter):
    """A shard body that goes silent midway (twice) is broken off after
    stall_timeout and resumed from where it stopped: every file reads
    right, the stall is counted in `stalls` (also on /metrics), not as a
    connection error, and the log says so in echofs's words, not libcurl's
    (issue 50)."""
    port = free_port()
    m = mounter(fault_server.source,
                opts={"index": fault_server.index, "stall_timeout": 1,
                      "metrics": "127.0.0.1:%d" % port})
    fault_server.set_faults("/test/*.tar=stall-at:300000,count=2")
    ref = dataset.ref_hashes("test")
    bad = [p for p in sorted(ref)[::5]
           if helpers.read_errno(m.path(p))
           or helpers.sha256_file(m.path(p)) != ref[p]]
    assert bad == [], "%d bad files, first %r" % (len(bad), bad[:5])
    s = m.stats()
    assert s["stalls"] >= 1 and s["resumes"] >= 1, s
    assert s["errors"]["connection"] == 0, s["errors"]
    log = m.log()
    assert "no data for 1 s (stall_timeout), resuming at byte 300000" in log, \
        log[-3000:]
    for words in ("Timeout was reached", "aborted by an application callback"):
        assert words not in log, log[-3000:]
    text = helpers.http_get("http://127.0.0.1:%d/metrics" % port).decode()
    line = [l for l in text.splitlines() if l.startswith("echofs_stalls ")]
    assert line and float(line[0].split()[1]) >= 1, line
