"""End-to-end checks of the qemu driver that only a VM makes meaningful: sessions restored from
one snapshot get their own entropy and the host's clock, share the template's memory pages,
report a dead VM clearly and leave nothing behind; snapshots are reused while valid and rebuilt
when their template changes; a guest that cannot boot says why.

Runs the real sandboxd with SANDBOX_DRIVER=qemu (TCG where KVM is not usable). Built on the
integration harness (tests/integration/harness.py). Fails, saying why, when QEMU, the guest
kernel, the base template's rootfs.ext4 or the daemon is missing: `make test` installs or
builds each of them."""

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "tests", "integration"))

import harness  # noqa: E402
import helpers_exec  # noqa: E402
import helpers_host  # noqa: E402

TEMPLATE = "base"
ENV = {
    "AUTH_ENABLED": "false",
    "SANDBOX_DEFAULT_TEMPLATE": TEMPLATE,
    "SANDBOX_WARM_POOL": "0",
}


def artifacts():
    return os.environ.get("FIRECRACKER_ARTIFACTS_DIR") or harness.DEFAULT_ARTIFACTS


def missing():
    """What these tests need and is missing, or None."""
    qemu = os.environ.get("SANDBOX_QEMU_BIN") or "qemu-system-x86_64"
    if not shutil.which(qemu):
        return f"{qemu} is not installed (apt-get install qemu-system-x86)"
    kernel = os.path.join(artifacts(), "vmlinux")
    if not os.path.isfile(kernel):
        return f"no guest kernel at {kernel} (run guest/kernel/build.sh)"
    rootfs = os.path.join(artifacts(), "templates", TEMPLATE, "rootfs.ext4")
    if not os.path.isfile(rootfs):
        return f"no {rootfs} (run templates/build.sh {TEMPLATE})"
    if not os.access(harness.sandboxd_path(), os.X_OK):
        return f"sandboxd is not built at {harness.sandboxd_path()}"
    return None


def qemu_pids(sandbox_id):
    """Processes whose command line has `-name <sandbox_id>`: that sandbox's QEMU."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                args = f.read().split(b"\0")
        except OSError:
            continue
        for i, a in enumerate(args[:-1]):
            if a == b"-name" and args[i + 1] == sandbox_id.encode():
                found.append(int(entry))
    return found


def execute(d, sid, command, template=None, timeout=120):
    body = {"command": command}
    if template:
        body["template"] = template
    return d.post(f"/exec/{sid}/execute", body=body, timeout=timeout)


def stdout_of(body):
    return helpers_exec.joined(body["output"], "stdout")


def wait_gone(sandbox_id, run_dir, timeout=15):
    """Waits until the sandbox has no QEMU, no run directory and no cgroup; returns what is
    left (empty when all is gone)."""
    deadline = time.monotonic() + timeout
    while True:
        left = []
        if qemu_pids(sandbox_id):
            left.append(f"QEMU {qemu_pids(sandbox_id)}")
        if os.path.exists(os.path.join(run_dir, "qemu", sandbox_id)):
            left.append("run directory")
        if helpers_host.cgroup_dirs(sandbox_id):
            left.append(f"cgroups {helpers_host.cgroup_dirs(sandbox_id)}")
        if not left or time.monotonic() > deadline:
            return left
        time.sleep(0.1)


class QemuCase(unittest.TestCase):
    def setUp(self):
        why = missing()
        if why:
            self.fail(why)

    def daemon(self, env=None):
        d = harness.Daemon(env={**ENV, **(env or {})}, driver_name="qemu",
                           start_timeout=60)
        d.start()
        self.addCleanup(self.stop_and_check, d)
        return d

    def stop_and_check(self, d):
        """Stops the daemon and checks that its sandboxes left nothing: no QEMU, no cgroup,
        no run directory (looked at before the harness removes the daemon's files)."""
        if d.proc is not None and d.proc.poll() is None:
            d.proc.send_signal(signal.SIGTERM)
            try:
                d.proc.wait(30)
            except subprocess.TimeoutExpired:
                pass
        qemu_dir = os.path.join(d.run_dir, "qemu")
        left_dirs = os.listdir(qemu_dir) if os.path.isdir(qemu_dir) else []
        log = d.stop()
        for sb in helpers_host.sandbox_ids(log):
            self.assertEqual(wait_gone(sb, d.run_dir, timeout=5), [],
                             f"sandbox {sb} left behind")
        self.assertEqual(left_dirs, [], f"run directories left in {qemu_dir}")


class RestoreTest(QemuCase):
    """Sessions restored from the base template's snapshot."""

    def test_clones_differ_in_entropy_and_keep_the_hosts_time(self):
        d = self.daemon()
        seen = {}
        for i in range(3):
            sid = f"clone-{i}"
            before = time.time()
            status, _, body = execute(
                d, sid, "head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \\n'; echo; date +%s")
            after = time.time()
            self.assertEqual(status, 200, body)
            rnd, clock = stdout_of(body).split()
            seen[sid] = rnd
            # The guest clock is set by `resume`: whole seconds, within 2 s of the host.
            self.assertGreaterEqual(int(clock), int(before) - 2, f"{sid}: guest clock behind")
            self.assertLessEqual(int(clock), int(after) + 2, f"{sid}: guest clock ahead")
        self.assertEqual(len(set(seen.values())), 3,
                         f"restored sessions read the same random bytes: {seen}")
        log = d.stderr()
        for sid in seen:
            sb = helpers_exec.sandbox_of(d, sid)
            self.assertIsNotNone(sb, f"no sandbox logged for {sid}")
            self.assertIn(f"sandbox {sb}: restored in", log,
                          f"{sid} was not restored from the snapshot")

    def test_snapshot_files(self):
        d = self.daemon()
        status, _, body = execute(d, "snap", "true")
        self.assertEqual(status, 200, body)
        snap = os.path.join(artifacts(), "templates", TEMPLATE, "qemu")
        with open(os.path.join(snap, "meta.json"), encoding="utf-8") as f:
            meta = json.load(f)
        for key in ("format", "kernel", "rootfs", "qemu", "accel", "vcpus", "memMib", "cmdline"):
            self.assertIn(key, meta)
        self.assertIn("sha256", meta["kernel"])
        self.assertIn("init=/sbin/sandbox-agent", meta["cmdline"])
        self.assertIn("sandbox.channel=", meta["cmdline"])
        ram = os.stat(os.path.join(snap, "memory.ram"))
        self.assertEqual(ram.st_size, meta["memMib"] << 20)
        # RAM is not in the migration stream: the state is small.
        self.assertLess(os.stat(os.path.join(snap, "state.mig")).st_size, 4 << 20)

    def test_clones_share_the_templates_pages(self):
        d = self.daemon()
        pids = []
        for sid in ("share-a", "share-b"):
            status, _, body = execute(d, sid, "cat /proc/meminfo >/dev/null; echo ok")
            self.assertEqual(status, 200, body)
            pids += qemu_pids(helpers_exec.sandbox_of(d, sid))
        self.assertEqual(len(pids), 2)
        # The snapshot's memory.ram is mapped private by both: pages neither wrote are the
        # same page-cache pages, counted as shared.
        with open(f"/proc/{pids[0]}/smaps", encoding="ascii", errors="replace") as f:
            text = f.read()
        block, current = {}, None
        for line in text.splitlines():
            if "/" in line and line.split()[-1].endswith("/memory.ram"):
                current = line
                continue
            if current and ":" in line and line.split(":")[0] in (
                    "Rss", "Shared_Clean", "Private_Dirty"):
                block[line.split(":")[0]] = int(line.split()[1])
            elif current and line[:1].isdigit():
                break
        self.assertTrue(block, "memory.ram is not mapped by the clone")
        self.assertGreater(block["Shared_Clean"], 1024, block)
        self.assertLess(block["Private_Dirty"], block["Rss"], block)

    def test_a_killed_vm_is_reported_and_cleaned_up(self):
        d = self.daemon()
        sid = "doomed"
        status, _, body = execute(d, sid, "echo alive")
        self.assertEqual(status, 200, body)
        sb = helpers_exec.sandbox_of(d, sid)
        pids = qemu_pids(sb)
        self.assertEqual(len(pids), 1, f"QEMU of {sb}: {pids}")
        os.kill(pids[0], signal.SIGKILL)

        def failed():
            _, _, listed = d.get("/exec/", timeout=30)
            return any(s["id"] == sid and s.get("state") == "failed" for s in listed["sessions"])

        harness.wait_until(failed, 30, what=f"session {sid} to fail after its VM was killed")
        status, headers, body = execute(d, sid, "echo again")
        self.assertEqual(status, 502, body)
        self.assertIn("application/json", headers.get("Content-Type", ""))
        self.assertIn("stopped unexpectedly", body["error"])
        self.assertEqual(wait_gone(sb, d.run_dir), [])
        # The next request starts afresh.
        status, _, body = execute(d, sid, "echo reborn")
        self.assertEqual(status, 200, body)
        self.assertEqual(stdout_of(body), "reborn\n")


class SnapshotLifecycleTest(QemuCase):
    """Snapshots of a private copy of the base template, so that changing it disturbs no one."""

    def setUp(self):
        super().setUp()
        self.art = tempfile.mkdtemp(prefix="qemu-e2e-artifacts-")
        self.addCleanup(shutil.rmtree, self.art, True)
        os.symlink(os.path.join(artifacts(), "vmlinux"), os.path.join(self.art, "vmlinux"))
        src = os.path.join(artifacts(), "templates", TEMPLATE)
        self.tdir = os.path.join(self.art, "templates", TEMPLATE)
        os.makedirs(self.tdir)
        for name in ("template.json", "rootfs.ext4"):
            shutil.copy2(os.path.join(src, name), os.path.join(self.tdir, name))
        self.env = {"FIRECRACKER_ARTIFACTS_DIR": self.art}

    def builds(self, d):
        return [e["msg"] for e in d.logs() if e.get("msg", "").startswith("building the snapshot")]

    def test_reused_while_valid_rebuilt_when_the_rootfs_changes(self):
        d = self.daemon(self.env)
        status, _, body = execute(d, "first", "echo one")
        self.assertEqual(status, 200, body)
        self.assertEqual(len(self.builds(d)), 1)
        self.assertIn("there is none", self.builds(d)[0])
        d.stop()

        # A new daemon finds it valid: no build.
        d = self.daemon(self.env)
        status, _, body = execute(d, "second", "echo two")
        self.assertEqual(status, 200, body)
        self.assertEqual(self.builds(d), [])

        # The template's image changes (as a rebuild would change it): rebuilt, not used.
        rootfs = os.path.join(self.tdir, "rootfs.ext4")
        st = os.stat(rootfs)
        os.utime(rootfs, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000_000))
        status, _, body = execute(d, "third", "echo three")
        self.assertEqual(status, 200, body)
        self.assertEqual(stdout_of(body), "three\n")
        builds = self.builds(d)
        self.assertEqual(len(builds), 1, builds)
        self.assertIn("rootfs.ext4 changed", builds[0])
        # Swapped in whole: no temporary directory is left.
        self.assertEqual([n for n in os.listdir(self.tdir) if n.startswith(".qemu.tmp")], [])

    def test_a_snapshot_that_does_not_restore_is_rebuilt(self):
        d = self.daemon(self.env)
        status, _, body = execute(d, "first", "echo one")
        self.assertEqual(status, 200, body)
        # Damage the device state (as a truncated copy would): QEMU refuses the stream.
        with open(os.path.join(self.tdir, "qemu", "state.mig"), "r+b") as f:
            f.truncate(100)
        status, _, body = execute(d, "second", "echo two")
        self.assertGreaterEqual(status, 500, body)
        self.assertIn("restoring template base", body["error"])
        # Not every clone after it: the snapshot is rebuilt on the next creation.
        status, _, body = execute(d, "third", "echo three")
        self.assertEqual(status, 200, body)
        self.assertEqual(stdout_of(body), "three\n")
        builds = self.builds(d)
        self.assertEqual(len(builds), 2, builds)
        self.assertIn("there is none", builds[1])

    def test_a_guest_that_cannot_boot_says_why(self):
        self.assertTrue(shutil.which("mkfs.ext4"),
                        "mkfs.ext4 is not installed (package e2fsprogs, which make test installs)")
        broken = os.path.join(self.art, "templates", "broken")
        os.makedirs(os.path.join(broken, "empty"))
        with open(os.path.join(self.tdir, "template.json"), encoding="utf-8") as f:
            manifest = json.load(f)
        manifest["name"] = "broken"
        with open(os.path.join(broken, "template.json"), "w", encoding="utf-8") as f:
            json.dump(manifest, f)
        # A root file system without the agent: the kernel finds no init and panics.
        subprocess.run(["mkfs.ext4", "-q", "-F", "-d", os.path.join(broken, "empty"),
                        os.path.join(broken, "rootfs.ext4"), "8M"], check=True,
                       stdout=subprocess.DEVNULL)
        shutil.rmtree(os.path.join(broken, "empty"))
        d = self.daemon(self.env)
        status, _, body = execute(d, "broken", "true", template="broken", timeout=180)
        self.assertGreaterEqual(status, 500, body)
        self.assertIn("guest kernel panicked", body["error"])
        self.assertIn("/sbin/sandbox-agent", body["error"])
        self.assertEqual([n for n in os.listdir(broken) if n.startswith(".qemu.tmp")], [])


if __name__ == "__main__":
    unittest.main(verbosity=2)
