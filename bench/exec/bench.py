#!/usr/bin/env python3
"""Latency of the daemon's basic operations, beside baselines measured on this host in the
same run.

Measured through the real daemon over one keep-alive HTTP connection (time.perf_counter_ns
around each request; the client's own JSON encoding of a body and decoding of a reply are done
outside the timed part):

  session create, warm pool   POST /exec/ while a pooled sandbox is waiting
  session create, cold        POST /exec/ with SANDBOX_WARM_POOL=0 (a sandbox made on demand)
  execute `true`              POST /exec/:id/execute, buffered reply (its baseline: a spawn of
                              /bin/true after each execute, interleaved)
  write 1 MiB                 POST /exec/:id/write, base64 content
  write 1 MiB (raw)           PUT /exec/:id/file, the bytes as the body (streamed)
  read 1 MiB (raw)            GET /exec/:id/read with Accept: application/octet-stream
  read 1 MiB (base64)         GET /exec/:id/read?encoding=base64

Baselines: posix_spawn + waitpid of /bin/true on the host, and writing and reading a 1 MiB
file in a local temporary directory. Prints p50 and p99 of each and the ratios of the p50s.

With --lifecycle, it also times a session's lifecycle (docs/lifecycle.md) with 4 MiB written
to its disk, beside a cold session create in the same run: pause and resume (freeze), a
hibernation and the resume to its first command, a fork of one session and of ten (to every
fork's first command), a snapshot, and a session made from it (to its first command); and
prints the snapshot's size. On the jail these keep files (a copy of the disk); on a VM
driver, memory too.

With --against OTHER (another sandboxd binary, say a build of an earlier commit), it then
times the reads of 1 MiB (raw, base64 JSON and text JSON) against both daemons in the same
run, alternating request by request, and prints the ratios of the p50s (this / other).

Usage: python3 bench/exec/bench.py [--runs N] [--json FILE] [--against OTHER] [--lifecycle]
Environment: DRIVER, SANDBOXD, FIRECRACKER_ARTIFACTS_DIR as for the integration tests.
"""

import argparse
import base64
import http.client
import json
import math
import os
import statistics
import sys
import tempfile
import time

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "tests", "integration"))

import harness  # noqa: E402

TEMPLATE = "base"
MiB = 1024 * 1024


def percentile(samples, p):
    """The p-th percentile (nearest rank) of samples, in milliseconds."""
    s = sorted(samples)
    k = max(0, min(len(s) - 1, math.ceil(p / 100 * len(s)) - 1))
    return s[k] / 1e6


class Client:
    """One keep-alive connection to the daemon."""

    def __init__(self, daemon):
        self.host, self.port = daemon.host, daemon.port
        self.conn = http.client.HTTPConnection(self.host, self.port, timeout=120)

    def request(self, method, path, body=None, headers=None, raw=None, parse=True):
        h = {"Accept": "application/json"}
        h.update(headers or {})
        data = None
        if raw is not None:
            data = raw
            h.setdefault("Content-Type", "application/octet-stream")
        elif body is not None:
            data = json.dumps(body).encode()
            h["Content-Type"] = "application/json"
        for attempt in (1, 2):
            try:
                self.conn.request(method, path, body=data, headers=h)
                resp = self.conn.getresponse()
                raw = resp.read()
                break
            except (http.client.HTTPException, ConnectionError):
                # The server closed the connection: reconnect once.
                self.conn.close()
                self.conn = http.client.HTTPConnection(self.host, self.port, timeout=120)
                if attempt == 2:
                    raise
        if resp.getheader("Connection", "").lower() == "close":
            self.conn.close()
            self.conn = http.client.HTTPConnection(self.host, self.port, timeout=120)
        ctype = resp.getheader("Content-Type", "")
        if parse and ctype.startswith("application/json"):
            return resp.status, json.loads(raw)
        return resp.status, raw

    def timed(self, method, path, body=None, headers=None, expect=200, raw=None):
        # The client's own work (encoding the body, decoding the reply) is not the server's:
        # it is done outside the timed part.
        if body is not None and raw is None:
            raw = json.dumps(body).encode()
            headers = {**(headers or {}), "Content-Type": "application/json"}
        t0 = time.perf_counter_ns()
        status, reply = self.request(method, path, None, headers, raw, parse=False)
        elapsed = time.perf_counter_ns() - t0
        if isinstance(reply, bytes) and reply[:1] == b"{":
            reply = json.loads(reply)
        if status != expect:
            raise SystemExit(f"{method} {path}: status {status}: {str(reply)[:300]}")
        return elapsed, reply


def start_daemon(pool, binary=None):
    d = harness.Daemon(binary=binary, env={
        "SANDBOX_DEFAULT_TEMPLATE": TEMPLATE,
        "AUTH_ENABLED": "false",
        "SANDBOX_WARM_POOL": str(pool),
        "LOG_LEVEL": "warn",
        "SANDBOX_MAX_SESSIONS": "1024",
    })
    d.start()
    return d


def wait_for_pool(client, timeout=30):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        status, body = client.request("GET", "/health")
        # The pool of the template it creates from: every template has one.
        if status == 200 and body.get("warmPools", {}).get(TEMPLATE, 0) >= 1:
            return
        time.sleep(0.002)
    raise SystemExit("the warm pool did not refill within 30 s")


def bench_create(client, runs, warm):
    samples = []
    for i in range(runs):
        if warm:
            wait_for_pool(client)  # not timed: only the take from the pool is measured
        sid = f"bench-{'warm' if warm else 'cold'}-{i}"
        elapsed, body = client.timed("POST", "/exec/", {"id": sid}, expect=201)
        samples.append(elapsed)
        client.timed("DELETE", f"/exec/{sid}")
    return samples


def bench_daemon_ops(client, runs):
    sid = "bench-ops"
    client.timed("POST", "/exec/", {"id": sid}, expect=201)
    out = {}
    samples, spawns = [], []
    for _ in range(runs):
        elapsed, body = client.timed("POST", f"/exec/{sid}/execute", {"command": "true"})
        if body.get("exitCode") != 0:
            raise SystemExit(f"execute true: {body}")
        samples.append(elapsed)
        # Its baseline, taken between executes: a host whose speed drifts over a run (a
        # shared or nested VM) moves both alike.
        spawns += bench_spawn(1)
    out["execute"] = samples
    out["spawn_interleaved"] = spawns

    data = os.urandom(MiB)
    content = base64.b64encode(data).decode()
    samples = []
    for _ in range(runs):
        elapsed, body = client.timed("POST", f"/exec/{sid}/write",
                                     {"path": "bench.bin", "content": content,
                                      "encoding": "base64"})
        if body.get("size") != MiB:
            raise SystemExit(f"write: {body}")
        samples.append(elapsed)
    out["write"] = samples

    samples = []
    for _ in range(runs):
        elapsed, body = client.timed("PUT", f"/exec/{sid}/file?path=bench-raw.bin", raw=data)
        if body.get("size") != MiB:
            raise SystemExit(f"upload: {body}")
        samples.append(elapsed)
    out["upload"] = samples

    samples = []
    for _ in range(runs):
        elapsed, raw = client.timed("GET", f"/exec/{sid}/read?path=bench.bin",
                                    headers={"Accept": "application/octet-stream"})
        if raw != data:
            raise SystemExit("read (raw): the bytes differ")
        samples.append(elapsed)
    out["read_raw"] = samples

    samples = []
    for _ in range(runs):
        elapsed, body = client.timed("GET", f"/exec/{sid}/read?path=bench.bin&encoding=base64")
        if body.get("size") != MiB:
            raise SystemExit(f"read (base64): {str(body)[:200]}")
        samples.append(elapsed)
    out["read_b64"] = samples
    client.timed("DELETE", f"/exec/{sid}")
    return out


def bench_lifecycle(client, runs):
    """Pause, hibernate, fork and snapshot of one session with 4 MiB on its disk."""
    sid = "bench-life"
    client.timed("POST", "/exec/", {"id": sid, "storage": "disk"}, expect=201)
    client.timed("POST", f"/exec/{sid}/execute",
                 {"command": "head -c 4194304 /dev/urandom > data"})
    out = {k: [] for k in ("pause", "resume", "hibernate", "wake", "fork1", "fork10",
                           "snapshot", "from_snapshot")}

    def first_command(s):
        return client.timed("POST", f"/exec/{s}/execute", {"command": "true"})[0]

    for _ in range(runs):
        out["pause"].append(client.timed("POST", f"/exec/{sid}/pause")[0])
        out["resume"].append(client.timed("POST", f"/exec/{sid}/resume")[0])
        out["hibernate"].append(client.timed("POST", f"/exec/{sid}/pause",
                                             {"mode": "hibernate"})[0])
        t, _ = client.timed("POST", f"/exec/{sid}/resume")
        out["wake"].append(t + first_command(sid))
    for _ in range(runs):
        t, body = client.timed("POST", f"/exec/{sid}/fork", {"count": 1}, expect=201)
        f = body["sessions"][0]["id"]
        out["fork1"].append(t + first_command(f))
        client.timed("DELETE", f"/exec/{f}")
    for _ in range(max(1, runs // 10)):
        t, body = client.timed("POST", f"/exec/{sid}/fork", {"count": 10}, expect=201)
        forks = [f["id"] for f in body["sessions"]]
        out["fork10"].append(t + sum(first_command(f) for f in forks))
        for f in forks:
            client.timed("DELETE", f"/exec/{f}")
    size = 0
    for i in range(runs):
        t, snap = client.timed("POST", f"/exec/{sid}/snapshot", {"name": f"bench-{i}"},
                               expect=201)
        out["snapshot"].append(t)
        size = snap["sizeBytes"]
        t, body = client.timed("POST", "/exec/", {"snapshot": f"bench-{i}"}, expect=201)
        out["from_snapshot"].append(t + first_command(body["id"]))
        client.timed("DELETE", f"/exec/{body['id']}")
        client.timed("DELETE", f"/snapshots/bench-{i}")
    client.timed("DELETE", f"/exec/{sid}")
    return out, size


READS = (
    ("read 1 MiB (raw bytes)", "bench.bin", "", {"Accept": "application/octet-stream"}),
    ("read 1 MiB (base64 JSON)", "bench.bin", "&encoding=base64", None),
    ("read 1 MiB (text JSON)", "bench.txt", "", None),
)


def prepare_reads(client, sid, data, text):
    client.timed("POST", "/exec/", {"id": sid}, expect=201)
    for path, content, encoding in (("bench.bin", base64.b64encode(data).decode(), "base64"),
                                    ("bench.txt", text, "utf8")):
        _, body = client.timed("POST", f"/exec/{sid}/write",
                               {"path": path, "content": content, "encoding": encoding})
        if body.get("size") != MiB:
            raise SystemExit(f"write: {body}")


def check_read(name, reply, data, text):
    if "raw" in name:
        ok = reply == data
    elif "base64" in name:
        ok = base64.b64decode(reply.get("content", "")) == data
    else:
        ok = reply.get("content") == text and reply.get("encoding") == "utf8"
    if not ok:
        raise SystemExit(f"{name}: the contents differ")


def bench_reads_against(client, other, runs):
    """The reads, alternating between this daemon and the other one, request by request."""
    data = os.urandom(MiB)
    text = base64.b64encode(os.urandom(MiB))[:MiB].decode()
    prepare_reads(client, "bench-reads", data, text)
    prepare_reads(other, "bench-reads", data, text)
    out = {}
    for name, path, query, headers in READS:
        mine, theirs = [], []
        for _ in range(runs):
            for c, samples in ((client, mine), (other, theirs)):
                elapsed, reply = c.timed("GET", f"/exec/bench-reads/read?path={path}{query}",
                                         headers=headers)
                check_read(name, reply, data, text)
                samples.append(elapsed)
        out[name] = (mine, theirs)
    return out


def bench_spawn(runs):
    samples = []
    for _ in range(runs):
        t0 = time.perf_counter_ns()
        pid = os.posix_spawn("/bin/true", ["true"], os.environ)
        _, status = os.waitpid(pid, 0)
        samples.append(time.perf_counter_ns() - t0)
        if status != 0:
            raise SystemExit("/bin/true failed")
    return samples


def bench_local_file(runs):
    data = os.urandom(MiB)
    writes, reads = [], []
    with tempfile.TemporaryDirectory(prefix="bench-") as tmp:
        path = os.path.join(tmp, "f.bin")
        for _ in range(runs):
            t0 = time.perf_counter_ns()
            with open(path, "wb") as f:
                f.write(data)
            writes.append(time.perf_counter_ns() - t0)
            t0 = time.perf_counter_ns()
            with open(path, "rb") as f:
                got = f.read()
            reads.append(time.perf_counter_ns() - t0)
            if got != data:
                raise SystemExit("local read: the bytes differ")
    return writes, reads


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=200, help="runs per measurement (200)")
    ap.add_argument("--json", metavar="FILE", help="also write the results as JSON")
    ap.add_argument("--against", metavar="SANDBOXD",
                    help="also time the reads against this other daemon binary")
    ap.add_argument("--lifecycle", action="store_true",
                    help="also time pause, hibernate, fork and snapshots")
    args = ap.parse_args()
    if args.runs < 1:
        ap.error("--runs must be at least 1")
    runs = args.runs

    spawn = bench_spawn(runs)
    local_write, local_read = bench_local_file(runs)

    warm_daemon = start_daemon(pool=1)
    try:
        client = Client(warm_daemon)
        status, health = client.request("GET", "/health")
        driver = health.get("driver", "?")
        warm = bench_create(client, runs, warm=True)
        ops = bench_daemon_ops(client, runs)
    finally:
        warm_daemon.stop()
    cold_daemon = start_daemon(pool=0)
    life, snap_size = None, 0
    try:
        cold = bench_create(Client(cold_daemon), runs, warm=False)
        if args.lifecycle:
            life, snap_size = bench_lifecycle(Client(cold_daemon), max(1, runs // 10))
    finally:
        cold_daemon.stop()

    rows = [
        ("session create (warm pool)", warm, "spawn /bin/true", spawn),
        ("session create (cold)", cold, "spawn /bin/true", spawn),
        ("execute `true`", ops["execute"], "spawn, interleaved", ops["spawn_interleaved"]),
        ("write 1 MiB (base64 JSON)", ops["write"], "local write 1 MiB", local_write),
        ("write 1 MiB (raw PUT)", ops["upload"], "local write 1 MiB", local_write),
        ("read 1 MiB (raw bytes)", ops["read_raw"], "local read 1 MiB", local_read),
        ("read 1 MiB (base64 JSON)", ops["read_b64"], "local read 1 MiB", local_read),
    ]
    if life:
        rows += [
            ("pause (freeze)", life["pause"], "session create (cold)", cold),
            ("resume (freeze)", life["resume"], "session create (cold)", cold),
            ("hibernate", life["hibernate"], "session create (cold)", cold),
            ("resume hibernated + exec", life["wake"], "session create (cold)", cold),
            ("fork 1 + exec", life["fork1"], "session create (cold)", cold),
            ("fork 10 + exec in each", life["fork10"], "session create (cold)", cold),
            ("snapshot", life["snapshot"], "session create (cold)", cold),
            ("from snapshot + exec", life["from_snapshot"], "session create (cold)", cold),
        ]
    print(f"agent-sandbox latency: driver {driver}, {runs} runs each, milliseconds")
    print(f"{'operation':<28}{'p50':>9}{'p99':>9}   {'baseline':<22}{'p50':>8}{'p99':>8}"
          f"{'ratio p50':>11}")
    results = []
    for name, samples, base_name, base in rows:
        p50, p99 = percentile(samples, 50), percentile(samples, 99)
        b50, b99 = percentile(base, 50), percentile(base, 99)
        ratio = p50 / b50 if b50 else float("inf")
        print(f"{name:<28}{p50:>9.3f}{p99:>9.3f}   {base_name:<22}{b50:>8.3f}{b99:>8.3f}"
              f"{ratio:>10.1f}x")
        results.append({"operation": name, "p50_ms": p50, "p99_ms": p99,
                        "mean_ms": statistics.fmean(samples) / 1e6, "runs": len(samples),
                        "baseline": base_name, "baseline_p50_ms": b50, "baseline_p99_ms": b99,
                        "ratio_p50": ratio})
    targets = check_targets({r["operation"]: r for r in results})
    if life:
        print(f"snapshot of a session with 4 MiB written: {snap_size} bytes; lifecycle rows: "
              f"{len(life['pause'])} runs each ({len(life['fork10'])} of fork 10)")
    compared = []
    if args.against:
        compared = compare_reads(args.against, runs)
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump({"driver": driver, "runs": runs, "results": results,
                       "targets": targets, "against": compared}, f, indent=2)
            f.write("\n")


# The targets of the data path (docs/operations.md#performance): an absolute p50 in
# milliseconds, or a ratio of p50s to the row's baseline measured in the same run.
TARGETS = (
    ("session create (warm pool)", "p50", 5.0),
    ("execute `true`", "ratio", 1.2),
    ("write 1 MiB (raw PUT)", "p50", 2.0),
    ("read 1 MiB (raw bytes)", "p50", 2.0),
    ("write 1 MiB (base64 JSON)", "p50", 8.0),
    ("read 1 MiB (base64 JSON)", "p50", 8.0),
)


def check_targets(by_name):
    """Prints each target beside what was measured; returns them as a list."""
    out = []
    print()
    for name, kind, limit in TARGETS:
        r = by_name[name]
        if kind == "ratio":
            have, text = r["ratio_p50"], f"p50 {r['ratio_p50']:.2f}x {r['baseline']}"
            want = f"<= {limit}x"
        else:
            have, text = r["p50_ms"], f"p50 {r['p50_ms']:.3f} ms"
            want = f"<= {limit} ms"
        met = have <= limit
        print(f"target {name}: {text}, {want}: {'met' if met else 'NOT met'}")
        out.append({"operation": name, "kind": kind, "limit": limit, "value": have,
                    "met": met})
    print(f"targets met: {sum(t['met'] for t in out)} of {len(out)}")
    return out


def compare_reads(other_binary, runs):
    mine = start_daemon(pool=1)
    try:
        theirs = start_daemon(pool=1, binary=other_binary)
        try:
            out = bench_reads_against(Client(mine), Client(theirs), runs)
        finally:
            theirs.stop()
    finally:
        mine.stop()
    print(f"\nreads against {other_binary}, alternating, {runs} runs each, milliseconds")
    print(f"{'operation':<28}{'p50':>9}{'p99':>9}   {'other p50':>10}{'other p99':>10}"
          f"{'ratio p50':>11}")
    results = []
    for name, (a, b) in out.items():
        p50, p99 = percentile(a, 50), percentile(a, 99)
        o50, o99 = percentile(b, 50), percentile(b, 99)
        ratio = p50 / o50 if o50 else float("inf")
        print(f"{name:<28}{p50:>9.3f}{p99:>9.3f}   {o50:>10.3f}{o99:>10.3f}{ratio:>10.2f}x")
        results.append({"operation": name, "p50_ms": p50, "p99_ms": p99, "other_p50_ms": o50,
                        "other_p99_ms": o99, "ratio_p50": ratio})
    return results


if __name__ == "__main__":
    main()
