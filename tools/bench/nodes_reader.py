#!/usr/bin/python3
"""nodes_reader.py - one node's pass over its echofs mount, the way a
data-parallel PyTorch job would sample it, for bench_nodes.sh.

  nodes_reader.py MNT --rank R --world W [--partitioned] [--threads 4]
                  [--seed 0] [--start-at EPOCH_SECONDS]

Lists MNT like torchvision's ImageFolder (sorted class dirs, sorted files).
With --partitioned the mount is this node's part (-o rank=R,world=W): read
all of it in a seeded shuffled order (a RandomSampler). Without it the mount
shows the whole dataset: read DistributedSampler's share for rank R (a seeded
permutation of all indices, every W-th from R). --threads readers read whole
files in that order (DataLoader workers). --start-at waits until that
wall-clock time so W nodes start together. Prints one JSON line: samples
read, bytes, seconds, samples/s, and fresh_served from MNT/.echofs/stats.
"""

import argparse
import json
import os
import random
import sys
import threading
import time

from benchlib import read_stats


def list_tree(root):
    classes = sorted(d.name for d in os.scandir(root)
                     if d.is_dir() and not d.name.startswith("."))
    files = []
    for c in classes:
        d = os.path.join(root, c)
        files += [os.path.join(d, n) for n in sorted(os.listdir(d)) if n.endswith(".jpg")]
    return classes, files


def order(files, a):
    rng = random.Random(a.seed * 1000 + (a.rank if a.partitioned else 0))
    idx = list(range(len(files)))
    rng.shuffle(idx)
    if not a.partitioned:
        idx = idx[a.rank::a.world]  # DistributedSampler's share of one permutation
    return [files[i] for i in idx]


def read_all(paths, threads):
    """Whole-file reads by `threads` workers over one shared queue."""
    lock = threading.Lock()
    state = {"next": 0, "bytes": 0, "errors": 0}

    def worker():
        while True:
            with lock:
                i = state["next"]
                state["next"] += 1
            if i >= len(paths):
                return
            try:
                with open(paths[i], "rb") as f:
                    n = len(f.read())
            except OSError:
                n = -1
            with lock:
                if n < 0:
                    state["errors"] += 1
                else:
                    state["bytes"] += n

    ts = [threading.Thread(target=worker) for _ in range(threads)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    return state


def stats(root):
    return read_stats(root) or {}


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("mnt")
    ap.add_argument("--rank", type=int, default=0)
    ap.add_argument("--world", type=int, default=1)
    ap.add_argument("--partitioned", action="store_true")
    ap.add_argument("--threads", type=int, default=4)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--start-at", type=float, default=0.0)
    a = ap.parse_args()
    classes, files = list_tree(a.mnt)
    paths = order(files, a)
    s0 = stats(a.mnt)
    delay = a.start_at - time.time()
    if delay > 0:
        time.sleep(delay)
    t0 = time.monotonic()
    st = read_all(paths, a.threads)
    secs = time.monotonic() - t0
    s1 = stats(a.mnt)
    print(json.dumps({"rank": a.rank, "world": a.world, "partitioned": a.partitioned,
                      "classes": len(classes), "tree_samples": len(files),
                      "samples": len(paths) - st["errors"], "errors": st["errors"],
                      "bytes": st["bytes"], "seconds": round(secs, 3),
                      "samples_per_s": round((len(paths) - st["errors"]) / secs, 1),
                      "fresh": s1.get("fresh_served", 0) - s0.get("fresh_served", 0)}))
    return 1 if st["errors"] else 0


if __name__ == "__main__":
    sys.exit(main())
