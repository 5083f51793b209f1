#!/bin/bash
# bench_echo_cost.sh - what an echo mount's serve costs beyond an exact
# mount's when echo has nothing to add (issue 30: the default echo mode
# over a warm prepared tier reached a trainer's target 1.02-1.22x later
# than an exact mount over it, with no echo served). Side by side in one
# run, over photo-sized JPEGs on a warm disk cache and a warm tier (one
# exact pass with prepared=1 makes it; its files stay in the page cache,
# as after the job that made them), -o size=256,crop=224,format=ppm:
#   exact   prepared=1
#   echo    the same with echo=4 (the default adaptive mode: exact first;
#           over a warm tier its governor stays at 1 and every path is
#           served its own sample)
# alternating REPEATS times, each a new mount read for 2 passes by 2
# shuffled readers that do a trainer's work on every file (--work gray16:
# Pillow decode, grey, 16x16, as bench_train.py's gray16 input). Per pass:
# files/s, FUSE requests per file (the mount's stats; an echo mount's
# OPEN has a RELEASE too), the daemon's and the whole machine's CPU ms per
# file. Medians and echo/exact ratios, as a Markdown table.
#   tools/bench/bench_echo_cost.sh [--count N] [--repeats R] [--data DIR]
#                                  [--prepared 0]
# --count: photos (default 4000); --repeats: default 3; --data DIR: keep
# the packed shards for later runs; --prepared 0: no tier, both mounts
# decode each file at its first serve (bench_train_decode.sh's setting).
# Say in any report whether the machine was shared.
set -euo pipefail
cd "$(dirname "$0")/../.."

COUNT=4000
REPEATS=3
DATA=
PREPARED=1
CMDLINE="tools/bench/bench_echo_cost.sh $*"
# shellcheck source=tools/bench/common.sh
. tools/bench/common.sh
bench_args 2,23 --count=COUNT --repeats=REPEATS --data=DATA --prepared=PREPARED -- "$@"
$PY -c 'import PIL' 2>/dev/null ||
	{ echo "bench_echo_cost.sh: needs python3-pil" >&2; exit 2; }

READER=tools/bench/bench_echo_ceiling.py
bench_start echo-cost
RESULTS=$TMP/results.jsonl
bench_photos "$COUNT" 500 375 "$DATA"

PREP="size=256,crop=224,format=ppm,prepared=$PREPARED"
mount_echofs warm "format=same,prepared=0"
$PY $READER read "$MNT" --passes 1 >/dev/null
unmount "$MNT" "$DPID"
if [ "$PREPARED" = 1 ]; then
	mount_echofs tier "$PREP"
	$PY $READER read "$MNT" --passes 1 >/dev/null
	unmount "$MNT" "$DPID"
	log "disk cache and tier warm: $(du -sh "$TMP/cache/prepared" | cut -f1) of prepared samples"
fi

# run REPEAT CASE OPTS: a new mount, the tier's files (if any) read into
# the page cache first, 2 passes; one JSON line
run() {
	[ "$PREPARED" = 1 ] && find "$TMP/cache/prepared" -type f -exec cat {} + >/dev/null
	mount_echofs "$2" "$3"
	out=$($PY $READER read "$MNT" --passes 2 --seed "$1" --pid "$DPID" --work gray16) ||
		log "reader reported errors ($2)"
	unmount "$MNT" "$DPID"
	record_passes "$1" "$2" "$out"
}
LOAD0=$(cut -d' ' -f1-3 /proc/loadavg)
for ((i = 1; i <= REPEATS; i++)); do
	if ((i % 2)); then
		run "$i" exact "$PREP"
		run "$i" echo "$PREP,echo=4"
	else
		run "$i" echo "$PREP,echo=4"
		run "$i" exact "$PREP"
	fi
done
LOAD1=$(cut -d' ' -f1-3 /proc/loadavg)

$PY - "$RESULTS" <<'EOF'
import json, statistics, sys

rows = [json.loads(l) for l in open(sys.argv[1])]
keys = [("files_per_s", "files/s", "%.0f"),
        ("lookups_per_file", "LOOKUP", "%.2f"),
        ("opens_per_file", "OPEN", "%.2f"),
        ("ioctls_per_file", "IOCTL", "%.2f"),
        ("reads_per_file", "READ", "%.2f"),
        ("daemon_cpu_ms_per_file", "daemon CPU ms/file", "%.3f"),
        ("machine_cpu_ms_per_file", "machine CPU ms/file", "%.3f")]
print("| pass | case | " + " | ".join(k[1] for k in keys) + " |")
print("|---|---|" + "---:|" * len(keys))
for p in (0, 1):
    med = {}
    for case in ("exact", "echo"):
        vals = {}
        for k, _, _ in keys:
            v = [r["out"]["passes"][p].get(k) for r in rows
                 if r["case"] == case and len(r["out"]["passes"]) > p]
            v = [x for x in v if x is not None]
            vals[k] = statistics.median(v) if v else None
        med[case] = vals
        print(f"| {p + 1} | {case} | " + " | ".join(
            "-" if vals[k] is None else f % vals[k] for k, _, f in keys) + " |")
    # Ratios of rates and costs; request counts are compared as they are.
    print(f"| {p + 1} | echo ÷ exact | " + " | ".join(
        "-" if "per_file" in k and "cpu" not in k or not med["exact"][k]
        or med["echo"][k] is None
        else "%.2f" % (med["echo"][k] / med["exact"][k]) for k, _, _ in keys) + " |")
per = {}
for r in rows:
    per.setdefault(r["case"], []).append(
        ", ".join("%.0f" % p["files_per_s"] for p in r["out"]["passes"]))
print()
for case, v in per.items():
    print(f"- {case}, files/s per repeat (pass 1, pass 2): " + "; ".join(v))
EOF
echo
echo "- medians of $REPEATS repeats, cases alternating; $COUNT photos 500x375, 2 readers with --work gray16; prepared=$PREPARED; load average $LOAD0 before, $LOAD1 after"
echo "- command: \`$CMDLINE\` ($("$B"/echofs --version 2>/dev/null | head -1), $(git rev-parse --short HEAD), $(date -u +%Y-%m-%dT%H:%MZ))"
