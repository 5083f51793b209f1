#!/bin/bash
# bench_train_decode.sh - data echoing over a slow decode (issue 11): time and
# fresh examples a small CNN needs to reach a test accuracy when its training
# images are photo-sized JPEGs that the echofs mount decodes, resizes and crops
# (-o size=,crop=,format=ppm), echo=1 against echo=4 (fixed and adaptive).
#   tools/bench/bench_train_decode.sh [--count 10000] [--test-count 2000]
#                        [--target 0.80] [--budget 400] [--repeats 1]
#                        [--cases "1:adaptive 4:fixed 4:adaptive"]
#                        [--size 72] [--crop 64] [--threads 1] [--workers 2]
#                        [--eval-seconds 5] [--ceiling-seconds 60] [--seed 1]
#                        [--out /tmp/echofs-bench] [--total 5400]
#                        [--batch 64] [--input rgb64]
#                        [--placements "shared:INPUT"] [--augment 1]
#                        [--prepared 0] [--eval-steps 0]
# Photos: --count training and then --test-count held-out colour JPEGs
# (~500x375, quality 90; both multiples of 500) made from the first articles of
# Fashion-MNIST's training split by tools/bench/echofs_photos.py (articles
# 0.. for training, COUNT.. held out), each split packed 500 a shard by
# bench_prep_e2e.py pack; made once into OUT/decode-data. nginx on
# the host loopback, no cap; both disk caches are read once (warm) before any
# timing, and every mount reuses them. The test split is an exact mount with
# the same size/crop/format=ppm, read once into memory. Before the echo runs,
# each repeat times the trainer for --ceiling-seconds on (a) local PPMs the
# exact mount made beforehand (the trainer alone: what it could consume) and
# (b) the exact preprocessing mount (decode in the loop); the gap shows that
# decoding, not training, is the slow stage. Then every case "E:MODE" trains
# on a fresh echo mount (augment=1,flip=1, seed=SEED+repeat-1; --augment 0
# leaves those out) until --target on the whole test split or --budget
# seconds (--eval-steps N: evaluated every N steps instead of every
# --eval-seconds, so runs that see the same images cross at the same
# step); the case "exact" is the exact preprocessing mount trained the
# same way, and "exact-again" a second one, a control: how far two
# identical runs of one repeat differ. A case with the suffix "+tier" (say "exact+tier", "4:adaptive+tier")
# mounts with the prepared-sample tier on (prepared=1) over a tier made
# before any timing by two exact passes over the training split on the same
# cache_dir (issue 30: a warm tier from an earlier job); the others keep
# --prepared. The suffix "+cold" mounts with the tier on over an empty
# one (hard links of the warm disk cache without it, made anew for each
# run, the last one moved aside):
# the first epoch decodes and fills it. --ceiling-seconds 0 skips the ceilings. Cases of one repeat run back
# to back, so they share the machine's load; the load average is recorded
# with every run. Their order turns by one each repeat (repeat 2 starts
# with the second case, and so on), so that no case always runs first: in
# a fixed order the shared placement's first case was the fastest in each
# of 3 repeats and an identical exact mount run third took 1.02-1.41x its
# time (BENCHMARKS §27). --placements lists PLACE:INPUT pairs, each run with every
# case in every repeat (interleaved): PLACE shared (everything on both cores)
# or pinned (issue 29: the model on core 1, the accelerator's stand-in; the
# echofs daemon and the DataLoader workers on core 0); INPUT is
# bench_train.py's --input (gray16, tensor224: issue 29's trainer with
# --size 256 --crop 224 --batch 128). Results in OUT/train-decode/:
# evals.jsonl, runs.jsonl, table.md (one table per placement) and per
# placement runs-PLACE-INPUT.{csv,png}.
set -euo pipefail
cd "$(dirname "$0")/../.."

COUNT=10000
TEST_COUNT=2000
TARGET=0.80
BUDGET=400
REPEATS=1
CASES="1:adaptive 4:fixed 4:adaptive"
SIZE=72
CROP=64
THREADS=1
WORKERS=2
EVAL_S=5
EVAL_STEPS=0
CEIL_S=60
SEED=1
OUT=/tmp/echofs-bench
TOTAL=5400
BATCH=64
INPUT=rgb64
PLACEMENTS=
AUGMENT=1
PREPARED=0
CMDLINE="tools/bench/bench_train_decode.sh $*"
# shellcheck source=tools/bench/common.sh
. tools/bench/common.sh
bench_args 2,49 --count=COUNT --test-count=TEST_COUNT --target=TARGET \
	--budget=BUDGET --repeats=REPEATS --cases=CASES --size=SIZE --crop=CROP \
	--threads=THREADS --workers=WORKERS --eval-seconds=EVAL_S --eval-steps=EVAL_STEPS \
	--ceiling-seconds=CEIL_S --seed=SEED --out=OUT --total=TOTAL \
	--batch=BATCH --input=INPUT --placements=PLACEMENTS --augment=AUGMENT --prepared=PREPARED -- "$@"
PLACEMENTS=${PLACEMENTS:-shared:$INPUT}

mkdir -p "$OUT/train-decode"
OUT=$(cd "$OUT" && pwd)
DATA=$OUT/decode-data
RES=$OUT/train-decode
# shellcheck source=tools/bench/bench_netns.sh
. tools/bench/bench_netns.sh
netns_bench_start train-decode "$TOTAL"
$PY -c 'import torch, torchvision, matplotlib' 2>/dev/null || {
	echo "bench_train_decode.sh: needs python3-torch python3-torchvision python3-matplotlib (apt-get install)" >&2
	exit 2
}
bench_snapshot
# --prepared 0 (default) keeps issue 29's decode-bound setting: every
# serve decodes; 1 lets every mount use the prepared-sample tier.
PREP="size=$SIZE,crop=$CROP,format=ppm,prepared=$PREPARED"

# photos SPLIT FIRST N: DATA/photos-SPLIT/photo_FIRST..FIRST+N-1.jpg (the
# Fashion-MNIST articles they are made from) in two generator processes (the
# photos are deterministic, so a half-made set is simply made again), packed
# 500 a shard into DATA/www/SPLIT (photos-NNNNNN.tar) with the JPEG tree
# DATA/tree-SPLIT
photos() {
	local dir=$DATA/photos-$1 www=$DATA/www/$1 half=$(($3 / 2))
	if [ "$(cat "$dir.done" 2>/dev/null)" != "$2+$3" ]; then
		blog "making $3 $1 photos"
		rm -rf "$dir" "$dir.done" "$www.done"
		$PY tools/bench/echofs_photos.py --out "$dir" --first "$2" --count "$half" >&2 &
		$PY tools/bench/echofs_photos.py --out "$dir" --first $(($2 + half)) --count $(($3 - half)) >&2
		wait $!
		echo "$2+$3" >"$dir.done"
	fi
	[ -f "$www.done" ] && return 0
	rm -rf "$www" "$DATA/tree-$1"
	$PY tools/bench/bench_prep_e2e.py pack --photos "$dir" --tree "$DATA/tree-$1" \
		--shards "$www" --per-shard 500 >/dev/null
	touch "$www.done"
}

# shards SPLIT COUNT -> the URL pattern of the split's shards; SHARD_FILES:
# their paths
shards() {
	local last=$(($2 - 1)) i
	SHARD_FILES=()
	for ((i = 0; i <= last; i++)); do SHARD_FILES+=("$DATA/www/$1/photos-$(printf %06d "$i").tar"); done
	echo "$HOST_BASE/$1/photos-{000000..$(printf %06d "$last")}.tar"
}

# warm SPLIT COUNT: index the split's shards (SRC_SPLIT), then read every
# file once through an exact mount so that the split's disk cache
# (BTMP/cache-SPLIT) is complete
warm() {
	local src
	shards "$1" "$2" >/dev/null
	src=$(shards "$1" "$2")
	printf -v "SRC_$1" '%s' "$src"
	"$B"/tools/echofs-index --base-url "$HOST_BASE/$1/" -o "$BTMP/$1.idx" "${SHARD_FILES[@]}" >/dev/null
	bench_mount HOST "$BTMP/cache-$1" "$BTMP/warm" "$src" "index=$BTMP/$1.idx"
	$PY tools/bench/bench_prep_e2e.py readall "$BTMP/warm" >/dev/null
	bench_unmount "$BTMP/warm"
	blog "$1: disk cache warm, $(du -sh "$BTMP/cache-$1" | cut -f1)"
}

# trainer LABEL TRAIN_ROOT [extra args]: one run with this placement's
# INPUT (and --pin when PLACE is pinned); appends its summary, the load
# average and (on a train_on mount) the daemon's CPU seconds to runs.jsonl
trainer() {
	local label=$1 root=$2 out pin=()
	shift 2
	[ "$PLACE" = pinned ] && pin=(--pin)
	out=$(timeout $((BUDGET + CEIL_S + 240)) $PY tools/bench/bench_train.py --train "$root" \
		--test "$BTMP/test" --test-cache "$BTMP/test-$INPUT.pt" --label "$label" --input "$INPUT" \
		--log "$RES/evals.jsonl" --target "$TARGET" --budget "$BUDGET" --batch "$BATCH" \
		--eval-seconds "$EVAL_S" --eval-steps "$EVAL_STEPS" --eval-subset 1000 --threads "$THREADS" --workers "$WORKERS" \
		--seed "$((SEED + REP - 1))" --repeat "$REP" "${pin[@]}" "$@" 2>>"$RES/trainer.log") ||
		blog "$label: trainer failed (see $RES/trainer.log)"
	[ -n "$out" ] || { blog "$label: no result"; return 0; }
	# The daemon's CPU seconds over its life (mount to here; the mount
	# serves nothing before the trainer starts).
	local cpu=null
	[ -n "${DAEMON_PID:-}" ] && cpu=$(awk -v hz="$(getconf CLK_TCK)" \
		'{printf "%.2f", ($14 + $15) / hz}' "/proc/$DAEMON_PID/stat" 2>/dev/null || echo null)
	out=$(echo "$out" | $PY -c 'import json,os,sys
d=json.loads(sys.stdin.read()); d["load1"]=round(os.getloadavg()[0], 1)
d["daemon_cpu_s"]=json.loads(sys.argv[1]); print(json.dumps(d))' "$cpu")
	echo "$out" >>"$RES/runs.jsonl"
	blog "$label: $out"
}

# train_on LABEL OPTS: a fresh mount of the training split over its warm
# cache; pinned: the daemon's threads on core 0
train_on() {
	bench_mount HOST "${CACHE:-$BTMP/cache-train}" "$BTMP/train" "$SRC_train" "index=$BTMP/train.idx,$2"
	DAEMON_PID=$(mount_pid "$BTMP/train")
	[ "$PLACE" = pinned ] && taskset -a -p -c 0 "$DAEMON_PID" >/dev/null
	trainer "$1" "$BTMP/train" "${@:3}"
	DAEMON_PID=
	bench_unmount "$BTMP/train"
}

if [ $((COUNT % 500)) != 0 ] || [ $((TEST_COUNT % 500)) != 0 ] || [ "$COUNT" -le 0 ] ||
	[ "$TEST_COUNT" -le 0 ]; then
	echo "bench_train_decode.sh: --count and --test-count: positive multiples of 500" >&2
	exit 2
fi
mkdir -p "$DATA/www"
# The layout before each split had its own set: one set, one shard list.
rm -rf "$DATA/photos" "$DATA/photos.done" "$DATA/tree" "$DATA/www.done" "$DATA"/www/photos-*.tar
photos train 0 "$COUNT"
photos test "$COUNT" "$TEST_COUNT"
host_nginx "$DATA/www"
NTRAIN=$((COUNT / 500))
NTEST=$((TEST_COUNT / 500))
SRC_train='' SRC_test=''
warm train "$NTRAIN"
warm test "$NTEST"
bench_mount HOST "$BTMP/cache-test" "$BTMP/test" "$SRC_test" "index=$BTMP/test.idx,$PREP"

# Local PPMs (for the ceilings): the exact mount's own output, copied once
# (cp times one reader).
if [ "$CEIL_S" != 0 ]; then
	bench_mount HOST "$BTMP/cache-train" "$BTMP/train" "$SRC_train" "index=$BTMP/train.idx,$PREP"
	t0=$(date +%s.%N)
	cp -r "$BTMP/train/." "$BTMP/ppm-train"
	rm -rf "$BTMP/ppm-train/.echofs"
	t1=$(date +%s.%N)
	bench_unmount "$BTMP/train"
	blog "local PPMs: $(find "$BTMP/ppm-train" -name '*.ppm' | wc -l) files, cp -r one reader $(awk -v n="$COUNT" -v a="$t0" -v b="$t1" 'BEGIN {printf "%.0f", n / (b - a)}') files/s"
fi

: >"$RES/evals.jsonl"
: >"$RES/runs.jsonl"
: >"$RES/trainer.log"
AUG=
[ "$AUGMENT" = 1 ] && AUG=,augment=1,flip=1
INPUT0=$INPUT
PLACE=shared
# The warm tier for "+tier" cases: two exact passes with the tier on, each
# its own mount (an entry is written at a sample's second use: issue 47).
case " $CASES " in *+tier*)
	t0=$(date +%s.%N)
	for pass in 1 2; do
		bench_mount HOST "$BTMP/cache-train" "$BTMP/train" "$SRC_train" \
			"index=$BTMP/train.idx,size=$SIZE,crop=$CROP,format=ppm,prepared=1"
		$PY tools/bench/bench_prep_e2e.py readall "$BTMP/train" >/dev/null
		bench_unmount "$BTMP/train"
	done
	t1=$(date +%s.%N)
	blog "prepared tier made in $(awk -v a="$t0" -v b="$t1" 'BEGIN {printf "%.0f", b - a}') s: $(du -sh "$BTMP/cache-train/prepared" | cut -f1)"
	;;
esac
for ((REP = 1; REP <= REPEATS; REP++)); do
	for pl in $PLACEMENTS; do
		PLACE=${pl%%:*} INPUT=${pl#*:}
		if [ "$CEIL_S" != 0 ]; then
			blog "repeat $REP/$REPEATS, $pl: ceilings, $CEIL_S s each"
			BUDGET_SAVED=$BUDGET
			BUDGET=$CEIL_S
			trainer "$pl local-ppm" "$BTMP/ppm-train" --keep-going
			train_on "$pl exact-prep" "$PREP" --keep-going
			BUDGET=$BUDGET_SAVED
		fi
		read -ra order <<<"$CASES"
		turn=$(((REP - 1) % ${#order[@]}))
		order=("${order[@]:turn}" "${order[@]:0:turn}")
		for c in "${order[@]}"; do
			opts=$PREP tag= CACHE=
			if [ "${c%+tier}" != "$c" ]; then
				c=${c%+tier} tag=" tier"
				opts="size=$SIZE,crop=$CROP,format=ppm,prepared=1"
			elif [ "${c%+cold}" != "$c" ]; then
				c=${c%+cold} tag=" cold tier"
				opts="size=$SIZE,crop=$CROP,format=ppm,prepared=1"
				CACHE=$BTMP/cache-cold
				# Moved aside, not removed: ext4 without a
				# journal skips recently freed inodes when it
				# makes a file, so a fill right after deleting
				# 10,000 entries pays a scan per file that a new
				# cache_dir does not (BENCHMARKS §21).
				[ -d "$CACHE" ] && mv "$CACHE" "$BTMP/old-cold-$REP-$RANDOM"
				mkdir "$CACHE"
				for f in "$BTMP/cache-train"/*; do
					[ "$(basename "$f")" = prepared ] || cp -al "$f" "$CACHE/"
				done
			fi
			if [ "$c" = exact ] || [ "$c" = exact-again ]; then
				train_on "$pl ${c/-/ }$tag" "$opts"
				continue
			fi
			e=${c%%:*} m=${c#*:}
			label="$pl $m E=$e$tag"
			[ "$e" = 1 ] && label="$pl E=1$tag"
			train_on "$label" "$opts,echo=$e,echo_mode=$m$AUG,seed=$((SEED + REP - 1))"
		done
	done
done
INPUT=$INPUT0

# One table per placement, each against its exact mount (or its E=1): its
# runs and evaluations with the placement taken off their labels.
: >"$RES/table.md"
for pl in $PLACEMENTS; do
	base="E=1"
	case " $CASES " in *" exact "*) base=exact ;; esac
	f=$RES/runs-${pl/:/-}
	for k in runs evals; do
		$PY -c 'import json,sys
for l in open(sys.argv[1]):
    d = json.loads(l)
    if d["label"].startswith(sys.argv[2] + " "):
        d["label"] = d["label"][len(sys.argv[2]) + 1:]
        print(json.dumps(d))' "$RES/$k.jsonl" "$pl" >"$f.$k.jsonl"
	done
	{
		echo "### $pl"
		echo
		$PY tools/bench/bench_train_report.py --runs "$f.runs.jsonl" \
			--evals "$f.evals.jsonl" --target "$TARGET" --csv "$f.csv" \
			--png "$f.png" --baseline "$base" --goal-speedup 1.0 \
			--refs "local-ppm exact-prep" \
			--title "Photo-sized JPEGs decoded by echofs ($PREP), $pl, warm disk cache" \
			--ymin 0.3 --ymax 0.9 --subset 1000
		echo
	} >>"$RES/table.md"
done
cat >>"$RES/table.md" <<EOF

- data: $COUNT training + $TEST_COUNT held-out photos (\`tools/bench/echofs_photos.py\`, ~500x375 colour JPEG, quality 90, from Fashion-MNIST train articles 0..$((COUNT - 1)) and $COUNT..$((COUNT + TEST_COUNT - 1))), $NTRAIN + $NTEST shards of 500 (\`bench_prep_e2e.py pack\`, one list a split), nginx on the host loopback, no cap; disk caches warm (every file read once) before any timing
- training mount: \`$B/echofs -o cache_dir=WARM,index=IDX,$PREP,echo=E,echo_mode=M${AUG},seed=$SEED+repeat-1 '$SRC_train' MNT\`; exact and exact-prep: the same without the echo options; local-ppm: that mount's files copied to local disk first; "tier" cases: \`prepared=1\` in place of \`prepared=$PREPARED\`, over a tier two exact passes made before any timing; "cold tier": \`prepared=1\` over an empty tier
- test mount (exact): \`-o $PREP\`, the $TEST_COUNT held-out photos read once into memory; accuracy every $EVAL_S s (every $EVAL_STEPS steps when not 0) on a fixed 1,000-image subset, the whole held-out set confirms the target
- trainer: \`/usr/bin/python3 tools/bench/bench_train.py --input INPUT [--pin] --train MNT --test TESTMNT --target $TARGET --budget $BUDGET --batch $BATCH --eval-seconds $EVAL_S --eval-steps $EVAL_STEPS --eval-subset 1000 --threads $THREADS --workers $WORKERS --seed $SEED+repeat-1\` (ImageFolder + DataLoader(shuffle, batch $BATCH, num_workers=$WORKERS), Adam 3e-3, torch.set_num_threads($THREADS); INPUT per placement: $PLACEMENTS; see bench_train.py); pinned: \`--pin\` (model on core 1, loader workers on core 0) and \`taskset -a -p -c 0\` on the daemon; ceilings run $CEIL_S s each with --keep-going (0: none)
- command: \`$CMDLINE\` ($ECHOFS_INFO; $(nproc) cores, torch $($PY -c 'import torch; print(torch.__version__)'), load average at end $(cut -d' ' -f1-3 /proc/loadavg), $(date -u +%Y-%m-%dT%H:%MZ))
EOF
cat "$RES/table.md"
echo "plots: $RES/runs-PLACE-INPUT.png"
