"""Hibernation (jail, disk storage): `POST /exec/:id/pause {"mode": "hibernate"}` ends the
session's processes and frees its sandbox, keeps its disk as a file of the state directory;
a resume starts a fresh agent over the same disk. Hibernated sessions survive a daemon
restart (SIGTERM or SIGKILL); frozen ones do not (test_pause.py)."""

import glob
import os
import shutil
import signal
import threading
import time
import unittest

import helpers_exec
from helpers_exec import BASE_ENV, DaemonTestCase, sandbox_of, wait_until

CG = "/sys/fs/cgroup"
HIBERNATE = {"mode": "hibernate"}


def jail_only(test):
    return unittest.skipUnless(os.environ.get("DRIVER", "jail") == "jail",
                               "hibernation is the jail driver's (disk storage)")(test)


def cgroup_exists(sandbox):
    return any(os.path.exists(f"{CG}/{c}/agent-sandbox/{sandbox}")
               for c in ("memory", "pids", "freezer", ""))


def kept_disks(state_dir):
    return glob.glob(os.path.join(state_dir, "disks", "*.hibernated"))


COUNTER = "i=0; while :; do i=$((i+1)); echo $i > c.tmp && mv c.tmp count; sleep 0.01; done"


@jail_only
class HibernateTest(DaemonTestCase):
    daemon_env = {**BASE_ENV, "SANDBOX_WARM_POOL": "0"}

    def hibernate(self, sid, expect=200):
        status, _, body = self.d.post(f"/exec/{sid}/pause", body=HIBERNATE)
        self.assertEqual(status, expect, body)
        return body

    def start_counter(self, sid):
        status, _, body = self.d.post(f"/exec/{sid}/processes",
                                      body={"command": COUNTER, "tag": "count"})
        self.assertEqual(status, 201, body)
        wait_until(lambda: self.stdout_of(sid, "cat count 2>/dev/null || echo 0").strip()
                   != "0", 30, 0.05, "the counter running")

    def test_processes_end_files_stay_and_a_resume_starts_afresh(self):
        sid = self.session()
        self.run_ok(sid, "echo kept > file && mkdir -p /tmp/t && echo tmp > /tmp/t/f")
        status, _, body = self.d.post(f"/exec/{sid}/execute",
                                      body={"command": "echo root > /usr/by-root",
                                            "user": "root"})
        self.assertEqual((status, body.get("exitCode")), (200, 0), body)
        self.start_counter(sid)
        sandbox = sandbox_of(self.d, sid)
        body = self.hibernate(sid)
        self.assertEqual(body["state"], "paused")
        self.assertEqual(body["pauseMode"], "hibernate")
        self.assertIs(body["processesKept"], False)
        self.assertIn("every process of the session was ended", body["note"])
        self.assertIn("pausedAt", body)
        # No sandbox while hibernated: no cgroup, no memory; the disk is a file.
        wait_until(lambda: not cgroup_exists(sandbox), 30, 0.1, "the sandbox gone")
        self.assertEqual(len(kept_disks(self.d.state_dir)), 1)
        listed = self.listed_sessions()[sid]
        self.assertEqual((listed["state"], listed["pauseMode"]), ("paused", "hibernate"))
        status, headers, err = self.d.post(f"/exec/{sid}/execute", body={"command": "true"})
        self.assertJsonError(status, headers, err, 409, "paused")
        status, headers, err = self.d.post(f"/exec/{sid}/pause", body=HIBERNATE)
        self.assertJsonError(status, headers, err, 409, "already (hibernated)")
        status, headers, err = self.d.post(f"/exec/{sid}/pause")
        self.assertJsonError(status, headers, err, 409, "paused")

        body = self.resume(sid)
        self.assertEqual(body["state"], "ready")
        self.assertNotIn("pauseMode", body)
        self.assertEqual(kept_disks(self.d.state_dir), [])
        resumed = [e.get("msg", "") for e in self.d.logs()
                   if e.get("msg", "").startswith(f"session {sid} resumed over its kept disk")]
        self.assertEqual(len(resumed), 1, resumed)
        self.assertNotIn(sandbox, resumed[0])
        # Its files, with their owners; the root's changes to / too.
        self.assertEqual(self.stdout_of(sid, "cat file /tmp/t/f /usr/by-root"),
                         "kept\ntmp\nroot\n")
        self.assertEqual(self.stdout_of(sid, "stat -c %u file"), "1000\n")
        self.run_ok(sid, "echo more >> file")
        # Its processes did not survive.
        status, _, procs = self.d.get(f"/exec/{sid}/processes")
        self.assertEqual(status, 200, procs)
        self.assertEqual([p for p in procs.get("processes", []) if p.get("state") == "running"],
                         [])
        before = self.stdout_of(sid, "cat count")
        time.sleep(0.3)
        self.assertEqual(self.stdout_of(sid, "cat count"), before)
        # And it can be hibernated again.
        self.hibernate(sid)
        self.resume(sid)
        self.assertEqual(self.stdout_of(sid, "cat file"), "kept\nmore\n")

    def resume(self, sid, expect=200):
        status, _, body = self.d.post(f"/exec/{sid}/resume")
        self.assertEqual(status, expect, body)
        return body

    def test_a_frozen_session_can_be_hibernated(self):
        sid = self.session()
        self.run_ok(sid, "echo kept > file")
        status, _, body = self.d.post(f"/exec/{sid}/pause", body={"mode": "freeze"})
        self.assertEqual((status, body.get("pauseMode")), (200, "freeze"), body)
        self.assertIs(body["processesKept"], True)
        self.assertEqual(self.hibernate(sid)["pauseMode"], "hibernate")
        self.resume(sid)
        self.assertEqual(self.stdout_of(sid, "cat file"), "kept\n")

    def test_refusals(self):
        status, headers, err = self.d.post("/exec/no-such-session/pause", body=HIBERNATE)
        self.assertJsonError(status, headers, err, 404)
        sid = self.session()
        self.run_ok(sid, "true")
        for bad in ("sleep", "", 1, True, ["hibernate"], {"mode": "hibernate"}):
            status, headers, err = self.d.post(f"/exec/{sid}/pause", body={"mode": bad})
            self.assertJsonError(status, headers, err, 400, "mode")
        status, headers, err = self.d.post(f"/exec/{sid}/pause", body=b"{not json",
                                           headers={"Content-Type": "application/json"})
        self.assertEqual(status, 400, err)
        # tmpfs storage: no disk to keep.
        status, _, body = self.d.post("/exec", body={"storage": "tmpfs"})
        self.assertEqual(status, 201, body)
        self.addCleanup(self.d.delete, f"/exec/{body['id']}")
        status, headers, err = self.d.post(f"/exec/{body['id']}/pause", body=HIBERNATE)
        self.assertJsonError(status, headers, err, 400, "disk")
        # An operation in flight.
        with self.stream_execute(sid, "sleep 5") as stream:
            wait_until(lambda: self.listed_sessions()[sid]["running"] > 0, 30, 0.05,
                       "the command running")
            status, headers, err = self.d.post(f"/exec/{sid}/pause", body=HIBERNATE)
            self.assertJsonError(status, headers, err, 409, "in flight")
            stream.close()

    def test_destroying_a_hibernated_session_frees_its_disk(self):
        sid = self.session()
        self.run_ok(sid, "head -c 1048576 /dev/urandom > big")
        self.hibernate(sid)
        self.assertEqual(len(kept_disks(self.d.state_dir)), 1)
        status, _, body = self.d.delete(f"/exec/{sid}")
        self.assertEqual(status, 200, body)
        wait_until(lambda: not kept_disks(self.d.state_dir), 30, 0.1, "the kept disk freed")
        self.assertNotIn(sid, self.listed_sessions())

    def test_concurrent_hibernations_resumes_and_a_destroy(self):
        sid = self.session()
        self.start_counter(sid)
        results = []

        def call(action, body=None):
            status, _, _ = self.d.post(f"/exec/{sid}/{action}", body=body)
            results.append((action, status))

        # Listings and scrapes meanwhile read every session (a hibernating one has no
        # sandbox to read from).
        stop = threading.Event()

        def poll():
            while not stop.is_set():
                self.d.get("/exec/")
                self.d.get("/metrics")

        poller = threading.Thread(target=poll)
        poller.start()
        self.addCleanup(poller.join)
        self.addCleanup(stop.set)
        threads = [threading.Thread(target=call, args=("pause", HIBERNATE)) for _ in range(6)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        self.assertEqual([st for _, st in results].count(200), 1, results)
        self.assertTrue(all(st in (200, 409) for _, st in results), results)
        results.clear()
        threads = [threading.Thread(target=call, args=("resume",)) for _ in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        self.assertEqual([st for _, st in results].count(200), 1, results)
        # A hibernation racing a destroy: the daemon stays up, nothing is left.
        t = threading.Thread(target=call, args=("pause", HIBERNATE))
        t.start()
        status, _, body = self.d.delete(f"/exec/{sid}")
        t.join()
        self.assertEqual(status, 200, body)
        wait_until(lambda: not kept_disks(self.d.state_dir), 30, 0.1, "the kept disk freed")
        status, _, _ = self.d.get("/health")
        self.assertEqual(status, 200)

    def test_on_timeout_pause_hibernates_a_disk_session(self):
        status, _, body = self.d.post("/exec", body={"idleTimeout": 1, "onTimeout": "pause"})
        self.assertEqual(status, 201, body)
        sid = body["id"]
        self.addCleanup(self.d.delete, f"/exec/{sid}")
        self.run_ok(sid, "echo kept > file")
        wait_until(lambda: self.listed_sessions()[sid]["state"] == "paused", 30, 0.1,
                   "the idle timeout hibernating the session")
        listed = self.listed_sessions()[sid]
        self.assertEqual((listed["pauseMode"], listed["pausedBy"]), ("hibernate", "timeout"))
        self.resume(sid)
        self.assertEqual(self.stdout_of(sid, "cat file"), "kept\n")

    def test_metrics(self):
        sid = self.session()
        self.run_ok(sid, "true")
        hib = 'session_pauses_total{action="hibernate",result="success"}'
        res = 'session_pauses_total{action="resume",result="success"}'
        before = self.metrics()
        self.hibernate(sid)
        m = self.metrics()
        self.assertEqual(m['sessions_paused{mode="hibernate"}'], 1)
        self.assertEqual(m[hib] - before.get(hib, 0), 1)
        self.resume(sid)
        after = self.metrics()
        self.assertEqual(after['sessions_paused{mode="hibernate"}'], 0)
        self.assertEqual(after[res] - m.get(res, 0), 1)
        self.assertGreaterEqual(after['session_pause_duration_seconds_count{action="hibernate"}'],
                                1)


@jail_only
class PooledHibernateTest(DaemonTestCase):
    daemon_env = {**BASE_ENV, "SANDBOX_WARM_POOL": "1"}

    def test_a_session_from_the_warm_pool_has_its_disk_and_hibernates(self):
        wait_until(lambda: any(e.get("msg", "").startswith("pool") or "pool" in e.get("msg", "")
                               for e in self.d.logs()), 30, 0.1, "the pool filling")
        sid = self.session()
        self.run_ok(sid, "echo kept > file")
        info = self.listed_sessions()[sid]
        self.assertEqual(info["storage"], "disk")
        self.assertIn("disk", info, "a pooled sandbox without the disk its session reports")
        status, _, body = self.d.post(f"/exec/{sid}/pause", body=HIBERNATE)
        self.assertEqual((status, body.get("pauseMode")), (200, "hibernate"), body)
        status, _, body = self.d.post(f"/exec/{sid}/resume")
        self.assertEqual(status, 200, body)
        self.assertEqual(self.stdout_of(sid, "cat file"), "kept\n")


@jail_only
class HibernateOwnershipTest(DaemonTestCase):
    daemon_env = {**BASE_ENV, "AUTH_ENABLED": "true", "SANDBOX_WARM_POOL": "0"}

    def test_another_key_cannot_hibernate_or_resume(self):
        status, _, key = self.d.post("/admin/keys", body={"name": "other", "scopes": ["exec"]})
        self.assertEqual(status, 201, key)
        sid = self.session()
        self.run_ok(sid, "true")
        status, headers, body = self.d.post(f"/exec/{sid}/pause", body=HIBERNATE,
                                            api_key=key["key"])
        self.assertJsonError(status, headers, body, 404)
        status, _, body = self.d.post(f"/exec/{sid}/pause", body=HIBERNATE)
        self.assertEqual(status, 200, body)
        status, headers, body = self.d.post(f"/exec/{sid}/resume", api_key=key["key"])
        self.assertJsonError(status, headers, body, 404)
        status, _, listed = self.d.get("/exec/", api_key=key["key"])
        self.assertNotIn(sid, [s["id"] for s in listed["sessions"]])
        status, _, body = self.d.post(f"/exec/{sid}/resume")
        self.assertEqual(status, 200, body)


@jail_only
class HibernatedQuotaTest(unittest.TestCase):
    def test_a_hibernated_session_still_counts_also_after_a_restart(self):
        env = {"SANDBOX_WARM_POOL": "0", "SANDBOX_MAX_SESSIONS": "1"}
        first = helpers_exec.start_daemon(env)
        self.addCleanup(shutil.rmtree, first.tmp, True)
        self.addCleanup(first.kill)
        status, _, body = first.post("/exec", body={"id": "counted"})
        self.assertEqual(status, 201, body)
        status, _, body = first.post("/exec/counted/pause", body=HIBERNATE)
        self.assertEqual(status, 200, body)
        status, _, body = first.post("/exec", body={"id": "second"})
        self.assertEqual(status, 429, body)
        first.proc.send_signal(signal.SIGTERM)
        self.assertEqual(first.proc.wait(30), 0)
        first.kill()
        second = restart(first, env)
        self.addCleanup(second.stop, check=False)
        status, _, body = second.post("/exec", body={"id": "second"})
        self.assertEqual(status, 429, body)
        status, _, body = second.delete("/exec/counted")
        self.assertEqual(status, 200, body)
        wait_until(lambda: second.post("/exec", body={"id": "second"})[0] == 201, 30, 0.2,
                   "its unit given back")
        second.stop()

    def test_a_hibernated_session_holds_its_bytes_also_after_a_restart(self):
        env = {"SANDBOX_WARM_POOL": "0", "AUTH_ENABLED": "true",
               "SANDBOX_KEY_MAX_MEMORY_BYTES": "128M"}
        first = helpers_exec.start_daemon(env)
        self.addCleanup(shutil.rmtree, first.tmp, True)
        self.addCleanup(first.kill)
        status, _, key = first.post("/admin/keys", body={"name": "t", "scopes": ["exec"]})
        self.assertEqual(status, 201, key)
        mem = {"memoryBytes": 96 << 20, "diskBytes": 64 << 20}
        status, _, body = first.post("/exec", body={"id": "held", "resources": mem},
                                     api_key=key["key"])
        self.assertEqual(status, 201, body)
        status, _, body = first.post("/exec/held/pause", body=HIBERNATE, api_key=key["key"])
        self.assertEqual(status, 200, body)
        first.proc.send_signal(signal.SIGTERM)
        self.assertEqual(first.proc.wait(30), 0)
        first.kill()
        second = restart(first, env)
        self.addCleanup(second.stop, check=False)
        second.api_key = first.admin_key  # printed at the first start only

        def usage():
            status, _, body = second.get("/admin/keys")
            self.assertEqual(status, 200, body)
            keys = body["keys"] if isinstance(body, dict) else body
            return next(k for k in keys if k["id"] == key["id"])["usage"]

        self.assertEqual(usage()["memoryBytes"]["used"], 96 << 20)
        self.assertEqual(usage()["diskBytes"]["used"], 64 << 20)
        status, _, body = second.post("/exec", body={"id": "more",
                                                     "resources": {"memoryBytes": 64 << 20}},
                                      api_key=key["key"])
        self.assertEqual(status, 429, body)
        self.assertIn("memoryBytes", body["error"])
        status, _, body = second.delete("/exec/held", api_key=key["key"])
        self.assertEqual(status, 200, body)
        self.assertEqual(usage()["memoryBytes"]["used"], 0)
        second.stop()


def restart(first, env=None):
    return helpers_exec.start_daemon({"SANDBOX_WARM_POOL": "0", **(env or {}),
                                      "SANDBOX_STATE_DIR": first.state_dir,
                                      "SANDBOX_RUN_DIR": first.run_dir})


@jail_only
class HibernatedAcrossRestartsTest(unittest.TestCase):
    def first_daemon(self):
        first = helpers_exec.start_daemon({"SANDBOX_WARM_POOL": "0"})
        self.addCleanup(shutil.rmtree, first.tmp, True)
        self.addCleanup(first.kill)
        return first

    def prepare(self, d, sid):
        status, _, body = d.post("/exec", body={"id": sid, "env": {"WHO": "kept"},
                                                "onTimeout": "pause"})
        self.assertEqual(status, 201, body)
        status, _, body = d.post(f"/exec/{sid}/execute", body={"command": "echo $WHO > file"})
        self.assertEqual((status, body.get("exitCode")), (200, 0), body)
        status, _, body = d.post(f"/exec/{sid}/pause", body=HIBERNATE)
        self.assertEqual(status, 200, body)
        self.preview_name = body["previewName"]

    def check_resumes(self, d, sid):
        status, _, listed = d.get("/exec/")
        mine = {s["id"]: s for s in listed["sessions"]}
        self.assertEqual((mine[sid]["state"], mine[sid]["pauseMode"]), ("paused", "hibernate"))
        self.assertEqual(mine[sid]["onTimeout"], "pause")
        # The name its previews and E2B clients reach it by is its own still.
        self.assertEqual(mine[sid]["previewName"], self.preview_name)
        status, _, body = d.post(f"/exec/{sid}/resume")
        self.assertEqual(status, 200, body)
        status, _, body = d.post(f"/exec/{sid}/execute", body={"command": "cat file; echo $WHO"})
        self.assertEqual(status, 200, body)
        self.assertEqual(helpers_exec.joined(body["output"], "stdout"), "kept\nkept\n")

    def test_sigterm_keeps_hibernated_sessions_and_a_restart_resumes_them(self):
        first = self.first_daemon()
        self.prepare(first, "hib-term")
        # A frozen one beside it is lost with the daemon (docs/lifecycle.md).
        status, _, body = first.post("/exec/frozen-term/execute", body={"command": "true"})
        self.assertEqual(status, 200, body)
        status, _, body = first.post("/exec/frozen-term/pause")
        self.assertEqual(status, 200, body)
        first.proc.send_signal(signal.SIGTERM)
        self.assertEqual(first.proc.wait(30), 0, first.stderr()[-3000:])
        first.kill()
        self.assertEqual(len(kept_disks(first.state_dir)), 1)
        second = restart(first)
        self.addCleanup(second.stop, check=False)
        status, _, listed = second.get("/exec/")
        self.assertNotIn("frozen-term", [s["id"] for s in listed["sessions"]])
        self.check_resumes(second, "hib-term")
        self.assertEqual(kept_disks(first.state_dir), [])
        status, _, body = second.delete("/exec/hib-term")
        self.assertEqual(status, 200, body)
        second.stop()

    def test_sigkill_keeps_hibernated_sessions_too(self):
        first = self.first_daemon()
        self.prepare(first, "hib-kill")
        first.proc.send_signal(signal.SIGKILL)
        first.proc.wait(10)
        first.kill()
        second = restart(first)
        self.addCleanup(second.stop, check=False)
        self.check_resumes(second, "hib-kill")
        # Its ids were taken back before any other sandbox: a new session beside it works.
        status, _, body = second.post("/exec/beside/execute", body={"command": "stat -c %u ."})
        self.assertEqual(status, 200, body)
        status, _, body = second.delete("/exec/hib-kill")
        self.assertEqual(status, 200, body)
        second.stop()

    def test_a_crash_during_hibernations_leaves_no_orphan_disk(self):
        first = self.first_daemon()
        ids = [f"hib-crash-{i}" for i in range(4)]
        for sid in ids:
            status, _, body = first.post("/exec", body={"id": sid})
            self.assertEqual(status, 201, body)
            status, _, body = first.post(f"/exec/{sid}/execute",
                                         body={"command": f"echo {sid} > file"})
            self.assertEqual(status, 200, body)
        threads = [threading.Thread(target=lambda sid=sid: first.post(
            f"/exec/{sid}/pause", body=HIBERNATE, timeout=10)) for sid in ids]
        for t in threads:
            t.start()
        time.sleep(0.005)
        first.proc.send_signal(signal.SIGKILL)
        first.proc.wait(10)
        for t in threads:
            t.join()
        first.kill()
        second = restart(first)
        self.addCleanup(second.stop, check=False)
        status, _, listed = second.get("/exec/")
        back = [s["id"] for s in listed["sessions"]]
        # Every kept disk belongs to a session that is back; each of those resumes.
        self.assertEqual(len(kept_disks(first.state_dir)), len(back), (back, kept_disks(
            first.state_dir)))
        for sid in back:
            status, _, body = second.post(f"/exec/{sid}/resume")
            self.assertEqual(status, 200, body)
            status, _, body = second.post(f"/exec/{sid}/execute", body={"command": "cat file"})
            self.assertEqual(helpers_exec.joined(body["output"], "stdout"), f"{sid}\n")
            second.delete(f"/exec/{sid}")
        wait_until(lambda: not glob.glob(os.path.join(first.state_dir, "disks", "*.disk")), 30,
                   0.1, "the resumed disks removed with their sessions")
        self.assertEqual(kept_disks(first.state_dir), [])
        second.stop()

    def test_a_hibernated_session_destroyed_after_a_restart_leaves_nothing(self):
        first = self.first_daemon()
        self.prepare(first, "hib-gone")
        first.proc.send_signal(signal.SIGTERM)
        self.assertEqual(first.proc.wait(30), 0)
        first.kill()
        second = restart(first)
        self.addCleanup(second.stop, check=False)
        status, _, body = second.delete("/exec/hib-gone")
        self.assertEqual(status, 200, body)
        wait_until(lambda: not kept_disks(first.state_dir), 30, 0.1, "the kept disk freed")
        second.stop(check=False)
        third = restart(first)
        self.addCleanup(third.stop, check=False)
        status, _, listed = third.get("/exec/")
        self.assertNotIn("hib-gone", [s["id"] for s in listed["sessions"]])
        third.stop()


if __name__ == "__main__":
    unittest.main()
