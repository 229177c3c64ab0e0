"""The Python SDK against a real sandboxd (started by the integration harness)."""

import os
import sys
import unittest

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
        s.destroy()
        with self.assertRaises(SandboxError) as cm:
            s.destroy()
        self.assertEqual(cm.exception.status, 404)

    def test_unreachable_daemon(self):
        bad = Sandbox(base_url="http://127.0.0.1:9", api_key="x", timeout=2)
        self.assertFalse(bad.healthy())
        with self.assertRaises(SandboxError) as cm:
            bad.templates()
        self.assertEqual(cm.exception.status, 0)

    def test_bad_key(self):
        bad = Sandbox(base_url=self.daemon.base_url, api_key="sk_test_" + "0" * 32)
        with self.assertRaises(SandboxError) as cm:
            bad.templates()
        self.assertEqual(cm.exception.status, 401)


if __name__ == "__main__":
    unittest.main()
