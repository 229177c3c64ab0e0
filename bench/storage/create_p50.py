#!/usr/bin/env python3
"""Session creation p50 with a disk per sandbox (SANDBOX_STORAGE=disk) against the tmpfs
mode, cold (no warm pool) and from the warm pool, which makes the disks ahead. Prints
milliseconds and ratios. Usage: SANDBOXD=build/src/sandboxd bench/storage/create_p50.py [N]
[DRIVER] (DRIVER: jail, the default, or qemu; a qemu create includes the guest mounting its
disk, done with the restore's `resume`)."""

import os
import statistics
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "tests", "integration"))
import harness  # noqa: E402

N = int(sys.argv[1]) if len(sys.argv) > 1 else 30
DRIVER = sys.argv[2] if len(sys.argv) > 2 else "jail"
# How long the pool takes to make a sandbox again: a VM's restore takes far longer.
REFILL_S = 0.3 if DRIVER == "jail" else 4.0


def p50(storage, pool):
    d = harness.Daemon(env={"SANDBOX_STORAGE": storage, "SANDBOX_WARM_POOL": str(pool),
                            "SANDBOX_DEFAULT_TEMPLATE": "base"}, driver_name=DRIVER,
                       start_timeout=120).start()
    times = []
    try:
        for _ in range(N):
            if pool:  # time for the pool to refill, so that each create is a claim
                time.sleep(REFILL_S)
            t0 = time.perf_counter()
            status, _, body = d.post("/exec/", body={"template": "base"}, timeout=120)
            times.append((time.perf_counter() - t0) * 1000)
            assert status == 201, body
            d.delete(f"/exec/{body['id']}", timeout=60)
    finally:
        d.stop(check=False)
    return statistics.median(times)


cold_tmpfs, cold_disk = p50("tmpfs", 0), p50("disk", 0)
warm_tmpfs, warm_disk = p50("tmpfs", 2), p50("disk", 2)
print(f"driver {DRIVER}, {N} creations each")
print(f"create p50 cold: tmpfs {cold_tmpfs:.2f} ms, disk {cold_disk:.2f} ms, "
      f"ratio disk/tmpfs {cold_disk / cold_tmpfs:.2f}")
print(f"create p50 warm pool: tmpfs {warm_tmpfs:.2f} ms, disk {warm_disk:.2f} ms, "
      f"ratio disk/tmpfs {warm_disk / warm_tmpfs:.2f}")
print(f"disk: warm pool / cold {warm_disk / cold_disk:.3f}")
