#!/usr/bin/env python3
"""What sessions cost as their number grows: idle jail sessions (base template, networking
off) created back to back by one client, with a table at each checkpoint.

At each checkpoint (default 100, 1,000, 4,000, 8,000 sessions alive) it prints:

  creates/s        over the last batch of creations before the checkpoint (up to 500)
  MiB/session      host memory no longer available (MemAvailable's drop since the daemon
                   started, the daemon's own growth included) divided by the sessions alive
  unreclaimable    the drop of MemAvailable minus what the kernel could still reclaim is not
                   separated; the slab's unreclaimable part (SUnreclaim) per session is shown
                   beside it
  daemon RSS, fds  the daemon's resident set and open descriptors
  execute p50/p99  `true` in 200 sessions picked at random among those alive, idle until then
  again p50/p99    a second `true` right after each of those, in the same session: the
                   execute's own path, with the agent warm
  spawn p50/p99    the baseline: posix_spawn + waitpid of /bin/true on the host, once after
                   each execute (interleaved), so that both see the host as it is then
  others' CPU      CPU time taken during the last batch by processes that are neither the
                   daemon's (its sandboxes included) nor the benchmark's, in percent of one
                   CPU, and the busiest of them

It stops early, and says so, when MemAvailable would fall below --reserve (default: the larger
of 2 GiB and 10% of the machine), or when the daemon refuses a session (its admission
watermark, whose reason is printed), so that it can never take the machine down.

Then, with the sessions of the checkpoints destroyed: sessions created per second by 8
concurrent clients, and executes per second across 100 sessions by 8 concurrent clients.

--baseline measures the machine without agent-sandbox: instead of sessions it makes bare
holders, each one sleeping process in new user, mount, pid, network, ipc, uts and cgroup
namespaces, in memory, cpu and pids cgroups of its own with a sandbox's CPU quota and pids
limit, pivoted into a tmpfs root with procfs, a tmpfs /tmp and devpts mounted (five
superblocks with the ipc namespace's mqueue, as a jail has), and prints the same table (the
spawn baseline in place of the execute). What the kernel and the host's other processes charge
for that many namespaces shows there, beside what the sessions cost.

Usage: python3 bench/density/density.py [--sessions 100,1000,4000,8000] [--storage tmpfs|disk]
                                        [--driver jail|qemu] [--slabs] [--baseline]
Environment: SANDBOXD, FIRECRACKER_ARTIFACTS_DIR as for the integration tests (jail driver).
"""

import argparse
import json
import math
import os
import random
import subprocess
import sys
import threading
import time

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "tests", "integration"))
sys.path.insert(0, os.path.join(ROOT, "bench", "exec"))

import harness  # noqa: E402
from bench import Client  # noqa: E402  one keep-alive connection

MiB = 1024 * 1024


def percentile(samples, p):
    s = sorted(samples)
    k = max(0, min(len(s) - 1, math.ceil(p / 100 * len(s)) - 1))
    return s[k]


def meminfo():
    out = {}
    with open("/proc/meminfo") as f:
        for line in f:
            name, rest = line.split(":", 1)
            out[name] = int(rest.split()[0]) * 1024
    return out


def slabs():
    """Bytes of each slab cache (active objects times object size)."""
    out = {}
    with open("/proc/slabinfo") as f:
        for line in f.readlines()[2:]:
            p = line.split()
            out[p[0]] = int(p[1]) * int(p[3])
    return out


def proc_rss(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    return 0


def proc_fds(pid):
    return len(os.listdir(f"/proc/{pid}/fd"))


def host_spawn():
    """One posix_spawn + waitpid of /bin/true on the host, in milliseconds: the baseline."""
    t0 = time.perf_counter_ns()
    pid = os.posix_spawn("/bin/true", ["true"], os.environ)
    os.waitpid(pid, 0)
    return (time.perf_counter_ns() - t0) / 1e6


def execute_sample(client, ids, n=200):
    """Milliseconds of `execute true` in n sessions picked at random, of a second execute
    right after it in the same session, and of the spawn baseline taken after those two. The
    first wakes an agent idle since it was made; the second finds it warm, which separates
    the cost of the execute's path from that of waking one process among thousands."""
    ex, again, sp = [], [], []
    for sid in random.sample(ids, min(n, len(ids))):
        for out in (ex, again):
            t0 = time.perf_counter_ns()
            status, body = client.request("POST", f"/exec/{sid}/execute", {"command": "true"})
            out.append((time.perf_counter_ns() - t0) / 1e6)
            if status != 200 or body.get("exitCode") != 0:
                raise SystemExit(f"execute in {sid}: {status} {str(body)[:200]}")
        sp.append(host_spawn())
    return ex, again, sp


def proc_table():
    """{pid: (ppid, comm, user + system CPU in clock ticks, start time)} of every process on
    the host."""
    out = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat") as f:
                line = f.read()
        except OSError:
            continue  # gone meanwhile
        lp, rp = line.index("("), line.rindex(")")
        rest = line[rp + 2:].split()  # from the state (field 3) on
        out[int(name)] = (int(rest[1]), line[lp + 1:rp], int(rest[11]) + int(rest[12]),
                          int(rest[19]))
    return out


def others_cpu(before, after, ours, seconds):
    """CPU taken between two proc_table()s by the processes outside the trees rooted at the
    pids `ours`, in percent of one CPU, and the busiest of them ("comm (pid) N%")."""
    def mine(pid):
        for _ in range(64):
            if pid in ours:
                return True
            if pid <= 1 or pid not in after:
                return False
            pid = after[pid][0]
        return False

    hz = os.sysconf("SC_CLK_TCK")
    used = {}
    for pid, (_, _, ticks, start) in after.items():
        if mine(pid):
            continue
        was = before.get(pid)  # the same process if it started at the same time
        d = ticks - was[2] if was and was[3] == start else ticks
        if d > 0:
            used[pid] = d
    pct = sum(used.values()) / hz / seconds * 100
    if not used:
        return pct, "-"
    top = max(used, key=used.get)
    return pct, f"{after[top][1]} ({top}) {used[top] / hz / seconds * 100:.0f}%"


class Holders:
    """--baseline: bare holders of what a jail's kernel side is made of, made by
    bench-density-holders (bench/density/holders.c, built with the daemon): one process each
    in new user, mount, pid, network, ipc, uts and cgroup namespaces, in memory, cpu and pids
    cgroups of its own with a sandbox's CPU quota and pids limit, pivoted into a tmpfs root,
    with procfs, a tmpfs /tmp and devpts mounted."""

    def __init__(self):
        name = f"density-baseline-{os.getpid()}"
        if os.path.isdir("/sys/fs/cgroup/memory"):  # v1: one hierarchy per controller
            self.dirs = [f"/sys/fs/cgroup/{c}/{name}" for c in ("memory", "cpu", "pids")]
        else:
            self.dirs = [f"/sys/fs/cgroup/{name}"]
        for d in self.dirs:
            os.mkdir(d)
        if len(self.dirs) == 1:
            with open(os.path.join(self.dirs[0], "cgroup.subtree_control"), "w") as f:
                f.write("+memory +cpu +pids")
        build = os.environ.get("BUILD_DIR", os.path.join(ROOT, "build"))
        tool = os.path.join(build, "bench", "bench-density-holders")
        if not os.access(tool, os.X_OK):
            self.remove_dirs()
            raise SystemExit(f"{tool} not found: build first (ninja -C build)")
        self.proc = subprocess.Popen([tool] + self.dirs, stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, text=True, bufsize=1)

    def create(self):
        self.proc.stdin.write("\n")
        self.proc.stdin.flush()
        line = self.proc.stdout.readline()
        return None if line == "ok\n" else (line.strip() or "the holders' tool exited")

    def remove_dirs(self):
        for d in self.dirs:
            os.rmdir(d)

    def destroy(self):
        self.proc.stdin.close()
        self.proc.wait()
        self.remove_dirs()


def start_daemon(storage, max_sessions, driver="jail"):
    env = {
        "SANDBOX_DEFAULT_TEMPLATE": "base",
        "AUTH_ENABLED": "false",
        "SANDBOX_NETWORK": "off",
        "LOG_LEVEL": "warn",
        "SANDBOX_MAX_SESSIONS": str(max_sessions),
        "SANDBOX_UID_RANGES": str(min(max_sessions + 64, 32767)),
        # Ranges of 65536 ids below 2^31: the default base leaves room for 4,096 of them.
        "SANDBOX_UID_BASE": str(0x20000000),
        "SANDBOX_STORAGE": storage,
        # Idle sessions stay until the benchmark ends.
        "SESSION_IDLE_TIMEOUT": "86400",
        "SESSION_MAX_LIFETIME": "0",
    }
    if driver != "jail":
        # VMs keep their guest's tmpfs workspace; the VM's RAM is what is measured.
        env.pop("SANDBOX_STORAGE")
    d = harness.Daemon(driver_name=driver, env=env, start_timeout=300)
    d.start()
    return d


def concurrent(fn, clients, seconds):
    """Runs fn(client, i) in a thread per client for `seconds`; returns the count done."""
    done = [0] * len(clients)
    stop = time.monotonic() + seconds
    errors = []

    def run(k):
        i = 0
        try:
            while time.monotonic() < stop:
                fn(clients[k], k, i)
                i += 1
                done[k] += 1
        except BaseException as e:  # reported below
            errors.append(e)

    threads = [threading.Thread(target=run, args=(k,)) for k in range(len(clients))]
    t0 = time.monotonic()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise SystemExit(f"concurrent run: {errors[0]}")
    return sum(done), time.monotonic() - t0


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--sessions", default="100,1000,4000,8000")
    ap.add_argument("--storage", default="tmpfs", choices=["tmpfs", "disk"])
    ap.add_argument("--driver", default="jail", choices=["jail", "qemu"],
                    help="qemu: idle VMs restored from the template's snapshot (use small "
                         "--sessions, e.g. 5,10,20)")
    ap.add_argument("--baseline", action="store_true",
                    help="bare namespace holders instead of sessions (no daemon)")
    ap.add_argument("--reserve", type=int, default=0, help="bytes of MemAvailable to keep")
    ap.add_argument("--concurrency-seconds", type=float, default=10,
                    help="length of each concurrent run; 0: none")
    ap.add_argument("--json", help="also write the results here")
    ap.add_argument("--slabs", action="store_true",
                    help="at each checkpoint, the slab caches that grew most, per session")
    args = ap.parse_args()
    checkpoints = sorted(int(x) for x in args.sessions.split(","))
    total = meminfo()["MemTotal"]
    reserve = args.reserve or max(2 << 30, total // 10)

    d = holders = c = None
    if args.baseline:
        holders = Holders()
        ours = {os.getpid(), holders.proc.pid}
    else:
        # Room for the concurrent creations too (a few thousand at most in their seconds).
        d = start_daemon(args.storage, min(max(checkpoints) + 4096, 30000), args.driver)
        ours = {os.getpid(), d.proc.pid}
    results = {"storage": args.storage, "baseline": args.baseline, "checkpoints": []}
    try:
        pid = d.proc.pid if d else os.getpid()
        c = Client(d) if d else None
        m0 = meminfo()
        s0 = slabs() if args.slabs else None
        rss0 = proc_rss(pid)
        ids = []
        times = []  # time of each creation, for the rate of the last batch
        stopped = None
        if d:
            print(f"# density: {args.driver}, base template, networking off, "
                  f"storage {args.storage if args.driver == 'jail' else 'the guest tmpfs'}; "
                  f"MemTotal {total / 2**30:.1f} GiB, reserve {reserve / 2**30:.1f} GiB; "
                  f"daemon at start: RSS {rss0 / MiB:.1f} MiB, {proc_fds(pid)} fds")
        else:
            print(f"# density baseline: bare namespace holders, no daemon; MemTotal "
                  f"{total / 2**30:.1f} GiB, reserve {reserve / 2**30:.1f} GiB; "
                  f"the RSS and fds columns are the benchmark's own")
        print(f"{'sessions':>9} {'creates/s':>10} {'MiB/session':>12} {'SUnreclaim/s':>13} "
              f"{'daemon RSS':>11} {'fds':>6} {'exec p50':>9} {'exec p99':>9} "
              f"{'again p50':>9} {'again p99':>9} "
              f"{'spawn p50':>10} {'spawn p99':>10}  others' CPU (busiest)")
        first_rate = None
        prev = 0
        for cp in checkpoints:
            # Others' CPU over the batch the rate is taken from.
            mark = max(prev, cp - 500)
            before, t_before = None, 0.0
            while len(ids) < cp:
                if len(ids) == mark and before is None:
                    before, t_before = proc_table(), time.monotonic()
                if meminfo()["MemAvailable"] < reserve:
                    stopped = f"MemAvailable below the reserve at {len(ids)} sessions"
                    break
                sid = f"d{len(ids)}"
                t0 = time.monotonic()
                if holders:
                    err = holders.create()
                    if err:
                        stopped = err
                        break
                    ids.append(sid)
                else:
                    status, body = c.request("POST", "/exec/", {"id": sid})
                    if status != 201:
                        stopped = f"the daemon refused session {len(ids) + 1}: {status} {body}"
                        break
                    ids.append(body.get("sessionId") or body.get("id") or sid)
                times.append(time.monotonic() - t0)
            if not ids:
                break
            prev = len(ids)
            batch = times[-500:]
            rate = len(batch) / sum(batch)
            if first_rate is None:
                first_rate = len(times[:500]) / sum(times[:500])
            others, busiest = 0.0, "-"
            if before is not None:
                others, busiest = others_cpu(before, proc_table(), ours,
                                             time.monotonic() - t_before)
            m = meminfo()
            n = len(ids)
            per = (m0["MemAvailable"] - m["MemAvailable"]) / n
            sun = (m["SUnreclaim"] - m0["SUnreclaim"]) / n
            if c:
                ex, again, sp = execute_sample(c, ids)
            else:
                ex, again, sp = [], [], [host_spawn() for _ in range(200)]
            p50 = percentile(ex, 50) if ex else None
            p99 = percentile(ex, 99) if ex else None
            a50 = percentile(again, 50) if again else None
            a99 = percentile(again, 99) if again else None
            s50, s99 = percentile(sp, 50), percentile(sp, 99)
            rss, fds = proc_rss(pid), proc_fds(pid)
            row = {"sessions": n, "createsPerSecond": rate, "bytesPerSession": per,
                   "sunreclaimPerSession": sun, "daemonRss": rss, "daemonFds": fds,
                   "executeP50Ms": p50, "executeP99Ms": p99, "executeAgainP50Ms": a50,
                   "executeAgainP99Ms": a99, "spawnP50Ms": s50,
                   "spawnP99Ms": s99, "othersCpuPercent": others, "othersBusiest": busiest}
            results["checkpoints"].append(row)
            fmt = lambda v: f"{v:>8.2f}m" if v is not None else f"{'-':>9}"  # noqa: E731
            print(f"{n:>9} {rate:>10.0f} {per / MiB:>12.2f} {sun / 1024:>11.0f}Ki "
                  f"{rss / MiB:>9.1f}Mi {fds:>6} {fmt(p50)} {fmt(p99)} {fmt(a50)} {fmt(a99)} "
                  f"{s50:>9.2f}m {s99:>9.2f}m  {others:.0f}% ({busiest})", flush=True)
            if s0 is not None:
                s1 = slabs()
                grew = sorted(((s1.get(k, 0) - s0.get(k, 0), k) for k in s1), reverse=True)
                print("#   slab per session: " + ", ".join(
                    f"{k} {v / n / 1024:.1f}Ki" for v, k in grew[:12]), flush=True)
                print(f"#   PageTables {(m['PageTables'] - m0['PageTables']) / n / 1024:.1f}Ki, "
                      f"KernelStack {(m['KernelStack'] - m0['KernelStack']) / n / 1024:.1f}Ki, "
                      f"Shmem {(m['Shmem'] - m0['Shmem']) / n / 1024:.1f}Ki, "
                      f"AnonPages {(m['AnonPages'] - m0['AnonPages']) / n / 1024:.1f}Ki, "
                      f"Percpu {(m.get('Percpu', 0) - m0.get('Percpu', 0)) / n / 1024:.1f}Ki, "
                      f"Cached {(m['Cached'] - m0['Cached']) / n / 1024:.1f}Ki per session",
                      flush=True)
            if stopped:
                break
        if stopped:
            print(f"# stopped early: {stopped}")
        if len(times) >= 1000:
            first = len(times[:500]) / sum(times[:500])
            last = 500 / sum(times[-500:])
            print(f"# creation: first 500 {first:.0f}/s, last 500 {last:.0f}/s "
                  f"(last/first {last / first:.2f})")
            results["firstLastRatio"] = last / first
        t0 = time.monotonic()
        if holders:
            holders.destroy()
            holders = None
            print(f"# removed {len(ids)} holders in {time.monotonic() - t0:.1f} s")
            # What the kernel still does for the dead ones, seen by new ones made right after.
            holders = Holders()
            took = []
            for _ in range(10):
                t1 = time.monotonic()
                err = holders.create()
                if err:
                    raise SystemExit(f"holder after the removal: {err}")
                took.append(time.monotonic() - t1)
            print(f"# then 10 holders made one after another in {sum(took):.1f} s "
                  f"(the first in {took[0]:.2f} s)")
            results["holdersAfterRemovalSeconds"] = took
            return
        for sid in ids:
            c.request("DELETE", f"/exec/{sid}")
        if ids:
            print(f"# destroyed {len(ids)} sessions at {len(ids) / (time.monotonic() - t0):.0f}/s")
            # Their teardown goes on in the background: what it leaves a creation now.
            took = []
            for i in range(10):
                t1 = time.monotonic()
                status, body = c.request("POST", "/exec/", {"id": f"after{i}"})
                if status != 201:
                    raise SystemExit(f"create after the destruction: {status} {body}")
                took.append(time.monotonic() - t1)
            print(f"# then 10 sessions made one after another in {sum(took):.1f} s "
                  f"(the first in {took[0]:.2f} s)")
            results["createsAfterDestructionSeconds"] = took
            for i in range(10):
                c.request("DELETE", f"/exec/after{i}")
        if args.concurrency_seconds <= 0:
            return
        clients = [Client(d) for _ in range(8)]
        made = []
        lock = threading.Lock()

        def create(cl, k, i):
            status, body = cl.request("POST", "/exec/", {"id": f"c{k}-{i}"})
            if status != 201:
                raise RuntimeError(f"create: {status} {body}")
            with lock:
                made.append(f"c{k}-{i}")

        n, secs = concurrent(create, clients, args.concurrency_seconds)
        print(f"# 8 concurrent clients: {n / secs:.0f} sessions created/s "
              f"({n} in {secs:.1f} s); one client above: {first_rate or 0:.0f}/s")
        results["concurrentCreatesPerSecond"] = n / secs
        for sid in made:
            c.request("DELETE", f"/exec/{sid}")

        hundred = []
        for i in range(100):
            status, body = c.request("POST", "/exec/", {"id": f"x{i}"})
            if status != 201:
                raise SystemExit(f"create: {status} {body}")
            hundred.append(f"x{i}")

        def execute(cl, k, i):
            sid = hundred[(k * 13 + i) % len(hundred)]
            status, body = cl.request("POST", f"/exec/{sid}/execute", {"command": "true"})
            if status != 200:
                raise RuntimeError(f"execute: {status} {body}")

        n, secs = concurrent(execute, clients, args.concurrency_seconds)
        print(f"# 8 concurrent clients across 100 sessions: {n / secs:.0f} executes/s")
        results["concurrentExecutesPerSecond"] = n / secs
        for sid in hundred:
            c.request("DELETE", f"/exec/{sid}")
    finally:
        if holders:
            holders.destroy()
        if d:
            d.stop(check=False)
        if args.json:
            with open(args.json, "w") as f:
                json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()
