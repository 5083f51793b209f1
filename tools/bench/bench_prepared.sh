#!/bin/bash
# bench_prepared.sh - the prepared-sample tier (issue 30) on a decode-bound
# exact mount, side by side in one run, over photo-sized JPEGs on a warm
# disk cache, -o size=256,crop=224,format=ppm, 2 shuffled readers:
#   R1      exact, prepared=0, first pass (decode + serve)
#   R2      the same mount's second pass (the kernel's page cache: serve)
#   fill    exact with the tier on, an empty tier: first pass (writes it;
#           goal: within 5% of R1)
#   tier    exact with the tier filled, a new mount after dropping the page
#           cache (echo 3 > /proc/sys/vm/drop_caches, root): one pass from
#           the tier (goals: >= 2.5 R1 and >= 0.8 R2)
#   afill   an augmenting mount (augment=1,flip=1,echo=1,echo_mode=adaptive:
#           an echo mount that echoes nothing): first pass,
#           filling the tier with whole resized images (an exact mount
#           keeps only its centre crops, which a random crop cannot use)
#   atier   the same, a new mount, page cache dropped: one pass from that
#           tier (P, the prepared rate of the augmenting recipe)
#   e4      echo=4 fixed, augment=1,flip=1 over that tier, 3 passes, the
#           last against Amdahl's ceiling from P:
#           C = 1 / (1/R2 + (1/P - 1/R2)/4) (goal: >= 0.9 C)
# and whether the tier's output is byte-identical to a mount without it
# (every file of one class hashed through both).
# Then the tier's candidate forms (issue 30: "its form, chosen by
# measurement"): the filled tier's entries of each kind (cut: the exact
# mount's centre crops; whole: the augmenting mount's), compressed each on
# its own (-B: the entry's size) by zstd -1, zstd -3 and lz4 -1
# in their benchmark modes (-b, one core): bytes per sample against the
# source JPEG, and compress / decompress microseconds per sample (the cost
# a fill and a serve would add). Needs the zstd and lz4 programs (else
# skipped, and said).
#   tools/bench/bench_prepared.sh [--count N] [--repeats R]
#       [--photo-size WxH] [--data DIR]
# --count: photos (default 2000); --repeats: default 3 (cases rotate
# within a repeat, medians reported); --photo-size: default 500x375;
# --data DIR: keep the packed shards for later runs. Needs root (drops the
# page cache). Say in any report whether the machine was shared.
set -euo pipefail
cd "$(dirname "$0")/../.."

COUNT=2000
REPEATS=3
SIZE=500x375
DATA=
CMDLINE="tools/bench/bench_prepared.sh $*"
# shellcheck source=tools/bench/common.sh
. tools/bench/common.sh
bench_args 2,20 --count=COUNT --repeats=REPEATS --photo-size=SIZE \
	--data=DATA -- "$@"
[[ $SIZE =~ ^([0-9]+)x([0-9]+)$ ]] ||
	{ echo "bench_prepared.sh: --photo-size WxH" >&2; exit 2; }
W=${BASH_REMATCH[1]} H=${BASH_REMATCH[2]}
[ -w /proc/sys/vm/drop_caches ] ||
	{ echo "bench_prepared.sh: needs root (drops the page cache)" >&2; exit 2; }

READER=tools/bench/bench_echo_ceiling.py
bench_start prepared
RESULTS=$TMP/results.jsonl

bench_photos "$COUNT" "$W" "$H" "$DATA"

mount_echofs warm "format=same,prepared=0"
$PY $READER read "$MNT" --passes 1 >/dev/null
unmount "$MNT" "$DPID"
log "disk cache warm: $(du -sh "$TMP/cache" | cut -f1)"

PREP="size=256,crop=224,format=ppm"
drop() { sync; echo 3 >/proc/sys/vm/drop_caches; }
# run REPEAT CASE OPTS PASSES: mount, read, one JSON line
run() {
	mount_echofs "$2" "$3"
	out=$($PY $READER read "$MNT" --passes "$4" --seed "$RANDOM" --pid "$DPID") ||
		log "reader reported errors ($2)"
	unmount "$MNT" "$DPID"
	record_passes "$1" "$2" "$out"
}
# The tier's first pass and its reads: the tier emptied first.
# The tier of the repeat before is moved aside, not removed: ext4 skips
# inodes freed in the last minutes when it makes a file (recently_deleted),
# so a fill after deleting 2,000 entries paid a scan per file that a first
# pass on a new cache_dir does not (perf showed it; see BENCHMARKS §21).
OLD_TIERS=0
fill_then_tier() {
	[ -d "$TMP/cache/prepared" ] && mv "$TMP/cache/prepared" "$TMP/old-tier-$((OLD_TIERS += 1))"
	drop
	run "$1" fill "$PREP" 1
	drop
	run "$1" tier "$PREP" 1
	[ "$1" = 1 ] && ls "$TMP/cache/prepared/shards/" | grep '\.shard$' >"$TMP/cut.list"
	AUGP="$PREP,augment=1,flip=1"
	drop
	run "$1" afill "$AUGP,echo=1,echo_mode=adaptive" 1
	drop
	run "$1" atier "$AUGP,echo=1,echo_mode=adaptive" 1
	drop
	run "$1" e4 "$AUGP,echo=4,echo_mode=fixed" 3
}
exact() {
	drop
	run "$1" exact "$PREP,prepared=0" 2
}
LOAD0=$(cut -d' ' -f1-3 /proc/loadavg)
T0=$(date -u +%H:%M)
for ((i = 1; i <= REPEATS; i++)); do
	if ((i % 2)); then exact "$i"; fill_then_tier "$i"; else fill_then_tier "$i"; exact "$i"; fi
done
LOAD1=$(cut -d' ' -f1-3 /proc/loadavg)

# Byte-identical: one class through a mount with the tier (warm) and one
# without.
mount_echofs same1 "$PREP"
M1=$MNT P1=$DPID
mount_echofs same0 "$PREP,prepared=0" "$TMP/cache0"
M0=$MNT P0=$DPID
CLS=$(ls "$M1" | head -1)
DIFF=0
NSAME=0
for f in "$M1/$CLS"/*; do
	n=$(basename "$f")
	cmp -s "$f" "$M0/$CLS/$n" || DIFF=$((DIFF + 1))
	NSAME=$((NSAME + 1))
done
unmount "$M1" "$P1"
unmount "$M0" "$P0"
TIER_BYTES=$(du -sb "$TMP/cache/prepared" 2>/dev/null | cut -f1 || echo 0)

# forms: one line per kind and codec, "kind name ratio compress_MB/s
# decompress_MB/s"; ENTRY_kind: bytes an entry
FORMS=$TMP/forms.txt
: >"$FORMS"
if command -v zstd >/dev/null && command -v lz4 >/dev/null; then
	parse() { tr '\r' '\n' | grep -E 'MB/s.*MB/s' | tail -1 |
		sed -E 's/.*\(x?([0-9.]+)\), *([0-9.]+) MB\/s *, *([0-9.]+) MB\/s.*/\1 \2 \3/'; }
	# kind FILES...: the entries concatenated, each compressed on its own
	forms() {
		local kind=$1 all=$TMP/entries.bin e
		shift
		(cd "$TMP/cache/prepared/shards" && cat "$@") >"$all"
		e=$(($(stat -c %s "$all") / $#))
		printf -v "ENTRY_$kind" '%s' "$e"
		for c in "zstd-1:zstd -b1" "zstd-3:zstd -b3" "lz4-1:lz4 -b1"; do
			echo "$kind ${c%%:*} $(${c#*:} -i3 -B"$e" "$all" 2>&1 | parse)" >>"$FORMS"
		done
		rm -f "$all"
	}
	ENTRY_cut=0 ENTRY_whole=0
	mapfile -t CUT <"$TMP/cut.list"
	mapfile -t WHOLE < <(ls "$TMP/cache/prepared/shards/" | grep '\.shard$' | grep -vxF -f "$TMP/cut.list")
	forms cut "${CUT[@]}"
	forms whole "${WHOLE[@]}"
	JPEG=$($PY -c 'import sys, tarfile
n = b = 0
for t in sys.argv[1:]:
    for m in tarfile.open(t):
        if m.name.endswith(".jpg"):
            n += 1; b += m.size
print(b // max(n, 1))' "$WWW"/*.tar)
else
	log "zstd or lz4 missing: the forms are not measured"
fi

{
	echo "### Prepared-sample tier: $COUNT photos ${W}x$H, \`$PREP\`, $REPEATS repeats"
	echo
	$PY - "$RESULTS" "$COUNT" "$TIER_BYTES" <<'EOF'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
count, tier_bytes = int(sys.argv[2]), int(sys.argv[3] or 0)
by = {}
for r in rows:
    ps = [p["files_per_s"] for p in r["out"]["passes"]]
    by.setdefault(r["case"], []).append(ps)
med = lambda v: statistics.median(v)
r1 = [p[0] for p in by["exact"]]
r2 = [p[1] for p in by["exact"]]
fill = [p[0] for p in by["fill"]]
tier = [p[0] for p in by["tier"]]
e4 = [p[-1] for p in by["e4"]]
afill = [p[0] for p in by["afill"]]
atier = [p[0] for p in by["atier"]]
# Per repeat: ratios against that repeat's R1, R2 and ceiling.
c = [1 / (1 / b + (1 / t - 1 / b) / 4) for b, t in zip(r2, atier)]
fmt = lambda v: " / ".join("%.0f" % x for x in v)
print("| what | files/s (median) | repeats | against | ratio (median) | goal |")
print("| --- | ---: | --- | --- | ---: | --- |")
print("| R1: exact, no tier, first pass | %.0f | %s | | | |" % (med(r1), fmt(r1)))
print("| R2: its second pass (page cache) | %.0f | %s | | | |" % (med(r2), fmt(r2)))
print("| fill: first pass writing the tier | %.0f | %s | R1 | %.2f | >= 0.95 |"
      % (med(fill), fmt(fill), med([f / a for f, a in zip(fill, r1)])))
print("| tier: a new mount, page cache dropped | %.0f | %s | R1 | %.2f | >= 2.5 |"
      % (med(tier), fmt(tier), med([t / a for t, a in zip(tier, r1)])))
print("| | | | R2 | %.2f | >= 0.8 |" % med([t / b for t, b in zip(tier, r2)]))
print("| augmenting, echo=1: first pass filling its tier | %.0f | %s | R1 | %.2f | |"
      % (med(afill), fmt(afill), med([f / a for f, a in zip(afill, r1)])))
print("| augmenting, echo=1: a new mount from its tier (P) | %.0f | %s | R1 | %.2f | |"
      % (med(atier), fmt(atier), med([t / a for t, a in zip(atier, r1)])))
print("| echo=4 fixed over that tier, 3rd pass | %.0f | %s | C (from P, R2) | %.2f | >= 0.9 |"
      % (med(e4), fmt(e4), med([e / x for e, x in zip(e4, c)])))
if tier_bytes:
    print()
    print("Tier size, both kinds of entry together (cut and whole): %.1f MB"
          " for %d samples (%.0f KB a sample)."
          % (tier_bytes / 1e6, count, tier_bytes / count / 1e3))
EOF
	if [ -s "$FORMS" ]; then
		echo
		echo "Forms of the tier (each entry compressed on its own by the codec's benchmark mode, one core; cut: an exact mount's centre crops, $ENTRY_cut bytes an entry; whole: an augmenting mount's whole images, $ENTRY_whole bytes; the source JPEG: $JPEG bytes):"
		echo
		echo "| entries | form | bytes per sample | against the JPEG | compress, µs per sample | decompress, µs per sample |"
		echo "| --- | --- | ---: | ---: | ---: | ---: |"
		for k in cut whole; do
			e=ENTRY_$k
			echo "| $k | raw | ${!e} | $(awk -v a="${!e}" -v j="$JPEG" 'BEGIN {printf "%.1fx", a / j}') | 0 | 0 |"
		done
		while read -r kind name ratio cs ds; do
			e=ENTRY_$kind
			awk -v k="$kind" -v n="$name" -v r="$ratio" -v c="$cs" -v d="$ds" -v a="${!e}" -v j="$JPEG" \
				'BEGIN {printf "| %s | %s | %.0f | %.1fx | %.0f | %.0f |\n", k, n, a / r, a / r / j, a / c, a / d}'
		done <"$FORMS"
	fi
	echo
	echo "Byte-identical: $((NSAME - DIFF)) of $NSAME files of class $CLS equal through a mount with the tier and one without."
	echo
	echo "Command: \`${CMDLINE% }\`; commit $(git rev-parse --short HEAD 2>/dev/null || echo '?')."
	echo "$(nproc) cores, $(date -u +%F) $T0-$(date -u +%H:%M) UTC, load average $LOAD0 at the start, $LOAD1 at the end."
} | tee "$TMP/report.md"
