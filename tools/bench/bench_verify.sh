#!/bin/bash
# bench_verify.sh - what the end-to-end checksums cost: the same cold and warm
# epochs over Fashion-MNIST train (60,000 files) with a format 1 index (no
# checksums: size and ETag only) and a format 2 index (every member checked
# with XXH3-64 before it is served), side by side in one run, with the
# daemon's CPU seconds per epoch (utime + stime from /proc/PID/stat).
#   tools/bench/bench_verify.sh [--runs N] [--procs N] [--rounds N]
# --runs: warm epochs per mount (median, default 3); --procs: reader
# processes (default 2); --rounds: v1/v2 mount pairs (default 2), whose
# epochs take turns; ratios of back-to-back pairs are reported with the load.
# Data is packed once into build/bench-data/ (BENCH_DATA); BUILD_DIR picks
# the build. Prints a markdown table.
set -euo pipefail
cd "$(dirname "$0")/../.."

RUNS=3
PROCS=2
ROUNDS=2
CMDLINE="tools/bench/bench_verify.sh $*"
# shellcheck source=tools/bench/common.sh
. tools/bench/common.sh
bench_args 2,12 --runs=RUNS --procs=PROCS --rounds=ROUNDS -- "$@"
DATA=${BENCH_DATA:-$B/bench-data}
bench_start verify

# The echofs daemon serving mountpoint $1 (its command line names it).
daemon_pid() {
	local p
	for p in /proc/[0-9]*; do
		# (processes may exit meanwhile: errors are expected)
		tr '\0' '\n' 2>/dev/null <"$p/cmdline" | grep -qxF "$1" &&
			tr '\0' '\n' 2>/dev/null <"$p/cmdline" | head -1 | grep -q 'echofs$' &&
			{ basename "$p"; return 0; }
	done
	return 1
}

cpu_s() { # pid -> utime + stime in seconds
	awk -v hz="$(getconf CLK_TCK)" '{print ($14 + $15) / hz}' "/proc/$1/stat"
}

reader() { # root runs -> files/s (median)
	$PY tools/bench/bench_reader.py "$1" --procs "$PROCS" --seed 1 \
		--runs "$2" --json |
		$PY -c 'import json,sys; print(json.load(sys.stdin)["files_per_s"])'
}

sub() { $PY -c "import sys; print('%.2f' % ((float(sys.argv[1]) - float(sys.argv[2])) / float(sys.argv[3])))" "$@"; }

pack() {
	[ -f "$DATA/shards/train-000059.tar" ] && return 0
	log "packing train into $DATA"
	rm -rf "$DATA"
	"$B"/tools/echofs-pack --split train --out "$DATA/shards" --tree "$DATA/tree"
}

# v2 from echofs-index; v1 is the same index without the checksum fields.
make_indexes() {
	"$B"/tools/echofs-index --base-url "$BASE/shards" -o "$TMP/v2.echofs-index" \
		"$DATA"/shards/train-*.tar 2>/dev/null
	awk -F'\t' -v OFS='\t' 'NR == 1 {print "echofs-index 1"; next}
		{NF--; print}' "$TMP/v2.echofs-index" >"$TMP/v1.echofs-index"
}

declare -A COLD COLD_CPU WARM WARM_CPU MNT PID
# Paired ratios (format 2 / format 1) of epochs run back to back, and the
# 1-minute load average before each round: the machine may be shared, and a
# ratio of neighbouring runs moves less than either figure alone.
R_COLD="" R_COLD_CPU="" R_WARM="" R_WARM_CPU="" LOADS=""

mount_one() { # v1|v2 round
	local v=$1 mnt=$TMP/mnt-$1-$2
	mkdir -p "$mnt"
	MOUNTS+=("$mnt")
	"$B"/echofs -o "cache_dir=$TMP/cache-$v-$2,log_file=$TMP/echofs-$v.log,index=$TMP/$v.echofs-index" \
		"$SOURCE" "$mnt"
	MNT[$v]=$mnt
	PID[$v]=$(daemon_pid "$mnt")
}

umount_one() { # v1|v2 round
	grep -q '"verify": 0' "${MNT[$1]}/.echofs/stats" || log "$1: verify errors!"
	fusermount3 -u "${MNT[$1]}"
	sleep 0.5
	rm -rf "$TMP/cache-$1-$2"
}

epoch() { # v1|v2 -> "files/s daemon-CPU-s" of one epoch
	local c0 c1 rate
	c0=$(cpu_s "${PID[$1]}")
	rate=$(reader "${MNT[$1]}" 1)
	c1=$(cpu_s "${PID[$1]}")
	echo "$rate $(sub "$c1" "$c0" 1)"
}

ratio() { $PY -c "import sys; print('%.3f' % (float(sys.argv[1]) / float(sys.argv[2])))" "$@"; }

# One cold epoch per format, then RUNS warm ones, the two formats taking
# turns (who goes first alternates by round, so neither always meets a
# cooler machine).
one_round() { # round
	local r=$1 v a b c d order i
	local -A got
	LOADS+="$(cut -d' ' -f1 /proc/loadavg) "
	mount_one v1 "$r"
	mount_one v2 "$r"
	order="v1 v2"
	((r % 2)) && order="v2 v1"
	for i in cold $(seq "$RUNS"); do
		for v in $order; do
			got[$v]=$(epoch "$v")
		done
		read -r a b <<<"${got[v1]}"
		read -r c d <<<"${got[v2]}"
		if [ "$i" = cold ]; then
			COLD[v1]+="$a " COLD_CPU[v1]+="$b "
			COLD[v2]+="$c " COLD_CPU[v2]+="$d "
			R_COLD+="$(ratio "$c" "$a") " R_COLD_CPU+="$(ratio "$d" "$b") "
		else
			WARM[v1]+="$a " WARM_CPU[v1]+="$b "
			WARM[v2]+="$c " WARM_CPU[v2]+="$d "
			R_WARM+="$(ratio "$c" "$a") " R_WARM_CPU+="$(ratio "$d" "$b") "
		fi
		log "round $r $i: v1 $a files/s ${b}s CPU, v2 $c files/s ${d}s CPU"
	done
	umount_one v1 "$r"
	umount_one v2 "$r"
}

bash tools/dev/setup.sh >&2
pack
bench_nginx "$DATA"
SOURCE="$BASE/shards/train-{000000..000059}.tar"
make_indexes
for ((r = 0; r < ROUNDS; r++)); do
	one_round "$r"
done

row() { # label v
	# shellcheck disable=SC2086
	echo "| $1 | $(median ${COLD[$2]}) | $(median ${COLD_CPU[$2]}) | $(median ${WARM[$2]}) | $(median ${WARM_CPU[$2]}) |"
}
spread() { # values -> "min-max"
	# shellcheck disable=SC2086
	printf '%s\n' $1 | sort -g | sed -n '1p;$p' | paste -sd- -
}
# shellcheck disable=SC2086
cat <<EOF

### Checksums on and off: Fashion-MNIST train, 60,000 files, $PROCS shuffled readers

| index | cold files/s | cold daemon CPU s | warm files/s | warm daemon CPU s/epoch |
|---|---:|---:|---:|---:|
$(row "format 1 (size + ETag only)" v1)
$(row "format 2 (XXH3-64 per member and shard)" v2)
| format 2 / format 1, median of paired ratios | $(median $R_COLD) | $(median $R_COLD_CPU) | $(median $R_WARM) | $(median $R_WARM_CPU) |

- $ROUNDS rounds; each mounts both formats (fresh cache_dir each), runs one
  cold epoch per format, then $RUNS warm epochs per format, the formats
  taking turns epoch by epoch (first alternating by round); medians over
  all epochs, and of the ratios of each back-to-back pair
- paired ratios, cold files/s: $(spread "$R_COLD"); warm files/s: $(spread "$R_WARM");
  warm CPU: $(spread "$R_WARM_CPU")
- 1-minute load average before each round: $LOADS($(nproc) cores)
- command: \`$CMDLINE\` ($(uname -r))
- nginx on 127.0.0.1 serves $DATA/shards
EOF
