#!/bin/bash
# bench_echo_prep.sh - echo hides a slow decode (issue 11): files/s served by
# an exact preprocessing mount against echo=4 and echo=2 mounts (fixed mode,
# augment=1, flip=1, echo before augment), all with -o size=256,crop=224,
# format=ppm, over a warm disk cache, with 2 shuffled readers; and the echo
# mounts' fresh samples/s. Side by side in one run, medians.
#   tools/bench/bench_echo_prep.sh [--count N] [--runs R] [--rounds K]
# --count: photos (default 2000, ~500x375 colour JPEGs made by
# tools/bench/echofs_photos.py, packed 500 per shard by bench_prep_e2e.py);
# --runs: mounts per case, median reported (default 3); --rounds: how many
# times each echo reader walks its share of the files (default 3; the exact
# mount is walked once, since a second read would come from the page cache).
# Every run is a fresh mount (foreground daemon) on the same, already warm
# cache_dir; the readers start as soon as it is mounted, so the echo pool's
# start is inside the measurement. BUILD_DIR picks the build (default build).
# Goals (issue 11): echo=4 >= 3.4x exact files/s, echo=2 >= 1.8x, fresh/s on
# the echo mounts >= 0.9x exact files/s. Prints a markdown table.
set -euo pipefail
cd "$(dirname "$0")/../.."

COUNT=2000
RUNS=3
ROUNDS=3
CMDLINE="tools/bench/bench_echo_prep.sh $*"
while [ $# -gt 0 ]; do
	case "$1" in
	--count) COUNT=$2; shift 2 ;;
	--runs) RUNS=$2; shift 2 ;;
	--rounds) ROUNDS=$2; shift 2 ;;
	-h | --help) sed -n '2,18p' "$0"; exit 0 ;;
	*) echo "bench_echo_prep.sh: unknown argument $1" >&2; exit 2 ;;
	esac
done

PY=/usr/bin/python3
B=${BUILD_DIR:-build}
READER=tools/bench/bench_echo_prep.py
PACKER=tools/bench/bench_prep_e2e.py
TMP=$(mktemp -d /tmp/echofs-bench-echoprep.XXXXXX)
MOUNTS=()
PIDS=()

cleanup() {
	set +e
	for m in "${MOUNTS[@]}"; do
		grep -qs " $m fuse" /proc/mounts &&
			{ fusermount3 -u "$m" 2>/dev/null || fusermount3 -uz "$m"; }
	done
	for p in "${PIDS[@]}"; do
		kill -0 "$p" 2>/dev/null && { sleep 1; kill "$p" 2>/dev/null; }
	done
	$PY tools/dev/nginx.py stop --state "$TMP/nginx"
	rm -rf "$TMP"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

log() { echo "bench: $*" >&2; }
json() { $PY -c 'import json,sys; print(json.loads(sys.argv[1])[sys.argv[2]])' "$1" "$2"; }

wait_mounted() { # mnt pid: 0 once mounted, 1 if the daemon died or 30 s passed
	local i
	for ((i = 0; i < 300; i++)); do
		grep -qs " $1 fuse" /proc/mounts && return 0
		kill -0 "$2" 2>/dev/null || return 1
		sleep 0.1
	done
	return 1
}

# mount_echofs NAME OPTIONS -> MNT, DPID
mount_echofs() {
	MNT=$TMP/mnt-$1
	mkdir -p "$MNT"
	"$B"/echofs -f -o "cache_dir=$TMP/cache,log_file=$TMP/echofs-$1.log,$2" \
		"$SOURCE" "$MNT" 2>>"$TMP/echofs-$1.log" &
	DPID=$!
	PIDS+=("$DPID")
	MOUNTS+=("$MNT")
	if ! wait_mounted "$MNT" "$DPID"; then
		log "mount $1 failed:"; tail -5 "$TMP/echofs-$1.log" >&2; exit 1
	fi
}

unmount() { # mnt pid
	fusermount3 -u "$1" 2>/dev/null || { sleep 1; fusermount3 -u "$1"; }
	local i
	for ((i = 0; i < 100; i++)); do kill -0 "$2" 2>/dev/null || return 0; sleep 0.1; done
	log "daemon $2 still running after unmount"
}

# run NAME OPTIONS ROUNDS -> the reader's JSON line
run() {
	mount_echofs "$1" "$2"
	local out
	out=$($PY $READER read "$MNT" --procs 2 --rounds "$3" --seed "$RANDOM")
	unmount "$MNT" "$DPID"
	echo "$out"
}

# 1. photos, shards, index, nginx
log "generating $COUNT photos"
$PY tools/bench/echofs_photos.py --out "$TMP/photos" --count "$COUNT" >&2
NSHARDS=$($PY $PACKER pack --photos "$TMP/photos" --tree "$TMP/tree" \
	--shards "$TMP/www" --per-shard 500)
rm -rf "$TMP/photos" "$TMP/tree"
PORT=$($PY tools/dev/nginx.py start --root "$TMP/www" --state "$TMP/nginx")
BASE=http://127.0.0.1:$PORT
"$B"/tools/echofs-index --base-url "$BASE/" -o "$TMP/www/photos.echofs-index" \
	"$TMP"/www/photos-*.tar >&2
SOURCE="$BASE/photos-{000000..$(printf %06d $((NSHARDS - 1)))}.tar"

# 2. warm the disk cache
mount_echofs warm "format=same"
$PY $READER read "$MNT" --procs 2 >/dev/null
unmount "$MNT" "$DPID"
log "disk cache warm: $(du -sh "$TMP/cache" | cut -f1)"

# 3. the three cases, alternating
PREP="size=256,crop=224,format=ppm"
AUG="augment=1,flip=1,echo_mode=fixed"
EX=() E4=() E2=() F4=() F2=()
for ((i = 1; i <= RUNS; i++)); do
	out=$(run exact "$PREP" 1)
	log "run $i exact:  $out"
	EX+=("$(json "$out" files_per_s)")
	out=$(run echo4 "$PREP,$AUG,echo=4" "$ROUNDS")
	log "run $i echo=4: $out"
	E4+=("$(json "$out" files_per_s)") F4+=("$(json "$out" fresh_per_s)")
	out=$(run echo2 "$PREP,$AUG,echo=2" "$ROUNDS")
	log "run $i echo=2: $out"
	E2+=("$(json "$out" files_per_s)") F2+=("$(json "$out" fresh_per_s)")
done

# 4. table
$PY - "$COUNT" "$RUNS" "$ROUNDS" "$CMDLINE" "$(nproc)" "$(cut -d' ' -f1-3 /proc/loadavg)" \
	"${EX[*]}" "${E4[*]}" "${F4[*]}" "${E2[*]}" "${F2[*]}" <<'EOF'
import statistics, sys
count, runs, rounds, cmd, ncpu, load = sys.argv[1:7]
ex, e4, f4, e2, f2 = ([float(v) for v in s.split()] for s in sys.argv[7:12])
m = {k: statistics.median(v) for k, v in
     (("ex", ex), ("e4", e4), ("f4", f4), ("e2", e2), ("f2", f2))}
runs_s = lambda v: " / ".join("%.0f" % x for x in v)
print(f"### Echo before augment: {count} photos (~500x375 JPEG), "
      f"`size=256,crop=224,format=ppm`, warm disk cache, 2 shuffled readers, "
      f"median of {runs} mounts\n")
print("| mount | files/s | x exact | fresh/s | fresh/s / exact files/s | runs (files/s) |")
print("| --- | ---: | ---: | ---: | ---: | --- |")
print(f"| exact | {m['ex']:.0f} | 1.00 | {m['ex']:.0f} | 1.00 | {runs_s(ex)} |")
for name, e, f, ev, goal in (("echo=4", m["e4"], m["f4"], e4, 3.4),
                             ("echo=2", m["e2"], m["f2"], e2, 1.8)):
    print(f"| {name} fixed, augment=1, flip=1 | {e:.0f} | {e / m['ex']:.2f} "
          f"(goal {goal}) | {f:.0f} | {f / m['ex']:.2f} (goal 0.9) | {runs_s(ev)} |")
print()
print(f"Command: `{cmd.strip()}`. Machine: {ncpu} cores, load average at the "
      f"end {load}. Each run is a fresh mount over the warm disk cache; the "
      f"exact mount's readers read each file once, the echo mounts' readers "
      f"walk the tree {rounds} times; files/s = files opened and read / wall "
      f"time from the readers' start (pool start-up included); fresh/s from "
      f".echofs/stats fresh_served over the same time.")
EOF
