"""What a daemon leaves on the host: its sandboxes' processes, cgroups, namespaces and mounts.

Only things that can be tied to one daemon are looked at (its sandbox ids, its descendants,
its temporary directories), so tests on other daemons running at the same time do not
disturb the checks."""

import glob
import os
import re
import time

CGROUP_ROOT = "/sys/fs/cgroup"
CGROUP_PARENT = "agent-sandbox"
NS_KINDS = ("mnt", "pid", "net", "uts", "ipc", "user", "cgroup", "time")

# How sandbox ids appear in the daemon's log ("sandbox sb-0123456789ab ...").
_SANDBOX_ID = re.compile(r"\b(sb-[0-9a-f]{6,32})\b")


def sandbox_ids(log_text):
    """Every sandbox id the daemon's log names, in order of first appearance."""
    seen = []
    for m in _SANDBOX_ID.finditer(log_text):
        if m.group(1) not in seen:
            seen.append(m.group(1))
    return seen


def cgroup_parents():
    """The agent-sandbox directories of every mounted hierarchy (v1: one per controller), and
    on cgroup v2 those below a daemon's own delegated cgroup (a unit or a scope of a systemd
    slice: docs/hosts.md#cgroups)."""
    found = glob.glob(os.path.join(CGROUP_ROOT, "*", CGROUP_PARENT))
    v2 = os.path.join(CGROUP_ROOT, CGROUP_PARENT)
    if os.path.isdir(v2):
        found.append(v2)
    found += glob.glob(os.path.join(CGROUP_ROOT, "*.slice", "*", CGROUP_PARENT))
    return sorted(p for p in found if os.path.isdir(p))


def cgroup_dirs(sandbox_id):
    """The cgroup directories of one sandbox that exist now."""
    return [os.path.join(p, sandbox_id) for p in cgroup_parents()
            if os.path.isdir(os.path.join(p, sandbox_id))]


def cgroup_pids(dirs):
    pids = set()
    for d in dirs:
        try:
            with open(os.path.join(d, "cgroup.procs"), encoding="ascii") as f:
                pids.update(int(x) for x in f.read().split())
        except OSError:
            pass
    return pids


def start_time(pid):
    """The process's start time in clock ticks since boot, or None when it is gone."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as f:
            text = f.read()
    except OSError:
        return None
    # The command name may hold spaces and parentheses: fields start after the last ')'.
    fields = text[text.rfind(")") + 2:].split()
    return int(fields[19])


def ppid(pid):
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as f:
            text = f.read()
    except OSError:
        return None
    return int(text[text.rfind(")") + 2:].split()[1])


def all_pids():
    return [int(p) for p in os.listdir("/proc") if p.isdigit()]


def descendants(root_pid):
    """Processes below root_pid, as {pid: start_time}."""
    children = {}
    for pid in all_pids():
        parent = ppid(pid)
        if parent is not None:
            children.setdefault(parent, []).append(pid)
    out = {}
    todo = list(children.get(root_pid, []))
    while todo:
        pid = todo.pop()
        st = start_time(pid)
        if st is not None:
            out[pid] = st
        todo.extend(children.get(pid, []))
    return out


def alive(procs):
    """The processes of {pid: start_time} that still run (same pid, same start)."""
    return {pid: st for pid, st in procs.items() if start_time(pid) == st}


def ns_inodes(pid):
    """{kind: "net:[4026...]"} of one process."""
    out = {}
    for kind in NS_KINDS:
        try:
            out[kind] = os.readlink(f"/proc/{pid}/ns/{kind}")
        except OSError:
            pass
    return out


def sandbox_namespaces(pids):
    """The namespaces the sandbox processes are in that the host itself is not in."""
    host = set(ns_inodes(1).values()) | set(ns_inodes(os.getpid()).values())
    found = set()
    for pid in pids:
        found.update(v for v in ns_inodes(pid).values() if v not in host)
    return found


def process_sandboxes(pid):
    """The sandbox ids in whose cgroups a process is."""
    try:
        with open(f"/proc/{pid}/cgroup", encoding="utf-8", errors="replace") as f:
            text = f.read()
    except OSError:
        return set()
    return set(re.findall(rf"/{CGROUP_PARENT}/([^/\n]+)", text))


def namespace_holders(namespaces, own_ids=()):
    """Who still keeps any of these namespaces alive: processes in them, nsfs mounts of them.

    The kernel reuses the inode number of a namespace that is gone, so a process of another
    sandbox (in the cgroup of a sandbox id not in own_ids) found under a recorded number is in
    a new namespace, not in ours, and does not count."""
    holders = []
    if not namespaces:
        return holders
    own = set(own_ids)
    for pid in all_pids():
        for kind, ns in ns_inodes(pid).items():
            if ns in namespaces:
                others = process_sandboxes(pid) - own
                if others:
                    continue
                holders.append(f"process {pid} is in {ns}")
    # A network namespace's name ("as-" and the sandbox id's random part) says whose it is.
    own_names = {"as-" + (i[3:] if i.startswith("sb-") else i) for i in own}
    for line in mountinfo():
        parts = line.split()
        # The kind too: every kind of namespace draws its inode number from one pool, so a
        # number of ours that was freed can come back as another kind's.
        if " - nsfs " not in line or parts[3] not in namespaces:
            continue
        name = os.path.basename(parts[4])
        if name.startswith("as-") and name not in own_names and cgroup_dirs("sb-" + name[3:]):
            continue  # a sandbox alive now made it, under a number freed by ours
        holders.append(f"mount {parts[4]} holds {parts[3]}")
    return holders


def mountinfo():
    try:
        with open("/proc/self/mountinfo", encoding="utf-8", errors="replace") as f:
            return f.read().splitlines()
    except OSError:
        return []


def mounts_mentioning(words):
    """Mount lines (as the test process sees them) that contain any of words."""
    words = [w for w in words if w]
    return [line for line in mountinfo() if any(w in line for w in words)]


def netns_entries(words):
    """Named network namespaces (/run/netns) whose names contain any of words; a sandbox id
    ("sb-" and its random part) also matches its namespace's name ("as-" and that part)."""
    try:
        names = os.listdir("/run/netns")
    except OSError:
        return []
    words = [w for w in words if w]
    words += ["as-" + w[3:] for w in words if w.startswith("sb-")]
    return [n for n in names if any(w in n for w in words)]


class Footprint:
    """What a set of sandboxes holds on the host, recorded while they run."""

    def __init__(self):
        self.cgroups = set()
        self.procs = {}
        self.namespaces = set()

    def record_sandbox(self, sandbox_id):
        dirs = cgroup_dirs(sandbox_id)
        self.cgroups.update(dirs)
        pids = cgroup_pids(dirs)
        for pid in pids:
            st = start_time(pid)
            if st is not None:
                self.procs[pid] = st
        self.namespaces |= sandbox_namespaces(pids)

    def record_descendants(self, daemon_pid):
        procs = descendants(daemon_pid)
        self.procs.update(procs)
        self.namespaces |= sandbox_namespaces(procs)

    def leftovers(self, sandbox_ids_=(), words=()):
        """A list of what remains of it now (empty when everything is gone)."""
        left = []
        left += [f"cgroup {d}" for d in sorted(self.cgroups) if os.path.isdir(d)]
        for sid in sandbox_ids_:
            left += [f"cgroup {d}" for d in cgroup_dirs(sid) if d not in self.cgroups]
        left += [f"process {pid} ({_comm(pid)})" for pid in sorted(alive(self.procs))]
        left += namespace_holders(self.namespaces, sandbox_ids_)
        left += [f"mount: {m}" for m in mounts_mentioning(list(sandbox_ids_) + list(words))]
        left += [f"netns {n}" for n in netns_entries(list(sandbox_ids_))]
        return left


def _comm(pid):
    try:
        with open(f"/proc/{pid}/comm", encoding="utf-8", errors="replace") as f:
            return f.read().strip()
    except OSError:
        return "?"


def wait_all_gone(footprint, sandbox_ids_=(), words=(), timeout=30):
    """Waits until nothing of footprint remains (at most timeout seconds); returns what is
    left then (an empty list when everything went)."""
    deadline = time.monotonic() + timeout
    while True:
        left = footprint.leftovers(sandbox_ids_, words)
        if not left or time.monotonic() >= deadline:
            return left
        time.sleep(0.2)
