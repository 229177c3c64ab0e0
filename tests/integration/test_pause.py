"""Pause and resume: a paused session's processes make no progress (no CPU at all) and carry
on after the resume; what is refused meanwhile; the idle clock stops; destroying a paused
session leaves nothing."""

import os
import time
import unittest

import helpers_host as host
import runner
from helpers_exec import BASE_ENV, DaemonTestCase, sandbox_of, wait_until



def cgroup_procs(sandbox):
    dirs = host.cgroup_dirs(sandbox)
    if not dirs:
        raise AssertionError(f"no cgroup for sandbox {sandbox}")
    return sorted(host.cgroup_pids(dirs))


def cpu_ticks(sandbox):
    """User and system time of every process of the sandbox, in clock ticks."""
    total = 0
    for pid in cgroup_procs(sandbox):
        try:
            with open(f"/proc/{pid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            total += int(fields[11]) + int(fields[12])
        except (FileNotFoundError, ProcessLookupError):
            pass
    return total


class PauseTest(DaemonTestCase):
    daemon_env = {**BASE_ENV, "SANDBOX_WARM_POOL": "0"}

    def pause(self, sid, expect=200):
        status, _, body = self.d.post(f"/exec/{sid}/pause")
        self.assertEqual(status, expect, body)
        return body

    def resume(self, sid, expect=200):
        status, _, body = self.d.post(f"/exec/{sid}/resume")
        self.assertEqual(status, expect, body)
        return body

    def counter(self, sid):
        status, _, body = self.d.post(f"/exec/{sid}/processes", body={
            "command": "i=0; while :; do i=$((i+1)); echo $i > c.tmp && mv c.tmp count; done",
            "tag": "count"})
        self.assertEqual(status, 201, body)
        wait_until(lambda: self.stdout_of(sid, "cat count 2>/dev/null || echo 0").strip() != "0",
                   30, 0.05, "the counter running")

    @runner.tag("driver")
    def test_a_paused_session_makes_no_progress_and_carries_on(self):
        sid = self.session()
        self.run_ok(sid, "echo kept > file")
        self.counter(sid)
        body = self.pause(sid)
        self.assertEqual(body["state"], "paused")
        self.assertIn("pausedAt", body)
        listed = self.listed_sessions()[sid]
        self.assertEqual(listed["state"], "paused")
        # Everything waits for the resume, with a clear answer.
        status, headers, err = self.d.post(f"/exec/{sid}/execute", body={"command": "true"})
        self.assertJsonError(status, headers, err, 409, "paused")
        status, headers, err = self.d.get(f"/exec/{sid}/files")
        self.assertJsonError(status, headers, err, 409, "paused")
        self.pause(sid, 409)
        if os.environ.get("DRIVER", "jail") == "jail":
            sandbox = sandbox_of(self.d, sid)
            first = cpu_ticks(sandbox)
            time.sleep(0.5)
            self.assertEqual(cpu_ticks(sandbox), first, "a frozen sandbox used CPU")
        body = self.resume(sid)
        self.assertEqual(body["state"], "ready")
        self.resume(sid, 409)
        self.assertEqual(self.stdout_of(sid, "cat file"), "kept\n")
        # The same process counts on.
        before = int(self.stdout_of(sid, "cat count"))
        wait_until(lambda: int(self.stdout_of(sid, "cat count")) > before, 30, 0.05,
                   "the counter carrying on")
        status, _, p = self.d.get(f"/exec/{sid}/processes/count")
        self.assertEqual((status, p["state"]), (200, "running"))

    def test_operations_in_flight_prevent_a_pause(self):
        sid = self.session()
        with self.stream_execute(sid, "sleep 5") as stream:
            wait_until(lambda: self.listed_sessions()[sid]["running"] > 0, 30, 0.05,
                       "the command running")
            status, headers, body = self.d.post(f"/exec/{sid}/pause")
            self.assertJsonError(status, headers, body, 409, "in flight")
            stream.close()

    def test_unknown_sessions_and_the_idle_clock(self):
        status, headers, body = self.d.post("/exec/no-such-session/pause")
        self.assertJsonError(status, headers, body, 404)
        sid = self.session()
        status, _, body = self.d.post("/exec", body={"id": sid, "idleTimeout": 1})
        self.assertEqual(status, 201, body)
        self.pause(sid)
        # Paused, it is not idle: it outlives its idle timeout.
        time.sleep(2.5)
        self.assertEqual(self.listed_sessions()[sid]["state"], "paused")
        self.resume(sid)
        # Running again, the idle clock counts from the resume.
        wait_until(lambda: sid not in self.listed_sessions(), 30, 0.1, "the idle reaper")

    def test_destroying_a_paused_session_leaves_nothing(self):
        sid = self.session()
        self.counter(sid)
        sandbox = sandbox_of(self.d, sid)
        self.pause(sid)
        status, _, body = self.d.delete(f"/exec/{sid}")
        self.assertEqual(status, 200, body)
        wait_until(lambda: not host.cgroup_dirs(sandbox), 30, 0.1,
                   "the cgroup removed")

    def test_concurrent_pauses_resumes_and_a_destroy_in_the_middle(self):
        import threading
        sid = self.session()
        self.counter(sid)
        sandbox = sandbox_of(self.d, sid)
        results = []

        def call(action):
            status, _, _ = self.d.post(f"/exec/{sid}/{action}")
            results.append((action, status))

        # Eight pauses at once: one wins, the rest are told it is busy or paused.
        threads = [threading.Thread(target=call, args=("pause",)) for _ in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        self.assertEqual(sorted(st for _, st in results).count(200), 1, results)
        self.assertTrue(all(st in (200, 409) for _, st in results), results)
        # A resume and a destroy racing: the daemon stays up and the sandbox goes.
        t = threading.Thread(target=call, args=("resume",))
        t.start()
        status, _, body = self.d.delete(f"/exec/{sid}")
        t.join()
        self.assertEqual(status, 200, body)
        wait_until(lambda: not host.cgroup_dirs(sandbox), 30, 0.1,
                   "the cgroup removed")
        status, _, _ = self.d.get("/health")
        self.assertEqual(status, 200)


    def test_metrics_count_pauses_resumes_and_refusals(self):
        sid = self.session()
        self.run_ok(sid, "true")
        before = self.metrics()
        self.pause(sid)
        self.pause(sid, 409)
        m = self.metrics()
        self.assertEqual(m['sessions_paused{mode="freeze"}'], 1)
        key = 'session_pauses_total{action="%s",result="%s"}'
        self.assertEqual(m[key % ("pause", "success")] - before.get(key % ("pause", "success"), 0), 1)
        self.assertEqual(m[key % ("pause", "refused")] - before.get(key % ("pause", "refused"), 0), 1)
        self.assertGreaterEqual(m['session_pause_duration_seconds_count{action="pause"}'], 1)
        self.resume(sid)
        m = self.metrics()
        self.assertEqual(m['sessions_paused{mode="freeze"}'], 0)
        self.assertGreaterEqual(m[key % ("resume", "success")], 1)
        self.assertGreaterEqual(m['session_pause_duration_seconds_bucket{action="resume",le="+Inf"}'], 1)
        # No session id in any label.
        status, _, text = self.d.get("/metrics")
        self.assertNotIn(sid, text.decode() if isinstance(text, bytes) else text)

    def test_on_timeout_pause_pauses_an_idle_session_and_keeps_it(self):
        # tmpfs storage: frozen (a disk session is hibernated instead: test_hibernate.py).
        status, _, body = self.d.post("/exec", body={"idleTimeout": 1, "onTimeout": "pause",
                                                     "storage": "tmpfs"}
                                      if os.environ.get("DRIVER", "jail") == "jail" else
                                      {"idleTimeout": 1, "onTimeout": "pause"})
        self.assertEqual(status, 201, body)
        sid = body["id"]
        self.assertEqual(body["onTimeout"], "pause")
        self.run_ok(sid, "echo kept > file")
        self.counter(sid)
        # The counter keeps no operation in flight: the session goes idle and is paused.
        wait_until(lambda: self.listed_sessions()[sid]["state"] == "paused", 30, 0.1,
                   "the idle timeout pausing the session")
        listed = self.listed_sessions()[sid]
        self.assertEqual((listed["pausedBy"], listed["pauseMode"]), ("timeout", "freeze"))
        # Paused, its idle clock is stopped: it stays.
        time.sleep(2.5)
        self.assertEqual(self.listed_sessions()[sid]["state"], "paused")
        body = self.resume(sid)
        self.assertEqual(body["state"], "ready")
        self.assertEqual(self.stdout_of(sid, "cat file"), "kept\n")
        status, _, p = self.d.get(f"/exec/{sid}/processes/count")
        self.assertEqual((status, p["state"]), (200, "running"))
        # And paused again when idle once more.
        wait_until(lambda: self.listed_sessions()[sid]["state"] == "paused", 30, 0.1,
                   "the second idle pause")

    def test_on_timeout_destroy_and_bad_values(self):
        status, _, body = self.d.post("/exec", body={"idleTimeout": 1, "onTimeout": "destroy"})
        self.assertEqual(status, 201, body)
        wait_until(lambda: body["id"] not in self.listed_sessions(), 30, 0.1, "the idle reaper")
        for bad in ("hibernate-forever", "", 1, True, ["pause"], {"pause": 1}):
            status, headers, err = self.d.post("/exec", body={"onTimeout": bad})
            self.assertJsonError(status, headers, err, 400, "onTimeout")


class PauseOwnershipTest(DaemonTestCase):
    daemon_env = {**BASE_ENV, "AUTH_ENABLED": "true", "SANDBOX_WARM_POOL": "0"}

    def test_another_key_cannot_pause_or_resume(self):
        sid = self.session()
        self.run_ok(sid, "true")
        status, _, key = self.d.post("/admin/keys", body={"name": "other", "scopes": ["exec"]})
        self.assertEqual(status, 201, key)
        for action in ("pause", "resume"):
            status, headers, body = self.d.post(f"/exec/{sid}/{action}", api_key=key["key"])
            self.assertJsonError(status, headers, body, 404)
        status, _, body = self.d.post(f"/exec/{sid}/pause")
        self.assertEqual(status, 200, body)
        status, headers, body = self.d.post(f"/exec/{sid}/resume", api_key=key["key"])
        self.assertJsonError(status, headers, body, 404)
        status, _, body = self.d.post(f"/exec/{sid}/resume")
        self.assertEqual(status, 200, body)



class PausedAtShutdownTest(unittest.TestCase):
    def test_a_daemon_stopping_with_a_paused_session_leaves_nothing(self):
        import helpers_exec
        d = helpers_exec.start_daemon({"SANDBOX_WARM_POOL": "0"})
        try:
            status, _, body = d.post("/exec/paused-at-stop/execute", body={"command": "true"})
            self.assertEqual(status, 200, body)
            sandbox = sandbox_of(d, "paused-at-stop")
            status, _, body = d.post("/exec/paused-at-stop/pause")
            self.assertEqual(status, 200, body)
        finally:
            d.stop()  # checks a clean exit within its timeout
        self.assertFalse(host.cgroup_dirs(sandbox))


class PausedAtCrashTest(unittest.TestCase):
    def test_a_restart_after_sigkill_removes_a_paused_sandbox(self):
        import shutil
        import signal
        import helpers_exec
        import helpers_host as host
        from test_lifecycle import footprint_of, sandboxes_of
        first = helpers_exec.start_daemon({"SANDBOX_WARM_POOL": "0"})
        self.addCleanup(first.kill)
        self.addCleanup(shutil.rmtree, first.tmp, True)
        status, _, body = first.post("/exec/frozen-at-crash/execute",
                                     body={"command": "sleep 300 > /dev/null 2>&1 &"})
        self.assertEqual(status, 200, body)
        status, _, body = first.post("/exec/frozen-at-crash/pause")
        self.assertEqual(status, 200, body)
        ids = sandboxes_of(first)
        fp = footprint_of(first, ids)
        first.proc.send_signal(signal.SIGKILL)
        first.proc.wait(10)
        first.kill()
        self.assertTrue(any(os.path.isdir(c) for c in fp.cgroups),
                        "the sandbox vanished with the daemon: the restart has nothing to do")
        # Its processes are frozen: only a clean-up that thaws them can end them.
        second = helpers_exec.start_daemon({"SANDBOX_WARM_POOL": "0",
                                            "SANDBOX_STATE_DIR": first.state_dir,
                                            "SANDBOX_RUN_DIR": first.run_dir})
        self.addCleanup(second.stop, check=False)
        left = host.wait_all_gone(fp, ids, words=[first.tmp], timeout=15)
        self.assertEqual(left, [], "the paused sandbox of the killed daemon survived the restart")
        second.stop()


if __name__ == "__main__":
    unittest.main()
