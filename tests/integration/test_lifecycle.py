"""Session lifetime and what the daemon leaves on the host: the idle reaper, DELETE, shutdown,
and a restart after the daemon was killed."""

import http.client
import json
import os
import random
import secrets
import shutil
import signal
import socket
import subprocess
import tempfile
import threading
import time
import unittest

import harness
import helpers_host as host
import helpers_exec
from helpers_exec import (BASE_ENV, DaemonTestCase, joined, new_session_id, sandbox_of,
                          start_daemon, wait_until)
from runner import tag


def sandboxes_of(daemon):
    return host.sandbox_ids(daemon.stderr())


def footprint_of(daemon, ids, descendants=True):
    """What sandboxes hold now (and, with descendants, every process below the daemon),
    recorded while they run."""
    fp = host.Footprint()
    for sandbox in ids:
        fp.record_sandbox(sandbox)
    if descendants:
        fp.record_descendants(daemon.proc.pid)
    return fp


def wait_for_warm_pool(daemon, n=1, timeout=30, template=None):
    """Until the pool of the template (default: the tests' default) holds n sandboxes: every
    template has a pool, and another's does not serve a session of this one."""
    template = template or helpers_exec.TEMPLATE
    wait_until(lambda: daemon.get("/health", timeout=10)[2].get("warmPools", {}).get(
        template, 0) >= n, timeout, what=f"{n} pooled sandbox(es) of {template}")


class IdleReaperTest(DaemonTestCase):
    daemon_env = {"SESSION_IDLE_TIMEOUT": "2", "SANDBOX_WARM_POOL": "0"}

    def create(self, **fields):
        sid = self.session()
        status, _, body = self.d.post("/exec/", body={"id": sid, **fields})
        self.assertEqual(status, 201, body)
        return sid

    def test_idle_session_is_reaped(self):
        sid = self.create()
        self.assertEqual(self.listed_sessions()[sid]["idleTimeout"], 2)
        t0 = time.monotonic()
        wait_until(lambda: sid not in self.listed_sessions(), 10, interval=0.1,
                   what="the idle session to be reaped")
        elapsed = time.monotonic() - t0
        self.assertGreaterEqual(elapsed, 1.5, "reaped before its idle timeout")
        status, _, body = self.d.get(f"/exec/{sid}/files")
        self.assertEqual(status, 404, body)

    @tag("driver")
    def test_idle_sandbox_is_removed_with_its_session(self):
        sid = self.create()
        # A process that outlives the test unless the reaper's teardown kills it.
        self.run_ok(sid, "sleep 300 > /dev/null 2>&1 &")
        sandbox = sandbox_of(self.d, sid)
        self.assertTrue(sandbox, "no sandbox id logged for the session")
        fp = host.Footprint()
        fp.record_sandbox(sandbox)
        wait_until(lambda: sid not in self.listed_sessions(), 10,
                   what="the idle session to be reaped")
        self.assertEqual(host.wait_all_gone(fp, [sandbox], timeout=20), [])

    def reaped_witness(self):
        """Waits until a session created now, and left alone, is reaped: by then every
        session whose last request came before it has been idle past its timeout too."""
        witness = self.create()
        wait_until(lambda: witness not in self.listed_sessions(), 30,
                   what="an idle session made for comparison to be reaped")

    def test_running_command_keeps_the_session_alive(self):
        sid = self.create()
        # The command runs until the test cancels it.
        with self.stream_execute(sid, "sleep 600", http_timeout=60) as s:
            lines = s.ndjson()
            start = next(lines)
            self.assertEqual(start["type"], "start")
            self.reaped_witness()
            listed = self.listed_sessions()
            self.assertIn(sid, listed, "reaped while a command ran")
            self.assertEqual(listed[sid]["running"], 1)
            status, _, body = self.d.post(f"/exec/{sid}/cancel",
                                          body={"execId": start["execId"]})
            self.assertEqual(status, 202, body)
            rest = list(lines)
        self.assertTrue(rest[-1].get("cancelled"), rest)
        # Once it is over, the idle clock runs again.
        self.assertIn(sid, self.listed_sessions())
        wait_until(lambda: sid not in self.listed_sessions(), 10,
                   what="the session to be reaped after its command ended")

    def test_activity_keeps_the_session_alive(self):
        sid = self.create()
        self.run_ok(sid, "true")
        witness = self.create()
        deadline = time.monotonic() + 30
        # Requests a third of the idle timeout (2 s) apart, each of which resets it, until a
        # session left alone meanwhile was reaped: the pause is the pacing of that activity.
        while witness in self.listed_sessions():
            self.assertLess(time.monotonic(), deadline,
                            "an idle session made for comparison was never reaped")
            time.sleep(0.6)
            self.run_ok(sid, "true")
        self.assertIn(sid, self.listed_sessions())

    def test_per_session_idle_timeout(self):
        long_lived = self.create(idleTimeout=60)
        short_lived = self.create()
        wait_until(lambda: short_lived not in self.listed_sessions(), 10,
                   what="the session with the default timeout to be reaped")
        self.assertIn(long_lived, self.listed_sessions())


@tag("driver")
class SilentAgentTest(DaemonTestCase):
    """A sandbox whose agent stops answering (here: every process of the sandbox stopped,
    which for a VM is its VMM) fails its session within the liveness deadline, even while a
    command with no timeout of its own waits on it."""

    daemon_env = {
        "SANDBOX_WARM_POOL": "0",
        "SANDBOX_PING_INTERVAL_MS": "200",
        "SANDBOX_PING_TIMEOUT_MS": "2000",
    }

    def stop_sandbox(self, sandbox):
        pids = host.cgroup_pids(host.cgroup_dirs(sandbox))
        self.assertTrue(pids, f"no processes in the cgroups of sandbox {sandbox}")
        self.addCleanup(self.signal_all, pids, signal.SIGCONT)
        self.signal_all(pids, signal.SIGSTOP)

    @staticmethod
    def signal_all(pids, sig):
        for pid in pids:
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                pass

    def test_a_stopped_sandbox_fails_its_session_and_its_command(self):
        sid = self.session()
        self.run_ok(sid, "true")
        sandbox = sandbox_of(self.d, sid)
        self.assertIsNotNone(sandbox)
        body = {"command": "sleep", "args": ["600"]}
        headers = {"Accept": "application/x-ndjson"}
        with self.d.stream("POST", f"/exec/{sid}/execute", body=body, headers=headers,
                           timeout=60) as s:
            lines = s.ndjson()
            self.assertEqual(next(lines)["type"], "start")
            self.stop_sandbox(sandbox)
            rest = list(lines)
        self.assertTrue(rest, "the stream ended with no result")
        self.assertEqual(rest[-1]["type"], "error", rest)
        self.assertIn("stopped answering", rest[-1]["error"])
        # The session reports why once, then it is gone with its sandbox.
        status, body = self.execute(sid, "true")
        self.assertGreaterEqual(status, 500, body)
        self.assertIn("stopped answering", body["error"])
        wait_until(lambda: not host.cgroup_dirs(sandbox), 30, what="the sandbox's cgroups gone")

    def test_a_stopped_idle_sandbox_fails_its_session(self):
        sid = self.session()
        self.run_ok(sid, "true")
        sandbox = sandbox_of(self.d, sid)
        self.stop_sandbox(sandbox)
        wait_until(lambda: self.listed_sessions().get(sid, {}).get("state") == "failed"
                   or not host.cgroup_dirs(sandbox), 30, what="the session failed")
        status, body = self.execute(sid, "true")
        self.assertGreaterEqual(status, 500, body)
        self.assertIn("stopped answering", body["error"])


class CleanupTest(unittest.TestCase):
    @tag("driver")
    def test_delete_and_shutdown_leave_nothing_behind(self):
        d = start_daemon({"SANDBOX_WARM_POOL": "1"})
        self.addCleanup(d.stop, check=False)
        a, b = new_session_id("cleanup-a"), new_session_id("cleanup-b")
        # Processes that outlive the test unless DELETE and shutdown kill them.
        for sid in (a, b):
            status, _, body = d.post(f"/exec/{sid}/execute",
                                     body={"command": "sleep 300 > /dev/null 2>&1 & echo $!"})
            self.assertEqual(status, 200, body)
            self.assertEqual(body["exitCode"], 0, body)
        wait_for_warm_pool(d)

        # A command still running when the daemon is told to stop.
        stream = d.stream("POST", f"/exec/{b}/execute", body={"command": "sleep 300"},
                          headers={"Accept": "application/x-ndjson"}, timeout=60)
        self.addCleanup(stream.close)
        self.assertEqual(next(stream.ndjson())["type"], "start")

        ids = sandboxes_of(d)
        self.assertGreaterEqual(len(ids), 3, f"sandbox ids in the log: {ids}")
        sandbox_a = sandbox_of(d, a)
        self.assertIn(sandbox_a, ids)
        # A sandbox's own processes are found through its cgroups (where its driver makes
        # them); every driver's processes are below the daemon.
        fp_a = footprint_of(d, [sandbox_a], descendants=False)
        if fp_a.cgroups:
            self.assertTrue(fp_a.procs, f"no process found in the cgroups of {sandbox_a}")
        fp_all = footprint_of(d, ids)
        self.assertTrue(fp_all.procs, "no process of the daemon's sandboxes was found")

        # DELETE removes one session's sandbox entirely, and only it.
        status, _, body = d.delete(f"/exec/{a}")
        self.assertEqual(status, 200, body)
        self.assertEqual(host.wait_all_gone(fp_a, [sandbox_a], timeout=20), [])
        others = [c for c in fp_all.cgroups if sandbox_a not in c]
        self.assertTrue(all(os.path.isdir(c) for c in others),
                        "DELETE of one session removed another's cgroup")

        # SIGTERM: exit status 0 and nothing left of any sandbox.
        d.stop(timeout=60)
        left = host.wait_all_gone(fp_all, ids, words=[d.tmp], timeout=20)
        self.assertEqual(left, [])
        stream.close()


class CrashRecoveryTest(unittest.TestCase):
    def make_decoys(self, parents):
        """A process and a cgroup that look like ours but were never the daemon's."""
        dirs = []
        name = f"sb-decoy{secrets.token_hex(3)}"
        for parent in parents:
            path = os.path.join(parent, name)
            os.mkdir(path)
            self.addCleanup(_rmdir_retrying, path)  # runs after the decoy process is gone
            dirs.append(path)
        decoy = subprocess.Popen(["sleep", "600"], start_new_session=True,
                                 stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                 stderr=subprocess.DEVNULL)

        def stop_decoy():
            if decoy.poll() is None:
                decoy.kill()
            decoy.wait(10)

        self.addCleanup(stop_decoy)
        for path in dirs:
            with open(os.path.join(path, "cgroup.procs"), "w", encoding="ascii") as f:
                f.write(str(decoy.pid))
        return decoy, dirs

    @tag("driver")
    def test_restart_after_sigkill_removes_only_its_own_sandboxes(self):
        first = start_daemon({"SANDBOX_WARM_POOL": "1"})
        self.addCleanup(first.kill)
        self.addCleanup(shutil.rmtree, first.tmp, True)
        sid = new_session_id("crash")
        # A process that outlives the killed daemon, for the restarted one to remove.
        status, _, body = first.post(f"/exec/{sid}/execute",
                                     body={"command": "sleep 300 > /dev/null 2>&1 &"})
        self.assertEqual(status, 200, body)
        wait_for_warm_pool(first)
        ids = sandboxes_of(first)
        fp = footprint_of(first, ids)
        # Every driver puts its sandboxes in cgroups of their own.
        self.assertTrue(fp.cgroups, f"driver {first.driver} made no cgroup under "
                        f"{host.CGROUP_ROOT}/*/{host.CGROUP_PARENT}")
        decoy, decoy_dirs = self.make_decoys(sorted({os.path.dirname(c) for c in fp.cgroups}))

        first.proc.send_signal(signal.SIGKILL)
        first.proc.wait(10)
        first.kill()
        self.assertTrue(any(os.path.isdir(c) for c in fp.cgroups),
                        "the sandboxes vanished with the daemon: the restart has nothing to do")

        second = start_daemon({"SANDBOX_WARM_POOL": "0",
                               "SANDBOX_STATE_DIR": first.state_dir,
                               "SANDBOX_RUN_DIR": first.run_dir})
        self.addCleanup(second.stop, check=False)
        # The cleanup of the previous run is done before the daemon listens.
        left = host.wait_all_gone(fp, ids, words=[first.tmp], timeout=15)
        self.assertEqual(left, [], "what the killed daemon made survived the restart")
        self.assertIsNone(decoy.poll(), "the restarted daemon killed a process not its own")
        for path in decoy_dirs:
            self.assertTrue(os.path.isdir(path), f"the restarted daemon removed {path}")
        self.assertIn(str(decoy.pid), _read(os.path.join(decoy_dirs[0], "cgroup.procs")))
        status, _, body = second.get("/health")
        self.assertEqual(status, 200, body)
        second.stop()
        self.assertIsNone(decoy.poll(), "the daemon's shutdown killed a process not its own")
        for path in decoy_dirs:
            self.assertTrue(os.path.isdir(path), f"the daemon's shutdown removed {path}")


class DaemonDeathTest(unittest.TestCase):
    @tag("driver")
    def test_sandboxes_end_with_a_daemon_killed_by_sigkill(self):
        """The documented stop policy: sessions live no longer than their daemon, even one
        killed with SIGKILL (a VM's QEMU as well as a jail's processes), without waiting for
        the next start."""
        d = start_daemon({"SANDBOX_WARM_POOL": "0"})
        self.addCleanup(d.kill)
        self.addCleanup(shutil.rmtree, d.tmp, True)
        sid = new_session_id("death")
        status, _, body = d.post(f"/exec/{sid}/execute",
                                 body={"command": "sleep 300 > /dev/null 2>&1 &"})
        self.assertEqual(status, 200, body)
        ids = sandboxes_of(d)
        fp = footprint_of(d, ids)
        self.assertTrue(fp.procs, "no process recorded for the sandbox")
        d.proc.send_signal(signal.SIGKILL)
        d.proc.wait(10)
        deadline = time.monotonic() + 20
        while host.alive(fp.procs) and time.monotonic() < deadline:
            time.sleep(0.2)
        left = [f"{pid} ({host._comm(pid)})" for pid in sorted(host.alive(fp.procs))]
        self.assertEqual(left, [], "processes outlived the daemon killed with SIGKILL")
        # What is left on the host (cgroups, records) is the next start's to remove.
        second = start_daemon({"SANDBOX_WARM_POOL": "0", "SANDBOX_STATE_DIR": d.state_dir,
                               "SANDBOX_RUN_DIR": d.run_dir})
        self.addCleanup(second.stop, check=False)
        self.assertEqual(host.wait_all_gone(fp, ids, words=[d.tmp], timeout=15), [])
        second.stop()


class CreationCrashTest(unittest.TestCase):
    """kill -9 while sandboxes are being made (by requests and by the warm pool): every
    sandbox the daemon began is recorded before it exists, so the restart removes it."""
    ROUNDS = 4
    BURST = 4

    def leftovers(self, daemon, ids):
        left = []
        for sandbox in ids:
            left += host.cgroup_dirs(sandbox)
            run = os.path.join(daemon.run_dir, "qemu", sandbox)
            if os.path.exists(run):
                left.append(run)
        return left

    def crash_amid(self, first, requests, started, what):
        """Sends `requests` (method, path, body) at once, kills the daemon with SIGKILL at a
        random point after its log shows `started`, restarts it on the same state, stops it
        cleanly, and checks that nothing is left of any sandbox the first one named."""
        def send(method, path, body):
            try:
                first.request(method, path, body=body, timeout=60)
            except OSError:
                pass  # the daemon was killed under the request: that is the point

        burst = [threading.Thread(target=send, args=r, daemon=True) for r in requests]
        for t in burst:
            t.start()
        wait_until(lambda: started in first.stderr(), 60, what=what)
        # A random point of the window, not a synchronisation.
        time.sleep(random.uniform(0, 0.03))
        first.proc.send_signal(signal.SIGKILL)
        first.proc.wait(10)
        first.kill()
        for t in burst:
            t.join(60)
        ids = host.sandbox_ids(first.stderr())
        self.assertTrue(ids, "the daemon named no sandbox before it was killed")

        second = start_daemon({"SANDBOX_WARM_POOL": "0",
                               "SANDBOX_STATE_DIR": first.state_dir,
                               "SANDBOX_RUN_DIR": first.run_dir})
        self.addCleanup(second.stop, check=False)
        status, _, body = second.get("/health")
        self.assertEqual(status, 200, body)
        second.stop()
        self.assertEqual(self.leftovers(first, ids), [],
                         f"sandboxes the killed daemon had survived its restart ({ids})")

    def daemon(self, pool):
        first = start_daemon({"SANDBOX_WARM_POOL": str(pool)})
        self.addCleanup(shutil.rmtree, first.tmp, True)
        self.addCleanup(first.kill)
        if not self.decoy_dirs:
            # Once the daemon made its cgroup parents.
            self.decoy, self.decoy_dirs = CrashRecoveryTest.make_decoys(
                self, host.cgroup_parents())
        return first

    def check_decoy(self):
        self.assertIsNone(self.decoy.poll(), "a restarted daemon killed a process not its own")
        for path in self.decoy_dirs:
            self.assertTrue(os.path.isdir(path), f"a restarted daemon removed {path}")

    @tag("driver")
    def test_kill_during_destruction_leaves_nothing(self):
        self.decoy, self.decoy_dirs = None, []
        for i in range(2):
            with self.subTest(round=i):
                first = self.daemon(pool=0)
                sids = [new_session_id("doomed") for _ in range(self.BURST)]
                for sid in sids:
                    status, _, body = first.post("/exec/", body={"id": sid})
                    self.assertEqual(status, 201, body)
                self.crash_amid(first, [("DELETE", f"/exec/{sid}", None) for sid in sids],
                                "destroying session", "a session being destroyed")
        self.check_decoy()

    @tag("driver")
    def test_kill_during_creation_leaves_nothing(self):
        self.decoy, self.decoy_dirs = None, []
        for i in range(self.ROUNDS):
            pool = i % 2 * 2
            with self.subTest(round=i, pool=pool):
                first = self.daemon(pool)
                self.crash_amid(first, [("POST", "/exec/", {"id": new_session_id("burst")})
                                        for _ in range(self.BURST)],
                                "creating (template", "a sandbox being made")
        self.check_decoy()

class FullStateDiskTest(unittest.TestCase):
    """A state directory that cannot be written: no sandbox is made that is not recorded;
    creations fail with 503 and come back with the space; what exists keeps working."""

    def fill(self, directory):
        """Fills the file system of `directory`; returns the filler's path."""
        path = os.path.join(directory, "filler")
        with open(path, "wb") as f:
            try:
                while True:
                    f.write(b"\0" * 65536)
                    f.flush()
            except OSError:
                pass
        return path

    @tag("driver")
    def test_no_record_no_sandbox(self):
        tmp = tempfile.mkdtemp(prefix="sandbox-fulldisk-")
        self.addCleanup(shutil.rmtree, tmp, True)
        state = os.path.join(tmp, "state")
        os.mkdir(state)
        subprocess.run(["mount", "-t", "tmpfs", "-o", "size=8m", "tmpfs", state], check=True)
        self.addCleanup(subprocess.run, ["umount", "-l", state], check=False)
        # tmpfs storage: the disks' own room on the state filesystem (docs/storage.md) would
        # refuse them on 8 MiB first; the records are what this is about.
        first = start_daemon({"SANDBOX_WARM_POOL": "0", "SANDBOX_STATE_DIR": state,
                              "SANDBOX_STORAGE": "tmpfs"})
        self.addCleanup(shutil.rmtree, first.tmp, True)
        self.addCleanup(first.kill)
        before = new_session_id("before")
        status, _, body = first.post("/exec/", body={"id": before})
        self.assertEqual(status, 201, body)

        filler = self.fill(state)
        refused = None
        for i in range(200):
            status, _, body = first.post("/exec/", body={"id": new_session_id(f"full{i}")})
            self.assertIn(status, (201, 503), body)
            if status == 503:
                refused = body
                break
        self.assertIsNotNone(refused, "creations went on with the state directory full")
        self.assertIn("cannot record", refused.get("error", ""))
        # What exists keeps working.
        status, _, body = first.post(f"/exec/{before}/execute", body={"command": "echo ok"})
        self.assertEqual(status, 200, body)
        self.assertEqual(body.get("exitCode"), 0, body)

        # Space again: creations come back by themselves.
        os.unlink(filler)
        status, _, body = first.post("/exec/", body={"id": new_session_id("after")})
        self.assertEqual(status, 201, body)

        # Whatever was made is recorded: a crash now leaves nothing after the restart.
        self.fill(state)
        for i in range(5):
            first.post("/exec/", body={"id": new_session_id(f"crash{i}")})
        first.proc.send_signal(signal.SIGKILL)
        first.proc.wait(10)
        first.kill()
        ids = host.sandbox_ids(first.stderr())
        os.unlink(os.path.join(state, "filler"))
        second = start_daemon({"SANDBOX_WARM_POOL": "0", "SANDBOX_STATE_DIR": state,
                               "SANDBOX_RUN_DIR": first.run_dir, "SANDBOX_STORAGE": "tmpfs"})
        self.addCleanup(second.stop, check=False)
        second.stop()
        left = [d for sandbox in ids for d in host.cgroup_dirs(sandbox)]
        self.assertEqual(left, [], "a sandbox made while the state disk was full survived")


class ShutdownGraceTest(unittest.TestCase):
    """SIGTERM: from that moment nothing new starts, on any connection; what runs may finish
    within the grace; what is still running then ends with 503 "the server is shutting
    down", in a reply and in a stream alike."""

    def test_shutdown_grace(self):
        d = start_daemon({"SANDBOX_WARM_POOL": "0", "SANDBOX_SHUTDOWN_GRACE_MS": "3000"})
        self.addCleanup(shutil.rmtree, d.tmp, True)
        self.addCleanup(d.kill)
        sid = new_session_id("grace")
        status, _, body = d.post(f"/exec/{sid}/execute", body={"command": "true"})
        self.assertEqual(status, 200, body)
        # A keep-alive connection opened before the signal.
        conn = http.client.HTTPConnection(d.host, d.port, timeout=30)
        self.addCleanup(conn.close)
        conn.request("GET", "/health")
        conn.getresponse().read()

        results = {}

        def run(name, path, body, headers=None):
            c = http.client.HTTPConnection(d.host, d.port, timeout=60)
            c.request("POST", path, body=json.dumps(body),
                      headers={"Content-Type": "application/json", **(headers or {})})
            r = c.getresponse()
            results[name] = (r.status, r.read().decode())
            c.close()

        plain = threading.Thread(target=run, args=(
            "plain", f"/exec/{sid}/execute", {"command": "sleep 60"}), daemon=True)
        streamed = threading.Thread(target=run, args=(
            "stream", f"/exec/{sid}/execute?format=ndjson", {"command": "sleep 60"}),
            daemon=True)
        plain.start()
        streamed.start()
        wait_until(lambda: _running(d, sid) >= 2, 30, what="both commands running")

        d.proc.send_signal(signal.SIGTERM)
        wait_until(lambda: not _accepts(d), 10, what="the shutdown grace to begin")
        conn.request("POST", "/exec/", body=json.dumps({"id": new_session_id("late")}),
                     headers={"Content-Type": "application/json"})
        r = conn.getresponse()
        late = json.loads(r.read())
        self.assertEqual(r.status, 503, late)
        self.assertEqual(late.get("error"), "the server is shutting down")
        conn.request("POST", f"/exec/{sid}/execute", body=json.dumps({"command": "true"}),
                     headers={"Content-Type": "application/json"})
        r = conn.getresponse()
        late = json.loads(r.read())
        self.assertEqual(r.status, 503, late)
        self.assertEqual(late.get("error"), "the server is shutting down")

        plain.join(60)
        streamed.join(60)
        status, text = results["plain"]
        self.assertEqual(status, 503, text)
        self.assertEqual(json.loads(text).get("error"), "the server is shutting down")
        status, text = results["stream"]
        self.assertEqual(status, 200, text)
        last = json.loads(text.strip().splitlines()[-1])
        self.assertEqual(last.get("type"), "error", last)
        self.assertEqual(last.get("status"), 503, last)
        self.assertEqual(last.get("error"), "the server is shutting down")
        self.assertEqual(d.proc.wait(30), 0)


class TerminalInterruptTest(unittest.TestCase):
    """A ^C in the terminal of `make run` is SIGINT to its whole foreground process group:
    the sandboxes are not in it, so the daemon alone gets it and its commands keep their
    grace."""

    @tag("driver")
    def test_sigint_to_the_daemons_process_group_leaves_the_grace(self):
        real = harness.sandboxd_path()
        # setsid(1) in a child that is no group leader: it execs the daemon, which then
        # leads a process group (and session) of its own, as a shell's foreground job does.
        d = harness.Daemon(env={**BASE_ENV, "SANDBOX_WARM_POOL": "0",
                                "SANDBOX_SHUTDOWN_GRACE_MS": "20000"},
                           binary=shutil.which("setsid"), args=[real])
        d.start()
        self.addCleanup(shutil.rmtree, d.tmp, True)
        self.addCleanup(d.kill)
        sid = new_session_id("ctrlc")
        status, _, body = d.post(f"/exec/{sid}/execute", body={"command": "true"})
        self.assertEqual(status, 200, body)
        results = {}

        def run():
            results["r"] = d.post(f"/exec/{sid}/execute",
                                  body={"command": "sleep 3; echo finished"}, timeout=60)

        t = threading.Thread(target=run, daemon=True)
        t.start()
        wait_until(lambda: _running(d, sid) >= 1, 30, what="the command running")
        self.assertEqual(os.getpgid(d.proc.pid), d.proc.pid)
        os.killpg(d.proc.pid, signal.SIGINT)
        t.join(60)
        status, _, body = results["r"]
        self.assertEqual(status, 200, body)
        self.assertEqual(body.get("exitCode"), 0, body)
        self.assertIn("finished", joined(body["output"]), body)
        self.assertEqual(d.proc.wait(30), 0)


class SecondSignalTest(unittest.TestCase):
    @tag("driver")
    def test_a_second_signal_exits_at_once_and_the_next_start_cleans(self):
        first = start_daemon({"SANDBOX_WARM_POOL": "1", "SANDBOX_SHUTDOWN_GRACE_MS": "60000"})
        self.addCleanup(shutil.rmtree, first.tmp, True)
        self.addCleanup(first.kill)
        sid = new_session_id("twice")
        status, _, body = first.post(f"/exec/{sid}/execute",
                                     body={"command": "sleep 300 > /dev/null 2>&1 &"})
        self.assertEqual(status, 200, body)
        wait_for_warm_pool(first)
        ids = host.sandbox_ids(first.stderr())
        first.proc.send_signal(signal.SIGTERM)
        wait_until(lambda: not _accepts(first), 10, what="the shutdown grace to begin")
        first.proc.send_signal(signal.SIGTERM)
        self.assertEqual(first.proc.wait(30), 1)
        first.kill()
        second = start_daemon({"SANDBOX_WARM_POOL": "0",
                               "SANDBOX_STATE_DIR": first.state_dir,
                               "SANDBOX_RUN_DIR": first.run_dir})
        self.addCleanup(second.stop, check=False)
        second.stop()
        left = [d for sandbox in ids for d in host.cgroup_dirs(sandbox)]
        self.assertEqual(left, [], "what the interrupted shutdown left survived the restart")


class AcceptLimitTest(unittest.TestCase):
    """At the descriptor limit accepting pauses and resumes by itself, logged once a burst
    (not once an attempt), every line of the log JSON; with room again the daemon serves."""

    def test_accept_at_the_descriptor_limit(self):
        # The daemon alone gets a low descriptor limit, soft and hard.
        d = harness.Daemon(env={**BASE_ENV, "SANDBOX_WARM_POOL": "0"},
                           binary=shutil.which("prlimit"),
                           args=("--nofile=96:96", "--", harness.sandboxd_path()))
        d.start()
        self.addCleanup(shutil.rmtree, d.tmp, True)
        self.addCleanup(d.kill)
        socks = []
        self.addCleanup(lambda: [s.close() for s in socks])
        for _ in range(200):
            try:
                socks.append(socket.create_connection((d.host, d.port), timeout=5))
            except OSError:
                break

        def pauses():
            return [l for l in d.logs() if l.get("module") == "http" and
                    "accepting paused" in l.get("msg", "")]

        wait_until(lambda: pauses(), 30, what="accepting to pause at the limit")
        # Let it retry for a while at the limit (pacing: the point is what it logs meanwhile).
        time.sleep(1)
        for s in socks:
            s.close()
        socks.clear()
        wait_until(lambda: d.get("/health", timeout=5)[0] == 200, 30, what="/health again")
        lines = d.stop().splitlines()
        self.assertTrue(lines)
        bad = [l for l in lines if not _is_json_object(l)]
        self.assertEqual(bad, [], "lines of the log that are not JSON")
        logs = [json.loads(l) for l in lines]
        paused = [l for l in logs if l.get("module") == "http" and
                  "accepting paused" in l.get("msg", "")]
        self.assertEqual(len(paused), 1, "accepting's pause is logged once a burst")
        self.assertEqual([l for l in logs if l.get("module") == "libevent"], [])

def _is_json_object(line):
    try:
        return isinstance(json.loads(line), dict)
    except ValueError:
        return False


def _accepts(d):
    """Whether the daemon still accepts connections (it stops when the grace begins)."""
    try:
        socket.create_connection((d.host, d.port), timeout=2).close()
        return True
    except OSError:
        return False


def _running(d, sid):
    status, _, body = d.get("/exec")
    for s in body.get("sessions", []) if status == 200 else []:
        if s.get("id") == sid:
            return s.get("running", 0)
    return 0


def _read(path):
    with open(path, encoding="ascii") as f:
        return f.read()


def _rmdir_retrying(path, timeout=10):
    deadline = time.monotonic() + timeout
    while os.path.isdir(path):
        try:
            os.rmdir(path)
        except OSError:
            if time.monotonic() >= deadline:
                raise
            time.sleep(0.1)


if __name__ == "__main__":
    unittest.main()
