#!/usr/bin/python3
"""nodes_report.py - Markdown tables (medians over runs) from bench_nodes.sh's
pass.jsonl and train.jsonl.

  nodes_report.py --pass PASS.jsonl --train TRAIN.jsonl [--target 0.87]
"""

import argparse
import json
import statistics


def rows(path):
    try:
        with open(path) as f:
            return [json.loads(ln) for ln in f if ln.strip()]
    except OSError:
        return []


def med(xs):
    return statistics.median(xs) if xs else float("nan")


def pass_table(recs):
    """One row per (W, mode); scaling against W=1 of the same mode (else full)."""
    groups = {}
    for r in recs:
        groups.setdefault((r["world"], r["mode"]), []).append(r)
    one = {}
    for (w, mode), rs in groups.items():
        if w == 1:
            one[mode] = med([r["agg_samples_per_s"] for r in rs])
    out = ["| W | mode | origin MB / pass | × dataset | wall (s) | aggregate samples/s | "
           "× one node | goal | per-node trees | errors | runs |",
           "|---:|---|---:|---:|---:|---:|---:|---|---|---:|---:|"]
    for (w, mode) in sorted(groups, key=lambda k: (k[1], k[0])):
        rs = groups[(w, mode)]
        ob = med([r["origin_bytes"] for r in rs])
        ratio = med([r["origin_bytes"] / r["dataset_bytes"] for r in rs])
        agg = med([r["agg_samples_per_s"] for r in rs])
        ref = one.get(mode, one.get("full"))
        scale = agg / ref if ref else float("nan")
        goal = ""
        if mode == "part":
            goal = "bytes %s, rate %s" % ("met" if ratio <= 1.05 else "missed",
                                          ("met" if scale >= 0.9 * w else "missed")
                                          if ref else "(no W=1 run)")
        out.append("| %d | %s | %.1f | %.2f× | %.1f | %.0f | %.2f× | %s | %s | %d | %d |" % (
            w, mode, ob / 1e6, ratio, med([r["wall_s"] for r in rs]), agg, scale, goal,
            "/".join(str(n) for n in rs[0]["tree_samples"]),
            sum(r["errors"] for r in rs), len(rs)))
    return out


def train_table(recs, target):
    groups = {}
    for r in recs:
        groups.setdefault((r["world"], r["partitioned"]), []).append(r)
    ref = None
    for (w, p), rs in groups.items():
        if w == 1:
            ref = med([r["time_s"] for r in rs if r.get("reached")] or [float("nan")])
    out = ["| W | partitioned | time to %.0f%% (s) | reached | × faster than W=1 | steps | "
           "fresh (all nodes) | fresh per node (median each) | echoes | origin MB | runs |" % (target * 100),
           "|---:|---|---:|---|---:|---:|---:|---|---:|---:|---:|"]
    for (w, p) in sorted(groups):
        rs = groups[(w, p)]
        t = med([r["time_s"] for r in rs if r.get("reached")] or [float("nan")])
        out.append("| %d | %s | %.1f | %d/%d | %.2f× | %d | %d | %s | %d | %.1f | %d |" % (
            w, "yes" if p else "no", t, sum(1 for r in rs if r.get("reached")), len(rs),
            ref / t if ref else float("nan"), med([r["step"] for r in rs]),
            med([r["fresh"] for r in rs]),
            " / ".join("%d" % med([r["fresh_per_rank"][k] for r in rs]) for k in range(w)),
            med([r["echoes"] for r in rs]),
            med([r["origin_bytes"] for r in rs]) / 1e6, len(rs)))
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pass", dest="pass_", required=True)
    ap.add_argument("--train", required=True)
    ap.add_argument("--target", type=float, default=0.87)
    a = ap.parse_args()
    p, t = rows(a.pass_), rows(a.train)
    if p:
        print("One pass, exact mounts (mode full: every node mounts the whole dataset and reads "
              "its DistributedSampler share; part: -o rank=r,world=W):\n")
        print("\n".join(pass_table(p)))
    if t:
        print("\nTime to the target with echoing (dist_train.py):\n")
        print("\n".join(train_table(t, a.target)))


if __name__ == "__main__":
    main()
