"""The jail's fallbacks for kernels older than this one (docs/hosts.md), run here with
SANDBOX_KERNEL_FALLBACKS: what needs them (templates' images, disks and their overlay, volumes,
hibernation, resolv.conf) works the same, and nothing of the keeper's mounts shows in the
daemon's mount table, where every sandbox's mount namespace would copy it. The host lane runs
the same code on Debian 12's kernel, which has no choice."""

import shutil
import unittest

import harness
import test_hibernate
import test_storage
import test_volumes
from helpers_exec import DaemonTestCase, joined

FALLBACKS = {"SANDBOX_KERNEL_FALLBACKS": "mount-clone"}


def _jail_only():
    if harness.driver() != "jail":
        raise unittest.SkipTest("the fallbacks are the jail driver's")


class StorageWithFallbacksTest(test_storage.StorageTest):
    daemon_env = {**test_storage.StorageTest.daemon_env, **FALLBACKS}


class VolumesWithFallbacksTest(test_volumes.VolumeTest):
    daemon_env = {**test_volumes.VolumeTest.daemon_env, **FALLBACKS}


class HibernateWithFallbacksTest(test_hibernate.HibernateTest):
    daemon_env = {**test_hibernate.HibernateTest.daemon_env, **FALLBACKS}


class DiskCrashWithFallbacksTest(test_storage.DiskCrashTest):
    """kill -9 amid creations with the keeper: its mounts, the disks' loop devices with them,
    end with the daemon."""

    extra_env = FALLBACKS


class KeeperTest(DaemonTestCase):
    daemon_env = {"SANDBOX_WARM_POOL": "0", "SANDBOX_DEFAULT_TEMPLATE": "base", **FALLBACKS}

    @classmethod
    def setUpClass(cls):
        _jail_only()
        super().setUpClass()

    def mountinfo(self):
        """The daemon's mount table, but the sessions' network namespaces (nsfs mounts in
        /run/netns, which it makes there on purpose)."""
        with open(f"/proc/{self.d.proc.pid}/mountinfo") as f:
            return [line for line in f if " - nsfs " not in line]

    def test_the_log_names_the_fallback(self):
        msgs = [e.get("msg", "") for e in self.d.logs()]
        self.assertTrue(any("mount keeper" in m for m in msgs), msgs[:20])

    def test_sandboxes_mounts_stay_out_of_the_daemons_table(self):
        before = self.mountinfo()
        sids = [self.session() for _ in range(3)]
        for sid in sids:
            status, body = self.execute(sid, "sh", args=["-c", "echo hi > /workspace/f; cat f"])
            self.assertEqual(status, 200, body)
            self.assertEqual(joined(body["output"], "stdout"), "hi\n")
        self.assertEqual(self.mountinfo(), before)

    def test_unknown_fallback_refused_at_start(self):
        d = harness.Daemon(env={"SANDBOX_KERNEL_FALLBACKS": "mount-clone,warp-drive"})
        self.addCleanup(d.kill)
        with self.assertRaises(AssertionError):
            d.start()
        self.addCleanup(shutil.rmtree, d.tmp, True)
        self.assertIn("`warp-drive` is not a kernel feature with a fallback", d.stderr())


if __name__ == "__main__":
    unittest.main()
