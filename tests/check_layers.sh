#!/bin/bash
# check_layers.sh - fails when an #include breaks the layering: fs/ -> cache/
# -> fetch/ -> common/ (downward only), FUSE only in fs/, curl only in fetch/,
# TurboJPEG only in cache/image/jpegdec.c (the JPEG decoder) and
# cache/image/transform.c (JPEG encoding and the lossless transform). fs/
# sees the data through cache/dataset.h (and cache/dataset_opts.h, the plain
# options it includes) only: never through fetch/, nor through cache/echo,
# image, index or store.
#   tests/check_layers.sh [SOURCE_ROOT]   (default: the tree holding this script)
# Prints every offending line as file:line: text; exits 1 if there is one.
set -uo pipefail
ROOT=${1:-$(dirname "$0")/..}
cd "$ROOT" || { echo "check_layers: no such directory $ROOT" >&2; exit 2; }
for d in fs cache fetch common; do
	[ -d "$d" ] || { echo "check_layers: $ROOT has no $d/" >&2; exit 2; }
done

BAD=0
# forbid DIR REGEX WHY: include lines under DIR whose target matches REGEX.
forbid() {
	local hits
	hits=$(grep -rnE --include='*.c' --include='*.h' \
		"^[[:space:]]*#[[:space:]]*include[[:space:]]*[<\"]($2)" "$1")
	if [ -n "$hits" ]; then
		printf '%s\n' "$hits" | sed "s|\$|   <- $3|"
		BAD=1
	fi
}

forbid fs 'fetch/|curl/' 'fs/ sees the data through cache/dataset.h only'
forbid fs 'cache/(echo|image|index|store)/|cache/dataset_(parts|int)\.h' \
	'fs/ sees the data through cache/dataset.h only'
forbid cache 'fs/|fuse|curl/' 'cache/ calls only fetch/ and common/'
forbid fetch 'fs/|cache/|fuse' 'fetch/ calls only common/'
forbid common 'fs/|cache/|fetch/|fuse|curl/' 'common/ is the bottom layer'

# Nor through a header: every cache/ header fs/ includes, directly or through
# other headers, is free of fetch/ and curl, and of cache/'s inner folders.
seen=" "
todo=$(grep -rhoE --include='*.c' --include='*.h' '#[[:space:]]*include[[:space:]]*"cache/[^"]+"' fs |
	sed -E 's/.*"(.*)"/\1/' | sort -u)
while [ -n "$todo" ]; do
	next=""
	for h in $todo; do
		case "$seen" in *" $h "*) continue ;; esac
		seen="$seen$h "
		[ -f "$h" ] || continue
		hits=$(grep -nE '^[[:space:]]*#[[:space:]]*include[[:space:]]*[<"](fetch/|curl/|cache/(echo|image|index|store)/)' "$h")
		if [ -n "$hits" ]; then
			printf '%s\n' "$hits" | sed "s|^|$h:|; s|\$|   <- included by fs/: only the dataset face through headers|"
			BAD=1
		fi
		next="$next $(grep -hoE '#[[:space:]]*include[[:space:]]*"cache/[^"]+"' "$h" |
			sed -E 's/.*"(.*)"/\1/')"
	done
	todo=$next
done

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

# TurboJPEG stays inside the JPEG decoder and the transform (its errors
# translated to errno there).
hits=$(grep -rnE --include='*.c' --include='*.h' \
	'^[[:space:]]*#[[:space:]]*include[[:space:]]*[<"](turbojpeg|jpeglib)' \
	fs cache fetch common |
	grep -vE '^cache/image/(jpegdec|transform)\.c:')
if [ -n "$hits" ]; then
	printf '%s\n' "$hits" |
		sed 's|$|   <- TurboJPEG only in cache/image/jpegdec.c and transform.c|'
	BAD=1
fi

# One libcurl client: every easy handle is made in fetch/net/http.c (its
# TLS options, error translation and deadlines apply to every request,
# credential requests included).
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
