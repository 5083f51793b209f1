#!/bin/bash
# bench_train.sh - data echoing at small scale (Choi et al. 2019): time and
# fresh examples a small CNN needs to reach a test accuracy on Fashion-MNIST
# when its training split comes through a bandwidth-capped echofs echo mount.
#   tools/bench/bench_train.sh [--rate auto|RATE] [--target 0.87] [--budget 300]
#                        [--echoes "1 2 4"] [--modes "adaptive fixed"]
#                        [--threads 1] [--workers 2] [--eval-seconds 5]
#                        [--ceiling-seconds 40] [--cache-size 32M] [--seed 1]
#                        [--repeats 1] [--first-repeat 1] [--append]
#                        [--out /tmp/echofs-bench] [--total 3000]
# --echoes 0 adds an exact training mount (no echo options; its shuffled
# reads over the cap fetch what the small cache lost), once per repeat.
# The test split is an exact echofs mount over an nginx on the host loopback
# (read once into memory by the first run). The training split is an echo
# mount (-o echo=E,echo_mode=M,seed=S) over an nginx inside a private network
# namespace whose loopback tc caps to --rate; each run gets a fresh cache_dir
# capped at --cache-size, smaller than the split, so later passes fetch again
# instead of reading a local copy. First the trainer runs --ceiling-seconds on
# the local tree: its images/s is what it could consume. --rate auto sets the
# cap to a fifth of that consumption (in shard bytes), so the trainer could
# consume at least 4x the fresh supply. Each run stops at --target (the whole
# test split) or after --budget seconds. --repeats runs every case again with
# seed+1, seed+2... (the report gives medians); --append adds to earlier
# results (give the same --rate) with repeats numbered from --first-repeat.
# --total bounds the whole script.
# Results in OUT/train/: evals.jsonl, runs.csv, table.md, accuracy.png.
set -euo pipefail
cd "$(dirname "$0")/../.."

RATE=auto
TARGET=0.87
BUDGET=300
ECHOES="1 2 4"
MODES="adaptive fixed"
THREADS=1
WORKERS=2
EVAL_S=5
CEIL_S=40
CACHE_SIZE=32M
SEED=1
OUT=/tmp/echofs-bench
TOTAL=3000
REPEATS=1
FIRST=1
APPEND=0
CMDLINE="tools/bench/bench_train.sh $*"
# shellcheck source=tools/bench/common.sh
. tools/bench/common.sh
bench_args 2,25 --rate=RATE --target=TARGET --budget=BUDGET \
	--echoes=ECHOES --modes=MODES --threads=THREADS --workers=WORKERS \
	--eval-seconds=EVAL_S --ceiling-seconds=CEIL_S --cache-size=CACHE_SIZE \
	--seed=SEED --out=OUT --total=TOTAL --repeats=REPEATS \
	--first-repeat=FIRST --append=APPEND=1 -- "$@"

mkdir -p "$OUT/train"
OUT=$(cd "$OUT" && pwd)
DATA=$OUT/data
RES=$OUT/train
# shellcheck source=tools/bench/bench_netns.sh
. tools/bench/bench_netns.sh
netns_bench_start train "$TOTAL"
$PY -c 'import torch, torchvision, matplotlib' 2>/dev/null || {
	echo "bench_train.sh: needs python3-torch python3-torchvision python3-matplotlib (apt-get install)" >&2
	exit 2
}

bench_snapshot
pack() { # split count
	[ -f "$DATA/shards/$1-$(printf %06d $(($2 - 1))).tar" ] && [ -d "$DATA/tree-$1/9" ] && return 0
	blog "packing Fashion-MNIST $1 into $DATA"
	mkdir -p "$DATA"
	"$B"/tools/echofs-pack --split "$1" --out "$DATA/shards" --tree "$DATA/tree-$1" >/dev/null
}

# trainer LABEL TRAIN_ROOT [extra args]: one run; appends its summary to runs.jsonl
trainer() {
	local label=$1 root=$2 out
	shift 2
	out=$(timeout $((BUDGET + CEIL_S + 240)) $PY tools/bench/bench_train.py --train "$root" \
		--test "$BTMP/test" --test-cache "$BTMP/test.pt" --label "$label" \
		--log "$RES/evals.jsonl" --target "$TARGET" --budget "$BUDGET" \
		--eval-seconds "$EVAL_S" --threads "$THREADS" --workers "$WORKERS" \
		--seed "$((SEED + REP - FIRST_SEED_BASE))" --repeat "$REP" "$@" 2>>"$RES/trainer.log") || blog "$label: trainer failed (see $RES/trainer.log)"
	[ -n "$out" ] && echo "$out" >>"$RES/runs.jsonl"
	blog "$label: ${out:-no result}"
}

# auto_rate: a fifth of the trainer's local consumption, in shard bytes/s, as tc kbit
auto_rate() {
	$PY - "$RES/runs.jsonl" "$DATA/shards" <<'EOF'
import json, os, sys
runs = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
local = [r for r in runs if r["label"] == "local"][-1]
consume = local["seen"] / local["time_s"]
shards = [os.path.join(sys.argv[2], n) for n in os.listdir(sys.argv[2])
          if n.startswith("train-") and n.endswith(".tar")]
per_sample = sum(os.path.getsize(p) for p in shards) / 60000.0
print("%dkbit" % (consume / 5 * per_sample * 8 / 1000))
EOF
}

pack train 60
pack test 10
if [ "$APPEND" = 0 ]; then
	: >"$RES/evals.jsonl"
	: >"$RES/runs.jsonl"
	: >"$RES/trainer.log"
fi
FIRST_SEED_BASE=1 # repeat k trains with seed SEED + k - 1
REP=$FIRST
host_nginx "$DATA"
"$B"/tools/echofs-index --base-url "$HOST_BASE/shards/" -o "$BTMP/test.idx" \
	"$DATA"/shards/test-*.tar >/dev/null
bench_mount HOST "$BTMP/test-cache" "$BTMP/test" \
	"$HOST_BASE/shards/test-{000000..000009}.tar" "index=$BTMP/test.idx"

blog "ceiling: trainer on the local tree for $CEIL_S s"
$PY tools/bench/bench_echo_reader.py "$DATA/tree-train" --seconds 1 --warmup 0 >/dev/null # warm page cache
BUDGET_SAVED=$BUDGET
BUDGET=$CEIL_S
trainer local "$DATA/tree-train" --keep-going
[ "$RATE" = auto ] && RATE=$(auto_rate)
BUDGET=$BUDGET_SAVED
blog "rate $RATE"

netns_start "$RATE"
netns_nginx "$DATA"
"$B"/tools/echofs-index --base-url "$NS_BASE/shards/" -o "$BTMP/train.idx" \
	"$DATA"/shards/train-*.tar >/dev/null
for ((REP = FIRST; REP < FIRST + REPEATS; REP++)); do
	for e in $ECHOES; do
		for m in $MODES; do
			# E 0: an exact mount (no echo options), once per repeat
			[ "$e" = 0 ] && [ "$m" != "${MODES%% *}" ] && continue
			opts="index=$BTMP/train.idx,cache_size=$CACHE_SIZE"
			label="$m E=$e"
			if [ "$e" = 0 ]; then
				label=exact
			else
				opts="$opts,echo=$e,echo_mode=$m,seed=$((SEED + REP - 1))"
			fi
			rm -rf "$BTMP/cache"
			bench_mount NS "$BTMP/cache" "$BTMP/train" "$NS_BASE/shards/train-{000000..000059}.tar" "$opts"
			trainer "$label" "$BTMP/train"
			bench_unmount "$BTMP/train"
			rm -rf "$BTMP/cache"
		done
	done
done

$PY tools/bench/bench_train_report.py --runs "$RES/runs.jsonl" --evals "$RES/evals.jsonl" \
	--target "$TARGET" --csv "$RES/runs.csv" --png "$RES/accuracy.png" >"$RES/table.md"
cat >>"$RES/table.md" <<EOF

- throttle: \`unshare -n\`; inside: \`ip link set lo up mtu 9000; tc qdisc add dev lo root tbf rate $RATE burst 128kb latency 2000ms\`; nginx and the training mount's echofs run inside, the trainer outside
- training mount: \`$B/echofs -o cache_dir=FRESH,index=IDX,cache_size=$CACHE_SIZE,echo=E,echo_mode=M,seed=$SEED+repeat-1 '$NS_BASE/shards/train-{000000..000059}.tar' MNT\`; exact (\`--echoes 0\`): the same without echo, echo_mode and seed
- test mount (exact, unthrottled host loopback): \`$B/echofs -o cache_dir=DIR,index=IDX '$HOST_BASE/shards/test-{000000..000009}.tar' MNT\`, read once into memory
- trainer: \`/usr/bin/python3 tools/bench/bench_train.py --train MNT --test TESTMNT --target $TARGET --budget $BUDGET --eval-seconds $EVAL_S --threads $THREADS --workers $WORKERS --seed $SEED+repeat-1\` (ImageFolder + DataLoader(shuffle, batch 64, num_workers=$WORKERS), Grayscale(1)/ToTensor/Normalize, 2 strided convs + linear, Adam 3e-3, torch.set_num_threads($THREADS)); accuracy every $EVAL_S s on a fixed 2,000-image test subset, the whole test split (10,000) confirms the target
- command: \`$CMDLINE\` ($ECHOFS_INFO; $(nproc) cores, torch $($PY -c 'import torch; print(torch.__version__)'), load average at end $(cut -d' ' -f1-3 /proc/loadavg), $(date -u +%Y-%m-%dT%H:%MZ))
EOF
cat "$RES/table.md"
echo "plot: $RES/accuracy.png"
