#!/usr/bin/env python3
"""Counts test cases in a `meson test` JSON log (meson-logs/<logbase>.json).

With --cmocka, a test executable counts as the cases its cmocka summaries report
("[  PASSED  ] N test(s).", "[  FAILED  ] N test(s)", "[  SKIPPED ] N test(s)"); without, or
when an executable printed no summary (it crashed, or is not a cmocka program), it counts as
one case judged by its result. An executable that failed while its summaries report no
failure (a sanitizer report at exit, a timeout) adds one failed case.

Prints one line per failed or skipped case, then `PASSED FAILED SKIPPED` as the last line.
"""

import json
import re
import sys

SUMMARY = re.compile(r"^\[  (PASSED|FAILED|SKIPPED) *\] (\d+) test\(s\)", re.M)
NAMED = re.compile(r"^\[  (FAILED|SKIPPED) *\] (?!\d+ test\(s\))(.+)$", re.M)
GOOD = {"OK", "EXPECTEDFAIL"}


def count(entry, cmocka):
    name = entry.get("name", "?")
    result = entry.get("result", "ERROR")
    text = (entry.get("stdout") or "") + "\n" + (entry.get("stderr") or "")
    notes = []
    n = {"PASSED": 0, "FAILED": 0, "SKIPPED": 0}
    found = False
    if cmocka:
        for kind, num in SUMMARY.findall(text):
            n[kind] += int(num)
            found = True
        for kind, case in NAMED.findall(text):
            note = f"{kind.lower()}: {name}: {case.strip()}"
            if note not in notes:  # cmocka names each case twice: as it runs, and at the end
                notes.append(note)
    if not found:
        if result in GOOD:
            n["PASSED"] = 1
        elif result == "SKIP":
            n["SKIPPED"] = 1
            notes.append(f"skipped: {name}")
        else:
            n["FAILED"] = 1
            notes.append(f"failed: {name} ({result}, exit status {entry.get('returncode')})")
    elif result not in GOOD and result != "SKIP" and n["FAILED"] == 0:
        n["FAILED"] = 1
        notes.append(f"failed: {name} ({result}, exit status {entry.get('returncode')} "
                     "after its cases passed)")
    return n, notes


def main():
    args = sys.argv[1:]
    cmocka = "--cmocka" in args
    paths = [a for a in args if a != "--cmocka"]
    total = {"PASSED": 0, "FAILED": 0, "SKIPPED": 0}
    for path in paths:
        with open(path, encoding="utf-8", errors="replace") as f:
            for line in f:
                line = line.strip()
                if not line:
                    continue
                n, notes = count(json.loads(line), cmocka)
                for k in total:
                    total[k] += n[k]
                for note in notes:
                    print(note)
    print(total["PASSED"], total["FAILED"], total["SKIPPED"])


if __name__ == "__main__":
    main()
