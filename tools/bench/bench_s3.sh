#!/bin/bash
# bench_s3.sh - what S3 costs: cold epochs of Fashion-MNIST train (60 shards,
# 60,000 files) over plain HTTP (nginx) and as signed s3:// (to the same
# nginx, through the Python gateway unchecked, through the verifying
# gateway to s3rver), side by side; and command-to-ready-tree of an
# s3://B/PREFIX/ source over 100,000 keys. See bench_s3.py for the modes.
#   tools/bench/bench_s3.sh [--runs N] [--procs N] [--keys N] [--modes LIST]
# Data is packed once into build/bench-data/ (BENCH_DATA); BUILD_DIR picks
# the build; s3rver comes from tests/s3/node_modules (tools/dev/setup.sh).
# Prints markdown tables with the command line and the load average.
set -euo pipefail
cd "$(dirname "$0")/../.."

# shellcheck source=tools/bench/common.sh
. tools/bench/common.sh
DATA=${BENCH_DATA:-$B/bench-data}
# The flags are bench_s3.py's (argparse checks them): only --help is ours.
case "${1:-}" in -h | --help) sed -n '2,10p' "$0"; exit 0 ;; esac
[ -f tests/s3/node_modules/s3rver/bin/s3rver.js ] ||
	{ echo "bench_s3.sh: s3rver missing: run tools/dev/setup.sh" >&2; exit 2; }
if [ ! -f "$DATA/shards/train-000059.tar" ]; then
	log "packing train into $DATA"
	rm -rf "$DATA"
	"$B"/tools/echofs-pack --split train --out "$DATA/shards" --tree "$DATA/tree"
fi
echo "command: tools/bench/bench_s3.sh $*"
echo
$PY tools/bench/bench_s3.py --build "$B" --data "$DATA" "$@"
