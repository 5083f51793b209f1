# common.sh - what the tools/bench/*.sh scripts share: flag parsing, a temp
# dir cleaned up on exit (mounts, daemons, nginx), nginx on a free port,
# foreground echofs mounts, medians. Source it from the repo root, after
# `cd "$(dirname "$0")/../.."`; it sets PY and B (BUILD_DIR, default build).
# shellcheck shell=bash

PY=/usr/bin/python3
B=${BUILD_DIR:-build}
BENCH_NAME=$(basename "$0")
TMP=""
MOUNTS=()
PIDS=()
NGINX_STATE=""

# bench_args LINES FLAG=VAR... -- "$@": parse --flag VALUE into VAR; a
# FLAG=VAR=VALUE entry is a switch that sets VAR to VALUE. -h / --help
# prints lines LINES (sed range, e.g. 2,18) of the script; anything else is
# an error (exit 2).
bench_args() {
	local help=$1 var
	local -A map=()
	shift
	while [ $# -gt 0 ] && [ "$1" != "--" ]; do
		map[${1%%=*}]=${1#*=}
		shift
	done
	shift
	while [ $# -gt 0 ]; do
		case "$1" in
		-h | --help) sed -n "${help}p" "$0"; exit 0 ;;
		esac
		var=${map[$1]:-}
		if [ -z "$var" ]; then
			echo "$BENCH_NAME: unknown argument $1" >&2
			exit 2
		elif [[ $var == *=* ]]; then
			printf -v "${var%%=*}" '%s' "${var#*=}"
			shift
		elif [ $# -lt 2 ]; then
			echo "$BENCH_NAME: $1 needs a value" >&2
			exit 2
		else
			printf -v "$var" '%s' "$2"
			shift 2
		fi
	done
}

log() { echo "bench: $*" >&2; }

# record_passes REPEAT CASE OUT: append {"repeat", "case", "out"} to
# RESULTS, OUT being the JSON line of bench_echo_ceiling.py read, and log
# the files/s of each of its passes.
record_passes() {
	$PY -c 'import json,sys; print(json.dumps({"repeat": int(sys.argv[1]),
		"case": sys.argv[2], "out": json.loads(sys.argv[3])}))' \
		"$1" "$2" "$3" >>"$RESULTS"
	log "repeat $1 $2: $($PY -c 'import json,sys
print(" | ".join("%.0f files/s" % p["files_per_s"] for p in json.loads(sys.argv[1])["passes"]))' "$3")"
}

# json JSON KEY: one top-level field of a JSON object.
json() { $PY -c 'import json,sys; print(json.loads(sys.argv[1])[sys.argv[2]])' "$1" "$2"; }

# median NUMBER...: the middle value (the upper one of an even count).
median() { printf '%s\n' "$@" | sort -g | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }

# median_mean NUMBER...: the middle value, or the mean of the two middle
# ones for an even count.
median_mean() { printf '%s\n' "$@" | sort -g | awk '{a[NR]=$1} END {print (NR%2) ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2}'; }

# bench_photos COUNT W H [DATA]: COUNT photo-sized JPEGs (WxH) packed in
# shards of 500 (made once per DATA dir and kept there; in $TMP without
# it), served by nginx (bench_nginx) with an index; sets WWW and SOURCE.
bench_photos() {
	WWW=${4:+$4/photos-$1-$2x$3}
	WWW=${WWW:-$TMP/www}
	mkdir -p "$(dirname "$WWW")"
	if [ ! -f "$WWW/done" ]; then
		log "generating $1 photos $2x$3"
		$PY tools/bench/echofs_photos.py --out "$TMP/photos" --count "$1" \
			--width "$2" --height "$3" >&2
		$PY tools/bench/bench_prep_e2e.py pack --photos "$TMP/photos" \
			--tree "$TMP/tree" --shards "$WWW" --per-shard 500 >"$WWW.nshards"
		rm -rf "$TMP/photos" "$TMP/tree"
		touch "$WWW/done"
	fi
	local n
	n=$(cat "$WWW.nshards")
	bench_nginx "$WWW"
	"$B"/tools/echofs-index --base-url "$BASE/" -o "$WWW/photos.echofs-index" \
		"$WWW"/photos-*.tar >&2
	SOURCE="$BASE/photos-{000000..$(printf %06d $((n - 1)))}.tar"
}

# bench_start NAME: TMP=/tmp/echofs-bench-NAME.XXXXXX, removed on exit with
# every mount under it, the daemons in PIDS and nginx (bench_nginx). A
# script may define bench_on_exit for its own cleanup (run first).
bench_start() {
	TMP=$(mktemp -d "/tmp/echofs-bench-$1.XXXXXX")
	trap bench_exit EXIT
	trap 'exit 130' INT TERM
}

bench_exit() {
	set +e
	declare -F bench_on_exit >/dev/null && bench_on_exit
	# Mounts made in subshells ($(run ...)) are not in MOUNTS: find them
	# under $TMP too.
	local m p
	for m in "${MOUNTS[@]}" $(awk -v t="$TMP/" 'index($2, t) == 1 {print $2}' /proc/mounts); do
		grep -qs " $m fuse" /proc/mounts &&
			{ fusermount3 -u "$m" 2>/dev/null || fusermount3 -uz "$m"; }
	done
	for p in "${PIDS[@]}"; do
		kill -0 "$p" 2>/dev/null && { sleep 1; kill "$p" 2>/dev/null; }
	done
	[ -n "$NGINX_STATE" ] && $PY tools/dev/nginx.py stop --state "$NGINX_STATE"
	[ -n "$TMP" ] && rm -rf "$TMP"
}

# bench_nginx ROOT [nginx.py start options...]: nginx on a free port serving
# ROOT, stopped on exit; sets PORT and BASE (http://127.0.0.1:PORT).
bench_nginx() {
	local root=$1
	shift
	NGINX_STATE=$TMP/nginx
	PORT=$($PY tools/dev/nginx.py start --root "$root" --state "$NGINX_STATE" "$@")
	BASE=http://127.0.0.1:$PORT
}

# wait_mounted MNT [PID [SECONDS]]: 0 once MNT is a FUSE mount; 1 when the
# daemon PID died or SECONDS (default 30) passed.
wait_mounted() {
	local i
	for ((i = 0; i < ${3:-30} * 10; i++)); do
		grep -qs " $1 fuse" /proc/mounts && return 0
		[ -n "${2:-}" ] && ! kill -0 "$2" 2>/dev/null && return 1
		sleep 0.1
	done
	return 1
}

# mount_echofs NAME OPTIONS [CACHE_DIR [ECHOFS]] -> MNT, DPID: echofs (the
# ECHOFS binary, default B/echofs) in the foreground (so DPID is the daemon
# itself and /proc/DPID/stat counts all its threads) on TMP/mnt-NAME,
# serving SOURCE with cache_dir=CACHE_DIR (default TMP/cache) and its log in
# TMP/echofs-NAME.log. OPTIONS may be empty. Exits the script when the
# mount fails.
mount_echofs() {
	MNT=$TMP/mnt-$1
	mkdir -p "$MNT"
	"${4:-$B/echofs}" -f -o "cache_dir=${3:-$TMP/cache},log_file=$TMP/echofs-$1.log${2:+,$2}" \
		"$SOURCE" "$MNT" 2>>"$TMP/echofs-$1.log" &
	DPID=$!
	PIDS+=("$DPID")
	MOUNTS+=("$MNT")
	if ! wait_mounted "$MNT" "$DPID"; then
		log "mount $1 failed:"; tail -5 "$TMP/echofs-$1.log" >&2; exit 1
	fi
}

# unmount MNT [PID]: unmount, then wait up to 10 s for the daemon PID to
# exit (without PID: half a second, for a daemon to release its cache).
unmount() {
	fusermount3 -u "$1" 2>/dev/null || { sleep 1; fusermount3 -u "$1"; }
	if [ -z "${2:-}" ]; then
		sleep 0.5
		return 0
	fi
	local i
	for ((i = 0; i < 100; i++)); do kill -0 "$2" 2>/dev/null || return 0; sleep 0.1; done
	log "daemon $2 still running after unmount"
}
