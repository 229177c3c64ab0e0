#!/usr/bin/env bash
# Runs the integration tests (tests/integration/test_*.py, unittest) against the real daemon.
# Prints unittest's verbose output, a `SKIP <test>: <reason>` line per skipped test, and last
# `N passed, N failed, N skipped`; exits non-zero when a test failed.
#
# Usage: tests/integration/run.sh [DIR [PATTERN]]   (default tests/integration 'test_*.py';
#        other unittest suites that use the harness, such as the Python SDK's, run the same way)
# Environment: DRIVER (the daemon's SANDBOX_DRIVER, default jail), SANDBOXD (the binary,
# default build/src/sandboxd), TEST_TAGS (only the tests with one of these tags, e.g.
# `driver`; see runner.py); see harness.py for the rest.
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.." || exit 1

export DRIVER=${DRIVER:-jail}
dir=${1:-tests/integration}
pattern=${2:-test_*.py}
echo "$dir: driver $DRIVER, daemon ${SANDBOXD:-build/src/sandboxd}"

# The same as `python3 -m unittest discover -s DIR -p PATTERN -v`, with a result that counts
# each test once, times them, and TEST_TAGS to run a part (see runner.py).
PYTHONPATH=tests/integration${PYTHONPATH:+:$PYTHONPATH} exec python3 -u -m runner "$dir" "$pattern"
