#!/usr/bin/env bash
# Runs bench/net/netbench.c, which the build makes (meson: bench/meson.build):
#   bench/net/run.sh [--runs N] [--ref-runs N] [--json FILE]
# Environment: BUILD (the meson build directory, default build). Needs root, ip, iptables and
# nft; everything it creates lives in throwaway namespaces of its own.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
build=${BUILD:-$root/build}
for tool in ip iptables nft; do
	command -v "$tool" >/dev/null || {
		echo "netbench: $tool is not installed" >&2
		exit 1
	}
done
out=$build/bench/bench-netbench
[[ -x $out ]] || {
	echo "netbench: $out not found: build first (make build)" >&2
	exit 1
}
exec "$out" "$@"
