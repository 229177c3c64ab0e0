#!/usr/bin/env python3
"""Latency of the daemon's requests while another process holds sandboxd.db's write lock.

Starts build/src/sandboxd (the integration tests' harness: a free port, temporary state), then
times, each `--runs` times:

  - alone: the request with nothing else going on (the baseline);
  - locked: the same request while another process (python's sqlite3) holds the database's
    write lock (BEGIN IMMEDIATE) for --hold seconds, sent 0.2 s after the lock is taken;
  - beside a writer, locked: GET /health sent while, at the same moment, a request that writes
    the database (GET /admin/keys, which writes pending last-use times first) is in the
    daemon: what every client sees when the event loop waits on the lock.

Prints p50 and max in milliseconds and the ratio locked/alone of the p50s. Needs root (the
daemon) and a built tree; the jail driver by default (DRIVER=...).

    sudo python3 bench/store/lock.py [--runs 3] [--hold 3]
"""
import argparse
import os
import sqlite3
import statistics
import sys
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "tests", "integration"))
import harness  # noqa: E402


def timed(fn):
    t = time.perf_counter()
    r = fn()
    return (time.perf_counter() - t) * 1000, r


class Lock:
    """Holds the database's write lock from another process's connection for `hold` s."""

    def __init__(self, path, hold):
        self.path, self.hold = path, hold
        self.taken = threading.Event()

    def run(self):
        db = sqlite3.connect(self.path, isolation_level=None, timeout=30)
        db.execute("BEGIN IMMEDIATE")
        self.taken.set()
        time.sleep(self.hold)
        db.execute("ROLLBACK")
        db.close()

    def start(self):
        t = threading.Thread(target=self.run, daemon=True)
        t.start()
        self.taken.wait()
        return t


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--hold", type=float, default=3.0)
    ap.add_argument("--template", default="base")
    args = ap.parse_args()
    d = harness.Daemon(env={"SANDBOX_WARM_POOL": "0", "LOG_LEVEL": "warn"})
    d.start()
    db = os.path.join(d.state_dir, "sandboxd.db")
    made = []

    def create():
        r = d.post("/exec/", body={"template": args.template})
        if r[0] == 201:
            made.append(r[2]["id"])
        return r

    def make_one():
        # Untimed: a session for the destroy to take.
        while not made:
            create()
            time.sleep(0.1)

    def destroy():
        return d.delete(f"/exec/{made.pop()}")

    try:
        dirty = lambda: d.get("/exec/templates")  # an authenticated request: a last use to write
        requests = {
            "GET /health (no key)": (None, lambda: d.get("/health", api_key="")),
            "GET /exec/templates (key)": (None, lambda: d.get("/exec/templates")),
            "GET /admin/keys (writes)": (dirty, lambda: d.get("/admin/keys")),
            "POST /exec/ (records first)": (None, create),
            "DELETE /exec/:id (writes)": (make_one, destroy),
        }
        rows = []
        for name, (prepare, fn) in requests.items():
            alone, locked, status = [], [], []
            for _ in range(args.runs):
                if prepare:
                    prepare()
                alone.append(timed(fn)[0])
                if prepare:
                    prepare()
                lock = Lock(db, args.hold)
                t = lock.start()
                time.sleep(0.2)
                ms, r = timed(fn)
                locked.append(ms)
                status.append(r[0])
                t.join()
            rows.append((name, alone, locked, status))
        for sid in made:
            d.delete(f"/exec/{sid}")
        # /health beside a writing request, both sent while the lock is held.
        alone, locked, status = [], [], []
        for _ in range(args.runs):
            alone.append(timed(requests["GET /health (no key)"][1])[0])
            dirty()
            lock = Lock(db, args.hold)
            t = lock.start()
            time.sleep(0.2)
            w = threading.Thread(target=lambda: d.get("/admin/keys"), daemon=True)
            w.start()
            time.sleep(0.05)
            ms, r = timed(requests["GET /health (no key)"][1])
            locked.append(ms)
            status.append(r[0])
            w.join()
            t.join()
        rows.append(("GET /health beside a writer", alone, locked, status))
    finally:
        d.stop(check=False)
    print(f"sandboxd requests while another process holds sandboxd.db's write lock "
          f"{args.hold:g} s ({args.runs} runs; ms)")
    print(f"{'request':30} {'alone p50':>10} {'locked p50':>11} {'locked max':>11} "
          f"{'ratio p50':>10}  statuses")
    for name, alone, locked, status in rows:
        a, l = statistics.median(alone), statistics.median(locked)
        print(f"{name:30} {a:10.2f} {l:11.2f} {max(locked):11.2f} {l / a:9.1f}x  "
              f"{','.join(map(str, status))}")


if __name__ == "__main__":
    main()
