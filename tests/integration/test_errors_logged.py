"""test_errors_logged.py - every counted error reaches the log: the rate
limit holds lines back but says how many ("N more since the last"), and what
is still held back at unmount is written then (issue 21, finding 3)."""

import io
import os
import re
import tarfile

import helpers

BROKEN = 13


def make_shard(path):
    """Two good JPEGs and BROKEN broken ones, all of class 1."""
    good = open(os.path.join(os.path.dirname(__file__), "..", "data", "img",
                             "photo.jpg"), "rb").read()
    members = [("ok%d.jpg" % i, good) for i in range(2)]
    members += [("bad%02d.jpg" % i, b"\xff\xd8" + os.urandom(300 + i))
                for i in range(BROKEN)]
    with tarfile.open(path, "w", format=tarfile.USTAR_FORMAT) as t:
        for name, data in members:
            for n, d in ((name, data), (name.split(".")[0] + ".cls", b"1")):
                info = tarfile.TarInfo(n)
                info.size = len(d)
                t.addfile(info, io.BytesIO(d))


def logged(log, kind):
    """How many errors of kind the log accounts for: one per line of that
    kind, plus the count each summary gives."""
    n = 0
    for m in re.finditer(r"warn: (.*)\[%s(?:, (\d+) more since the last)?\]$"
                         % re.escape(kind), log, re.M):
        n += (1 if m.group(1) else 0) + int(m.group(2) or 0)
    return n


def test_every_counted_error_is_in_the_log(mounter, private_nginx, dataset):
    d = os.path.join(dataset.www, "errlog")
    os.makedirs(d, exist_ok=True)
    make_shard(os.path.join(d, "bad-000000.tar"))
    src = "%s/errlog/bad-{000000..000000}.tar" % private_nginx.url
    m = mounter(src, opts={"size": 64, "format": "ppm"})
    names = sorted(os.listdir(m.path("1")))
    assert len(names) == BROKEN + 2
    errs = [helpers.read_errno(m.path("1", n)) for n in names
            if n.startswith("bad")]
    assert errs == [5] * BROKEN  # EIO
    counted = m.stats()["errors"]
    assert counted["image"] == BROKEN, counted
    m.umount()
    log = m.log()
    # the rate limit let one line through: the rest only a summary can tell
    assert logged(log, "image") == BROKEN, log
    assert logged(log, "read") == counted["read"], log
