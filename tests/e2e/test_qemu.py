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
    # E2B's base too (the tests that pause through the E2B API): by default it is the
    # code-interpreter template where that is built, an 800 MiB Debian system.
    "E2B_TEMPLATE_ALIASES": f"base={TEMPLATE}",
}


# The name of the sealed memfd that holds the base template's snapshot RAM.
RAM_MEMFD = f"sandbox-ram:{TEMPLATE}"


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
        # The snapshot's sealed RAM is mapped private by both: pages neither wrote are the
        # same pages, counted as shared.
        block = ram_mapping(pids[0])
        self.assertTrue(block, "the snapshot's RAM is not mapped by the clone")
        # Shared_Dirty: a memfd's pages are never clean (they have no file to go back to).
        self.assertGreater(block["Shared_Clean"] + block["Shared_Dirty"], 1024, block)
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


def proc_status(pid):
    fields = {}
    with open(f"/proc/{pid}/status", encoding="ascii") as f:
        for line in f:
            key, _, value = line.partition(":")
            fields[key] = value.split()
    return fields


def ram_mapping(pid):
    """The smaps counters (kB) of QEMU's mapping of the template's sealed RAM, or {}."""
    with open(f"/proc/{pid}/smaps", encoding="ascii", errors="replace") as f:
        text = f.read()
    block, current = {}, None
    for line in text.splitlines():
        if f"/memfd:{RAM_MEMFD}" in line:
            current = line
            continue
        if current and ":" in line and line.split(":")[0] in (
                "Rss", "Shared_Clean", "Shared_Dirty", "Private_Dirty", "Anonymous"):
            block[line.split(":")[0]] = int(line.split()[1])
        elif current and line[:1].isdigit():
            break
    return block


def ram_fds(pid):
    """QEMU's descriptors of the template's sealed RAM: [(fd number, path)]."""
    found = []
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            target = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:
            continue
        if target.startswith(f"/memfd:{RAM_MEMFD}"):
            found.append((int(fd), f"/proc/{pid}/fd/{fd}"))
    return found


def sha256_of(path):
    import hashlib
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


class ConfinementTest(QemuCase):
    """QEMU runs as an unprivileged uid of its own, without capabilities, under its seccomp
    filter, in namespaces of its own; the template's RAM cannot be changed through it."""

    def clone(self, d, sid):
        status, _, body = execute(d, sid, "echo up")
        self.assertEqual(status, 200, body)
        pids = qemu_pids(helpers_exec.sandbox_of(d, sid))
        self.assertEqual(len(pids), 1, pids)
        return pids[0]

    def test_qemu_is_unprivileged_and_confined(self):
        d = self.daemon()
        pids = [self.clone(d, f"conf-{i}") for i in range(2)]
        uids = []
        for pid in pids:
            st = proc_status(pid)
            # Real, effective, saved and filesystem ids: the same unprivileged one.
            self.assertEqual(len(set(st["Uid"])), 1, st["Uid"])
            self.assertNotEqual(st["Uid"][0], "0", st["Uid"])
            self.assertEqual(st["Gid"], [st["Uid"][0]] * 4, st["Gid"])
            self.assertEqual(st.get("Groups", []), [])
            # From the jails' range allocator: the first id of a range.
            uid = int(st["Uid"][0])
            self.assertGreaterEqual(uid, 0x70000000)
            self.assertEqual((uid - 0x70000000) % 65536, 0, uid)
            uids.append(uid)
            for caps in ("CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb"):
                self.assertEqual(int(st[caps][0], 16), 0, f"{caps} {st[caps]}")
            self.assertEqual(st["NoNewPrivs"], ["1"])
            self.assertEqual(st["Seccomp"], ["2"])
            # PID 1 of a pid namespace of its own.
            self.assertEqual(st["NSpid"], [str(pid), "1"])
            for ns in ("mnt", "pid", "net", "ipc", "uts"):
                self.assertNotEqual(os.readlink(f"/proc/{pid}/ns/{ns}"),
                                    os.readlink(f"/proc/self/ns/{ns}"), ns)
        self.assertNotEqual(uids[0], uids[1], "two VMs share a uid")

    def test_qemu_sees_no_host_file(self):
        d = self.daemon()
        pid = self.clone(d, "conf-root")
        root = f"/proc/{pid}/root"
        # Its root holds /usr (read-only), what /bin, /lib and /lib64 are on the host, its
        # devices and its procfs; nothing else.
        self.assertLessEqual(set(os.listdir(root)), {"usr", "bin", "lib", "lib64", "dev", "proc"},
                             os.listdir(root))
        self.assertEqual(sorted(os.listdir(f"{root}/dev")), ["null", "urandom"])
        # Its procfs is its pid namespace's: QEMU alone.
        self.assertEqual(sorted(e for e in os.listdir(f"{root}/proc") if e.isdigit()), ["1"])
        for host_path in ("/etc/passwd", "/root", "/tmp", artifacts(), d.run_dir,
                          d.state_dir, "/sys/fs/cgroup"):
            self.assertFalse(os.path.exists(root + host_path),
                             f"{host_path} is visible to QEMU")
        with open(f"/proc/{pid}/mountinfo", encoding="utf-8") as f:
            mounts = [line.split()[4] for line in f]
        self.assertEqual(mounts[0], "/", mounts)
        self.assertFalse([m for m in mounts if m.startswith("/var") or m.startswith("/tmp")],
                         mounts)
        # The files it uses are descriptors: the template's image, the kernel and the RAM
        # never by a path it could open itself.
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            cmdline = f.read().decode()
        self.assertNotIn(artifacts(), cmdline)
        self.assertNotIn(d.run_dir, cmdline)

    def test_template_ram_is_sealed(self):
        import fcntl
        d = self.daemon()
        pid = self.clone(d, "conf-ram")
        fds = ram_fds(pid)
        self.assertTrue(fds, "QEMU has no descriptor of the sealed RAM")
        for _, path in fds:
            fd = os.open(path, os.O_RDWR)
            try:
                seals = fcntl.fcntl(fd, fcntl.F_GET_SEALS)
                for seal in (fcntl.F_SEAL_WRITE, fcntl.F_SEAL_SHRINK, fcntl.F_SEAL_GROW,
                             fcntl.F_SEAL_SEAL):
                    self.assertTrue(seals & seal, f"seals {seals:#x} lack {seal:#x}")
                # Writing back what is there: harmless should the seal be missing.
                first = os.pread(fd, 4096, 0)
                with self.assertRaises(PermissionError):
                    os.pwrite(fd, first, 0)
                with self.assertRaises(PermissionError):
                    os.ftruncate(fd, 4096)
            finally:
                os.close(fd)

    def test_a_guest_that_dirties_all_its_ram_leaves_the_template_unchanged(self):
        d = self.daemon()
        self.clone(d, "conf-dirty")
        ram = os.path.join(artifacts(), "templates", TEMPLATE, "qemu", "memory.ram")
        before = sha256_of(ram)
        pid = qemu_pids(helpers_exec.sandbox_of(d, "conf-dirty"))[0]
        sealed = ram_fds(pid)[0][1]
        sealed_before = sha256_of(sealed)
        # Fills the guest's memory: its /workspace (a tmpfs in guest RAM) until it is full,
        # then one buffer larger than the guest's RAM, which dd fills until the guest's OOM
        # killer stops it.
        status, _, body = execute(
            d, "conf-dirty",
            "dd if=/dev/zero of=/workspace/fill bs=1M 2>/dev/null; "
            "dd if=/dev/zero of=/dev/null bs=256M count=1 2>/dev/null; "
            "rm -f /workspace/fill; "
            "echo done", timeout=300)
        self.assertEqual(status, 200, body)
        # Most of the guest's 128 MiB (what its kernel lets processes have) are its own
        # copies now.
        dirty = ram_mapping(pid).get("Anonymous", 0)
        self.assertGreater(dirty, 64 << 10, f"the guest dirtied only {dirty} kB")
        self.assertEqual(sha256_of(ram), before, "the snapshot's RAM file changed")
        self.assertEqual(sha256_of(sealed), sealed_before, "the sealed RAM changed")
        # And a new clone still starts from it.
        status, _, body = execute(d, "conf-after", "echo fresh")
        self.assertEqual(status, 200, body)
        self.assertEqual(stdout_of(body), "fresh\n")


class PrivateTemplateCase(QemuCase):
    """A private copy of the base template, so that changing it disturbs no one."""

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


# What a command in a VM never has: CAP_SYS_MODULE, CAP_SYS_RAWIO, CAP_SYS_PTRACE.
COMMAND_DROPS = (1 << 16) | (1 << 17) | (1 << 19)


class CommandCapabilityTest(PrivateTemplateCase):
    """Commands run as root in the guest, without the capabilities that reach the agent or the
    guest kernel: the template carries the agent built with this tree."""

    def setUp(self):
        super().setUp()
        agent = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(
            harness.sandboxd_path()))), "agent", "sandbox-agent")
        self.assertTrue(os.access(agent, os.X_OK), f"no guest agent at {agent}")
        self.assertTrue(shutil.which("debugfs"), "debugfs is not installed (package e2fsprogs)")
        rootfs = os.path.join(self.tdir, "rootfs.ext4")
        for cmd in ("rm /sbin/sandbox-agent", f"write {agent} /sbin/sandbox-agent",
                    "sif /sbin/sandbox-agent mode 0100755"):
            subprocess.run(["debugfs", "-w", "-R", cmd, rootfs], check=True,
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    def test_commands_lack_ptrace_module_and_rawio(self):
        d = self.daemon(self.env)
        status, _, body = execute(d, "caps", "id -u; grep -E '^Cap(Bnd|Eff|Prm|Inh|Amb)' "
                                  "/proc/self/status; cat /proc/1/environ >/dev/null 2>&1 "
                                  "&& echo agent-readable || echo agent-closed")
        self.assertEqual(status, 200, body)
        lines = stdout_of(body).split("\n")
        self.assertEqual(lines[0], "0", "commands no longer run as root in the guest")
        caps = {ln.split(":")[0]: int(ln.split()[1], 16) for ln in lines[1:6]}
        for name, value in caps.items():
            self.assertEqual(value & COMMAND_DROPS, 0, f"{name} {value:#x}")
        # Still root otherwise: what templates do as root (mounts, owners) keeps working.
        self.assertTrue(caps["CapEff"] & (1 << 21), f"no CAP_SYS_ADMIN: {caps['CapEff']:#x}")
        # The agent is non-dumpable: without CAP_SYS_PTRACE its /proc files are closed.
        self.assertEqual(lines[6], "agent-closed")


class SnapshotLifecycleTest(PrivateTemplateCase):
    """Snapshots of a private copy of the base template, so that changing it disturbs no one."""

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
