#!/bin/bash
# bench_scale.sh - an ImageNet-21k-sized dataset (14.2 M samples, 21,841
# classes, 14,200 shards of 1,000) mounted from a given index: the index's
# load time (echofs-index --check), the time from `echofs` to a ready tree
# and the daemon's CPU and RSS then, `ls -R | wc -l`, `find -type f | head`,
# stat of random files, an ImageFolder-style listing of every class, an
# echo mount reading for a while (its RSS against mem_size), and 4 ranks
# (rank/world) mounted one after the other.
#   tools/bench/bench_scale.sh [--samples N] [--classes N] [--stats N]
#                              [--echo-seconds S] [--ranks N] [--data DIR]
#                              [--index-format binary|text]
# The shards are sparse files of zeros served by nginx (nothing is read
# from them but the echo mount's samples), and the index is format 1
# (no checksums: the zeros would fail them) with unknown ETags: its text
# is written by awk (tar shards of zeros have no members for
# echofs-index to find), its lines otherwise what echofs-index writes;
# echofs-index --convert makes the binary index (docs/index-format.md)
# the mounts are given (--index-format text: the text one). DATA
# (default /tmp/echofs-bench/scale) keeps the shards and the indexes
# between runs.
set -euo pipefail
cd "$(dirname "$0")/../.."
# shellcheck source=tools/bench/common.sh
. tools/bench/common.sh

SAMPLES=14200000
CLASSES=21841
STATS=1000
ECHO_SECONDS=60
RANKS=4
DATA=/tmp/echofs-bench/scale
INDEX_FORMAT=binary
bench_args 2,20 --samples=SAMPLES --classes=CLASSES --stats=STATS \
	--echo-seconds=ECHO_SECONDS --ranks=RANKS --data=DATA \
	--index-format=INDEX_FORMAT -- "$@"
case "$INDEX_FORMAT" in
binary | text) ;;
*) echo "bench_scale: --index-format wants binary or text" >&2; exit 2 ;;
esac

PER=1000
STEP=8192 # bytes between samples in a shard
NSHARDS=$(((SAMPLES + PER - 1) / PER))
LAST=$(printf %06d $((NSHARDS - 1)))
bench_start scale
mkdir -p "$DATA/www/ds"

make_shards() {
	local i
	[ -f "$DATA/www/ds/train-$LAST.tar" ] && return 0
	log "making $NSHARDS sparse shards"
	for ((i = 0; i < NSHARDS; i++)); do
		printf '%s/www/ds/train-%06d.tar\0' "$DATA" "$i"
	done | xargs -0 truncate -s $((PER * STEP + 2048))
}

# make_index PORT: the index for this port's URLs (kept per port count).
make_index() {
	INDEX=$DATA/scale-$SAMPLES.index
	[ -f "$INDEX" ] && [ "$(head -c 100 "$INDEX.port" 2>/dev/null)" = "$1" ] &&
		return 0
	log "writing the index ($SAMPLES samples)"
	awk -v n="$SAMPLES" -v nc="$CLASSES" -v per=$PER -v step=$STEP \
		-v base="http://127.0.0.1:$1/ds" 'BEGIN {
		nshards = int((n + per - 1) / per)
		print "echofs-index 1"
		for (s = 0; s < nshards; s++)
			printf "S\t%s/train-%06d.tar\t%d\t-\n", base, s, per * step + 2048
		for (i = 0; i < n; i++) {
			c = (i * 7) % nc
			printf "M\t%d\t%d\t%d\tn%08d\tn%08d/n%08d_%d\tjpeg\n", int(i / per), \
				(i % per) * step + 1024, 1000 + (i * 37) % 6000, c, c, c, i
		}
	}' >"$INDEX"
	rm -f "$INDEX.bin"
	echo "$1" >"$INDEX.port"
}

# make_binary: the binary index from the text one, with the project's tool
# (kept with the text; BIN_INDEX set).
make_binary() {
	BIN_INDEX=$INDEX.bin
	[ -f "$BIN_INDEX" ] && [ "$BIN_INDEX" -nt "$INDEX" ] && return 0
	/usr/bin/time -f "binary index (echofs-index --convert): %e s wall, %M KB max rss" \
		$B/tools/echofs-index --convert "$INDEX" --format binary -o "$BIN_INDEX" >/dev/null
}

# cpu_s PID: user + system seconds of a process so far.
cpu_s() { awk -v t="$(getconf CLK_TCK)" '{printf "%.2f", ($14 + $15) / t}' "/proc/$1/stat"; }
rss_mb() { awk '/VmRSS/ {printf "%d", $2 / 1024}' "/proc/$1/status"; }
hwm_mb() { awk '/VmHWM/ {printf "%d", $2 / 1024}' "/proc/$1/status"; }

# mount_big NAME OPTIONS: mount in the foreground, wait for the tree (the log
# says "mounted"); sets MNT, DPID and wall, cpu, rss, hwm (MB) at that moment.
mount_big() {
	MNT=$TMP/mnt-$1
	local lg=$TMP/echofs-$1.log t0 t1 i
	mkdir -p "$MNT"
	t0=$(date +%s.%N)
	$B/echofs -f -o "cache_dir=$TMP/cache-$1,cache_size=2G,log_file=$lg,index=$INDEX${2:+,$2}" \
		"$SOURCE" "$MNT" 2>>"$lg" &
	DPID=$!
	PIDS+=("$DPID")
	MOUNTS+=("$MNT")
	for ((i = 0; i < 6000; i++)); do
		grep -qs "echofs info: mounted" "$lg" && break
		kill -0 "$DPID" 2>/dev/null || { log "mount $1 failed:"; tail -3 "$lg" >&2; exit 1; }
		sleep 0.05
	done
	t1=$(date +%s.%N)
	wall=$(echo "$t1 - $t0" | bc) cpu=$(cpu_s "$DPID")
	rss=$(rss_mb "$DPID") hwm=$(hwm_mb "$DPID")
}

# timed CMD...: wall seconds of a shell command (its output discarded).
timed() {
	local t0 t1
	t0=$(date +%s.%N)
	bash -c "$*" >/dev/null
	t1=$(date +%s.%N)
	echo "$t1 - $t0" | bc
}

make_shards
bench_nginx "$DATA/www"
make_index "$PORT"
make_binary
SOURCE="$BASE/ds/train-{000000..$LAST}.tar"
echo "load average at start: $(cut -d' ' -f1-3 /proc/loadavg)"
echo "index: $SAMPLES samples, $NSHARDS shards, $CLASSES classes," \
	"text $(($(stat -c %s "$INDEX") / 1000000)) MB," \
	"binary $(($(stat -c %s "$BIN_INDEX") / 1000000)) MB"
/usr/bin/time -f "text index load (echofs-index --check): %e s wall, %U+%S s cpu, %M KB max rss" \
	$B/tools/echofs-index --check "$INDEX" >/dev/null
/usr/bin/time -f "binary index load (echofs-index --check): %e s wall, %U+%S s cpu, %M KB max rss" \
	$B/tools/echofs-index --check "$BIN_INDEX" >/dev/null
[ "$INDEX_FORMAT" = binary ] && INDEX=$BIN_INDEX
echo "mounts given the $INDEX_FORMAT index"

mount_big exact ""
echo "exact mount: ready tree in $wall s (daemon cpu $cpu s), rss $rss MB (peak $hwm MB)"
echo "ls -R | wc -l: $(timed "ls -R $MNT | wc -l") s ($(ls -R "$MNT" | wc -l) lines)"
echo "find -type f | head: $(timed "find $MNT -type f | head") s"
echo "stat of $STATS random files: $($PY - "$MNT" "$STATS" <<'EOF'
import os, random, sys, time
root, n = sys.argv[1], int(sys.argv[2])
classes = sorted(os.listdir(root))
rnd = random.Random(0)
picks = []
for c in rnd.sample(classes, min(n, len(classes))):
    files = os.listdir(os.path.join(root, c))
    if files:
        picks.append(os.path.join(root, c, rnd.choice(files)))
t0 = time.monotonic()
for p in picks:
    os.stat(p)
dt = time.monotonic() - t0
print(f"{dt:.3f} s ({1e6 * dt / max(1, len(picks)):.0f} us each, {len(picks)} files)")
EOF
)"
# What torchvision's ImageFolder does: sorted class list, then a walk of
# every class directory (os.walk, sorted), keeping image files.
echo "ImageFolder-style listing: $($PY - "$MNT" <<'EOF'
import os, sys, time
root = sys.argv[1]
t0 = time.monotonic()
classes = sorted(e.name for e in os.scandir(root) if e.is_dir())
n = 0
for c in classes:
    for _, _, files in sorted(os.walk(os.path.join(root, c), followlinks=True)):
        n += sum(1 for f in sorted(files) if f.lower().endswith((".jpg", ".jpeg")))
print(f"{time.monotonic() - t0:.1f} s, {len(classes)} classes, {n} files")
EOF
)"
echo "exact mount after the listings: rss $(rss_mb "$DPID") MB"
unmount "$MNT" "$DPID"

mount_big echo "echo=4,mem_size=256M"
echo "echo=4 mount, mem_size=256M: ready in $wall s, rss $rss MB"
$PY - "$MNT" "$ECHO_SECONDS" <<'EOF' &
import os, random, sys, time
root, secs = sys.argv[1], float(sys.argv[2])
classes = sorted(os.listdir(root))
rnd = random.Random(1)
end, n = time.monotonic() + secs, 0
while time.monotonic() < end:
    c = rnd.choice(classes)
    files = os.listdir(os.path.join(root, c))
    try:
        with open(os.path.join(root, c, rnd.choice(files)), "rb") as f:
            n += len(f.read()) > 0
    except OSError:
        pass
print(f"echo reader: {n} files in {secs:.0f} s")
EOF
RPID=$!
max=0
while kill -0 $RPID 2>/dev/null; do
	r=$(rss_mb "$DPID")
	[ "$r" -gt "$max" ] && max=$r
	sleep 1
done
echo "echo=4 mount while reading: max rss $max MB (ready: $rss MB; mem_size 256 MB)"
grep -E "^pool|^fresh|^echo" "$MNT/.echofs/stats" | head -8 || true
unmount "$MNT" "$DPID"

for ((r = 0; r < RANKS; r++)); do
	mount_big "rank$r" "rank=$r,world=$RANKS"
	echo "rank $r of $RANKS: ready in $wall s (cpu $cpu s), rss $rss MB, $(find "$MNT" -mindepth 2 -type f | wc -l) files"
	unmount "$MNT" "$DPID"
done
echo "load average at end: $(cut -d' ' -f1-3 /proc/loadavg)"
