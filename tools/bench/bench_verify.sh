#!/bin/bash
# bench_verify.sh - what the end-to-end checksums cost: the same cold and warm
# epochs over Fashion-MNIST train (60,000 files) with a format 1 index (no
# checksums: size and ETag only) and a format 2 index (every member checked
# with XXH3-64 before it is served), side by side in one run, with the
# daemon's CPU seconds per epoch (utime + stime from /proc/PID/stat).
#   tools/bench/bench_verify.sh [--runs N] [--procs N] [--rounds N]
# --runs: warm epochs per mount (median, default 3); --procs: reader
# processes (default 2); --rounds: v1/v2 mount pairs, alternated (default 2).
# Data is packed once into build/bench-data/ (BENCH_DATA); BUILD_DIR picks
# the build. Prints a markdown table.
set -euo pipefail
cd "$(dirname "$0")/../.."

RUNS=3
PROCS=2
ROUNDS=2
CMDLINE="tools/bench/bench_verify.sh $*"
while [ $# -gt 0 ]; do
	case "$1" in
	--runs) RUNS=$2; shift 2 ;;
	--procs) PROCS=$2; shift 2 ;;
	--rounds) ROUNDS=$2; shift 2 ;;
	-h | --help) sed -n '2,11p' "$0"; exit 0 ;;
	*) echo "bench_verify.sh: unknown argument $1" >&2; exit 2 ;;
	esac
done

PY=/usr/bin/python3
B=${BUILD_DIR:-build}
DATA=${BENCH_DATA:-$B/bench-data}
TMP=$(mktemp -d /tmp/echofs-bench-verify.XXXXXX)
MOUNTS=()

cleanup() {
	set +e
	for m in "${MOUNTS[@]}"; do
		grep -qs " $m fuse" /proc/mounts &&
			{ fusermount3 -u "$m" 2>/dev/null || fusermount3 -uz "$m"; }
	done
	$PY tools/dev/nginx.py stop --state "$TMP/nginx"
	rm -rf "$TMP"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

log() { echo "bench: $*" >&2; }

# The echofs daemon serving mountpoint $1 (its command line names it).
daemon_pid() {
	local p
	for p in /proc/[0-9]*; do
		# (processes may exit meanwhile: errors are expected)
		tr '\0' '\n' 2>/dev/null <"$p/cmdline" | grep -qxF "$1" &&
			tr '\0' '\n' 2>/dev/null <"$p/cmdline" | head -1 | grep -q 'echofs$' &&
			{ basename "$p"; return 0; }
	done
	return 1
}

cpu_s() { # pid -> utime + stime in seconds
	awk -v hz="$(getconf CLK_TCK)" '{print ($14 + $15) / hz}' "/proc/$1/stat"
}

reader() { # root runs -> files/s (median)
	$PY tools/bench/bench_reader.py "$1" --procs "$PROCS" --seed 1 \
		--runs "$2" --json |
		$PY -c 'import json,sys; print(json.load(sys.stdin)["files_per_s"])'
}

median() { printf '%s\n' "$@" | sort -g | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
sub() { $PY -c "import sys; print('%.2f' % ((float(sys.argv[1]) - float(sys.argv[2])) / float(sys.argv[3])))" "$@"; }

pack() {
	[ -f "$DATA/shards/train-000059.tar" ] && return 0
	log "packing train into $DATA"
	rm -rf "$DATA"
	"$B"/tools/echofs-pack --split train --out "$DATA/shards" --tree "$DATA/tree"
}

# v2 from echofs-index; v1 is the same index without the checksum fields.
make_indexes() {
	"$B"/tools/echofs-index --base-url "$BASE/shards" -o "$TMP/v2.echofs-index" \
		"$DATA"/shards/train-*.tar 2>/dev/null
	awk -F'\t' -v OFS='\t' 'NR == 1 {print "echofs-index 1"; next}
		{NF--; print}' "$TMP/v2.echofs-index" >"$TMP/v1.echofs-index"
}

declare -A COLD COLD_CPU WARM WARM_CPU
one_mount() { # v1|v2 round
	local v=$1 mnt=$TMP/mnt-$1-$2 pid c0 c1 c2 rate
	mkdir -p "$mnt"
	MOUNTS+=("$mnt")
	"$B"/echofs -o "cache_dir=$TMP/cache-$v-$2,log_file=$TMP/echofs-$v.log,index=$TMP/$v.echofs-index" \
		"$SOURCE" "$mnt"
	pid=$(daemon_pid "$mnt")
	c0=$(cpu_s "$pid")
	rate=$(reader "$mnt" 1)
	c1=$(cpu_s "$pid")
	COLD[$v]+="$rate "
	COLD_CPU[$v]+="$(sub "$c1" "$c0" 1) "
	rate=$(reader "$mnt" "$RUNS")
	c2=$(cpu_s "$pid")
	WARM[$v]+="$rate "
	WARM_CPU[$v]+="$(sub "$c2" "$c1" "$RUNS") "
	grep -q '"verify": 0' "$mnt/.echofs/stats" || log "$v: verify errors!"
	fusermount3 -u "$mnt"
	sleep 0.5
	rm -rf "$TMP/cache-$v-$2"
	log "$v round $2: cold ${COLD[$v]} warm ${WARM[$v]}"
}

bash tools/dev/setup.sh >&2
pack
PORT=$($PY tools/dev/nginx.py start --root "$DATA" --state "$TMP/nginx")
BASE="http://127.0.0.1:$PORT"
SOURCE="$BASE/shards/train-{000000..000059}.tar"
make_indexes
for ((r = 0; r < ROUNDS; r++)); do
	one_mount v1 "$r"
	one_mount v2 "$r"
done

row() { # label v
	# shellcheck disable=SC2086
	echo "| $1 | $(median ${COLD[$2]}) | $(median ${COLD_CPU[$2]}) | $(median ${WARM[$2]}) | $(median ${WARM_CPU[$2]}) |"
}
cat <<EOF

### Checksums on and off: Fashion-MNIST train, 60,000 files, $PROCS shuffled readers

| index | cold files/s | cold daemon CPU s | warm files/s | warm daemon CPU s/epoch |
|---|---:|---:|---:|---:|
$(row "format 1 (size + ETag only)" v1)
$(row "format 2 (XXH3-64 per member and shard)" v2)

- medians of $ROUNDS alternated mounts each; warm: $RUNS epochs on the same mount
- command: \`$CMDLINE\` ($(nproc) cores, $(uname -r))
- nginx on 127.0.0.1 serves $DATA/shards; fresh cache_dir per mount
EOF
