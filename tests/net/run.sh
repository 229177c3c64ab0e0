#!/usr/bin/env bash
# Runs the networking tests (tests/net/test_net.py) against the real daemon, with the jail
# driver and the base template, in a stand-in internet of their own (tests/net/world.py).
# Prints unittest's verbose output, a `SKIP <test>: <reason>` line per skipped test, and last
# `N passed, N failed, N skipped`; exits non-zero when a test failed.
#
# Needs root, ip, nft and python3. Environment: SANDBOXD (default build/src/sandboxd),
# FIRECRACKER_ARTIFACTS_DIR (where the base template is), LOG_LEVEL.
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.." || exit 1

export DRIVER=jail
echo "net: daemon ${SANDBOXD:-build/src/sandboxd}, driver jail"
if ! command -v python3 >/dev/null; then
	echo "SKIP tests/net: python3 is not installed"
	echo "0 passed, 0 failed, 1 skipped"
	exit 0
fi
exec python3 -u tests/net/test_net.py "$@"
