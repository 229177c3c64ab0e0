#!/usr/bin/env python3
"""Session creation p50 of the jail driver with a persistent volume mounted (always made
cold: docs/storage.md) against without one, cold and from the warm pool; and the p50 of
making a volume. Prints milliseconds and ratios. Usage: SANDBOXD=build/src/sandboxd
bench/volumes/create_p50.py [N]"""

import os
import statistics
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "tests", "integration"))
import harness  # noqa: E402

N = int(sys.argv[1]) if len(sys.argv) > 1 else 30
MiB = 1 << 20


def p50(pool, volumes):
    d = harness.Daemon(env={"SANDBOX_WARM_POOL": str(pool), "SANDBOX_DEFAULT_TEMPLATE": "base",
                            "SANDBOX_KEY_MAX_VOLUMES": "0"}, driver_name="jail").start()
    times, made = [], []
    try:
        if volumes:
            for i in range(N):
                t0 = time.perf_counter()
                status, _, body = d.post("/volumes", body={"name": f"v{i}",
                                                           "sizeBytes": 1024 * MiB})
                made.append((time.perf_counter() - t0) * 1000)
                assert status == 201, body
        for i in range(N):
            if pool:  # time for the pool to refill, so that each create is a claim
                time.sleep(0.3)
            body = {"template": "base"}
            if volumes:
                body["volumes"] = [{"name": f"v{i}", "path": "/data"}]
            t0 = time.perf_counter()
            status, _, resp = d.post("/exec/", body=body)
            times.append((time.perf_counter() - t0) * 1000)
            assert status == 201, resp
            d.delete(f"/exec/{resp['id']}")
    finally:
        d.stop(check=False)
    return statistics.median(times), statistics.median(made) if made else None


cold, _ = p50(0, False)
warm, _ = p50(2, False)
with_volume, make = p50(0, True)
print(f"create p50: no volume cold {cold:.2f} ms, from the warm pool {warm:.2f} ms, "
      f"with a volume (cold) {with_volume:.2f} ms")
print(f"with a volume / cold {with_volume / cold:.2f}, with a volume / warm pool "
      f"{with_volume / warm:.2f}")
print(f"POST /volumes p50 (1 GiB): {make:.2f} ms")
