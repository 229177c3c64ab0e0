#!/usr/bin/env python3
"""An honest client's round trip and the daemon's memory, quiet and then under attack by
hostile clients, in the same run.

It starts sandboxd (auth on, a temporary state directory; SANDBOXD, default
build/src/sandboxd), makes three keys through POST /admin/keys with the first start's admin
key, and measures an honest client (its own key, its own session, one keep-alive connection
from 127.0.0.2) timing POST /exec/:id/execute {"command": "true"}, twice:

  quiet    nothing else talks to the daemon
  attack   at the same time, each bound to its own source address (bench/hostile/attack.py):
           slow clients sending a request head a byte at a time, never finishing it
           (127.0.1.x); keyless clients posting large bodies to a route that needs a key, over
           and over (127.0.2.x); a second key creating sessions until it is refused and then
           asking again as fast as it can (127.0.3.1); a third key's readers asking for a
           large file and never reading the answer (127.0.4.x); a fourth key's terminal
           WebSockets sending empty pings and never reading a pong (127.0.5.x); keyless
           clients trickling a body to GET /health (127.0.6.x and up); a fifth key's
           clients sending all but the last byte of 40 MiB /mcp bodies (127.0.20.x)

and prints p50/p99 of both phases, the daemon's VmRSS (idle, highest seen) and VmHWM, their
ratios, and the targets beside them. Exits 1 if the honest client got any error (a status
other than 200, a command that did not exit 0, a timeout), 0 otherwise whatever the numbers.

Usage: python3 bench/hostile/bench.py [--runs N] [--json FILE] [options, see --help]
Environment: SANDBOXD, DRIVER, FIRECRACKER_ARTIFACTS_DIR as for the integration tests.
"""

import argparse
import http.client
import json
import math
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "tests", "integration"))

import harness  # noqa: E402

MiB = 1024 * 1024
HONEST_ADDR = "127.0.0.2"
SETUP_ADDR = "127.0.0.3"
TARGET_RSS_MIB = 64  # the daemon's RSS under attack, above idle
TARGET_P99_RATIO = 3  # the honest p99 under attack, over the quiet one
ATTACKS = {"slow", "bodies", "quota", "readers", "pings", "trickle", "unfinished"}


class Interrupted(Exception):
    pass


def on_signal(signum, frame):
    raise Interrupted(signal.Signals(signum).name)


def percentile(samples, p):
    """The p-th percentile (nearest rank) of samples (nanoseconds), in milliseconds."""
    s = sorted(samples)
    if not s:
        return float("nan")
    k = max(0, min(len(s) - 1, math.ceil(p / 100 * len(s)) - 1))
    return s[k] / 1e6


def proc_status(pid):
    """VmRSS and VmHWM of pid in bytes (0 when gone)."""
    out = {"VmRSS": 0, "VmHWM": 0}
    try:
        with open(f"/proc/{pid}/status", encoding="ascii") as f:
            for line in f:
                name, _, value = line.partition(":")
                if name in out:
                    out[name] = int(value.split()[0]) * 1024
    except OSError:
        pass
    return out


def cpu_seconds(pid):
    """User + system CPU time of pid, in seconds."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, IndexError, ValueError):
        return 0.0


def open_fds(pid):
    try:
        return len(os.listdir(f"/proc/{pid}/fd"))
    except OSError:
        return 0


def nofile_limit(pid):
    try:
        with open(f"/proc/{pid}/limits", encoding="ascii") as f:
            for line in f:
                if line.startswith("Max open files"):
                    soft, hard = line.split()[3:5]
                    return f"{soft}/{hard}"
    except OSError:
        pass
    return "?"


class Sampler(threading.Thread):
    """The daemon's VmRSS every 20 ms: the highest since the last reset()."""

    def __init__(self, pid):
        super().__init__(daemon=True)
        self.pid = pid
        self.peak = 0
        self.peak_fds = 0
        self.halt = threading.Event()
        self.lock = threading.Lock()

    def run(self):
        n = 0
        while not self.halt.wait(0.02):
            rss = proc_status(self.pid)["VmRSS"]
            fds = open_fds(self.pid) if n % 10 == 0 else 0
            n += 1
            with self.lock:
                self.peak = max(self.peak, rss)
                self.peak_fds = max(self.peak_fds, fds)

    def reset(self):
        with self.lock:
            peak, fds = self.peak, self.peak_fds
            self.peak = proc_status(self.pid)["VmRSS"]
            self.peak_fds = open_fds(self.pid)
        return peak, fds


class Client:
    """One keep-alive connection from a given source address, with a key."""

    def __init__(self, daemon, key, source, timeout):
        self.host, self.port = daemon.host, daemon.port
        self.key, self.source, self.timeout = key, source, timeout
        self.conn = None

    def close(self):
        if self.conn is not None:
            self.conn.close()
            self.conn = None

    def request(self, method, path, body=None):
        h = {"Accept": "application/json", "Authorization": f"Bearer {self.key}"}
        data = None
        if body is not None:
            data = json.dumps(body).encode()
            h["Content-Type"] = "application/json"
        if self.conn is None:
            self.conn = http.client.HTTPConnection(self.host, self.port, timeout=self.timeout,
                                                   source_address=(self.source, 0))
        try:
            self.conn.request(method, path, body=data, headers=h)
            resp = self.conn.getresponse()
            raw = resp.read()
        except BaseException:
            self.close()
            raise
        if resp.getheader("Connection", "").lower() == "close":
            self.close()
        ctype = resp.getheader("Content-Type", "")
        try:
            reply = json.loads(raw) if ctype.startswith("application/json") else raw
        except ValueError:
            reply = raw
        return resp.status, reply


def must(status, reply, expect, what):
    if status != expect:
        raise SystemExit(f"hostile: {what}: status {status}: {str(reply)[:300]}")
    return reply


def honest_runs(client, sid, runs, max_errors, deadline_s, interval=0.0):
    """runs executes of `true`, one every interval seconds (or one after the other):
    (samples in ns, errors as strings)."""
    samples, errors = [], []
    start = time.monotonic()
    end = start + deadline_s
    for i in range(runs):
        if len(errors) >= max_errors or time.monotonic() > end:
            errors.append(f"stopped after {len(samples)} good runs")
            break
        wait = start + i * interval - time.monotonic()
        if wait > 0:
            time.sleep(wait)
        t0 = time.perf_counter_ns()
        try:
            status, body = client.request("POST", f"/exec/{sid}/execute", {"command": "true"})
        except (OSError, http.client.HTTPException) as e:
            errors.append(f"{type(e).__name__}: {e}")
            continue
        elapsed = time.perf_counter_ns() - t0
        if status != 200 or not isinstance(body, dict) or body.get("exitCode") != 0:
            errors.append(f"status {status}: {str(body)[:200]}")
            continue
        samples.append(elapsed)
    return samples, errors


class Attackers:
    """bench/hostile/attack.py as a child process; its counters as they come."""

    def __init__(self, cfg):
        # The configuration (with the keys) on stdin, not on a command line others can read.
        self.proc = subprocess.Popen(
            [sys.executable, os.path.join(os.path.dirname(__file__), "attack.py")],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        self.proc.stdin.write(json.dumps(cfg))
        self.proc.stdin.close()
        self.last = {}
        self.lock = threading.Lock()
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self):
        for line in self.proc.stdout:
            try:
                counters = json.loads(line)
            except ValueError:
                continue
            with self.lock:
                self.last = counters

    def counters(self):
        with self.lock:
            return dict(self.last)

    def alive(self):
        return self.proc.poll() is None

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.reader.join(5)
        return self.counters()


def wait_for_attack(attackers, args, nreaders, timeout):
    """Until the attack is in place (most slow clients connected, every reader's request
    sent, the quota key refused once) or timeout seconds."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        c = attackers.counters()
        if not attackers.alive():
            raise SystemExit("hostile: the attackers' process ended early")
        if (c.get("slow_open", 0) >= 0.9 * args.slow
                and c.get("reader_requests", 0) >= nreaders
                and ("quota_refused_after" in c or not args.quota)
                and c.get("body_requests", 0) >= args.bodies
                and c.get("ping_upgrade_101", 0) >= args.pings
                and c.get("trickle_connects", 0) >= 0.9 * args.trickles
                and c.get("unfinished_requests", 0) >= args.unfinished):
            return True
        time.sleep(0.2)
    return False


def start_daemon(args, max_sessions):
    env = {
        "AUTH_ENABLED": "true",
        "LOG_LEVEL": "warn",
        "SANDBOX_DEFAULT_TEMPLATE": args.template,
        "SANDBOX_WARM_POOL": "0",
        "SANDBOX_MAX_SESSIONS": str(max_sessions),
        # The readers' key holds a session per reader: the global cap, not the default
        # quota per key, is what refuses the attacker at its quota.
        "SANDBOX_KEY_MAX_SESSIONS": str(max_sessions),
    }
    for item in args.daemon_env:
        name, sep, value = item.partition("=")
        if not sep:
            raise SystemExit(f"hostile: --daemon-env {item!r}: NAME=VALUE expected")
        env[name] = value
    d = harness.Daemon(env=env)
    STATE["daemon"] = d  # before it starts: an interruption while it starts stops it too
    d.start()
    if not d.admin_key:
        d.stop(check=False)
        raise SystemExit("hostile: the daemon printed no admin key on its first start")
    return d


def make_key(admin, name):
    reply = must(*admin.request("POST", "/admin/keys", {"name": name, "scopes": ["exec"]}),
                 201, f"create key {name}")
    return reply["key"]


def mib(n):
    return n / MiB


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--attacks", default="slow,bodies,quota,readers,pings,trickle,unfinished",
                    help="which attackers run, comma-separated (all seven: "
                    "slow,bodies,quota,readers,pings,trickle,unfinished)")
    ap.add_argument("--runs", type=int, default=300, help="honest executes per phase (300)")
    ap.add_argument("--duration", type=float, default=30,
                    help="seconds over which each phase's runs are spread (30), so that they "
                    "meet every part of the attackers' cycles")
    ap.add_argument("--slow", type=int, default=1000, help="slow-head clients (1000)")
    ap.add_argument("--slow-per-address", type=int, default=20,
                    help="slow clients per source address (20; the daemon's cap per address "
                    "is SANDBOX_MAX_CONNECTIONS_PER_ADDRESS, 128 by default)")
    ap.add_argument("--slow-interval", type=float, default=1.0,
                    help="seconds between a slow client's bytes (1)")
    ap.add_argument("--bodies", type=int, default=100, help="keyless large-body clients (100)")
    ap.add_argument("--body-mib", type=int, default=50, help="size of each body, MiB (50)")
    ap.add_argument("--body-rate", type=float, default=256,
                    help="MiB/s the body clients send, all together (256; 0: as fast as the "
                    "daemon takes them)")
    ap.add_argument("--body-path", default="/exec/x/write",
                    help="where they post (/exec/x/write, a route that needs a key)")
    ap.add_argument("--attacker-sessions", type=int, default=8,
                    help="sessions the second key may have: SANDBOX_MAX_SESSIONS is this plus "
                    "the honest and reader sessions, so today the global cap refuses it (8)")
    ap.add_argument("--max-sessions", type=int, default=0,
                    help="SANDBOX_MAX_SESSIONS (default: the honest session, the readers' and "
                    "--attacker-sessions); higher, a per-key quota (--daemon-env) is what "
                    "refuses the second key")
    ap.add_argument("--readers", type=int, default=8, help="readers that never read (8)")
    ap.add_argument("--read-mib", type=int, default=48, help="the file they ask for, MiB (48)")
    ap.add_argument("--pings", type=int, default=4,
                    help="terminal WebSockets flooding empty pings (4)")
    ap.add_argument("--trickles", type=int, default=1000,
                    help="keyless clients trickling a body to GET /health (1000)")
    ap.add_argument("--trickle-interval", type=float, default=5.0,
                    help="seconds between a trickling client's bytes (5)")
    ap.add_argument("--unfinished", type=int, default=10,
                    help="clients of one key holding unfinished 40 MiB /mcp bodies (10)")
    ap.add_argument("--settle", type=float, default=3.0,
                    help="seconds between the attack being in place and the honest runs (3)")
    ap.add_argument("--ramp", type=float, default=3.0,
                    help="seconds over which the attackers start (3)")
    ap.add_argument("--timeout", type=float, default=30,
                    help="the honest client's timeout per request, seconds (30)")
    ap.add_argument("--rss-limit-mib", type=int, default=0,
                    help="stop the attack when the daemon's RSS passes this (default: half "
                    "of the memory available at the start)")
    ap.add_argument("--template", default="base", help="the sessions' template (base)")
    ap.add_argument("--daemon-env", action="append", default=[], metavar="NAME=VALUE",
                    help="an extra variable for the daemon (repeatable), e.g. a quota")
    ap.add_argument("--json", metavar="FILE", help="also write the results as JSON")
    args = ap.parse_args()
    if args.runs < 1:
        ap.error("--runs must be at least 1")
    attacks = set(filter(None, args.attacks.split(",")))
    if attacks - ATTACKS:
        ap.error(f"--attacks: unknown {', '.join(sorted(attacks - ATTACKS))}")
    args.slow = args.slow if "slow" in attacks else 0
    args.bodies = args.bodies if "bodies" in attacks else 0
    args.readers = args.readers if "readers" in attacks else 0
    args.quota = "quota" in attacks
    args.pings = args.pings if "pings" in attacks else 0
    args.trickles = args.trickles if "trickle" in attacks else 0
    args.unfinished = args.unfinished if "unfinished" in attacks else 0
    if args.slow_per_address < 1 or -(-args.slow // args.slow_per_address) > 254:
        ap.error("the slow clients need at most 254 addresses (127.0.1.1-254)")
    if args.bodies > 254 or args.readers > 254:
        ap.error("at most 254 body clients and 254 readers (one address each)")

    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, on_signal)
    code = 1
    try:
        code = run(args)
    except Interrupted as e:
        print(f"hostile: interrupted ({e}), cleaning up", file=sys.stderr)
        code = 130
    except (OSError, http.client.HTTPException) as e:
        print(f"hostile: while setting up: {type(e).__name__}: {e}", file=sys.stderr)
        code = 1
    finally:
        for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
            signal.signal(sig, signal.SIG_IGN)
        cleanup()
    return code


# What cleanup() undoes; set as things start, so that an interruption at any point undoes
# exactly what was done.
STATE = {"attackers": None, "sampler": None, "daemon": None, "clients": []}


def cleanup():
    a = STATE["attackers"]
    if a is not None:
        a.stop()
    s = STATE["sampler"]
    if s is not None:
        s.halt.set()
    for c in STATE["clients"]:
        c.close()
    d = STATE["daemon"]
    if d is not None:
        # SIGTERM: the daemon ends every session (and its sandbox) before it exits.
        try:
            log = d.stop(timeout=60, check=False)
            if d.proc is not None and d.returncode != 0:
                print(f"hostile: sandboxd exited with status {d.returncode}:\n"
                      + harness._tail(log or "", 20), file=sys.stderr)
        finally:
            d.kill()
            if d.tmp and os.path.isdir(d.tmp) and not harness._mounts_under(d.tmp):
                shutil.rmtree(d.tmp, ignore_errors=True)


def run(args):
    max_sessions = args.max_sessions or (
        1 + args.readers + (1 if args.pings else 0) +
        (args.attacker_sessions if args.quota else 0))
    daemon = start_daemon(args, max_sessions)
    pid = daemon.proc.pid
    admin = Client(daemon, daemon.admin_key, SETUP_ADDR, 60)
    STATE["clients"].append(admin)
    status, health = admin.request("GET", "/health")
    driver = health.get("driver", "?") if isinstance(health, dict) else "?"
    honest_key = make_key(admin, "honest")
    quota_key = make_key(admin, "at-quota")
    reader_key = make_key(admin, "readers")
    ping_key = make_key(admin, "pings")
    unfinished_key = make_key(admin, "unfinished")

    # The honest session, and the readers' sessions with their large file, made before the
    # idle figure is taken (the file is written in the sandbox, not through the daemon).
    honest = Client(daemon, honest_key, HONEST_ADDR, 120)
    STATE["clients"].append(honest)
    must(*honest.request("POST", "/exec", {"id": "honest"}), 201, "create the honest session")
    honest.close()
    honest.timeout = args.timeout
    setup = Client(daemon, reader_key, SETUP_ADDR, 120)
    STATE["clients"].append(setup)
    read_path = "big.bin"
    reader_sessions = []
    for i in range(args.readers):
        sid = f"reader-{i}"
        must(*setup.request("POST", "/exec", {"id": sid}), 201, f"create session {sid}")
        reply = must(*setup.request("POST", f"/exec/{sid}/execute", {
            "command": f"head -c {args.read_mib * MiB} /dev/zero > {read_path}"}),
            200, f"write the file of {sid}")
        if reply.get("exitCode") != 0:
            raise SystemExit(f"hostile: writing the file of {sid}: {reply}")
        reader_sessions.append(sid)
    setup.close()
    if args.pings:
        pinger = Client(daemon, ping_key, SETUP_ADDR, 120)
        STATE["clients"].append(pinger)
        must(*pinger.request("POST", "/exec", {"id": "pings"}), 201, "create session pings")
        pinger.close()
    admin.close()

    # Warm up, then the idle figure.
    _, errors = honest_runs(honest, "honest", 20, 5, 120)
    if errors:
        raise SystemExit(f"hostile: the honest client fails on a quiet daemon: {errors[0]}")
    time.sleep(0.5)
    idle = proc_status(pid)
    sampler = Sampler(pid)
    STATE["sampler"] = sampler
    sampler.start()

    # Quiet.
    quiet_load = os.getloadavg()[0]
    cpu0, t0 = cpu_seconds(pid), time.monotonic()
    interval = args.duration / args.runs
    quiet, quiet_errors = honest_runs(honest, "honest", args.runs, 10, 600, interval)
    quiet_cpu = (cpu_seconds(pid) - cpu0) / max(1e-9, time.monotonic() - t0)
    quiet_peak, quiet_fds = sampler.reset()
    quiet_hwm = proc_status(pid)["VmHWM"]

    # Under attack.
    try:
        with open("/proc/meminfo", encoding="ascii") as f:
            avail = next(int(line.split()[1]) * 1024 for line in f
                         if line.startswith("MemAvailable:"))
    except (OSError, StopIteration):
        avail = 4096 * MiB
    rss_limit = args.rss_limit_mib * MiB if args.rss_limit_mib else avail // 2
    cfg = {
        "host": daemon.host, "port": daemon.port, "ramp": args.ramp,
        "slow": args.slow, "slow_per_address": args.slow_per_address,
        "slow_interval": args.slow_interval,
        "bodies": args.bodies, "body_bytes": args.body_mib * MiB,
        "body_rate": args.body_rate * MiB, "body_chunk": 256 * 1024,
        "body_path": args.body_path, "body_net": 2,
        "quota_key": quota_key if args.quota else "",
        "quota_sessions": args.attacker_sessions, "quota_net": 3,
        "reader_key": reader_key, "reader_sessions": reader_sessions,
        "read_path": read_path, "reader_net": 4,
        "pings": args.pings, "ping_key": ping_key, "ping_session": "pings", "ping_net": 5,
        "trickles": args.trickles, "trickle_interval": args.trickle_interval,
        "trickle_net": 6,
        "unfinished": args.unfinished, "unfinished_key": unfinished_key,
        "unfinished_bytes": 40 * MiB, "unfinished_net": 20,
    }
    attack_t0 = time.monotonic()
    attackers = Attackers(cfg)
    STATE["attackers"] = attackers
    in_place = wait_for_attack(attackers, args, len(reader_sessions), 30 + args.ramp)
    ramp_s = time.monotonic() - attack_t0
    time.sleep(args.settle)
    before = attackers.counters()
    attack_load = os.getloadavg()[0]
    acpu0 = cpu_seconds(attackers.proc.pid)
    cpu0, t0 = cpu_seconds(pid), time.monotonic()
    guard = threading.Event()

    def rss_guard():
        while not guard.wait(0.1):
            if proc_status(pid)["VmRSS"] > rss_limit:
                attackers.stop()
                guard.set()
                STATE["rss_limit_hit"] = True

    guard_thread = threading.Thread(target=rss_guard, daemon=True)
    guard_thread.start()
    attack, attack_errors = honest_runs(honest, "honest", args.runs, 10, 600, interval)
    elapsed = max(1e-9, time.monotonic() - t0)
    attack_cpu = (cpu_seconds(pid) - cpu0) / elapsed
    attacker_cpu = (cpu_seconds(attackers.proc.pid) - acpu0) / elapsed
    guard.set()
    guard_thread.join()
    during = attackers.counters()
    attack_peak, attack_fds = sampler.reset()
    attack_hwm = proc_status(pid)["VmHWM"]
    final = attackers.stop()
    STATE["attackers"] = None

    # After: is the memory given back, does the honest client still get through?
    time.sleep(2)
    after = proc_status(pid)
    after_runs, after_errors = honest_runs(honest, "honest", 20, 5, 120)
    log_lines = len(daemon.stderr().splitlines())
    alive = daemon.proc.poll() is None

    # The report.
    q50, q99 = percentile(quiet, 50), percentile(quiet, 99)
    a50, a99 = percentile(attack, 50), percentile(attack, 99)
    r50 = a50 / q50 if q50 else float("inf")
    r99 = a99 / q99 if q99 else float("inf")
    above = attack_peak - idle["VmRSS"]
    rate = {k: (during.get(k, 0) - before.get(k, 0)) / elapsed
            for k in ("slow_bytes", "slow_connects", "body_requests", "body_bytes_sent",
                      "quota_status_429", "reader_requests", "ping_sent", "trickle_connects",
                      "unfinished_bytes_sent")}
    statuses = {k: v for k, v in final.items()
                if k.startswith(("slow_closed", "body_status", "quota_status", "body_no",
                                 "ping_upgrade", "ping_cut", "trickle_closed",
                                 "unfinished_status", "unfinished_closed", "unfinished_cut",
                                 "reader_closed", "quota_conn", "reader_send",
                                 "slow_connect_failed", "body_connect_failed",
                                 "reader_requests", "quota_created"))}

    print(f"agent-sandbox under hostile clients: driver {driver}, {os.cpu_count()} cores, "
          f"sandboxd {os.path.relpath(daemon.binary, ROOT)}, nofile {nofile_limit(pid)}, "
          f"SANDBOX_MAX_SESSIONS {max_sessions}")
    parts = []
    if args.slow:
        parts.append(f"{args.slow} slow heads ({args.slow_per_address} per address, a byte "
                     f"every {args.slow_interval:g} s)")
    if args.bodies:
        parts.append(f"{args.bodies} keyless {args.body_mib} MiB bodies to {args.body_path} "
                     f"({args.body_rate:g} MiB/s in all)" if args.body_rate else
                     f"{args.bodies} keyless {args.body_mib} MiB bodies to {args.body_path} "
                     "(unpaced)")
    if args.quota:
        parts.append(f"1 key at its quota ({args.attacker_sessions} sessions)")
    if args.readers:
        parts.append(f"{args.readers} readers of {args.read_mib} MiB that never read")
    if args.pings:
        parts.append(f"{args.pings} terminal WebSockets flooding empty pings")
    if args.trickles:
        parts.append(f"{args.trickles} keyless bodies to GET /health, a byte every "
                     f"{args.trickle_interval:g} s")
    if args.unfinished:
        parts.append(f"{args.unfinished} unfinished 40 MiB /mcp bodies of one key")
    print("attack: " + (", ".join(parts) or "none"))
    seen = []
    if args.slow:
        seen.append(f"{during.get('slow_open', 0)} slow heads open, "
                    f"{rate['slow_connects']:.0f} slow connects/s")
    if args.bodies:
        seen.append(f"{rate['body_requests']:.1f} bodies/s "
                    f"({mib(rate['body_bytes_sent']):.0f} MiB/s)")
    if args.quota:
        seen.append(f"{rate['quota_status_429']:.0f} refused session creates/s")
    if args.readers:
        seen.append(f"{during.get('reader_open', 0)} readers waiting, "
                    f"{rate['reader_requests']:.1f} new reader requests/s")
    if args.pings:
        seen.append(f"{during.get('ping_open', 0)} ping floods open, "
                    f"{rate['ping_sent']:.0f} pings/s sent")
    if args.trickles:
        seen.append(f"{rate['trickle_connects']:.0f} trickling connects/s")
    if args.unfinished:
        seen.append(f"{during.get('unfinished_open', 0)} unfinished bodies held, "
                    f"{mib(rate['unfinished_bytes_sent']):.0f} MiB/s of them sent")
    print(f"attack in place after {ramp_s:.1f} s{'' if in_place else ' (not fully: timed out)'}"
          f"; the {len(attack)} honest runs under attack took {elapsed:.1f} s; during them: "
          + ("; ".join(seen) or "nothing"))
    print(f"load average (1 min) at the start of each phase: quiet {quiet_load:.2f}, "
          f"attack {attack_load:.2f}")
    if STATE.get("rss_limit_hit"):
        print(f"the attack was stopped early: the daemon's RSS passed {mib(rss_limit):.0f} MiB")
    print()
    print(f"honest execute `true`, ms        {'p50':>9}{'p99':>9}   errors")
    print(f"  quiet ({len(quiet)} runs){'':<14}{q50:>9.3f}{q99:>9.3f}   {len(quiet_errors)}")
    print(f"  under attack ({len(attack)} runs){'':<7}{a50:>9.3f}{a99:>9.3f}   "
          f"{len(attack_errors)}")
    print(f"  ratio{'':<26}{r50:>8.1f}x{r99:>8.1f}x   target: p99 within "
          f"{TARGET_P99_RATIO}x: {'met' if r99 <= TARGET_P99_RATIO else 'MISSED'}")
    print()
    print(f"sandboxd memory, MiB             {'VmRSS':>9}{'VmHWM':>9}   fds")
    print(f"  idle{'':<27}{mib(idle['VmRSS']):>9.1f}{mib(idle['VmHWM']):>9.1f}")
    print(f"  quiet (highest){'':<16}{mib(quiet_peak):>9.1f}{mib(quiet_hwm):>9.1f}   "
          f"{quiet_fds}")
    print(f"  under attack (highest){'':<9}{mib(attack_peak):>9.1f}{mib(attack_hwm):>9.1f}   "
          f"{attack_fds}")
    print(f"  2 s after the attack{'':<11}{mib(after['VmRSS']):>9.1f}{mib(after['VmHWM']):>9.1f}")
    ratio_rss = attack_peak / idle["VmRSS"] if idle["VmRSS"] else float("inf")
    print(f"  under attack - idle{'':<12}{mib(above):>9.1f}{'':>9}   ({ratio_rss:.1f}x idle) "
          f"target: under {TARGET_RSS_MIB} MiB above idle: "
          f"{'met' if above < TARGET_RSS_MIB * MiB else 'MISSED'}")
    print()
    print(f"sandboxd CPU: {quiet_cpu * 100:.0f}% of a core quiet, {attack_cpu * 100:.0f}% under "
          f"attack; the attackers' process: {attacker_cpu * 100:.0f}%")
    print(f"sandboxd log: {log_lines} lines; alive after the attack: {'yes' if alive else 'NO'};"
          f" honest runs after it: {len(after_runs)}/20 good")
    print("attackers' counts: " + (", ".join(f"{k} {v}" for k, v in sorted(statuses.items()))
                                   or "none"))
    for name, errs in (("quiet", quiet_errors), ("under attack", attack_errors),
                       ("after the attack", after_errors)):
        for e in errs[:5]:
            print(f"honest client error ({name}): {e}")

    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump({
                "driver": driver, "cores": os.cpu_count(), "runs": args.runs,
                "honest_ms": {"quiet": {"p50": q50, "p99": q99, "runs": len(quiet),
                                        "errors": len(quiet_errors)},
                              "attack": {"p50": a50, "p99": a99, "runs": len(attack),
                                         "errors": len(attack_errors)},
                              "ratio_p50": r50, "ratio_p99": r99},
                "rss_bytes": {"idle": idle["VmRSS"], "idle_hwm": idle["VmHWM"],
                              "quiet_peak": quiet_peak, "quiet_hwm": quiet_hwm,
                              "attack_peak": attack_peak, "attack_hwm": attack_hwm,
                              "after": after["VmRSS"], "attack_above_idle": above},
                "targets": {"rss_above_idle_mib": TARGET_RSS_MIB,
                            "p99_ratio": TARGET_P99_RATIO},
                "attackers": final, "config": {k: v for k, v in vars(args).items()},
            }, f, indent=2)
            f.write("\n")
    if not alive:
        print("hostile: sandboxd died during the attack", file=sys.stderr)
        return 1
    if quiet_errors or attack_errors or after_errors:
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
