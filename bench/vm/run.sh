#!/usr/bin/env bash
# Builds bench/vm/vmbench.c against the daemon's core library and runs it:
#   bench/vm/run.sh [--driver qemu|firecracker] [--runs N] [--template NAME] [--json FILE]
# Environment: BUILD (the meson build directory, default build), and the daemon's own
# settings (FIRECRACKER_ARTIFACTS_DIR, SANDBOX_QEMU_ACCEL, VM_*...). Needs root (cgroups).
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/../.." && pwd)
build=${BUILD:-$root/build}
lib=$build/src/libsandboxd-core.a
[[ -f $lib ]] || {
	echo "vmbench: $lib not found: build first (ninja -C $build)" >&2
	exit 1
}
out=$build/bench-vmbench
deps="jansson libevent libevent_pthreads sqlite3 libmnl libseccomp libcurl"
# Rebuilt when the source or the library is newer than the binary.
if [[ ! -x $out || $here/vmbench.c -nt $out || $lib -nt $out ]]; then
	# shellcheck disable=SC2046,SC2086
	cc -std=gnu11 -O2 -g -D_GNU_SOURCE -Wall -Wextra -Werror -Wno-unused-parameter \
		-I"$root/src" $(pkg-config --cflags $deps) -o "$out" "$here/vmbench.c" "$lib" \
		$(pkg-config --libs $deps) -lpthread -lm
fi
exec "$out" "$@"
