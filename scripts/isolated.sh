#!/usr/bin/env bash
# Runs a command in a network namespace of its own (only loopback, up) and a private mount
# namespace with an empty /run, so that what it starts neither sees nor disturbs the host's
# networks, nftables tables, named network namespaces (/run/netns) and sandbox networking
# lock, nor those of a sandboxd running beside it (another lane of the test run). Everything
# the command leaves in those namespaces goes with them.
#
# Usage: scripts/isolated.sh COMMAND [ARGS...]      (needs root, unshare, mount and ip)
# The command sees SANDBOX_ISOLATED=1. Nested calls make namespaces afresh each time.
# Exits with the command's status; 125 when the namespaces cannot be made.
set -uo pipefail

if (($# == 0)); then
	echo "usage: isolated.sh COMMAND [ARGS...]" >&2
	exit 2
fi
if [[ ${SANDBOX_ISOLATED_INSIDE:-} != 1 ]]; then
	SANDBOX_ISOLATED_INSIDE=1 exec unshare --net --mount --propagation private -- "$0" "$@"
fi
unset SANDBOX_ISOLATED_INSIDE
mount -t tmpfs -o mode=0755 tmpfs /run || {
	echo "isolated.sh: cannot mount a tmpfs on /run" >&2
	exit 125
}
ip link set lo up || {
	echo "isolated.sh: cannot bring loopback up" >&2
	exit 125
}
export SANDBOX_ISOLATED=1
exec "$@"
