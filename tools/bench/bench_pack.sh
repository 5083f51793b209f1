#!/bin/bash
# bench_pack.sh - echofs-pack beside GNU tar over the same 60,000 files:
# Fashion-MNIST train as an ImageFolder tree (echofs-pack --tree: 10 class
# directories of 28x28 JPEGs, ~35 MB), packed into one output directory.
#   tools/bench/bench_pack.sh [--runs 3] [--cold 0|1] [--shard-size 64M]
# Rows, each the median of --runs runs (the output removed between runs):
#   tar               tar -cf OUT/all.tar -C TREE .  (one archive, one thread)
#   echofs-pack -T1   --imagefolder TREE --threads 1 (shards of --shard-size,
#                     shuffled, .cls members, index with member sums)
#   echofs-pack       the same on all cores (--threads default)
# files/s counts the input files (60,000), MB/s the bytes written. With
# --cold 1 the page cache is dropped before every run (root only), so the
# input is read from disk; the default keeps it warm (what is measured then
# is the CPU and write path). Prints a markdown table; say in any report
# whether the machine was shared at the time.
set -euo pipefail
cd "$(dirname "$0")/../.."

RUNS=3
COLD=0
SHARD_SIZE=64M
CMDLINE="tools/bench/bench_pack.sh $*"
# shellcheck source=tools/bench/common.sh
. tools/bench/common.sh
bench_args 2,16 --runs=RUNS --cold=COLD --shard-size=SHARD_SIZE -- "$@"

PACK=$B/tools/echofs-pack
[ -x "$PACK" ] || { echo "$BENCH_NAME: build first ($PACK missing)" >&2; exit 1; }
command -v tar >/dev/null || { echo "$BENCH_NAME: GNU tar missing" >&2; exit 1; }
bench_start pack

TREE=$TMP/tree
OUT=$TMP/out
log "making the tree (60,000 files) with $PACK --tree"
"$PACK" --split train --out "$TMP/fm" --tree "$TREE" >/dev/null
rm -rf "$TMP/fm"
NFILES=$(find "$TREE" -type f | wc -l)

drop() {
	sync
	if [ "$COLD" = 1 ]; then
		echo 3 >/proc/sys/vm/drop_caches 2>/dev/null ||
			{ echo "$BENCH_NAME: --cold 1 needs root" >&2; exit 1; }
	fi
}

# time_run CMD...: seconds the command took (output in OUT, fresh).
time_run() {
	local t0 t1
	rm -rf "$OUT"
	mkdir -p "$OUT"
	drop
	t0=$(date +%s.%N)
	"$@" >/dev/null
	sync -f "$OUT"
	t1=$(date +%s.%N)
	echo "$t1 - $t0" | bc -l
}

out_bytes() { du -sb "$OUT" | cut -f1; }

row() {
	local name=$1 s times=() bytes=0 med
	shift
	for ((r = 0; r < RUNS; r++)); do
		s=$(time_run "$@")
		times+=("$s")
		bytes=$(out_bytes)
	done
	med=$(median_mean "${times[@]}")
	printf '| %s | %.2f | %.0f | %.1f | %s |\n' "$name" "$med" \
		"$(echo "$NFILES / $med" | bc -l)" \
		"$(echo "$bytes / $med / 1000000" | bc -l)" "${times[*]}"
}

echo "$CMDLINE; $NFILES files, cold=$COLD, $(nproc) cores, $(date -u +%FT%TZ)"
echo
echo "| packer | s (median) | files/s | MB/s written | runs (s) |"
echo "| --- | ---: | ---: | ---: | --- |"
row "GNU tar -cf (1 archive)" tar -cf "$OUT/all.tar" -C "$TREE" .
row "echofs-pack --threads 1" "$PACK" --imagefolder "$TREE" --out "$OUT" \
	--shard-size "$SHARD_SIZE" --threads 1
row "echofs-pack (all cores)" "$PACK" --imagefolder "$TREE" --out "$OUT" \
	--shard-size "$SHARD_SIZE"
