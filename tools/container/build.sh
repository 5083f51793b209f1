#!/bin/bash
# build.sh - build the echofs container image from Debian's packages alone,
# without pulling any image from a registry:
#   1. the project's .deb, built as tools/dev/check_package.sh builds it
#      (dpkg-buildpackage -us -uc -b in a clean copy of the tree), or the one
#      given with --deb;
#   2. a Debian 12 (bookworm) minbase root file system made with debootstrap,
#      with its apt lists, kept as a tarball in $CACHE so later builds skip
#      it (remade when older than 7 days, or with --refresh-base);
#   3. that tarball imported as localhost/echofs-base:bookworm (once per
#      tarball), and tools/container/Containerfile built on it with buildah:
#      apt-get install of the .deb, the user echofs, the cache volume, and
#      tools/container/entrypoint.sh (mounts as root, serves as echofs).
# tools/container/host_args.sh adds what this host needs beyond podman's
# defaults (runc, ulimits); the same goes into every podman run here.
#
#   tools/container/build.sh [--deb FILE] [--tag NAME] [--refresh-base]
#
# Run as root on Debian 12 (installs podman, buildah, debootstrap and the
# package build's tools when missing). Prints the image name and the time
# each step took; the last line sums up. $ECHOFS_CONTAINER_CACHE moves the
# cache (default /var/cache/echofs-container), $DEBIAN_MIRROR the mirror.
set -euo pipefail
cd "$(dirname "$0")/../.."
REPO=$PWD

TAG=localhost/echofs:latest
DEB=
REFRESH=0
CACHE=${ECHOFS_CONTAINER_CACHE:-/var/cache/echofs-container}
MIRROR=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
SUITE=bookworm
BASE_TAG=localhost/echofs-base:$SUITE
MAX_AGE_DAYS=7

say() { echo "container: $*"; }
die() { echo "container: error: $*" >&2; exit 1; }
while [ $# -gt 0 ]; do
	case $1 in
	--deb) DEB=$(realpath "${2:?--deb FILE}"); shift 2 ;;
	--tag) TAG=${2:?--tag NAME}; shift 2 ;;
	--refresh-base) REFRESH=1; shift ;;
	-h | --help) sed -n '2,/^set -e/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
	*) die "unknown argument $1 (see --help)" ;;
	esac
done
[ "$(id -u)" -eq 0 ] || die "run as root (debootstrap and rootful podman)"
[ -z "$DEB" ] || [ -f "$DEB" ] || die "no such .deb: $DEB"

TMP=$(mktemp -d /tmp/echofs-container.XXXXXX)
trap 'rm -rf "$TMP"' EXIT
START=$SECONDS
step_start=$SECONDS
took() { say "$1 ($((SECONDS - step_start)) s)"; step_start=$SECONDS; }

export DEBIAN_FRONTEND=noninteractive
need=()
read -ra global <<<"$(tools/container/host_args.sh global)"
read -ra run <<<"$(tools/container/host_args.sh run)"
runc=
[ "${global[*]}" != "--runtime runc" ] || runc=runc
for p in podman buildah debootstrap debhelper dpkg-dev $runc; do
	dpkg-query -W -f='${Status}\n' "$p" 2>/dev/null | grep -q '^install ok installed$' ||
		need+=("$p")
done
if [ "${#need[@]}" -gt 0 ]; then
	say "installing ${need[*]}"
	apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
	took "installed ${need[*]}"
fi

# 1. the .deb
if [ -z "$DEB" ]; then
	mkdir "$TMP/src"
	git ls-files -z | tar --null -T - -cf - | tar -xf - -C "$TMP/src"
	(cd "$TMP/src" && dpkg-buildpackage -us -uc -b >"$TMP/deb.log" 2>&1) ||
		{ tail -n 40 "$TMP/deb.log"; die "dpkg-buildpackage failed"; }
	DEB=$(ls "$TMP"/echofs_*.deb)
	took "built $(basename "$DEB")"
fi
mkdir "$TMP/context"
cp "$DEB" "$TMP/context/echofs.deb"
cp tools/container/Containerfile "$TMP/context/Containerfile"
install -m 0755 tools/container/entrypoint.sh "$TMP/context/entrypoint.sh"

# 2. the base root file system, cached
arch=$(dpkg --print-architecture)
tarball=$CACHE/debian-$SUITE-minbase-$arch.tar
mkdir -p "$CACHE"
if [ "$REFRESH" -eq 1 ] || [ -z "$(find "$tarball" -mtime -"$MAX_AGE_DAYS" 2>/dev/null)" ]; then
	say "debootstrap $SUITE from $MIRROR (cached in $tarball)"
	root=$TMP/rootfs
	debootstrap --variant=minbase "$SUITE" "$root" "$MIRROR" >"$TMP/debootstrap.log" 2>&1 ||
		{ tail -n 20 "$TMP/debootstrap.log"; die "debootstrap failed"; }
	cat >"$root/etc/apt/sources.list" <<-LIST
		deb $MIRROR $SUITE main
		deb $MIRROR $SUITE-updates main
		deb http://deb.debian.org/debian-security $SUITE-security main
	LIST
	cp /etc/resolv.conf "$root/etc/resolv.conf"
	chroot "$root" apt-get update -qq >"$TMP/update.log" 2>&1 ||
		{ cat "$TMP/update.log"; die "apt-get update in the root file system failed"; }
	chroot "$root" apt-get clean
	: >"$root/etc/resolv.conf"
	tar --numeric-owner --xattrs -C "$root" -cf "$tarball.tmp" .
	mv "$tarball.tmp" "$tarball"
	took "base root file system $(du -h "$tarball" | cut -f1)"
fi

# 3. the images: import the base once per tarball, then the Containerfile
base_id="$(stat -c '%s-%Y' "$tarball")"
have=$(podman image inspect --format '{{index .Config.Labels "echofs.base"}}' \
	"$BASE_TAG" 2>/dev/null || true)
if [ "$have" != "$base_id" ]; then
	podman import --change "LABEL echofs.base=$base_id" \
		--change "ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin" \
		"$tarball" "$BASE_TAG" >"$TMP/import.log" 2>&1 ||
		{ cat "$TMP/import.log"; die "podman import failed"; }
	took "imported $BASE_TAG"
fi
# The RUN steps fetch the .deb's dependencies from Debian's mirror: the
# host's network, not a bridge that needs the host's firewall.
buildah build "${global[@]}" "${run[@]}" --pull=never --layers --network host \
	--build-arg "BASE=$BASE_TAG" -f "$TMP/context/Containerfile" -t "$TAG" \
	"$TMP/context" >"$TMP/build.log" 2>&1 ||
	{ tail -n 40 "$TMP/build.log"; die "buildah build failed"; }
took "built $TAG"
version=$(podman "${global[@]}" run "${run[@]}" --rm --pull=never --network none \
	"$TAG" --version | head -n 1)
[ -n "$version" ] || die "the image's echofs --version printed nothing"
say "$TAG: $version"
echo "container: built $TAG in $((SECONDS - START)) s"
