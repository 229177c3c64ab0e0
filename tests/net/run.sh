#!/usr/bin/env bash
# Runs the networking tests (tests/net/test_net.py) against the real daemon, with the jail
# driver (and, in QemuVm, the qemu driver) and the base template, in a stand-in internet of
# their own (tests/net/world.py). Arguments, if any, name the test classes to run (e.g.
# QemuVm). Prints unittest's verbose output, a `SKIP <test>: <reason>` line per skipped test,
# and last `N passed, N failed, N skipped`; exits non-zero when a test failed, or at once when
# something the tests need is missing.
#
# The tests and the daemons they start run in a new network namespace and a private mount
# namespace with an empty /run (scripts/isolated.sh): their "host" has no way out to any real network, and a
# sandboxd running on the real host is neither seen nor disturbed. Everything they create
# goes with those namespaces.
#
# Needs root, ip, nft, unshare and python3. Environment: SANDBOXD (default
# build/src/sandboxd), FIRECRACKER_ARTIFACTS_DIR (where the base template is), LOG_LEVEL,
# TEST_TAGS (e.g. `-vm` leaves out the VM tests; see tests/integration/runner.py).
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.." || exit 1

# cannot_run REASON: what the tests need is missing; `make test` provides all of it (root, and
# the packages of scripts/debian-packages.txt), so that is a failure.
cannot_run() {
	echo "tests/net: cannot run: $1"
	echo "0 passed, 1 failed"
	exit 1
}

export DRIVER=jail
echo "net: daemon ${SANDBOXD:-build/src/sandboxd}, driver jail"
((EUID == 0)) || cannot_run "the networking tests need root (sudo make test)"
for tool in ip nft unshare python3; do
	command -v "$tool" >/dev/null || cannot_run "$tool is not installed"
done
# Our own network and /run (the lock of sandbox networking, /run/netns), loopback up.
exec scripts/isolated.sh python3 -u tests/net/test_net.py "$@"
