#!/bin/bash
# test.sh - build, then run the Criterion unit suite and the pytest
# integration suite (real FUSE mounts against nginx and the fault server).
#   tools/test.sh            the fast tier: every unit suite and the core
#                            integration tests (under 5 minutes on 2 cores)
#   tools/test.sh --full     every integration test, PyTorch installed for
#                            the trainer tests (under 10 minutes on 2 cores:
#                            8:05 on a fresh machine, build included)
#   tools/test.sh --asan     build-asan/ (clang, ASan + UBSan), both suites
#                            (add --full for every integration test)
# The core tests are listed in tests/integration/conftest.py (FAST); the
# others carry the pytest marker `slow`. BUILD_DIR / ASAN_BUILD_DIR override
# the build directories. Exits non-zero if anything failed; the last line
# sums up.
set -uo pipefail
cd "$(dirname "$0")/.."

ASAN=0
FULL=0
for a in "$@"; do
	case "$a" in
	--asan) ASAN=1 ;;
	--full) FULL=1 ;;
	-h | --help) sed -n '2,13p' "$0"; exit 0 ;;
	*) echo "test.sh: unknown argument $a" >&2; exit 2 ;;
	esac
done

PASSED=0
FAILED=0
FAILED_NAMES=()
record() { # name rc
	if [ "$2" -eq 0 ]; then
		PASSED=$((PASSED + 1))
	else
		FAILED=$((FAILED + 1))
		FAILED_NAMES+=("$1")
	fi
}

TMP=$(mktemp -d /tmp/echofs-test.XXXXXX)
cleanup() { rm -rf "$TMP"; }
trap cleanup EXIT

SETUP_ARGS=()
[ "$FULL" -eq 1 ] && SETUP_ARGS=(--full) # the trainer tests need PyTorch
MESON_ARGS=-Dwerror=true bash tools/dev/setup.sh "${SETUP_ARGS[@]}" ||
	{ echo "test.sh: setup failed" >&2; exit 1; }
BUILD=${BUILD_DIR:-build}
# Warnings are errors for developers and CI (off by default for packagers).
meson configure "$BUILD" -Dwerror=true >/dev/null || exit 1
ninja -C "$BUILD" >"$TMP/build.log" 2>&1 || { cat "$TMP/build.log" >&2; exit 1; }
if [ "$ASAN" -eq 1 ]; then
	BUILD=${ASAN_BUILD_DIR:-build-asan}
	if [ ! -f "$BUILD/build.ninja" ]; then
		CC=clang meson setup "$BUILD" -Db_sanitize=address,undefined \
			-Db_lundef=false -Dwerror=true >"$TMP/setup.log" 2>&1 ||
			{ cat "$TMP/setup.log" >&2; exit 1; }
	fi
	ninja -C "$BUILD" >"$TMP/build.log" 2>&1 ||
		{ cat "$TMP/build.log" >&2; exit 1; }
	# The echofs daemon's stderr is gone once it detaches: sanitizer
	# reports go to files, and any file there fails the run.
	mkdir -p "$TMP/san"
	export ASAN_OPTIONS="detect_leaks=1:abort_on_error=1:log_path=$TMP/san/asan"
	export UBSAN_OPTIONS="halt_on_error=1:print_stacktrace=1:log_path=$TMP/san/ubsan"
fi

echo "== unit tests ($BUILD)"
meson test -C "$BUILD" --print-errorlogs
record "unit tests ($BUILD)" $?

TIER=(-m "not slow")
WHICH="core integration tests"
if [ "$FULL" -eq 1 ]; then
	TIER=()
	WHICH="integration tests"
fi
echo "== $WHICH ($BUILD)"
ECHOFS_BUILD="$PWD/$BUILD" /usr/bin/python3 -m pytest -q -p no:cacheprovider \
	--basetemp="$TMP/pytest" --durations=5 "${TIER[@]}" tests/integration
record "$WHICH ($BUILD)" $?

if [ "$ASAN" -eq 1 ]; then
	if compgen -G "$TMP/san/*" >/dev/null; then
		echo "== sanitizer reports" >&2
		cat "$TMP"/san/* >&2
		record "sanitizer reports" 1
	else
		record "sanitizer reports" 0
	fi
fi

for n in "${FAILED_NAMES[@]}"; do echo "FAILED: $n"; done
echo "$PASSED passed, $FAILED failed"
[ "$FAILED" -eq 0 ]
