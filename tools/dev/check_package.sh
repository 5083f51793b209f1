#!/bin/bash
# check_package.sh - the builds packagers run, then the package itself:
#   1. clang, --buildtype=release, warnings as errors;
#   2. dpkg-buildpackage -us -uc -b in a clean copy of the tree (gcc with
#      Debian's hardening flags, -Dwerror=true: see debian/rules);
#   3. apt-get install ./echofs_*.deb, `man -w` finds every page, and the
#      installed /usr/bin/echofs mounts a small dataset served by nginx and
#      reads it back byte for byte; then the package is removed again.
#
#   tools/dev/check_package.sh [--keep-deb DIR]
#
# --keep-deb copies the .deb into DIR (tools/container/build.sh --deb takes
# it, so CI builds the package once). Run as root from anywhere (CI runs it
# after the test suites). The last line sums up; exits non-zero if anything
# failed.
set -euo pipefail
KEEP=
if [ "${1:-}" = --keep-deb ]; then
	KEEP=$(realpath "${2:?--keep-deb DIR}")
	mkdir -p "$KEEP"
elif [ $# -gt 0 ]; then
	echo "check_package: error: unknown argument $1" >&2
	exit 2
fi
cd "$(dirname "$0")/../.."

PY=/usr/bin/python3
TMP=$(mktemp -d /tmp/echofs-pkg.XXXXXX)
MNT=$TMP/mnt
INSTALLED=0
cleanup() {
	set +e
	if grep -qs " $MNT fuse" /proc/mounts; then
		fusermount3 -u "$MNT" 2>/dev/null || fusermount3 -uz "$MNT"
	fi
	[ -d "$TMP/nginx" ] && $PY tools/dev/nginx.py stop --state "$TMP/nginx"
	[ "$INSTALLED" -eq 1 ] && apt-get remove -y -qq echofs >/dev/null 2>&1
	rm -rf "$TMP"
}
trap cleanup EXIT
say() { echo "check_package: $*"; }

export DEBIAN_FRONTEND=noninteractive
need=()
for p in debhelper dpkg-dev devscripts clang man-db; do
	dpkg-query -W -f='${Status}\n' "$p" 2>/dev/null | grep -q '^install ok installed$' ||
		need+=("$p")
done
if [ "${#need[@]}" -gt 0 ]; then
	say "installing ${need[*]}"
	apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
fi

say "clang release build with -Dwerror=true"
CC=clang meson setup "$TMP/clang-release" --buildtype=release -Dwerror=true \
	>"$TMP/clang.log" 2>&1 || { cat "$TMP/clang.log"; exit 1; }
ninja -C "$TMP/clang-release" >>"$TMP/clang.log" 2>&1 || { cat "$TMP/clang.log"; exit 1; }

say "dpkg-buildpackage in a clean copy"
mkdir "$TMP/src"
git ls-files -z | tar --null -T - -cf - | tar -xf - -C "$TMP/src"
(cd "$TMP/src" && dpkg-buildpackage -us -uc -b >"$TMP/deb.log" 2>&1) ||
	{ tail -n 60 "$TMP/deb.log"; exit 1; }
if grep -q 'warning:' "$TMP/deb.log"; then
	grep 'warning:' "$TMP/deb.log" | head -n 20
	say "the package build printed compiler warnings"
	exit 1
fi
deb=$(ls "$TMP"/echofs_*.deb)
say "built $(basename "$deb"): $(dpkg-deb -f "$deb" Depends)"
[ -z "$KEEP" ] || cp "$deb" "$KEEP/"

say "apt-get install ./$(basename "$deb")"
apt-get install -y -qq "$deb" >"$TMP/apt.log" 2>&1 || { cat "$TMP/apt.log"; exit 1; }
INSTALLED=1
for page in echofs echofs-index echofs-pack echofs-top echofs-fdpass; do
	command -v "/usr/bin/$page" >/dev/null || { say "/usr/bin/$page not installed"; exit 1; }
	man -w "$page" >/dev/null || { say "man page $page not found"; exit 1; }
done
/usr/bin/echofs --version

say "mount with the installed binary"
mkdir -p "$TMP/www" "$MNT"
/usr/bin/echofs-pack --split test --out "$TMP/www" --per-shard 500 --limit 2000 \
	--tree "$TMP/ref" >/dev/null
port=$($PY tools/dev/nginx.py start --root "$TMP/www" --state "$TMP/nginx")
src="http://127.0.0.1:$port/test-{000000..000003}.tar"
/usr/bin/echofs -o "cache_dir=$TMP/cache,log_file=$TMP/echofs.log" "$src" "$MNT"
if ! diff -r "$TMP/ref" "$MNT" >"$TMP/diff.log"; then
	head "$TMP/diff.log"
	say "the installed echofs served other bytes than the source"
	exit 1
fi
say "$(find "$MNT" -type f | wc -l) files identical to the source"
fusermount3 -u "$MNT"
echo "check_package: 1 passed, 0 failed"
