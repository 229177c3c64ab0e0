"""The Python SDK against a real sandboxd (started by the integration harness)."""

import os
import signal
import socket
import subprocess
import sys
import time
import threading
import unittest
import warnings
from datetime import datetime

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

    def test_volumes_and_root(self):
        if harness.driver() != "jail":
            self.skipTest("volumes are mounted by the jail driver")
        v = self.sb.create_volume("sdk-py", 16 * 1024 * 1024)
        self.assertEqual((v["name"], v["state"]), ("sdk-py", "ready"))
        self.assertIn("sdk-py", [x["name"] for x in self.sb.volumes()])
        with self.sb.create_session(template="base",
                                    volumes=[{"name": "sdk-py", "path": "/data"}]) as s:
            self.assertEqual(s.run("echo kept > /data/f && stat -c %u /data/f").stdout, "1000\n")
            self.assertEqual(s.run("id -u", user="root").stdout, "0\n")
            with self.assertRaises(SandboxError) as cm:
                self.sb.delete_volume("sdk-py")
            self.assertEqual(cm.exception.status, 409)
        for _ in range(100):  # released once the sandbox is gone
            try:
                self.sb.delete_volume("sdk-py")
                break
            except SandboxError as e:
                self.assertEqual(e.status, 409)
                time.sleep(0.1)
        with self.assertRaises(SandboxError) as cm:
            self.sb.volume("sdk-py")
        self.assertEqual(cm.exception.status, 404)

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

    def test_watch(self):
        with self.sb.create(template="base") as s:
            s.mkdir("w")
            # Bounded: a missed event fails the test instead of hanging it.
            with s.watch("w", recursive=True, timeout_ms=60000) as w:
                self.assertEqual(w.watches, 1)
                s.run("mkdir w/d")
                seen = []
                for ev in w:
                    seen.append((ev.type, ev.path, ev.from_path))
                    if ev.type == "create" and ev.path == "w/d":
                        # Watched now: what happens in it from here on is seen. (Files
                        # made and gone in a new directory before its watch is set are
                        # not, as with inotify itself.)
                        s.run("echo hi > w/d/f && mv w/d/f w/d/g && rm w/d/g")
                    if ev.type == "remove":
                        break
            self.assertEqual(seen[:2], [("create", "w/d", None), ("create", "w/d/f", None)])
            self.assertIn(("rename", "w/d/g", "w/d/f"), seen)
            self.assertEqual(seen[-1], ("remove", "w/d/g", None))
            w = s.watch("w", timeout_ms=200)
            self.assertEqual(list(w), [])
            self.assertTrue(w.end["timedOut"])
            for bad, status in (("../etc", 400), ("missing", 404)):
                with self.assertRaises(SandboxError) as cm:
                    s.watch(bad)
                self.assertEqual(cm.exception.status, status)

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

    def test_create_session_with_storage_and_disk(self):
        s = self.sb.create_session(template="base", storage="tmpfs",
                                   resources={"diskBytes": 32 << 20})
        info = [x for x in self.sb.sessions() if x["id"] == s.id][0]
        self.assertEqual(info["storage"], "tmpfs")
        self.assertEqual(info["resources"], {"diskBytes": 32 << 20, "storage": "tmpfs"})
        s.destroy()

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

    def test_attach_after_the_starter_died_gets_replay_then_live_output(self):
        # Another client starts a counter whose second half waits for a line on its stdin,
        # attaches to it, and is killed in the middle of its attach.
        n, half = 400, 200
        loop = "for i in $(seq %d %d); do echo $i; sleep 0.01; done"
        script = f"{loop % (1, half)}; read _; {loop % (half + 1, n)}"
        starter = (
            "import sys\n"
            "from agent_sandbox import Sandbox\n"
            "s = Sandbox(base_url=sys.argv[1], api_key=sys.argv[2]).session(sys.argv[3], 'base')\n"
            "p = s.start_process(sys.argv[4], tag='seq', stdin=True)\n"
            "print(p['pid'], flush=True)\n"
            "for ev in s.attach('seq'):\n"
            "    if ev['type'] == 'stream':\n"
            "        print('attached', flush=True)\n"
        )
        with self.sb.create(template="base") as s:
            env = dict(os.environ, PYTHONPATH=os.path.join(HERE, ".."))
            proc = subprocess.Popen([sys.executable, "-c", starter, self.daemon.base_url,
                                     self.daemon.admin_key, s.id, script],
                                    stdout=subprocess.PIPE, env=env, text=True)
            try:
                pid = int(proc.stdout.readline())
                self.assertEqual(proc.stdout.readline(), "attached\n")
            finally:
                proc.send_signal(signal.SIGKILL)
                proc.wait()
                proc.stdout.close()
            time.sleep(5)
            self.assertEqual(s.process("seq")["state"], "running")
            text, result, sent = "", None, False
            for ev in s.attach("seq"):
                self.assertNotEqual(ev["type"], "gap", ev)
                self.assertNotEqual(ev["type"], "error", ev)
                if ev["type"] == "stream":
                    self.assertEqual(ev["stream"], "stdout")
                    text += ev["data"]
                    # The first half is the replay; the rest can only come live.
                    if not sent and text.endswith(f"\n{half}\n"):
                        s.send_stdin("seq", "go\n")
                        sent = True
                elif ev["type"] == "result":
                    result = ev["process"]
            self.assertTrue(sent)
            self.assertEqual(text, "".join(f"{i}\n" for i in range(1, n + 1)))
            self.assertEqual((result["pid"], result["state"], result["exitCode"]),
                             (pid, "exited", 0))
            self.assertEqual(s.wait_process(pid)["exitCode"], 0)
            self.assertEqual([p["pid"] for p in s.processes()], [pid])

    def test_process_stdin_signals_and_errors(self):
        with self.sb.create(template="base") as s:
            p = s.start_process("cat", tag="cat", stdin=True)
            self.assertEqual(p["state"], "running")
            self.assertEqual(s.send_stdin("cat", "héllo ")["bytes"], len("héllo ".encode()))
            self.assertEqual(s.send_stdin(p["pid"], b"\x00raw\xff\n")["bytes"], 6)
            s.close_stdin("cat")
            self.assertEqual(s.wait_process("cat", timeout_ms=60000)["exitCode"], 0)
            events = list(s.attach("cat", follow=False))
            self.assertEqual(events[0], {"type": "start", "pid": p["pid"]})
            self.assertEqual(events[-1]["type"], "result")
            out = "".join(e["data"] for e in events if e["type"] == "stream")
            self.assertEqual(out, "héllo \x00raw\ufffd\n")
            self.assertEqual(list(s.attach("cat", replay=4, follow=False))[1]["data"], "aw\ufffd\n")
            with self.assertRaises(SandboxError) as cm:
                s.send_stdin("cat", "late")
            self.assertGreaterEqual(cm.exception.status, 400)  # its stdin is closed
            # Signals, a wait that times out, a terminal.
            s.start_process("sleep", ["60"], tag="sl")
            with self.assertRaises(SandboxError) as cm:
                s.wait_process("sl", timeout_ms=200)
            self.assertEqual(cm.exception.status, 408)
            s.signal_process("sl", "TERM")
            self.assertEqual(s.wait_process("sl")["signal"], "SIGTERM")
            s.start_process("sleep", ["60"], tag="k")
            s.kill_process("k")
            self.assertEqual(s.wait_process("k")["signal"], "SIGKILL")
            s.start_process("sh", ["-c", "read _; stty size"], tag="t", pty=(30, 100))
            s.resize("t", 40, 120)
            s.send_stdin("t", "\n")
            s.wait_process("t")
            out = "".join(e.get("data", "") for e in s.attach("t", follow=False))
            self.assertIn("40 120", out)
            # Errors: the SDK's error type, with the status.
            for call in (lambda: s.process("nosuch"), lambda: s.process(999999),
                         lambda: list(s.attach("nosuch")), lambda: s.kill_process("nosuch"),
                         lambda: s.send_stdin("nosuch", "x")):
                with self.assertRaises(SandboxError) as cm:
                    call()
                self.assertEqual(cm.exception.status, 404)
            with self.assertRaises(SandboxError) as cm:
                s.start_process("sleep 60", replay_bytes=64 << 20)  # beyond the session's budget
            self.assertEqual(cm.exception.status, 429)
            with self.assertRaises(SandboxError) as cm:
                s.start_process("true", tag="bad/tag")
            self.assertEqual(cm.exception.status, 400)
            with self.assertRaises(SandboxError) as cm:
                s.signal_process("cat", "NOSUCHSIG")
            self.assertEqual(cm.exception.status, 400)

    def test_ports_and_previews(self):
        import http.client
        import urllib.parse
        from agent_sandbox import Port, Preview

        def get(url, headers=None):
            # As a browser would: a `*.localhost` host is the loopback, its name the Host.
            u = urllib.parse.urlsplit(url)
            conn = http.client.HTTPConnection(self.daemon.host, self.daemon.port, timeout=60)
            try:
                conn.request("GET", u.path + (f"?{u.query}" if u.query else ""),
                             headers={"Host": u.netloc, **(headers or {})})
                r = conn.getresponse()
                return r.status, r.headers, r.read()
            finally:
                conn.close()

        with self.sb.create_session(template="python") as s:
            s.write_file("page.txt", "the page\n")
            s.start_process("python3", ["-m", "http.server", "8000"])
            harness.wait_until(lambda: any(p.port == 8000 for p in s.ports()), 60, 0.1,
                               "the server to listen")
            p = next(p for p in s.ports() if p.port == 8000)
            pv = s.preview()
            self.assertIsInstance(p, Port)
            self.assertIsInstance(pv, Preview)
            host = f"{pv.name}.localhost:{self.daemon.port}"
            self.assertEqual((p.address, p.public, p.url, p.path_url),
                             ("0.0.0.0", False, f"http://8000-{host}/",
                              f"/exec/{pv.name}/ports/8000/"))
            self.assertTrue(pv.token.startswith("pt_"))
            self.assertEqual(s.preview_url(8000), p.url)
            path = s.preview_url(8000, form="path")
            self.assertEqual(path, f"{self.daemon.base_url}/exec/{pv.name}/ports/8000/")
            key = {"Authorization": f"Bearer {self.daemon.admin_key}"}
            for url in (p.url, path):
                self.assertEqual(get(url + "page.txt", key)[::2], (200, b"the page\n"))
            # The token URL lets a client without a key in; a rotated token stops working.
            self.assertEqual(get(p.url + "page.txt")[0], 401)
            shared = s.preview_url(8000, token=True)
            self.assertEqual(shared, f"{p.url}?sandbox_token={pv.token}")
            status, headers, _ = get(shared)
            self.assertEqual(status, 302)
            cookie = headers["Set-Cookie"].split(";")[0]
            self.assertEqual(get(p.url + "page.txt", {"Cookie": cookie})[0], 200)
            rotated = s.rotate_preview_token()
            self.assertNotEqual(rotated.token, pv.token)
            self.assertEqual(get(p.url + "page.txt", {"Cookie": cookie})[0], 401)
            # Public: anyone, until private again.
            self.assertEqual(s.set_port_public(8000).public_ports, [8000])
            self.assertTrue(next(p for p in s.ports() if p.port == 8000).public)
            self.assertEqual(get(p.url + "page.txt")[0], 200)
            self.assertEqual(s.set_port_public(8000, False).public_ports, [])
            self.assertEqual(get(p.url + "page.txt")[0], 401)
            # Errors: the server's, and the client's own.
            with self.assertRaises(SandboxError) as cm:
                s.set_port_public(0)
            self.assertEqual(cm.exception.status, 400)
            for bad in (0, 65536, "80", True):
                with self.assertRaises(ValueError):
                    s.preview_url(bad)
            with self.assertRaises(ValueError):
                s.preview_url(8000, form="nosuch")
        with self.assertRaises(SandboxError) as cm:
            self.sb.session("no-such-session").ports()
        self.assertEqual(cm.exception.status, 404)
        with self.assertRaises(SandboxError) as cm:
            self.sb.session("no-such-session").preview_url(8000)
        self.assertEqual(cm.exception.status, 404)

    def test_fork_refusals(self):
        # The forks themselves: tests/integration/test_fork.py (jail),
        # tests/e2e/test_qemu_lifecycle.py (qemu). A jail forks only a session with a disk.
        with self.sb.create_session(template="base", storage="tmpfs") as s:
            with self.assertRaises(SandboxError) as cm:
                s.fork(count=0)
            self.assertEqual(cm.exception.status, 400)
            with self.assertRaises(SandboxError) as cm:
                s.fork()
            self.assertEqual(cm.exception.status, 501)
            self.assertIn("disk", str(cm.exception))
            self.assertEqual(s.state, "ready")
        with self.assertRaises(SandboxError) as cm:
            self.sb.session("no-such-session").fork()
        self.assertEqual(cm.exception.status, 404)

    def test_snapshots(self):
        if harness.driver() != "jail":
            self.skipTest("a jail's snapshot is its disk's files (disk storage)")

        def refused(status, call, *args, **kw):
            with self.assertRaises(SandboxError) as cm:
                call(*args, **kw)
            self.assertEqual(cm.exception.status, status, (args, kw, cm.exception.message))

        def fields(x):
            return [x[k] for k in ("name", "session", "sizeBytes", "createdAt", "expiresAt")]

        def lasts(x):
            return (datetime.fromisoformat(x["expiresAt"].replace("Z", "+00:00")) -
                    datetime.fromisoformat(x["createdAt"].replace("Z", "+00:00"))).total_seconds()

        data = bytes((i * 7) % 256 for i in range(256 * 400))
        made = []
        src = self.sb.create_session(template="base", storage="disk")
        try:
            src.write_file("kept.bin", data)
            snap = src.snapshot("sdk-py-snap")
            self.assertEqual([snap[k] for k in ("name", "template", "driver", "session",
                                                "processesKept")],
                             ["sdk-py-snap", "base", "jail", src.id, False])
            self.assertIsInstance(snap["sizeBytes"], int)
            self.assertGreater(snap["sizeBytes"], 0)
            # Without ttl_seconds it lasts the server's SANDBOX_SNAPSHOT_TTL (a week by default).
            self.assertAlmostEqual(lasts(snap), 604800, delta=5)
            self.assertEqual(fields(self.sb.snapshot("sdk-py-snap")), fields(snap))
            listed = [x for x in self.sb.snapshots() if x["name"] == "sdk-py-snap"]
            self.assertEqual([fields(x) for x in listed], [fields(snap)])
            short = src.snapshot("sdk-py-short", ttl_seconds=60)
            self.assertAlmostEqual(lasts(short), 60, delta=5)
            self.assertEqual(self.sb.delete_snapshot("sdk-py-short"),
                             {"deleted": True, "name": "sdk-py-short"})
            # The source runs on; what it writes now is not in the snapshot.
            src.write_file("after.txt", "later")

            first = self.sb.create_session(snapshot="sdk-py-snap")
            made.append(first)
            self.assertEqual(first.template, "base")
            info = first.info()
            self.assertEqual((info["state"], info["template"], info["snapshot"]),
                             ("ready", "base", "sdk-py-snap"))
            self.assertEqual(first.read_bytes("kept.bin"), data)
            self.assertFalse(first.exists("after.txt"))
            # Each session has its own copy: the source and a second session do not see the
            # first's writes.
            first.write_file("kept.bin", "changed")
            first.write_file("mine.txt", "mine")
            self.assertEqual(src.read_bytes("kept.bin"), data)
            self.assertFalse(src.exists("mine.txt"))
            second = self.sb.create_session(snapshot="sdk-py-snap")
            made.append(second)
            self.assertEqual(second.read_bytes("kept.bin"), data)
            self.assertFalse(second.exists("mine.txt"))

            # Refusals.
            for bad in ("", "-dash-first", "a/b", "sp ace", "x" * 64):
                refused(400, src.snapshot, bad)
            for ttl in (0, -1, 604801):
                refused(400, src.snapshot, "sdk-py-ttl", ttl_seconds=ttl)
            refused(409, src.snapshot, "sdk-py-snap")
            refused(404, self.sb.session("no-such-session").snapshot, "sdk-py-x")
            refused(404, self.sb.snapshot, "no-such-snap")
            refused(404, self.sb.create_session, snapshot="no-such-snap")
            for extra in ({"template": "base"}, {"resources": {"memoryBytes": 256 << 20}},
                          {"resources": {"diskBytes": 64 << 20}}, {"storage": "disk"},
                          {"volumes": [{"name": "v", "path": "/data"}]}):
                refused(400, self.sb.create_session, snapshot="sdk-py-snap", **extra)
            src.pause()
            refused(409, src.snapshot, "sdk-py-paused")
            src.resume()
            # In a jail the disk is what is kept: a session without one cannot be snapshotted.
            tmpfs = self.sb.create_session(template="base", storage="tmpfs")
            made.append(tmpfs)
            refused(501, tmpfs.snapshot, "sdk-py-tmpfs")

            # Another key neither sees nor uses nor deletes it.
            status, _, key = self.daemon.post("/admin/keys",
                                              body={"name": "sdk-py-snap-other",
                                                    "scopes": ["exec"]})
            self.assertEqual(status, 201, key)
            other = Sandbox(base_url=self.daemon.base_url, api_key=key["key"])
            self.assertNotIn("sdk-py-snap", [x["name"] for x in other.snapshots()])
            refused(404, other.snapshot, "sdk-py-snap")
            refused(404, other.create_session, snapshot="sdk-py-snap")
            refused(404, other.delete_snapshot, "sdk-py-snap")
            self.assertEqual(self.sb.snapshot("sdk-py-snap")["name"], "sdk-py-snap")

            self.assertEqual(self.sb.delete_snapshot("sdk-py-snap"),
                             {"deleted": True, "name": "sdk-py-snap"})
            self.assertEqual(first.read_file("mine.txt"), "mine")  # it goes on
            refused(404, self.sb.snapshot, "sdk-py-snap")
            refused(404, self.sb.delete_snapshot, "sdk-py-snap")
            self.assertNotIn("sdk-py-snap", [x["name"] for x in self.sb.snapshots()])
            refused(404, self.sb.create_session, snapshot="sdk-py-snap")
        finally:
            for s in made + [src]:
                s.destroy()
            for name in ("sdk-py-snap", "sdk-py-short"):
                try:
                    self.sb.delete_snapshot(name)
                except SandboxError:
                    pass

    def test_pause_and_resume(self):
        with self.sb.create_session(template="base") as s:
            s.start_process("i=0; while :; do i=$((i+1)); echo $i > c.tmp && mv c.tmp count; "
                            "sleep 0.01; done", tag="counter")
            deadline = time.monotonic() + 30
            while s.run("cat count 2>/dev/null || echo 0").stdout.strip() == "0":
                self.assertLess(time.monotonic(), deadline, "the counter never started")
                time.sleep(0.05)
            self.assertEqual(s.state, "ready")
            j = s.pause()
            self.assertEqual(j["state"], "paused")
            self.assertIn("pausedAt", j)
            self.assertEqual(s.state, "paused")
            self.assertEqual(s.info()["pausedAt"], j["pausedAt"])
            with self.assertRaises(SandboxError) as cm:
                s.run("true")
            self.assertEqual(cm.exception.status, 409)
            self.assertIn("paused", str(cm.exception))
            with self.assertRaises(SandboxError) as cm:
                s.pause()
            self.assertEqual(cm.exception.status, 409)
            # Another key cannot resume it (nor see it).
            status, _, key = self.daemon.post("/admin/keys",
                                              body={"name": "sdk-other", "scopes": ["exec"]})
            self.assertEqual(status, 201, key)
            other = Sandbox(base_url=self.daemon.base_url, api_key=key["key"])
            with self.assertRaises(SandboxError) as cm:
                other.session(s.id).resume()
            self.assertEqual(cm.exception.status, 404)
            self.assertEqual(s.state, "paused")
            self.assertEqual(s.resume()["state"], "ready")
            with self.assertRaises(SandboxError) as cm:
                s.resume()
            self.assertEqual(cm.exception.status, 409)
            before = int(s.run("cat count").stdout)
            deadline = time.monotonic() + 30
            while int(s.run("cat count").stdout) <= before:
                self.assertLess(time.monotonic(), deadline, "the counter did not carry on")
                time.sleep(0.05)
            sid = s.id
        self.assertIsNone(self.sb.session(sid).state)

    def test_hibernate(self):
        if harness.driver() != "jail":
            self.skipTest("hibernation is the jail driver's (disk storage)")
        with self.sb.create_session(template="base", storage="disk") as s:
            s.write_file("kept.txt", "kept")
            s.start_process("sleep 600", tag="sl")
            j = s.pause(mode="hibernate")
            self.assertEqual((j["state"], j["pauseMode"], j["processesKept"]),
                             ("paused", "hibernate", False))
            self.assertIn("every process of the session was ended", j["note"])
            self.assertEqual(s.info()["pauseMode"], "hibernate")
            self.assertEqual(s.resume()["state"], "ready")
            self.assertEqual(s.read_file("kept.txt"), "kept")
            self.assertEqual([p for p in s.processes() if p["state"] == "running"], [])
            with self.assertRaises(SandboxError) as cm:
                s.pause(mode="deep")
            self.assertEqual(cm.exception.status, 400)

    def test_on_timeout_pause(self):
        s = self.sb.create_session(template="base", idle_timeout_s=1, on_timeout="pause")
        try:
            s.write_file("kept.txt", "kept")
            deadline = time.monotonic() + 30
            while s.state == "ready":
                self.assertLess(time.monotonic(), deadline, "the idle timeout never fired")
                time.sleep(0.1)
            self.assertEqual(s.state, "paused")
            self.assertEqual(s.info()["pausedBy"], "timeout")
            s.resume()
            self.assertEqual(s.read_file("kept.txt"), "kept")
        finally:
            s.destroy()
        with self.assertRaises(SandboxError) as cm:
            self.sb.create_session(template="base", on_timeout="never")
        self.assertEqual(cm.exception.status, 400)

    def test_bad_key(self):
        bad = Sandbox(base_url=self.daemon.base_url, api_key="sk_test_" + "0" * 32)
        with self.assertRaises(SandboxError) as cm:
            bad.templates()
        self.assertEqual(cm.exception.status, 401)


if __name__ == "__main__":
    unittest.main()
