#!/bin/bash
# bench_echo.sh - data echoing speedup: files/s delivered to shuffled readers
# by an echofs mount whose upstream is capped, for echo E = 1..4 in adaptive
# and fixed modes, against an exact mount over the same cap.
#   tools/bench/bench_echo.sh [--rate 8mbit] [--seconds 20] [--warmup 3] [--procs 2]
#                       [--runs 1] [--echoes "2 3 4"] [--modes "adaptive fixed"]
#                       [--seed 1] [--out /tmp/echofs-bench] [--budget 1800]
#                       [--layout imagefolder|samples]
#                       [--files N --warmup-files N]
# nginx and every echofs daemon run in a private network namespace whose
# loopback is capped to --rate by tc tbf; the readers (tools/bench/bench_echo_reader.py)
# read the mount from outside for --seconds after --warmup. Every mount gets a
# fresh cache_dir and the same seed. --runs repeats everything (medians).
# Results: OUT/echo/results.jsonl (one line a measurement), OUT/echo/table.md,
# OUT/echo/trace-LABEL-RUN.jsonl (the echo statistics every 0.5 s).
# Data is packed once into OUT/data. BUILD_DIR picks the build (default build).
# --layout samples mounts every member (-o layout=samples: whole-sample echo)
# and the readers read each key.jpg with its key.cls, counting pairs.
# --files counts the window in files, as a user times a job: it opens after
# --warmup-files read from mount and closes --files later (--seconds then
# bounds each of the two waits).
set -euo pipefail
cd "$(dirname "$0")/../.."

RATE=8mbit
SECONDS_=20
WARMUP=3
PROCS=2
RUNS=1
ECHOES="2 3 4"
MODES="adaptive fixed"
SEED=1
OUT=/tmp/echofs-bench
BUDGET=1800
LAYOUT=imagefolder
FILES=0
WARMUP_FILES=0
CMDLINE="tools/bench/bench_echo.sh $*"
# shellcheck source=tools/bench/common.sh
. tools/bench/common.sh
bench_args 2,20 --rate=RATE --seconds=SECONDS_ --warmup=WARMUP \
	--procs=PROCS --runs=RUNS --echoes=ECHOES --modes=MODES --seed=SEED \
	--out=OUT --budget=BUDGET --layout=LAYOUT --files=FILES --warmup-files=WARMUP_FILES -- "$@"

DATA=$OUT/data
RES=$OUT/echo-$LAYOUT
mkdir -p "$RES"
OUT=$(cd "$OUT" && pwd)
DATA=$OUT/data
RES=$OUT/echo-$LAYOUT
PAIRS=()
LAYOUT_OPT=""
if [ "$LAYOUT" = samples ]; then
	PAIRS=(--pairs cls)
	LAYOUT_OPT=layout=samples,
fi
# shellcheck source=tools/bench/bench_netns.sh
. tools/bench/bench_netns.sh
netns_bench_start echo "$BUDGET"

bench_snapshot
pack() {
	[ -f "$DATA/shards/train-000059.tar" ] && [ -d "$DATA/tree-train/9" ] && return 0
	blog "packing Fashion-MNIST train into $DATA"
	mkdir -p "$DATA"
	"$B"/tools/echofs-pack --split train --out "$DATA/shards" --tree "$DATA/tree-train" >/dev/null
}

# measure LABEL ROOT [ORDER]: one reader window; appends a JSON line to results.jsonl
measure() {
	local label=$1 root=$2 out
	out=$(timeout $((WARMUP + 2 * SECONDS_ + 90)) $PY tools/bench/bench_echo_reader.py "$root" \
		--procs "$PROCS" --seconds "$SECONDS_" --warmup "$WARMUP" --seed "$SEED" \
		--files "$FILES" --warmup-files "$WARMUP_FILES" \
		--trace "$RES/trace-${label// /_}-$RUN.jsonl" \
		--order "${3:-shuffled}" ${4:+"${PAIRS[@]}"}) ||
		blog "$label: reader reported errors"
	[ -n "$out" ] || out='{"files_per_s": null}'
	blog "$label: $(echo "$out" | cut -c1-200)"
	echo "$out" | $PY -c 'import json,sys
d=json.loads(sys.stdin.read()); d["label"]=sys.argv[1]; d["run"]=int(sys.argv[2])
print(json.dumps(d))' "$label" "$RUN" >>"$RES/results.jsonl"
}

# echo_case LABEL OPTS [ORDER]: fresh cache, mount inside the namespace, read, unmount
echo_case() {
	local label=$1 opts=$2 cache=$BTMP/cache mnt=$BTMP/mnt
	rm -rf "$cache"
	bench_mount NS "$cache" "$mnt" "$SOURCE" "${LAYOUT_OPT}index=$BTMP/train.idx${opts:+,$opts}"
	measure "$label" "$mnt" "${3:-shuffled}" mount
	bench_unmount "$mnt"
	rm -rf "$cache"
}

pack
: >"$RES/results.jsonl"
netns_start "$RATE"
netns_nginx "$DATA"
SOURCE="$NS_BASE/shards/train-{000000..000059}.tar"
"$B"/tools/echofs-index --base-url "$NS_BASE/shards/" -o "$BTMP/train.idx" \
	"$DATA"/shards/train-*.tar >/dev/null

for ((RUN = 1; RUN <= RUNS; RUN++)); do
	blog "run $RUN/$RUNS"
	$PY tools/bench/bench_echo_reader.py "$DATA/tree-train" --seconds 2 --warmup 0 >/dev/null # warm page cache
	measure local "$DATA/tree-train"
	echo_case exact ""
	echo_case exact-seq "" shard
	echo_case "echo=1" "echo=1,echo_mode=adaptive,seed=$SEED"
	for e in $ECHOES; do
		for m in $MODES; do
			echo_case "$m echo=$e" "echo=$e,echo_mode=$m,seed=$SEED"
		done
	done
done

{
	echo "### Data echoing ($LAYOUT layout): files/s delivered to $PROCS shuffled readers, upstream capped at $RATE"
	echo
	$PY - "$RES/results.jsonl" <<'EOF'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
by = {}
for r in rows:
    by.setdefault(r["label"], []).append(r)
def med(label, key):
    v = [r.get(key) for r in by.get(label, []) if r.get(key) is not None]
    return statistics.median(v) if v else None
def f(v, fmt="%.0f"):
    return "n/a" if v is None else fmt % v
exact = med("exact", "files_per_s")
seq = med("exact-seq", "files_per_s")
echo1 = med("echo=1", "files_per_s")
local = med("local", "files_per_s")
# The goal is judged against the best exact-rate baseline measured.
base = max(v for v in (exact, seq, echo1, 0.0) if v is not None)
BASES = ("local", "exact", "exact-seq", "echo=1")
print("| mount | E | files/s | fresh/s | effective e | stall % | x exact | x echo=1 | goal >= 0.9·E·base |")
print("|---|---:|---:|---:|---:|---:|---:|---:|---|")
for label in by:
    fps = med(label, "files_per_s")
    e = 1 if label in BASES else float(label.split("=")[1])
    goal = ""
    if label not in BASES and base and fps:
        goal = ("met" if fps >= 0.9 * e * base else "missed") + \
            " (%.2f·E·base)" % (fps / base / e)
    name = {"local": "local tree, warm page cache (ceiling)",
            "exact": "exact mount (no echo option)",
            "exact-seq": "exact mount, readers in shard order (not shuffled)",
            "echo=1": "echo mount, echo=1"}.get(label, label)
    print("| %s | %s | %s | %s | %s | %s | %s | %s | %s |" % (
        name, "-" if label == "local" else "%g" % e, f(fps, "%.1f" if fps and fps < 10 else "%.0f"),
        f(med(label, "fresh_per_s")),
        f(med(label, "effective_echo"), "%.2f"), f(med(label, "stall_pct"), "%.1f"),
        f(fps / exact if fps and exact and label != "local" else None, "%.2f"),
        f(fps / echo1 if fps and echo1 and label != "local" else None, "%.2f"), goal))
runs = max(r["run"] for r in rows)
print()
print("- medians of %d run%s; base (best exact-rate baseline) = %s files/s; "
      "exact / local ceiling = %s, best baseline / local = %s (must be <= 0.25)" % (
    runs, "" if runs == 1 else "s", f(base),
    f(exact / local if exact and local else None, "%.4f"),
    f(base / local if base and local else None, "%.3f")))
EOF
	cat <<EOF
- throttle: \`unshare -n\`; inside: \`ip link set lo up mtu 9000; tc qdisc add dev lo root tbf rate $RATE burst 128kb latency 2000ms\`; nginx (tools/dev/nginx.py) and echofs daemons run inside, readers outside
- echofs: \`$B/echofs -o ${LAYOUT_OPT}cache_dir=FRESH,index=IDX[,echo=E,echo_mode=M,seed=$SEED] '$NS_BASE/shards/train-{000000..000059}.tar' MNT\` (Fashion-MNIST train, 60 shards, 60,000 JPEGs)
- reader: \`/usr/bin/python3 tools/bench/bench_echo_reader.py MNT --procs $PROCS --seconds $SECONDS_ --warmup $WARMUP --seed $SEED${PAIRS[*]:+ ${PAIRS[*]}}\` (each process its own shuffled order, counts over the window after warm-up; fresh/s, e and stall % from .echofs/stats deltas over the same window; stall % = stall_s / (window x procs))
- command: \`$CMDLINE\` ($ECHOFS_INFO; $(nproc) cores, load average at end $(cut -d' ' -f1-3 /proc/loadavg), $(date -u +%Y-%m-%dT%H:%MZ))
EOF
} | tee "$RES/table.md"
