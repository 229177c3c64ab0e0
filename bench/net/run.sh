#!/usr/bin/env bash
# Builds bench/net/netbench.c against the daemon's core library and runs it:
#   bench/net/run.sh [--runs N] [--ref-runs N] [--json FILE]
# Environment: BUILD (the meson build directory, default build). Needs root, ip, iptables and
# nft; everything it creates lives in throwaway namespaces of its own.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/../.." && pwd)
build=${BUILD:-$root/build}
lib=$build/src/libsandboxd-core.a
[[ -f $lib ]] || {
	echo "netbench: $lib not found: build first (ninja -C $build)" >&2
	exit 1
}
for tool in ip iptables nft; do
	command -v "$tool" >/dev/null || {
		echo "netbench: $tool is not installed" >&2
		exit 1
	}
done
out=$build/bench-netbench
deps="jansson libevent libevent_pthreads sqlite3 libmnl libseccomp libcurl"
# Rebuilt when the source or the library is newer than the binary.
if [[ ! -x $out || $here/netbench.c -nt $out || $lib -nt $out ]]; then
	# shellcheck disable=SC2046,SC2086
	cc -std=gnu11 -O2 -g -D_GNU_SOURCE -Wall -Wextra -Werror -Wno-unused-parameter \
		-I"$root/src" $(pkg-config --cflags $deps) -o "$out" "$here/netbench.c" "$lib" \
		$(pkg-config --libs $deps) -lpthread -lm
fi
exec "$out" "$@"
