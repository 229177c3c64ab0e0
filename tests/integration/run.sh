#!/usr/bin/env bash
# Runs the integration tests (tests/integration/test_*.py, unittest) against the real daemon.
# Prints unittest's verbose output, a `SKIP <test>: <reason>` line per skipped test, and last
# `N passed, N failed, N skipped`; exits non-zero when a test failed.
#
# Usage: tests/integration/run.sh [DIR [PATTERN]]   (default tests/integration 'test_*.py';
#        other unittest suites that use the harness, such as the Python SDK's, run the same way)
# Environment: DRIVER (the daemon's SANDBOX_DRIVER, default jail), SANDBOXD (the binary,
# default build/src/sandboxd); see harness.py for the rest.
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.." || exit 1

export DRIVER=${DRIVER:-jail}
dir=${1:-tests/integration}
pattern=${2:-test_*.py}
echo "$dir: driver $DRIVER, daemon ${SANDBOXD:-build/src/sandboxd}"

# The same as `python3 -m unittest discover -s DIR -p PATTERN -v`, with a result that counts
# each test once (a test with failing subtests is one failure).
exec python3 -u - "$dir" "$pattern" <<'PY'
import sys
import unittest


class CountingResult(unittest.TextTestResult):
    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.outcome = {}
        self.skip_reasons = []

    def _set(self, test, what):
        # A failure anywhere in a test decides it; a later success does not undo it.
        if self.outcome.get(test.id()) != "fail":
            self.outcome[test.id()] = what

    def addSuccess(self, test):
        super().addSuccess(test)
        self._set(test, "pass")

    def addFailure(self, test, err):
        super().addFailure(test, err)
        self._set(test, "fail")

    def addError(self, test, err):
        super().addError(test, err)
        self._set(test, "fail")

    def addSkip(self, test, reason):
        super().addSkip(test, reason)
        self._set(test, "skip")
        self.skip_reasons.append((test.id(), reason))

    def addExpectedFailure(self, test, err):
        super().addExpectedFailure(test, err)
        self._set(test, "pass")

    def addUnexpectedSuccess(self, test):
        super().addUnexpectedSuccess(test)
        self._set(test, "fail")

    def addSubTest(self, test, subtest, err):
        super().addSubTest(test, subtest, err)
        if err is not None:
            failure = not issubclass(err[0], unittest.SkipTest)
            self._set(test, "fail" if failure else "skip")


suite = unittest.defaultTestLoader.discover(sys.argv[1], pattern=sys.argv[2])
runner = unittest.TextTestRunner(verbosity=2, resultclass=CountingResult, stream=sys.stdout)
result = runner.run(suite)

counts = {"pass": 0, "fail": 0, "skip": 0}
for what in result.outcome.values():
    counts[what] += 1
for test_id, reason in result.skip_reasons:
    print(f"SKIP {test_id}: {reason}")
print(f"{counts['pass']} passed, {counts['fail']} failed, {counts['skip']} skipped")
sys.exit(1 if counts["fail"] else 0)
PY
