#!/usr/bin/python3
"""bench_train_report.py - turn bench_train.sh's runs.jsonl and evals.jsonl
into a CSV, a markdown table (stdout) and an accuracy plot.

  bench_train_report.py --runs RUNS.jsonl --evals EVALS.jsonl --target 0.87
                        --csv OUT.csv --png OUT.png

Each echo run is compared with the E=1 run of the same mode: speedup is
E=1's time to target over this run's, fresh ratio is this run's fresh
examples over E=1's. The goal (E=4 at least 2x sooner with at most 1.1x the
fresh examples) is checked per mode. Repeats of a run (same label) are
summarized by medians over the repeats that reached the target. The plot has
two panels: accuracy on the test subset against wall time and against fresh
examples (repeat 1 solid colours, later repeats faint).

For other benchmarks (tools/bench/bench_train_decode.sh): --baseline LABEL
compares every run with that one run instead of its mode's E=1;
--goal-speedup X judges E=4 as "at least X times sooner" (default 2);
--refs "A B" names reference rows (like local: images/s shown, no
comparison); --title, --ymin, --ymax and --subset set the plot's title,
accuracy range and the evaluation subset size it names. When the runs carry
load1 (the load average at their end) the table gets img/s (median over
repeats of the trainer's steady rate: images between its evaluation at 10 s
and its last, from EVALS) and load columns.
"""

import argparse
import csv
import json


def load(path):
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


def fmt(v, f="%.1f"):
    return "n/a" if v is None else f % v


def median(v):
    v = sorted(x for x in v if x is not None)
    if not v:
        return None
    n = len(v)
    return v[n // 2] if n % 2 else (v[n // 2 - 1] + v[n // 2]) / 2


def steady_rate(evals, label, repeat):
    """Images/s between the first evaluation at >= 10 s and the last one of
    a run: the trainer's rate without its start-up (None if too short)."""
    es = [e for e in evals or () if e["label"] == label and e.get("repeat", 1) == repeat]
    es = [e for e in es if e["time_s"] >= 10] or es
    if len(es) < 2 or es[-1]["time_s"] <= es[0]["time_s"]:
        return None
    return (es[-1]["seen"] - es[0]["seen"]) / (es[-1]["time_s"] - es[0]["time_s"])


def summarize(runs, evals=None):
    """label -> medians over the repeats that reached the target."""
    out = {}
    for r in runs:
        out.setdefault(r["label"], []).append(r)
    summ = {}
    for label, rs in out.items():
        ok = [r for r in rs if r.get("reached")]
        # No repeat reached the target: show what the runs used by the budget.
        at_budget = not ok
        ok = ok or rs
        summ[label] = {
            "n": len(rs), "reached": len(rs) - len(ok) if at_budget else len(ok),
            "at_budget": at_budget,
            "time_s": None if at_budget else median([r["time_s"] for r in ok]),
            "fresh": median([r["fresh"] for r in ok]),
            "seen": median([r["seen"] for r in ok]),
            "eff": median([r.get("effective_echo") for r in ok]),
            "acc": median([r.get("acc_full") for r in ok]),
            "times": [r["time_s"] if r.get("reached") else None for r in rs],
            "rate": median([steady_rate(evals, label, r.get("repeat", 1)) or
                            r["seen"] / r["time_s"] for r in rs if r["time_s"]]),
            "load": median([r.get("load1") for r in rs]),
            "budget": rs[0]["budget_s"]}
    return summ


def budget_note(m):
    return " (at budget)" if m["at_budget"] else ""


def table(runs, target, baseline=None, goal=2.0, refs=("local",), evals=None):
    summ = summarize(runs, evals)
    loads = any(m["load"] is not None for m in summ.values())
    print("| run | reached %.0f%% | time to target (s), median | per repeat | "
          "fresh examples | served | effective e | speedup vs E=1 | fresh vs E=1 |%s"
          % (100 * target, " img/s | load |" if loads else ""))
    print("|---|---|---:|---|---:|---:|---:|---:|---:|%s" % ("---:|---:|" if loads else ""))
    goals = []
    for label, m in summ.items():
        mode = label.split()[0]
        b = summ.get(baseline or mode + " E=1")
        ref = label in refs
        speed = fr = None
        if not ref and b and b["time_s"] and m["time_s"]:
            speed = b["time_s"] / m["time_s"]
            fr = m["fresh"] / b["fresh"] if b["fresh"] else None
        name = label
        if label == "local":
            name = "local tree, no cap (trainer ceiling, %d img/s)" % (
                [r["seen"] / r["time_s"] for r in runs if r["label"] == "local"][0])
        print("| %s | %d/%d | %s | %s | %s | %s | %s | %s | %s |%s" % (
            name, m["reached"], m["n"], fmt(m["time_s"]),
            ", ".join(fmt(t) if t else ">%d" % m["budget"] for t in m["times"]),
            "-" if ref else fmt(m["fresh"], "%.0f") + budget_note(m),
            fmt(m["seen"], "%.0f") + budget_note(m),
            fmt(m["eff"], "%.2f") if m["eff"] else "-",
            fmt(speed, "%.2fx"), fmt(fr, "%.2fx"),
            " %s | %s |" % (fmt(m["rate"], "%.0f"), fmt(m["load"])) if loads else ""))
        if label.endswith("E=4"):
            ok = speed is not None and speed >= goal and fr is not None and fr <= 1.1
            if goal > 1:
                what = "at least %gx sooner" % goal
            else:
                what = "sooner"
            goals.append("- goal, %s (%s, fresh <= 1.1x): E=4 speedup %s with %s the "
                         "fresh examples of E=1 (medians): %s" % (
                             mode, what, fmt(speed, "%.2fx"), fmt(fr, "%.2fx"),
                             "met" if ok else "missed"))
    print()
    print("\n".join(goals))


def write_csv(runs, path):
    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["run", "repeat", "time_s", "fresh", "accuracy", "reached", "served",
                    "steps", "effective_echo"])
        for r in runs:
            w.writerow([r["label"], r.get("repeat", 1), r["time_s"], r["fresh"], r.get("acc_full"),
                        int(bool(r.get("reached"))), r["seen"], r["step"],
                        r.get("effective_echo")])


COLORS = {"1": "tab:blue", "2": "tab:orange", "3": "tab:red", "4": "tab:green"}


def plot(evals, target, path, title=None, ylim=(0.6, None), refs=("local",), subset=2000):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(12, 4.5))
    labels = []
    for e in evals:
        key = (e["label"], e.get("repeat", 1))
        if key not in labels:
            labels.append(key)
    for lab, rep in labels:
        pts = [e for e in evals if e["label"] == lab and e.get("repeat", 1) == rep]
        kw = {"alpha": 1.0 if rep == 1 else 0.35}
        ref = lab in refs
        style = ":" if ref else ("-" if lab.startswith("adaptive") else "--")
        name = "local tree (no cap)" if lab == "local" else lab
        name = name if rep == 1 else None  # later repeats: fainter, unlabelled
        color = "gray" if lab == "local" else COLORS.get(lab.split("=")[-1], None)
        if ref and lab != "local":
            color = ("gray", "tab:purple", "tab:brown")[refs.index(lab) % 3]
        ax1.plot([p["time_s"] for p in pts], [p["acc_subset"] for p in pts], style,
                 label=name, marker=".", markersize=3, color=color, **kw)
        if not ref:
            ax2.plot([p["fresh"] for p in pts], [p["acc_subset"] for p in pts], style,
                     label=name, marker=".", markersize=3, color=color, **kw)
    for ax, xl in ((ax1, "wall time (s)"), (ax2, "fresh examples")):
        ax.axhline(target, color="gray", linewidth=0.8)
        ax.set_xlabel(xl)
        ax.set_ylabel("test accuracy (%s-image subset)" % format(subset, ","))
        ax.set_ylim(ylim[0], ylim[1] or max(0.92, target + 0.03))
        ax.grid(alpha=0.3)
    ax1.legend(fontsize=8)
    ax1.set_title(title or "Fashion-MNIST via echofs, capped upstream", fontsize=9)
    ax2.set_title("same runs against fresh examples")
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", required=True)
    ap.add_argument("--evals", required=True)
    ap.add_argument("--target", type=float, required=True)
    ap.add_argument("--csv", required=True)
    ap.add_argument("--png", required=True)
    ap.add_argument("--baseline", help="label every run is compared with (default: its mode's E=1)")
    ap.add_argument("--goal-speedup", type=float, default=2.0)
    ap.add_argument("--refs", default="local", help="reference labels, space separated")
    ap.add_argument("--title")
    ap.add_argument("--ymin", type=float, default=0.6)
    ap.add_argument("--ymax", type=float)
    ap.add_argument("--subset", type=int, default=2000, help="test images per evaluation (plot label)")
    a = ap.parse_args()
    refs = tuple(a.refs.split())
    runs, evals = load(a.runs), load(a.evals)
    print("### Data echoing while training: time and fresh examples to %.0f%% "
          "test accuracy" % (100 * a.target))
    print()
    table(runs, a.target, a.baseline, a.goal_speedup, refs, evals)
    write_csv(runs, a.csv)
    plot(evals, a.target, a.png, a.title, (a.ymin, a.ymax), refs, a.subset)


if __name__ == "__main__":
    main()
