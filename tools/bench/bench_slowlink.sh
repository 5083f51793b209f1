#!/bin/bash
# bench_slowlink.sh - issue 46: a shuffled first pass over a slow link. An
# unmodified torchvision ImageFolder trainer (bench_train.py's two-conv CNN,
# SGD, batch 128, 2 loader workers, shuffled, the whole test split every 50
# steps) on Fashion-MNIST's 60 train shards behind a 2.5 Mbit cap, read by
#   exact  an echofs exact mount (default options but the index);
#   wds    a webdataset-equivalent reader (slowlink_train.py --shards: shard
#          shuffle, HTTP streaming, a 1,000-sample shuffle buffer, split
#          across the loader workers by shard) through the same cap;
#   echo4  an echofs mount with echo=4 (its default mode).
#   tools/bench/bench_slowlink.sh [--rate 2500kbit] [--repeats 3]
#       [--readers "exact wds echo4"] [--budget 700] [--total 7200]
#       [--targets 0.80,0.83,0.85,0.87] [--seed 1] [--first-repeat 1]
#       [--append] [--out /tmp/echofs-bench]
# nginx and the echofs daemons run in a network namespace whose loopback tc
# caps to --rate (tbf, burst 128kb); the echofs trainers run outside (the
# FUSE mount is shared), the wds trainer inside (its HTTP goes through the
# cap). Each mount gets a fresh cache_dir. Repeat k runs the readers in the
# order rotated k-1 places (the order turns) with seed SEED+k-1. A run
# stops at the last target or after --budget s; --total bounds the script
# (a run that would not fit is skipped). Bytes through the cap are the tc
# qdisc's Sent counter (both directions: bodies, headers, ACKs).
# Results in OUT/slowlink/: runs.jsonl (a summary per run), evals.jsonl,
# trainer.log, table.md (medians and every run).
set -euo pipefail
cd "$(dirname "$0")/../.."

RATE=2500kbit
REPEATS=3
READERS="exact wds echo4"
BUDGET=700
TOTAL=7200
TARGETS=0.80,0.83,0.85,0.87
SEED=1
FIRST=1
APPEND=0
OUT=/tmp/echofs-bench
CMDLINE="tools/bench/bench_slowlink.sh $*"
# shellcheck source=tools/bench/common.sh
. tools/bench/common.sh
bench_args 2,24 --rate=RATE --repeats=REPEATS --readers=READERS \
	--budget=BUDGET --total=TOTAL --targets=TARGETS --seed=SEED \
	--first-repeat=FIRST --append=APPEND=1 --out=OUT -- "$@"

mkdir -p "$OUT/slowlink"
OUT=$(cd "$OUT" && pwd)
DATA=$OUT/data
RES=$OUT/slowlink
T_END=$(($(date +%s) + TOTAL))
# shellcheck source=tools/bench/bench_netns.sh
. tools/bench/bench_netns.sh
netns_bench_start slowlink "$TOTAL"
$PY -c 'import torch, torchvision' 2>/dev/null || {
	echo "bench_slowlink.sh: needs python3-torch python3-torchvision (apt-get install)" >&2
	exit 2
}
bench_snapshot

pack() { # split count: the layout bench_train.sh packs (and shares)
	[ -f "$DATA/shards/$1-$(printf %06d $(($2 - 1))).tar" ] && [ -d "$DATA/tree-$1/9" ] && return 0
	blog "packing Fashion-MNIST $1 into $DATA"
	mkdir -p "$DATA"
	"$B"/tools/echofs-pack --split "$1" --out "$DATA/shards" --tree "$DATA/tree-$1" >/dev/null
}

cap_bytes() { netns_run tc -s qdisc show dev lo | awk '/Sent/ {print $2; exit}'; }

# run READER: one training run; its summary, with the bytes through the cap,
# goes to runs.jsonl
run() {
	local r=$1 label args=() where=host b0 out
	local opts="index=$BTMP/train.idx"
	case $r in
	exact) label=exact ;;
	echo4) label=echo=4 opts="$opts,echo=4,seed=$((SEED + REP - 1))" ;;
	wds) label=wds-equivalent where=ns ;;
	*) blog "unknown reader $r"; return 0 ;;
	esac
	if (($(date +%s) + BUDGET + 120 > T_END)); then
		blog "repeat $REP $label: skipped (--total $TOTAL s would be exceeded)"
		return 0
	fi
	rm -rf "$BTMP/cache"
	if [ "$where" = ns ]; then
		args=(--shards "${URLS[@]}")
	else
		bench_mount NS "$BTMP/cache" "$BTMP/train" "$NS_BASE/shards/train-{000000..000059}.tar" "$opts"
		args=(--train "$BTMP/train")
	fi
	blog "repeat $REP $label: start"
	b0=$(cap_bytes)
	local cmd=(timeout $((BUDGET + 300)) "$PY" tools/bench/slowlink_train.py "${args[@]}"
		--test "$DATA/tree-test" --test-cache "$DATA/test-gray28.pt" --label "$label"
		--repeat "$REP" --seed "$((SEED + REP - 1))" --log "$RES/evals.jsonl"
		--targets "$TARGETS" --budget "$BUDGET")
	if [ "$where" = ns ]; then
		out=$(netns_run "${cmd[@]}" 2>>"$RES/trainer.log") || blog "$label: trainer failed (see $RES/trainer.log)"
	else
		out=$("${cmd[@]}" 2>>"$RES/trainer.log") || blog "$label: trainer failed (see $RES/trainer.log)"
		bench_unmount "$BTMP/train"
	fi
	rm -rf "$BTMP/cache"
	[ -n "$out" ] && $PY -c 'import json, sys
r = json.loads(sys.argv[1]); r["cap_bytes"] = int(sys.argv[2]) - int(sys.argv[3])
print(json.dumps(r))' "$out" "$(cap_bytes)" "$b0" >>"$RES/runs.jsonl"
	blog "repeat $REP $label: ${out:-no result}"
}

pack train 60
pack test 10
if [ "$APPEND" = 0 ]; then
	: >"$RES/evals.jsonl"
	: >"$RES/runs.jsonl"
	: >"$RES/trainer.log"
fi
# The test split is read once into memory from the local tree (the same
# JPEGs the shards hold), cached as tensors in DATA for later runs.
$PY -c 'import sys; sys.path.insert(0, "tools/bench")
import bench_train; bench_train.load_test(sys.argv[1], sys.argv[2])' \
	"$DATA/tree-test" "$DATA/test-gray28.pt"

netns_start "$RATE"
netns_nginx "$DATA"
"$B"/tools/echofs-index --base-url "$NS_BASE/shards/" -o "$BTMP/train.idx" \
	"$DATA"/shards/train-*.tar >/dev/null
URLS=()
for ((i = 0; i < 60; i++)); do URLS+=("$NS_BASE/shards/train-$(printf %06d $i).tar"); done
read -ra ORDER <<<"$READERS"
for ((REP = FIRST; REP < FIRST + REPEATS; REP++)); do
	n=${#ORDER[@]}
	for ((j = 0; j < n; j++)); do
		run "${ORDER[$(((j + REP - 1) % n))]}"
	done
done

DATASET_BYTES=$(cat "$DATA"/shards/train-*.tar | wc -c)
$PY tools/bench/slowlink_report.py --runs "$RES/runs.jsonl" \
	--dataset-bytes "$DATASET_BYTES" >"$RES/table.md"
cat >>"$RES/table.md" <<EOF

- cap: \`unshare -n\`; inside: \`ip link set lo up mtu 9000; tc qdisc add dev lo root tbf rate $RATE burst 128kb latency 2000ms\`; nginx and the echofs daemons inside; train shards $DATASET_BYTES bytes ($((DATASET_BYTES * 8 / 2500000)) s at 2.5 Mbit)
- exact: \`echofs -o cache_dir=FRESH,index=IDX '$NS_BASE/shards/train-{000000..000059}.tar' MNT\`; echo=4: the same with \`echo=4,seed=$SEED+repeat-1\`
- wds-equivalent: \`slowlink_train.py --shards URL...\` run inside the namespace (shard shuffle, split by worker, HTTP streaming, shuffle buffer 1,000 with initial 100, PIL decode)
- trainer: \`/usr/bin/python3 tools/bench/slowlink_train.py --test TREE --targets $TARGETS --budget $BUDGET\` (ImageFolder + DataLoader(shuffle, batch 128, num_workers=2), Grayscale/ToTensor/Normalize, 2 strided convs + linear, SGD lr 0.05 momentum 0.9, torch.set_num_threads(1)); the whole test split (10,000) every 50 steps; times from before the dataset is built
- command: \`$CMDLINE\` ($ECHOFS_INFO; $(git rev-parse --short HEAD 2>/dev/null); $(nproc) cores, torch $($PY -c 'import torch; print(torch.__version__)'), load average at end $(cut -d' ' -f1-3 /proc/loadavg), $(date -u +%Y-%m-%dT%H:%MZ))
EOF
cat "$RES/table.md"
