#!/usr/bin/env python3
"""Checks the layering of sandboxd's modules (the directories of src/, and config, loop, notify
and main at its top) against the order docs/architecture.md draws: a module includes only
modules below it. Prints each problem; exits 1 when there is one.

A problem is an include of a module from one at its level or below it (an upward edge), and a
module the table does not place. An include cycle between modules always has such an edge,
so it is found too. LAYERS is the table,
top first; modules on one line share a level and include nothing of each other.

Usage: scripts/check-layers.py [SRC_DIR]   (default src)
       scripts/check-layers.py --self-test (checks that the check fails on an upward include)"""

import os
import re
import shutil
import sys
import tempfile

# The layers of docs/architecture.md ("Layers"), top first. Keep the two in step.
LAYERS = [
    ["main"],
    ["api"],
    ["http"],
    ["auth"],
    ["session"],
    ["cluster"],
    ["net"],
    ["driver"],
    ["guest"],
    ["template"],
    ["store"],
    ["metrics"],
    ["notify", "loop"],
    ["config"],
    ["util"],
]

LEVEL = {m: i for i, mods in enumerate(LAYERS) for m in mods}


def module_of(rel):
    return os.path.splitext(rel)[0] if "/" not in rel else rel.split("/")[0]


def includes(src):
    """{module: {included module: first file that includes it}}, and every module seen."""
    deps, seen = {}, set()
    for root, _, files in os.walk(src):
        for f in sorted(files):
            if not f.endswith((".c", ".h")):
                continue
            path = os.path.join(root, f)
            mod = module_of(os.path.relpath(path, src))
            seen.add(mod)
            with open(path, encoding="utf-8", errors="replace") as fh:
                for inc in re.findall(r'^\s*#\s*include\s+"([^"]+)"', fh.read(), re.M):
                    if "/" not in inc and not os.path.exists(os.path.join(src, inc)):
                        continue  # a file of the same directory ("h1.h")
                    other = module_of(inc)
                    if other != mod:
                        deps.setdefault(mod, {}).setdefault(other, path)
    return deps, seen


def problems_of(src):
    deps, seen = includes(src)
    problems = []
    for mod in sorted(seen | {t for d in deps.values() for t in d}):
        if mod not in LEVEL:
            problems.append(f"module {mod}/ is not in the table of layers (scripts/check-layers.py)")
    for mod in sorted(deps):
        for target, where in sorted(deps[mod].items()):
            if mod in LEVEL and target in LEVEL and LEVEL[target] <= LEVEL[mod]:
                how = "at its own level" if LEVEL[target] == LEVEL[mod] else "above it"
                problems.append(f"{where}: {mod}/ includes {target}/, which is {how}")
    return problems


def self_test():
    """The check passes a tree that keeps the order, and fails one upward include, one
    include at the same level and a module the table does not know."""
    made = []

    def tree(files):
        d = tempfile.mkdtemp(prefix="check-layers-")
        made.append(d)
        for rel, text in files.items():
            os.makedirs(os.path.dirname(os.path.join(d, rel)), exist_ok=True)
            with open(os.path.join(d, rel), "w") as fh:
                fh.write(text)
        return d

    good = {
        "api/a.c": '#include "session/s.h"\n#include "http/h.h"\n',
        "session/s.h": '#include "util/u.h"\n',
        "http/h.h": '#include "h1.h"\n#include "util/u.h"\n',
        "http/h1.h": "",
        "util/u.h": "",
        "main.c": '#include "api/a.h"\n#include "config.h"\n',
        "config.h": '#include "util/u.h"\n',
    }
    cases = {
        "upward": ({"session/x.c": '#include "api/a.h"\n'}, "session/ includes api/, which is above it"),
        "same level": ({"loop.c": '#include "notify.h"\n', "notify.h": ""}, "at its own level"),
        "unknown": ({"widgets/w.c": '#include "util/u.h"\n'}, "module widgets/ is not in the table"),
    }
    failed = []
    if problems_of(tree(good)):
        failed.append("a tree in order: " + "; ".join(problems_of(tree(good))))
    for name, (extra, want) in cases.items():
        got = problems_of(tree({**good, **extra}))
        if not any(want in p for p in got):
            failed.append(f"{name}: expected a problem with `{want}`, got {got}")
    for d in made:
        shutil.rmtree(d, ignore_errors=True)
    for f in failed:
        print("self-test:", f)
    return 1 if failed else 0


def main():
    if sys.argv[1:] == ["--self-test"]:
        return self_test()
    src = sys.argv[1] if len(sys.argv) > 1 else "src"
    problems = problems_of(src)
    for p in problems:
        print(p)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
