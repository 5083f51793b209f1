#!/bin/bash
# fuzz.sh - build the libFuzzer targets (clang, ASan) into build-fuzz/ and run
# each one for SECONDS (default 30) from its corpus in tests/fuzz/corpus/<t>.
#   tools/dev/fuzz.sh [SECONDS] [TARGET...]           what .ci/run runs
#   tools/dev/fuzz.sh --update [SECONDS] [TARGET...]  run, then rebuild the
#       corpus: seeds (tests/fuzz/seeds/<t>, the fixtures in tests/data) +
#       the old corpus + what the run found, minimised with -merge=1
# A crash, a leak, a timeout (one input over 60 s) or an out-of-memory fails
# the run; the input is kept in build-fuzz/artifacts/<t>-crash-... (replay
# it with build-fuzz/tests/fuzz_<t> FILE). A plain run leaves the corpus
# alone; --update is how finds reach it. FUZZ_BUILD_DIR overrides
# build-fuzz. Targets: see tests/fuzz/README.md.
set -uo pipefail
cd "$(dirname "$0")/../.."

ALL=(index index_bin tar transform png webp shardlist s3_xml gcs_json aws_creds options)
UPDATE=0
case "${1:-}" in
-h | --help) sed -n '2,12p' "$0"; exit 0 ;;
--update) UPDATE=1; shift ;;
esac
SECONDS_EACH=30
if [[ "${1:-}" =~ ^[0-9]+$ ]]; then SECONDS_EACH=$1; shift; fi
TARGETS=("$@")
[ ${#TARGETS[@]} -eq 0 ] && TARGETS=("${ALL[@]}")
B=${FUZZ_BUILD_DIR:-build-fuzz}
TMP=$(mktemp -d /tmp/echofs-fuzz.XXXXXX)
trap 'rm -rf "$TMP"' EXIT

# Longest input per target: big enough for the seeds, small enough to keep
# each execution fast.
max_len() {
	case "$1" in
	tar) echo 20000 ;;
	transform | png | webp) echo 65536 ;;
	*) echo 4096 ;;
	esac
}

if [ ! -f "$B/build.ninja" ]; then
	CC=clang meson setup "$B" -Dfuzz=true -Dwerror=true >"$TMP/setup.log" 2>&1 ||
		{ cat "$TMP/setup.log" >&2; exit 1; }
fi
ninja -C "$B" "${TARGETS[@]/#/tests/fuzz_}" >"$TMP/build.log" 2>&1 ||
	{ cat "$TMP/build.log" >&2; exit 1; }

# The fixtures as seeds: an image target reads the file as it is; the tar and
# transform targets read option bytes first (see tests/fuzz/README.md).
fixture_seeds() { # target dir
	local f
	case "$1" in
	tar) for f in tests/data/tar/*.tar; do
		(printf '\005'; cat "$f") >"$2/fixture-$(basename "$f")"; done ;;
	transform) for f in tests/data/img/*.{jpg,png,webp,ppm}; do
		[ "$(stat -c %s "$f")" -le 65534 ] &&
			(printf '\x15\x06'; cat "$f") >"$2/fixture-$(basename "$f")"
		done ;;
	png | webp) for f in tests/data/img/*."$1"; do
		[ "$(stat -c %s "$f")" -le 65536 ] && cp "$f" "$2/"; done ;;
	esac
	return 0
}

# Replaces tests/fuzz/corpus/<t> by the smallest set of files that covers
# what its inputs cover (libFuzzer's -merge=1 keeps an input only for new
# coverage).
gather_seeds() { # target dir
	mkdir -p "$2"
	[ -d "tests/fuzz/seeds/$1" ] && cp tests/fuzz/seeds/"$1"/* "$2"/
	fixture_seeds "$1" "$2"
}

update_corpus() { # target found-dir
	local t=$1 corpus=tests/fuzz/corpus/$1 seeds=$TMP/$1-seeds
	mkdir -p "$TMP/$t-merged"
	"$B/tests/fuzz_$t" -merge=1 -max_len="$(max_len "$t")" \
		-rss_limit_mb=2048 "$TMP/$t-merged" "$seeds" "$corpus" "$2" \
		>"$TMP/$t-merge.log" 2>&1 ||
		{ tail -20 "$TMP/$t-merge.log" >&2; return 1; }
	rm -rf "$corpus"
	mv "$TMP/$t-merged" "$corpus"
	echo "fuzz: $t corpus: $(find "$corpus" -type f | wc -l) files," \
		"$(du -sb "$corpus" | cut -f1) bytes"
}

FAILED=()
ART=$(cd "$B" && pwd)/artifacts
mkdir -p "$ART"
for t in "${TARGETS[@]}"; do
	corpus=tests/fuzz/corpus/$t
	found=$TMP/$t-found
	mkdir -p "$found" "$corpus"
	inputs=("$corpus")
	if [ "$UPDATE" -eq 1 ]; then
		gather_seeds "$t" "$TMP/$t-seeds"
		inputs+=("$TMP/$t-seeds")
	fi
	# New inputs go to the first directory; the others are only read.
	"$B/tests/fuzz_$t" -max_total_time="$SECONDS_EACH" \
		-max_len="$(max_len "$t")" -timeout=60 -rss_limit_mb=2048 \
		-artifact_prefix="$ART/$t-" -print_final_stats=1 \
		"$found" "${inputs[@]}" >"$TMP/$t.log" 2>&1
	rc=$?
	stats=$(grep -E '^stat::number_of_executed_units|^stat::new_units_added' \
		"$TMP/$t.log" | sed 's/^stat:://' | tr '\n' ' ')
	if [ "$rc" -ne 0 ]; then
		echo "fuzz: $t FAILED (exit $rc):" >&2
		grep -E -A30 '^==[0-9]+==ERROR|^SUMMARY|deadly signal|Test unit written' \
			"$TMP/$t.log" | head -60 >&2
		FAILED+=("$t")
		continue
	fi
	echo "fuzz: $t ok, ${SECONDS_EACH}s: $stats"
	if [ "$UPDATE" -eq 1 ]; then
		update_corpus "$t" "$found" || FAILED+=("$t (corpus merge)")
	fi
done

rmdir "$ART" 2>/dev/null
for t in "${FAILED[@]}"; do echo "FAILED: fuzz_$t"; done
echo "fuzz: $((${#TARGETS[@]} - ${#FAILED[@]})) of ${#TARGETS[@]} targets clean"
[ ${#FAILED[@]} -eq 0 ]
