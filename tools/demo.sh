#!/bin/bash
# demo.sh - the Quick start: pack Fashion-MNIST's train split into 60 tar
# shards, serve them with a private nginx on a free loopback port, index them,
# mount them with echofs, read every image with PIL, show the statistics,
# then unmount and stop nginx (also on Ctrl-C or any error).
#   tools/demo.sh
# Shards are kept in build/demo-data/ for the next run; everything else lives
# in a temp dir that is removed at exit.
set -euo pipefail
cd "$(dirname "$0")/.."

PY=/usr/bin/python3
B=${BUILD_DIR:-build} # the build to use (setup.sh builds it)
export BUILD_DIR=$B
DATA=$B/demo-data/shards
NSHARDS=60
TMP=$(mktemp -d /tmp/echofs-demo.XXXXXX)
MNT=$TMP/mnt
OK=0

cleanup() {
	set +e
	if grep -qs " $MNT fuse" /proc/mounts; then
		fusermount3 -u "$MNT" 2>/dev/null || fusermount3 -uz "$MNT"
	fi
	$PY tools/dev/nginx.py stop --state "$TMP/nginx"
	if [ "$OK" -ne 1 ] && [ -s "$TMP/echofs.log" ]; then
		echo "--- last lines of the echofs log" >&2
		tail -n 20 "$TMP/echofs.log" >&2
	fi
	rm -rf "$TMP"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

step() { echo; echo "== $*"; }

step "setup (packages, build)"
bash tools/dev/setup.sh

step "pack Fashion-MNIST train into $DATA"
last=$(printf '%s/train-%06d.tar' "$DATA" $((NSHARDS - 1)))
if [ -f "$last" ]; then
	echo "reusing $(ls "$DATA"/train-*.tar | wc -l) shards"
else
	"$B"/tools/echofs-pack --split train --out "$DATA" --per-shard 1000
fi

step "serve $DATA with nginx"
PORT=$($PY tools/dev/nginx.py start --root "$DATA" --state "$TMP/nginx")
BASE="http://127.0.0.1:$PORT"
SOURCE="$BASE/train-{000000..$(printf '%06d' $((NSHARDS - 1)))}.tar"
echo "SOURCE = $SOURCE"

# echofs looks for the index beside the shards: $BASE/train.echofs-index.
step "index the shards ($B/tools/echofs-index)"
"$B"/tools/echofs-index --base-url "$BASE" -o "$DATA/train.echofs-index" \
	"$DATA"/train-*.tar

step "mount"
mkdir -p "$MNT"
echo "$B/echofs -o cache_dir=$TMP/cache,log_file=$TMP/echofs.log '$SOURCE' $MNT"
"$B"/echofs -o "cache_dir=$TMP/cache,log_file=$TMP/echofs.log" "$SOURCE" "$MNT"
ls "$MNT"

step "read and decode every image (PIL, 2 processes, shuffled)"
$PY tools/bench/bench_reader.py "$MNT" --decode --procs 2

step "cat $MNT/.echofs/stats"
cat "$MNT/.echofs/stats"
echo

step "unmount"
fusermount3 -u "$MNT"
OK=1
echo "done"
