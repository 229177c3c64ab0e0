"""Storage of the jail driver (docs/storage.md): a writable root and /workspace on a disk of
the sandbox's own, bounded by its disk quota rather than its memory; the disk freed with the
sandbox, and never left behind by a daemon killed while making one."""

import os
import random
import signal
import subprocess
import threading
import time
import unittest

import harness
import helpers_host as host
from helpers_exec import (DaemonTestCase, artifacts_dir, joined, new_session_id, sandbox_of,
                          start_daemon, wait_until)

MiB = 1024 * 1024
GiB = 1024 * MiB


def disks_of(state_dir):
    """The loop devices whose backing file is a disk image under state_dir/disks."""
    out = subprocess.run(["losetup", "-l", "-n", "-O", "NAME,BACK-FILE"],
                         capture_output=True, text=True, check=True).stdout
    where = os.path.join(state_dir, "disks")
    return [line.split()[0] for line in out.splitlines() if where in line]


def host_uid(pid):
    with open(f"/proc/{pid}/status") as f:
        return int([line.split()[1] for line in f if line.startswith("Uid:")][0])


def files_in(path):
    try:
        return os.listdir(path)
    except FileNotFoundError:
        return []


class StorageTest(DaemonTestCase):
    daemon_env = {
        "SANDBOX_WARM_POOL": "0",
        "SANDBOX_DEFAULT_TEMPLATE": "base",
        "VM_MEMORY_LIMIT_BYTES": str(128 * MiB),
        "SANDBOX_DISK_BYTES": str(256 * MiB),
        "SANDBOX_MAX_DISK_BYTES": str(2 * GiB),
    }

    @classmethod
    def setUpClass(cls):
        if harness.driver() != "jail":
            raise unittest.SkipTest("disks are a mode of the jail driver")
        super().setUpClass()

    def create(self, expect=201, **body):
        sid = new_session_id("storage")
        status, headers, resp = self.d.post("/exec/", body={"id": sid, "template": "base",
                                                           **body}, timeout=60)
        if expect == 201:
            self.assertEqual(status, 201, resp)
            self.addCleanup(self.d.delete, f"/exec/{sid}", timeout=30)
        return sid, status, headers, resp

    def test_root_is_writable_and_owned_by_root_inside(self):
        sid, _, _, body = self.create()
        self.assertEqual(body["storage"], "disk")
        self.assertEqual(body["limits"]["diskBytes"], 256 * MiB)
        # Commands run as the command user: /workspace and /tmp are theirs, the rest root's.
        out = self.stdout_of(sid, "stat -c '%u %g %a' / /workspace /tmp /bin")
        self.assertEqual(out.split("\n")[:4],
                         ["0 0 755", "1000 1000 755", "0 0 1777", "0 0 755"])
        # A file the command user makes in a writable directory of the root's is theirs.
        self.run_ok(sid, "mkdir -p /tmp/x && echo hi > /tmp/x/f && stat -c %u /tmp/x/f")
        self.assertEqual(self.stdout_of(sid, "stat -c %u /tmp/x/f"), "1000\n")

    def test_gigabyte_in_workspace_with_128_mib_of_memory(self):
        sid, _, _, body = self.create(resources={"diskBytes": 2 * GiB})
        self.assertEqual(body["limits"]["memoryBytes"], 128 * MiB)
        self.run_ok(sid, "dd if=/dev/zero of=/workspace/big bs=1M count=1024 2>/dev/null",
                    http_timeout=300)
        self.assertEqual(self.stdout_of(sid, "stat -c %s /workspace/big"), f"{GiB}\n")
        info = self.listed_sessions()[sid]
        self.assertGreaterEqual(info["disk"]["usedBytes"], GiB)
        self.assertLessEqual(info["disk"]["sizeBytes"], 2 * GiB)
        status, _, text = self.d.get("/metrics")
        self.assertEqual(status, 200)
        text = text.decode() if isinstance(text, bytes) else text
        gauges = {line.split()[0]: float(line.split()[1]) for line in text.splitlines()
                  if line.startswith("sandbox_disk_bytes{")}
        self.assertGreaterEqual(gauges['sandbox_disk_bytes{kind="used"}'], GiB)
        self.assertGreaterEqual(gauges['sandbox_disk_bytes{kind="allocated"}'],
                                info["disk"]["sizeBytes"])

    def test_full_disk_is_enospc_inside(self):
        sid, _, _, _ = self.create(resources={"diskBytes": 32 * MiB})
        status, body = self.execute(sid, "dd if=/dev/zero of=/workspace/f bs=1M count=64")
        self.assertEqual(status, 200, body)
        self.assertNotEqual(body["exitCode"], 0, body)
        self.assertIn("No space left on device", joined(body["output"]))
        # The sandbox and the daemon go on.
        self.assertEqual(self.stdout_of(sid, "rm /workspace/f && echo ok"), "ok\n")
        status, _, _ = self.d.get("/health")
        self.assertEqual(status, 200)

    def test_destroy_frees_the_disk(self):
        before = len(disks_of(self.d.state_dir))
        sid, _, _, _ = self.create()
        self.assertEqual(len(disks_of(self.d.state_dir)), before + 1)
        status, _, body = self.d.delete(f"/exec/{sid}", timeout=30)
        self.assertEqual(status, 200, body)
        wait_until(lambda: len(disks_of(self.d.state_dir)) == before, 10,
                   what="the destroyed sandbox's loop device to go")
        self.assertEqual(files_in(os.path.join(self.d.state_dir, "disks")), [])

    def test_concurrent_creations_get_a_disk_each(self):
        before = len(disks_of(self.d.state_dir))
        results = []

        def make():
            sid = new_session_id("many")
            status, _, body = self.d.post("/exec/", body={"id": sid, "template": "base",
                                                         "resources": {"diskBytes": 64 * MiB}},
                                          timeout=120)
            results.append((sid, status, body))

        threads = [threading.Thread(target=make) for _ in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(120)
        for sid, status, body in results:
            self.addCleanup(self.d.delete, f"/exec/{sid}", timeout=30)
            self.assertEqual(status, 201, body)
        self.assertEqual(len(results), 8)
        self.assertEqual(len(disks_of(self.d.state_dir)), before + 8)
        # Each writes its own disk: one's file is not in another's.
        for sid, _, _ in results:
            self.run_ok(sid, f"echo {sid} > /workspace/mine")
        for sid, _, _ in results:
            self.assertEqual(self.stdout_of(sid, "cat /workspace/mine"), f"{sid}\n")
        for sid, _, _ in results:
            self.d.delete(f"/exec/{sid}", timeout=30)
        wait_until(lambda: len(disks_of(self.d.state_dir)) == before, 20,
                   what="the disks of the destroyed sandboxes to go")

    def test_tmpfs_mode_stays(self):
        sid, _, _, body = self.create(storage="tmpfs")
        self.assertEqual(body["storage"], "tmpfs")
        self.assertNotIn("disk", body)
        self.assertIn("tmpfs /workspace", self.stdout_of(sid, "cat /proc/mounts"))

    # attacks

    def test_oversize_disk_is_refused(self):
        for size in (3 * GiB, 1 << 62):
            _, status, headers, body = self.create(expect=400, resources={"diskBytes": size})
            self.assertJsonError(status, headers, body, 400, "SANDBOX_MAX_DISK_BYTES")
        _, status, headers, body = self.create(expect=400, resources={"diskBytes": MiB // 2})
        self.assertJsonError(status, headers, body, 400, "at least 1 MiB")
        for bad in ("zfs", 1, ""):
            _, status, headers, body = self.create(expect=400, storage=bad)
            self.assertJsonError(status, headers, body, 400, "storage")


# A package built in the sandbox by the command user: dpkg-deb, no network.
BUILD_DEB = (
    "mkdir -p /workspace/tiny/DEBIAN /workspace/tiny/usr/bin && "
    "printf 'Package: tiny\\nVersion: 1.0\\nArchitecture: all\\nMaintainer: t <t@t.invalid>\\n"
    "Description: tiny\\n' > /workspace/tiny/DEBIAN/control && "
    "printf '#!/bin/sh\\necho tiny-ok\\n' > /workspace/tiny/usr/bin/tiny && "
    "chmod 755 /workspace/tiny/usr/bin/tiny && "
    "dpkg-deb --root-owner-group --build /workspace/tiny /workspace/tiny.deb")
# A wheel (a zip with its metadata) made with the standard library alone.
BUILD_WHEEL = r"""python3 - <<'PY'
import base64, hashlib, zipfile
files = {"tinywheel/__init__.py": "print('wheel-ok')\n",
         "tinywheel-1.0.dist-info/METADATA": "Metadata-Version: 2.1\nName: tinywheel\nVersion: 1.0\n",
         "tinywheel-1.0.dist-info/WHEEL": "Wheel-Version: 1.0\nGenerator: t\nRoot-Is-Purelib: true\nTag: py3-none-any\n"}
rec = []
with zipfile.ZipFile("/workspace/tinywheel-1.0-py3-none-any.whl", "w") as z:
    for name, text in files.items():
        z.writestr(name, text)
        digest = base64.urlsafe_b64encode(hashlib.sha256(text.encode()).digest()).rstrip(b"=")
        rec.append(f"{name},sha256={digest.decode()},{len(text)}")
    rec.append("tinywheel-1.0.dist-info/RECORD,,")
    z.writestr("tinywheel-1.0.dist-info/RECORD", "\n".join(rec) + "\n")
PY"""


def small_state_fs(testcase_cls, mib):
    """A fresh ext4 filesystem of `mib` MiB mounted on a temporary directory (removed with the
    class), for a daemon's SANDBOX_STATE_DIR."""
    import tempfile
    top = tempfile.mkdtemp(prefix="sandboxd-room-")
    image, mnt = os.path.join(top, "fs.img"), os.path.join(top, "state")
    os.mkdir(mnt)
    with open(image, "wb") as f:
        f.truncate(mib * MiB)
    subprocess.run(["mkfs.ext4", "-q", "-F", "-m", "0", image], check=True)
    subprocess.run(["mount", "-o", "loop", image, mnt], check=True)

    def drop():
        subprocess.run(["umount", "-l", mnt], check=False)
        subprocess.run(["rm", "-rf", top], check=False)

    testcase_cls.addClassCleanup(drop)
    return mnt


class RoomCase(unittest.TestCase):
    """A daemon whose state directory is a small filesystem of its own (no tests here)."""

    RATIO = "1"
    RESERVE = 16 * MiB
    FS_MIB = 256

    @classmethod
    def setUpClass(cls):
        if harness.driver() != "jail":
            raise unittest.SkipTest("disks on the host's state filesystem: the jail driver")
        state = small_state_fs(cls, cls.FS_MIB)
        cls.d = start_daemon({"SANDBOX_WARM_POOL": "0", "SANDBOX_DEFAULT_TEMPLATE": "base",
                              "SANDBOX_STATE_DIR": state,
                              "SANDBOX_DISK_OVERCOMMIT": cls.RATIO,
                              "SANDBOX_DISK_RESERVE_BYTES": str(cls.RESERVE)})
        cls.addClassCleanup(cls.d.stop)

    def create(self, disk, expect=201):
        sid = new_session_id("room")
        status, _, body = self.d.post("/exec/", body={"id": sid, "template": "base",
                                                     "resources": {"diskBytes": disk}},
                                      timeout=60)
        self.assertEqual(status, expect, body)
        if status == 201:
            self.addCleanup(self.d.delete, f"/exec/{sid}", timeout=30)
        return sid, body

    def sh(self, sid, command):
        status, _, body = self.d.post(f"/exec/{sid}/execute",
                                      body={"command": command, "timeout": 120000},
                                      timeout=150)
        self.assertEqual(status, 200, body)
        return body["exitCode"], joined(body["output"])


class StateRoomTest(RoomCase):
    """At SANDBOX_DISK_OVERCOMMIT=1 every disk holds its whole size on the state filesystem
    from the start: a disk that does not fit with the reserve free is refused, and a tenant
    that fills its own disk cannot make another tenant's write fail."""

    def test_no_tenant_write_fails_for_another_at_ratio_1(self):
        a, _ = self.create(160 * MiB)
        _, refused = self.create(100 * MiB, expect=507)
        self.assertIn("SANDBOX_DISK_RESERVE_BYTES", refused["error"])
        b, _ = self.create(40 * MiB)
        code, out = self.sh(a, "dd if=/dev/zero of=/workspace/fill bs=1M count=400")
        self.assertNotEqual(code, 0, out)
        self.assertIn("No space left", out)  # its own disk's ENOSPC
        self.sh(a, "sync")
        code, out = self.sh(b, "dd if=/dev/zero of=/workspace/x bs=1M count=24 conv=fsync "
                               "&& wc -c < /workspace/x")
        self.assertEqual(code, 0, out)
        self.assertIn(str(24 * MiB), out)
        status, _, ready = self.d.get("/ready")
        self.assertIn("stateDisk", ready)
        self.assertGreaterEqual(ready["stateDisk"]["freeBytes"], self.RESERVE, ready)


class StateFillPolicyTest(RoomCase):
    """Above 1 the disks share what is beyond their shares: when the state filesystem reaches
    its reserve, the session using the most beyond its share is frozen (pausedBy "disk"), the
    others write on, and it resumes only once there is room again."""

    RATIO = "4"
    RESERVE = 64 * MiB
    FS_MIB = 320

    def test_the_tenant_most_beyond_its_share_is_stopped_first(self):
        a, _ = self.create(600 * MiB)
        b, _ = self.create(64 * MiB)
        # A steady writer (4 MiB, synced, every 50 ms): the watch looks every 250 ms.
        code, out = self.sh(a, "(i=0; while [ $i -lt 100 ]; do dd if=/dev/zero "
                               "of=/workspace/f$i bs=1M count=4 conv=fsync 2>/dev/null || "
                               "break; i=$((i+1)); sleep 0.05; done) > /dev/null 2>&1 &")
        self.assertEqual(code, 0, out)

        def stopped():
            status, _, body = self.d.get("/exec")
            mine = [x for x in body.get("sessions", body) if x.get("id") == a]
            return mine[0] if mine and mine[0].get("state") == "paused" else None

        try:
            body = wait_until(stopped, 60, what="session a to be stopped by the watch")
        except AssertionError as e:
            raise AssertionError(f"{e}: sessions {self.d.get('/exec')[2]}, /ready "
                                 f"{self.d.get('/ready')[2]}, log "
                                 f"{self.d.stderr()[-3000:]}") from None
        self.assertEqual(body["pausedBy"], "disk", body)
        self.assertIn("reserve", body["error"])
        status, _, ready = self.d.get("/ready")
        self.assertEqual(status, 503, ready)
        self.assertFalse(ready["checks"]["stateDisk"], ready)
        status, _, resumed = self.d.post(f"/exec/{a}/resume", body={})
        self.assertEqual(status, 507, resumed)
        code, out = self.sh(b, "dd if=/dev/zero of=/workspace/x bs=1M count=8 conv=fsync "
                               "&& wc -c < /workspace/x")
        self.assertEqual(code, 0, out)
        self.assertIn(str(8 * MiB), out)
        status, _, text = self.d.get("/metrics", headers={"Accept": "text/plain"})
        self.assertIn("disk_reserve_stops_total", str(text))
        # The offender's session ends: the room comes back.
        self.d.delete(f"/exec/{a}", timeout=60)
        wait_until(lambda: self.d.get("/ready")[0] == 200, 30, what="/ready to be 200 again")


class SystemInstallTest(DaemonTestCase):
    """apt-get install and a system-wide pip install, offline, by root inside a sandbox of the
    python template (Debian), through the API ("user": "root"), change only its disk."""

    daemon_env = {"SANDBOX_WARM_POOL": "0", "VM_MEMORY_LIMIT_BYTES": str(128 * MiB)}

    @classmethod
    def setUpClass(cls):
        if harness.driver() != "jail":
            raise unittest.SkipTest("disks are a mode of the jail driver")
        if not os.path.exists(os.path.join(artifacts_dir(), "templates", "python")):
            raise unittest.SkipTest("the python template is not built")
        super().setUpClass()

    def test_apt_get_and_pip_install_offline(self):
        sid = self.session()
        status, _, body = self.d.post("/exec/", body={"id": sid, "template": "python"},
                                      timeout=60)
        self.assertEqual(status, 201, body)
        self.assertEqual(body["storage"], "disk")
        self.run_ok(sid, BUILD_DEB)
        self.run_ok(sid, BUILD_WHEEL)
        self.run_ok(sid, "cd /workspace && apt-get install -y ./tiny.deb", user="root",
                    http_timeout=300)
        self.run_ok(sid, "python3 -m pip install --no-index --break-system-packages "
                         "/workspace/tinywheel-1.0-py3-none-any.whl", user="root",
                    http_timeout=300)
        # Installed system-wide, root's inside, usable by the command user.
        self.assertEqual(self.stdout_of(sid, "tiny"), "tiny-ok\n")
        self.assertEqual(self.stdout_of(sid, "stat -c '%u %g' /usr/bin/tiny"), "0 0\n")
        self.assertEqual(self.stdout_of(sid, "cd / && python3 -c 'import tinywheel'"),
                         "wheel-ok\n")
        self.assertIn("tiny", self.stdout_of(sid, "dpkg -l tiny"))


class CommandUserTest(DaemonTestCase):
    """"user" on execute and background processes: the command user by default, the
    sandbox's own root (its user namespace's, never the host's) on request."""

    daemon_env = {"SANDBOX_WARM_POOL": "0", "SANDBOX_DEFAULT_TEMPLATE": "base"}

    @classmethod
    def setUpClass(cls):
        if harness.driver() != "jail":
            raise unittest.SkipTest("the command user is the jail driver's")
        super().setUpClass()

    def test_root_and_user(self):
        sid = self.session()
        self.assertEqual(self.stdout_of(sid, "id -u; id -g"), "1000\n1000\n")
        self.assertEqual(self.stdout_of(sid, "id -u; id -g", user="user"), "1000\n1000\n")
        self.assertEqual(self.stdout_of(sid, "id -u; id -g", user="root"), "0\n0\n")
        # Root inside may write the root's files; the command user may not.
        self.run_ok(sid, "echo x > /etc/by-root && chown 1000 /etc/by-root", user="root")
        self.assertEqual(self.stdout_of(sid, "stat -c %u /etc/by-root"), "1000\n")
        status, body = self.execute(sid, "echo x > /etc/by-user")
        self.assertEqual(status, 200, body)
        self.assertNotEqual(body["exitCode"], 0, body)
        # Root inside is the agent's host uid, the first of the sandbox's range, not 0.
        sandbox = sandbox_of(self.d, sid)
        pids = host.cgroup_pids(host.cgroup_dirs(sandbox))
        agent = [p for p in pids if host.ppid(p) == self.d.proc.pid]
        self.assertEqual(len(agent), 1, pids)
        self.assertEqual(self.stdout_of(sid, "cat /proc/self/uid_map", user="root").split()[:2],
                         ["0", str(host_uid(agent[0]))])
        self.assertNotEqual(host_uid(agent[0]), 0)

    def test_background_process_as_root(self):
        sid = self.session()
        self.run_ok(sid, "true")
        status, _, body = self.d.post(f"/exec/{sid}/processes",
                                      body={"command": "id -u > /tmp/bg-uid", "user": "root"},
                                      timeout=30)
        self.assertEqual(status, 201, body)
        wait_until(lambda: self.stdout_of(sid, "cat /tmp/bg-uid 2>/dev/null || true") == "0\n",
                   10, what="the background process's output")

    def test_unknown_user_is_400(self):
        sid = self.session()
        for bad in ("nobody", "", "ROOT", 0, True, ["root"], {"name": "root"}):
            status, _, body = self.d.post(f"/exec/{sid}/execute",
                                          body={"command": "true", "user": bad}, timeout=30)
            self.assertEqual(status, 400, (bad, body))
            self.assertIn("user", body["error"])
            status, _, body = self.d.post(f"/exec/{sid}/processes",
                                          body={"command": "true", "user": bad}, timeout=30)
            self.assertEqual(status, 400, (bad, body))


class DiskCrashTest(unittest.TestCase):
    """kill -9 while sandboxes with disks are being made leaves no image nor loop device."""

    extra_env = {}  # a subclass's settings for both daemons

    def test_kill_during_creation_leaves_no_disk(self):
        if harness.driver() != "jail":
            self.skipTest("disks are a mode of the jail driver")
        env = {"SANDBOX_WARM_POOL": "2", "SANDBOX_DEFAULT_TEMPLATE": "base", **self.extra_env}
        first = start_daemon(env)
        # Run last: its directory goes once both daemons are done with it.
        self.addCleanup(first._cleanup, False)
        self.addCleanup(first.kill)

        def send():
            try:
                first.request("POST", "/exec/", body={"template": "base"}, timeout=60)
            except OSError:
                pass  # killed under the request: that is the point

        burst = [threading.Thread(target=send, daemon=True) for _ in range(4)]
        for t in burst:
            t.start()
        wait_until(lambda: disks_of(first.state_dir), 60, interval=0.005,
                   what="a disk being made")
        time.sleep(random.uniform(0, 0.02))
        first.proc.send_signal(signal.SIGKILL)
        first.proc.wait(10)
        first.kill()
        for t in burst:
            t.join(60)
        # The restart kills the leftovers, whose mounts held the last references.
        second = start_daemon({**env, "SANDBOX_WARM_POOL": "0",
                               "SANDBOX_STATE_DIR": first.state_dir,
                               "SANDBOX_RUN_DIR": first.run_dir})
        self.addCleanup(second.stop, check=False)
        wait_until(lambda: not disks_of(first.state_dir), 20,
                   what="the killed daemon's disks to go")
        self.assertEqual(files_in(os.path.join(first.state_dir, "disks")), [])


if __name__ == "__main__":
    unittest.main()
