"""Persistent volumes (docs/storage.md): made, listed and deleted by their owner's key,
mounted at session creation with canonical ownership, one writer and any number of readers,
their contents kept across sessions and daemon restarts, their limits enforced, and nothing
left mounted or attached when sessions end or the daemon is killed while making one."""

import os
import signal
import subprocess
import threading
import time
import unittest

import harness
from helpers_exec import DaemonTestCase, joined, new_session_id, start_daemon, wait_until

MiB = 1024 * 1024
GiB = 1024 * MiB


def loops_of(state_dir):
    """The loop devices whose backing file is a volume image under state_dir/volumes."""
    out = subprocess.run(["losetup", "-l", "-n", "-O", "NAME,BACK-FILE"],
                         capture_output=True, text=True, check=True).stdout
    where = os.path.join(state_dir, "volumes")
    return [line.split()[0] for line in out.splitlines() if where in line]


def images_in(state_dir):
    try:
        return sorted(os.listdir(os.path.join(state_dir, "volumes")))
    except FileNotFoundError:
        return []


class VolumeCase(DaemonTestCase):
    daemon_env = {
        "AUTH_ENABLED": "true",
        "SANDBOX_WARM_POOL": "1",
        "SANDBOX_DEFAULT_TEMPLATE": "base",
        "SANDBOX_DISK_BYTES": str(256 * MiB),
        "SANDBOX_KEY_MAX_VOLUMES": "4",
        "SANDBOX_KEY_MAX_VOLUME_BYTES": str(2 * GiB),
    }

    @classmethod
    def setUpClass(cls):
        if harness.driver() != "jail":
            raise unittest.SkipTest("volumes are mounted by the jail driver")
        super().setUpClass()
        status, _, key = cls.d.post("/admin/keys", body={"name": "vol-a", "scopes": ["exec"]})
        assert status == 201, key
        cls.key_a = key["key"]
        status, _, key = cls.d.post("/admin/keys", body={"name": "vol-b", "scopes": ["exec"]})
        assert status == 201, key
        cls.key_b = key["key"]

    def volume(self, name, size=64 * MiB, key=None, expect=201):
        key = key or self.key_a
        status, headers, body = self.d.post("/volumes", body={"name": name, "sizeBytes": size},
                                            api_key=key, timeout=60)
        self.assertEqual(status, expect, body)
        if status == 201:
            self.addCleanup(self.delete_volume, name, key)
        return status, headers, body

    def delete_volume(self, name, key):
        """Deletes it once the sessions that mounted it are gone (a moment after theirs)."""
        def gone():
            status, _, body = self.d.delete(f"/volumes/{name}", api_key=key, timeout=30)
            self.assertIn(status, (200, 404, 409), body)
            return status != 409
        wait_until(gone, 10, what=f"volume {name} to be released")

    def create(self, volumes, key=None, expect=201, **body):
        key = key or self.key_a
        sid = new_session_id(self._testMethodName.removeprefix("test_"))
        status, headers, resp = self.d.post("/exec/", body={"id": sid, "volumes": volumes,
                                                           **body},
                                            api_key=key, timeout=60)
        if expect is not None:
            self.assertEqual(status, expect, resp)
        if status == 201:
            self.addCleanup(self.d.delete, f"/exec/{sid}", api_key=key, timeout=30)
        return sid, status, headers, resp

    def run_as(self, sid, command, key=None):
        status, _, body = self.d.post(f"/exec/{sid}/execute", body={"command": command},
                                      api_key=key or self.key_a, timeout=60)
        self.assertEqual(status, 200, body)
        return body

    def ok(self, sid, command, key=None):
        body = self.run_as(sid, command, key)
        self.assertEqual(body["exitCode"], 0, body)
        return joined(body["output"], "stdout")

    def destroy(self, sid, key=None):
        status, _, body = self.d.delete(f"/exec/{sid}", api_key=key or self.key_a, timeout=30)
        self.assertEqual(status, 200, body)


class VolumeTest(VolumeCase):
    def test_mounted_owned_by_the_command_user_and_shown(self):
        _, _, vol = self.volume("shown")
        self.assertEqual((vol["name"], vol["sizeBytes"], vol["state"]),
                         ("shown", 64 * MiB, "ready"))
        sid, _, _, body = self.create([{"name": "shown", "path": "/data"}])
        self.assertEqual(body["volumes"], [{"name": "shown", "path": "/data",
                                            "readOnly": False}])
        self.ok(sid, "echo hi > /data/f && mkdir /data/d")
        out = self.ok(sid, "ls -ln /data | grep -v '^total'")
        for line in out.splitlines():
            if line.split()[-1] in ("f", "d"):
                self.assertEqual(line.split()[2:4], ["1000", "1000"], out)
        self.assertIn(" /data ", self.ok(sid, "cat /proc/mounts"))
        status, _, got = self.d.get("/volumes/shown", api_key=self.key_a)
        self.assertEqual(status, 200, got)
        self.assertEqual(got["mounts"], [{"sessionId": sid, "readOnly": False}])
        status, _, listed = self.d.get("/volumes", api_key=self.key_a)
        self.assertIn("shown", [v["name"] for v in listed["volumes"]])

    def test_one_writer_many_readers(self):
        self.volume("shared")
        writer, _, _, _ = self.create([{"name": "shared", "path": "/data"}])
        self.ok(writer, "echo from-writer > /data/note")
        _, status, headers, body = self.create([{"name": "shared", "path": "/data"}],
                                               expect=409)
        self.assertJsonError(status, headers, body, 409, "one writer")
        readers = [self.create([{"name": "shared", "path": "/mnt/v", "readOnly": True}])[0]
                   for _ in range(4)]
        for sid in readers:
            self.assertEqual(self.ok(sid, "cat /mnt/v/note"), "from-writer\n")
            body = self.run_as(sid, "echo x > /mnt/v/other")
            self.assertNotEqual(body["exitCode"], 0, body)
            self.assertIn("Read-only file system", joined(body["output"]))
        # What the writer writes now, the readers see: one filesystem.
        self.ok(writer, "echo later > /data/later && sync")
        self.assertEqual(self.ok(readers[0], "cat /mnt/v/later"), "later\n")
        # Once the writer is gone, another session may write: the delete answers then.
        self.destroy(writer)
        sid, _, _, _ = self.create([{"name": "shared", "path": "/data"}])
        self.ok(sid, "echo second >> /data/note")
        self.assertEqual(self.ok(sid, "cat /data/note"), "from-writer\nsecond\n")

    def test_quota_is_enospc_inside(self):
        self.volume("small", size=16 * MiB)
        sid, _, _, _ = self.create([{"name": "small", "path": "/data"}])
        body = self.run_as(sid, "dd if=/dev/zero of=/data/big bs=1M count=64")
        self.assertNotEqual(body["exitCode"], 0, body)
        self.assertIn("No space left on device", joined(body["output"]))
        # The workspace is another disk: it still takes writes.
        self.ok(sid, "echo fine > /workspace/f")

    def test_delete_while_mounted_is_409_and_unmounts_on_destroy(self):
        self.volume("busy")
        sid, _, _, _ = self.create([{"name": "busy", "path": "/data"}])
        self.ok(sid, "echo x > /data/x")
        self.assertEqual(len(loops_of(self.d.state_dir)), 1)
        status, headers, body = self.d.delete("/volumes/busy", api_key=self.key_a)
        self.assertJsonError(status, headers, body, 409, sid)
        self.destroy(sid)
        # The delete answered once the volume was free.
        status, _, body = self.d.delete("/volumes/busy", api_key=self.key_a)
        self.assertEqual(status, 200, body)
        # The sandbox's mounts went with it, then the daemon's: the loop device detaches.
        wait_until(lambda: not loops_of(self.d.state_dir), 10,
                   what="the volume's loop device to detach")
        with open("/proc/self/mountinfo") as f:
            self.assertNotIn(os.path.join(self.d.state_dir, "volumes"), f.read())
        self.assertNotIn("busy", " ".join(images_in(self.d.state_dir)))
        status, headers, body = self.d.get("/volumes/busy", api_key=self.key_a)
        self.assertJsonError(status, headers, body, 404)

    def test_other_keys_get_404_and_admin_sees_all(self):
        self.volume("mine")
        for method, path in (("GET", "/volumes/mine"), ("DELETE", "/volumes/mine")):
            status, headers, body = self.d.request(method, path, api_key=self.key_b,
                                                   timeout=30)
            self.assertJsonError(status, headers, body, 404)
        status, _, listed = self.d.get("/volumes", api_key=self.key_b)
        self.assertNotIn("mine", [v["name"] for v in listed["volumes"]])
        _, status, headers, body = self.create([{"name": "mine", "path": "/data"}],
                                               key=self.key_b, expect=404)
        self.assertJsonError(status, headers, body, 404, "mine")
        # Names are per key: B's "mine" is another volume.
        self.volume("mine", key=self.key_b)
        status, _, listed = self.d.get("/volumes")  # the admin key
        owners = [v["owner"] for v in listed["volumes"] if v["name"] == "mine"]
        self.assertEqual(len(owners), 2, listed)
        self.assertEqual(len(set(owners)), 2, listed)

    def test_per_key_limits_are_429_with_json(self):
        key = self.d.post("/admin/keys", body={"name": "vol-c", "scopes": ["exec"]})[2]["key"]
        for i in range(4):
            self.volume(f"n{i}", size=8 * MiB, key=key)
        status, headers, body = self.volume("n4", size=8 * MiB, key=key, expect=429)
        self.assertJsonError(status, headers, body, 429, "SANDBOX_KEY_MAX_VOLUMES")
        key2 = self.d.post("/admin/keys", body={"name": "vol-d", "scopes": ["exec"]})[2]["key"]
        self.volume("big1", size=GiB, key=key2)
        status, headers, body = self.volume("big2", size=GiB + MiB, key=key2, expect=429)
        self.assertJsonError(status, headers, body, 429, "SANDBOX_KEY_MAX_VOLUME_BYTES")

    # attacks

    def test_concurrent_creations_and_writers(self):
        results = []

        def make():
            results.append(self.d.post("/volumes", body={"name": "race", "sizeBytes": 16 * MiB},
                                       api_key=self.key_a, timeout=60)[0])

        threads = [threading.Thread(target=make) for _ in range(6)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
        self.addCleanup(self.delete_volume, "race", self.key_a)
        self.assertEqual(sorted(results), [201] + [409] * 5)
        sessions = []

        def mount():
            sid = new_session_id("racer")
            status, _, body = self.d.post("/exec/", body={"id": sid, "volumes": [
                {"name": "race", "path": "/data"}]}, api_key=self.key_a, timeout=60)
            sessions.append((sid, status, body))

        threads = [threading.Thread(target=mount) for _ in range(6)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
        for sid, status, _ in sessions:
            if status == 201:
                self.addCleanup(self.d.delete, f"/exec/{sid}", api_key=self.key_a, timeout=30)
        self.assertEqual(sorted(status for _, status, _ in sessions), [201] + [409] * 5,
                         sessions)

    def test_malformed_volume_bodies_are_400(self):
        bad = [
            {"name": "", "sizeBytes": 64 * MiB},
            {"name": "../x", "sizeBytes": 64 * MiB},
            {"name": "a/b", "sizeBytes": 64 * MiB},
            {"name": ".hidden", "sizeBytes": 64 * MiB},
            {"name": "x" * 64, "sizeBytes": 64 * MiB},
            {"name": "sp ace", "sizeBytes": 64 * MiB},
            {"name": "nul\u0000x", "sizeBytes": 64 * MiB},
            {"name": 5, "sizeBytes": 64 * MiB},
            {"name": "ok", "sizeBytes": "64"},
            {"name": "ok", "sizeBytes": 1.5},
            {"name": "ok", "sizeBytes": -1},
            {"name": "ok", "sizeBytes": MiB},
            {"name": "ok", "sizeBytes": 1 << 62},
            {"name": "ok"},
            ["ok", 64 * MiB],
        ]
        before = images_in(self.d.state_dir)
        for body in bad:
            status, headers, resp = self.d.post("/volumes", body=body, api_key=self.key_a)
            self.assertJsonError(status, headers, resp, 400)
        self.assertEqual(images_in(self.d.state_dir), before)

    def test_malformed_mounts_are_400(self):
        self.volume("target")
        bad = [
            "target",
            {"name": "target"},
            [{"name": "target"}],
            [{"path": "/data"}],
            [{"name": "target", "path": "data"}],
            [{"name": "target", "path": "/"}],
            [{"name": "target", "path": "/proc"}],
            [{"name": "target", "path": "/proc/x"}],
            [{"name": "target", "path": "/dev/shm"}],
            [{"name": "target", "path": "/sys"}],
            # The home, mounted after the volumes, would hide them or lose its mount point.
            [{"name": "target", "path": "/home"}],
            [{"name": "target", "path": "/home/user"}],
            [{"name": "target", "path": "/home/user/x"}],
            [{"name": "target", "path": "/data/../etc"}],
            [{"name": "target", "path": "/data/."}],
            [{"name": "target", "path": "//data"}],
            [{"name": "target", "path": "/data/"}],
            [{"name": "target", "path": "/da ta"}],
            [{"name": "target", "path": "/data", "readOnly": "yes"}],
            [{"name": "target", "path": "/data", "extra": 1}],
            [{"name": "../target", "path": "/data"}],
            [{"name": "target", "path": "/a", "readOnly": True},
             {"name": "target", "path": "/b", "readOnly": True}],
            [{"name": "target", "path": "/a", "readOnly": True},
             {"name": "other", "path": "/a/b"}],
            [{"name": f"v{i}", "path": f"/v{i}"} for i in range(9)],
        ]
        for volumes in bad:
            _, status, headers, body = self.create(volumes, expect=400)
            self.assertJsonError(status, headers, body, 400)
        _, status, headers, body = self.create([{"name": "nosuch", "path": "/data"}],
                                               expect=404)
        self.assertJsonError(status, headers, body, 404, "nosuch")
        _, status, headers, body = self.create([{"name": "target", "path": "/data"}],
                                               storage="tmpfs", expect=400)
        self.assertJsonError(status, headers, body, 400, "disk")
        # A path through a symbolic link of the template (busybox's /bin/sh) is the client's
        # error, named, and is not followed.
        _, status, headers, body = self.create([{"name": "target", "path": "/bin/sh/x"}],
                                               expect=400)
        self.assertJsonError(status, headers, body, 400, "/bin/sh/x")
        self.assertIn("symbolic link", body["error"])
        # Through a symbolic link to a directory (Debian's /bin), and onto a file.
        for path in ("/bin/sh/x", "/etc/passwd"):
            _, status, headers, body = self.create([{"name": "target", "path": path}],
                                                   expect=400, template="python")
            self.assertJsonError(status, headers, body, 400, path)
        # Nothing stayed claimed: the volume is free for a writer.
        sid, _, _, _ = self.create([{"name": "target", "path": "/data"}])
        self.ok(sid, "touch /data/ok")

    def test_a_volume_a_vm_wrote_is_refused_with_a_clear_409(self):
        """A volume mounted read-write by a VM (the qemu driver marks its image so) holds what
        a guest's kernel wrote, which the host's kernel does not mount: asked for in a jail,
        it is the client's error, named, and stays usable for what may use it."""
        self.volume("vm-written", size=16 * MiB)
        images = [i for i in images_in(self.d.state_dir) if i.endswith(".img")]
        self.assertEqual(len(images), 1, images)
        # The mark the qemu driver sets on the image when a guest mounts it read-write.
        os.setxattr(os.path.join(self.d.state_dir, "volumes", images[0]),
                    "trusted.agent-sandbox.guest-written", b"1")
        _, status, headers, body = self.create([{"name": "vm-written", "path": "/data"}],
                                               expect=409)
        self.assertJsonError(status, headers, body, 409, "VM")
        # Nothing stayed claimed or attached.
        self.assertEqual(loops_of(self.d.state_dir), [])
        status, _, got = self.d.get("/volumes/vm-written", api_key=self.key_a)
        self.assertEqual((status, got.get("mounts")), (200, []), got)

    def test_metrics_count_volumes(self):
        self.volume("counted", size=32 * MiB)
        status, _, text = self.d.get("/metrics")
        text = text.decode() if isinstance(text, bytes) else text
        gauges = {line.split()[0]: float(line.split()[1]) for line in text.splitlines()
                  if line.startswith("sandbox_volumes{")}
        self.assertGreaterEqual(gauges['sandbox_volumes{kind="count"}'], 1)
        self.assertGreaterEqual(gauges['sandbox_volumes{kind="bytes"}'], 32 * MiB)


class VolumeRestartTest(unittest.TestCase):
    """A volume written in one session is read and written in another after the daemon was
    restarted, with the same owners."""

    def test_contents_survive_sessions_and_restarts(self):
        if harness.driver() != "jail":
            self.skipTest("volumes are mounted by the jail driver")
        env = {"SANDBOX_WARM_POOL": "0", "SANDBOX_DEFAULT_TEMPLATE": "base"}
        first = start_daemon(env)
        self.addCleanup(first._cleanup, False)
        self.addCleanup(first.stop, check=False)
        status, _, body = first.post("/volumes", body={"name": "keep", "sizeBytes": 64 * MiB})
        self.assertEqual(status, 201, body)
        mounts = [{"name": "keep", "path": "/data"}]
        status, _, body = first.post("/exec/", body={"id": "a", "volumes": mounts}, timeout=60)
        self.assertEqual(status, 201, body)
        status, _, body = first.post("/exec/a/execute", body={
            "command": "echo from-a > /data/a && mkdir -p /data/sub && echo deep > /data/sub/b"})
        self.assertEqual((status, body.get("exitCode")), (200, 0), body)
        # Stopped, its directory kept for the next.
        first.proc.send_signal(signal.SIGTERM)
        self.assertEqual(first.proc.wait(30), 0)
        first.kill()
        second = start_daemon({**env, "SANDBOX_STATE_DIR": first.state_dir,
                               "SANDBOX_RUN_DIR": first.run_dir})
        self.addCleanup(second.stop, check=False)
        status, _, body = second.get("/volumes/keep")
        self.assertEqual((status, body.get("state")), (200, "ready"), body)
        status, _, body = second.post("/exec/", body={"id": "b", "volumes": mounts}, timeout=60)
        self.assertEqual(status, 201, body)
        status, _, body = second.post("/exec/b/execute", body={
            "command": "cat /data/a /data/sub/b && stat -c '%u %g' /data/a /data/sub/b /data"
                       " && echo from-b >> /data/a && cat /data/a"})
        self.assertEqual((status, body.get("exitCode")), (200, 0), body)
        self.assertEqual(joined(body["output"], "stdout"),
                         "from-a\ndeep\n1000 1000\n1000 1000\n1000 1000\nfrom-a\nfrom-b\n")
        status, _, body = second.delete("/exec/b", timeout=30)
        self.assertEqual(status, 200, body)
        wait_until(lambda: second.delete("/volumes/keep")[0] == 200, 10,
                   what="the volume to be released and deleted")
        self.assertEqual(images_in(first.state_dir), [])


    def test_kill_while_mounted_then_mounted_again(self):
        """kill -9 with a volume mounted read-write: the restart ends the leftover sandbox,
        whose mount held the volume, and the next session writes it (one filesystem of it at
        a time: the old loop device is gone first)."""
        if harness.driver() != "jail":
            self.skipTest("volumes are mounted by the jail driver")
        env = {"SANDBOX_WARM_POOL": "0", "SANDBOX_DEFAULT_TEMPLATE": "base"}
        first = start_daemon(env)
        self.addCleanup(first._cleanup, False)
        self.addCleanup(first.kill)
        status, _, body = first.post("/volumes", body={"name": "ws", "sizeBytes": 32 * MiB})
        self.assertEqual(status, 201, body)
        # A volume as the workspace: the files API writes it, commands run in it.
        mounts = [{"name": "ws", "path": "/workspace"}]
        status, _, body = first.post("/exec/", body={"id": "a", "volumes": mounts}, timeout=60)
        self.assertEqual(status, 201, body)
        status, _, body = first.post("/exec/a/write", body={"path": "kept.txt",
                                                             "content": "through the API"})
        self.assertEqual(status, 200, body)
        status, _, body = first.post("/exec/a/execute", body={"command": "sync"})
        self.assertEqual((status, body.get("exitCode")), (200, 0), body)
        self.assertEqual(len(loops_of(first.state_dir)), 1)
        first.proc.send_signal(signal.SIGKILL)
        first.proc.wait(10)
        first.kill()
        second = start_daemon({**env, "SANDBOX_STATE_DIR": first.state_dir,
                               "SANDBOX_RUN_DIR": first.run_dir})
        self.addCleanup(second.stop, check=False)
        status, _, body = second.post("/exec/", body={"id": "b", "volumes": mounts}, timeout=60)
        self.assertEqual(status, 201, body)
        status, _, body = second.post("/exec/b/execute", body={
            "command": "cat kept.txt && stat -c %u kept.txt && echo more >> kept.txt"})
        self.assertEqual((status, body.get("exitCode")), (200, 0), body)
        self.assertEqual(joined(body["output"], "stdout"), "through the API1000\n")
        self.assertEqual(len(loops_of(first.state_dir)), 1)
        second.delete("/exec/b", timeout=30)
        wait_until(lambda: not loops_of(first.state_dir), 10,
                   what="the volume's loop device to detach")


class VolumeCrashTest(unittest.TestCase):
    """kill -9 while volumes are being made leaves no image behind after the next start."""

    def test_kill_during_creation_leaves_no_image(self):
        if harness.driver() != "jail":
            self.skipTest("volumes are mounted by the jail driver")
        env = {"SANDBOX_WARM_POOL": "0", "SANDBOX_KEY_MAX_VOLUMES": "0",
               "SANDBOX_KEY_MAX_VOLUME_BYTES": "0"}
        first = start_daemon(env)
        self.addCleanup(first._cleanup, False)
        self.addCleanup(first.kill)
        made = []

        def send(i):
            try:
                status, _, _ = first.request("POST", "/volumes", body={
                    "name": f"v{i}", "sizeBytes": 8 * GiB}, timeout=60)
                if status == 201:
                    made.append(i)
            except OSError:
                pass  # killed under the request: that is the point

        burst = [threading.Thread(target=send, args=(i,), daemon=True) for i in range(12)]
        for t in burst:
            t.start()
        # An image exists whose volume was not reported made: one is being made.
        wait_until(lambda: len(images_in(first.state_dir)) > len(made), 60, interval=0.002,
                   what="a volume being made")
        first.proc.send_signal(signal.SIGKILL)
        first.proc.wait(10)
        first.kill()
        for t in burst:
            t.join(60)
        second = start_daemon({**env, "SANDBOX_STATE_DIR": first.state_dir,
                               "SANDBOX_RUN_DIR": first.run_dir})
        self.addCleanup(second.stop, check=False)
        status, _, body = second.get("/volumes")
        self.assertEqual(status, 200, body)
        ready = [v for v in body["volumes"] if v["state"] == "ready"]
        self.assertEqual(len(ready), len(body["volumes"]), body)
        # Every image left is a volume's, each made whole: none of a creation cut short.
        self.assertEqual(len(images_in(first.state_dir)), len(ready))
        self.assertGreaterEqual(len(ready), len(made))
        for v in ready:
            status, _, body = second.post("/exec/", body={
                "volumes": [{"name": v["name"], "path": "/data"}]}, timeout=60)
            self.assertEqual(status, 201, body)
            second.delete(f"/exec/{body['id']}", timeout=30)


if __name__ == "__main__":
    unittest.main()
