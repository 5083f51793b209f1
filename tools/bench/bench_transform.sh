#!/bin/bash
# bench_transform.sh - echofs's image transform vs Pillow, one core.
#
# Makes ~200 photo-sized colour JPEGs (tools/bench/echofs_photos.py, from
# Fashion-MNIST), then times decode -> resize shorter side to 256 -> centre
# crop 224 -> JPEG q90 with echofs (tools/bench/bench_transform.c, i.e.
# transform_apply) and with Pillow (tools/bench/bench_transform_pil.py, with and
# without Image.draft), pinned to CPU 0 when taskset exists. The runs are
# interleaved (echofs, Pillow, echofs, ...) so drift hits both; the table
# shows the median of RUNS runs in images/s and the ratio echofs/Pillow.
#
# usage: tools/bench/bench_transform.sh [COUNT=200] [RUNS=5]   (from anywhere)
#   env: BUILD=build-bench (meson build dir, made with buildtype=release)
#        FILTER=box|bilinear (Pillow's resize filter)  KEEP=1 keeps the photos
set -euo pipefail
here=$(cd "$(dirname "$0")/../.." && pwd)
count=${1:-200}
runs=${2:-5}
build=${BUILD:-build-bench}
filter=${FILTER:-box}
py=/usr/bin/python3

cd "$here"
if [ ! -d "$build" ]; then
	meson setup "$build" --buildtype=release >/dev/null
fi
ninja -C "$build" tools/bench/bench_transform >/dev/null

tmp=$(mktemp -d /tmp/echofs-bench-tf.XXXXXX)
cleanup() { if [ -z "${KEEP:-}" ]; then rm -rf "$tmp"; else echo "photos kept in $tmp"; fi; }
trap cleanup EXIT
$py tools/bench/echofs_photos.py --out "$tmp/photos" --count "$count"

pin=()
if command -v taskset >/dev/null; then pin=(taskset -c 0); fi
for ((i = 0; i < runs; i++)); do
	"${pin[@]}" "$build/tools/bench/bench_transform" --runs 1 "$tmp"/photos/*.jpg
	"${pin[@]}" $py tools/bench/bench_transform_pil.py --runs 1 --filter "$filter" \
		"$tmp"/photos/*.jpg
done >"$tmp/results"

$py - "$tmp/results" "$filter" <<'PY'
import statistics, sys
res = {}
for line in open(sys.argv[1]):
    k, v = line.split()
    res.setdefault(k, []).append(float(v))
med = {k: statistics.median(v) for k, v in res.items()}
print(f"median of {len(res['echofs'])} runs, one core, decode -> shorter 256 "
      f"-> centre 224 -> JPEG q90 (Pillow filter {sys.argv[2]})")
for k in ("echofs", "pil-draft", "pil-full"):
    print(f"  {k:10s} {med[k]:8.1f} images/s   runs: "
          + " ".join(f"{v:.0f}" for v in res[k]))
for k in ("pil-draft", "pil-full"):
    print(f"  echofs / {k:10s} {med['echofs'] / med[k]:5.2f}x")
PY
