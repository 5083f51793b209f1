#!/usr/bin/python3
"""slowlink_report.py - bench_slowlink.sh's table: per reader, the median
seconds to each target accuracy (every run's value after it), the first
evaluation's time (the first 50 steps), the time the loop waited for
batches, the images trained on by the end of the run (a run goes on to
its last target, so a reader may be into its second epoch), and the bytes
through the cap in the whole run against the dataset's shard bytes.

  slowlink_report.py --runs runs.jsonl --dataset-bytes N > table.md

A target a run did not reach within its budget counts as later than any
reached one (shown as ">BUDGET"); a median that falls on one is shown so.
"""

import argparse
import json
import math
import sys

ORDER = ["exact", "wds-equivalent", "echo=4"]


def median(xs):
    xs = sorted(xs)
    n = len(xs)
    if n == 0:
        return None
    return xs[n // 2] if n % 2 else (xs[n // 2 - 1] + xs[n // 2]) / 2


def fmt(v, budget=None):
    if v is None:
        return "-"
    if math.isinf(v):
        return ">%d" % budget if budget else "not reached"
    return "%.0f" % v


def cell(vals, budget=None):
    m = fmt(median(vals), budget)
    if len(vals) < 2:
        return m
    return "%s (%s)" % (m, ", ".join(fmt(v, budget) for v in vals))


def rows(runs, targets):
    labels = sorted({r["label"] for r in runs},
                    key=lambda l: (ORDER.index(l) if l in ORDER else 99, l))
    for label in labels:
        rs = sorted((r for r in runs if r["label"] == label),
                    key=lambda r: r["repeat"])
        budget = rs[0].get("budget_s")
        reach = [[r["reached"].get(str(t), math.inf) for r in rs] for t in targets]
        yield label, rs, budget, reach


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", required=True)
    ap.add_argument("--dataset-bytes", type=int, required=True)
    a = ap.parse_args()
    runs = [json.loads(l) for l in open(a.runs) if l.strip()]
    if not runs:
        print("no runs")
        return 1
    targets = runs[0]["targets"]
    out = sys.stdout
    out.write("Seconds from start to test accuracy (median, then each run "
              "by repeat):\n\n")
    out.write("| reader | runs | " + " | ".join("%.2f" % t for t in targets) +
              " | first 50 steps, s | loader wait, s | images trained on "
              "| through the cap ÷ dataset |\n")
    out.write("|---|---|" + "---|" * len(targets) + "---|---|---|---|\n")
    for label, rs, budget, reach in rows(runs, targets):
        cols = [cell(v, budget) for v in reach]
        first = cell([r["first_steps_s"] for r in rs if r.get("first_steps_s") is not None])
        wait = cell([r["wait_s"] for r in rs])
        cap = [r["cap_bytes"] / a.dataset_bytes for r in rs if "cap_bytes" in r]
        capc = "%.2f" % median(cap) if cap else "-"
        if len(cap) > 1:
            capc += " (%s)" % ", ".join("%.2f" % c for c in cap)
        seen = "%d" % median([r["seen"] for r in rs])
        out.write("| %s | %d | %s | %s | %s | %s | %s |\n" % (
            label, len(rs), " | ".join(cols), first, wait, seen, capc))
    out.write("\nEvery run in the order they ran (repeat, end time, steps, "
              "final accuracy, wait, bytes through the cap, the mount's "
              "range_reads):\n\n")
    for r in runs:
        out.write("- repeat %d %s: %.0f s, %d steps, acc %.4f, wait %.0f s, "
                  "%.1f MB through the cap%s\n" % (
                      r["repeat"], r["label"], r["time_s"], r["steps"],
                      r["acc"], r["wait_s"], r.get("cap_bytes", 0) / 1e6,
                      ", range_reads %d" % r["mount"]["range_reads"]
                      if "range_reads" in r.get("mount", {}) else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
