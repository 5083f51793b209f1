#!/usr/bin/python3
"""bench_echo_ceiling.py - the reader, report and plot of
tools/bench/bench_echo_ceiling.sh (echo against Amdahl's ceiling).

  bench_echo_ceiling.py read ROOT --passes N [--procs 2] [--seed 0] [--pid P]
                              [--work none|gray16]
      Lists ROOT/<class>/<file>, shuffles it (seeded) and deals it to --procs
      processes (file i to process i % procs), which open, read whole and
      close their files, reshuffled each pass, N passes; the processes meet
      at a barrier after each pass, so a pass is every file once. --work
      gray16 also does a trainer's work on each file, as bench_train.py's
      gray16 input does (Pillow: decode, grey, 16x16). Prints one
      JSON line: per pass files/s, fresh/s, echoes, stall_s and FUSE requests
      per file (from ROOT/.echofs/stats), daemon CPU ms per file (from
      /proc/P/stat, P = the daemon), the whole machine's CPU ms per file
      (/proc/stat: every process, the kernel's threads and interrupts
      included) and a timeline (files finished in each whole second from
      the readers' start).
  bench_echo_ceiling.py report RESULTS.jsonl [--plot PNG] [--title T]
      One JSON object a line: {"repeat", "build", "case", "out"}. Prints the
      markdown tables (medians over repeats, each echo case as a fraction of
      its repeat's ceiling) and, with --plot, draws the timelines and the
      fractions (matplotlib, /usr/bin/python3).
"""
import argparse
import json
import multiprocessing as mp
import os
import random
import statistics
import sys
import time

from benchlib import list_tree, read_round, read_stats, run_procs

CLK = os.sysconf("SC_CLK_TCK")


def cpu_s(pid):
    """utime + stime of process pid (all its threads), seconds; None if gone."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / CLK
    except (OSError, ValueError, IndexError):
        return None


def machine_cpu_s():
    """CPU seconds the whole machine has spent busy (user, nice, system,
    irq, softirq, steal: /proc/stat's first line)."""
    with open("/proc/stat") as f:
        v = [int(x) for x in f.readline().split()[1:]]
    return (v[0] + v[1] + v[2] + v[5] + v[6] + v[7]) / CLK


def mark(root, pid):
    return {"t": time.monotonic(), "stats": read_stats(root) or {},
            "cpu": cpu_s(pid) if pid else None, "machine": machine_cpu_s()}


def gray16(data):
    """A trainer's work on one file (bench_train.py's gray16 input)."""
    import io
    from PIL import Image
    Image.open(io.BytesIO(data)).convert("L").resize((16, 16))


def reader(part, passes, seed, barrier, q, work):
    rng = random.Random(seed)
    done, bad = [], 0
    for _ in range(passes):
        d, b = read_round(part, rng, gray16 if work == "gray16" else None)
        done += d
        bad += b
        barrier.wait()
    q.put((done, bad))


def pass_summary(a, b, files):
    secs = b["t"] - a["t"]
    sa, sb = a["stats"], b["stats"]
    out = {"files": files, "secs": round(secs, 3),
           "files_per_s": round(files / secs, 1) if secs > 0 else 0.0}

    def d(k):
        return sb.get(k, 0) - sa.get(k, 0) if k in sb else None
    if d("fresh_served") is not None:
        out["fresh_per_s"] = round(d("fresh_served") / secs, 1)
        out["echoes"] = d("echoes_served")
        out["stall_s"] = round(d("stall_s"), 2)
        # Samples the pool holds at the pass's end: its echo stock (served,
        # copies still owed) and fresh ones decoded ahead of the readers.
        out["pool_samples_end"] = sb.get("pool_samples")
        # Decodes the readers never got: samples dropped to fit mem_size,
        # fresh ones given back while a reader waited (re-read later).
        for k in ("pool_dropped", "pool_given_back", "pool_reread"):
            out[k] = d(k)
    for k in ("reads", "ioctls", "lookups", "opens", "echo_page_stores"):
        if files and d(k) is not None:
            out[k + "_per_file"] = round(d(k) / files, 3)
    if files and a["cpu"] is not None and b["cpu"] is not None:
        out["daemon_cpu_ms_per_file"] = round(1000 * (b["cpu"] - a["cpu"]) / files, 3)
    if files and "machine" in a and "machine" in b:
        out["machine_cpu_ms_per_file"] = round(1000 * (b["machine"] - a["machine"]) / files, 3)
    return out


def cmd_read(a):
    files = list_tree(a.root)
    random.Random(a.seed).shuffle(files)
    parts = [files[i::a.procs] for i in range(a.procs)]
    marks = mp.Manager().list()
    root, pid = a.root, a.pid
    barrier = mp.Barrier(a.procs, action=lambda: marks.append(mark(root, pid)))
    q = mp.Queue()
    m0 = mark(a.root, a.pid)
    got = run_procs(reader, [(parts[i], a.passes, a.seed + 1 + i, barrier, q,
                              a.work)
                             for i in range(a.procs)], q)
    ms = [m0] + list(marks)
    bad = sum(g[1] for g in got)
    stamps = sorted(t for g in got for t in g[0])
    out = {"listed": len(files), "errors": bad, "passes": []}
    for k in range(1, len(ms)):
        n = sum(1 for t in stamps if ms[k - 1]["t"] < t <= ms[k]["t"])
        out["passes"].append(pass_summary(ms[k - 1], ms[k], n))
    whole = int(ms[-1]["t"] - m0["t"])
    tl = [0] * whole
    for t in stamps:
        s = int(t - m0["t"])
        if s < whole:
            tl[s] += 1
    out["timeline"] = tl
    out["all"] = pass_summary(m0, ms[-1], len(stamps))
    print(json.dumps(out))
    return 1 if bad or not stamps else 0


# -- report -----------------------------------------------------------------

def ceiling(r1, r2, e):
    return 1.0 / (1.0 / r2 + (1.0 / r1 - 1.0 / r2) / e)


def med(v):
    v = [x for x in v if x is not None]
    return statistics.median(v) if v else None


def fmt(v, f="%.2f"):
    return "-" if v is None else f % v


def load(path):
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


def by_repeat(rows):
    """{repeat: {(build, case): out}}"""
    out = {}
    for r in rows:
        out.setdefault(r["repeat"], {})[(r["build"], r["case"])] = r["out"]
    return out


def echo_of(case):
    return int(case.split("echo=")[1].split()[0])


def serve_us(p, r1, r2):
    """What one served file costs the 2 readers beyond its share of
    decoding, in microseconds of the pass's wall time: 1/rate less the
    fresh share times the exact mount's decode time (1/R1 - 1/R2). The
    ceiling prices it at an exact second-pass read, 1/R2."""
    if not p.get("files_per_s"):
        return None
    fresh = p.get("fresh_per_s", 0) / p["files_per_s"]
    return 1e6 * (1 / p["files_per_s"] - fresh * (1 / r1 - 1 / r2))


def case_rows(reps):
    """Per (build, case) lists of per-repeat figures, each against its own
    repeat's R1 and ceiling."""
    rows = {}
    for rep in reps.values():
        for (build, case), o in rep.items():
            # Each build's echo mounts against its own exact mount (a
            # change that speeds decoding raises its ceiling too).
            ex = rep.get((build, "exact")) or rep.get(("this", "exact"))
            if case == "exact" or not o["passes"] or not ex or len(ex["passes"]) < 2:
                continue
            r1 = ex["passes"][0]["files_per_s"]
            r2 = ex["passes"][1]["files_per_s"]
            c = ceiling(r1, r2, echo_of(case))
            p1, pl = o["passes"][0], o["passes"][-1]
            full = o["timeline"][1:]  # second 0 holds the mount's first lookups
            x = rows.setdefault((build, case), {k: [] for k in (
                "first", "steady", "first_c", "steady_c", "fresh_r1", "fresh3_r1",
                "low_r1", "cpu3", "req3", "stall3", "look3", "serve_us",
                "later_c", "fresh1_x", "first_ceff")})
            x["first"].append(p1["files_per_s"])
            x["steady"].append(pl["files_per_s"])
            x["first_c"].append(p1["files_per_s"] / c)
            # A first pass serves more fresh samples than files / E: the
            # echo copies its fresh samples leave for later passes (each
            # echo waits outside the window). Against the ceiling of the
            # echo factor it actually served, files / fresh, what is left
            # is the price of the serves and the mount's start.
            fresh1 = p1.get("fresh_per_s", 0) * p1["secs"]
            x["fresh1_x"].append(fresh1 * echo_of(case) / p1["files"]
                                 if p1["files"] else None)
            x["first_ceff"].append(
                p1["files_per_s"] / ceiling(r1, r2, p1["files"] / fresh1)
                if fresh1 > 0 else None)
            x["steady_c"].append(pl["files_per_s"] / c)
            # Every pass after the first, pooled: the pool's decoders run
            # ahead in bursts (a pass of the pool spans E passes of the
            # readers), so one pass may catch a fast or a slow phase.
            later = o["passes"][1:]
            secs = sum(q["secs"] for q in later)
            x["later_c"].append(sum(q["files"] for q in later) / secs / c
                                if secs > 0 else None)
            x["fresh_r1"].append(o["all"].get("fresh_per_s", 0) / r1)
            x["fresh3_r1"].append(pl.get("fresh_per_s", 0) / r1)
            x["low_r1"].append(min(full) / r1 if full else None)
            x["cpu3"].append(pl.get("daemon_cpu_ms_per_file"))
            x["req3"].append(pl.get("reads_per_file"))
            x["stall3"].append(pl.get("stall_s"))
            x["look3"].append(pl.get("lookups_per_file"))
            x["serve_us"].append(serve_us(pl, r1, r2))
    return rows


def exact_rates(reps, build):
    """R1s and R2s of build's exact mounts, one per repeat."""
    r1s, r2s = [], []
    for rep in reps.values():
        ex = rep.get((build, "exact"))
        if ex and len(ex["passes"]) >= 2:
            r1s.append(ex["passes"][0]["files_per_s"])
            r2s.append(ex["passes"][1]["files_per_s"])
    return r1s, r2s


def cmd_report(a):
    rows = load(a.results)
    reps = by_repeat(rows)
    r1s, r2s = exact_rates(reps, "this")
    if not r1s:
        sys.exit("report: no exact runs")
    pairs = sorted(zip(r1s, r2s))
    r1, r2 = med(r1s), med(r2s)
    c2 = med([ceiling(x, y, 2) for x, y in pairs])
    c4 = med([ceiling(x, y, 4) for x, y in pairs])
    runs = lambda v, f="%.0f": " / ".join(f % x for x in v)
    print(f"R1 (exact, first pass) **{r1:.0f}** files/s ({runs(r1s)}); "
          f"R2 (exact, second pass) **{r2:.0f}** ({runs(r2s)}); "
          f"ceiling C(E=2) **{c2:.0f}** ({c2 / r1:.2f}x R1), "
          f"C(E=4) **{c4:.0f}** ({c4 / r1:.2f}x R1). Medians over {len(r1s)} repeats. "
          f"An exact second-pass read costs {1e6 / r2:.0f} us of the readers' wall time: "
          f"the price of an echo serve in C.\n")
    b1s, b2s = exact_rates(reps, "before")
    if b1s:
        print(f"The before build's own exact mount: R1 **{med(b1s):.0f}** ({runs(b1s)}), "
              f"R2 **{med(b2s):.0f}** ({runs(b2s)}), C(E=4) "
              f"**{med([ceiling(x, y, 4) for x, y in zip(b1s, b2s)]):.0f}**; "
              f"its echo mounts are against that.\n")
    n = max(len(o["passes"]) for rep in reps.values()
            for (b, c), o in rep.items() if c != "exact")
    last = {2: "2nd", 3: "3rd"}.get(n, "%dth" % n)
    print(f"| build | mount | first pass files/s | ÷ C | fresh ÷ files/E; ÷ C(files/fresh) (first) | steady ({last} pass) files/s | ÷ C "
          f"| passes 2-{n} ÷ C "
          f"| fresh/s ÷ R1 (run; {last} pass) | lowest second ÷ R1 | daemon CPU ms/file ({last}) "
          f"| READs/file ({last}) | LOOKUPs/file ({last}) | serve us/file ({last}) "
          f"| reader wait s ({last}) | steady ÷ C per repeat |")
    print("| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: "
          "| ---: | ---: | ---: | --- |")
    for (build, case), x in sorted(case_rows(reps).items(),
                                   key=lambda kv: (kv[0][0] != "before", kv[0][1])):
        print(f"| {build} | {case} | {med(x['first']):.0f} | **{med(x['first_c']):.2f}** "
              f"| {fmt(med(x['fresh1_x']))}; {fmt(med(x['first_ceff']))} "
              f"| {med(x['steady']):.0f} | **{med(x['steady_c']):.2f}** "
              f"| **{fmt(med(x['later_c']))}** "
              f"| **{med(x['fresh_r1']):.2f}**; {med(x['fresh3_r1']):.2f} "
              f"| {fmt(med(x['low_r1']))} | {fmt(med(x['cpu3']), '%.3f')} "
              f"| {fmt(med(x['req3']), '%.2f')} | {fmt(med(x['look3']), '%.2f')} "
              f"| {fmt(med(x['serve_us']), '%.0f')} | {fmt(med(x['stall3']))} "
              f"| {runs(x['steady_c'], '%.2f')} |")
    if a.plot:
        plot(reps, r1, c2, c4, a.plot, a.title)
    return 0


def plot(reps, r1, c2, c4, path, title):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    # The middle repeat's timelines (the first repeat if there are two).
    keys = sorted(reps)
    rep = reps[keys[(len(keys) - 1) // 2]]
    fig, ax = plt.subplots(figsize=(10, 5.5))
    for (build, case), o in sorted(rep.items()):
        if case == "exact":
            continue
        style = "--" if build == "before" else "-"
        ax.plot(range(len(o["timeline"])), o["timeline"], style,
                label=f"{build}: {case}", linewidth=1.4)
    ax.axhline(r1, color="black", linewidth=1, label=f"R1 exact first pass ({r1:.0f})")
    ax.axhline(c2, color="grey", linestyle=":", label=f"ceiling E=2 ({c2:.0f})")
    ax.axhline(c4, color="grey", linestyle="-.", label=f"ceiling E=4 ({c4:.0f})")
    n = max(len(o["passes"]) for o in rep.values())
    ax.set_xlabel(f"second since the readers started ({n} passes of every file)")
    ax.set_ylabel("files/s (2 readers)")
    ax.set_ylim(bottom=0)
    ax.set_title(title or "echo mounts against Amdahl's ceiling")
    ax.legend(fontsize=7, ncol=2, loc="lower right")
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("read")
    r.add_argument("root")
    r.add_argument("--passes", type=int, required=True)
    r.add_argument("--procs", type=int, default=2)
    r.add_argument("--seed", type=int, default=0)
    r.add_argument("--pid", type=int, default=0)
    r.add_argument("--work", choices=("none", "gray16"), default="none")
    p = sub.add_parser("report")
    p.add_argument("results")
    p.add_argument("--plot")
    p.add_argument("--title")
    a = ap.parse_args()
    sys.exit(cmd_read(a) if a.cmd == "read" else cmd_report(a))


if __name__ == "__main__":
    main()
