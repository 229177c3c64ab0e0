# Shared helpers of the template builder: settings, logging, cleanup, locks.
# Sourced by templates/build.sh and templates/base-image.sh; not executable.
# shellcheck shell=bash

TEMPLATES_HOME=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
REPO_ROOT=$(cd "$TEMPLATES_HOME/.." && pwd)

# Where template sources (templates/<name>/) are looked up.
TEMPLATES_DIR=${TEMPLATES_DIR:-$TEMPLATES_HOME}
# Where built artifacts go; the daemon reads the same variable.
ARTIFACTS=${FIRECRACKER_ARTIFACTS_DIR:-/var/lib/agent-sandbox/artifacts}
# An installed builder (meson install) has lib/paths.sh, which names the installed agent.
if [[ -f $TEMPLATES_HOME/lib/paths.sh ]]; then
	# shellcheck source=/dev/null
	. "$TEMPLATES_HOME/lib/paths.sh"
fi
# The guest agent installed into every rootfs as /sbin/sandbox-agent.
SANDBOX_AGENT_BIN=${SANDBOX_AGENT_BIN:-${SANDBOX_AGENT_BIN_INSTALLED:-$REPO_ROOT/build/agent/sandbox-agent}}
# Private buildah storage, so that its driver (vfs) never clashes with
# the host's own container storage.
TEMPLATE_STORAGE_DIR=${TEMPLATE_STORAGE_DIR:-/var/lib/agent-sandbox/containers}
TEMPLATE_RUN_DIR=${TEMPLATE_RUN_DIR:-/run/agent-sandbox/containers}

BASE_IMAGE=agent-sandbox-base:latest

log_prefix=template

log() { printf '[%s] %s\n' "$log_prefix" "$*" >&2; }
die() {
	printf '[%s] error: %s\n' "$log_prefix" "$*" >&2
	exit 1
}

# Cleanup actions run in reverse order on any exit, success or failure.
cleanup_actions=()

# defer CMD ARGS...: runs the command (errors ignored) when the script exits.
defer() {
	cleanup_actions+=("$(printf '%q ' "$@")")
}

run_cleanup() {
	local i
	for ((i = ${#cleanup_actions[@]} - 1; i >= 0; i--)); do
		eval "${cleanup_actions[i]}" >/dev/null 2>&1 || true
	done
	cleanup_actions=()
}

install_cleanup_trap() {
	trap run_cleanup EXIT
	trap 'exit 130' INT
	trap 'exit 143' TERM
	trap 'exit 129' HUP
}

# take_lock FILE: holds an exclusive lock on FILE until the script exits,
# waiting (and saying so) if another build holds it. A lock this script holds
# already is kept as it is: a second descriptor's flock would wait for the
# first, that is for ever (build.sh python node).
declare -A held_locks=()
take_lock() {
	local file=$1 fd
	[[ -n ${held_locks[$file]:-} ]] && return 0
	mkdir -p "$(dirname "$file")"
	exec {fd}>"$file"
	held_locks[$file]=$fd
	if ! flock -n "$fd"; then
		log "waiting for another build holding $file"
		flock "$fd"
	fi
}

need_cmd() {
	local cmd=$1 pkg=$2
	command -v "$cmd" >/dev/null 2>&1 || die "'$cmd' is required (apt-get install $pkg)"
}

# is_static FILE: true when FILE is an ELF executable without a program
# interpreter, i.e. it runs in a rootfs that has no libc.
is_static() {
	local file=$1
	[[ -f $file && -x $file ]] || return 1
	if command -v readelf >/dev/null 2>&1; then
		readelf -h "$file" >/dev/null 2>&1 || return 1
		! readelf -l "$file" 2>/dev/null | grep -q 'Requesting program interpreter'
	else
		! ldd "$file" >/dev/null 2>&1
	fi
}

valid_template_name() {
	[[ $1 =~ ^[a-z0-9][a-z0-9._-]{0,62}$ ]]
}
