#!/bin/bash
# soak.sh - a long soak of echofs under combined faults (issue 21; not a
# timed test: see BENCHMARKS.md "Soak under combined faults").
#   tools/bench/soak.sh [--minutes M] [--readers N] [--json FILE]
# Four mounts (exact, echo adaptive with size=32,format=ppm, rank 1 of 3,
# and S3 with credentials expiring every 60 s) share one cache_dir on a
# small tmpfs (cache_size 40M, tmpfs 64M, data 147 MB) and read
# Fashion-MNIST train shards from tests/fault_server.py (S3: s3rver)
# while a fault injector cycles through 5xx bursts, bodies cut mid-way, a
# 1 B/s trickle, a stopped server, lying Range replies, ENOSPC, kill -9 of a
# mount and a step of the machine's clock by +1 h and -1 h (as root; put
# back at the end, see Clock in soak.py). The
# work is done by soak.py; this script packs the data once and cleans up.
set -euo pipefail
cd "$(dirname "$0")/../.."

B=${BUILD_DIR:-build}
DATA=${SOAK_DATA:-$B/soak-data}
WORK=$(mktemp -d /tmp/echofs-soak.XXXXXX)
JSON=soak.json
ARGS=()
while [ $# -gt 0 ]; do
	case "$1" in
	--json) JSON=$2; shift 2 ;;
	*) ARGS+=("$1"); shift ;;
	esac
done

cleanup() {
	set +e
	for m in "$WORK"/exact "$WORK"/echo "$WORK"/rank "$WORK"/s3; do
		grep -qs " $m fuse" /proc/mounts && fusermount3 -uz "$m"
	done
	grep -qs " $WORK/cachefs " /proc/mounts && umount -l "$WORK/cachefs"
	if [ -n "${KEEP_WORK:-}" ]; then
		echo "work dir (logs) kept: $WORK"
	else
		rm -rf "$WORK"
	fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM

if [ ! -f "$DATA/www/train/train-000059.tar" ]; then
	echo "packing Fashion-MNIST train into $DATA"
	rm -rf "$DATA"
	"$B"/tools/echofs-pack --split train --out "$DATA/www/train" \
		--per-shard 1000 --tree "$DATA/ref/train" >/dev/null
fi
/usr/bin/python3 tools/bench/soak.py --build "$B" --data "$DATA" \
	--work "$WORK" --json "$JSON" "${ARGS[@]}"
