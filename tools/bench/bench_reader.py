#!/usr/bin/python3
"""bench_reader.py - read every file of an ImageFolder tree like a training
epoch and report files/s.

  bench_reader.py ROOT [--procs 2] [--seed 0] [--runs 1] [--decode] [--json]

The file list (ROOT/<class>/<file>) is taken once, shuffled with a fixed seed
and dealt round-robin to --procs reader processes; each opens, reads fully and
closes its files (and with --decode decodes them with PIL and counts them per
class). Listing is timed apart from reading. With --runs N the epoch is
repeated and the median reported. Exit status 1 if any file failed.
"""

import argparse
import json
import multiprocessing as mp
import os
import random
import statistics
import sys
import time
from collections import Counter


def list_tree(root):
    files = []
    for cls in sorted(os.listdir(root)):
        d = os.path.join(root, cls)
        if not os.path.isdir(d):
            continue
        files += [os.path.join(cls, n) for n in sorted(os.listdir(d))]
    return files


def reader(args):
    root, paths, decode = args
    per_class, errors, nbytes = Counter(), [], 0
    if decode:
        from PIL import Image
    for p in paths:
        full = os.path.join(root, p)
        try:
            with open(full, "rb") as f:
                data = f.read()
            nbytes += len(data)
            if decode:
                with Image.open(full) as im:
                    im.load()
            per_class[p.split(os.sep, 1)[0]] += 1
        except Exception as e:  # a benchmark counts failures, never stops
            errors.append("%s: %s" % (p, e))
    return per_class, errors, nbytes


def epoch(root, files, procs, decode):
    jobs = [(root, files[i::procs], decode) for i in range(procs)]
    t0 = time.monotonic()
    with mp.get_context("fork").Pool(procs) as pool:
        results = pool.map(reader, jobs)
    secs = time.monotonic() - t0
    per_class, errors, nbytes = Counter(), [], 0
    for c, e, b in results:
        per_class.update(c)
        errors += e
        nbytes += b
    return secs, per_class, errors, nbytes


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("root")
    ap.add_argument("--procs", type=int, default=2)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--runs", type=int, default=1)
    ap.add_argument("--decode", action="store_true", help="decode with PIL")
    ap.add_argument("--json", action="store_true", help="one JSON line out")
    a = ap.parse_args()

    t0 = time.monotonic()
    files = list_tree(a.root)
    list_secs = time.monotonic() - t0
    random.Random(a.seed).shuffle(files)
    rates, errors, per_class, nbytes = [], [], Counter(), 0
    for _ in range(a.runs):
        secs, per_class, errs, nbytes = epoch(a.root, files, a.procs, a.decode)
        rates.append(len(files) / secs if secs > 0 else 0.0)
        errors += errs
    out = {"files": len(files), "list_secs": round(list_secs, 3),
           "files_per_s": round(statistics.median(rates), 1),
           "runs": [round(r, 1) for r in rates], "bytes": nbytes,
           "errors": len(errors), "per_class": dict(sorted(per_class.items()))}
    if a.json:
        print(json.dumps(out))
    else:
        print("%d files (%d bytes) in %d classes, %d errors; listing %.2f s; "
              "%.0f files/s (median of %s)" % (
                  out["files"], nbytes, len(per_class), len(errors), list_secs,
                  out["files_per_s"], ", ".join("%.0f" % r for r in rates)))
        if a.decode:
            print("per class: " + ", ".join(
                "%s=%d" % kv for kv in sorted(per_class.items())))
    for e in errors[:10]:
        print("error: " + e, file=sys.stderr)
    return 1 if errors or not files else 0


if __name__ == "__main__":
    sys.exit(main())
