"""The unittest runner of the Python suites (integration, auth, cli, metrics, net, e2e, ...).

    python3 -m runner DIR [PATTERN]       discovers DIR/PATTERN (default test_*.py) and runs it

Prints unittest's verbose output, then the slowest tests with their times, one
`SKIP <test>: <reason>` line per skipped test and, last, `N passed, N failed, N skipped`,
counting each test once (a test with failing subtests is one failure). Exits 1 when a test
failed.

Tags say what a test exercises, so that a suite can be run in part:

    @runner.tag("driver")            on a test method or a TestCase class

TEST_TAGS (comma-separated) runs only the tests with one of those tags; a tag written `-vm`
leaves out the tests that carry it instead. The tag "driver"
marks the tests of what differs between drivers (processes, signals, limits, files, the
sandbox's own lifetime): the VM suites run those on every VM driver instead of the whole
integration suite (tests/e2e/run.sh). A new test of driver behaviour carries it.

Standard library only.
"""

import os
import sys
import time
import unittest

TAG_ATTR = "test_tags"
SLOWEST = 8


def tag(*names):
    """Decorator adding tags to a test method or a TestCase class."""

    def mark(obj):
        setattr(obj, TAG_ATTR, frozenset(getattr(obj, TAG_ATTR, ())) | frozenset(names))
        return obj

    return mark


def tags_of(test):
    method = getattr(test, getattr(test, "_testMethodName", ""), None)
    return frozenset(getattr(method, TAG_ATTR, ())) | frozenset(getattr(type(test), TAG_ATTR, ()))


def _flatten(suite):
    for item in suite:
        if isinstance(item, unittest.TestSuite):
            yield from _flatten(item)
        else:
            yield item


def select(suite, wanted):
    """The tests of suite that the tags in wanted choose, in their order: with any plain tag,
    those that carry one of them; never those that carry a tag given as `-tag`. A test that
    stands for a module that failed to import is always kept, so that the failure shows."""
    if not wanted:
        return suite
    include = frozenset(t for t in wanted if not t.startswith("-"))
    exclude = frozenset(t[1:] for t in wanted if t.startswith("-"))
    kept = unittest.TestSuite()
    for test in _flatten(suite):
        tags = tags_of(test)
        if type(test).__name__ in ("_FailedTest", "ModuleImportFailure"):
            kept.addTest(test)
        elif (not include or tags & include) and not tags & exclude:
            kept.addTest(test)
    return kept


def wanted_tags():
    raw = os.environ.get("TEST_TAGS", "")
    return frozenset(t.strip() for t in raw.split(",") if t.strip())


class CountingResult(unittest.TextTestResult):
    """Counts each test once and times it."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.outcome = {}
        self.skip_reasons = []
        self.seconds = {}
        self._started = {}

    def _set(self, test, what):
        # A failure anywhere in a test decides it; a later success does not undo it.
        if self.outcome.get(test.id()) != "fail":
            self.outcome[test.id()] = what

    def startTest(self, test):
        self._started[test.id()] = time.monotonic()
        super().startTest(test)

    def stopTest(self, test):
        super().stopTest(test)
        began = self._started.pop(test.id(), None)
        if began is not None:
            self.seconds[test.id()] = time.monotonic() - began

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


def run(suite, late_failures=None, stream=None):
    """Runs suite (narrowed to TEST_TAGS), prints the report and returns the exit status.
    late_failures: called after the tests, returns messages of failures found outside any
    test (each counts as one)."""
    stream = stream or sys.stdout
    wanted = wanted_tags()
    suite = select(suite, wanted)
    if wanted:
        print(f"tests chosen by tags {', '.join(sorted(wanted))}: {suite.countTestCases()}",
              file=stream, flush=True)
    runner = unittest.TextTestRunner(verbosity=2, resultclass=CountingResult, stream=stream)
    result = runner.run(suite)

    counts = {"pass": 0, "fail": 0, "skip": 0}
    for what in result.outcome.values():
        counts[what] += 1
    # A class or module fixture that skipped or failed is reported as one test.
    for test, reason in result.skipped:
        if test.id() not in result.outcome:
            counts["skip"] += 1
            result.skip_reasons.append((test.id(), reason))
    for test, _ in result.errors:
        if test.id() not in result.outcome:
            counts["fail"] += 1
    for message in late_failures() if late_failures else ():
        print(message, file=stream)
        counts["fail"] += 1

    slow = sorted(result.seconds.items(), key=lambda kv: kv[1], reverse=True)[:SLOWEST]
    if slow:
        print("slowest tests:", file=stream)
        for test_id, secs in slow:
            print(f"  {secs:7.2f}s  {test_id}", file=stream)
    for test_id, reason in result.skip_reasons:
        print(f"SKIP {test_id}: {reason}", file=stream)
    print(f"{counts['pass']} passed, {counts['fail']} failed, {counts['skip']} skipped",
          file=stream, flush=True)
    return 1 if counts["fail"] else 0


def main(argv):
    directory = argv[1] if len(argv) > 1 else "tests/integration"
    pattern = argv[2] if len(argv) > 2 else "test_*.py"
    suite = unittest.defaultTestLoader.discover(directory, pattern=pattern)
    return run(suite)


if __name__ == "__main__":
    sys.exit(main(sys.argv))
