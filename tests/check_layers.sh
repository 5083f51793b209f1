#!/bin/bash
# check_layers.sh - fails when the layering breaks: fs/ -> cache/ -> fetch/
# -> common/ (downward only; inside cache/: store, then index, image, echo,
# then the data face cache/dataset*.c; inside fetch/: format below net), FUSE
# only in fs/, curl only in fetch/, TurboJPEG only in cache/image/jpegdec.c
# (the JPEG decoder) and cache/image/transform.c (JPEG encoding and the
# lossless transform). fs/ sees the data through cache/dataset.h (and
# cache/dataset_opts.h, the plain options it includes) and calls dataset_*
# only: never fetch/, nor cache/echo, image, index or store.
#   tests/check_layers.sh [SOURCE_ROOT [BUILD_DIR]]
#       (defaults: the tree holding this script, SOURCE_ROOT/build; build
#       first: the check reads the build's objects)
# Includes and calls are taken from the build, not from the text
# (tests/check_layers.py): the headers the compiler read for each object and
# the symbols each object leaves undefined (nm -u), so a relative include, a
# header including an internal one, a hand-written prototype or a call
# upward fails it as a direct #include would (tests/check_layers_selftest.sh
# shows each). Two rules stay on the text: fs/ never names the structs behind
# the face, and one file makes every curl easy handle.
# Prints every offence; exits 1 if there is one, 2 if it cannot check.
set -uo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=${1:-$HERE/..}
BUILD=${2:-$ROOT/build}
cd "$ROOT" || { echo "check_layers: no such directory $ROOT" >&2; exit 2; }
for d in fs cache fetch common; do
	[ -d "$d" ] || { echo "check_layers: $ROOT has no $d/" >&2; exit 2; }
done
[ -f "$BUILD/compile_commands.json" ] ||
	{ echo "check_layers: $BUILD is not a meson build directory" >&2; exit 2; }

BAD=0
python3 "$HERE/check_layers.py" "$PWD" "$BUILD"
case $? in
0) ;;
1) BAD=1 ;;
*) exit 2 ;;
esac

# Nor by name: fs/ and the face headers never name the structs behind the
# face (a forward declaration would let fs/ pass them around).
inner='index|index_sample|shards|shards_view|shards_stats|store|store_stats'
inner="$inner|pool|pool_sample|pool_stats|prep|outputs|output|outputs_stats"
hits=$(grep -rnE --include='*.c' --include='*.h' \
	"struct[[:space:]]+($inner)[[:space:]]*[;*{ ]" fs cache/dataset.h \
	cache/dataset_opts.h 2>/dev/null)
if [ -n "$hits" ]; then
	printf '%s\n' "$hits" | sed 's|$|   <- fs/ sees opaque dataset structs only|'
	BAD=1
fi

# One libcurl client: every easy handle is made in fetch/net/http.c (its
# TLS options, error translation and deadlines apply to every request,
# credential requests included). check_layers.py checks the objects of
# fs/, cache/, fetch/ and common/; this covers tools/ too.
hits=$(grep -rnE --include='*.c' --include='*.h' 'curl_easy_init[[:space:]]*\(' \
	fs cache fetch common tools | grep -v '^fetch/net/http\.c:')
if [ -n "$hits" ]; then
	printf '%s\n' "$hits" | sed 's|$|   <- curl_easy_init only in fetch/net/http.c|'
	BAD=1
fi

if [ "$BAD" -ne 0 ]; then
	echo "check_layers: layering broken (see above)" >&2
	exit 1
fi
echo "check_layers: ok"
