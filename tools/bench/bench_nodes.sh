#!/bin/bash
# bench_nodes.sh - many nodes from one origin (issue 12): W simulated nodes,
# each a network namespace with its own capped link to an origin namespace.
#   tools/bench/bench_nodes.sh [--worlds "1 2 4"] [--modes "full part"]
#        [--runs 3] [--shards 24] [--rate 24mbit] [--read-threads 4]
#        [--train-worlds "1 2"] [--train-rate 5mbit] [--train-runs 1]
#        [--echo 4] [--target 0.87] [--budget 300] [--cache-size 32M]
#        [--no-train] [--seed 1] [--out /tmp/echofs-bench] [--total 3600]
# Topology: namespace ecn-PID-o holds nginx (access log on) on a bridge
# 10.211.0.1/24; node i is namespace ecn-PID-nI with a veth into that bridge
# (10.211.0.10+i) whose origin side has `tc tbf rate RATE`: each node's
# download link is capped, the origin itself is not. Each node's echofs
# daemon runs in its namespace (nsenter --net, so its FUSE mount is visible
# here); readers and trainers run outside, like the training process on a
# node reading its local mount.
# Part 1, one pass (the first --shards train shards, exact mounts, fresh
# caches): for each W and mode, W readers (nodes_reader.py, --read-threads
# each) start together. mode full: every mount shows the whole dataset and
# rank r reads DistributedSampler's share (the baseline); mode part: mounts
# with -o rank=r,world=W, each reads its whole tree shuffled (skipped, with a
# note, when this echofs has no rank option). Measured: origin bytes (sum of
# nginx $body_bytes_sent) / dataset bytes, and aggregate samples/s (distinct
# samples read by all nodes / wall time of the slowest). Medians over --runs.
# Part 2 (unless --no-train): dist_train.py over W echo mounts (echo=E, all
# 60 train shards, cache_size so later passes fetch again, links at
# --train-rate): time to --target test accuracy, W in --train-worlds.
# Results in OUT/nodes/: pass.jsonl, train.jsonl, evals.jsonl, table.md.
set -euo pipefail
cd "$(dirname "$0")/../.."

WORLDS="1 2 4"
MODES="full part"
RUNS=3
SHARDS=24
RATE=24mbit
READ_THREADS=4
TRAIN_WORLDS="1 2"
TRAIN_RATE=5mbit
TRAIN_RUNS=1
ECHO=4
TARGET=0.87
BUDGET=300
CACHE_SIZE=32M
TRAIN=1
SEED=1
OUT=/tmp/echofs-bench
TOTAL=3600
CMDLINE="tools/bench/bench_nodes.sh $*"
# shellcheck source=tools/bench/common.sh
. tools/bench/common.sh
bench_args 2,27 --worlds=WORLDS --modes=MODES --runs=RUNS --shards=SHARDS \
	--rate=RATE --read-threads=READ_THREADS --train-worlds=TRAIN_WORLDS \
	--train-rate=TRAIN_RATE --train-runs=TRAIN_RUNS --echo=ECHO \
	--target=TARGET --budget=BUDGET --cache-size=CACHE_SIZE \
	--no-train=TRAIN=0 --seed=SEED --out=OUT --total=TOTAL -- "$@"

mkdir -p "$OUT/nodes"
OUT=$(cd "$OUT" && pwd)
DATA=$OUT/data
RES=$OUT/nodes
BTMP=$(mktemp -d /tmp/echofs-bench-nodes.XXXXXX)
NSP=ecn-$$
ORIGIN=$NSP-o
ORIGIN_IP=10.211.0.1
PORT=8080
BASE=http://$ORIGIN_IP:$PORT
NODES=() # namespaces made so far
NGINX_PID=
# shellcheck source=tools/bench/bench_netns.sh
. tools/bench/bench_netns.sh

[ "$(id -u)" = 0 ] || { echo "bench_nodes.sh: needs root (ip netns, tc, FUSE)" >&2; exit 2; }
[ -x "$B/echofs" ] || { echo "bench_nodes.sh: build $B/echofs first (tools/dev/setup.sh)" >&2; exit 2; }
if [ "$TRAIN" = 1 ] && ! $PY -c 'import torch, torchvision' 2>/dev/null; then
	echo "bench_nodes.sh: part 2 needs python3-torch python3-torchvision (or --no-train)" >&2
	exit 2
fi

nodes_cleanup() {
	set +e
	local ns p
	[ -n "$WATCHDOG_PID" ] && kill "$WATCHDOG_PID" 2>/dev/null
	for p in "${BENCH_MOUNTS[@]}"; do bench_unmount "$p"; done
	BENCH_MOUNTS=()
	[ -n "$NGINX_PID" ] && kill "$NGINX_PID" 2>/dev/null && wait "$NGINX_PID" 2>/dev/null
	for ns in "${NODES[@]}" "$ORIGIN"; do # anything still inside was started by us
		[ -e "/run/netns/$ns" ] || continue
		for p in $(ip netns pids "$ns" 2>/dev/null); do kill -9 "$p" 2>/dev/null; done
		ip netns del "$ns" 2>/dev/null
	done
	rm -rf "$BTMP"
}
trap nodes_cleanup EXIT
trap 'exit 130' INT TERM
bench_watchdog "$TOTAL"

in_ns() { local ns=$1; shift; nsenter --net="/run/netns/$ns" "$@"; }

# origin_start: the origin namespace, its bridge and nginx (access log on)
origin_start() {
	ip netns add "$ORIGIN"
	in_ns "$ORIGIN" ip link set lo up
	in_ns "$ORIGIN" ip link add ecnbr type bridge
	in_ns "$ORIGIN" ip addr add "$ORIGIN_IP/24" dev ecnbr
	in_ns "$ORIGIN" ip link set ecnbr up
	mkdir -p "$BTMP/nginx/tmp"
	cat >"$BTMP/nginx/nginx.conf" <<EOF
worker_processes 1;
daemon off;
user root;
pid $BTMP/nginx/nginx.pid;
error_log $BTMP/nginx/error.log warn;
events { worker_connections 1024; }
http {
    log_format bytes '\$remote_addr \$status \$body_bytes_sent \$request_uri';
    access_log $BTMP/nginx/access.log bytes;
    client_body_temp_path $BTMP/nginx/tmp;
    default_type application/octet-stream;
    sendfile on;
    keepalive_requests 1000000;
    keepalive_timeout 300s;
    server { listen $ORIGIN_IP:$PORT; root $DATA; }
}
EOF
	in_ns "$ORIGIN" /usr/sbin/nginx -c "$BTMP/nginx/nginx.conf" &
	NGINX_PID=$!
	local i
	for ((i = 0; i < 50; i++)); do
		in_ns "$ORIGIN" curl -sf -o /dev/null "$BASE/shards/train-000000.tar" -r 0-0 && return 0
		sleep 0.1
	done
	echo "bench_nodes.sh: nginx in $ORIGIN did not come up" >&2
	return 1
}

# node_add I: namespace NSP-nI, veth into the origin bridge, capped there
node_add() {
	local i=$1 ns=$NSP-n$1
	ip netns add "$ns"
	NODES+=("$ns")
	ip link add ecno"$i" netns "$ORIGIN" type veth peer name ecnn"$i" netns "$ns"
	in_ns "$ORIGIN" ip link set ecno"$i" master ecnbr up
	in_ns "$ns" ip link set lo up
	in_ns "$ns" ip addr add "10.211.0.$((10 + i))/24" dev ecnn"$i"
	in_ns "$ns" ip link set ecnn"$i" up
}

links_cap() { # rate: the origin->node direction of every node link
	local i
	for ((i = 0; i < ${#NODES[@]}; i++)); do
		in_ns "$ORIGIN" tc qdisc replace dev ecno"$i" root tbf rate "$1" burst 128kb latency 2000ms
	done
	blog "node links capped: $(in_ns "$ORIGIN" tc qdisc show dev ecno0 | head -1)"
}

# node_mount I MNT SOURCE OPTS: echofs daemon in node I's namespace, fresh cache
node_mount() {
	local i=$1 mnt=$2 src=$3 opts=$4
	rm -rf "$mnt.cache"
	mkdir -p "$mnt"
	BENCH_MOUNTS+=("$mnt")
	in_ns "$NSP-n$i" timeout 120 "$ECHOFS" \
		-o "cache_dir=$mnt.cache,log_file=$BTMP/echofs-n$i.log${opts:+,$opts}" "$src" "$mnt"
}

unmount_all() {
	local m
	for m in "${BENCH_MOUNTS[@]}"; do bench_unmount "$m"; rm -rf "$m.cache"; done
	BENCH_MOUNTS=()
}

log_mark() { wc -l <"$BTMP/nginx/access.log" 2>/dev/null || echo 0; }
log_bytes() { # from-line: body bytes served since then
	tail -n +"$(($1 + 1))" "$BTMP/nginx/access.log" | awk '{s += $3} END {print s + 0}'
}

HAVE_RANK=0
ECHOFS_HELP=$("$B/echofs" --help 2>&1 || true) # not a pipe into grep -q: SIGPIPE + pipefail
[[ $ECHOFS_HELP == *rank=* ]] && HAVE_RANK=1

# pass_case W MODE RUN: one pass over the first SHARDS shards by W nodes at once
pass_case() {
	local w=$1 mode=$2 run=$3 i opts mark start part=() pids=() src
	src="$BASE/shards/train-{000000..$(printf %06d $((SHARDS - 1)))}.tar"
	[ "$mode" = part ] && part=(--partitioned)
	mark=$(log_mark)
	for ((i = 0; i < w; i++)); do
		opts="index=$BTMP/pass.idx,seed=$SEED"
		[ "$mode" = part ] && opts+=",rank=$i,world=$w"
		node_mount "$i" "$BTMP/m$i" "$src" "$opts"
	done
	start=$(($(date +%s) + 2 + w)) # every reader has listed its tree by then
	for ((i = 0; i < w; i++)); do
		$PY tools/bench/nodes_reader.py "$BTMP/m$i" --rank "$i" --world "$w" "${part[@]}" \
			--threads "$READ_THREADS" --seed "$((SEED + run))" --start-at "$start" >"$BTMP/r$i.json" &
		pids+=($!)
	done
	for i in "${pids[@]}"; do wait "$i" || blog "reader $i failed (see the errors column)"; done
	sleep 0.5
	$PY - "$w" "$mode" "$run" "$(log_bytes "$mark")" "$DATASET_BYTES" "$BTMP" <<'EOF' | tee -a "$RES/pass.jsonl"
import json, sys
w, mode, run, origin, dataset, tmp = sys.argv[1:]
w = int(w)
nodes = [json.loads(open("%s/r%d.json" % (tmp, i)).read()) for i in range(w)]
wall = max(n["seconds"] for n in nodes)
samples = sum(n["samples"] for n in nodes)
print(json.dumps({"world": w, "mode": mode, "run": int(run), "origin_bytes": int(origin),
                  "dataset_bytes": int(dataset), "wall_s": wall, "samples": samples,
                  "agg_samples_per_s": round(samples / wall, 1),
                  "tree_samples": [n["tree_samples"] for n in nodes],
                  "per_node_samples_per_s": [n["samples_per_s"] for n in nodes],
                  "errors": sum(n["errors"] for n in nodes)}))
EOF
	unmount_all
}

# train_case W RUN: dist_train.py over W echo mounts
train_case() {
	local w=$1 run=$2 i opts mark mounts="" part=() out
	local src="$BASE/shards/train-{000000..000059}.tar"
	[ "$HAVE_RANK" = 1 ] && part=(--partitioned)
	mark=$(log_mark)
	for ((i = 0; i < w; i++)); do
		opts="index=$BTMP/train.idx,cache_size=$CACHE_SIZE,echo=$ECHO,seed=$((SEED + run - 1))"
		[ "$HAVE_RANK" = 1 ] && opts+=",rank=$i,world=$w"
		node_mount "$i" "$BTMP/t$i" "$src" "$opts"
		mounts+="${mounts:+,}$BTMP/t$i"
	done
	out=$(timeout $((BUDGET + 300)) $PY tools/bench/dist_train.py --mounts "$mounts" "${part[@]}" \
		--test "$DATA/tree-test" --test-cache "$RES/test.pt" --label "W=$w E=$ECHO" \
		--log "$RES/evals.jsonl" --target "$TARGET" --budget "$BUDGET" --repeat "$run" \
		--seed "$((SEED + run - 1))" --port "$((29500 + $$ % 400))" 2>>"$RES/trainer.log") ||
		blog "W=$w: dist_train.py failed (see $RES/trainer.log)"
	sleep 0.5
	if [ -n "$out" ]; then
		$PY -c 'import json, sys; d = json.loads(sys.argv[1]); d["origin_bytes"] = int(sys.argv[2]); d["run"] = int(sys.argv[3]); print(json.dumps(d))' \
			"$out" "$(log_bytes "$mark")" "$run" | tee -a "$RES/train.jsonl"
	fi
	unmount_all
}

pack() { # split count
	[ -f "$DATA/shards/$1-$(printf %06d $(($2 - 1))).tar" ] && [ -d "$DATA/tree-$1/9" ] && return 0
	blog "packing Fashion-MNIST $1 into $DATA"
	mkdir -p "$DATA"
	"$B"/tools/echofs-pack --split "$1" --out "$DATA/shards" --tree "$DATA/tree-$1" >/dev/null
}

bench_snapshot
pack train 60
pack test 10
MAXW=1
for w in $WORLDS $TRAIN_WORLDS; do [ "$w" -gt "$MAXW" ] && MAXW=$w; done
origin_start
for ((i = 0; i < MAXW; i++)); do node_add "$i"; done
PASS_SHARDS=()
for ((i = 0; i < SHARDS; i++)); do PASS_SHARDS+=("$DATA/shards/train-$(printf %06d "$i").tar"); done
DATASET_BYTES=$(stat -c %s "${PASS_SHARDS[@]}" | awk '{s += $1} END {print s}')
"$B"/tools/echofs-index --base-url "$BASE/shards/" -o "$BTMP/pass.idx" "${PASS_SHARDS[@]}" >/dev/null
"$B"/tools/echofs-index --base-url "$BASE/shards/" -o "$BTMP/train.idx" "$DATA"/shards/train-*.tar >/dev/null
[ "$HAVE_RANK" = 1 ] || blog "this echofs has no -o rank=: mode part skipped, training unpartitioned"
: >"$RES/pass.jsonl"
: >"$RES/train.jsonl"
: >"$RES/evals.jsonl"
: >"$RES/trainer.log"

links_cap "$RATE"
for ((run = 1; run <= RUNS; run++)); do
	for w in $WORLDS; do
		for mode in $MODES; do
			[ "$mode" = part ] && [ "$HAVE_RANK" = 0 ] && continue
			blog "pass: W=$w $mode run $run"
			pass_case "$w" "$mode" "$run"
		done
	done
done
if [ "$TRAIN" = 1 ]; then
	# the test split's tensors first, so no run's pools fill while it is read
	$PY -c 'import sys; sys.path.insert(0, "tools/bench"); import bench_train; bench_train.load_test(*sys.argv[1:])' \
		"$DATA/tree-test" "$RES/test.pt"
	links_cap "$TRAIN_RATE"
	for ((run = 1; run <= TRAIN_RUNS; run++)); do
		for w in $TRAIN_WORLDS; do
			blog "train: W=$w echo=$ECHO run $run"
			train_case "$w" "$run"
		done
	done
fi

{
	$PY tools/bench/nodes_report.py --pass "$RES/pass.jsonl" --train "$RES/train.jsonl" --target "$TARGET"
	cat <<EOF

- nodes: one network namespace each (\`ip netns add\`), a veth into a bridge in the origin namespace; on the origin side of each node's veth \`tc qdisc replace dev ecnoI root tbf rate R burst 128kb latency 2000ms\` (R = $RATE for the pass, $TRAIN_RATE for training); nginx (one worker, sendfile) in the origin namespace; each node's echofs daemon in its namespace (\`nsenter --net\`), readers and trainers outside
- pass: first $SHARDS train shards ($DATASET_BYTES bytes, exact mounts, \`-o cache_dir=FRESH,index=IDX,seed=${SEED}[,rank=r,world=W]\`), $READ_THREADS reader threads per node (\`tools/bench/nodes_reader.py\`); origin bytes = sum of nginx \`\$body_bytes_sent\` from the first mount to the last read; medians of $RUNS runs
- training: \`tools/bench/dist_train.py\` (gloo, CPU, DDP, batch 64 per rank, Adam 3e-3, 1 torch thread and 2 DataLoader workers per rank) over W echo mounts \`-o index=IDX,cache_size=$CACHE_SIZE,echo=$ECHO,seed=S$([ "$HAVE_RANK" = 1 ] && echo ',rank=r,world=W')\` of all 60 train shards; $([ "$HAVE_RANK" = 1 ] && echo 'RandomSampler per rank' || echo 'DistributedSampler (no rank option in this build)'); test split = the local packed tree
- command: \`$CMDLINE\` ($ECHOFS_INFO; $(nproc) cores, load average at end $(cut -d' ' -f1-3 /proc/loadavg), $(date -u +%Y-%m-%dT%H:%MZ))
EOF
} >"$RES/table.md"
cat "$RES/table.md"
