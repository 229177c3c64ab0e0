"""Checks that installed files agree with the binaries they describe.

    check.py env SANDBOXD ENV_FILE
        ENV_FILE (sandboxd.env) names every setting of `SANDBOXD --defaults` exactly once and
        nothing else: `#NAME=default` with the built-in default, or `NAME=value` (uncommented)
        for a value the package chooses.
    check.py manpages SANDBOX SANDBOXD SANDBOX_1 SANDBOXD_8
        sandbox(1) has a SYNOPSIS with a line for every command of `SANDBOX --help`, and
        sandboxd(8)'s ENVIRONMENT section gives every setting of `SANDBOXD --defaults` its
        default and a meaning.
    check.py completion SANDBOX BASH_FILE ZSH_FILE
        the actions the completion files offer for `keys` and `templates` are those of
        `SANDBOX keys --help` and `SANDBOX templates --help` (commands and options the
        completions read from --help when they run).
"""

import os
import re
import subprocess
import sys


def fail(msg):
    print("FAIL: " + msg)
    sys.exit(1)


def check_env(sandboxd, path):
    out = subprocess.run([sandboxd, "--defaults"], capture_output=True, text=True, check=True)
    defaults = dict(line.split("=", 1) for line in out.stdout.splitlines())
    seen = {}
    for no, line in enumerate(open(path), 1):
        line = line.rstrip("\n")
        m = re.fullmatch(r"(#?)([A-Z][A-Z0-9_]*)=(.*)", line)
        if not m:
            if line and not line.startswith("# ") and line != "#":
                fail(f"{path}:{no}: neither a setting nor a comment: {line!r}")
            continue
        commented, name, value = m.groups()
        if name not in defaults:
            fail(f"{path}:{no}: {name} is no setting of sandboxd (sandboxd --defaults)")
        if name in seen:
            fail(f"{path}:{no}: {name} again (first on line {seen[name]})")
        seen[name] = no
        if commented and value != defaults[name]:
            fail(f"{path}:{no}: {name}'s default is {defaults[name]!r}, not {value!r}")
    missing = [n for n in defaults if n not in seen]
    if missing:
        fail(f"{path} lacks {', '.join(missing)}")
    print(f"ok: {len(defaults)} settings")


def sections(path):
    """A roff page's sections: {NAME: [lines]}."""
    out, cur = {}, None
    for line in open(path, encoding="utf-8"):
        line = line.rstrip("\n")
        m = re.match(r'^\.SH\s+"?([^"]+)"?$', line)
        if m:
            cur = out.setdefault(m.group(1).strip(), [])
        elif cur is not None:
            cur.append(line)
    return out


def check_manpages(cli, sandboxd, page1, page8):
    out = subprocess.run([cli, "--help"], capture_output=True, text=True, check=True).stdout
    commands = re.findall(r"^  ([a-z]+)\s", out.split("commands:", 1)[1], re.M)
    synopsis = sections(page1).get("SYNOPSIS")
    if not synopsis:
        fail(f"{page1} has no SYNOPSIS")
    for c in commands:
        if not any(l.startswith(f"sandbox {c}") for l in synopsis):
            fail(f"{page1}: the SYNOPSIS has no line for `sandbox {c}`")
    env = sections(page8).get("ENVIRONMENT")
    if not env:
        fail(f"{page8} has no ENVIRONMENT section")
    out = subprocess.run([sandboxd, "--defaults"], capture_output=True, text=True,
                         check=True).stdout
    for name in (line.split("=", 1)[0] for line in out.splitlines()):
        try:
            i = env.index(f".B {name}")
        except ValueError:
            fail(f"{page8}: ENVIRONMENT does not list {name}")
        text = env[i + 1] if i + 1 < len(env) else ""
        if not re.match(r"^\(default: [^)]*\) \S", text):
            fail(f"{page8}: {name} has no default and meaning: {text!r}")
    print(f"ok: {len(commands)} commands in the SYNOPSIS, every setting explained")


def help_actions(cli, cmd):
    out = subprocess.run([cli, cmd, "--help"], capture_output=True, text=True, check=True).stdout
    if cmd == "keys":
        return sorted(set(re.findall(r"^  ([a-z]+)\b", out, re.M)))
    return sorted(set(re.findall(r"sandbox templates ([a-z]+) ", out)))


def check_completion(cli, bash, zsh):
    for cmd in ("keys", "templates"):
        want = help_actions(cli, cmd)
        for path, pattern in ((bash, rf"{cmd}\)\n.*?compgen -W '([^']*)'"),
                              (zsh, rf"{cmd}\) .*?compadd ([a-z ]+)")):
            m = re.search(pattern, open(path).read(), re.S)
            if not m:
                fail(f"{path}: no actions for {cmd}")
            got = sorted(m.group(1).split())
            if got != want:
                fail(f"{path}: {cmd} actions {got}, --help has {want}")
    print("ok: keys and templates actions")
    check_short_options(cli, bash)


# The short options the CLI takes, by command: each must be completed after a `-`.
SHORT_OPTIONS = {"run": "-e -t -u", "create": "-e -t -v", "exec": "-d -e -i -t -u",
                 "ls": "-r", "watch": "-r", "rm": "-r", "kill": "-s", "mcp": "-v"}
BASH_COMPLETION = "/usr/share/bash-completion/bash_completion"


def check_short_options(cli, bash):
    """What the bash completion offers after `sandbox COMMAND -`, run in bash."""
    if not os.path.exists(BASH_COMPLETION):
        fail(f"{BASH_COMPLETION} is missing (Debian package bash-completion)")
    script = f"""
. {BASH_COMPLETION}
. {bash}
for c in {' '.join(SHORT_OPTIONS)}; do
    COMP_WORDS=({cli} "$c" -); COMP_CWORD=2; COMP_LINE="${{COMP_WORDS[*]}}"
    COMP_POINT=${{#COMP_LINE}}; COMPREPLY=(); _sandbox
    echo "$c ${{COMPREPLY[*]}}"
done
"""
    out = subprocess.run(["bash", "-c", script], capture_output=True, text=True, check=True).stdout
    got = {line.split()[0]: set(line.split()[1:]) for line in out.splitlines() if line.strip()}
    for cmd, want in SHORT_OPTIONS.items():
        missing = set(want.split()) - got.get(cmd, set())
        if missing:
            fail(f"{bash}: `sandbox {cmd} -` does not offer {' '.join(sorted(missing))}")
    print(f"ok: short options of {len(SHORT_OPTIONS)} commands")


if __name__ == "__main__":
    if sys.argv[1] == "env":
        check_env(sys.argv[2], sys.argv[3])
    elif sys.argv[1] == "manpages":
        check_manpages(*sys.argv[2:6])
    else:
        check_completion(sys.argv[2], sys.argv[3], sys.argv[4])
