#!/bin/bash
# bench_echo_ceiling.sh - echo over a slow decode against Amdahl's ceiling
# (issue 19). On 2 cores the readers, the daemon's serving threads and its
# decoders share the CPU, so echo=E serves at most C: 1/C = 1/R2 +
# (1/R1 - 1/R2)/E, R1 = an exact preprocessing mount's first pass (decode +
# serve), R2 = its second pass over the same files (page cache: serve only).
#   tools/bench/bench_echo_ceiling.sh [--count N] [--repeats R]
#       [--photo-size WxH] [--before DIR] [--cases LIST] [--out DIR]
#       [--data DIR] [--passes N]
# Every mount: -o size=256,crop=224,format=ppm over a warm disk cache,
# 2 shuffled readers reading whole files, passes of every file once (the
# readers meet after each pass). exact: 2 passes (R1, R2). Echo cases
# (augment=1,flip=1): 3 passes, first pass and third (steady state)
# files/s as fractions of the ceiling, fresh samples/s as a fraction of R1,
# the first pass's fresh samples against files/E and its files/s against
# the ceiling of the echo factor it served (files/fresh), a per-second
# timeline (its lowest whole second against R1), daemon CPU and READs per
# file. Each repeat mounts every case once, the order
# rotated from repeat to repeat (with --before, the two builds' mounts of a
# case back to back, which goes first alternating); medians over repeats.
# --count: photos (default 2000); --repeats: default 3; --photo-size:
# default 500x375 (1200x900 for ~1 MP photos); --before DIR: a build dir of
# an older echofs, whose cases (exact too) are mounted in the same repeats
# (each build's echo mounts against its own exact mount's ceiling); --cases: space-separated subset of
# "exact e4f e2f e4a e2a" (exact is always run); --out DIR: keep
# results.jsonl, report.md and timeline.png there (default: printed only);
# --data DIR: keep the packed shards there and reuse them in later runs
# with the same --count and --photo-size (making photos takes minutes).
# --passes N: passes of each echo mount (default 3; the last is "steady",
# and every pass after the first is also pooled: the pool's decoders run
# ahead in bursts, a pass of the pool spanning E passes of the readers).
# BUILD_DIR picks the build (default build). Goals (issue 19): steady
# >= 0.95 C, first pass >= 0.8 C, fresh/s >= 0.9 R1.
set -euo pipefail
cd "$(dirname "$0")/../.."

COUNT=2000
REPEATS=3
SIZE=500x375
BEFORE=
CASES="exact e4f e2f e4a e2a"
OUT=
DATA=
PASSES=3
CMDLINE="tools/bench/bench_echo_ceiling.sh $*"
# shellcheck source=tools/bench/common.sh
. tools/bench/common.sh
bench_args 2,31 --count=COUNT --repeats=REPEATS --photo-size=SIZE \
	--before=BEFORE --cases=CASES --out=OUT --data=DATA --passes=PASSES -- "$@"
[ -z "$BEFORE" ] || [ -x "$BEFORE/echofs" ] ||
	{ echo "bench_echo_ceiling.sh: no echofs in $BEFORE" >&2; exit 2; }
[[ $SIZE =~ ^([0-9]+)x([0-9]+)$ ]] ||
	{ echo "bench_echo_ceiling.sh: --photo-size WxH" >&2; exit 2; }
W=${BASH_REMATCH[1]} H=${BASH_REMATCH[2]}

READER=tools/bench/bench_echo_ceiling.py
bench_start echoceil
RESULTS=$TMP/results.jsonl

# 1. photos, shards, index, nginx
bench_photos "$COUNT" "$W" "$H" "$DATA"

# 2. warm the disk cache
mount_echofs warm "format=same"
$PY $READER read "$MNT" --passes 1 >/dev/null
unmount "$MNT" "$DPID"
log "disk cache warm: $(du -sh "$TMP/cache" | cut -f1)"

# 3. the cases
PREP="size=256,crop=224,format=ppm"
AUG="augment=1,flip=1"
declare -A OPTS=([exact]="$PREP" [e4f]="$PREP,$AUG,echo=4,echo_mode=fixed"
	[e2f]="$PREP,$AUG,echo=2,echo_mode=fixed"
	[e4a]="$PREP,$AUG,echo=4,echo_mode=adaptive"
	[e2a]="$PREP,$AUG,echo=2,echo_mode=adaptive")
declare -A NAME=([exact]="exact" [e4f]="echo=4 fixed" [e2f]="echo=2 fixed"
	[e4a]="echo=4 adaptive" [e2a]="echo=2 adaptive")
# one REPEAT BUILD CASE ECHOFS: mount, read, record one JSON line
one() {
	local passes=$PASSES out
	[ "$3" = exact ] && passes=2
	mount_echofs "$3" "${OPTS[$3]}" "" "$4"
	out=$($PY $READER read "$MNT" --passes $passes --seed "$RANDOM" --pid "$DPID") ||
		log "reader reported errors ($2 $3)"
	unmount "$MNT" "$DPID"
	$PY -c 'import json,sys; print(json.dumps({"repeat": int(sys.argv[1]),
		"build": sys.argv[2], "case": sys.argv[3], "out": json.loads(sys.argv[4])}))' \
		"$1" "$2" "${NAME[$3]}" "$out" >>"$RESULTS"
	log "repeat $1 $2 ${NAME[$3]}: $($PY -c 'import json,sys
o = json.loads(sys.argv[1])
print(" | ".join("%.0f files/s" % p["files_per_s"] for p in o["passes"]),
      "| fresh/s %s" % o["all"].get("fresh_per_s"))' "$out")"
}
read -ra LIST <<<"$CASES"
[[ " ${LIST[*]} " == *" exact "* ]] || LIST=(exact "${LIST[@]}")
LOAD0=$(cut -d' ' -f1-3 /proc/loadavg)
T0=$(date -u +%H:%M)
for ((i = 1; i <= REPEATS; i++)); do
	n=${#LIST[@]}
	for ((k = 0; k < n; k++)); do
		c=${LIST[$(((k + i - 1) % n))]}
		# With --before, which build goes first alternates too.
		if [ -n "$BEFORE" ] && ((i % 2 == 0)); then
			one "$i" before "$c" "$BEFORE/echofs"
			one "$i" this "$c" "$B/echofs"
		else
			one "$i" this "$c" "$B/echofs"
			[ -z "$BEFORE" ] || one "$i" before "$c" "$BEFORE/echofs"
		fi
	done
done
LOAD1=$(cut -d' ' -f1-3 /proc/loadavg)

# 4. report
[ -z "$OUT" ] || mkdir -p "$OUT"
{
	echo "### Echo against Amdahl's ceiling: $COUNT photos ${W}x$H, \`$PREP\`, $REPEATS repeats"
	echo
	$PY $READER report "$RESULTS" ${OUT:+--plot "$OUT/timeline.png"} \
		--title "echo mounts, $COUNT photos ${W}x$H, 2 readers (middle repeat)"
	echo
	echo "Command: \`${CMDLINE% }\`; commit $(git rev-parse --short HEAD 2>/dev/null || echo '?')${BEFORE:+, before = $BEFORE}."
	echo "$(nproc) cores, $(date -u +%F) $T0-$(date -u +%H:%M) UTC, load average $LOAD0 at the start, $LOAD1 at the end."
	echo "Each echo figure is against its own repeat's R1 and ceiling, then the median; fresh/s over the"
	echo "whole run and over the last pass; the lowest whole second of the timeline (second 0"
	echo "left out: it holds the mount's start) against R1."
} | tee "$TMP/report.md"
[ -z "$OUT" ] || cp "$RESULTS" "$TMP/report.md" "$OUT/"
