#!/bin/bash
# bench_open.sh - zero-copy cold reads and the Python open, side by side in one run.
#
#   tools/bench/bench_open.sh [--count 2000] [--runs 3] [--procs 2] [--before BUILD]
#                             [--limit-rate RATE]
#
# Photo-sized JPEGs (tools/bench/echofs_photos.py, packed 500 per shard with
# the index beside the shards) behind a private nginx on loopback
# (--limit-rate: nginx's limit_rate per connection, e.g. 5m, so that cold
# epochs read many files of shards still downloading).
# 1. Exact epochs (os.open, --procs shuffled readers), -o zerocopy=1 and
#    zerocopy=0 alternated --runs times: cold (empty cache_dir) and warm
#    (a new mount on the filled cache_dir: disk cache warm, kernel page cache
#    of the mount empty). files/s and the daemon's CPU seconds (its
#    threads' /proc schedstat) per GB served. Medians.
# 2. Warm epochs (the mount's page cache filled by one epoch first) with
#    Python open() and os.open() on the mount and on the same files extracted
#    to local disk; medians, ratios, and FUSE_IOCTL requests per open() (the
#    mount's `ioctls` stat). --before BUILD adds the same mount made by an
#    older build's echofs (e.g. one without an ioctl handler), and a cold
#    exact epoch of that build (its defaults) to each run of step 1.
# Prints a Markdown table; the log goes to stderr.
set -euo pipefail
cd "$(dirname "$0")/../.."

COUNT=2000 RUNS=3 PROCS=2 BEFORE= RATE=
# shellcheck source=tools/bench/common.sh
. tools/bench/common.sh
bench_args 2,22 --count=COUNT --runs=RUNS --procs=PROCS --before=BEFORE \
	--limit-rate=RATE -- "$@"
RD=tools/bench/bench_open.py
bench_start open

calc() { $PY -c "print('%.${2:-2}f' % ($1))"; }
stat_of() { # mnt key: read with os.open, so the read costs no ioctl itself
	$PY -c 'import json,os,sys
fd = os.open(os.path.join(sys.argv[1], ".echofs", "stats"), os.O_RDONLY)
print(json.loads(os.read(fd, 1 << 20)).get(sys.argv[2], 0))' "$1" "$2"
}

# epoch NAME CACHE ZC [ECHOFS] -> "files_s cpu_s_per_gb zerocopy_reads
# zerocopy_streaming_reads" (ZC empty: the build's default)
epoch() {
	mount_echofs "$1" "${3:+zerocopy=$3}" "$2" "${4:-}"
	local c0 c1 out
	c0=$($PY $RD cpu "$DPID")
	out=$($PY $RD read "$MNT" --mode osopen --procs "$PROCS" --seed "$RANDOM")
	c1=$($PY $RD cpu "$DPID")
	local zr zs
	zr=$(stat_of "$MNT" zerocopy_reads)
	zs=$(stat_of "$MNT" zerocopy_streaming_reads)
	unmount "$MNT" "$DPID"
	echo "$(calc "$(json "$out" files_s)" 0) $(calc "($c1 - $c0) / ($(json "$out" bytes) / 1e9)" 3) $zr $zs"
}

LOAD0=$(cut -d' ' -f1-3 /proc/loadavg)
log "generating $COUNT photos"
$PY tools/bench/echofs_photos.py --out "$TMP/photos" --count "$COUNT" >&2
NSHARDS=$($PY tools/bench/bench_prep_e2e.py pack --photos "$TMP/photos" \
	--tree "$TMP/local" --shards "$TMP/www" --per-shard 500)
rm -rf "$TMP/photos"
bench_nginx "$TMP/www" ${RATE:+--limit-rate "$RATE"}
"$B"/tools/echofs-index --base-url "$BASE/" -o "$TMP/www/photos.echofs-index" \
	"$TMP"/www/photos-*.tar >&2
SOURCE="$BASE/photos-{000000..$(printf %06d $((NSHARDS - 1)))}.tar"
GB=$(du -sb "$TMP/local" | cut -f1)

# 1. zero-copy on and off, cold and warm, alternated
declare -A COLD_F COLD_C WARM_F WARM_C ZR ZS
for ((i = 1; i <= RUNS; i++)); do
	order="1 0"
	((i % 2)) || order="0 1" # neither always goes first
	[ -n "$BEFORE" ] && order="${order/ / b }" # the old build in between
	for zc in $order; do
		rm -rf "$TMP/cache$zc"
		if [ "$zc" = b ]; then
			read -r f c z s <<<"$(epoch coldb "$TMP/cacheb" "" "$BEFORE/echofs")"
			COLD_F[b]+="$f " COLD_C[b]+="$c "
			log "run $i before, cold: $f files/s, $c CPU s/GB, $z spliced"
			continue
		fi
		read -r f c z s <<<"$(epoch "cold$zc" "$TMP/cache$zc" $zc)"
		COLD_F[$zc]+="$f " COLD_C[$zc]+="$c " ZS[$zc]+="$s/$z "
		log "run $i zerocopy=$zc cold: $f files/s, $c CPU s/GB, $z spliced ($s from shards still downloading)"
		read -r f c z s <<<"$(epoch "warm$zc" "$TMP/cache$zc" $zc)"
		WARM_F[$zc]+="$f " WARM_C[$zc]+="$c " ZR[$zc]=$z
		log "run $i zerocopy=$zc warm: $f files/s, $c CPU s/GB, $z spliced"
	done
done

# 2. the Python open: warm page cache, mount vs local disk
declare -A OPEN
open_runs() { # KEY ROOT MODE [MNT]
	local out ioc0=0 ioc1=0
	[ -n "${4:-}" ] && ioc0=$(stat_of "$4" ioctls)
	out=$($PY $RD read "$2" --mode "$3" --procs "$PROCS" --seed "$RANDOM")
	[ -n "${4:-}" ] && ioc1=$(stat_of "$4" ioctls)
	OPEN[$1]+="$(calc "$(json "$out" files_s)" 0) "
	OPEN[$1.ioctl]=$(calc "($ioc1 - $ioc0) / $(json "$out" files)")
}
mount_echofs after "" "$TMP/cache1"
AMNT=$MNT APID=$DPID
$PY $RD read "$AMNT" --mode osopen --procs "$PROCS" >/dev/null # fill
BMNT=
if [ -n "$BEFORE" ]; then
	mount_echofs before "" "$TMP/cache1" "$BEFORE/echofs"
	BMNT=$MNT BPID=$DPID
	$PY $RD read "$BMNT" --mode osopen --procs "$PROCS" >/dev/null
fi
cat "$TMP"/local/*/* >/dev/null # local files in the page cache too
for ((i = 1; i <= RUNS; i++)); do
	open_runs mnt.open "$AMNT" open "$AMNT"
	open_runs mnt.osopen "$AMNT" osopen "$AMNT"
	open_runs local.open "$TMP/local" open
	open_runs local.osopen "$TMP/local" osopen
	if [ -n "$BMNT" ]; then
		open_runs before.open "$BMNT" open
		open_runs before.osopen "$BMNT" osopen
	fi
	log "run $i open(): mount ${OPEN[mnt.open]}| local ${OPEN[local.open]}"
done
ONE=$(find "$AMNT" -name '*.jpg' -print -quit)
RT_MNT=$($PY $RD ioctl "$ONE")
RT_LOCAL=$($PY $RD ioctl "$TMP/local/${ONE#"$AMNT"/}")
unmount "$AMNT" "$APID"
[ -n "$BMNT" ] && unmount "$BMNT" "$BPID"
LOAD1=$(cut -d' ' -f1-3 /proc/loadavg)

m() { median_mean ${1}; }
echo "### $COUNT photos ($(calc "$GB / 1e6" 0) MB), $NSHARDS shards, $PROCS readers, medians of $RUNS${RATE:+, nginx limit_rate $RATE}; load $LOAD0 -> $LOAD1"
echo
echo "| exact epoch | zerocopy=1 files/s | zerocopy=0 files/s | ratio | zerocopy=1 CPU s/GB | zerocopy=0 CPU s/GB |"
echo "|---|---:|---:|---:|---:|---:|"
for k in COLD WARM; do
	unset -n F C 2>/dev/null || true
	declare -n F=${k}_F C=${k}_C
	echo "| ${k,,} | $(m "${F[1]}") | $(m "${F[0]}") | $(calc "$(m "${F[1]}") / $(m "${F[0]}")") | $(m "${C[1]}") | $(m "${C[0]}") |"
done
if [ -n "$BEFORE" ]; then
	echo "| cold, before ($BEFORE, its defaults) | $(m "${COLD_F[b]}") | | $(calc "$(m "${COLD_F[1]}") / $(m "${COLD_F[b]}")") (after/before) | $(m "${COLD_C[b]}") | |"
fi
echo
echo "Cold zerocopy=1 epochs, spliced from shards still downloading / all spliced, per run: ${ZS[1]}(zerocopy=0: ${ZS[0]})."
echo
echo "Spliced replies (READs and page-cache pushes) in the last warm zerocopy=1 epoch: ${ZR[1]}, for $(find "$TMP/local" -type f | wc -l) files (zerocopy=0: ${ZR[0]})."
echo
echo "| warm epoch (page cache full) | files/s | vs local os.open | FUSE_IOCTL per file |"
echo "|---|---:|---:|---:|"
LO=$(m "${OPEN[local.osopen]}")
row() { echo "| $1 | $(m "${OPEN[$2]}") | $(calc "$(m "${OPEN[$2]}") / $LO") | ${3:-} |"; }
row "echofs, Python open()" mnt.open "${OPEN[mnt.open.ioctl]}"
row "echofs, os.open()" mnt.osopen "${OPEN[mnt.osopen.ioctl]}"
if [ -n "$BMNT" ]; then
	row "echofs before ($BEFORE), Python open()" before.open
	row "echofs before ($BEFORE), os.open()" before.osopen
fi
row "local disk, Python open()" local.open
row "local disk, os.open()" local.osopen
echo
echo "One ioctl(TCGETS) (isatty) on an open file: $RT_MNT us on the mount (a FUSE_IOCTL round trip), $RT_LOCAL us on local disk (mean of 2000, Python termios.tcgetattr)."
