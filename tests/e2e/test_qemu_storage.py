"""Storage of VM sandboxes (docs/storage.md, docs/qemu.md): a session's disk under its root and
/workspace, bounded by its size and not by the guest's memory, gone with the session and with a
killed daemon; tmpfs still there on request; volumes bound to a VM's drive slots, kept between
sessions, shared with the jail driver, their one-writer rule enforced.

Runs the real sandboxd with SANDBOX_DRIVER=qemu (TCG where KVM is not usable) on the base
template, whose guests have 128 MiB of memory. Built on test_qemu's helpers."""

import os
import signal
import sys
import time
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import harness  # noqa: E402
import test_qemu  # noqa: E402
from helpers_exec import joined, new_session_id, sandbox_of, wait_until  # noqa: E402
from test_qemu import QemuCase, qemu_pids, wait_gone  # noqa: E402

MiB = 1024 * 1024
GUEST_MIB = 128  # templates/base/template.json
ENV = {
    "SANDBOX_STORAGE": "disk",
    "SANDBOX_DISK_BYTES": str(512 * MiB),
    "SANDBOX_WARM_POOL": "0",
}


def disk_fds(pid):
    """The daemon's descriptors of disk and overlay images (unnamed files in state/disks)."""
    found = []
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            target = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:
            continue
        if "/disks/" in target:
            found.append(target)
    return found


class StorageCase(QemuCase):
    def create(self, d, expect=201, keep=False, **body):
        """A new session (destroyed after the test unless keep)."""
        sid = new_session_id(self._testMethodName.removeprefix("test_"))
        status, _, resp = d.post("/exec/", body={"id": sid, **body}, timeout=180)
        self.assertEqual(status, expect, resp)
        if status == 201 and not keep:
            self.addCleanup(d.delete, f"/exec/{sid}", timeout=60)
        return sid, resp

    def run_in(self, d, sid, command, code=0, timeout=300):
        status, _, body = d.post(f"/exec/{sid}/execute", body={"command": command},
                                 timeout=timeout)
        self.assertEqual(status, 200, body)
        if code is not None:
            self.assertEqual(body["exitCode"], code, body)
        return body

    def out(self, d, sid, command, timeout=300):
        return joined(self.run_in(d, sid, command, timeout=timeout)["output"], "stdout")


class DiskTest(StorageCase):
    """A session's disk: the upper half of its root, /workspace and /tmp."""

    def test_workspace_holds_more_than_the_guests_memory(self):
        d = self.daemon(ENV)
        sid, body = self.create(d)
        self.assertEqual(body.get("storage"), "disk", body)
        self.assertEqual(body["disk"]["sizeBytes"], 512 * MiB, body)
        count = GUEST_MIB + 64
        text = self.out(d, sid, f"dd if=/dev/zero of=/workspace/big bs=1M count={count} "
                        "2>/dev/null && sync && ls -l /workspace/big && "
                        "grep ' / \\| /workspace \\| /tmp ' /proc/mounts | cut -d' ' -f2,3; "
                        "free -m | grep Mem")
        self.assertIn(str(count * MiB), text)
        # / is the overlay; /workspace and /tmp are directories of it, not mounts.
        self.assertIn("/ overlay", text)
        self.assertNotIn("/workspace tmpfs", text)
        self.assertNotIn("/tmp tmpfs", text)
        status, _, listed = d.get("/exec/", timeout=30)
        self.assertEqual(status, 200, listed)
        info = {s["id"]: s for s in listed["sessions"]}[sid]
        self.assertGreaterEqual(info["disk"]["usedBytes"], count * MiB, info)
        self.assertLessEqual(info["disk"]["usedBytes"], info["disk"]["sizeBytes"], info)

    def test_a_full_disk_is_enospc_inside_and_nothing_else(self):
        d = self.daemon(ENV)
        sid, body = self.create(d, resources={"diskBytes": 24 * MiB})
        self.assertEqual(body["disk"]["sizeBytes"], 24 * MiB, body)
        res = self.run_in(d, sid, "dd if=/dev/zero of=/workspace/fill bs=1M count=64",
                          code=None)
        self.assertNotEqual(res["exitCode"], 0, res)
        self.assertIn("No space left on device", joined(res["output"], "stderr"))
        # The sandbox goes on: the disk is full, the session is not broken.
        self.assertEqual(self.out(d, sid, "rm /workspace/fill && echo ok"), "ok\n")
        # Above the server's cap: 400 naming it.
        status, _, err = d.post("/exec/", body={"resources": {"diskBytes": 1 << 50}})
        self.assertEqual(status, 400, err)
        self.assertIn("SANDBOX_MAX_DISK_BYTES", err["error"])

    def test_root_writes_under_usr_last_the_session_only(self):
        d = self.daemon(ENV)
        sid, _ = self.create(d)
        self.run_in(d, sid, "mkdir -p /usr/local/lib/probe && echo kept > /usr/local/lib/"
                    "probe/f && rm /bin/true")
        self.assertEqual(self.out(d, sid, "cat /usr/local/lib/probe/f; ls /bin/true "
                                  "2>&1 | grep -c 'No such'"), "kept\n1\n")
        other, _ = self.create(d)
        self.assertEqual(self.out(d, other, "ls /usr/local/lib/probe 2>&1 | grep -c "
                                  "'No such'; ls /bin/true"), "1\n/bin/true\n")

    def test_the_sandbox_user_and_its_home_with_either_storage(self):
        """In a VM as in the jail: the user 1000 has a name and the workspace as its home,
        commands start there with HOME, USER and LOGNAME set (a VM's commands run as root,
        whose name they get)."""
        d = self.daemon(ENV)
        for storage in ("disk", "tmpfs"):
            sid, _ = self.create(d, storage=storage)
            self.assertEqual(self.out(d, sid, "grep '^[^:]*:x:1000:' /etc/passwd | cut -d: -f1,6; "
                                      'id -un; echo "$HOME $USER $LOGNAME"; pwd; '
                                      "echo x > /home/user/f; cat /workspace/f"),
                             "user:/home/user\nroot\n/home/user root root\n/home/user\nx\n",
                             storage)

    def test_tmpfs_on_request_keeps_the_read_only_root(self):
        d = self.daemon(ENV)
        sid, body = self.create(d, storage="tmpfs")
        self.assertEqual(body.get("storage"), "tmpfs", body)
        self.assertNotIn("disk", body)
        text = self.out(d, sid, "grep ' /workspace ' /proc/mounts | cut -d' ' -f3; "
                        "touch /usr/x 2>&1 | grep -c 'Read-only'")
        self.assertEqual(text, "tmpfs\n1\n")
        status, _, err = d.post("/exec/", body={"storage": "floppy"})
        self.assertEqual(status, 400, err)

    def test_the_warm_pool_makes_disks_ahead(self):
        d = self.daemon({**ENV, "SANDBOX_WARM_POOL": "1"})

        def pooled():
            return [e["msg"].split()[2] for e in d.logs()
                    if e.get("msg", "").startswith("pooled sandbox ")]
        def base_ready():
            # The pool fills every template's; the session below is base's, so wait for
            # all made so far to be ready, base's among them (not just the first one).
            made = [e["msg"] for e in d.logs()
                    if e.get("msg", "").startswith("pooled sandbox ")
                    and " created in " in e["msg"]]
            return (any(" for base " in m for m in made)
                    and d.get("/health")[2].get("warmPool") >= len(made))
        wait_until(base_ready, 180, what="a ready pooled sandbox of base")
        sid, body = self.create(d)
        # What the pool said of its sandboxes, for a failure to show why none was claimed.
        said = [e["msg"] for e in d.logs() if "pooled sandbox" in e.get("msg", "")
                or "warm pool" in e.get("msg", "")]
        self.assertIn(sandbox_of(d, sid), pooled(), f"not claimed from the pool: {said}")
        self.assertEqual(body.get("storage"), "disk", body)
        self.assertEqual(self.out(d, sid, "grep ' / ' /proc/mounts | cut -d' ' -f3; "
                                  "echo x > /usr/pooled && cat /usr/pooled"), "overlay\nx\n")

    def test_destroy_frees_the_image_at_once(self):
        d = self.daemon(ENV)
        before = disk_fds(d.proc.pid)
        sid, _ = self.create(d)
        self.run_in(d, sid, "dd if=/dev/zero of=/workspace/f bs=1M count=16 2>/dev/null; sync")
        sb = sandbox_of(d, sid)
        self.assertEqual(len(disk_fds(d.proc.pid)), len(before) + 1)
        pids = qemu_pids(sb)
        self.assertEqual(len(pids), 1)
        # QEMU holds the same image (its inherited descriptor, and its fd set's copy).
        held = set(disk_fds(pids[0]))
        self.assertEqual(held, set(disk_fds(d.proc.pid)) - set(before))
        # Nothing of it has a name, ever.
        self.assertEqual(os.listdir(os.path.join(d.state_dir, "disks")), [])
        status, _, body = d.delete(f"/exec/{sid}", timeout=60)
        self.assertEqual(status, 200, body)
        self.assertEqual(wait_gone(sb, d.run_dir), [])
        wait_until(lambda: disk_fds(d.proc.pid) == before, 10,
                   what="the daemon to close the disk's image")

    def test_kill_9_leaves_nothing_and_the_restart_cleans_up(self):
        first = harness.Daemon(env={**test_qemu.ENV, **ENV}, driver_name="qemu",
                               start_timeout=60)
        first.start()
        self.addCleanup(first._cleanup, False)
        self.addCleanup(first.kill)
        sid, _ = self.create(first, keep=True)
        self.run_in(first, sid, "echo x > /workspace/x")
        sb = sandbox_of(first, sid)
        self.assertTrue(qemu_pids(sb))
        first.proc.send_signal(signal.SIGKILL)
        first.proc.wait(30)
        # QEMU dies with the daemon; the images go with the last descriptors.
        second = self.daemon({**ENV, "SANDBOX_STATE_DIR": first.state_dir,
                              "SANDBOX_RUN_DIR": first.run_dir})
        self.assertEqual(wait_gone(sb, first.run_dir, timeout=30), [])
        self.assertEqual(os.listdir(os.path.join(first.state_dir, "disks")), [])
        # And it serves disks again.
        sid2, body = self.create(second)
        self.assertEqual(body.get("storage"), "disk", body)
        self.assertEqual(self.out(second, sid2, "ls /workspace"), "")


class SystemInstallTest(StorageCase):
    """apt-get install and a system-wide pip install, offline, by root in a VM of the python
    template, change only its disk (the jail's test_storage.SystemInstallTest, in a VM)."""

    def test_apt_get_and_pip_install_offline(self):
        if not os.path.isfile(os.path.join(test_qemu.artifacts(), "templates", "python",
                                           "rootfs.ext4")):
            self.skipTest("the python template is not built (templates/build.sh python)")
        import test_storage  # tests/integration: the package and wheel it builds
        d = self.daemon(ENV)
        sid, body = self.create(d, template="python")
        self.assertEqual(body.get("storage"), "disk", body)
        self.run_in(d, sid, test_storage.BUILD_DEB)
        self.run_in(d, sid, test_storage.BUILD_WHEEL)
        self.run_in(d, sid, "cd /workspace && apt-get install -y ./tiny.deb")
        self.run_in(d, sid, "python3 -m pip install --no-index --break-system-packages "
                    "/workspace/tinywheel-1.0-py3-none-any.whl")
        self.assertEqual(self.out(d, sid, "tiny; cd / && python3 -c 'import tinywheel'"),
                         "tiny-ok\nwheel-ok\n")
        other, _ = self.create(d, template="python")
        self.assertEqual(self.out(d, other, "dpkg -l tiny >/dev/null 2>&1 || echo none"),
                         "none\n")


class VolumeTest(StorageCase):
    """Volumes bound to a VM's drive slots."""

    def volume(self, d, name, size=32 * MiB):
        status, _, body = d.post("/volumes", body={"name": name, "sizeBytes": size}, timeout=60)
        self.assertEqual(status, 201, body)
        return body

    def test_written_in_one_session_read_in_the_next(self):
        d = self.daemon(ENV)
        self.volume(d, "keep")
        a, _ = self.create(d, volumes=[{"name": "keep", "path": "/data"}])
        self.run_in(d, a, "echo from-a > /data/a && mkdir /data/sub && echo deep > "
                    "/data/sub/b")
        status, _, body = d.delete(f"/exec/{a}", timeout=60)
        self.assertEqual(status, 200, body)
        # Read-only: through an overlay of its own, the killed writer's journal replayed.
        b, _ = self.create(d, volumes=[{"name": "keep", "path": "/mnt/keep",
                                        "readOnly": True}])
        self.assertEqual(self.out(d, b, "cat /mnt/keep/a /mnt/keep/sub/b"), "from-a\ndeep\n")
        res = self.run_in(d, b, "echo no > /mnt/keep/a", code=None)
        self.assertNotEqual(res["exitCode"], 0)
        self.assertIn("Read-only", joined(res["output"], "stderr"))
        # Read-write again, beside the reader.
        c, _ = self.create(d, volumes=[{"name": "keep", "path": "/data"}])
        self.assertEqual(self.out(d, c, "echo from-c >> /data/a && cat /data/a"),
                         "from-a\nfrom-c\n")

    def test_one_writer_at_a_time_and_clear_refusals(self):
        d = self.daemon(ENV)
        self.volume(d, "one")
        w, _ = self.create(d, volumes=[{"name": "one", "path": "/data"}])
        status, _, err = d.post("/exec/", body={"volumes": [{"name": "one", "path": "/d"}]},
                                timeout=60)
        self.assertEqual(status, 409, err)
        self.assertIn(w, err["error"])
        r, _ = self.create(d, volumes=[{"name": "one", "path": "/d", "readOnly": True}])
        self.assertEqual(self.out(d, r, "grep ' /d ' /proc/mounts | cut -d' ' -f4 | "
                                  "cut -d, -f1"), "ro\n")
        # More volumes than a VM has slots: 400 naming the limit.
        for n in ("v1", "v2", "v3", "v4"):
            self.volume(d, n, 8 * MiB)
        five = [{"name": n, "path": f"/{n}", "readOnly": True}
                for n in ("one", "v1", "v2", "v3", "v4")]
        status, _, err = d.post("/exec/", body={"volumes": five}, timeout=60)
        self.assertEqual(status, 400, err)
        self.assertIn("at most 4 volumes", err["error"])
        # Four are fine, each where it was asked for.
        four, _ = self.create(d, volumes=five[1:])
        self.assertEqual(self.out(d, four, "grep -c ' /v[1-4] ext4 ro' /proc/mounts"), "4\n")
        # tmpfs storage has no root to make mount points in.
        status, _, err = d.post("/exec/", body={"storage": "tmpfs", "volumes": five[:1]},
                                timeout=60)
        self.assertEqual(status, 400, err)
        self.assertIn("disk storage", err["error"])
        # A path through a symbolic link of the template fails the creation, saying why.
        status, _, err = d.post("/exec/", body={"volumes": [{"name": "v1", "path":
                                                             "/bin/sh/x", "readOnly": True}]},
                                timeout=120)
        self.assertGreaterEqual(status, 400, err)
        self.assertIn("not a directory", err["error"])

    def test_shared_with_the_jail_driver(self):
        """The same image serves both drivers: written in a jail, read and written in a VM;
        after that, the host's kernel does not mount it (a guest's kernel wrote it)."""
        env = {**test_qemu.ENV, **ENV}
        jail = harness.Daemon(env=env, driver_name="jail", start_timeout=60)
        jail.start()
        self.addCleanup(jail._cleanup, False)
        self.addCleanup(jail.kill)
        self.volume(jail, "both")
        sid, _ = self.create(jail, keep=True, volumes=[{"name": "both", "path": "/data"}])
        self.run_in(jail, sid, "echo from-jail > /data/j")
        jail.delete(f"/exec/{sid}", timeout=60)
        jail.proc.send_signal(signal.SIGTERM)
        self.assertEqual(jail.proc.wait(60), 0)
        vm = self.daemon({**ENV, "SANDBOX_STATE_DIR": jail.state_dir,
                          "SANDBOX_RUN_DIR": jail.run_dir})
        sid, _ = self.create(vm, keep=True, volumes=[{"name": "both", "path": "/data"}])
        self.assertEqual(self.out(vm, sid, "cat /data/j; stat -c %u /data/j; "
                                  "echo from-vm > /data/v"), "from-jail\n1000\n")
        vm.delete(f"/exec/{sid}", timeout=60)
        vm.proc.send_signal(signal.SIGTERM)
        self.assertEqual(vm.proc.wait(60), 0)
        again = harness.Daemon(env={**env, "SANDBOX_STATE_DIR": jail.state_dir,
                                    "SANDBOX_RUN_DIR": jail.run_dir},
                               driver_name="jail", start_timeout=60)
        again.start()
        self.addCleanup(again.stop, check=False)
        status, _, err = again.post("/exec/", body={"volumes": [{"name": "both",
                                                                  "path": "/data"}]},
                                    timeout=60)
        self.assertGreaterEqual(status, 400, err)
        self.assertIn("mounted read-write in a VM", err["error"])


if __name__ == "__main__":
    unittest.main()
