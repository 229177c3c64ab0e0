#!/usr/bin/env python3
"""`make run` builds what running needs and nothing of the tests.

    check_make_run.py SOURCE_ROOT BUILD_DIR

Reads the commands `make -n run` would run (with BUILD=BUILD_DIR), and checks that
  - the dependencies it installs are the Debian packages and the dashboard's npm packages
    only (`scripts/install-deps.sh --debian --ui`), not the tests' npm packages;
  - its one ninja command names targets, and what ninja would run for them (`ninja -t
    commands`) builds sandboxd, the agent, the CLI and the dashboard, and compiles nothing
    of tests/ or bench/.
Prints `ok: ...` or `FAIL: ...` and exits 1 on a failure."""

import re
import subprocess
import sys


def fail(msg):
    print("FAIL: " + msg)
    sys.exit(1)


def main():
    root, build = sys.argv[1], sys.argv[2]
    out = subprocess.run(["make", "-n", "-C", root, "--no-print-directory", "run",
                          f"BUILD={build}"], capture_output=True, text=True, check=True).stdout
    deps = [l.split() for l in out.splitlines() if "install-deps.sh" in l]
    if not deps:
        fail("make run installs nothing (no scripts/install-deps.sh)")
    for d in deps:
        args = d[d.index(next(a for a in d if a.endswith("install-deps.sh"))) + 1:]
        if sorted(args) != ["--debian", "--ui"]:
            fail(f"make run installs with `{' '.join(d)}`, not --debian --ui: the tests' npm "
                 "packages are not needed to run")
    ninja = [l for l in out.splitlines() if re.match(r"^\s*ninja\s", l)]
    if len(ninja) != 1:
        fail(f"expected one ninja command in make -n run, found {ninja}")
    words = ninja[0].split()
    targets = [w for w in words[words.index("-C") + 2:] if not w.startswith("-")]
    if not targets:
        fail(f"`{ninja[0].strip()}` builds every default target, the tests' among them")
    cmds = subprocess.run(["ninja", "-C", build, "-t", "commands", *targets],
                          capture_output=True, text=True, check=True).stdout
    for line in cmds.splitlines():
        if re.search(r"(^|[\s/])(\.\./)?(tests|bench)/", line):
            fail(f"make run would build something of the tests: {line[:200]}")
    for want in ("src/sandboxd", "cli/sandbox", "agent/sandbox-agent", "ui/build.sh"):
        if want not in cmds:
            fail(f"make run would not build {want}")
    print(f"ok: make run builds {' '.join(targets)} ({len(cmds.splitlines())} commands)")


if __name__ == "__main__":
    main()
