#!/usr/bin/env python3
"""The ENVIRONMENT section of sandboxd(8), as a help2man include: every setting that
`SANDBOXD --defaults` prints, in its order, with its default and its meaning from the tables
of the documents (a row `| \\`NAME\\` | default | ... | meaning |`; several names may share
a row). A setting no document explains is an error: the page would list it without meaning.

    manpage_env.py SANDBOXD DOCUMENT... > include
"""

import re
import subprocess
import sys

ROW = re.compile(r"^\|\s*((?:`[A-Z][A-Z0-9_]*`(?:,\s*)?)+)\s*\|(.*)\|\s*$")


def plain(md):
    """Markdown of a table cell as roff text: links to their text, code and emphasis marks
    dropped, roff's special characters escaped."""
    md = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", md)
    md = md.replace("`", "").replace("**", "").replace("\\|", "|")
    md = md.replace("\\", "\\e")
    return md.replace("-", "\\-")


def meanings(docs):
    found = {}
    for doc in docs:
        with open(doc, encoding="utf-8") as f:
            for line in f:
                m = ROW.match(line.rstrip("\n"))
                if not m:
                    continue
                cells = [c.strip() for c in m.group(2).split("|")]
                for name in re.findall(r"`([A-Z][A-Z0-9_]*)`", m.group(1)):
                    found.setdefault(name, cells[-1])
    return found


def main():
    sandboxd, docs = sys.argv[1], sys.argv[2:]
    out = subprocess.run([sandboxd, "--defaults"], capture_output=True, text=True,
                         check=True).stdout
    defaults = [line.split("=", 1) for line in out.splitlines()]
    known = meanings(docs)
    missing = [name for name, _ in defaults if name not in known]
    if missing:
        sys.exit(f"manpage_env.py: no meaning in {', '.join(docs)} for {', '.join(missing)}")
    print("[=ENVIRONMENT]")
    print("All configuration comes from these environment variables, read and checked once at")
    print("start; the service reads them from /etc/agent\\-sandbox/sandboxd.env. An unset or")
    print("empty variable takes its default; a bad value stops the daemon, saying why.")
    for name, default in defaults:
        print(".TP")
        print(f".B {name}")
        shown = plain(default) if default else "unset"
        print(f"(default: {shown}) {plain(known[name])}")


if __name__ == "__main__":
    main()
