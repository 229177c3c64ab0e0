"""What the packaged service relies on: the service manager's notifications (READY=1,
WATCHDOG=1, STOPPING=1 on NOTIFY_SOCKET), the socket's group (SANDBOX_SOCKET_GROUP), the
installation's admin key (sandboxd --init-admin-key) and --defaults."""

import grp
import json
import os
import re
import shutil
import socket
import stat
import subprocess
import tempfile
import time
import unittest

import harness

WAIT = 30  # seconds: a deadline for what takes milliseconds, never a measure


def quiet_env(**extra):
    env = dict(os.environ, SANDBOX_WARM_POOL="0", SANDBOX_DEFAULT_TEMPLATE="base")
    env.update(extra)
    return env


class NotifyTest(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="sandboxd-notify-")
        self.addCleanup(shutil.rmtree, self.tmp, True)
        self.path = os.path.join(self.tmp, "notify")
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.addCleanup(self.sock.close)
        self.sock.bind(self.path)

    def messages_until(self, wanted, seen):
        """Reads notifications into `seen` until one holds the line `wanted`."""
        deadline = time.monotonic() + WAIT
        while time.monotonic() < deadline:
            self.sock.settimeout(max(0.01, deadline - time.monotonic()))
            try:
                msg = self.sock.recv(4096).decode()
            except socket.timeout:
                break
            seen.append(msg)
            if wanted in msg.split("\n"):
                return msg
        self.fail(f"no {wanted} within {WAIT}s; got {seen}")

    def test_ready_watchdog_stopping(self):
        d = harness.Daemon(env={"NOTIFY_SOCKET": self.path, "WATCHDOG_USEC": "200000",
                                "SANDBOX_WARM_POOL": "0"})
        d.start()
        self.addCleanup(d.stop, check=False)
        seen = []
        ready = self.messages_until("READY=1", seen)
        self.assertIn(f"STATUS=serving on http://127.0.0.1:{d.port}", ready)
        # Not sent before the daemon serves: the first message is READY.
        self.assertEqual(seen[0], ready)
        # Keep-alives keep coming from the loop (every 100 ms for a 200 ms watchdog).
        for _ in range(3):
            self.messages_until("WATCHDOG=1", seen)
        status, _, _ = d.get("/health")
        self.assertEqual(status, 200)
        d.proc.send_signal(15)
        self.messages_until("STOPPING=1", seen)
        d.proc.wait(WAIT)
        d.stop()

    def test_no_watchdog_unless_asked(self):
        """Without WATCHDOG_USEC: READY and STOPPING, and no keep-alive between them."""
        d = harness.Daemon(env={"NOTIFY_SOCKET": self.path, "SANDBOX_WARM_POOL": "0"})
        d.start()
        self.addCleanup(d.stop, check=False)
        seen = []
        self.messages_until("READY=1", seen)
        d.proc.send_signal(15)
        self.messages_until("STOPPING=1", seen)
        d.proc.wait(WAIT)
        d.stop()
        self.assertFalse([m for m in seen if "WATCHDOG=1" in m.split("\n")], seen)


class SocketGroupTest(unittest.TestCase):
    def test_socket_gets_the_group(self):
        group = grp.getgrgid(os.getgid() if os.getgid() != 0 else 65534)
        tmp = tempfile.mkdtemp(prefix="sandboxd-sock-")
        self.addCleanup(shutil.rmtree, tmp, True)
        path = os.path.join(tmp, "sandboxd.sock")
        d = harness.Daemon(env={"SANDBOX_SOCKET": path, "SANDBOX_SOCKET_GROUP": group.gr_name,
                                "SANDBOX_WARM_POOL": "0"})
        d.start()
        self.addCleanup(d.stop, check=False)
        st = os.stat(path)
        self.assertTrue(stat.S_ISSOCK(st.st_mode))
        self.assertEqual(stat.S_IMODE(st.st_mode), 0o660)
        self.assertEqual(st.st_gid, group.gr_gid)
        d.stop()

    def test_unknown_group_stops_the_start(self):
        tmp = tempfile.mkdtemp(prefix="sandboxd-sock-")
        self.addCleanup(shutil.rmtree, tmp, True)
        env = quiet_env(PORT="0", SANDBOX_STATE_DIR=os.path.join(tmp, "state"),
                        SANDBOX_RUN_DIR=os.path.join(tmp, "run"),
                        SANDBOX_SOCKET=os.path.join(tmp, "s.sock"),
                        SANDBOX_SOCKET_GROUP="no-such-group-here", SANDBOX_DRIVER="jail")
        p = subprocess.run([harness.sandboxd_path()], env=env, capture_output=True, text=True,
                           timeout=WAIT)
        self.assertNotEqual(p.returncode, 0)
        self.assertIn("SANDBOX_SOCKET_GROUP: no group `no-such-group-here`", p.stderr)


class InitAdminKeyTest(unittest.TestCase):
    def test_key_only_in_its_file(self):
        tmp = tempfile.mkdtemp(prefix="sandboxd-key-")
        self.addCleanup(shutil.rmtree, tmp, True)
        state = os.path.join(tmp, "state")
        env = quiet_env(SANDBOX_STATE_DIR=state)
        p = subprocess.run([harness.sandboxd_path(), "--init-admin-key"], env=env,
                           capture_output=True, text=True, timeout=WAIT)
        self.assertEqual(p.returncode, 0, p.stderr)
        path = os.path.join(state, "admin-key")
        self.assertIn(path, p.stdout)
        with open(path) as f:
            key = f.read().strip()
        self.assertRegex(key, r"^sk_test_[0-9a-f]{32}$")
        self.assertNotIn(key, p.stdout + p.stderr)
        self.assertEqual(stat.S_IMODE(os.stat(path).st_mode), 0o600)

        # Again: nothing new, the file as it was.
        p = subprocess.run([harness.sandboxd_path(), "--init-admin-key"], env=env,
                           capture_output=True, text=True, timeout=WAIT)
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertIn("has keys already", p.stdout)
        with open(path) as f:
            self.assertEqual(f.read().strip(), key)

        # The daemon on that state makes and logs no key, and takes this one.
        d = harness.Daemon(env={"SANDBOX_STATE_DIR": state, "SANDBOX_WARM_POOL": "0"})
        d.start()
        self.addCleanup(d.stop, check=False)
        self.assertIsNone(d.admin_key)
        status, _, body = d.get("/admin/keys", api_key=key)
        self.assertEqual(status, 200, body)
        self.assertEqual(len(body["keys"]), 1, body)
        log = d.stop()
        self.assertNotIn('"key":', log)

    def test_unwritable_key_file_leaves_no_key(self):
        """An admin-key file that exists already: an error, and no key nobody could read."""
        tmp = tempfile.mkdtemp(prefix="sandboxd-key-")
        self.addCleanup(shutil.rmtree, tmp, True)
        state = os.path.join(tmp, "state")
        os.mkdir(state, 0o700)
        with open(os.path.join(state, "admin-key"), "w") as f:
            f.write("someone else's\n")
        env = quiet_env(SANDBOX_STATE_DIR=state)
        p = subprocess.run([harness.sandboxd_path(), "--init-admin-key"], env=env,
                           capture_output=True, text=True, timeout=WAIT)
        self.assertNotEqual(p.returncode, 0)
        self.assertIn("admin-key", p.stderr)
        # No key was left behind: the next run tries again (and fails the same way).
        p = subprocess.run([harness.sandboxd_path(), "--init-admin-key"], env=env,
                           capture_output=True, text=True, timeout=WAIT)
        self.assertNotEqual(p.returncode, 0)
        self.assertNotIn("has keys already", p.stdout)


class StateDirClaimTest(unittest.TestCase):
    """One daemon to a state directory: a second is refused before it touches anything (its
    crash recovery would take the first one's live sandboxes for a dead daemon's), while
    --init-admin-key beside it and a restart after a SIGKILL (with sandboxes running) work."""

    def start(self, **env):
        d = harness.Daemon(env={"SANDBOX_WARM_POOL": "0", "SANDBOX_DEFAULT_TEMPLATE": "base",
                                **env})
        d.start()
        self.addCleanup(d.stop, check=False)
        return d

    def run_ok(self, d, sid, command):
        status, _, body = d.post(f"/exec/{sid}/execute", body={"command": command},
                                 timeout=WAIT * 2)
        self.assertEqual(status, 200, body)
        self.assertEqual(body["exitCode"], 0, body)
        return "".join(c["data"] for c in body["output"] if c["stream"] == "stdout")

    def test_second_daemon_is_refused(self):
        first = self.start()
        self.run_ok(first, "claimed", "echo kept > mark")
        tmp = tempfile.mkdtemp(prefix="sandboxd-second-")
        self.addCleanup(shutil.rmtree, tmp, True)
        env = quiet_env(PORT="0", HOST="127.0.0.1", SANDBOX_STATE_DIR=first.state_dir,
                        SANDBOX_RUN_DIR=os.path.join(tmp, "run"), SANDBOX_DRIVER="jail")
        second = subprocess.Popen([harness.sandboxd_path()], env=env, stdin=subprocess.DEVNULL,
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            _, err = second.communicate(timeout=WAIT)
        except subprocess.TimeoutExpired:
            second.kill()
            _, err = second.communicate()
            self.fail("a second sandboxd on the same state directory kept running:\n"
                      + err[-3000:])
        self.assertNotEqual(second.returncode, 0)
        self.assertIn(f"another sandboxd (pid {first.proc.pid}) uses the state directory "
                      f"`{first.state_dir}`", err)
        # It left the first one's sessions alone.
        self.assertEqual(self.run_ok(first, "claimed", "cat mark"), "kept\n")
        self.assertNotIn("recover", err.lower())

    def test_init_admin_key_beside_a_running_daemon(self):
        first = self.start()
        p = subprocess.run([harness.sandboxd_path(), "--init-admin-key"],
                           env=quiet_env(SANDBOX_STATE_DIR=first.state_dir),
                           capture_output=True, text=True, timeout=WAIT)
        # It does not open the database the daemon holds: the daemon made its key.
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertIn(f"a running sandboxd holds {first.state_dir}", p.stdout)
        self.assertIn("none was created", p.stdout)

    def test_restart_after_sigkill_with_sandboxes_running(self):
        """The claim dies with the daemon: no sandbox, spawner or helper inherits it."""
        first = self.start()
        self.run_ok(first, "survivor", "sleep 600 >/dev/null 2>&1 & echo started")
        first.kill()
        second = self.start(SANDBOX_STATE_DIR=first.state_dir, SANDBOX_RUN_DIR=first.run_dir)
        second.api_key = first.api_key
        self.assertEqual(self.run_ok(second, "after", "echo ok"), "ok\n")
        # The claimant's pid, then the address it serves at (where `sandbox keys` finds it).
        with open(os.path.join(first.state_dir, "sandboxd.lock")) as f:
            self.assertEqual(f.read().split("\n"),
                             [str(second.proc.pid), f"http://127.0.0.1:{second.port}", ""])


class DefaultsTest(unittest.TestCase):
    def test_defaults_are_what_an_empty_environment_gives(self):
        p = subprocess.run([harness.sandboxd_path(), "--defaults"], capture_output=True,
                           text=True, timeout=WAIT, env={"PATH": os.environ.get("PATH", "")})
        self.assertEqual(p.returncode, 0, p.stderr)
        lines = dict(line.split("=", 1) for line in p.stdout.splitlines())
        self.assertEqual(lines["PORT"], "3000")
        self.assertEqual(lines["SANDBOX_SUBID_OWNER"], "agent-sandbox")
        self.assertEqual(lines["SANDBOX_SOCKET"], "")
        p = subprocess.run([harness.sandboxd_path(), "--no-such-option"], capture_output=True,
                           text=True, timeout=WAIT)
        self.assertEqual(p.returncode, 2)
        self.assertIn("Usage: sandboxd", p.stderr)


if __name__ == "__main__":
    unittest.main()


# A text log line: time, level, then "module: message" and key=value fields.
TEXT_LINE = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z "
                       r"(TRACE|DEBUG|INFO |WARN |ERROR|FATAL) ")


def is_json(line):
    try:
        return isinstance(json.loads(line), dict)
    except ValueError:
        return False


class LogFormatTest(unittest.TestCase):
    """SANDBOX_LOG_FORMAT: text for a person at a terminal, JSON for journald and files."""

    def run_daemon(self, tty, **env):
        """stderr of a daemon started and stopped again."""
        d = harness.Daemon(env={"SANDBOX_WARM_POOL": "0", "SANDBOX_DEFAULT_TEMPLATE": "base",
                                **env}, tty=tty)
        d.start()
        self.addCleanup(d.stop, check=False)
        d.wait_stderr("listening on http://")
        return d, d.stop()  # its files, the log among them, go with it

    def test_text_on_a_terminal(self):
        d, out = self.run_daemon(tty=True)
        self.assertEqual([l for l in out.splitlines() if is_json(l)], [], out)
        listening = [l for l in out.splitlines() if TEXT_LINE.match(l)
                     and l.endswith(f" sandboxd: listening on http://127.0.0.1:{d.port}")]
        self.assertEqual(len(listening), 1, out)
        self.assertRegex(out, r"\n\S+Z INFO  sandboxd: all sandboxes removed; exiting\n")

    def test_json_on_a_terminal_when_asked(self):
        d, out = self.run_daemon(tty=True, SANDBOX_LOG_FORMAT="json")
        self.assertIn(f"listening on http://127.0.0.1:{d.port}",
                      [json.loads(l).get("msg") for l in out.splitlines() if is_json(l)])
        self.assertEqual([l for l in out.splitlines() if TEXT_LINE.match(l)], [])

    def test_text_without_a_terminal_when_asked(self):
        d, out = self.run_daemon(tty=False, SANDBOX_LOG_FORMAT="text")
        self.assertEqual([l for l in out.splitlines() if is_json(l)], [], out)
        # The first start's key, with its fields as key=value.
        line = next(l for l in out.splitlines() if " WARN  auth: no API key existed" in l)
        self.assertTrue(TEXT_LINE.match(line), line)
        path = os.path.join(d.state_dir, "admin-key")
        self.assertRegex(line, r" keyId=key_[0-9a-f]+ key=sk_test_[0-9a-f]{32} "
                               + re.escape(f"keyFile={path} url=http://127.0.0.1:{d.port}")
                               + "$")

    def test_json_without_a_terminal(self):
        d, out = self.run_daemon(tty=False)
        lines = [l for l in out.splitlines() if l.strip()]
        self.assertTrue(lines)
        self.assertEqual([l for l in lines if not is_json(l)], [], out)

    def test_bad_format_stops_the_start(self):
        p = subprocess.run([harness.sandboxd_path()], env=quiet_env(SANDBOX_LOG_FORMAT="pretty"),
                           capture_output=True, text=True, timeout=WAIT)
        self.assertNotEqual(p.returncode, 0)
        self.assertIn("SANDBOX_LOG_FORMAT: `pretty` is not one of auto, json, text", p.stderr)
