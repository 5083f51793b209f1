#!/bin/bash
# bench_prep_e2e.sh - trainer-side CPU seconds per 1,000 images: a torchvision
# ImageFolder reading echofs's preprocessed PPMs (-o size=256,crop=224,
# format=ppm) versus reading the original JPEGs from local disk and doing
# Resize(256) + CenterCrop(224) in the trainer; plus the echofs daemon's own
# CPU seconds for producing the PPMs, so the total is honest.
#   tools/bench/bench_prep_e2e.sh [--count N] [--runs R] [--per-shard S]
# --count: photos (default 2000, ~500x375 colour JPEGs from Fashion-MNIST by
# tools/bench/echofs_photos.py, 10 classes = the articles' labels); --runs: trainer
# runs per case, median reported (default 3); --per-shard: samples per tar
# shard (default 500). BUILD_DIR picks the build (default build).
# Each trainer run is a fresh /usr/bin/python3 (one torch thread,
# DataLoader num_workers=0, batch 32, one full pass); its CPU seconds are
# getrusage(SELF + CHILDREN) user + sys from ImageFolder construction to the
# end of the pass. Both trees are read once before the trainer runs, so the
# mount and the page cache are warm and only the trainer is measured; the
# runs alternate ppm, jpeg, ppm-local (the PPMs copied to local disk: the
# trainer's cost without FUSE), ... The daemon's CPU (utime + stime of
# /proc/PID/stat) is measured over one cold read of a fresh mount whose disk
# cache already holds the shards, for format=ppm and, as a baseline, for
# format=same (serving the JPEG bytes unchanged). Prints a markdown table.
set -euo pipefail
cd "$(dirname "$0")/../.."

COUNT=2000
RUNS=3
PER_SHARD=500
CMDLINE="tools/bench/bench_prep_e2e.sh $*"
# shellcheck source=tools/bench/common.sh
. tools/bench/common.sh
bench_args 2,21 --count=COUNT --runs=RUNS --per-shard=PER_SHARD -- "$@"

HELPER=tools/bench/bench_prep_e2e.py
bench_start prep

daemon_ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }

# cold_read NAME OPTIONS -> daemon CPU seconds over one read of every file
cold_read() {
	mount_echofs "$1" "$2"
	local t0 t1 n
	t0=$(daemon_ticks "$DPID")
	n=$($PY $HELPER readall "$MNT")
	t1=$(daemon_ticks "$DPID")
	[ "$n" = "$COUNT" ] || { log "$1: read $n files, expected $COUNT"; exit 1; }
	unmount "$MNT" "$DPID"
	awk -v a="$t0" -v b="$t1" -v hz="$(getconf CLK_TCK)" 'BEGIN {printf "%.2f", (b - a) / hz}'
}

# 1. photos, tree, shards, index, nginx
log "generating $COUNT photos"
$PY tools/bench/echofs_photos.py --out "$TMP/photos" --count "$COUNT" >&2
NSHARDS=$($PY $HELPER pack --photos "$TMP/photos" --tree "$TMP/tree" \
	--shards "$TMP/www" --per-shard "$PER_SHARD")
rm -rf "$TMP/photos"
bench_nginx "$TMP/www"
"$B"/tools/echofs-index --base-url "$BASE/" -o "$TMP/www/photos.echofs-index" \
	"$TMP"/www/photos-*.tar >&2
SOURCE="$BASE/photos-{000000..$(printf %06d $((NSHARDS - 1)))}.tar"
JPEG_BYTES=$(du -sb "$TMP/tree" | cut -f1)
log "$NSHARDS shards at $SOURCE, $((JPEG_BYTES / COUNT)) bytes per JPEG"

# 2. mount A, warm it and the local tree
mount_echofs a "size=256,crop=224,format=ppm"
MNT_A=$MNT
PID_A=$DPID
n=$($PY $HELPER readall "$MNT_A")
[ "$n" = "$COUNT" ] || { log "mount A has $n files, expected $COUNT"; exit 1; }
$PY $HELPER readall "$TMP/tree" >/dev/null
CMP=$($PY $HELPER compare "$MNT_A" "$TMP/tree" --count 100)
# the same PPMs copied to local disk: the trainer's cost without FUSE
cp -r "$MNT_A" "$TMP/ppmtree"
$PY $HELPER readall "$TMP/ppmtree" >/dev/null
log "pixel check: $CMP"

# 3. trainer runs, alternating
PPM_CPU=() PPM_WALL=() JPG_CPU=() JPG_WALL=() LOC_CPU=() LOC_WALL=()
for ((i = 1; i <= RUNS; i++)); do
	out=$($PY $HELPER train "$MNT_A" --mode ppm)
	log "run $i ppm:  $out"
	[ "$(json "$out" images)" = "$COUNT" ] || { log "ppm pass saw the wrong count"; exit 1; }
	PPM_CPU+=("$(json "$out" cpu_s)") PPM_WALL+=("$(json "$out" wall_s)")
	out=$($PY $HELPER train "$TMP/tree" --mode jpeg)
	log "run $i jpeg: $out"
	[ "$(json "$out" images)" = "$COUNT" ] || { log "jpeg pass saw the wrong count"; exit 1; }
	JPG_CPU+=("$(json "$out" cpu_s)") JPG_WALL+=("$(json "$out" wall_s)")
	out=$($PY $HELPER train "$TMP/ppmtree" --mode ppm)
	log "run $i ppm, local copy: $out"
	LOC_CPU+=("$(json "$out" cpu_s)") LOC_WALL+=("$(json "$out" wall_s)")
done
IMPORT_CPU=$(json "$out" import_cpu_s)
unmount "$MNT_A" "$PID_A"

# daemon cost: fresh mounts over the warm disk cache, one cold read each
DPPM=$(cold_read b "size=256,crop=224,format=ppm")
log "daemon CPU, cold read format=ppm: $DPPM s"
DSAME=$(cold_read c "format=same")
log "daemon CPU, cold read format=same: $DSAME s"

# 4. table
$PY - "$COUNT" "$RUNS" "$NSHARDS" "$((JPEG_BYTES / COUNT))" "$DPPM" "$DSAME" \
	"$IMPORT_CPU" "$CMDLINE" "$(nproc)" "$(cut -d' ' -f1-3 /proc/loadavg)" "$CMP" \
	"${PPM_CPU[*]}" "${PPM_WALL[*]}" "${JPG_CPU[*]}" "${JPG_WALL[*]}" \
	"${LOC_CPU[*]}" "${LOC_WALL[*]}" <<'EOF'
import json, statistics, sys
(count, runs, nshards, jbytes, dppm, dsame, imp, cmd, ncpu, load, cmp,
 pc, pw, jc, jw, lc, lw) = sys.argv[1:]
count = int(count)
k = 1000 / count
pc, pw, jc, jw, lc, lw = ([float(v) for v in s.split()]
                          for s in (pc, pw, jc, jw, lc, lw))
m = {n: statistics.median(v) * k for n, v in
     (("pc", pc), ("pw", pw), ("jc", jc), ("jw", jw), ("lc", lc), ("lw", lw))}
dppm, dsame = float(dppm) * k, float(dsame) * k
runs_s = lambda v: " / ".join("%.2f" % (x * k) for x in v)
c = json.loads(cmp)
print(f"### Preprocessing end to end: {count} photos (~500x375, {jbytes} B JPEG), "
      f"{nshards} shards, median of {runs} trainer runs\n")
print("| what | CPU s / 1000 images | wall s / 1000 images | runs (CPU s / 1000) |")
print("| --- | ---: | ---: | --- |")
print(f"| trainer: ImageFolder(echofs `size=256,crop=224,format=ppm`), ToTensor | "
      f"{m['pc']:.2f} | {m['pw']:.2f} | {runs_s(pc)} |")
print(f"| trainer: ImageFolder(local JPEG tree), Resize(256)+CenterCrop(224)+ToTensor | "
      f"{m['jc']:.2f} | {m['jw']:.2f} | {runs_s(jc)} |")
print(f"| (reference) trainer: ImageFolder(local copy of the same PPMs), ToTensor | "
      f"{m['lc']:.2f} | {m['lw']:.2f} | {runs_s(lc)} |")
print(f"| **trainer CPU ratio jpeg / ppm** | **{m['jc'] / m['pc']:.1f}x** | "
      f"{m['jw'] / m['pw']:.1f}x | |")
print(f"| echofs daemon: cold read, `format=ppm` (decode+resize+crop+PPM, all threads) | "
      f"{dppm:.2f} | | 1 run |")
print(f"| echofs daemon: cold read, `format=same` (baseline: serve JPEG bytes) | "
      f"{dsame:.2f} | | 1 run |")
print(f"| total CPU, ppm path (trainer + daemon) vs jpeg path (trainer) | "
      f"{m['pc'] + dppm:.2f} vs {m['jc']:.2f} | | |")
print()
print(f"Command: `{cmd.strip()}`. Machine: {ncpu} cores, load average at the end "
      f"{load}. Trainer: fresh /usr/bin/python3 per run, torch.set_num_threads(1), "
      f"DataLoader(num_workers=0, batch_size=32), one pass; CPU = getrusage "
      f"self+children user+sys from ImageFolder() to the end of the pass "
      f"(import torch, {float(imp):.2f} CPU s per process, excluded). Both trees "
      f"warm (read once before). Daemon CPU = /proc/PID/stat utime+stime over "
      f"one read of every file of a fresh mount, shards already in its disk "
      f"cache. Pixel check over {c['compared']} images: mean |echofs PPM - "
      f"torchvision Resize/CenterCrop| = {c['mean_abs_diff']} of 255 "
      f"(worst image {c['max_image_mean_abs_diff']}).")
EOF
