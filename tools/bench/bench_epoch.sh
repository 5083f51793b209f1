#!/bin/bash
# bench_epoch.sh - one epoch over Fashion-MNIST train (60,000 files): files/s
# of the local disk tree, rclone's HTTP mount and echofs (cold, warm, and
# remounted over a warm disk cache), all served by one loopback nginx.
#   tools/bench/bench_epoch.sh [--runs N] [--cold-runs N] [--procs N]
# --runs: epochs for the warm cases (median, default 3); --cold-runs: fresh
# mounts for the cold cases (median, default 1); --procs: reader processes
# (default 2). Data is packed once into build/bench-data/ (BENCH_DATA);
# BUILD_DIR picks the build (default build).
# Prints a markdown table. rclone is optional (skipped when not installed).
set -euo pipefail
cd "$(dirname "$0")/../.."

RUNS=3
COLD_RUNS=1
PROCS=2
CMDLINE="tools/bench/bench_epoch.sh $*"
# shellcheck source=tools/bench/common.sh
. tools/bench/common.sh
bench_args 2,10 --runs=RUNS --cold-runs=COLD_RUNS --procs=PROCS -- "$@"

export BUILD_DIR=$B
DATA=${BENCH_DATA:-$B/bench-data}
bench_start epoch

drop_caches() {
	sync
	if echo 3 >/proc/sys/vm/drop_caches 2>/dev/null; then
		DROPPED="page cache dropped"
	else
		DROPPED="page cache NOT dropped (not permitted)"
	fi
}

# reader ROOT RUNS -> files/s (median); a failed file fails the benchmark
reader() {
	local out
	out=$($PY tools/bench/bench_reader.py "$1" --procs "$PROCS" --seed 1 \
		--runs "$2" --json) || { log "reader errors under $1"; return 1; }
	log "$1: $out"
	echo "$out" | $PY -c 'import json,sys; print(json.load(sys.stdin)["files_per_s"])'
}

pack() {
	if [ -f "$DATA/shards/train-000059.tar" ] && [ -d "$DATA/tree/9" ]; then
		return 0
	fi
	log "packing train into $DATA"
	rm -rf "$DATA"
	"$B"/tools/echofs-pack --split train --out "$DATA/shards" --tree "$DATA/tree"
}

# The index must name the shards by this run's URL, so write it each time.
make_index() {
	if "$B"/tools/echofs-index --base-url "$BASE/shards" \
		-o "$DATA/shards/train.echofs-index" \
		"$DATA"/shards/train-*.tar >"$TMP/index.log" 2>&1; then
		return 0
	fi
	log "echofs-index failed ($(head -c 200 "$TMP/index.log")); writing the index with tests/integration/helpers.py"
	$PY - "$BASE" "$DATA/shards" <<'EOF'
import os, sys
sys.path.insert(0, "tests/integration")
import helpers
base, d = sys.argv[1], sys.argv[2]
names = sorted(n for n in os.listdir(d) if n.endswith(".tar"))
helpers.write_index(os.path.join(d, "train.echofs-index"),
    [("%s/shards/%s" % (base, n), os.path.join(d, n),
      helpers.http_etag("%s/shards/%s" % (base, n))) for n in names])
EOF
}

bench_local() {
	reader "$DATA/tree" 1 >/dev/null # warm the page cache
	LOCAL=$(reader "$DATA/tree" "$RUNS")
}

bench_rclone() {
	RCLONE="skipped (rclone not installed)"
	command -v rclone >/dev/null || return 0
	local rates=() i mnt
	for ((i = 0; i < COLD_RUNS; i++)); do
		mnt=$TMP/rclone$i
		mkdir -p "$mnt"
		MOUNTS+=("$mnt")
		rclone mount :http: "$mnt" --http-url "$BASE/tree/" --read-only \
			--vfs-cache-mode full --dir-cache-time 1000h \
			--cache-dir "$TMP/rclone-cache$i" >"$TMP/rclone$i.log" 2>&1 &
		wait_mounted "$mnt" "" 30 || { log "rclone did not mount"; RCLONE="failed to mount"; return 0; }
		rates+=("$(reader "$mnt" 1)")
		unmount "$mnt"
	done
	RCLONE=$(median "${rates[@]}")
}

echofs_mount() { # cache mnt
	mkdir -p "$2"
	MOUNTS+=("$2")
	"$B"/echofs -o "cache_dir=$1,log_file=$TMP/echofs.log" "$SOURCE" "$2"
}

bench_echofs() {
	local cold=() remount=() i
	for ((i = 0; i < COLD_RUNS; i++)); do
		echofs_mount "$TMP/ecache$i" "$TMP/emnt$i"
		cold+=("$(reader "$TMP/emnt$i" 1)")
		if [ "$i" -eq 0 ]; then
			WARM=$(reader "$TMP/emnt$i" "$RUNS")
			STATS=$(cat "$TMP/emnt$i/.echofs/stats")
		fi
		unmount "$TMP/emnt$i"
		drop_caches
		echofs_mount "$TMP/ecache$i" "$TMP/rmnt$i"
		remount+=("$(reader "$TMP/rmnt$i" 1)")
		unmount "$TMP/rmnt$i"
		rm -rf "$TMP/ecache$i"
	done
	COLD=$(median "${cold[@]}")
	REMOUNT=$(median "${remount[@]}")
}

ratio() { $PY -c "import sys; a,b=sys.argv[1:]; print('%.2f' % (float(a)/float(b)))" "$1" "$2" 2>/dev/null || echo "n/a"; }

bash tools/dev/setup.sh >&2
pack
bench_nginx "$DATA" --autoindex /tree/
SOURCE="$BASE/shards/train-{000000..000059}.tar"
make_index
log "local disk"; bench_local
log "rclone"; bench_rclone
log "echofs"; bench_echofs

cat <<EOF

### One epoch over Fashion-MNIST train: 60,000 files, $PROCS reader processes, shuffled (seed 1)

| setup | files/s |
|---|---:|
| local disk tree, warm page cache (median of $RUNS) | $LOCAL |
| rclone mount :http: --vfs-cache-mode full, cold (median of $COLD_RUNS) | $RCLONE |
| echofs cold: fresh cache_dir, fresh mount, index beside the shards (median of $COLD_RUNS) | $COLD |
| echofs warm: next epochs on the same mount (median of $RUNS) | $WARM |
| echofs remount over the warm disk cache, $DROPPED (median of $COLD_RUNS) | $REMOUNT |

- echofs cold / rclone cold: $(ratio "$COLD" "$RCLONE")
- echofs warm / local disk: $(ratio "$WARM" "$LOCAL")
- nginx on 127.0.0.1 serves $DATA/shards (echofs) and $DATA/tree (rclone, autoindex)
- command: \`$CMDLINE\` ($(nproc) cores, $(uname -r))
- echofs: \`$B/echofs -o cache_dir=DIR,log_file=LOG '$BASE/shards/train-{000000..000059}.tar' MNT\`
- rclone: \`rclone mount :http: MNT --http-url $BASE/tree/ --read-only --vfs-cache-mode full --dir-cache-time 1000h --cache-dir DIR\`
- reader: \`/usr/bin/python3 tools/bench/bench_reader.py MNT --procs $PROCS --seed 1 --runs N\`

echofs stats after the warm epochs:
\`\`\`
$STATS
\`\`\`
EOF
