#!/bin/bash
# entrypoint.sh - PID 1 of the echofs image (/usr/local/sbin/echofs-entrypoint):
# mounts as root, serves as the user echofs with no capabilities.
#
#   podman run ... IMAGE [-o OPTIONS] SOURCE     serve SOURCE on $ECHOFS_MOUNTPOINT
#   podman run ... IMAGE --help | --version | --check ...
#
# The mount is the CSI pattern in one container (docs/guide/containers.md):
# `echofs-fdpass send` (root, needs CAP_SYS_ADMIN) opens /dev/fuse and mounts
# it on $ECHOFS_MOUNTPOINT (default /mnt/echofs; read-only, allow_other,
# default_permissions, owned by echofs; read-write with ECHOFS_RW=1 for an
# echo mount), and echofs, run as echofs with no capabilities and no way to
# gain any (no_new_privs), serves the descriptor it is handed. So the daemon
# needs neither privilege nor read access to /dev/fuse, which a host may
# keep at mode 0600. SIGTERM (podman stop) goes to echofs, which exits 0;
# send then unmounts; the container exits with echofs's status.
set -u
MNT=${ECHOFS_MOUNTPOINT:-/mnt/echofs}
SOCK=/run/echofs/fd.sock
USER_ID=$(id -u echofs)
GROUP_ID=$(id -g echofs)
# exec: run in the background, it must be the pid that gets the SIGTERM
# (setpriv and echofs-fdpass recv exec in turn, echofs keeps the pid).
as_echofs() {
	exec setpriv --reuid="$USER_ID" --regid="$GROUP_ID" --clear-groups \
		--inh-caps=-all --no-new-privs "$@"
}

case "${1:---help}" in
-h | --help | -V | --version | --check)
	[ $# -gt 0 ] || set -- --help
	as_echofs echofs "$@"
	;;
esac

mkdir -p "${SOCK%/*}"
rw=
[ "${ECHOFS_RW:-0}" = 1 ] && rw=--rw
echofs-fdpass send --uid "$USER_ID" --gid "$GROUP_ID" $rw "$SOCK" "$MNT" &
sender=$!
as_echofs echofs-fdpass recv "$SOCK" -- \
	echofs -f -o "mounted_at=$MNT" "$@" /dev/fd/%d &
daemon=$!
# Signal echofs as its own user: root needs CAP_KILL to signal another
# user's process, and this container has no need to keep it.
stop_daemon() {
	(as_echofs bash -c 'kill -TERM "$1" 2>/dev/null' stop "$daemon")
}
trap stop_daemon TERM INT HUP

# Whichever ends first decides. A trapped signal interrupts wait and leaves
# $first unset: wait again.
first=
while [ -z "${first:-}" ]; do
	wait -n -p first "$sender" "$daemon"
	status=$?
done
if [ "$first" = "$sender" ]; then
	# send failed (no CAP_SYS_ADMIN, no /dev/fuse): its one line is the
	# container's error; recv is still waiting for a descriptor.
	[ "$status" -eq 0 ] || stop_daemon
	wait "$daemon"
	daemon_status=$?
	[ "$status" -ne 0 ] && exit "$status"
	exit "$daemon_status"
fi
# echofs ended: send unmounts once the connection closes, or at once when
# echofs never connected (it failed to start).
kill -TERM "$sender" 2>/dev/null
wait "$sender"
exit "$status"
