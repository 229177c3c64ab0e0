#!/usr/bin/env python3
"""Large files through the daemon's streamed path, beside a local copy in the same run.

A jail session with room for them (its disk and memory are stated in the output) gets a file
uploaded with `PUT /exec/:id/file` (the bytes as the body, chunked) and downloaded with
`GET /exec/:id/read` (`Accept: application/octet-stream`), through a preview too
(`/exec/:id/ports/:port/...` from a server in the sandbox), each checked by SHA-256. For each
it prints the throughput in MB/s beside `cp` of a file of the same size in a local temporary
directory (the baseline), and the daemon's resident memory before and at its peak during the
transfer (sampled every 10 ms): what a streamed path must keep flat.

Usage: python3 bench/exec/large.py [--size-mib N (1024)] [--rate-mib N (256)] [--json FILE]
Environment: SANDBOXD (default build/src/sandboxd), FIRECRACKER_ARTIFACTS_DIR.
"""

import argparse
import hashlib
import http.client
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "tests", "integration"))

import harness  # noqa: E402

MiB = 1 << 20


def rss_kib(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


class PeakRss:
    """The daemon's peak RSS while a block runs."""

    def __init__(self, pid):
        self.pid, self.peak, self.stop = pid, 0, False

    def __enter__(self):
        self.before = rss_kib(self.pid)
        self.t = threading.Thread(target=self.run, daemon=True)
        self.t.start()
        return self

    def run(self):
        while not self.stop:
            self.peak = max(self.peak, rss_kib(self.pid))
            time.sleep(0.01)

    def __exit__(self, *exc):
        self.stop = True
        self.t.join()

    @property
    def grown_mib(self):
        return max(0, self.peak - self.before) / 1024


def upload(d, sid, path, size, block):
    conn = http.client.HTTPConnection(d.host, d.port, timeout=3600)
    n = size // len(block)
    t0 = time.perf_counter()
    conn.request("PUT", f"/exec/{sid}/file?path={path}", body=(block for _ in range(n)),
                 encode_chunked=True, headers={"Content-Type": "application/octet-stream"})
    r = conn.getresponse()
    reply = json.loads(r.read())
    elapsed = time.perf_counter() - t0
    conn.close()
    if r.status != 200 or reply.get("size") != size:
        raise SystemExit(f"upload: {r.status} {reply}")
    return elapsed


def download(d, url, size, want):
    conn = http.client.HTTPConnection(d.host, d.port, timeout=3600)
    t0 = time.perf_counter()
    conn.request("GET", url, headers={"Accept": "application/octet-stream"})
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
        raise SystemExit(f"download {url}: status {r.status}, {n} bytes, digest mismatch")
    return elapsed


def local_cp(size, block):
    with tempfile.TemporaryDirectory() as tmp:
        src, dst = os.path.join(tmp, "a"), os.path.join(tmp, "b")
        with open(src, "wb") as f:
            for _ in range(size // len(block)):
                f.write(block)
        t0 = time.perf_counter()
        shutil.copyfile(src, dst)
        with open(dst, "rb") as f:
            os.fsync(f.fileno())
        return time.perf_counter() - t0


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--size-mib", type=int, default=1024)
    ap.add_argument("--rate-mib", type=int, default=256)
    ap.add_argument("--json")
    args = ap.parse_args()
    block = os.urandom(MiB)
    disk = (args.size_mib + args.rate_mib + 512) * MiB
    memory = 256 * MiB
    d = harness.Daemon(env={"SANDBOX_DEFAULT_TEMPLATE": "python", "AUTH_ENABLED": "false",
                            "SANDBOX_WARM_POOL": "0", "LOG_LEVEL": "warn",
                            "SANDBOX_MAX_DISK_BYTES": str(disk),
                            "SANDBOX_MAX_READ_BYTES": str(2 * disk)})
    d.start()
    results = {}
    try:
        c = http.client.HTTPConnection(d.host, d.port, timeout=120)
        c.request("POST", "/exec", body=json.dumps({
            "id": "large", "template": "python",
            "resources": {"memoryBytes": memory, "diskBytes": disk}}),
            headers={"Content-Type": "application/json"})
        r = c.getresponse()
        if r.status != 201:
            raise SystemExit(f"create: {r.status} {r.read()[:300]}")
        r.read()
        print(f"agent-sandbox large files: driver jail, session disk {disk // MiB} MiB, "
              f"memory {memory // MiB} MiB, {args.size_mib} MiB and {args.rate_mib} MiB files")
        rows = []
        for label, mib in (("rate", args.rate_mib), ("large", args.size_mib)):
            size = mib * MiB
            h = hashlib.sha256()
            for _ in range(mib):
                h.update(block)
            want = h.hexdigest()
            with PeakRss(d.proc.pid) as up:
                t_up = upload(d, "large", f"{label}.bin", size, block)
            with PeakRss(d.proc.pid) as down:
                t_down = download(d, f"/exec/large/read?path={label}.bin", size, want)
            rows.append((f"upload {mib} MiB (PUT)", size, t_up, up))
            rows.append((f"download {mib} MiB (read)", size, t_down, down))
            if label == "rate":
                # Through a preview: a file server in the sandbox.
                c.request("POST", "/exec/large/processes", body=json.dumps(
                    {"command": "python3 -m http.server 8099 --bind 127.0.0.1"}),
                    headers={"Content-Type": "application/json"})
                c.getresponse().read()
                for _ in range(200):
                    c.request("GET", "/exec/large/ports")
                    if b'"port":8099' in c.getresponse().read():
                        break
                    time.sleep(0.05)
                with PeakRss(d.proc.pid) as pv:
                    t_pv = download(d, f"/exec/large/ports/8099/{label}.bin", size, want)
                rows.append((f"download {mib} MiB (preview)", size, t_pv, pv))
        t_cp = local_cp(args.rate_mib * MiB, block)
        cp_rate = args.rate_mib / t_cp
        print(f"{'operation':32} {'MB/s':>9} {'seconds':>8} {'RSS before':>11} "
              f"{'peak +MiB':>10}   baseline: cp {args.rate_mib} MiB {cp_rate:.0f} MB/s")
        for name, size, t, rss in rows:
            rate = size / MiB / t
            print(f"{name:32} {rate:9.0f} {t:8.2f} {rss.before / 1024:10.1f}M "
                  f"{rss.grown_mib:10.1f}   {rate / cp_rate:.2f}x of cp")
            results[name] = {"mb_s": rate, "seconds": t, "rss_before_mib": rss.before / 1024,
                             "rss_growth_mib": rss.grown_mib, "ratio_to_cp": rate / cp_rate}
        results["cp"] = {"mb_s": cp_rate}
    finally:
        d.stop(check=False)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=2)


if __name__ == "__main__":
    main()
