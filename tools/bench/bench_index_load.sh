#!/bin/sh
# bench_index_load.sh - time loading a synthetic ImageNet-sized index
# (1.3 million samples in 1300 shards) with `echofs-index --check`, five
# runs, and print the median load time.
#
# usage: tools/bench/bench_index_load.sh [ECHOFS_INDEX_BINARY [SAMPLES]]
#   default binary: build/tools/echofs-index; default samples: 1300000
set -eu

bin=${1:-build/tools/echofs-index}
samples=${2:-1300000}
runs=5

if [ ! -x "$bin" ]; then
	echo "bench_index_load: $bin not found or not executable (build first)" >&2
	exit 1
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT INT TERM
index=$tmp/bench.index

# 1000 samples a shard, 1000 classes, ImageNet-like keys and sizes.
awk -v n="$samples" 'BEGIN {
	per = 1000; step = 111616
	nshards = int((n + per - 1) / per)
	print "echofs-index 1"
	for (s = 0; s < nshards; s++)
		printf "S\thttp://127.0.0.1:8080/imagenet/train-%06d.tar\t%d\t\"%x-%x\"\n", \
			s, per * step + 2048, s, s * 7919
	for (i = 0; i < n; i++) {
		c = i % 1000
		printf "M\t%d\t%d\t%d\tn%08d\tn%08d/n%08d_%d\tjpeg\n", \
			int(i / per), (i % per) * step + 1024, 100000 + (i * 37) % 11000, \
			c, c, c, i
	}
}' > "$index"

echo "index: $samples samples, $(wc -c < "$index") bytes ($index)"
times=""
i=0
# On a busy machine wall time overstates the cost: show CPU time as well.
timer=""
[ -x /usr/bin/time ] && timer="/usr/bin/time -f %U+%S -o $tmp/cpu"
while [ $i -lt $runs ]; do
	echo "-" > "$tmp/cpu"
	out=$($timer "$bin" --check "$index")
	t=$(echo "$out" | awk '{print $5}')
	echo "run $((i + 1)): $out (cpu user+sys: $(cat "$tmp/cpu") s)"
	times="$times $t"
	i=$((i + 1))
done
median=$(printf '%s\n' $times | sort -n | awk '{a[NR] = $1} END {print a[int((NR + 1) / 2)]}')
echo "median load time: $median s (over $runs runs)"
