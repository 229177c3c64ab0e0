#!/usr/bin/env python3
"""Checks the layering of sandboxd's modules (the directories of src/, and config, loop and
main at its top): no module's includes lead back to it, and the drivers include nothing of
the modules above them (session, net, api). Prints each problem; exits 1 when there is one.

Usage: scripts/check-layers.py [SRC_DIR]   (default src)"""

import os
import re
import sys

ABOVE_DRIVERS = {"session", "net", "api", "http", "auth", "main"}


def module_of(rel):
    return os.path.splitext(rel)[0] if "/" not in rel else rel.split("/")[0]


def includes(src):
    deps = {}
    for root, _, files in os.walk(src):
        for f in files:
            if not f.endswith((".c", ".h")):
                continue
            path = os.path.join(root, f)
            mod = module_of(os.path.relpath(path, src))
            with open(path, encoding="utf-8", errors="replace") as fh:
                for inc in re.findall(r'^#include "([^"]+)"', fh.read(), re.M):
                    other = module_of(inc)
                    if other != mod:
                        deps.setdefault(mod, {}).setdefault(other, path)
    return deps


def main():
    src = sys.argv[1] if len(sys.argv) > 1 else "src"
    deps = includes(src)
    problems = []
    for target, where in deps.get("driver", {}).items():
        if target in ABOVE_DRIVERS:
            problems.append(f"{where}: a driver includes {target}/, which is above the drivers")
    # A cycle: a path of includes from a module back to itself.
    seen = set()
    for start in sorted(deps):
        stack = [(start, [start])]
        while stack:
            node, path = stack.pop()
            for nxt in deps.get(node, {}):
                if nxt == start:
                    cycle = " -> ".join(path + [start])
                    key = frozenset(path)
                    if key not in seen:
                        seen.add(key)
                        problems.append(f"include cycle: {cycle}")
                elif nxt not in path:
                    stack.append((nxt, path + [nxt]))
    for p in problems:
        print(p)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
