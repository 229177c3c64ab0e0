#!/usr/bin/env bash
# Runs bench/vm/vmbench.c, which the build makes (meson: bench/meson.build):
#   bench/vm/run.sh [--driver qemu|firecracker] [--runs N] [--template NAME] [--json FILE]
# Environment: BUILD (the meson build directory, default build), and the daemon's own
# settings (FIRECRACKER_ARTIFACTS_DIR, SANDBOX_QEMU_ACCEL, VM_*...). Needs root (cgroups).
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
build=${BUILD:-$root/build}
out=$build/bench/bench-vmbench
[[ -x $out ]] || {
	echo "vmbench: $out not found: build first (make build)" >&2
	exit 1
}
exec "$out" "$@"
