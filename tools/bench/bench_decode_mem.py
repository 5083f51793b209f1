#!/usr/bin/python3
"""bench_decode_mem.py - peak RSS of the echofs daemon while N progressive
8000x8000 JPEGs are read at once on a size=64,crop=56,format=ppm mount with
threads=N, for each decode_mem given (and the build's default).

  /usr/bin/python3 tools/bench/bench_decode_mem.py [--build build]
        [--files 6] [--decode-mem default,512M,...]

The shard is made in a temp dir and served by Python's http.server on
loopback; the JPEG comes from tests/integration/test_security.py (PIL).
Prints one line per setting: decode_mem, peak and final RSS in MB, and
whether every read returned the right number of bytes (with a decode_mem
below one image's need every read fails with EIO, by design).

Measured 2026-12-03, 2 cores, 6 files of 1.5 MB:
  main (no budget)           peak 1119 MB
  decode_mem=256M (default)  peak  216 MB
  decode_mem=512M            peak  396 MB
  decode_mem=64M             peak   15 MB (every read refused: EIO)"""

import argparse
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile

from benchlib import free_port, wait_port

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(REPO, "tests", "integration"))

import helpers  # noqa: E402
import test_security  # noqa: E402


def serve(root):
    """Python's http.server over root on a free loopback port."""
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "http.server", "--bind",
                             "127.0.0.1", "--directory", root, str(port)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    wait_port(port, proc, "http.server")
    return proc, "http://127.0.0.1:%d" % port


def make_shard(work, n):
    jpg = os.path.join(work, "big.jpg")
    test_security.progressive_jpeg(jpg)
    os.makedirs(os.path.join(work, "www", "big"))
    cls = os.path.join(work, "cls")
    with open(cls, "w") as f:
        f.write("1")
    with tarfile.open(os.path.join(work, "www", "big", "big-000000.tar"), "w",
                      format=tarfile.USTAR_FORMAT) as t:
        for i in range(n):
            t.add(jpg, "s%02d.jpg" % i)
            t.add(cls, "s%02d.cls" % i)
    return os.path.getsize(jpg)


def run(url, n, decode_mem, work):
    opts = {"size": 64, "crop": 56, "format": "ppm", "threads": n}
    if decode_mem != "default":
        opts["decode_mem"] = decode_mem
    m = helpers.Mount(work, url + "/big/big-{000000..000000}.tar", opts=opts,
                      name="mnt-" + decode_mem)
    r = m.start()
    if r.returncode != 0:
        return "mount failed: %s" % r.stderr.strip()
    try:
        files = sorted(helpers.list_paths(m.mnt))
        pid = helpers.echofs_pids(m.mnt)[0]
        res, peak = test_security.read_all_at_once(m, files)
        want = len(b"P6\n56 56\n255\n") + 56 * 56 * 3
        ok = all(isinstance(v, bytes) and len(v) == want for v in res.values())
        return "peak %.0f MB, after %.0f MB, reads %s" % (
            peak, test_security.rss_mb(pid), "ok" if ok else "FAILED")
    finally:
        m.umount()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default=os.path.join(REPO, "build"))
    ap.add_argument("--files", type=int, default=6)
    ap.add_argument("--decode-mem", default="default,512M")
    a = ap.parse_args()
    helpers.ECHOFS = os.path.join(os.path.abspath(a.build), "echofs")
    work = tempfile.mkdtemp(prefix="echofs-bench-decmem-")
    proc = None
    try:
        size = make_shard(work, a.files)
        proc, url = serve(os.path.join(work, "www"))
        print("%d progressive 8000x8000 JPEGs of %d bytes, threads=%d, %s"
              % (a.files, size, a.files, helpers.ECHOFS))
        for dm in a.decode_mem.split(","):
            print("decode_mem=%s: %s" % (dm, run(url, a.files, dm, work)))
    finally:
        if proc:
            proc.terminate()
            proc.wait()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
