#!/usr/bin/env python3
"""Builds the named bundled templates unless their builds are current, as the template
suites do (tests/templates/template_builds.py: once per change of their inputs, under their
lock): scripts/ensure-templates.py NAME... Prints a line per template; exits 1 on the first
that fails to build, with the end of its builder's output."""

import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests",
                                "templates"))

import template_builds  # noqa: E402


def main():
    for name in sys.argv[1:]:
        try:
            b = template_builds.ensure(name)
        except AssertionError as e:
            print(f"{name}: {e}", flush=True)
            return 1
        print(f"{name}: " + (f"built in {b.seconds:.0f} s" if b.built else "up to date"),
              flush=True)
        b.release()
    return 0


if __name__ == "__main__":
    sys.exit(main())
