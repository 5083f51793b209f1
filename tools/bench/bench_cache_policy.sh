#!/bin/bash
# bench_cache_policy.sh - bytes fetched when the data is larger than the disk
# cache: Fashion-MNIST train (60 shards, ~154 MB) through cache_size=20M,
# for the eviction policy of this build and, with --before, of another build
# (e.g. main before the scan-resistant policy: plain LRU).
#   tools/bench/bench_cache_policy.sh [--before BUILD_DIR] [--cache-size 20M]
#                     [--shuffled-cache-size 20M] [--passes 2] [--runs 1]
# Scenarios, each on a fresh cache_dir and a fresh mount:
#   class-sorted  every file, class directory by class directory, in name
#                 order (an un-shuffled evaluation loop, `cp -r`), --passes
#                 times;
#   shuffled      bench_reader.py, 2 reader processes, a new shuffle each
#                 pass (seed = pass), --passes times.
# The kernel page cache is dropped before every class-sorted pass (when
# permitted), so each pass asks the daemon again and the disk cache decides. Reports the
# bytes fetched (.echofs/stats bytes_fetched) and files/s of each pass (so a
# policy that saves bytes but stalls shows), as a markdown table; --runs
# repeats every row.
# The kernel page cache is kept between shuffled passes (--shuffled-cache-size,
# default 20M): echofs pushes each cached shard's files into it once per
# mount, and without that a shuffled read through a cache of 8 of 60 shards
# refetches a whole shard for nearly every file (tens of GB a pass, whatever
# the policy), which says nothing about the policy.
# BUILD_DIR picks this build (default build); data is packed once into
# $BUILD_DIR/bench-data (BENCH_DATA).
set -euo pipefail
cd "$(dirname "$0")/../.."

BEFORE=""
CACHE_SIZE=20M
SHUF_CACHE_SIZE=20M
PASSES=2
RUNS=1
CMDLINE="tools/bench/bench_cache_policy.sh $*"
# shellcheck source=tools/bench/common.sh
. tools/bench/common.sh
bench_args 2,20 --before=BEFORE --cache-size=CACHE_SIZE \
	--shuffled-cache-size=SHUF_CACHE_SIZE --passes=PASSES --runs=RUNS -- "$@"

DATA=${BENCH_DATA:-$B/bench-data}
bench_start policy

DROPPED="NOT dropped (not permitted)"
[ -w /proc/sys/vm/drop_caches ] && DROPPED="dropped"
drop_caches() {
	sync
	echo 3 >/proc/sys/vm/drop_caches 2>/dev/null || true
}

pack() {
	if [ -f "$DATA/shards/train-000059.tar" ]; then
		return 0
	fi
	log "packing train into $DATA"
	rm -rf "$DATA"
	"$B"/tools/echofs-pack --split train --out "$DATA/shards" --tree "$DATA/tree"
}

make_index() { # the index names the shards by this run's URL
	$PY - "$BASE" "$DATA/shards" "$TMP/train.echofs-index" <<'EOF'
import os, sys
sys.path.insert(0, "tests/integration")
import helpers
base, d, out = sys.argv[1:]
names = sorted(n for n in os.listdir(d) if n.endswith(".tar"))
helpers.write_index(out, [("%s/shards/%s" % (base, n), os.path.join(d, n),
                           helpers.http_etag("%s/shards/%s" % (base, n))) for n in names])
EOF
}

# Read every file of MNT class by class, in name order (listing first, as a
# loader builds its file list before reading).
class_sorted() {
	$PY - "$1" <<'EOF'
import os, sys
root = sys.argv[1]
files = []
for c in sorted(os.listdir(root)):
    d = os.path.join(root, c)
    if os.path.isdir(d) and not c.startswith("."):
        files += [os.path.join(d, n) for n in sorted(os.listdir(d))]
for p in files:
    with open(p, "rb") as f:
        f.read()
EOF
}

shuffled() { # mnt pass
	$PY tools/bench/bench_reader.py "$1" --procs 2 --seed "$2" >/dev/null
}

fetched() { $PY -c 'import json,sys; print(json.load(open(sys.argv[1]))["bytes_fetched"])' "$1/.echofs/stats"; }

# run BUILD SCENARIO -> "bytes1:secs1 bytes2:secs2 ... total" per pass
run() {
	local build=$1 scen=$2 mnt=$TMP/mnt-$RANDOM cache=$TMP/cache-$RANDOM p prev=0 now out=""
	local size=$CACHE_SIZE t0 t1
	[ "$scen" = shuffled ] && size=$SHUF_CACHE_SIZE
	mkdir -p "$mnt"
	"$build"/echofs -o "cache_dir=$cache,cache_size=$size,index=$TMP/train.echofs-index,log_file=$TMP/echofs.log" \
		"$SOURCE" "$mnt"
	for ((p = 1; p <= PASSES; p++)); do
		[ "$scen" = class-sorted ] && drop_caches
		t0=$(date +%s.%N)
		if [ "$scen" = class-sorted ]; then
			class_sorted "$mnt"
		else
			shuffled "$mnt" "$p"
		fi
		t1=$(date +%s.%N)
		now=$(fetched "$mnt")
		out+="$((now - prev)):$(awk "BEGIN { print $t1 - $t0 }") "
		prev=$now
		log "$build $scen pass $p: fetched $now B in total"
	done
	unmount "$mnt"
	rm -rf "$cache"
	echo "$out$prev"
}

mb() { $PY -c 'import sys; print("%.0f" % (int(sys.argv[1]) / 1e6))' "$1"; }

# files/s of a pass: every file of the tree once in SECS
fps() { $PY -c 'import sys; print("{:,.0f}".format(int(sys.argv[1]) / float(sys.argv[2])))' "$NFILES" "$1"; }

row() { # label build scenario run
	local r
	r=$(run "$2" "$3")
	local cells="" x
	for x in $r; do
		if [[ $x == *:* ]]; then
			cells+=" $(mb "${x%%:*}") MB, $(fps "${x#*:}") files/s |"
		else
			cells+=" $(mb "$x") |"
		fi
	done
	echo "| $1 | $3, run $4 |$cells"
}

bash tools/dev/setup.sh >&2
pack
bench_nginx "$DATA"
SOURCE="$BASE/shards/train-{000000..000059}.tar"
make_index
TOTAL=$(du -cb "$DATA"/shards/train-*.tar | tail -1 | cut -f1)
NFILES=$(find "$DATA/tree" -type f | wc -l)

hdr="| build | reader |"
sep="|---|---|"
for ((p = 1; p <= PASSES; p++)); do hdr+=" pass $p |"; sep+="---:|"; done
ROWS=()
for scen in class-sorted shuffled; do
	for ((k = 1; k <= RUNS; k++)); do
		ROWS+=("$(row "this build ($B)" "$B" "$scen" "$k")")
		[ -n "$BEFORE" ] && ROWS+=("$(row "before ($BEFORE)" "$BEFORE" "$scen" "$k")")
	done
done

cat <<EOF

### Bytes fetched with a disk cache smaller than the data: Fashion-MNIST train ($(mb "$TOTAL") MB in 60 shards), $PASSES passes

$hdr total MB |
$sep---:|
$(printf '%s\n' "${ROWS[@]}")

- class-sorted (cache_size=$CACHE_SIZE): every file, class directory by class directory, name order; shuffled (cache_size=$SHUF_CACHE_SIZE): \`bench_reader.py MNT --procs 2 --seed PASS\`
- fresh cache_dir and mount per row; kernel page cache $DROPPED before every class-sorted pass, kept between shuffled passes
- command: \`$CMDLINE\` ($(nproc) cores, $(uname -r))
- echofs: \`BUILD/echofs -o cache_dir=DIR,cache_size=SIZE,index=INDEX '$SOURCE' MNT\`
EOF
