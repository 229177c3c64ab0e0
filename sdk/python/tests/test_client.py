"""The Python SDK against a real sandboxd (started by the integration harness)."""

import os
import socket
import sys
import threading
import unittest
import warnings

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, "..", "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "tests", "integration"))
sys.path.insert(0, os.path.join(HERE, ".."))

import harness  # noqa: E402
from agent_sandbox import Sandbox, SandboxError  # noqa: E402


class SdkTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.daemon = harness.Daemon(env={"SANDBOX_DEFAULT_TEMPLATE": "base",
                                         "SANDBOX_WARM_POOL": "1"})
        cls.daemon.start()
        cls.sb = Sandbox(base_url=cls.daemon.base_url, api_key=cls.daemon.admin_key)

    @classmethod
    def tearDownClass(cls):
        cls.daemon.stop()

    def test_health_and_templates(self):
        self.assertTrue(self.sb.healthy())
        names = [t["name"] for t in self.sb.templates()]
        self.assertIn("base", names)

    def test_exec_and_files(self):
        with self.sb.create(template="base") as s:
            r = s.exec("echo", ["hi"])
            self.assertEqual(r.exit_code, 0)
            self.assertEqual(r.stdout, "hi\n")
            r = s.run("echo oops >&2; exit 4")
            self.assertEqual(r.exit_code, 4)
            self.assertEqual(r.stderr, "oops\n")
            data = bytes(range(256)) * 64
            self.assertEqual(s.write_file("bin/data", data), len(data))
            self.assertEqual(s.read_bytes("bin/data"), data)
            s.write_file("t.txt", "héllo")
            self.assertEqual(s.read_file("t.txt"), "héllo")
            names = sorted(e.path for e in s.list_files(recursive=True))
            self.assertIn("bin/data", names)
            self.assertIn("t.txt", names)
            sid = s.id
        ids = [x["id"] for x in self.sb.sessions()]
        self.assertNotIn(sid, ids)

    def test_stat_mkdir_move_remove(self):
        with self.sb.create(template="base") as s:
            s.mkdir("a/b")
            self.assertEqual(s.stat("a/b").type, "dir")
            s.write_file("a/b/f.txt", "hey")
            s.move("a/b/f.txt", "c/g.txt")
            st = s.stat("c/g.txt")
            self.assertEqual((st.type, st.size, st.path), ("file", 3, "c/g.txt"))
            self.assertFalse(s.exists("a/b/f.txt"))
            with self.assertRaises(SandboxError) as cm:
                s.remove("a")
            self.assertEqual(cm.exception.status, 409)
            s.remove("a", recursive=True)
            self.assertFalse(s.exists("a"))
            with self.assertRaises(SandboxError) as cm:
                s.move("c", "../out")
            self.assertEqual(cm.exception.status, 400)

    def test_stream_and_errors(self):
        s = self.sb.session(template="base")
        events = list(s.exec_stream("sh", ["-c", "echo a; echo b >&2"]))
        self.assertEqual(events[0].type, "start")
        self.assertEqual(events[-1].type, "result")
        self.assertEqual(events[-1].exit_code, 0)
        out = "".join(e.data for e in events if e.type == "stream" and e.stream == "stdout")
        self.assertEqual(out, "a\n")
        with self.assertRaises(SandboxError) as cm:
            s.read_file("../etc/passwd")
        self.assertEqual(cm.exception.status, 400)
        with self.assertRaises(SandboxError) as cm:
            s.read_file("missing")
        self.assertEqual(cm.exception.status, 404)
        self.assertIs(s.destroy(), True)
        self.assertIs(s.destroy(), False)  # no such session: destroyed false, not an error

    def test_create_is_lazy(self):
        s = self.sb.create(template="base")
        self.assertNotIn(s.id, [x["id"] for x in self.sb.sessions()])
        self.assertEqual(s.exec("true").exit_code, 0)
        self.assertIn(s.id, [x["id"] for x in self.sb.sessions()])
        s.destroy()
        now = self.sb.create_session(template="base", idle_timeout_s=60)
        self.assertIn(now.id, [x["id"] for x in self.sb.sessions()])
        now.destroy()

    def test_create_with_old_arguments_warns_and_creates_now(self):
        with self.assertWarns(DeprecationWarning):
            s = self.sb.create(template="base", idle_timeout=60)
        info = [x for x in self.sb.sessions() if x["id"] == s.id]
        self.assertEqual(len(info), 1)
        self.assertEqual(info[0]["idleTimeout"], 60)
        s.destroy()

    def test_run_code_follows_the_daemons_template(self):
        # No template on the handle: the daemon's default (base) decides, not node.
        with self.sb.create() as s:
            r = s.run_code("echo $((2+2))")
            self.assertEqual(r.stdout, "4\n")
            self.assertEqual(s.template, "base")
        existing = self.sb.create_session(template="base")
        handle = self.sb.session(existing.id)
        self.assertEqual(handle.run_code("echo ok").stdout, "ok\n")
        existing.destroy()

    def test_exec_timeout_is_milliseconds(self):
        with self.sb.create(template="base") as s:
            r = s.exec("sleep", ["5"], timeout_ms=300)
            self.assertTrue(r.timed_out)
            self.assertLess(r.duration, 4000)
            with self.assertWarns(DeprecationWarning):
                r = s.exec("sleep", ["5"], timeout=0.3)
            self.assertTrue(r.timed_out)

    def test_command_longer_than_the_http_timeout(self):
        # The execute waits for the command's timeout plus a margin, not the client's 0.5 s.
        sb = Sandbox(base_url=self.daemon.base_url, api_key=self.daemon.admin_key,
                     http_timeout_ms=500)
        with sb.create(template="base") as s:
            r = s.exec("sleep", ["1.5"], timeout_ms=10000)
            self.assertEqual(r.exit_code, 0)
            events = list(s.exec_stream("sleep", ["1.5"], timeout_ms=10000))
            self.assertEqual(events[-1].exit_code, 0)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)
            old = Sandbox(base_url=self.daemon.base_url, api_key=self.daemon.admin_key,
                          timeout=0.5)
            with old.create(template="base") as s:
                self.assertEqual(s.exec("sleep", ["1.5"], timeout=10).exit_code, 0)

    def test_unreachable_daemon(self):
        bad = Sandbox(base_url="http://127.0.0.1:9", api_key="x", http_timeout_ms=2000)
        self.assertFalse(bad.healthy())
        with self.assertRaises(SandboxError) as cm:
            bad.templates()
        self.assertEqual(cm.exception.status, 0)

    def test_client_gives_up_on_a_silent_daemon(self):
        # A server that accepts and never answers: the client says it stopped waiting.
        srv = socket.socket()
        srv.bind(("127.0.0.1", 0))
        srv.listen(1)
        held = []
        t = threading.Thread(target=lambda: held.append(srv.accept()[0]), daemon=True)
        t.start()
        try:
            sb = Sandbox(base_url=f"http://127.0.0.1:{srv.getsockname()[1]}", api_key="x",
                         http_timeout_ms=300)
            with self.assertRaises(SandboxError) as cm:
                sb.health()
            self.assertEqual(cm.exception.status, 0)
            self.assertIn("no reply from sandboxd", cm.exception.message)
            self.assertIn("300 ms", cm.exception.message)
            self.assertNotIn("cannot reach", cm.exception.message)
        finally:
            t.join(5)
            for c in held:
                c.close()
            srv.close()

    def test_bad_key(self):
        bad = Sandbox(base_url=self.daemon.base_url, api_key="sk_test_" + "0" * 32)
        with self.assertRaises(SandboxError) as cm:
            bad.templates()
        self.assertEqual(cm.exception.status, 401)


if __name__ == "__main__":
    unittest.main()
