"""The /exec routes: sessions, execute in its three reply forms, cancel, errors, /health and
/ready. One daemon serves the whole class; every test makes its own sessions."""

import json
import socket
import threading
import unittest

import harness
import helpers_exec
from helpers_exec import TEMPLATE, DaemonTestCase, joined, parse_sse_data, until_file, wait_until
from runner import tag


class SessionRoutesTest(DaemonTestCase):
    def test_execute_creates_the_session_implicitly(self):
        sid = self.session()
        self.assertNotIn(sid, self.listed_sessions())
        body = self.run_ok(sid, "echo hello")
        self.assertEqual(joined(body["output"], "stdout"), "hello\n")
        listed = self.listed_sessions()
        self.assertIn(sid, listed)
        self.assertEqual(listed[sid]["template"], TEMPLATE)
        self.assertEqual(listed[sid]["state"], "ready")

    def test_write_creates_the_session_implicitly(self):
        sid = self.session()
        status, _, body = self.d.post(f"/exec/{sid}/write",
                                      body={"path": "note.txt", "content": "from write\n"})
        self.assertEqual(status, 200, body)
        self.assertEqual(body, {"success": True, "path": "note.txt", "size": 11,
                                "bytesWritten": 11})
        self.assertIn(sid, self.listed_sessions())
        self.assertEqual(self.stdout_of(sid, "cat note.txt"), "from write\n")

    def test_create_session_explicitly(self):
        sid = self.session()
        status, _, body = self.d.post("/exec/", body={
            "id": sid, "template": TEMPLATE, "env": {"GREETING": "hi there"},
            "idleTimeout": 120})
        self.assertEqual(status, 201, body)
        self.assertEqual(body["id"], sid)
        self.assertEqual(body["template"], TEMPLATE)
        self.assertEqual(body["state"], "ready")
        self.assertEqual(body["idleTimeout"], 120)
        for key in ("createdAt", "lastActivity", "running", "idleMs"):
            self.assertIn(key, body)
        # The session's environment applies to its commands; a request's own env wins.
        self.assertEqual(self.stdout_of(sid, 'echo "$GREETING"'), "hi there\n")
        self.assertEqual(self.stdout_of(sid, 'echo "$GREETING"', env={"GREETING": "over"}),
                         "over\n")

    @tag("driver")
    def test_create_session_with_its_own_resources(self):
        MiB = 1024 * 1024
        sid = self.session()
        _, _, health = self.d.get("/health")
        if health["isolation"] == "vm":
            # A VM's memory is its template's: per-session memory and pids limits are refused.
            status, headers, body = self.d.post("/exec/", body={
                "id": sid, "resources": {"memoryBytes": 32 * MiB}})
            self.assertJsonError(status, headers, body, 400, "memSizeMib")
            status, _, body = self.d.post("/exec/", body={
                "id": sid, "resources": {"diskBytes": 2 * MiB}})
            self.assertEqual(status, 201, body)
            size_kib = int(self.stdout_of(sid, "df -k . | tail -n 1").split()[1])
            self.assertLessEqual(size_kib, 2048)
            self.assertGreater(size_kib, 1024)
            return
        status, _, body = self.d.post("/exec/", body={
            "id": sid, "resources": {"memoryBytes": 32 * MiB, "diskBytes": 2 * MiB,
                                     "pidsMax": 32}})
        self.assertEqual(status, 201, body)
        size_kib = int(self.stdout_of(sid, "df -k . | tail -n 1").split()[1])
        self.assertLessEqual(size_kib, 2048)
        self.assertGreater(size_kib, 1024)
        # 48 MiB fits the server's limit but not this session's.
        dd = ["if=/dev/zero", "of=/dev/null", f"bs={48 * MiB}", "count=1"]
        status, body = self.execute(sid, "dd", args=dd)
        self.assertEqual(status, 200, body)
        self.assertEqual(body.get("signal"), "SIGKILL", body)
        self.assertIs(body.get("oomKilled"), True, body)
        other = self.session("default-resources")
        status, body = self.execute(other, "dd", args=dd)
        self.assertEqual((status, body.get("exitCode")), (200, 0), body)
        for bad in ({"memoryBytes": 1 << 50}, {"pidsMax": 2}, {"diskBytes": 0},
                    {"memoryBytes": "32M"}, {"gpus": 1}, []):
            with self.subTest(resources=bad):
                status, headers, body = self.d.post("/exec/", body={"resources": bad})
                self.assertJsonError(status, headers, body, 400, "resource")

    def test_create_session_without_slash_and_without_id(self):
        status, _, body = self.d.post("/exec", body={})
        self.assertEqual(status, 201, body)
        sid = body["id"]
        self.addCleanup(self.d.delete, f"/exec/{sid}", timeout=30)
        self.assertTrue(sid)
        self.assertEqual(body["template"], TEMPLATE)
        self.assertIn(sid, self.listed_sessions())

    def test_create_duplicate_session_is_409(self):
        sid = self.session()
        status, _, body = self.d.post("/exec/", body={"id": sid})
        self.assertEqual(status, 201, body)
        status, headers, body = self.d.post("/exec/", body={"id": sid})
        self.assertJsonError(status, headers, body, 409, sid)

    def test_create_with_unknown_template_names_the_available_ones(self):
        status, headers, body = self.d.post("/exec/", body={"template": "no-such-template"})
        self.assertJsonError(status, headers, body, 400, "no-such-template")
        self.assertIn(TEMPLATE, body["error"])
        # The same through implicit creation.
        sid = self.session()
        status, headers, body = self.d.post(f"/exec/{sid}/execute",
                                            body={"command": "true", "template": "nope"})
        self.assertJsonError(status, headers, body, 400, TEMPLATE)
        self.assertNotIn(sid, self.listed_sessions())

    def test_create_with_bad_fields_is_400(self):
        for bad in ({"id": "has space"}, {"id": 5}, {"template": 7}, {"env": "A=1"},
                    {"env": {"A": 1}}, {"idleTimeout": -1}, {"idleTimeout": "60"}):
            with self.subTest(body=bad):
                status, headers, body = self.d.post("/exec/", body=bad)
                self.assertJsonError(status, headers, body, 400)

    def test_templates(self):
        status, _, body = self.d.get("/exec/templates")
        self.assertEqual(status, 200, body)
        names = {t["name"]: t for t in body["templates"]}
        self.assertIn(TEMPLATE, names)
        t = names[TEMPLATE]
        for key in ("displayName", "version", "description", "createdAt"):
            self.assertIsInstance(t.get(key), str, t)
        self.assertIsInstance(t.get("tools"), list, t)
        self.assertIsInstance(t["resources"].get("memSizeMib"), int, t)
        self.assertIsInstance(t["resources"].get("vcpuCount"), int, t)

    def test_list_sessions(self):
        a, b = self.session("list-a"), self.session("list-b")
        self.run_ok(a, "true")
        self.run_ok(b, "true")
        status, _, body = self.d.get("/exec/")
        self.assertEqual(status, 200, body)
        self.assertEqual(body["count"], len(body["sessions"]))
        listed = {s["id"]: s for s in body["sessions"]}
        for sid in (a, b):
            s = listed[sid]
            self.assertEqual(s["state"], "ready")
            self.assertEqual(s["running"], 0)
            for key in ("template", "createdAt", "lastActivity", "idleTimeout", "idleMs"):
                self.assertIn(key, s)
        # Without the trailing slash too.
        status, _, body2 = self.d.get("/exec")
        self.assertEqual(status, 200, body2)
        self.assertIn(a, {s["id"] for s in body2["sessions"]})

    @tag("driver")
    def test_delete_session(self):
        sid = self.session()
        self.run_ok(sid, "true")
        status, _, body = self.d.delete(f"/exec/{sid}")
        self.assertEqual(status, 200, body)
        self.assertEqual(body, {"success": True, "id": sid, "destroyed": True})
        self.assertNotIn(sid, self.listed_sessions())
        # Gone: the reference's 200 with destroyed false (its SDK's destroy() returns it).
        status, _, body = self.d.delete(f"/exec/{sid}")
        self.assertEqual(status, 200, body)
        self.assertEqual((body["success"], body["id"], body["destroyed"]), (False, sid, False))
        self.assertIn(sid, body["message"])
        # A new session of the same name starts afresh.
        self.run_ok(sid, "echo x > f")
        self.run_ok(self.session(), "true")
        status, _, _ = self.d.delete(f"/exec/{sid}")
        self.assertEqual(status, 200)
        status, _, _ = self.d.post(f"/exec/{sid}/execute", body={"command": "test ! -e f"})
        self.assertEqual(status, 200)

    def test_invalid_session_id_is_400(self):
        for path in ("/exec/bad%20id/execute", "/exec/bad%2Fid/execute"):
            with self.subTest(path=path):
                status, headers, body = self.d.post(path, body={"command": "true"})
                self.assertJsonError(status, headers, body, 400)


class ExecuteTest(DaemonTestCase):
    @tag("driver")
    def test_buffered_result_shape(self):
        sid = self.session()
        status, body = self.execute(sid, "echo out; echo err >&2")
        self.assertEqual(status, 200, body)
        self.assertEqual(body["exitCode"], 0)
        self.assertNotIn("signal", body)
        self.assertIsInstance(body["duration"], (int, float))
        self.assertGreaterEqual(body["duration"], 0)
        self.assertIsInstance(body["execId"], str)
        self.assertTrue(body["execId"])
        for chunk in body["output"]:
            self.assertChunk(chunk)
        self.assertEqual(joined(body["output"], "stdout"), "out\n")
        self.assertEqual(joined(body["output"], "stderr"), "err\n")

    def test_command_with_args_is_not_run_through_a_shell(self):
        sid = self.session()
        out = self.stdout_of(sid, "echo", args=["$HOME", "a  b", ";", "*"])
        self.assertEqual(out, "$HOME a  b ; *\n")

    def _check_stream(self, items, expect_stdout):
        self.assertGreaterEqual(len(items), 2, items)
        start, result = items[0], items[-1]
        self.assertEqual(start["type"], "start", start)
        self.assertIsInstance(start["execId"], str)
        self.assertIsInstance(start["sessionId"], str)
        self.assertEqual(result["type"], "result", result)
        self.assertEqual(result["exitCode"], 3)
        self.assertIsInstance(result["duration"], (int, float))
        self.assertEqual(result["execId"], start["execId"])
        for item in items[1:-1]:
            self.assertChunk(item, streaming=True)
        self.assertEqual(joined(items[1:-1], "stdout"), expect_stdout)
        self.assertEqual(joined(items[1:-1], "stderr"), "e\n")
        return start

    def test_ndjson_by_accept_header(self):
        sid = self.session()
        # The pause makes "b" a chunk of its own, after the others.
        with self.stream_execute(sid, "echo a; echo e >&2; sleep 0.2; echo b; exit 3") as s:
            self.assertEqual(s.status, 200)
            self.assertIn("application/x-ndjson", s.headers.get("Content-Type", ""))
            items = list(s.ndjson())
        start = self._check_stream(items, "a\nb\n")
        self.assertEqual(start["sessionId"], sid)
        self.assertEqual(s.headers.get("X-Exec-Id"), start["execId"])

    def test_ndjson_by_query_parameter(self):
        sid = self.session()
        s = self.d.stream("POST", f"/exec/{sid}/execute?format=ndjson",
                          body={"command": "echo a; echo e >&2; exit 3"})
        with s:
            self.assertEqual(s.status, 200)
            self.assertIn("application/x-ndjson", s.headers.get("Content-Type", ""))
            items = list(s.ndjson())
        self._check_stream(items, "a\n")

    @tag("driver")
    def test_ndjson_lines_arrive_while_the_command_runs(self):
        sid = self.session()
        # The command ends only once the test has seen its first line.
        with self.stream_execute(sid, "echo first; " + until_file("go") + "echo second") as s:
            lines = s.ndjson()
            self.assertEqual(next(lines)["type"], "start")
            first = next(lines)
            self.assertEqual(first["data"], "first\n")
            self.assertEqual(self.listed_sessions()[sid]["running"], 1,
                             "the first line came only after the command ended")
            self.run_ok(sid, "touch go")
            rest = list(lines)
        self.assertEqual(rest[-1]["type"], "result")
        self.assertEqual(rest[-1]["exitCode"], 0)
        self.assertEqual(joined(rest[:-1]), "second\n")

    def test_sse(self):
        sid = self.session()
        by_header = self.stream_execute(sid, "echo a; echo e >&2; exit 3", mode="sse")
        by_query = self.d.stream("POST", f"/exec/{sid}/execute?format=sse",
                                 body={"command": "echo a; echo e >&2; exit 3"})
        for how, stream in (("Accept header", by_header), ("format=sse", by_query)):
            with self.subTest(how=how), stream as s:
                self.assertEqual(s.status, 200)
                self.assertIn("text/event-stream", s.headers.get("Content-Type", ""))
                events = parse_sse_data(s.sse())
                self.assertEqual(events[0]["event"], "start")
                self.assertEqual(events[-1]["event"], "result")
                for e in events[1:-1]:
                    self.assertEqual(e["event"], "stream")
                self._check_stream([e["data"] for e in events], "a\n")

    def test_output_chunks_never_split_a_utf8_character(self):
        sid = self.session()
        # "€" (3 bytes) and "😀" (4 bytes) written a byte or two at a time, with pauses so
        # that the pieces travel separately.
        script = ("i=0; while [ $i -lt 40 ]; do "
                  "printf '\\342'; usleep 1000; printf '\\202\\254\\360'; usleep 1000; "
                  "printf '\\237\\230'; usleep 1000; printf '\\200'; "
                  "printf '\\342\\202' >&2; usleep 500; printf '\\254' >&2; "
                  "i=$((i+1)); done")
        expected = "€😀" * 40
        body = self.run_ok(sid, script)
        chunks = body["output"]
        self.assertGreater(len(chunks), 1, "the output came in one piece: nothing was tested")
        for c in chunks:
            self.assertNotIn("\ufffd", c["data"], f"a chunk holds a broken character: {c}")
        self.assertEqual(joined(chunks, "stdout"), expected)
        self.assertEqual(joined(chunks, "stderr"), "€" * 40)
        with self.stream_execute(sid, script) as s:
            items = list(s.ndjson())
        for c in items[1:-1]:
            self.assertNotIn("\ufffd", c["data"], f"a line holds a broken character: {c}")
        self.assertEqual(joined(items[1:-1], "stdout"), expected)

    def test_invalid_utf8_output_is_replaced_not_dropped(self):
        sid = self.session()
        body = self.run_ok(sid, "printf 'a\\377b'")
        self.assertEqual(joined(body["output"], "stdout"), "a\ufffdb")

    def test_nonzero_exit_code(self):
        sid = self.session()
        status, body = self.execute(sid, "echo partial; exit 7")
        self.assertEqual(status, 200, body)
        self.assertEqual(body["exitCode"], 7)
        self.assertIsNone(body.get("signal"))
        self.assertEqual(joined(body["output"]), "partial\n")

    @tag("driver")
    def test_killed_by_a_signal(self):
        sid = self.session()
        for sig in ("KILL", "TERM", "SEGV"):
            with self.subTest(sig=sig):
                status, body = self.execute(sid, "sh", args=["-c", f"kill -{sig} $$"])
                self.assertEqual(status, 200, body)
                self.assertIsNone(body["exitCode"], body)
                self.assertEqual(body.get("signal"), f"SIG{sig}", body)

    @tag("driver")
    def test_command_that_cannot_start_gives_its_reason(self):
        sid = self.session()
        self.run_ok(sid, "printf 'echo x' > script.sh; mkdir -p adir")
        cases = (
            ("no-such-command-xyz", {}, "No such file"),
            ("/bin/no-such-command", {"args": []}, "No such file"),
            ("./script.sh", {"args": []}, "Permission denied"),
            ("./adir", {"args": []}, "Permission denied"),
            ("true", {"cwd": "no/such/dir"}, "No such file"),
        )
        for command, extra, reason in cases:
            with self.subTest(command=command, **extra):
                status, headers, body = self.d.post(
                    f"/exec/{sid}/execute", body={"command": command, **extra})
                self.assertNotEqual(status, 200, body)
                self.assertJsonError(status, headers, body, status, reason)
                self.assertGreaterEqual(status, 400)
                self.assertLess(status, 500, body)
        with self.stream_execute(sid, "no-such-command-xyz") as s:
            items = list(s.ndjson())
        self.assertEqual(items[0]["type"], "start", items)
        self.assertEqual(items[-1]["type"], "error", items)
        self.assertIn("No such file", items[-1]["error"])
        self.assertEqual(items[-1]["execId"], items[0]["execId"])

    @tag("driver")
    def test_env(self):
        sid = self.session()
        out = self.stdout_of(sid, 'echo "$FOO|$EMPTY|$UNI"; echo "$PATH" | grep -c bin',
                             env={"FOO": "bar baz", "EMPTY": "", "UNI": "ü€"})
        self.assertEqual(out, "bar baz||ü€\n1\n")
        # Nothing leaks from one command to the next.
        self.assertEqual(self.stdout_of(sid, 'echo "[$FOO]"'), "[]\n")

    @tag("driver")
    def test_cwd(self):
        sid = self.session()
        home = self.stdout_of(sid, "pwd").strip()
        self.assertTrue(home.startswith("/"), home)
        self.run_ok(sid, "mkdir -p sub/dir")
        self.assertEqual(self.stdout_of(sid, "pwd", cwd="sub/dir"), f"{home}/sub/dir\n")
        self.assertEqual(self.stdout_of(sid, "pwd", cwd=f"{home}/sub"), f"{home}/sub\n")
        # The working directory does not stick to the session.
        self.assertEqual(self.stdout_of(sid, "pwd"), f"{home}\n")
        status, headers, body = self.d.post(f"/exec/{sid}/execute",
                                            body={"command": "pwd", "cwd": "../.."})
        self.assertJsonError(status, headers, body, 400)

    @tag("driver")
    def test_stdin(self):
        sid = self.session()
        self.assertEqual(self.stdout_of(sid, "cat", stdin="line1\nline2\n"), "line1\nline2\n")
        self.assertEqual(self.stdout_of(sid, "cat", stdin=""), "")
        big = "0123456789abcdef" * 65536  # 1 MiB
        self.assertEqual(self.stdout_of(sid, "wc -c", stdin=big).strip(), str(len(big)))
        self.assertEqual(self.stdout_of(sid, "cat", stdin="ü€😀\n"), "ü€😀\n")
        # Without stdin a command reading it sees end of file at once.
        self.assertEqual(self.stdout_of(sid, "cat", http_timeout=20), "")

    @tag("driver")
    def test_timeout_is_honoured(self):
        sid = self.session()
        # A command that outlives its timeout by far, on purpose.
        status, body = self.execute(sid, "echo started; sleep 30", timeout=1500)
        self.assertEqual(status, 200, body)
        self.assertTrue(body.get("timedOut"), body)
        self.assertIsNone(body["exitCode"], body)
        self.assertIn(body.get("signal"), ("SIGTERM", "SIGKILL"), body)
        self.assertEqual(joined(body["output"]), "started\n")
        self.assertGreaterEqual(body["duration"], 1400, body)

    def test_long_timeout_is_not_capped(self):
        sid = self.session()
        # Longer than any cap a timeout might be cut to (30 s), on purpose.
        status, body = self.execute(sid, "sleep 32; echo done", timeout=120_000)
        self.assertEqual(status, 200, body)
        self.assertEqual(body["exitCode"], 0, body)
        self.assertNotIn("timedOut", body)
        self.assertEqual(joined(body["output"]), "done\n")
        self.assertGreaterEqual(body["duration"], 32_000)

    def test_bad_timeouts_are_400(self):
        sid = self.session()
        for bad in (-1, "10", True, 10**16):
            with self.subTest(timeout=bad):
                status, headers, body = self.d.post(
                    f"/exec/{sid}/execute", body={"command": "true", "timeout": bad})
                self.assertJsonError(status, headers, body, 400, "timeout")

    @tag("driver")
    def test_cancel_by_exec_id(self):
        sid = self.session()
        # Long enough that only the cancel can end it.
        with self.stream_execute(sid, "echo go; sleep 30; echo never") as s:
            lines = s.ndjson()
            start = next(lines)
            self.assertEqual(next(lines)["data"], "go\n")
            status, _, body = self.d.post(f"/exec/{sid}/cancel",
                                          body={"execId": start["execId"]})
            self.assertEqual(status, 202, body)
            self.assertEqual(body, {"cancelled": True, "execId": start["execId"]})
            rest = list(lines)
        result = rest[-1]
        self.assertEqual(result["type"], "result", rest)
        self.assertTrue(result.get("cancelled"), result)
        self.assertIsNone(result["exitCode"], result)
        self.assertEqual(result.get("signal"), "SIGTERM", result)
        self.assertNotIn("never", joined(rest[:-1]))
        # The command is over: cancelling again finds nothing.
        status, headers, body = self.d.post(f"/exec/{sid}/cancel",
                                            body={"execId": start["execId"]})
        self.assertJsonError(status, headers, body, 404, start["execId"])

    def test_cancel_errors(self):
        sid = self.session()
        self.run_ok(sid, "true")
        status, headers, body = self.d.post(f"/exec/{sid}/cancel", body={})
        self.assertJsonError(status, headers, body, 400, "execId")
        status, headers, body = self.d.post(f"/exec/{sid}/cancel", body={"execId": 12})
        self.assertJsonError(status, headers, body, 400, "execId")
        status, headers, body = self.d.post(f"/exec/{sid}/cancel",
                                            body={"execId": "exec_0000"})
        self.assertJsonError(status, headers, body, 404)
        status, headers, body = self.d.post("/exec/no-such-session-x/cancel",
                                            body={"execId": "exec_0000"})
        self.assertJsonError(status, headers, body, 404)

    @tag("driver")
    def test_command_ignoring_sigterm_is_killed_on_cancel(self):
        sid = self.session()
        # It ignores SIGTERM and would run a minute: only SIGKILL ends it in time.
        cmd = "trap '' TERM; echo armed; sleep 60"
        with self.stream_execute(sid, cmd) as s:
            lines = s.ndjson()
            start = next(lines)
            self.assertEqual(next(lines)["data"], "armed\n")
            status, _, body = self.d.post(f"/exec/{sid}/cancel",
                                          body={"execId": start["execId"]})
            self.assertEqual(status, 202, body)
            result = list(lines)[-1]
        self.assertEqual(result["type"], "result", result)
        self.assertEqual(result.get("signal"), "SIGKILL", result)
        self.assertTrue(result.get("cancelled"), result)
        self.assertNotIn("sleep 60", self.stdout_of(sid, "ps -o pid,args"))

    def test_command_ignoring_sigterm_is_killed_on_timeout(self):
        sid = self.session()
        # It ignores SIGTERM and would run a minute: only SIGKILL ends it in time.
        status, body = self.execute(sid, "trap '' TERM; sleep 60", timeout=1000)
        self.assertEqual(status, 200, body)
        self.assertTrue(body.get("timedOut"), body)
        self.assertEqual(body.get("signal"), "SIGKILL", body)
        self.assertNotIn("sleep 60", self.stdout_of(sid, "ps -o pid,args"))

    @tag("driver")
    def test_background_processes_of_a_timed_out_command_are_killed(self):
        sid = self.session()
        # Both would outlive the test: they are gone only if the timeout killed them.
        status, body = self.execute(sid, "sleep 61 & sleep 62", timeout=1000)
        self.assertEqual(status, 200, body)
        self.assertTrue(body.get("timedOut"), body)
        ps = self.stdout_of(sid, "ps -o pid,args")
        self.assertNotIn("sleep 61", ps)
        self.assertNotIn("sleep 62", ps)

    # A command that would leave a marker a minute in, were it not cancelled.
    MARKED = "sleep 60; touch marker"

    def _disconnect_and_check(self, sid, start_request):
        start_request()
        # The command is cancelled: the session has nothing running any more...
        wait_until(lambda: self.listed_sessions()[sid]["running"] == 0, 30,
                   what="the command to stop after the client went away")
        # ...its processes are gone, so nothing will ever make the marker...
        self.wait_processes_gone(sid, "touch marker",
                                 "the command's processes to go after the client went away")
        # ...and there is none.
        self.assertEqual(self.stdout_of(sid, "test -e marker && echo yes || echo no"), "no\n")

    @tag("driver")
    def test_streaming_client_disconnect_cancels_the_command(self):
        sid = self.session()
        self.run_ok(sid, "true")

        def start():
            s = self.stream_execute(sid, self.MARKED)
            start_line = next(s.ndjson())
            self.assertEqual(start_line["type"], "start")
            self.assertEqual(self.listed_sessions()[sid]["running"], 1)
            s.close()

        self._disconnect_and_check(sid, start)

    def test_buffered_client_disconnect_cancels_the_command(self):
        sid = self.session()
        self.run_ok(sid, "true")

        def start():
            conn = socket.create_connection((self.d.host, self.d.port), timeout=10)
            body = json.dumps({"command": self.MARKED}).encode()
            conn.sendall(
                f"POST /exec/{sid}/execute HTTP/1.1\r\nHost: localhost\r\n"
                f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n"
                .encode() + body)
            wait_until(lambda: self.listed_sessions()[sid]["running"] == 1, 10,
                       what="the command to start")
            conn.close()

        self._disconnect_and_check(sid, start)

    @tag("driver")
    def test_deleting_the_session_ends_its_running_commands(self):
        sid = self.session()
        self.run_ok(sid, "true")
        outcome = {}

        # Both would run long past the test: only the DELETE ends them.
        def buffered():
            outcome["buffered"] = self.execute(sid, "sleep 30", http_timeout=60)

        t = threading.Thread(target=buffered)
        t.start()
        with self.stream_execute(sid, "sleep 30") as s:
            lines = s.ndjson()
            self.assertEqual(next(lines)["type"], "start")
            wait_until(lambda: self.listed_sessions()[sid]["running"] == 2, 30,
                       what="both commands to run")
            status, _, body = self.d.delete(f"/exec/{sid}")
            self.assertEqual(status, 200, body)
            rest = list(lines)
        t.join(30)
        self.assertFalse(t.is_alive(), "the buffered command was not answered after DELETE")
        self.assertEqual(rest[-1]["type"], "error", rest)
        self.assertTrue(rest[-1]["error"], rest)
        status, body = outcome["buffered"]
        self.assertGreaterEqual(status, 500, body)
        self.assertIsInstance(body.get("error"), str, body)

    @tag("driver")
    def test_twenty_concurrent_executes_in_one_session(self):
        sid = self.session()
        self.run_ok(sid, "true")
        results = [None] * 20

        def one(i):
            try:
                # The pause keeps the twenty running at the same time.
                results[i] = self.execute(sid, f"echo start {i}; sleep 1; echo end {i}",
                                          http_timeout=60)
            except Exception as e:  # reported below, with the others
                results[i] = ("exception", repr(e))

        threads = [threading.Thread(target=one, args=(i,)) for i in range(20)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(90)
        for i, r in enumerate(results):
            with self.subTest(i=i):
                self.assertIsNotNone(r, "no answer")
                status, body = r
                self.assertEqual(status, 200, body)
                self.assertEqual(body["exitCode"], 0, body)
                self.assertEqual(joined(body["output"]), f"start {i}\nend {i}\n")
        self.assertEqual(len({r[1]["execId"] for r in results}), 20)


class RequestErrorsTest(DaemonTestCase):
    def _raw(self, method, path, body=b"", headers=None):
        h = {"Content-Type": "application/json", **(headers or {})}
        return self.d.request(method, path, body=body, headers=h, timeout=30)

    def test_malformed_json_is_400(self):
        sid = self.session()
        for raw in (b"{bad", b'{"command": "true"', b"\xff\xfe", b'{"a":1,"a":2}'):
            with self.subTest(body=raw):
                status, headers, body = self._raw("POST", f"/exec/{sid}/execute", raw)
                self.assertJsonError(status, headers, body, 400)
        self.assertNotIn(sid, self.listed_sessions())

    def test_body_must_be_an_object(self):
        sid = self.session()
        for raw in (b"[]", b'"x"', b"12", b"null"):
            with self.subTest(body=raw):
                status, headers, body = self._raw("POST", f"/exec/{sid}/execute", raw)
                self.assertJsonError(status, headers, body, 400)

    def test_wrong_types_are_400(self):
        sid = self.session()
        cases = (
            ("execute", {}, "command"),
            ("execute", {"command": ""}, "command"),
            ("execute", {"command": 5}, "command"),
            ("execute", {"command": "echo", "args": "x"}, "args"),
            ("execute", {"command": "echo", "args": [1]}, "args"),
            ("execute", {"command": "true", "env": ["A=1"]}, "env"),
            ("execute", {"command": "true", "env": {"A": 1}}, "env"),
            ("execute", {"command": "true", "env": {"A=B": "1"}}, "env"),
            ("execute", {"command": "true", "cwd": 1}, "cwd"),
            ("execute", {"command": "cat", "stdin": 1}, "stdin"),
            ("execute", {"command": "true", "template": []}, "template"),
            ("write", {"content": "x"}, "path"),
            ("write", {"path": "x"}, "content"),
            ("write", {"path": "x", "content": 5}, "content"),
            ("write", {"path": 5, "content": "x"}, "path"),
            ("write", {"path": "x", "content": "x", "encoding": "hex"}, "encoding"),
            ("write", {"path": "x", "content": "!!", "encoding": "base64"}, "base64"),
            ("write", {"path": "x", "content": "x", "mode": "0644"}, "mode"),
            ("write", {"path": "x", "content": "x", "mode": 65536}, "mode"),
        )
        for route, payload, fragment in cases:
            with self.subTest(route=route, body=payload):
                status, headers, body = self.d.post(f"/exec/{sid}/{route}", body=payload)
                self.assertJsonError(status, headers, body, 400, fragment)

    def test_unknown_route_is_404_json(self):
        for method, path in (("GET", "/"), ("GET", "/nope"), ("POST", "/exec/a/b/c"),
                             ("GET", "/exec/x/unknown"), ("GET", "/healthz")):
            with self.subTest(method=method, path=path):
                status, headers, body = self.d.request(method, path, timeout=30)
                self.assertJsonError(status, headers, body, 404)

    def test_wrong_method_is_405_json(self):
        for method, path in (("PUT", "/exec/x/execute"), ("GET", "/exec/x/execute"),
                             ("POST", "/health"), ("DELETE", "/health"),
                             ("PATCH", "/exec/"), ("POST", "/exec/x/read"),
                             ("GET", "/exec/x/write"), ("GET", "/exec/x/cancel")):
            with self.subTest(method=method, path=path):
                status, headers, body = self.d.request(method, path, timeout=30)
                self.assertJsonError(status, headers, body, 405)

    def test_errors_are_never_html(self):
        conn = socket.create_connection((self.d.host, self.d.port), timeout=10)
        try:
            conn.sendall(b"THIS IS NOT HTTP\r\n\r\n")
            data = b""
            while True:
                part = conn.recv(65536)
                if not part:
                    break
                data += part
        except socket.timeout:
            pass
        finally:
            conn.close()
        if data:  # the server may also just close the connection
            self.assertNotIn(b"<html", data.lower())
            self.assertIn(b"application/json", data)


class HealthTest(DaemonTestCase):
    @tag("driver")
    def test_health(self):
        status, headers, body = self.d.get("/health")
        self.assertEqual(status, 200, body)
        self.assertIn("application/json", headers.get("Content-Type", ""))
        self.assertEqual(body["status"], "ok")
        self.assertIsInstance(body["uptime"], (int, float))
        self.assertGreaterEqual(body["uptime"], 0)
        self.assertIsInstance(body["version"], str)
        self.assertEqual(body["driver"], harness.driver())
        self.assertIn(body["isolation"], ("container", "vm"))
        self.assertIsInstance(body["sessions"], int)
        self.assertIsInstance(body["warmPool"], int)
        # Per template, adding up to warmPool; the default template has a pool.
        pools = body["warmPools"]
        self.assertEqual(sum(pools.values()), body["warmPool"], body)
        self.assertIn(helpers_exec.TEMPLATE, pools)

    def test_health_counts_sessions(self):
        before = self.d.get("/health")[2]["sessions"]
        sid = self.session()
        self.run_ok(sid, "true")
        self.assertEqual(self.d.get("/health")[2]["sessions"], before + 1)
        self.d.delete(f"/exec/{sid}")
        self.assertEqual(self.d.get("/health")[2]["sessions"], before)

    def test_ready(self):
        status, headers, body = self.d.get("/ready")
        self.assertEqual(status, 200, body)
        self.assertIn("application/json", headers.get("Content-Type", ""))
        self.assertEqual(body["status"], "ready")
        self.assertEqual(body["failing"], [])


class MetricsRouteTest(DaemonTestCase):
    """/metrics answers in the Prometheus text format (auth is off here)."""

    def test_metrics(self):
        sid = self.session()
        self.run_ok(sid, "true")
        status, headers, body = self.d.get("/metrics")
        self.assertEqual(status, 200)
        self.assertIn("text/plain", headers.get("Content-Type", ""))
        text = body.decode()
        for name in ("exec_message_total", "active_vm_count", "exec_sessions_active"):
            self.assertIn(f"# TYPE {name} ", text)
        self.assertRegex(text, r'exec_message_total\{type="execute"\} [1-9]')



class AdminKeysRouteTest(DaemonTestCase):
    """/admin/keys answers with its documented shapes (auth is off here)."""

    def test_admin_keys(self):
        status, _, key = self.d.post("/admin/keys", body={"name": "it-key", "scopes": ["exec"],
                                                          "rateLimit": 60})
        self.assertEqual(status, 201, key)
        self.assertTrue(key["key"].startswith("sk_test_"), key)
        for field in ("id", "name", "prefix", "scopes", "rateLimit", "enabled", "createdAt"):
            self.assertIn(field, key)
        kid = key["id"]
        status, _, body = self.d.get("/admin/keys")
        self.assertEqual(status, 200, body)
        listed = {k["id"]: k for k in body["keys"]}
        self.assertIn(kid, listed)
        self.assertNotIn("key", listed[kid], "a listed key shows its secret")
        status, _, rotated = self.d.post(f"/admin/keys/{kid}/rotate")
        self.assertEqual(status, 200, rotated)
        self.assertNotEqual(rotated["key"], key["key"])
        status, _, body = self.d.post(f"/admin/keys/{kid}/revoke")
        self.assertEqual((status, body), (200, {"success": True, "id": kid,
                                                "message": f"Key {kid} revoked"}))
        status, _, body = self.d.get("/admin/keys")
        self.assertFalse({k["id"]: k for k in body["keys"]}[kid]["enabled"])
        status, _, body = self.d.delete(f"/admin/keys/{kid}")
        self.assertEqual((status, body), (200, {"success": True, "id": kid,
                                                "message": f"Key {kid} deleted"}))
        for method, path in (("DELETE", f"/admin/keys/{kid}"),
                             ("POST", f"/admin/keys/{kid}/revoke"),
                             ("POST", f"/admin/keys/{kid}/rotate")):
            with self.subTest(method=method, path=path):
                status, headers, body = self.d.request(method, path, timeout=30)
                self.assertJsonError(status, headers, body, 404)
        status, headers, body = self.d.post("/admin/keys", body={"scopes": ["exec"]})
        self.assertJsonError(status, headers, body, 400, "name")


if __name__ == "__main__":
    unittest.main()
