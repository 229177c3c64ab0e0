#!/usr/bin/env bash
# Runs bench/http/httpbench.c, which the build makes when libmicrohttpd-dev and
# libhttp-parser-dev are installed (make deps installs them; meson: bench/meson.build):
#   bench/http/run.sh [--requests N] [--rounds N] [--idle N] [--servers a,b] [--cpus same|two|any]
#                     [--mhd-pool BYTES]
# Environment: BUILD (the meson build directory, default build). Needs no root; everything
# listens on 127.0.0.1 only.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
build=${BUILD:-$root/build}
out=$build/bench/bench-httpbench
[[ -x $out ]] || {
	echo "httpbench: $out not found: install the dependencies and build first (make build)" >&2
	exit 1
}
exec "$out" "$@"
