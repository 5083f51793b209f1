#!/bin/bash
# profile.sh - record where echofs's daemon spends CPU in a named scenario, so later changes can be compared.
#
#   tools/profile.sh SCENARIO [--out DIR] [--count N] [--opts O]
#
# SCENARIO: cold-exact (one epoch on an empty cache), warm-exact (one epoch
# on a filled cache, new mount), echo-prep (echo=4, echo_mode=fixed,
# augment=1, flip=1, size=256, crop=224, format=ppm on a filled cache, two
# rounds). Data: --count (default 1000) photo-sized JPEGs
# (tools/bench/echofs_photos.py, 500 per shard, index beside the shards)
# behind a private nginx; 2 shuffled readers. --opts adds mount options
# (e.g. zerocopy=0).
# echofs is built with frame pointers and -g into ./build-prof. The daemon
# is recorded with `perf record -e cpu-clock -g` (a software clock: these
# VMs have no hardware counters), or, where perf cannot record, run under
# `valgrind --tool=callgrind`. DIR (default prof-SCENARIO-<time>) gets
# perf.data (or callgrind.out), report.txt (the whole report), top.txt
# (the top 15 symbols, also printed) and run.txt (scenario, commit, load).
# PROFILE_TOOL=callgrind uses valgrind even where perf works.
# Compare two profiles: see BENCHMARKS.md, "Profiles".
set -euo pipefail
cd "$(dirname "$0")/.."

SCEN=${1:-}
case $SCEN in
cold-exact | warm-exact | echo-prep) shift ;;
-h | --help | "") sed -n '2,22p' "$0"; exit 0 ;;
*) echo "profile.sh: unknown scenario $SCEN" >&2; exit 2 ;;
esac
OUT= COUNT=1000 OPTS=
while [ $# -gt 0 ]; do
	case $1 in
	--out) OUT=$2; shift 2 ;;
	--count) COUNT=$2; shift 2 ;;
	--opts) OPTS=$2; shift 2 ;;
	*) echo "profile.sh: unknown argument $1" >&2; exit 2 ;;
	esac
done
OUT=$(realpath -m "${OUT:-prof-$SCEN-$(date -u +%Y%m%dT%H%M%S)}")
mkdir -p "$OUT"

PY=/usr/bin/python3
BP=build-prof
TMP=$(mktemp -d /tmp/echofs-profile.XXXXXX)
MNT=$TMP/mnt
DPID= RPID=
log() { echo "profile: $*" >&2; }

cleanup() {
	set +e
	[ -n "$RPID" ] && kill -INT "$RPID" 2>/dev/null
	grep -qs " $MNT fuse" /proc/mounts &&
		{ fusermount3 -u "$MNT" 2>/dev/null || fusermount3 -uz "$MNT"; }
	[ -n "$DPID" ] && kill -0 "$DPID" 2>/dev/null && { sleep 1; kill "$DPID"; }
	$PY tools/dev/nginx.py stop --state "$TMP/nginx"
	rm -rf "$TMP"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# 1. a build with frame pointers, so perf can walk the stacks
if [ ! -f "$BP/build.ninja" ]; then
	meson setup "$BP" --buildtype=debugoptimized \
		-Dc_args='-fno-omit-frame-pointer -mno-omit-leaf-frame-pointer' >&2
fi
ninja -C "$BP" echofs tools/echofs-index >&2

TOOL=${PROFILE_TOOL:-perf} # PROFILE_TOOL=callgrind forces the fallback
if [ "$TOOL" != perf ] ||
	! perf record -e cpu-clock -g -o "$TMP/probe.data" true >/dev/null 2>&1; then
	command -v valgrind >/dev/null || { log "neither perf nor valgrind works"; exit 1; }
	TOOL=callgrind
fi
log "recording with $TOOL into $OUT"

# 2. data and server
$PY tools/bench/echofs_photos.py --out "$TMP/photos" --count "$COUNT" >&2
NSHARDS=$($PY tools/bench/bench_prep_e2e.py pack --photos "$TMP/photos" \
	--tree "$TMP/tree" --shards "$TMP/www" --per-shard 500)
rm -rf "$TMP/photos" "$TMP/tree"
PORT=$($PY tools/dev/nginx.py start --root "$TMP/www" --state "$TMP/nginx")
BASE=http://127.0.0.1:$PORT
"$BP"/tools/echofs-index --base-url "$BASE/" -o "$TMP/www/photos.echofs-index" \
	"$TMP"/www/photos-*.tar >&2
SOURCE="$BASE/photos-{000000..$(printf %06d $((NSHARDS - 1)))}.tar"

# mount OPTIONS [WRAPPER...] -> DPID
mount_it() {
	local o=$1
	shift
	mkdir -p "$MNT"
	"$@" "$BP"/echofs -f -o "cache_dir=$TMP/cache,log_file=$TMP/echofs.log${o:+,$o}${OPTS:+,$OPTS}" \
		"$SOURCE" "$MNT" 2>>"$TMP/echofs.log" &
	DPID=$!
	for ((i = 0; i < 600; i++)); do
		grep -qs " $MNT fuse" /proc/mounts && return 0
		kill -0 "$DPID" 2>/dev/null || break
		sleep 0.1
	done
	log "mount failed:"; tail -5 "$TMP/echofs.log" >&2; exit 1
}
unmount_it() {
	fusermount3 -u "$MNT" 2>/dev/null || { sleep 1; fusermount3 -u "$MNT"; }
	for ((i = 0; i < 300; i++)); do kill -0 "$DPID" 2>/dev/null || break; sleep 0.1; done
	DPID=
}
epoch() { $PY tools/bench/bench_open.py read "$MNT" --mode osopen --procs 2; }

# 3. the scenario
MOPTS=
READ=epoch
if [ "$SCEN" != cold-exact ]; then
	mount_it "" && epoch >/dev/null && unmount_it # fill the disk cache
fi
if [ "$SCEN" = echo-prep ]; then
	MOPTS="echo=4,echo_mode=fixed,augment=1,flip=1,size=256,crop=224,format=ppm"
	READ="$PY tools/bench/bench_echo_prep.py read $MNT --procs 2 --rounds 2"
fi
if [ $TOOL = perf ]; then
	mount_it "$MOPTS"
	rm -f "$OUT/perf.data" "$OUT/perf.data.old"
	perf record -e cpu-clock -g -p "$DPID" -o "$OUT/perf.data" 2>"$TMP/perf.log" &
	RPID=$!
	sleep 0.5
	RESULT=$($READ)
	kill -INT "$RPID"; wait "$RPID" || true; RPID=
	unmount_it
	perf report -i "$OUT/perf.data" --no-children --sort symbol --stdio \
		>"$OUT/report.txt" 2>/dev/null
	# awk reads to the end: no SIGPIPE for perf under pipefail
	perf report -i "$OUT/perf.data" --no-children --sort symbol --stdio -g none -q \
		2>/dev/null | awk 'NF && n++ < 15' >"$OUT/top.txt"
else
	mount_it "$MOPTS" valgrind --tool=callgrind --callgrind-out-file="$OUT/callgrind.out"
	RESULT=$($READ)
	unmount_it
	callgrind_annotate "$OUT/callgrind.out" >"$OUT/report.txt"
	grep -E '^ *[0-9,]+ ' "$OUT/report.txt" | sed -n '2,16p' >"$OUT/top.txt"
fi
{
	echo "scenario: $SCEN ($COUNT photos, 2 readers${OPTS:+, -o $OPTS})"
	echo "commit: $(git rev-parse --short HEAD 2>/dev/null || echo unknown)"
	echo "tool: $TOOL; load: $(cut -d' ' -f1-3 /proc/loadavg)"
	echo "reader: $RESULT"
} >"$OUT/run.txt"
cat "$OUT/run.txt"
echo "top 15 symbols (self time):"
cat "$OUT/top.txt"
