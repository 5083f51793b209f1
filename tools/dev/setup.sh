#!/bin/bash
# setup.sh - install what echofs needs on Debian 12 (only what is missing),
# make sure /dev/fuse exists, then configure and build into build/.
#   tools/dev/setup.sh [--bench] [--full]
#     --bench also installs rclone (benchmark peer); --full also installs
#     PyTorch and torchvision (Debian's, about 1 minute) for the trainer tests
#     of tools/test.sh --full (test_dist_train, test_preprocess, test_rrc,
#     test_whole_sample's DataLoader pair reader)
# BUILD_DIR (default build) picks the build directory; MESON_ARGS are passed
# to a first `meson setup` (tools/test.sh: -Dwerror=true). Run as root on a fresh
# machine; later runs only rebuild.
set -euo pipefail
cd "$(dirname "$0")/../.."

BUILD_DIR=${BUILD_DIR:-build}
PKGS=(gcc libc6-dev pkg-config meson ninja-build
      libfuse3-dev fuse3 libcurl4-openssl-dev libturbojpeg0-dev
      libjpeg62-turbo-dev zlib1g-dev libcriterion-dev clang
      libxxhash-dev
      nginx-light dataset-fashion-mnist python3-pil python3-numpy python3-pytest kmod
      libssl-dev python3-botocore nodejs)
# npm installs s3rver for the S3 tests; some nodejs builds bring their own
command -v npm >/dev/null || PKGS+=(npm)
# The Prometheus endpoint (libmicrohttpd) and its test (a real Prometheus).
PKGS+=(libmicrohttpd-dev prometheus python3-prometheus-client)
# HTTPS tests: throwaway CA and certificates, openssl rehash.
PKGS+=(python3-cryptography openssl)
# PNG and WebP input.
PKGS+=(libspng-dev libwebp-dev)
for arg in "$@"; do
	case "$arg" in
	--bench) PKGS+=(rclone) ;;
	--full) PKGS+=(python3-torch python3-torchvision) ;;
	*) echo "setup.sh: unknown argument $arg" >&2; exit 2 ;;
	esac
done

say() { echo "setup: $*"; }

missing_packages() {
	local p
	for p in "${PKGS[@]}"; do
		dpkg-query -W -f='${Status}\n' "$p" 2>/dev/null |
			grep -q '^install ok installed$' || echo "$p"
	done
}

install_packages() {
	local missing
	mapfile -t missing < <(missing_packages)
	[ "${#missing[@]}" -eq 0 ] && return 0
	if [ "$(id -u)" -ne 0 ]; then
		say "missing packages (run as root to install): ${missing[*]}" >&2
		return 1
	fi
	say "installing ${missing[*]}"
	# Keep package scripts from starting services (nginx on port 80): the
	# tests start their own nginx on a free loopback port.
	local made_policy=0
	if [ ! -e /usr/sbin/policy-rc.d ]; then
		printf '#!/bin/sh\nexit 101\n' >/usr/sbin/policy-rc.d
		chmod 755 /usr/sbin/policy-rc.d
		made_policy=1
	fi
	export DEBIAN_FRONTEND=noninteractive
	local rc=0
	{ apt-get update -qq &&
		apt-get install -y -qq --no-install-recommends "${missing[@]}" \
			>/dev/null; } || rc=$?
	[ "$made_policy" -eq 1 ] && rm -f /usr/sbin/policy-rc.d
	return $rc
}

ensure_fuse() {
	[ -e /dev/fuse ] && return 0
	modprobe fuse 2>/dev/null || true
	[ -e /dev/fuse ] || say "warning: /dev/fuse is missing; mounts will not work" >&2
}

# s3rver (a real S3 API server) for tests/integration/test_s3.py, kept in
# tests/s3/node_modules (ignored by git); the tests skip without it.
install_s3rver() {
	local dir=tests/s3
	[ -f "$dir/node_modules/s3rver/package.json" ] && return 0
	command -v npm >/dev/null || { say "npm missing: S3 tests will skip" >&2; return 0; }
	say "installing s3rver@3.7.1 into $dir/node_modules"
	npm install --no-audit --no-fund --no-save --prefix "$dir" s3rver@3.7.1 \
		>/dev/null 2>&1 || say "npm install s3rver failed: S3 tests will skip" >&2
}

build() {
	local log
	log=$(mktemp)
	if [ ! -f "$BUILD_DIR/build.ninja" ]; then
		# shellcheck disable=SC2086 # MESON_ARGS is a list of options
		if ! meson setup "$BUILD_DIR" ${MESON_ARGS:-} >"$log" 2>&1; then
			cat "$log" >&2; rm -f "$log"; return 1
		fi
	fi
	if ! ninja -C "$BUILD_DIR" >"$log" 2>&1; then
		cat "$log" >&2; rm -f "$log"; return 1
	fi
	rm -f "$log"
	say "$BUILD_DIR/ is built"
}

install_packages
ensure_fuse
install_s3rver
build
