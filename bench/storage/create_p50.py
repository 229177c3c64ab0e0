#!/usr/bin/env python3
"""Session creation p50 of the jail driver with a disk per sandbox (SANDBOX_STORAGE=disk)
against the tmpfs mode, cold (no warm pool) and from the warm pool, which makes the disks
ahead. Prints milliseconds and ratios. Usage: SANDBOXD=build/src/sandboxd
bench/storage/create_p50.py [N]"""

import os
import statistics
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "tests", "integration"))
import harness  # noqa: E402

N = int(sys.argv[1]) if len(sys.argv) > 1 else 30


def p50(storage, pool):
    d = harness.Daemon(env={"SANDBOX_STORAGE": storage, "SANDBOX_WARM_POOL": str(pool),
                            "SANDBOX_DEFAULT_TEMPLATE": "base"}, driver_name="jail").start()
    times = []
    try:
        for _ in range(N):
            if pool:  # time for the pool to refill, so that each create is a claim
                time.sleep(0.3)
            t0 = time.perf_counter()
            status, _, body = d.post("/exec/", body={"template": "base"})
            times.append((time.perf_counter() - t0) * 1000)
            assert status == 201, body
            d.delete(f"/exec/{body['id']}")
    finally:
        d.stop(check=False)
    return statistics.median(times)


cold_tmpfs, cold_disk = p50("tmpfs", 0), p50("disk", 0)
warm_tmpfs, warm_disk = p50("tmpfs", 2), p50("disk", 2)
print(f"create p50 cold: tmpfs {cold_tmpfs:.2f} ms, disk {cold_disk:.2f} ms, "
      f"ratio disk/tmpfs {cold_disk / cold_tmpfs:.2f}")
print(f"create p50 warm pool: tmpfs {warm_tmpfs:.2f} ms, disk {warm_disk:.2f} ms, "
      f"ratio disk/tmpfs {warm_disk / warm_tmpfs:.2f}")
print(f"disk: warm pool / cold {warm_disk / cold_disk:.3f}")
