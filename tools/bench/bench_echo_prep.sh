#!/bin/bash
# bench_echo_prep.sh - echo hides a slow decode (issue 11): files/s served by
# an exact preprocessing mount against echo=4 and echo=2 mounts (fixed mode,
# augment=1, flip=1, echo before augment), all with -o size=256,crop=224,
# format=ppm, over a warm disk cache, with 2 shuffled readers; and the echo
# mounts' fresh samples/s. Side by side in one run, medians.
#   tools/bench/bench_echo_prep.sh [--count N] [--runs R] [--rounds K]
#                                  [--before DIR]
# --count: photos (default 2000, ~500x375 colour JPEGs made by
# tools/bench/echofs_photos.py, packed 500 per shard by bench_prep_e2e.py);
# --runs: mounts per case, median reported (default 3); --rounds: how many
# times each echo reader walks its share of the files (default 3; the exact
# mount is walked once, since a second read would come from the page cache).
# Every run is a fresh mount (foreground daemon) on the same, already warm
# cache_dir; the readers start as soon as it is mounted, so the echo pool's
# start is inside the measurement. BUILD_DIR picks the build (default build).
# --before DIR: a build dir of an older echofs (its echofs binary); each
# run then also mounts the three cases with it, interleaved, and the table
# gets before and this-build rows from the same run.
# Goals (issue 11): echo=4 >= 3.4x exact files/s, echo=2 >= 1.8x, fresh/s on
# the echo mounts >= 0.9x exact files/s. Prints a markdown table.
set -euo pipefail
cd "$(dirname "$0")/../.."

COUNT=2000
RUNS=3
ROUNDS=3
BEFORE=
CMDLINE="tools/bench/bench_echo_prep.sh $*"
# shellcheck source=tools/bench/common.sh
. tools/bench/common.sh
bench_args 2,22 --count=COUNT --runs=RUNS --rounds=ROUNDS --before=BEFORE -- "$@"
[ -z "$BEFORE" ] || [ -x "$BEFORE/echofs" ] ||
	{ echo "bench_echo_prep.sh: no echofs in $BEFORE" >&2; exit 2; }

READER=tools/bench/bench_echo_prep.py
PACKER=tools/bench/bench_prep_e2e.py
bench_start echoprep

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
bench_nginx "$TMP/www"
"$B"/tools/echofs-index --base-url "$BASE/" -o "$TMP/www/photos.echofs-index" \
	"$TMP"/www/photos-*.tar >&2
SOURCE="$BASE/photos-{000000..$(printf %06d $((NSHARDS - 1)))}.tar"

# 2. warm the disk cache
mount_echofs warm "format=same"
$PY $READER read "$MNT" --procs 2 >/dev/null
unmount "$MNT" "$DPID"
log "disk cache warm: $(du -sh "$TMP/cache" | cut -f1)"

# 3. the three cases, alternating (and each with the --before build)
PREP="size=256,crop=224,format=ppm"
AUG="augment=1,flip=1,echo_mode=fixed"
declare -A V=()
# cases TAG: one run of the three cases with build $B, values into V
cases() {
	local out
	out=$(run exact "$PREP" 1)
	log "run $i $1 exact:  $out"
	V[$1ex]+="$(json "$out" files_per_s) "
	out=$(run echo4 "$PREP,$AUG,echo=4" "$ROUNDS")
	log "run $i $1 echo=4: $out"
	V[$1e4]+="$(json "$out" files_per_s) " V[$1f4]+="$(json "$out" fresh_per_s) "
	out=$(run echo2 "$PREP,$AUG,echo=2" "$ROUNDS")
	log "run $i $1 echo=2: $out"
	V[$1e2]+="$(json "$out" files_per_s) " V[$1f2]+="$(json "$out" fresh_per_s) "
}
NOW_B=$B
for ((i = 1; i <= RUNS; i++)); do
	if [ -n "$BEFORE" ]; then
		B=$BEFORE
		cases b
		B=$NOW_B
	fi
	cases n
done

# 4. table
$PY - "$COUNT" "$RUNS" "$ROUNDS" "$CMDLINE" "$(nproc)" "$(cut -d' ' -f1-3 /proc/loadavg)" \
	"${V[nex]}" "${V[ne4]}" "${V[nf4]}" "${V[ne2]}" "${V[nf2]}" \
	"${V[bex]:-}" "${V[be4]:-}" "${V[bf4]:-}" "${V[be2]:-}" "${V[bf2]:-}" <<'EOF'
import statistics, sys
count, runs, rounds, cmd, ncpu, load = sys.argv[1:7]
builds = [("", sys.argv[7:12])]
if sys.argv[12].strip():
    builds = [("before: ", sys.argv[12:17]), ("this: ", sys.argv[7:12])]
print(f"### Echo before augment: {count} photos (~500x375 JPEG), "
      f"`size=256,crop=224,format=ppm`, warm disk cache, 2 shuffled readers, "
      f"median of {runs} mounts\n")
print("| mount | files/s | x exact | fresh/s | fresh/s / exact files/s | runs (files/s) |")
print("| --- | ---: | ---: | ---: | ---: | --- |")
runs_s = lambda v: " / ".join("%.0f" % x for x in v)
for tag, vals in builds:
    ex, e4, f4, e2, f2 = ([float(v) for v in s.split()] for s in vals)
    m = {k: statistics.median(v) for k, v in
         (("ex", ex), ("e4", e4), ("f4", f4), ("e2", e2), ("f2", f2))}
    print(f"| {tag}exact | {m['ex']:.0f} | 1.00 | {m['ex']:.0f} | 1.00 | {runs_s(ex)} |")
    for name, e, f, ev, goal in (("echo=4", m["e4"], m["f4"], e4, 3.4),
                                 ("echo=2", m["e2"], m["f2"], e2, 1.8)):
        print(f"| {tag}{name} fixed, augment=1, flip=1 | {e:.0f} | {e / m['ex']:.2f} "
              f"(goal {goal}) | {f:.0f} | {f / m['ex']:.2f} (goal 0.9) | {runs_s(ev)} |")
print()
print(f"Command: `{cmd.strip()}`. Machine: {ncpu} cores, load average at the "
      f"end {load}. Each run is a fresh mount over the warm disk cache; the "
      f"exact mount's readers read each file once, the echo mounts' readers "
      f"walk the tree {rounds} times; files/s = files opened and read / wall "
      f"time from the readers' start (pool start-up included); fresh/s from "
      f".echofs/stats fresh_served over the same time"
      + ("; before and this build interleaved in every run." if len(builds) > 1 else "."))
EOF
