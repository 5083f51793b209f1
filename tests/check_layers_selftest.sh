#!/bin/bash
# check_layers_selftest.sh - shows that tests/check_layers.sh cannot be
# fooled: in a scratch copy of the tree (built once, libraries and echofs
# only), it applies each way around a textual check, one at a time, rebuilds
# and expects the check to fail naming the offence, then undoes it:
#   relative   fs/ includes "../cache/store/store.h"
#   prototype  fs/ declares store_open by hand and calls it
#   header     a new cache/ header includes "store/store.h"; fs/ includes it
#   upward     cache/store/ calls the data face (a prototype by hand)
#   fetchup    fetch/format/ calls fetch/net/ (a prototype by hand)
# The unchanged copy must pass first, and again at the end.
#   tests/check_layers_selftest.sh [SOURCE_ROOT]   (a few minutes: one build)
# CC is honoured (e.g. "ccache gcc"). Exits 1 if an injection passes the
# check or the clean copy fails it. .ci/run runs it.
set -uo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "${1:-$HERE/..}" && pwd)
TMP=$(mktemp -d /tmp/echofs-layers-selftest.XXXXXX)
trap 'rm -rf "$TMP"' EXIT
SRC=$TMP/src
B=$TMP/build
say() { echo "layers selftest: $*"; }

# The tree as it is now (tracked and new files, not build directories).
mkdir -p "$SRC"
(cd "$ROOT" && git ls-files -co --exclude-standard -z |
	xargs -0 tar -cf - --no-recursion) | (cd "$SRC" && tar -xf -) ||
	{ say "cannot copy $ROOT"; exit 2; }
meson setup "$B" "$SRC" -Dtests=disabled >"$TMP/setup.log" 2>&1 ||
	{ cat "$TMP/setup.log" >&2; exit 2; }

build() { ninja -C "$B" echofs >"$TMP/build.log" 2>&1 || { cat "$TMP/build.log" >&2; exit 2; }; }
check() { bash "$SRC/tests/check_layers.sh" "$SRC" "$B" >"$TMP/check.log" 2>&1; }

build
check || { cat "$TMP/check.log"; say "FAILED: the clean tree fails the check"; exit 1; }
say "clean tree: passes"

FAILED=()
# inject NAME FILE TEXT EXPECT: append TEXT to FILE (new files too), build,
# expect the check to fail with a line matching EXPECT; then restore.
inject() {
	local name=$1 file=$2 text=$3 expect=$4 saved=$TMP/saved
	if [ -f "$SRC/$file" ]; then cp "$SRC/$file" "$saved"; else rm -f "$saved"; fi
	printf '%s\n' "$text" >>"$SRC/$file"
	build
	if check; then
		say "FAILED: $name passes the check"
		FAILED+=("$name")
	elif ! grep -qE "$expect" "$TMP/check.log"; then
		cat "$TMP/check.log"
		say "FAILED: $name fails the check, but not for /$expect/"
		FAILED+=("$name")
	else
		say "$name: caught: $(grep -E "$expect" "$TMP/check.log" | head -1)"
	fi
	if [ -f "$saved" ]; then cp "$saved" "$SRC/$file"; else rm -f "$SRC/$file"; fi
}

inject relative fs/escape.c '#include "../cache/store/store.h"' \
	'^fs/escape\.c reads cache/store/store\.h'
inject prototype fs/escape.c '
int store_open(const char *dir, unsigned long cap, void **out, char *err,
	       unsigned long errlen);
void escape_selftest_probe(void);
void escape_selftest_probe(void)
{
	void *s;
	char e[8];
	store_open("", 0, &s, e, sizeof(e));
}' '^fs/escape\.c uses store_open \(cache/store/store\.c\)'
printf '#include "store/store.h" /* beside it: cache/store/ */\n' \
	>"$SRC/cache/dataset_extra.h"
inject header fs/escape.c '#include "cache/dataset_extra.h"' \
	'^fs/escape\.c reads cache/(dataset_extra|store/store)\.h'
rm -f "$SRC/cache/dataset_extra.h"
inject upward cache/store/store_format.c '
void dataset_close(void *ds);
void store_fmt_selftest_probe(void);
void store_fmt_selftest_probe(void)
{
	dataset_close(0);
}' '^cache/store/store_format\.c uses dataset_close .*above cache/store'
inject fetchup fetch/format/tar.c '
void http_free(void *h);
void tar_selftest_probe(void);
void tar_selftest_probe(void)
{
	http_free(0);
}' '^fetch/format/tar\.c uses http_free .*above fetch/format'

build
check || { cat "$TMP/check.log"; say "FAILED: the restored tree fails the check"; exit 1; }
if [ ${#FAILED[@]} -gt 0 ]; then
	say "FAILED: ${FAILED[*]}"
	exit 1
fi
say "every injection fails the check; the clean tree passes"
