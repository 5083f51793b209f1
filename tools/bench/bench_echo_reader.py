#!/usr/bin/python3
"""bench_echo_reader.py - read an ImageFolder tree for a fixed wall time and
report delivered files/s (and, on an echofs mount, fresh/s, effective echo
and stall share over the same window).

  bench_echo_reader.py ROOT [--procs 2] [--seconds 20] [--warmup 3] [--seed 0]
                       [--order shuffled|shard] [--pairs EXT]
                       [--warmup-files N --files N] [--trace FILE]

The file list (ROOT/<class>/<file>) is taken once; each of --procs reader
processes walks its own shuffled copy of it (seed + process number), opening,
reading fully and closing files, round after round, until told to stop. The
parent lets them run --warmup seconds, then counts files and snapshots
ROOT/.echofs/stats at the start and at the end of a --seconds window, so
mount start-up and the pool's head start stay out of the numbers. With
--order shard the processes instead deal the files sorted by name (the order
echofs-pack wrote them, shard after shard) between them, i % procs, and walk
that once: the best case for an exact mount's whole-shard read-ahead. With
--pairs EXT (a samples layout mount) the list is every *.jpg under ROOT, and
each is read with its sibling <key>.EXT as one sample, as a pair reader's
__getitem__ does; files/s then counts pairs. With --files the window is
counted in files instead, as a user times a job: it opens once the readers
have read --warmup-files (from mount) and closes after --files more (or
after --seconds, a bound then, when the mount is too slow). --trace
writes a JSON line every 0.5 s from mount: files read so far and the echo
statistics (the governor's factor and rates, fresh, own and echo serves,
stall), to see how the echo factor moved. Prints one JSON line. Exit status 1 if any read failed or nothing was read.
"""

import argparse
import ctypes
import json
import multiprocessing as mp
import os
import random
import sys
import threading
import time

from benchlib import list_tree, read_stats


def read_one(p, pair):
    with open(p, "rb") as f:
        n = len(f.read())
    if pair:
        with open(p[:-len("jpg")] + pair, "rb") as f:
            n += len(f.read())
    return n


def list_pairs(root):
    out = []
    for d, dirs, names in os.walk(root):
        dirs[:] = sorted(x for x in dirs if not x.startswith("."))
        out += [os.path.join(d, n) for n in sorted(names) if n.endswith(".jpg")]
    return out


def worker(files, seed, slot, counts, errors, nbytes, stop, shuffle, pair):
    order = list(files)
    rng = random.Random(seed)
    while not stop.is_set():
        if shuffle:
            rng.shuffle(order)
        for p in order:
            if stop.is_set():
                return
            try:
                nbytes[slot] += read_one(p, pair)
                counts[slot] += 1
            except OSError:  # a benchmark counts failures, never stops
                errors[slot] += 1


def wait_files(counts, n, bound_s):
    """Until the readers have read n files in all, or bound_s went by."""
    end = time.monotonic() + bound_s
    while sum(counts) < n and time.monotonic() < end:
        time.sleep(0.02)


TRACE_KEYS = ("echo_factor", "echo_fresh_rate", "echo_best_fresh_rate",
              "echo_changes", "echo_reason", "fresh_served", "own_served",
              "echoes_served", "stall_s", "bytes_fetched", "pool_samples",
              "pool_fresh_ready", "pass")


def tracer(root, counts, path, stop):
    """Every 0.5 s until stop: files read and the echo statistics."""
    t0 = time.monotonic()
    with open(path, "w") as out:
        while not stop.wait(0.5):
            st = read_stats(root) or {}
            row = {"t": round(time.monotonic() - t0, 2), "files": sum(counts)}
            row.update({k: st.get(k) for k in TRACE_KEYS})
            out.write(json.dumps(row) + "\n")
            out.flush()


def snapshot(root, counts, nbytes):
    return time.monotonic(), sum(counts), sum(nbytes), read_stats(root)


def delta(a, b, key):
    if a is None or b is None or key not in a or key not in b:
        return None
    return b[key] - a[key]


def summarize(t0, t1, procs):
    (ta, na, ba, sa), (tb, nb, bb, sb) = t0, t1
    secs = tb - ta
    out = {"seconds": round(secs, 2), "files": nb - na,
           "files_per_s": round((nb - na) / secs, 1),
           "mb_per_s": round((bb - ba) / secs / 1e6, 2)}
    fresh = delta(sa, sb, "fresh_served")
    echoes = delta(sa, sb, "echoes_served")
    stall = delta(sa, sb, "stall_s")
    fetched = delta(sa, sb, "bytes_fetched")
    if fresh is not None:
        out["fresh_per_s"] = round(fresh / secs, 1)
        out["echoes_per_s"] = round(echoes / secs, 1)
        out["effective_echo"] = round((fresh + echoes) / fresh, 3) if fresh else None
        out["stall_pct"] = round(100.0 * stall / (secs * procs), 1)
    if fetched is not None:
        out["fetch_mb_per_s"] = round(fetched / secs / 1e6, 2)
    if sb is not None:
        out["stats_end"] = {k: sb.get(k) for k in (
            "fresh_served", "echoes_served", "effective_echo", "stall_s",
            "bytes_fetched", "pool_bytes", "pool_samples", "pool_dropped",
            "echo", "echo_mode", "pass")}
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("root")
    ap.add_argument("--procs", type=int, default=2)
    ap.add_argument("--seconds", type=float, default=20.0)
    ap.add_argument("--warmup", type=float, default=3.0)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--order", choices=("shuffled", "shard"), default="shuffled")
    ap.add_argument("--pairs", metavar="EXT", default="")
    ap.add_argument("--files", type=int, default=0)
    ap.add_argument("--warmup-files", type=int, default=0)
    ap.add_argument("--trace", metavar="FILE", default="")
    a = ap.parse_args()

    t_list = time.monotonic()
    files = list_pairs(a.root) if a.pairs else list_tree(a.root)
    list_secs = time.monotonic() - t_list
    if not files:
        print("bench_echo_reader: no files under %s" % a.root, file=sys.stderr)
        return 1
    ctx = mp.get_context("fork")
    counts = ctx.Array(ctypes.c_uint64, a.procs, lock=False)
    errors = ctx.Array(ctypes.c_uint64, a.procs, lock=False)
    nbytes = ctx.Array(ctypes.c_uint64, a.procs, lock=False)
    stop = ctx.Event()
    shuffle = a.order == "shuffled"
    if not shuffle:
        files.sort(key=os.path.basename)
    procs = [ctx.Process(target=worker, daemon=True, args=(
        files if shuffle else files[i::a.procs], a.seed * 1000 + i, i,
        counts, errors, nbytes, stop, shuffle, a.pairs))
        for i in range(a.procs)]
    for p in procs:
        p.start()
    trace_stop = threading.Event()
    if a.trace:
        threading.Thread(target=tracer, daemon=True,
                         args=(a.root, counts, a.trace, trace_stop)).start()
    try:
        if a.files:
            wait_files(counts, a.warmup_files, a.seconds)
            t0 = snapshot(a.root, counts, nbytes)
            wait_files(counts, t0[1] + a.files, a.seconds)
        else:
            time.sleep(a.warmup)
            t0 = snapshot(a.root, counts, nbytes)
            time.sleep(a.seconds)
        t1 = snapshot(a.root, counts, nbytes)
    finally:
        trace_stop.set()
        stop.set()
        for p in procs:
            p.join(30)  # a reader blocked in a stalled open gets 30 s
            if p.is_alive():
                p.kill()
    out = summarize(t0, t1, a.procs)
    out.update({"root": a.root, "procs": a.procs, "order": a.order, "listed": len(files),
                "list_secs": round(list_secs, 2), "errors": sum(errors)})
    print(json.dumps(out))
    return 1 if out["errors"] or not out["files"] else 0


if __name__ == "__main__":
    sys.exit(main())
