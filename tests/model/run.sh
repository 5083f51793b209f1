#!/bin/bash
# run.sh - the shard store against its reference model, with SIGKILLed
# users (tests/model/store_model.c: what it checks and how a seed replays).
#   tests/model/run.sh [--runs N] [--seed N] [--workers N] [--keep]
# Builds the program in build/ (ECHOFS_BUILD overrides) and runs 250 runs
# (about 80 s on 2 cores; .ci/run) unless --runs says otherwise.
# A failed run prints its seed: tests/model/run.sh --seed S --runs 1.
set -euo pipefail
cd "$(dirname "$0")/../.."
case "${1:-}" in
-h | --help) sed -n '2,7p' "$0"; exit 0 ;;
esac
B=${ECHOFS_BUILD:-build}
ninja -C "$B" tests/store_model >/dev/null
exec "$B/tests/store_model" --runs 250 "$@"
