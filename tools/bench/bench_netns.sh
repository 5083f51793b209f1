# bench_netns.sh - sourced by bench_echo.sh and bench_train.sh: a private
# network namespace whose loopback is capped by a tc token bucket, an nginx
# and echofs daemons inside it, and one cleanup that removes all of it.
#
# The namespace is held by one `sleep` started with `unshare -n`; every other
# process enters it with `nsenter -t HOLDER -n`. nginx and the echofs daemons
# therefore talk over the capped loopback, while the FUSE mounts (the mount
# namespace is shared) are read from outside at full speed. Every process in
# the namespace was started by us, so cleanup may end them by pid.
#
# Callers set PY, B (build dir) and BTMP (scratch dir), then use:
#   netns_start RATE       make the namespace; RATE like 12mbit ("" = no cap)
#   netns_run CMD...       run CMD inside it
#   netns_nginx ROOT       start nginx inside serving ROOT; sets NS_BASE
#   host_nginx ROOT        the same on the host's (unthrottled) loopback; sets HOST_BASE
#   bench_snapshot         copy B/echofs to BTMP (a rebuild mid-run cannot change it); sets ECHOFS
#   bench_mount NS|HOST CACHE MNT SOURCE OPTS   mount echofs (daemonized)
#   bench_unmount MNT      unmount and wait for the daemon to go
#   bench_cleanup          unmount all, stop nginx, end the namespace
#   bench_watchdog SECS    end the whole script (through its EXIT trap) after SECS
#   netns_bench_start NAME SECS   BTMP, the EXIT trap, the watchdog, and the
#                          checks every such script makes (root, a build)
# shellcheck shell=bash
# shellcheck disable=SC2034 # NS_BASE, HOST_BASE, ECHOFS_INFO are for the callers

NETNS_PID=
ECHOFS=
NS_BASE=
HOST_BASE=
BENCH_MOUNTS=()

blog() { echo "bench: $*" >&2; }

netns_start() { # rate
	unshare -n sleep 100000 &
	NETNS_PID=$!
	local i
	for ((i = 0; i < 50; i++)); do
		[ "$(readlink "/proc/$NETNS_PID/ns/net" 2>/dev/null)" != "$(readlink /proc/self/ns/net)" ] &&
			[ -n "$(readlink "/proc/$NETNS_PID/ns/net" 2>/dev/null)" ] && break
		sleep 0.1
	done
	netns_run ip link set lo up mtu 9000
	if [ -n "$1" ]; then
		netns_run tc qdisc add dev lo root tbf rate "$1" burst 128kb latency 2000ms
	fi
	blog "netns holder $NETNS_PID: $(netns_run tc qdisc show dev lo | head -1)"
}

netns_run() { nsenter -t "$NETNS_PID" -n "$@"; }

netns_nginx() { # root
	local port
	port=$(netns_run timeout 30 "$PY" tools/dev/nginx.py start --root "$1" --state "$BTMP/nginx-ns")
	NS_BASE="http://127.0.0.1:$port"
}

host_nginx() { # root
	local port
	port=$(timeout 30 "$PY" tools/dev/nginx.py start --root "$1" --state "$BTMP/nginx-host")
	HOST_BASE="http://127.0.0.1:$port"
}

bench_snapshot() {
	local i
	for ((i = 0; i < 60; i++)); do # the shared build may be relinking right now
		if cp "$B/echofs" "$BTMP/echofs.new" 2>/dev/null &&
			"$BTMP/echofs.new" --version >/dev/null 2>&1; then
			mv "$BTMP/echofs.new" "$BTMP/echofs"
			ECHOFS=$BTMP/echofs
			ECHOFS_INFO="$("$ECHOFS" --version 2>&1 | head -1), $B/echofs built $(date -u -r "$B/echofs" +%H:%MZ)"
			return 0
		fi
		sleep 2
	done
	echo "bench: cannot snapshot a working $B/echofs" >&2
	return 1
}

# bench_mount NS|HOST CACHE MNT SOURCE OPTS: echofs returns once the tree is up
bench_mount() {
	local where=$1 cache=$2 mnt=$3 src=$4 opts=$5
	mkdir -p "$mnt"
	BENCH_MOUNTS+=("$mnt")
	local cmd=(timeout 60 "$ECHOFS" -o "cache_dir=$cache,log_file=$BTMP/echofs.log${opts:+,$opts}" "$src" "$mnt")
	if [ "$where" = NS ]; then netns_run "${cmd[@]}"; else "${cmd[@]}"; fi
}

mount_pid() { # mnt -> pid of the echofs daemon serving it
	local p
	for p in /proc/[0-9]*; do
		[ "$(readlink "$p/exe" 2>/dev/null)" = "$ECHOFS" ] || continue
		tr '\0' '\n' <"$p/cmdline" 2>/dev/null | grep -qx "$1" && { echo "${p#/proc/}"; return 0; }
	done
	return 0
}

bench_unmount() { # mnt
	grep -qs " $1 fuse" /proc/mounts || return 0
	local pid i
	pid=$(mount_pid "$1")
	fusermount3 -u "$1" 2>/dev/null || { sleep 1; fusermount3 -u "$1" 2>/dev/null; } ||
		fusermount3 -uz "$1"
	for ((i = 0; i < 100; i++)); do # let the daemon exit and free its pool
		[ -n "$pid" ] && kill -0 "$pid" 2>/dev/null || return 0
		sleep 0.1
	done
	blog "echofs $pid still running after unmount; killing it"
	kill -9 "$pid" 2>/dev/null || true
}

ns_pids() { # every process in our namespace but the holder
	local ns p
	ns=$(readlink "/proc/$NETNS_PID/ns/net" 2>/dev/null) || return 0
	[ -n "$ns" ] || return 0
	for p in /proc/[0-9]*; do
		[ "${p#/proc/}" = "$NETNS_PID" ] && continue
		[ "$(readlink "$p/ns/net" 2>/dev/null)" = "$ns" ] && echo "${p#/proc/}"
	done
	return 0
}

bench_cleanup() {
	set +e
	local m p
	[ -n "$WATCHDOG_PID" ] && kill "$WATCHDOG_PID" 2>/dev/null
	for m in "${BENCH_MOUNTS[@]}"; do bench_unmount "$m"; done
	[ -d "$BTMP/nginx-host" ] && "$PY" tools/dev/nginx.py stop --state "$BTMP/nginx-host"
	if [ -n "$NETNS_PID" ]; then
		[ -d "$BTMP/nginx-ns" ] && "$PY" tools/dev/nginx.py stop --state "$BTMP/nginx-ns"
		for p in $(ns_pids); do kill "$p" 2>/dev/null; done
		sleep 0.5
		for p in $(ns_pids); do kill -9 "$p" 2>/dev/null; done
		kill "$NETNS_PID" 2>/dev/null
		wait "$NETNS_PID" 2>/dev/null
	fi
	rm -rf "$BTMP"
}

WATCHDOG_PID=
bench_watchdog() { # seconds
	local me=$$
	(
		trap 'kill $sp 2>/dev/null; exit 0' TERM
		sleep "$1" &
		sp=$!
		wait $sp
		echo "bench: watchdog: $1 s budget exceeded, stopping" >&2
		kill -TERM "$me"
	) &
	WATCHDOG_PID=$!
}

netns_bench_start() { # name seconds
	BTMP=$(mktemp -d "/tmp/echofs-bench-$1.XXXXXX")
	trap bench_cleanup EXIT
	trap 'exit 130' INT TERM
	bench_watchdog "$2"
	[ "$(id -u)" = 0 ] || { echo "bench_$1.sh: needs root (unshare -n, tc, FUSE)" >&2; exit 2; }
	[ -x "$B/echofs" ] || { echo "bench_$1.sh: build $B/echofs first (tools/dev/setup.sh)" >&2; exit 2; }
}
