#!/usr/bin/env python3
"""What the jail's fallback for kernels before 6.15 costs (docs/hosts.md): cold session
creation p50 with the mount keeper (SANDBOX_KERNEL_FALLBACKS=mount-clone) against without it,
for disk and tmpfs storage. Two daemons run at once, one each way, and their creations
alternate, so that a host whose speed drifts moves both alike. Prints milliseconds and the
ratio keeper / direct. Usage: SANDBOXD=build/src/sandboxd bench/storage/fallbacks.py [N]"""

import os
import statistics
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "tests", "integration"))
import harness  # noqa: E402

N = int(sys.argv[1]) if len(sys.argv) > 1 else 40


def daemon(storage, fallbacks):
    env = {"SANDBOX_STORAGE": storage, "SANDBOX_WARM_POOL": "0", "SANDBOX_NETWORK": "off",
           "SANDBOX_DEFAULT_TEMPLATE": "base", "AUTH_ENABLED": "false", "LOG_LEVEL": "warn",
           "SANDBOX_KERNEL_FALLBACKS": fallbacks}
    return harness.Daemon(env=env, start_timeout=120).start()


def create_ms(d):
    t0 = time.perf_counter()
    status, _, body = d.post("/exec/", body={"template": "base"}, timeout=120)
    took = (time.perf_counter() - t0) * 1000
    assert status == 201, body
    d.delete(f"/exec/{body['id']}", timeout=60)
    return took


def compare(storage):
    direct, keeper = daemon(storage, None), daemon(storage, "mount-clone")
    a, b = [], []
    try:
        for i in range(N):
            # Alternating which goes first, so that neither always follows the other's teardown.
            pair = (direct, keeper) if i % 2 == 0 else (keeper, direct)
            for d in pair:
                (a if d is direct else b).append(create_ms(d))
    finally:
        direct.stop(check=False)
        keeper.stop(check=False)
    pa, pb = statistics.median(a), statistics.median(b)
    print(f"{storage}: cold create p50 direct {pa:.2f} ms, mount keeper {pb:.2f} ms, "
          f"ratio keeper/direct {pb / pa:.3f}")


print(f"jail, {N} creations each way, alternating")
compare("disk")
compare("tmpfs")
