#!/bin/bash
# host_args.sh - the podman and buildah arguments this host needs beyond
# their defaults to start a container at all, for hosts that are themselves
# containers or VMs with unusual settings (checked on the machines echofs is
# developed on; docs/guide/containers.md):
#
#   host_args.sh global   podman's global flags (`podman FLAGS run ...`;
#                         `buildah build FLAGS` takes them too)
#   host_args.sh run      flags of `podman run` and `buildah build`
#
# Prints the words on one line, nothing when the defaults work:
# - cgroup v1 with controllers still on the v2 (unified) hierarchy: crun
#   refuses ("cgroups in hybrid mode not supported"), runc does not;
#   `--runtime runc` (Debian's runc; build.sh installs it when needed).
# - no CAP_SYS_RESOURCE (a host that is a container): the runtime cannot
#   raise RLIMIT_NOFILE and RLIMIT_NPROC to podman's defaults for root,
#   so they stay at this process's hard limits (RLIMIT_NPROC at most 32768,
#   containers.conf's default, to which podman lowers conmon's own limit).
set -euo pipefail

global() {
	local unified=/sys/fs/cgroup/unified/cgroup.controllers
	# sysfs files have no size: read them.
	if [ -n "$(tr -d ' \n' <"$unified" 2>/dev/null)" ]; then
		echo "--runtime runc"
	fi
}

run() {
	local eff nproc
	eff=$(awk '/^CapEff:/ { print $2 }' /proc/self/status)
	nproc=$(ulimit -Hu)
	[ "$nproc" = unlimited ] || [ "$nproc" -gt 32768 ] && nproc=32768
	# CAP_SYS_RESOURCE is capability 24.
	if (((0x$eff >> 24 & 1) == 0)); then
		echo "--ulimit nofile=$(ulimit -Hn):$(ulimit -Hn)" \
			"--ulimit nproc=$nproc:$nproc"
	fi
}

case ${1:-} in
global) global ;;
run) run ;;
*) echo "usage: host_args.sh global|run" >&2; exit 2 ;;
esac
