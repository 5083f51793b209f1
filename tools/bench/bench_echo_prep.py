#!/usr/bin/python3
"""bench_echo_prep.py - the reader of tools/bench/bench_echo_prep.sh.

  bench_echo_prep.py read ROOT [--procs 2] [--rounds 1] [--seed 0]

Lists ROOT/<class>/<file> once, shuffles the list (seeded) and deals it to
--procs reader processes (file i to process i % procs, so no file is read by
two processes in a round: on an exact mount a second read of a file would
come from the page cache). Each process opens, reads fully and closes its
files, --rounds times (reshuffled each round). Prints one JSON line: files
opened, wall seconds, files/s, and from ROOT/.echofs/stats (when there is
one) the fresh samples served, fresh/s and echoes over the same run, and
the READ and IOCTL requests per file.
"""
import argparse
import json
import multiprocessing as mp
import random
import sys
import time

from benchlib import list_tree, read_round, read_stats, run_procs


def stats(root):
    return read_stats(root) or {}


def reader(part, rounds, seed, q):
    n, bad = 0, 0
    rng = random.Random(seed)
    for _ in range(rounds):
        done, b = read_round(part, rng)
        n += len(done)
        bad += b
    q.put((n, bad))


def cmd_read(a):
    files = list_tree(a.root)
    random.Random(a.seed).shuffle(files)
    parts = [files[i::a.procs] for i in range(a.procs)]
    q = mp.Queue()
    s0 = stats(a.root)
    t0 = time.monotonic()
    got = run_procs(reader, [(parts[i], a.rounds, a.seed + 1 + i, q)
                             for i in range(a.procs)], q)
    wall = time.monotonic() - t0
    s1 = stats(a.root)
    n = sum(g[0] for g in got)
    bad = sum(g[1] for g in got)
    out = {"files": n, "errors": bad, "wall_s": round(wall, 3),
           "files_per_s": round(n / wall, 1)}
    if "fresh_served" in s1:
        fresh = s1["fresh_served"] - s0.get("fresh_served", 0)
        echoes = s1["echoes_served"] - s0.get("echoes_served", 0)
        out.update(fresh=fresh, echoes=echoes, fresh_per_s=round(fresh / wall, 1),
                   stall_s=round(s1["stall_s"] - s0.get("stall_s", 0), 2))
    if n and "reads" in s1:
        # FUSE requests per file the daemon counts (READ, IOCTL): what the
        # kernel sends for one Python open(...).read().
        for k in ("reads", "ioctls"):
            out[k + "_per_file"] = round((s1[k] - s0.get(k, 0)) / n, 2)
    print(json.dumps(out))
    return 1 if bad or n == 0 else 0


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("read")
    r.add_argument("root")
    r.add_argument("--procs", type=int, default=2)
    r.add_argument("--rounds", type=int, default=1)
    r.add_argument("--seed", type=int, default=0)
    a = ap.parse_args()
    sys.exit(cmd_read(a))


if __name__ == "__main__":
    main()
