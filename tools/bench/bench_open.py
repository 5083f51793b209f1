#!/usr/bin/python3
"""bench_open.py - the reader of tools/bench/bench_open.sh: one epoch over an
ImageFolder tree, opening every file with Python's open() (which calls
isatty(), an ioctl, on every file) or with os.open(), and a daemon's CPU time.

  bench_open.py read ROOT --mode open|osopen [--procs 2] [--seed 1]
      one shuffled epoch, dealt round-robin to --procs processes; prints
      {"files", "bytes", "secs", "files_s"} as JSON; exit 1 on a read error
  bench_open.py ioctl FILE [--n 2000]
      mean microseconds of one ioctl(TCGETS) (what isatty() sends) on an
      open FILE: on a FUSE file, one FUSE_IOCTL round trip
  bench_open.py cpu PID
      CPU seconds of PID's threads (/proc/PID/task/*/schedstat)
"""

import argparse
import json
import multiprocessing as mp
import os
import random
import sys
import termios
import time


def list_tree(root):
    files = []
    for cls in sorted(os.listdir(root)):
        d = os.path.join(root, cls)
        if os.path.isdir(d) and not cls.startswith("."):
            files.extend(os.path.join(d, n) for n in sorted(os.listdir(d)))
    return files


def read_py(path):
    with open(path, "rb") as f:
        return len(f.read())


def read_os(path):
    fd = os.open(path, os.O_RDONLY)
    try:
        n = 0
        while True:
            b = os.read(fd, 1 << 20)
            if not b:
                return n
            n += len(b)
    finally:
        os.close(fd)


def worker(args):
    paths, mode = args
    fn = read_py if mode == "open" else read_os
    total = 0
    for p in paths:
        total += fn(p)
    return total


def cmd_read(a):
    files = list_tree(a.root)
    random.Random(a.seed).shuffle(files)
    parts = [(files[i::a.procs], a.mode) for i in range(a.procs)]
    with mp.Pool(a.procs) as pool:
        t0 = time.monotonic()
        try:
            sizes = pool.map(worker, parts)
        except OSError as e:
            print("read error: %s" % e, file=sys.stderr)
            return 1
        secs = time.monotonic() - t0
    print(json.dumps({"files": len(files), "bytes": sum(sizes), "secs": secs,
                      "files_s": len(files) / secs}))
    return 0


def cmd_ioctl(a):
    fd = os.open(a.file, os.O_RDONLY)
    try:
        t0 = time.perf_counter()
        for _ in range(a.n):
            try:
                termios.tcgetattr(fd)
            except termios.error:
                pass  # ENOTTY, as for any regular file
        us = (time.perf_counter() - t0) / a.n * 1e6
    finally:
        os.close(fd)
    print("%.1f" % us)
    return 0


def cmd_cpu(a):
    # Nanoseconds on the CPU per thread (/proc/PID/task/*/schedstat): finer
    # than utime+stime's 10 ms ticks. echofs's threads live as long as the
    # mount, so none is missed between two samples.
    ns = 0
    tasks = "/proc/%d/task" % a.pid
    for t in os.listdir(tasks):
        try:
            with open(os.path.join(tasks, t, "schedstat")) as f:
                ns += int(f.read().split()[0])
        except (OSError, ValueError, IndexError):
            pass
    print("%.4f" % (ns / 1e9))
    return 0


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("read")
    p.add_argument("root")
    p.add_argument("--mode", choices=("open", "osopen"), required=True)
    p.add_argument("--procs", type=int, default=2)
    p.add_argument("--seed", type=int, default=1)
    p = sub.add_parser("ioctl")
    p.add_argument("file")
    p.add_argument("--n", type=int, default=2000)
    p = sub.add_parser("cpu")
    p.add_argument("pid", type=int)
    a = ap.parse_args()
    return {"read": cmd_read, "ioctl": cmd_ioctl, "cpu": cmd_cpu}[a.cmd](a)


if __name__ == "__main__":
    sys.exit(main())
