"""The firecracker driver against Firecracker v1.16.1's API contract.

The real binaries cannot be installed on every machine, so sandboxd runs here with a fake
jailer and a fake Firecracker (fake_jailer.py, fake_firecracker.py) that validate every request
against the published spec, record it, and play the VM with the real sandbox agent behind the
vsock socket. What is checked: each request body and path the driver sends, for the snapshot
build and for restore; the jailer's argv; the chroot's layout and permissions; teardown; the
socket path limit; snapshot invalidation. A real end-to-end run needs `firecracker`, `jailer`
and a usable KVM (test_real_firecracker, skipped otherwise).
"""

import json
import os
import shutil
import stat
import sys
import tempfile
import time
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "tests", "integration"))
sys.path.insert(0, HERE)

import harness  # noqa: E402

try:
    from spec import Spec, spec_path  # noqa: E402
    YAML_MISSING = None
except ImportError as e:  # python3-yaml missing
    YAML_MISSING = f"python3-yaml is not installed, which make test installs ({e})"

AGENT_HOST = os.environ.get("SANDBOX_AGENT_HOST_BIN") or os.path.join(
    os.path.dirname(os.path.dirname(harness.sandboxd_path())), "agent", "sandbox-agent-host")


def require_spec():
    """Fails when python3-yaml is missing (a package make test installs). Skips only when
    FIRECRACKER_SPEC names a spec that is not there (the repository keeps its own)."""
    if YAML_MISSING:
        raise AssertionError(YAML_MISSING)
    if not os.path.exists(spec_path()):
        raise unittest.SkipTest(f"the Firecracker spec is not at {spec_path()}")


def read_log(path):
    entries = []
    if os.path.exists(path):
        with open(path) as f:
            entries = [json.loads(line) for line in f if line.strip()]
    return entries


class SpecValidatorTest(unittest.TestCase):
    """The validator itself must catch what Firecracker would reject."""

    @classmethod
    def setUpClass(cls):
        require_spec()
        cls.spec = Spec()

    def test_accepts_valid(self):
        self.assertEqual(self.spec.validate("PUT", "/drives/rootfs", {
            "drive_id": "rootfs", "path_on_host": "/r", "is_root_device": True,
            "is_read_only": True}), [])

    def test_rejects_unknown_missing_and_mismatched(self):
        self.assertTrue(self.spec.validate("PUT", "/machine-config", {
            "vcpu_count": 1, "mem_size_mib": 128, "turbo": True}))
        self.assertTrue(self.spec.validate("PUT", "/machine-config", {"vcpu_count": 1}))
        self.assertTrue(self.spec.validate("PUT", "/machine-config", {
            "vcpu_count": 64, "mem_size_mib": 128}))
        self.assertTrue(self.spec.validate("PUT", "/drives/a", {
            "drive_id": "b", "is_root_device": True}))
        self.assertTrue(self.spec.validate("PATCH", "/vm", {"state": "Sleeping"}))
        self.assertTrue(self.spec.validate("PUT", "/nowhere", {}))
        self.assertTrue(self.spec.validate("PUT", "/snapshot/load", {
            "snapshot_path": "/s", "mem_backend": {"backend_type": "Floppy",
                                                   "backend_path": "/m"}}))


class FirecrackerContractTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        require_spec()
        if not os.access(AGENT_HOST, os.X_OK):
            raise AssertionError(f"no agent binary at {AGENT_HOST} (ninja -C build)")
        cls.tmp = tempfile.mkdtemp(prefix="fc-contract-")
        cls.artifacts = fake_artifacts(cls.tmp)
        cls.jail_base = os.path.join(cls.tmp, "jail")
        cls.log = os.path.join(cls.tmp, "fc.log")
        cls.daemon = harness.Daemon(env={
            "SANDBOX_DRIVER": "firecracker",
            "FIRECRACKER_KVM_CHECK": "false",  # the fake needs no KVM
            "FIRECRACKER_BIN": os.path.join(HERE, "fake_firecracker.py"),
            "FIRECRACKER_JAILER_BIN": os.path.join(HERE, "fake_jailer.py"),
            "FIRECRACKER_JAIL_BASE": cls.jail_base,
            "FIRECRACKER_ARTIFACTS_DIR": cls.artifacts,
            "SANDBOX_DEFAULT_TEMPLATE": "base",
            "SANDBOX_WARM_POOL": "0",
            "FAKE_FC_LOG": cls.log,
            "FAKE_FC_AGENT": AGENT_HOST,
        }, driver_name="firecracker")
        cls.daemon.start()

    @classmethod
    def tearDownClass(cls):
        try:
            cls.daemon.stop()
        finally:
            shutil.rmtree(cls.tmp, ignore_errors=True)

    def api_requests(self):
        return [e for e in read_log(self.log) if "method" in e]

    def test_1_session_runs_through_the_driver(self):
        st, _, body = self.daemon.post("/exec/fc1/execute", {"command": "echo", "args": ["hi"]})
        self.assertEqual(st, 200, body)
        self.assertEqual(body["exitCode"], 0)
        self.assertEqual("".join(c["data"] for c in body["output"]), "hi\n")
        st, _, h = self.daemon.get("/health")
        self.assertEqual(h["driver"], "firecracker")
        self.assertEqual(h["isolation"], "vm")

    def test_2_every_request_matches_the_spec(self):
        self.daemon.post("/exec/fc2/execute", {"command": "true"})
        reqs = self.api_requests()
        self.assertTrue(reqs)
        bad = [r for r in reqs if r["errors"]]
        self.assertEqual(bad, [], "requests the spec rejects")

    def test_3_snapshot_build_and_restore_sequences(self):
        self.daemon.post("/exec/fc3/execute", {"command": "true"})
        seq = [(r["method"], r["path"]) for r in self.api_requests()]
        build = [("PUT", "/machine-config"), ("PUT", "/boot-source"), ("PUT", "/drives/rootfs"),
                 ("PUT", "/vsock"), ("PUT", "/entropy"), ("PUT", "/network-interfaces/eth0"),
                 ("PUT", "/actions"),
                 ("PATCH", "/vm"), ("PUT", "/snapshot/create")]
        it = iter(seq)
        self.assertTrue(all(step in it for step in build), seq)
        loads = [r for r in self.api_requests() if r["path"] == "/snapshot/load"]
        self.assertTrue(loads)
        for r in loads:
            self.assertEqual(r["body"]["mem_backend"]["backend_type"], "File")
            self.assertTrue(r["body"]["resume_vm"])
            self.assertNotIn("vsock_override", r["body"])
            self.assertNotIn("network_overrides", r["body"])
        nic = next(r for r in self.api_requests() if r["path"] == "/network-interfaces/eth0")
        self.assertEqual(nic["body"], {"iface_id": "eth0", "host_dev_name": "tap0"})
        boot = next(r for r in self.api_requests() if r["path"] == "/boot-source")
        self.assertIn("init=/sbin/sandbox-agent", boot["body"]["boot_args"])
        self.assertIn("sandbox.channel=vsock:5000", boot["body"]["boot_args"])
        # The same guest-wide limits as the qemu driver's guests: the sandbox's pids limit
        # (SANDBOX_PIDS_MAX, 256) plus the guest kernel's threads, and overcommit.
        args = boot["body"]["boot_args"].split()
        self.assertIn("sysctl.kernel.threads-max=320", args)
        self.assertIn("sysctl.vm.overcommit_memory=1", args)
        self.assertEqual(
            sum(1 for r in self.api_requests() if r["path"] == "/snapshot/create"), 1,
            "the snapshot is built once and reused")

    def test_4_jailer_argv(self):
        self.daemon.post("/exec/fc4/execute", {"command": "true"})
        runs = [e["jailer"] for e in read_log(self.log) if "jailer" in e]
        self.assertTrue(runs)
        argv = runs[-1]
        joined = " ".join(argv)
        for part in ("--uid 997", "--gid 982", f"--chroot-base-dir {self.jail_base}",
                     "--parent-cgroup agent-sandbox", "--new-pid-ns",
                     "--resource-limit no-file=1024", "-- --api-sock /run/firecracker.socket"):
            self.assertIn(part, joined)
        version = "2" if os.path.exists("/sys/fs/cgroup/cgroup.controllers") else "1"
        self.assertIn(f"--cgroup-version {version}", joined)
        # Guest RAM (128 MiB) plus the VMM's 64 MiB: the VM_MEMORY_LIMIT_BYTES default alone
        # (128 MiB) would leave Firecracker no room of its own.
        key = "memory.max" if version == "2" else "memory.limit_in_bytes"
        self.assertIn(f"{key}={(128 + 64) << 20}", argv)

    def test_4b_jailer_uid_gid_and_cgroup_placement(self):
        st, _, body = self.daemon.post("/exec/", {"id": "fc4b"})
        self.assertEqual(st, 201, body)
        run = [e["jailer"] for e in read_log(self.log) if "jailer" in e][-1]
        opts = dict(zip(run, run[1:]))
        # Firecracker is never root: the configured uid and gid (FIRECRACKER_UID/GID).
        self.assertEqual((opts["--uid"], opts["--gid"]), ("997", "982"))
        jid = opts["--id"]
        placed = [e for e in read_log(self.log) if e.get("id") == jid and "placed" in e]
        self.assertEqual(len(placed), 1, placed)
        pid, dirs = placed[0]["placed"], placed[0]["cgroups"]
        # Under the server's parent, one cgroup per sandbox, the VMM in each, with the limits
        # the driver asked for.
        self.assertTrue(dirs)
        for d in dirs:
            self.assertEqual(os.path.basename(os.path.dirname(d)), "agent-sandbox", d)
            self.assertEqual(os.path.basename(d), jid, d)
            with open(os.path.join(d, "cgroup.procs"), encoding="ascii") as f:
                self.assertIn(str(pid), f.read().split(), d)
        limits = {c.split("=")[0]: c.split("=")[1]
                  for i, c in enumerate(run) if i and run[i - 1] == "--cgroup"}
        self.assertTrue({"pids.max"} <= set(limits), limits)
        for key, value in limits.items():
            d = next(x for x in dirs if os.path.exists(os.path.join(x, key)))
            with open(os.path.join(d, key), encoding="ascii") as f:
                got = f.read().strip()
            self.assertEqual(got, value, key)
        # The driver takes the jailer's cgroups as the sandbox's and removes them with it.
        st, _, _ = self.daemon.delete("/exec/fc4b")
        self.assertEqual(st, 200)
        harness.wait_until(lambda: not any(os.path.isdir(d) for d in dirs), 30,
                           what="the sandbox's cgroups to go after DELETE")

    def test_5_chroot_layout_permissions_and_teardown(self):
        jails = os.path.join(self.jail_base, "fake_firecracker.py")
        before = set(os.listdir(jails)) if os.path.isdir(jails) else set()
        st, _, body = self.daemon.post("/exec/", {"id": "fc5"})
        self.assertEqual(st, 201, body)
        new = [d for d in os.listdir(jails) if d not in before and not d.startswith("tpl-")]
        live = [d for d in new if not d.endswith(".netns")]
        self.assertEqual(len(live), 1, new)
        # Without a session network, the VM's tap0 lives in a namespace of the driver's own,
        # mounted beside the jail (never the host's namespace).
        netns = os.path.join(jails, live[0] + ".netns")
        if new != live:
            self.assertEqual(new and sorted(new), sorted([live[0], live[0] + ".netns"]))
        root = os.path.join(jails, live[0], "root")
        # The chroot holds what the VM needs and nothing else: no kernel (a restore needs
        # none), no host file, no other sandbox's. (fake-guest-workspace is the fake's own:
        # its agent runs on the host, where a real guest's workspace is inside the VM.)
        self.assertEqual(sorted(n for n in os.listdir(root) if n != "fake-guest-workspace"),
                         sorted(["firecracker.pid", "memory", "rootfs.ext4", "run", "v.sock",
                                 "vmstate"]))
        self.assertEqual(os.listdir(os.path.join(root, "run")), ["firecracker.socket"])
        s = os.stat(root)
        self.assertEqual((s.st_uid, s.st_gid, s.st_mode & 0o777), (0, 982, 0o750))
        for name in ("rootfs.ext4", "vmstate", "memory"):
            s = os.stat(os.path.join(root, name))
            self.assertEqual(s.st_mode & 0o007, 0, f"{name} is accessible to others")
            self.assertEqual(s.st_mode & 0o222, 0, f"{name} is writable")
            self.assertIn(s.st_uid, (0, 997), name)
            self.assertEqual(s.st_gid, 982)
        self.assertTrue(stat.S_ISSOCK(os.stat(os.path.join(root, "v.sock")).st_mode))
        self.assertTrue(stat.S_ISSOCK(os.stat(os.path.join(root, "run/firecracker.socket")).st_mode))
        with open(os.path.join(root, "firecracker.pid")) as f:
            pid = int(f.read())
        st, _, _ = self.daemon.delete("/exec/fc5")
        self.assertEqual(st, 200)
        harness.wait_until(lambda: not os.path.exists(os.path.join(jails, live[0]))
                           and not os.path.exists(f"/proc/{pid}"), 30,
                           what="the sandbox's jail and VMM to go after DELETE")
        self.assertFalse(os.path.exists(os.path.join(jails, live[0])), "jail left behind")
        self.assertFalse(os.path.exists(netns), "network namespace left behind")
        self.assertFalse([d for d in os.listdir(jails) if d.startswith("tpl-")],
                         "the snapshot build's jail or namespace left behind")
        self.assertFalse(os.path.exists(f"/proc/{pid}"), "VMM left running")

    def test_6_stale_snapshot_is_rebuilt(self):
        self.daemon.post("/exec/fc6a/execute", {"command": "true"})
        before = sum(1 for r in self.api_requests() if r["path"] == "/snapshot/create")
        rootfs = os.path.join(self.artifacts, "templates", "base", "rootfs.ext4")
        with open(rootfs, "ab") as f:
            f.write(b"changed")
        st, _, body = self.daemon.post("/exec/fc6b/execute", {"command": "true"})
        self.assertEqual(st, 200, body)
        after = sum(1 for r in self.api_requests() if r["path"] == "/snapshot/create")
        self.assertEqual(after, before + 1)


def fake_artifacts(tmp):
    """An artifacts directory with a fake kernel and a base template the fake boots."""
    artifacts = os.path.join(tmp, "artifacts")
    tdir = os.path.join(artifacts, "templates", "base")
    os.makedirs(tdir)
    with open(os.path.join(artifacts, "vmlinux"), "wb") as f:
        f.write(b"\x7fELF fake kernel for the contract test")
    with open(os.path.join(tdir, "rootfs.ext4"), "wb") as f:
        f.write(b"fake ext4 image")
    with open(os.path.join(tdir, "template.json"), "w") as f:
        json.dump({"name": "base", "displayName": "Base", "version": "1",
                   "description": "contract test", "tools": [],
                   "resources": {"memSizeMib": 128, "vcpuCount": 1}}, f)
    return artifacts


class FirecrackerLifecycleTest(unittest.TestCase):
    """Pause, hibernation, fork and snapshots through the driver: `PATCH /vm` Paused and
    Resumed, a Full `snapshot/create` into the jail whose files are kept in the state
    directory (fc-saved/<name>/), and `snapshot/load` with resume_vm from them, every request
    checked against the spec. The fake keeps the guest's workspace in the memory file, so a
    file written before a save is there after the load; that processes carry on is
    Firecracker's to do and not checked here."""

    def start(self, state_dir=None):
        env = {
            "SANDBOX_DRIVER": "firecracker",
            "FIRECRACKER_KVM_CHECK": "false",  # the fake needs no KVM
            "FIRECRACKER_BIN": os.path.join(HERE, "fake_firecracker.py"),
            "FIRECRACKER_JAILER_BIN": os.path.join(HERE, "fake_jailer.py"),
            "FIRECRACKER_JAIL_BASE": self.jail_base,
            "FIRECRACKER_ARTIFACTS_DIR": self.artifacts,
            "SANDBOX_DEFAULT_TEMPLATE": "base",
            "SANDBOX_WARM_POOL": "0",
            "FAKE_FC_LOG": self.log,
            "FAKE_FC_AGENT": AGENT_HOST,
        }
        if state_dir:
            env["SANDBOX_STATE_DIR"] = state_dir
        d = harness.Daemon(env=env, driver_name="firecracker")
        d.start()
        self.addCleanup(d.stop, check=False)
        return d

    def setUp(self):
        require_spec()
        if not os.access(AGENT_HOST, os.X_OK):
            raise AssertionError(f"no agent binary at {AGENT_HOST} (ninja -C build)")
        self.tmp = tempfile.mkdtemp(prefix="fc-life-")
        self.addCleanup(shutil.rmtree, self.tmp, True)
        self.artifacts = fake_artifacts(self.tmp)
        self.jail_base = os.path.join(self.tmp, "jail")
        self.log = os.path.join(self.tmp, "fc.log")
        self.state = os.path.join(self.tmp, "state")
        os.makedirs(self.state)
        self.d = self.start(self.state)

    def requests(self, path=None):
        return [e for e in read_log(self.log) if "method" in e and (path is None or
                                                                    e["path"] == path)]

    def saved(self):
        base = os.path.join(self.state, "fc-saved")
        return sorted(os.listdir(base)) if os.path.isdir(base) else []

    def run_ok(self, d, sid, command):
        st, _, body = d.post(f"/exec/{sid}/execute", {"command": command})
        self.assertEqual((st, body.get("exitCode")), (200, 0), body)
        return "".join(c["data"] for c in body["output"] if c["stream"] == "stdout")

    def test_pause_freezes_the_vcpus_and_resume_runs_them(self):
        st, _, body = self.d.post("/exec/", {"id": "p1"})
        self.assertEqual(st, 201, body)
        st, _, body = self.d.post("/exec/p1/pause")
        self.assertEqual((st, body.get("pauseMode")), (200, "freeze"), body)
        self.assertEqual(self.requests("/vm")[-1]["body"], {"state": "Paused"})
        st, _, body = self.d.post("/exec/p1/execute", {"command": "true"})
        self.assertEqual(st, 409, body)
        st, _, body = self.d.post("/exec/p1/resume")
        self.assertEqual((st, body.get("state")), (200, "ready"), body)
        self.assertEqual(self.requests("/vm")[-1]["body"], {"state": "Resumed"})
        self.run_ok(self.d, "p1", "true")
        self.assertEqual([r for r in self.requests() if r["errors"]], [])

    def test_hibernate_saves_the_vm_and_the_resume_loads_it(self):
        st, _, body = self.d.post("/exec/", {"id": "h1"})
        self.assertEqual(st, 201, body)
        self.run_ok(self.d, "h1", "echo kept > file")
        loads = len(self.requests("/snapshot/load"))
        st, _, body = self.d.post("/exec/h1/pause", {"mode": "hibernate"})
        self.assertEqual(st, 200, body)
        self.assertEqual((body["pauseMode"], body["processesKept"]), ("hibernate", True), body)
        create = self.requests("/snapshot/create")[-1]
        self.assertEqual(create["body"], {"snapshot_type": "Full",
                                          "snapshot_path": "/saved-vmstate",
                                          "mem_file_path": "/saved-memory"})
        self.assertEqual(len(self.saved()), 1)
        kept = os.path.join(self.state, "fc-saved", self.saved()[0])
        self.assertEqual(sorted(os.listdir(kept)),
                         ["memory", "meta.json", "rootfs.ext4", "vmstate"])
        with open(os.path.join(kept, "meta.json")) as f:
            meta = json.load(f)
        self.assertEqual((meta["firecracker"], meta["memMib"], meta["fork"]),
                         ("1.16.1", 128, False))
        st, _, body = self.d.post("/exec/h1/resume")
        self.assertEqual((st, body.get("state")), (200, "ready"), body)
        load = self.requests("/snapshot/load")
        self.assertEqual(len(load), loads + 1)
        self.assertTrue(load[-1]["body"]["resume_vm"])
        self.assertEqual(self.run_ok(self.d, "h1", "cat file"), "kept\n")
        # The save was the sandbox's: it is gone once the VM runs from it.
        self.assertEqual(self.saved(), [])
        self.assertEqual([r for r in self.requests() if r["errors"]], [])

    def test_fork_and_snapshot_start_new_vms_from_a_save(self):
        st, _, body = self.d.post("/exec/", {"id": "f1"})
        self.assertEqual(st, 201, body)
        self.run_ok(self.d, "f1", "echo parent > file")
        st, _, body = self.d.post("/exec/f1/fork", {"count": 2}, timeout=120)
        self.assertEqual(st, 201, body)
        # The parent was paused for the save and runs on.
        self.assertEqual([r["body"]["state"] for r in self.requests("/vm")][-2:],
                         ["Paused", "Resumed"])
        for f in body["sessions"]:
            self.assertEqual(self.run_ok(self.d, f["id"], "cat file"), "parent\n")
        self.assertEqual(self.saved(), [])
        self.run_ok(self.d, "f1", "echo later > file")
        st, _, snap = self.d.post("/exec/f1/snapshot", {"name": "fc-snap"})
        self.assertEqual(st, 201, snap)
        self.assertEqual((snap["driver"], snap["processesKept"]), ("firecracker", True), snap)
        self.assertGreater(snap["sizeBytes"], 0)
        st, _, made = self.d.post("/exec/", {"snapshot": "fc-snap"}, timeout=120)
        self.assertEqual(st, 201, made)
        self.assertEqual(self.run_ok(self.d, made["id"], "cat file"), "later\n")
        self.assertEqual(len(self.saved()), 1)
        st, _, body = self.d.delete("/snapshots/fc-snap")
        self.assertEqual(st, 200, body)
        harness.wait_until(lambda: not self.saved(), 30, what="the save freed")
        self.assertEqual([r for r in self.requests() if r["errors"]], [])

    def test_a_restart_keeps_hibernated_vms_and_snapshots_and_sweeps_the_rest(self):
        for sid in ("r1", "r2"):
            st, _, body = self.d.post("/exec/", {"id": sid})
            self.assertEqual(st, 201, body)
            self.run_ok(self.d, sid, f"echo {sid} > file")
        st, _, body = self.d.post("/exec/r1/pause", {"mode": "hibernate"})
        self.assertEqual(st, 200, body)
        st, _, body = self.d.post("/exec/r2/snapshot", {"name": "kept"})
        self.assertEqual(st, 201, body)
        self.d.stop()
        orphan = os.path.join(self.state, "fc-saved", "sb-0rphan000000")
        os.makedirs(orphan)
        half = os.path.join(self.state, "fc-saved", ".tmp-sb-half00000000")
        os.makedirs(half)
        d = self.start(self.state)
        d.api_key = self.d.api_key  # the keys are the state directory's
        self.assertFalse(os.path.exists(orphan) or os.path.exists(half))
        self.assertEqual(len(self.saved()), 2)
        st, _, body = d.post("/exec/r1/resume")
        self.assertEqual(st, 200, body)
        self.assertEqual(self.run_ok(d, "r1", "cat file"), "r1\n")
        st, _, made = d.post("/exec/", {"snapshot": "kept"}, timeout=120)
        self.assertEqual(st, 201, made)
        self.assertEqual(self.run_ok(d, made["id"], "cat file"), "r2\n")


def empty_artifacts(tmp):
    """An artifacts directory in tmp with an empty kernel and an empty base template: enough
    for the driver to get as far as preparing it."""
    artifacts = os.path.join(tmp, "a")
    tdir = os.path.join(artifacts, "templates", "base")
    os.makedirs(tdir)
    open(os.path.join(artifacts, "vmlinux"), "wb").close()
    open(os.path.join(tdir, "rootfs.ext4"), "wb").close()
    with open(os.path.join(tdir, "template.json"), "w") as f:
        json.dump({"name": "base"}, f)
    return artifacts


class FirecrackerLimitsTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        require_spec()

    def test_socket_path_too_long_is_a_clear_error(self):
        tmp = tempfile.mkdtemp(prefix="fc-long-")
        self.addCleanup(shutil.rmtree, tmp, True)
        artifacts = empty_artifacts(tmp)
        d = harness.Daemon(env={
            "SANDBOX_DRIVER": "firecracker",
            "FIRECRACKER_KVM_CHECK": "false",  # the fake needs no KVM
            "FIRECRACKER_BIN": os.path.join(HERE, "fake_firecracker.py"),
            "FIRECRACKER_JAILER_BIN": os.path.join(HERE, "fake_jailer.py"),
            "FIRECRACKER_JAIL_BASE": os.path.join(tmp, "j" * 90),
            "FIRECRACKER_ARTIFACTS_DIR": artifacts,
            "SANDBOX_DEFAULT_TEMPLATE": "base",
            "SANDBOX_WARM_POOL": "0",
            "FAKE_FC_AGENT": AGENT_HOST,
        }, driver_name="firecracker")
        d.start()
        self.addCleanup(d.stop)
        st, _, body = d.post("/exec/x/execute", {"command": "true"})
        self.assertGreaterEqual(st, 500)
        self.assertIn("too long", body["error"])

    def test_the_start_checks_kvm_unless_told_not_to(self):
        """Chosen by name, the driver refuses to start without a KVM that can create a VM,
        naming /dev/kvm; FIRECRACKER_KVM_CHECK=false (as every other test here sets it)
        lets it start on the fake."""
        tmp = tempfile.mkdtemp(prefix="fc-kvm-")
        self.addCleanup(shutil.rmtree, tmp, True)
        env = {
            "SANDBOX_DRIVER": "firecracker",
            "FIRECRACKER_BIN": os.path.join(HERE, "fake_firecracker.py"),
            "FIRECRACKER_JAILER_BIN": os.path.join(HERE, "fake_jailer.py"),
            "FIRECRACKER_JAIL_BASE": os.path.join(tmp, "j"),
            "FIRECRACKER_ARTIFACTS_DIR": empty_artifacts(tmp),
            "SANDBOX_WARM_POOL": "0",
        }
        d = harness.Daemon(env=env, driver_name="firecracker")
        try:
            kvm = open("/dev/kvm", "rb+")
            kvm.close()
            usable = True
        except OSError:
            usable = False
        if usable:
            d.start()  # a machine with KVM: the check passes (a nested KVM creates VMs too)
            d.stop()
        else:
            with self.assertRaises(AssertionError) as cm:
                d.start()
            self.assertIn("/dev/kvm is not usable", str(cm.exception))
            # Refused as expected: its log is in the assertion, its directory goes.
            shutil.rmtree(d.tmp, ignore_errors=True)
        d = harness.Daemon(env=dict(env, FIRECRACKER_KVM_CHECK="false"),
                           driver_name="firecracker")
        d.start()
        self.addCleanup(d.stop)
        st, _, body = d.get("/health")
        self.assertEqual(body["driver"], "firecracker", body)


class HangingVersionTest(unittest.TestCase):
    """A `firecracker --version` that never answers fails the template's preparation within
    the driver's timeout, saying so, instead of hanging every creation."""

    def test_a_hanging_version_probe_fails_in_time(self):
        tmp = tempfile.mkdtemp(prefix="fc-hang-")
        self.addCleanup(shutil.rmtree, tmp, True)
        artifacts = empty_artifacts(tmp)
        hanging = os.path.join(tmp, "firecracker")
        with open(hanging, "w") as f:
            f.write("#!/bin/sh\n[ \"$1\" = --version ] && exec sleep 600\n"
                    f"exec {os.path.join(HERE, 'fake_firecracker.py')} \"$@\"\n")
        os.chmod(hanging, 0o755)
        d = harness.Daemon(env={
            "SANDBOX_DRIVER": "firecracker",
            "FIRECRACKER_KVM_CHECK": "false",  # the fake needs no KVM
            "FIRECRACKER_BIN": hanging,
            "FIRECRACKER_JAILER_BIN": os.path.join(HERE, "fake_jailer.py"),
            "FIRECRACKER_JAIL_BASE": os.path.join(tmp, "j"),
            "FIRECRACKER_ARTIFACTS_DIR": artifacts,
            "SANDBOX_DEFAULT_TEMPLATE": "base",
            "SANDBOX_WARM_POOL": "0",
        }, driver_name="firecracker")
        d.start()
        self.addCleanup(d.stop)
        t0 = time.monotonic()
        st, _, body = d.post("/exec/x/execute", {"command": "true"}, timeout=60)
        took = time.monotonic() - t0
        self.assertGreaterEqual(st, 500, body)
        self.assertIn("--version` did not answer", body["error"])
        self.assertLess(took, 30, "the version probe has no timeout")


class RealFirecrackerTest(unittest.TestCase):
    def test_real_firecracker(self):
        # No package ships Firecracker, and KVM is the machine's: the two skips that stay.
        missing = [b for b in ("firecracker", "jailer") if not shutil.which(b)]
        if missing:
            self.skipTest("not installed here: " + ", ".join(missing) +
                          " (the integration suite runs with DRIVER=firecracker where they are)")
        if not os.access("/dev/kvm", os.R_OK | os.W_OK):
            self.skipTest("no usable /dev/kvm")
        import subprocess
        env = dict(os.environ, DRIVER="firecracker")
        p = subprocess.run([os.path.join(ROOT, "tests", "integration", "run.sh")], env=env,
                           capture_output=True, text=True, timeout=1800)
        self.assertEqual(p.returncode, 0, p.stdout[-4000:])


if __name__ == "__main__":
    unittest.main()
