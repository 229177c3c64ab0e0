"""Admission that protects the host: sessions are refused (503, with the reason) while the
daemon's descriptors are below their watermark, and admitted again once there is room (the
memory watermark's refusal is in test_limits.MemoryWatermarkTest)."""

import os
import unittest

import harness
from helpers_exec import new_session_id

SANDBOXD = harness.sandboxd_path()


def metric(d, name, label=None):
    _, _, text = d.get("/metrics", headers={"Accept": "text/plain"})
    text = text.decode() if isinstance(text, bytes) else str(text)
    for line in text.splitlines():
        if line.startswith(name) and (label is None or label in line):
            return float(line.split()[-1])
    return None


class DescriptorWatermarkTest(unittest.TestCase):
    """A daemon whose descriptor limit is small (prlimit): sessions are admitted while enough
    descriptors stay free, then refused with reason "descriptors" (never an EMFILE in the
    middle of a creation), and admitted again when one goes."""

    LIMIT = 256
    RESERVE = 160

    @classmethod
    def setUpClass(cls):
        prlimit = "/usr/bin/prlimit"
        if not os.access(prlimit, os.X_OK):
            raise unittest.SkipTest("prlimit (util-linux) is not installed")
        cls.d = harness.Daemon(
            binary=prlimit,
            args=[f"--nofile={cls.LIMIT}:{cls.LIMIT}", SANDBOXD],
            env={"SANDBOX_DESCRIPTOR_RESERVE": str(cls.RESERVE), "SANDBOX_WARM_POOL": "0",
                 "SANDBOX_NETWORK": "off", "SANDBOX_STORAGE": "tmpfs",
                 "SANDBOX_MAX_SESSIONS": "1000", "AUTH_ENABLED": "false", "VM_NOFILE_LIMIT": "64",
                 "SANDBOX_DEFAULT_TEMPLATE": "base"})
        cls.d.start()
        cls.addClassCleanup(cls.d.stop)

    def fds(self):
        return len(os.listdir(f"/proc/{self.d.proc.pid}/fd"))

    def test_refused_at_the_reserve_then_admitted_again(self):
        made = []
        refusal = None
        for i in range(self.LIMIT):
            sid = f"fd-{i}"
            status, _, body = self.d.post("/exec/", body={"id": sid}, timeout=60)
            if status != 201:
                refusal = (status, body)
                break
            made.append(sid)
        self.assertIsNotNone(refusal, f"{len(made)} sessions and no refusal")
        status, body = refusal
        self.assertEqual(status, 503, body)
        self.assertEqual(body.get("reason"), "descriptors", body)
        self.assertIn("SANDBOX_DESCRIPTOR_RESERVE", body["error"])
        # It stopped where the reserve says, not earlier (one descriptor per idle session).
        open_now = self.fds()
        self.assertGreater(open_now + self.RESERVE, self.LIMIT - 8, open_now)
        self.assertGreater(len(made), (self.LIMIT - self.RESERVE) // 2, len(made))
        print(f"admitted {len(made)} sessions, {open_now} descriptors open", flush=True)
        # The sessions there still work, and so does the rest of the API.
        status, _, body = self.d.post(f"/exec/{made[0]}/execute", body={"command": "echo ok"})
        self.assertEqual(status, 200, body)
        self.assertEqual(body["exitCode"], 0)
        status, _, body = self.d.get("/ready")
        self.assertEqual(status, 503, body)
        self.assertIs(body["checks"]["descriptors"], False, body)
        self.assertGreaterEqual(metric(self.d, "admission_refusals_total",
                                       'reason="descriptors"'), 1)
        # One goes: one more is admitted.
        for sid in made[:3]:
            status, _, body = self.d.delete(f"/exec/{sid}")
            self.assertEqual(status, 200, body)
        harness.wait_until(lambda: self.fds() + self.RESERVE <= self.LIMIT - 2, timeout=30,
                           what="the destroyed sessions' descriptors closed")
        status, _, body = self.d.post("/exec/", body={"id": "fd-again"}, timeout=60)
        self.assertEqual(status, 201, body)
        for sid in made[3:] + ["fd-again"]:
            self.d.delete(f"/exec/{sid}")


if __name__ == "__main__":
    unittest.main()
