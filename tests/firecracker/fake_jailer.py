#!/usr/bin/env python3
"""A stand-in for Firecracker's jailer, for contract tests where the real one is absent.

It checks its argv the way the jailer parses it, records it, lays out the chroot the jailer
would (<chroot-base>/<exec name>/<id>/root), starts the exec file (the fake Firecracker) with
the chroot in FAKE_FC_ROOT instead of really chrooting, places it in the cgroups the jailer
would (<controller's hierarchy>/<parent cgroup>/<id> with each --cgroup value written, or
<cgroup2 mount>/<parent cgroup>/<id> with version 2), writes <root>/firecracker.pid and
exits, as the jailer does with --new-pid-ns. It records what it placed where.
"""

import json
import os
import subprocess
import sys

KNOWN = {"--id", "--exec-file", "--uid", "--gid", "--chroot-base-dir", "--netns",
         "--cgroup-version", "--parent-cgroup", "--cgroup", "--resource-limit"}
FLAGS = {"--new-pid-ns", "--daemonize"}


def fail(msg):
    print(f"fake jailer: {msg}", file=sys.stderr)
    sys.exit(1)


def cgroup_mounts():
    """{controller: mount point} of the v1 hierarchies, and "" for the cgroup2 mount."""
    found = {}
    with open("/proc/self/mountinfo", encoding="utf-8") as f:
        for line in f:
            left, _, right = line.partition(" - ")
            fstype, _, options = right.split()[:3]
            mount = left.split()[4]
            if fstype == "cgroup2":
                found.setdefault("", mount)
            elif fstype == "cgroup":
                for opt in options.split(","):
                    found.setdefault(opt, mount)
    return found


def place(opts, pid):
    """Puts pid in the jailer's cgroups and writes their values; returns the directories."""
    version = opts.get("--cgroup-version", "1")
    mounts = cgroup_mounts()
    dirs = []
    for c in opts["--cgroup"]:
        key, value = c.split("=", 1)
        base = mounts.get("" if version == "2" else key.split(".")[0])
        if not base:
            fail(f"no cgroup hierarchy for {key}")
        d = os.path.join(base, opts.get("--parent-cgroup", ""), opts["--id"])
        os.makedirs(d, exist_ok=True)
        with open(os.path.join(d, key), "w", encoding="ascii") as f:
            f.write(value)
        if d not in dirs:
            dirs.append(d)
    for d in dirs:
        with open(os.path.join(d, "cgroup.procs"), "w", encoding="ascii") as f:
            f.write(str(pid))
    return dirs


def main():
    argv = sys.argv[1:]
    if "--" in argv:
        i = argv.index("--")
        ours, fc_args = argv[:i], argv[i + 1:]
    else:
        ours, fc_args = argv, []
    opts = {"--cgroup": [], "--resource-limit": []}
    flags = set()
    i = 0
    while i < len(ours):
        a = ours[i]
        if a in FLAGS:
            flags.add(a)
            i += 1
            continue
        if a not in KNOWN:
            fail(f"unknown argument {a}")
        if i + 1 >= len(ours):
            fail(f"{a} needs a value")
        if a in ("--cgroup", "--resource-limit"):
            opts[a].append(ours[i + 1])
        else:
            opts[a] = ours[i + 1]
        i += 2
    for req in ("--id", "--exec-file", "--uid", "--gid"):
        if req not in opts:
            fail(f"missing {req}")
    if opts.get("--cgroup-version", "1") not in ("1", "2"):
        fail("--cgroup-version must be 1 or 2")
    for c in opts["--cgroup"]:
        if "=" not in c or "." not in c.split("=")[0]:
            fail(f"bad --cgroup {c}")
    log = os.environ.get("FAKE_FC_LOG")
    if log:
        with open(log, "a") as f:
            f.write(json.dumps({"jailer": sys.argv}) + "\n")
    exe = opts["--exec-file"]
    base = opts.get("--chroot-base-dir", "/srv/jailer")
    root = os.path.join(base, os.path.basename(exe), opts["--id"], "root")
    os.makedirs(os.path.join(root, "run"), exist_ok=True)
    env = dict(os.environ, FAKE_FC_ROOT=root, FAKE_FC_ID=opts["--id"],
               FAKE_FC_NETNS=opts.get("--netns", ""))
    console = open(os.path.join(os.path.dirname(root), "fake-fc.log"), "a")
    child = subprocess.Popen([exe, *fc_args], env=env, stdin=subprocess.DEVNULL,
                             stdout=console, stderr=console, start_new_session=True)
    dirs = place(opts, child.pid)
    if log:
        with open(log, "a") as f:
            f.write(json.dumps({"placed": child.pid, "id": opts["--id"], "cgroups": dirs}) + "\n")
    with open(os.path.join(root, "firecracker.pid"), "w") as f:
        f.write(f"{child.pid}\n")


if __name__ == "__main__":
    main()
