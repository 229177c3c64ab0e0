"""Limits: output caps, request size, the pids and memory limits of a sandbox. One daemon with
small limits serves the class."""

import shutil
import subprocess
import unittest

import harness
import helpers_host as host
from helpers_exec import DaemonTestCase, joined, sandbox_of
from runner import tag

MiB = 1024 * 1024
OUTPUT_CAP = 1 * MiB
BODY_CAP = 256 * 1024
MEMORY_LIMIT = 64 * MiB
PIDS_MAX = 64
READ_CAP = 64 * 1024
DISK_LIMIT = 1 * MiB


class LimitsTest(DaemonTestCase):
    daemon_env = {
        "SANDBOX_MAX_OUTPUT_BYTES": str(OUTPUT_CAP),
        "SANDBOX_MAX_BODY_BYTES": str(BODY_CAP),
        "VM_MEMORY_LIMIT_BYTES": str(MEMORY_LIMIT),
        "SANDBOX_PIDS_MAX": str(PIDS_MAX),
        "SANDBOX_MAX_READ_BYTES": str(READ_CAP),
        "VM_DISK_LIMIT_BYTES": str(DISK_LIMIT),
        # The workspace as a tmpfs of VM_DISK_LIMIT_BYTES (docs/storage.md).
        "SANDBOX_STORAGE": "tmpfs",
    }

    def assertDaemonHealthy(self):
        status, _, body = self.d.get("/health", timeout=10)
        self.assertEqual(status, 200, body)
        sid = self.session("healthy")
        self.assertEqual(self.stdout_of(sid, "echo ok"), "ok\n")

    def test_buffered_output_flood_is_truncated_at_the_cap(self):
        sid = self.session()
        status, body = self.execute(sid, "yes | head -c 100000000; echo done >&2",
                                    http_timeout=120)
        self.assertEqual(status, 200, str(body)[:500])
        self.assertEqual(body["exitCode"], 0)
        self.assertIs(body.get("truncated"), True, {k: v for k, v in body.items()
                                                    if k != "output"})
        self.assertEqual(body.get("outputLimit"), OUTPUT_CAP)
        text = joined(body["output"])
        size = len(text.encode())
        self.assertLessEqual(size, OUTPUT_CAP)
        self.assertGreater(size, OUTPUT_CAP - 64 * 1024, "far less output than the cap")
        self.assertEqual(set(text), {"y", "\n"})
        self.assertDaemonHealthy()

    @tag("driver")
    def test_streamed_output_is_complete_beyond_the_buffered_cap(self):
        sid = self.session()
        total = 20 * MiB
        with self.stream_execute(sid, f"yes | head -c {total}", http_timeout=120) as s:
            got = 0
            result = None
            for item in s.ndjson():
                if item["type"] == "stream":
                    got += len(item["data"].encode())
                else:
                    result = item
        self.assertEqual(result["type"], "result", result)
        self.assertEqual(result["exitCode"], 0)
        self.assertNotIn("truncated", result)
        self.assertEqual(got, total)

    def test_oversize_body_is_413_json(self):
        sid = self.session()
        content = "x" * (BODY_CAP * 2)
        try:
            status, headers, body = self.d.post(f"/exec/{sid}/write",
                                                body={"path": "big", "content": content},
                                                timeout=30)
        except (ConnectionResetError, BrokenPipeError) as e:
            self.fail(f"the connection was dropped instead of a 413 reply: {e!r}")
        self.assertJsonError(status, headers, body, 413)
        self.assertNotIn(sid, self.listed_sessions())
        # A body just under the limit is fine.
        status, _, body = self.d.post(f"/exec/{sid}/write",
                                      body={"path": "ok", "content": "y" * (BODY_CAP // 2)})
        self.assertEqual(status, 200, body)
        self.assertDaemonHealthy()

    @tag("driver")
    def test_fork_bomb_is_contained(self):
        sid = self.session()
        self.run_ok(sid, "true")
        sandbox = sandbox_of(self.d, sid)
        self.assertTrue(sandbox, "no sandbox id logged for the session")
        # The pause gives the bomb time to reach the pids limit before the command ends.
        status, body = self.execute(sid, "b() { b | b & }; b; sleep 3", timeout=8000,
                                    http_timeout=120)
        self.assertEqual(status, 200, body)
        # The host can still make processes and the daemon answers.
        subprocess.run(["true"], check=True, timeout=10)
        self.assertDaemonHealthy()
        # The session can be destroyed, and all of it goes.
        footprint = host.Footprint()
        footprint.record_sandbox(sandbox)
        status, _, body = self.d.delete(f"/exec/{sid}", timeout=60)
        self.assertEqual(status, 200, body)
        self.assertEqual(host.wait_all_gone(footprint, [sandbox]), [])

    @tag("driver")
    def test_memory_hog_is_killed_with_a_clear_result(self):
        sid = self.session()
        self.run_ok(sid, "true")
        # dd's buffer is bigger than the whole sandbox may use: it is killed filling it.
        status, body = self.execute(sid, "dd", args=["if=/dev/zero", "of=/dev/null",
                                                     f"bs={4 * MEMORY_LIMIT}", "count=1"],
                                    timeout=60000, http_timeout=120)
        self.assertEqual(status, 200, body)
        self.assertIsNone(body["exitCode"], body)
        self.assertEqual(body.get("signal"), "SIGKILL", body)
        self.assertIs(body.get("oomKilled"), True, body)
        self.assertIn("memory", body.get("error", ""))
        # The session lives on.
        self.assertEqual(self.stdout_of(sid, "echo still here"), "still here\n")
        status, body = self.execute(sid, "echo fine")
        self.assertNotIn("oomKilled", body)

    def test_read_over_the_limit_is_413(self):
        sid = self.session()
        self.run_ok(sid, f"head -c {READ_CAP} /dev/zero > at; head -c {READ_CAP + 1} /dev/zero > over")
        status, _, body = self.d.get(f"/exec/{sid}/read", query={"path": "at"})
        self.assertEqual(status, 200, str(body)[:200])
        self.assertEqual(body["size"], READ_CAP)
        for headers in (None, {"Accept": "application/octet-stream"}):
            with self.subTest(headers=headers):
                status, headers_, body = self.d.get(f"/exec/{sid}/read",
                                                    query={"path": "over"}, headers=headers)
                self.assertJsonError(status, headers_, body, 413)

    @tag("driver")
    def test_full_workspace(self):
        sid = self.session()
        chunk = "z" * (200 * 1024)
        statuses = []
        for i in range(2 * DISK_LIMIT // len(chunk)):
            status, headers, body = self.d.post(f"/exec/{sid}/write",
                                                body={"path": f"fill{i}", "content": chunk})
            statuses.append(status)
            if status != 200:
                self.assertJsonError(status, headers, body, 507)
                break
        self.assertNotEqual(statuses[-1], 200, "wrote twice the workspace size without error")
        # A command filling the rest fails like on any full disk; so does a write then.
        status, body = self.execute(sid, "cat /dev/zero > filler")
        self.assertEqual(status, 200, body)
        self.assertNotEqual(body["exitCode"], 0, body)
        self.assertIn("No space", "".join(c["data"] for c in body["output"]))
        status, headers, body = self.d.post(f"/exec/{sid}/write",
                                            body={"path": "small", "content": chunk})
        self.assertJsonError(status, headers, body, 507)
        # Freeing space makes it usable again.
        self.run_ok(sid, "rm -f fill* filler")
        status, _, body = self.d.post(f"/exec/{sid}/write", body={"path": "again", "content": "ok"})
        self.assertEqual(status, 200, body)

    def test_many_small_writes_within_the_body_limit(self):
        sid = self.session()
        for i in range(20):
            status, _, body = self.d.post(f"/exec/{sid}/write",
                                          body={"path": f"f{i}", "content": str(i)})
            self.assertEqual(status, 200, body)
        self.assertEqual(self.stdout_of(sid, "cat f0 f19"), "019")


if __name__ == "__main__":
    unittest.main()


class CapacityTest(DaemonTestCase):
    daemon_env = {"SANDBOX_MAX_SESSIONS": "2", "SANDBOX_WARM_POOL": "0"}

    def test_session_limit(self):
        a, b, c = self.session("cap-a"), self.session("cap-b"), self.session("cap-c")
        self.run_ok(a, "true")
        status, _, body = self.d.post("/exec/", body={"id": b})
        self.assertEqual(status, 201, body)
        status, _, body = self.d.get("/ready")
        self.assertEqual(status, 503, body)
        self.assertEqual(body["status"], "not_ready")
        self.assertIn("capacity", [f["check"] for f in body["failing"]])
        self.assertIs(body["checks"]["capacity"], False, body)
        # Over the limit, by either kind of creation; told when to try again.
        status, headers, body = self.d.post("/exec/", body={"id": c})
        self.assertJsonError(status, headers, body, 429)
        self.assertEqual(headers.get("Retry-After"), str(body["retryAfter"]), body)
        status, headers, body = self.d.post(f"/exec/{c}/execute", body={"command": "true"})
        self.assertJsonError(status, headers, body, 429)
        status, headers, body = self.d.post(f"/exec/{c}/write",
                                            body={"path": "x", "content": "x"})
        self.assertJsonError(status, headers, body, 429)
        # Existing sessions work on, and a freed place can be taken.
        self.run_ok(a, "true")
        self.assertEqual(self.d.delete(f"/exec/{b}")[0], 200)
        self.run_ok(c, "true")
        self.assertEqual(self.d.delete(f"/exec/{c}")[0], 200)
        status, _, body = self.d.get("/ready")
        self.assertEqual(status, 200, body)


class LimitsInForceTest(DaemonTestCase):
    """A session's object shows the limits its sandbox has: memory from the template's
    manifest (base: memSizeMib 128) over VM_MEMORY_LIMIT_BYTES, a request's over both."""

    daemon_env = {"VM_MEMORY_LIMIT_BYTES": str(32 * MiB), "SANDBOX_WARM_POOL": "0"}

    def test_session_shows_its_limits(self):
        sid = self.session()
        status, _, body = self.d.post("/exec/", body={"id": sid})
        self.assertEqual(status, 201, body)
        limits = body["limits"]
        self.assertEqual(limits["memoryBytes"], 128 * MiB, body)
        self.assertEqual((limits["cpuQuotaUs"], limits["cpuPeriodUs"]), (50000, 100000), body)
        self.assertEqual(limits["pidsMax"], 256, body)
        self.assertNotIn("resources", body)
        other = self.session()
        status, _, body = self.d.post("/exec/", body={
            "id": other, "resources": {"memoryBytes": 256 * MiB, "pidsMax": 32}})
        self.assertEqual(status, 201, body)
        self.assertEqual((body["limits"]["memoryBytes"], body["limits"]["pidsMax"]),
                         (256 * MiB, 32), body)
        self.assertEqual(body["resources"], {"memoryBytes": 256 * MiB, "pidsMax": 32})
        listed = {s["id"]: s for s in self.d.get("/exec/")[2]["sessions"]}
        self.assertEqual(listed[other]["limits"], body["limits"])


class MemoryCapTest(DaemonTestCase):
    """SANDBOX_MAX_MEMORY_BYTES bounds the request and the template's manifest alike."""

    daemon_env = {"SANDBOX_MAX_MEMORY_BYTES": str(64 * MiB),
                  "VM_MEMORY_LIMIT_BYTES": str(64 * MiB), "VM_MEM_SIZE_MIB": "64",
                  "SANDBOX_WARM_POOL": "1"}

    def test_template_above_the_cap_is_refused(self):
        # base asks for 128 MiB in its template.json.
        for path, body in (("/exec/", {"id": "cap-1"}),
                           ("/exec/cap-2/execute", {"command": "true"})):
            with self.subTest(path=path):
                status, headers, reply = self.d.post(path, body=body)
                self.assertJsonError(status, headers, reply, 400, "SANDBOX_MAX_MEMORY_BYTES")
                self.assertIn("memSizeMib", reply["error"])
        # Nor does the warm pool keep sandboxes no session could take.
        self.assertEqual(self.d.get("/health")[2]["warmPool"], 0)

    def test_a_request_under_the_cap_takes_the_manifests_place(self):
        if self.d.get("/health")[2]["isolation"] == "vm":
            self.skipTest("a VM's memory is its template's (memoryBytes is refused)")
        sid = self.session()
        status, _, body = self.d.post("/exec/", body={
            "id": sid, "resources": {"memoryBytes": 32 * MiB}})
        self.assertEqual(status, 201, body)
        self.assertEqual(body["limits"]["memoryBytes"], 32 * MiB, body)
        self.run_ok(sid, "true")

    def test_request_above_the_cap_is_refused(self):
        status, headers, body = self.d.post("/exec/", body={
            "resources": {"memoryBytes": 65 * MiB}})
        self.assertJsonError(status, headers, body, 400,
                             f"cap SANDBOX_MAX_MEMORY_BYTES ({64 * MiB})")

    def test_defaults_above_the_caps_stop_the_daemon(self):
        for env, name in (({"VM_MEMORY_LIMIT_BYTES": str(128 * MiB)}, "VM_MEMORY_LIMIT_BYTES"),
                          ({"VM_VCPU_COUNT": "3", "SANDBOX_MAX_VCPUS": "2"}, "VM_VCPU_COUNT")):
            with self.subTest(variable=name):
                d = harness.Daemon(env={"SANDBOX_MAX_MEMORY_BYTES": str(64 * MiB),
                                        "VM_MEM_SIZE_MIB": "64", **env})
                self.addCleanup(lambda d=d: d.tmp and shutil.rmtree(d.tmp, True))
                with self.assertRaises(AssertionError) as cm:
                    d.start()
                self.assertIn(f"{name}:", str(cm.exception))


class MemoryWatermarkTest(DaemonTestCase):
    """New sessions are admitted by the host's available memory, not by the sum of limits:
    below SANDBOX_MEMORY_WATERMARK_BYTES (here more than any host has) creation is a 503
    with Retry-After and reason "memory" (the host's shortage, not the client's rate), counted
    in admission_refusals_total, and /ready says memoryOk false."""

    daemon_env = {"SANDBOX_MEMORY_WATERMARK_BYTES": str(16 << 40), "SANDBOX_WARM_POOL": "0"}

    def test_creation_waits_for_memory(self):
        for path, body in (("/exec/", {}),
                           ("/exec/wm-1/execute", {"command": "true"}),
                           ("/exec/wm-2/write", {"path": "x", "content": "x"})):
            with self.subTest(path=path):
                status, headers, reply = self.d.post(path, body=body)
                self.assertJsonError(status, headers, reply, 503,
                                     "SANDBOX_MEMORY_WATERMARK_BYTES")
                self.assertEqual(reply.get("reason"), "memory", reply)
                self.assertEqual(headers.get("Retry-After"), str(reply["retryAfter"]))
        status, _, body = self.d.get("/exec/")
        self.assertEqual((status, body["sessions"]), (200, []), body)
        status, _, body = self.d.get("/ready")
        self.assertEqual((status, body["status"]), (503, "not_ready"), body)
        self.assertIs(body["checks"]["memoryOk"], False, body)
        self.assertIs(body["checks"]["descriptors"], True, body)
        self.assertGreaterEqual(
            self.metrics().get('admission_refusals_total{reason="memory"}', 0), 3)


class DefaultTimeoutTest(DaemonTestCase):
    daemon_env = {"SANDBOX_EXEC_TIMEOUT_MS": "1000", "SANDBOX_WARM_POOL": "0"}

    def test_default_timeout_applies_when_the_request_gives_none(self):
        sid = self.session()
        # Far longer than the default timeout (1 s), on purpose.
        status, body = self.execute(sid, "sleep 30")
        self.assertEqual(status, 200, body)
        self.assertTrue(body.get("timedOut"), body)
        self.assertLess(body["duration"], 10_000, body)

    def test_a_request_timeout_replaces_the_default(self):
        sid = self.session()
        # Both outlive the default timeout (1 s) on purpose: only the request's own lets them.
        body = self.run_ok(sid, "sleep 2; echo late", timeout=20_000)
        self.assertEqual(joined(body["output"]), "late\n")
        body = self.run_ok(sid, "sleep 2; echo none", timeout=0)
        self.assertEqual(joined(body["output"]), "none\n")
