#!/usr/bin/env python3
"""Throughput of the preview relay (api/proxy.c over http/upstream.h): a file served by a
server inside a sandbox, downloaded through `/exec/:id/ports/:port/...`, against this daemon
and another one (say a build of an earlier commit) in the same run, alternating download by
download so that both see the same host. Prints each daemon's p50 and best MB/s and the
ratio of the p50s (this / other).

Both daemons run with SANDBOX_NETWORK=off (a preview goes through the agent's channel, not
the sandbox's network), so that they need nothing of the host's networking.

Usage: python3 bench/preview/relay.py --against OTHER [--size-mib N (64)] [--runs N (5)]
Environment: SANDBOXD (default build/src/sandboxd), DRIVER as for the integration tests.
"""

import argparse
import hashlib
import http.client
import json
import os
import statistics
import sys
import time

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "tests", "integration"))

import harness  # noqa: E402

MiB = 1 << 20
PORT = 8099


def start(binary, size):
    env = {"AUTH_ENABLED": "false", "SANDBOX_WARM_POOL": "0", "LOG_LEVEL": "warn",
           "SANDBOX_NETWORK": "off"}
    if binary:
        env["SANDBOX_AGENT_BIN"] = os.environ.get("OTHER_AGENT_BIN") or os.path.join(
            os.path.dirname(os.path.dirname(os.path.abspath(binary))), "agent", "sandbox-agent")
    d = harness.Daemon(env=env, binary=binary) if binary else harness.Daemon(env=env)
    d.start()
    c = http.client.HTTPConnection(d.host, d.port, timeout=300)

    def call(method, path, body=None):
        c.request(method, path, body=json.dumps(body) if body is not None else None,
                  headers={"Content-Type": "application/json"})
        r = c.getresponse()
        return r.status, r.read()

    st, out = call("POST", "/exec", {"id": "relay", "template": "python"})
    if st != 201:
        raise SystemExit(f"create: {st} {out[:300]}")
    # The file, made inside the sandbox; then a server for it.
    st, out = call("POST", "/exec/relay/execute", {
        "command": f"head -c {size} /dev/urandom > /tmp/f.bin && sha256sum /tmp/f.bin"})
    stdout = "".join(o["data"] for o in json.loads(out)["output"] if o["stream"] == "stdout")
    digest = stdout.split()[0]
    call("POST", "/exec/relay/processes",
         {"command": f"cd /tmp && python3 -m http.server {PORT} --bind 127.0.0.1"})
    for _ in range(400):
        st, out = call("GET", "/exec/relay/ports")
        if f'"port":{PORT}'.encode() in out:
            break
        time.sleep(0.05)
    c.close()
    return d, digest


def download(d, size, want):
    conn = http.client.HTTPConnection(d.host, d.port, timeout=600)
    t0 = time.perf_counter()
    conn.request("GET", f"/exec/relay/ports/{PORT}/f.bin")
    r = conn.getresponse()
    h, n = hashlib.sha256(), 0
    while True:
        chunk = r.read(MiB)
        if not chunk:
            break
        h.update(chunk)
        n += len(chunk)
    elapsed = time.perf_counter() - t0
    conn.close()
    if r.status != 200 or n != size or h.hexdigest() != want:
        raise SystemExit(f"download: status {r.status}, {n} bytes, digest mismatch")
    return size / MiB / elapsed


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--against", required=True, help="the other sandboxd binary")
    ap.add_argument("--size-mib", type=int, default=64)
    ap.add_argument("--runs", type=int, default=5)
    args = ap.parse_args()
    size = args.size_mib * MiB
    this, want_this = start(None, size)
    other, want_other = start(args.against, size)
    rates = {"this": [], "other": []}
    try:
        for _ in range(args.runs):
            rates["this"].append(download(this, size, want_this))
            rates["other"].append(download(other, size, want_other))
    finally:
        this.stop(check=False)
        other.stop(check=False)
    print(f"preview relay: {args.size_mib} MiB through /exec/:id/ports/{PORT}/, "
          f"{args.runs} runs each, alternating")
    print(f"{'daemon':8} {'p50 MB/s':>9} {'best MB/s':>10}")
    for name in ("this", "other"):
        print(f"{name:8} {statistics.median(rates[name]):9.0f} {max(rates[name]):10.0f}")
    print(f"ratio of the p50s (this / other): "
          f"{statistics.median(rates['this']) / statistics.median(rates['other']):.2f}")


if __name__ == "__main__":
    main()
