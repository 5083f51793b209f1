#!/bin/bash
# tsan.sh - run the threaded modules' unit suites under ThreadSanitizer.
#   tools/dev/tsan.sh [SUITE...]    default: pool shards bindings
#                                   bindings_model visits workq store
#                                   indexer prep http push refresher
#                                   budget control log prepared
#                                   shards_demand
# Builds those unit suites with clang and -Db_sanitize=thread into
# build-tsan/ (TSAN_BUILD_DIR overrides) through a Criterion stand-in
# (tests/tsan/: Criterion's runner cannot start under TSan), then runs each
# that exists, one test at a time in a child of its own. Any race report
# fails the run: TSan writes reports to files, and every file is printed.
# Not part of tools/test.sh (a first build takes a few minutes); .ci/run
# runs it last, and a race report or a failed test fails CI.
set -uo pipefail
cd "$(dirname "$0")/../.."

case "${1:-}" in
-h | --help) sed -n '2,13p' "$0"; exit 0 ;;
esac
SUITES=("$@")
# log: its writers race a reopen (log/reopen_under_load).
[ ${#SUITES[@]} -eq 0 ] && SUITES=(pool shards bindings bindings_model visits workq store
	indexer prep http push refresher budget control log prepared
	shards_demand)
B=${TSAN_BUILD_DIR:-build-tsan}
TMP=$(mktemp -d /tmp/echofs-tsan.XXXXXX)
trap 'rm -rf "$TMP"' EXIT

if [ ! -f "$B/build.ninja" ]; then
	CC=clang meson setup "$B" -Db_sanitize=thread -Db_lundef=false \
		-Dwerror=true >"$TMP/setup.log" 2>&1 ||
		{ cat "$TMP/setup.log" >&2; exit 1; }
fi
# Regenerate first if a meson.build changed, so the query below sees it.
ninja -C "$B" build.ninja >"$TMP/regen.log" 2>&1 ||
	{ cat "$TMP/regen.log" >&2; exit 1; }
TARGETS=()
for s in "${SUITES[@]}"; do
	[ -f "tests/unit/test_$s.c" ] || continue
	# A suite named here must have its tsan_ target in tests/meson.build:
	# say which line is missing rather than ninja's "unknown target".
	if ! ninja -C "$B" -t query "tests/tsan_$s" >/dev/null 2>&1; then
		echo "tsan: no tsan_$s target: add '$s' to the TSan list in" \
			"tests/meson.build" >&2
		exit 1
	fi
	TARGETS+=("tests/tsan_$s")
done
ninja -C "$B" "${TARGETS[@]}" >"$TMP/build.log" 2>&1 ||
	{ cat "$TMP/build.log" >&2; exit 1; }

mkdir -p "$TMP/reports"
# second_deadlock_stack: both stacks of a lock-order report.
export TSAN_OPTIONS="halt_on_error=0:second_deadlock_stack=1:log_path=$TMP/reports/tsan"
failed=()
for s in "${SUITES[@]}"; do
	if [ ! -x "$B/tests/tsan_$s" ]; then
		echo "tsan: skip $s (no tests/unit/test_$s.c yet)"
		continue
	fi
	echo "== tsan: $s"
	ECHOFS_TEST_DATA=$PWD/tests/data "$B/tests/tsan_$s" ||
		failed+=("$s (failed)")
	if compgen -G "$TMP/reports/tsan*" >/dev/null; then
		cat "$TMP"/reports/tsan* >&2
		rm -f "$TMP"/reports/tsan*
		failed+=("$s (race reports)")
	fi
done
if [ ${#failed[@]} -gt 0 ]; then
	echo "tsan: FAILED: ${failed[*]}"
	exit 1
fi
echo "tsan: ${SUITES[*]}: no race reported"
