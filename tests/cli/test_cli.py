"""The `sandbox` CLI against a real daemon: every subcommand, exit codes, bytes, Ctrl-C."""

import hashlib
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
import unittest
from datetime import datetime

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "tests", "integration"))

import harness  # noqa: E402

CLI = os.environ.get("SANDBOX_CLI") or os.path.join(ROOT, "build", "cli", "sandbox")


class CliTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.daemon = harness.Daemon(env={"SANDBOX_DEFAULT_TEMPLATE": "base",
                                         "SANDBOX_WARM_POOL": "1"})
        cls.daemon.start()
        cls.env = dict(os.environ, SANDBOX_URL=cls.daemon.base_url,
                       SANDBOX_API_KEY=cls.daemon.admin_key,
                       SANDBOX_STATE_DIR=cls.daemon.state_dir)

    @classmethod
    def tearDownClass(cls):
        cls.daemon.stop()

    def cli(self, *args, input=None, check=None):
        p = subprocess.run([CLI, *args], env=self.env, input=input, capture_output=True,
                           timeout=60)
        if check is not None:
            self.assertEqual(p.returncode, check, p.stderr.decode())
        return p

    def key_file_env(self, text, mode):
        """An environment without SANDBOX_API_KEY whose key file holds `text` with `mode`."""
        home = tempfile.mkdtemp(prefix="sandbox-cli-home-")
        self.addCleanup(lambda: subprocess.run(["rm", "-rf", home]))
        os.makedirs(os.path.join(home, ".config", "agent-sandbox"), 0o700)
        path = os.path.join(home, ".config", "agent-sandbox", "api-key")
        with open(path, "w") as f:
            f.write(text)
        os.chmod(path, mode)
        env = dict(self.env, HOME=home)
        env.pop("SANDBOX_API_KEY")
        env.pop("XDG_CONFIG_HOME", None)
        return env, path

    def test_volumes(self):
        if harness.driver() != "jail":
            self.skipTest("volumes are mounted by the jail driver")
        self.assertEqual(self.cli("volumes", "create", "cli-vol", "16M", check=0).stdout,
                         b"cli-vol\n")
        listed = json.loads(self.cli("volumes", "ls", "--json", check=0).stdout)
        self.assertIn(("cli-vol", 16 << 20), [(v["name"], v["sizeBytes"]) for v in listed])
        self.assertIn(b"cli-vol", self.cli("volumes", "ls", check=0).stdout)
        sid = self.cli("create", "--volume", "cli-vol:/data", check=0).stdout.decode().strip()
        ro = self.cli("create", "--volume", "cli-vol:/mnt/v:ro", "--json", check=0)
        ro_session = json.loads(ro.stdout)
        self.assertEqual(ro_session["volumes"], [{"name": "cli-vol", "path": "/mnt/v",
                                                  "readOnly": True}])
        self.cli("exec", sid, "sh", "-c", "echo w > /data/f", check=0)
        self.assertEqual(self.cli("exec", sid, "--user", "root", "--", "id", "-u", check=0).stdout,
                         b"0\n")
        self.assertEqual(self.cli("exec", sid, "--", "id", "-u", check=0).stdout, b"1000\n")
        self.assertIn(b"user", self.cli("exec", sid, "--user", "nobody", "--", "true",
                                        check=1).stderr)
        self.assertEqual(self.cli("exec", ro_session["id"], "cat", "/mnt/v/f", check=0).stdout,
                         b"w\n")
        p = self.cli("volumes", "rm", "cli-vol", check=1)
        self.assertIn(b"mounted", p.stderr)
        for bad in ("cli-vol", "cli-vol:data", ":/data"):
            self.cli("create", "--volume", bad, check=2)
        self.cli("volumes", "create", "x", "lots", check=1)
        self.cli("rm", sid, ro_session["id"], check=0)
        for _ in range(100):  # released once the sandboxes are gone
            if self.cli("volumes", "rm", "cli-vol").returncode == 0:
                break
            time.sleep(0.1)
        self.assertNotIn("cli-vol", [v["name"] for v in json.loads(
            self.cli("volumes", "ls", "--json", check=0).stdout)])

    def test_snapshots(self):
        if harness.driver() != "jail":
            self.skipTest("a jail's snapshot is its disk's files (disk storage)")
        self.addCleanup(self.cli, "rm", "cs1", "cs2", "cs3", "cs4")
        self.addCleanup(self.cli, "snapshots", "rm", "cli-snap", "cli-snap2")
        data = bytes((i * 7) % 256 for i in range(256 * 400))
        self.cli("create", "cs1", "--storage", "disk", check=0)
        with tempfile.TemporaryDirectory() as d:
            src = os.path.join(d, "kept.bin")
            with open(src, "wb") as f:
                f.write(data)
            self.cli("cp", src, "cs1:kept.bin", check=0)
        out = self.cli("snapshot", "cs1", "cli-snap", check=0).stdout.decode()
        self.assertRegex(out, r"^cli-snap \(files kept, until \d{4}-\d\d-\d\dT[^)]+\)\n$")
        j = json.loads(self.cli("snapshot", "cs1", "cli-snap2", "--ttl", "1h", "--json",
                                check=0).stdout)
        self.assertEqual([j[k] for k in ("name", "template", "driver", "session",
                                         "processesKept")],
                         ["cli-snap2", "base", "jail", "cs1", False])
        self.assertGreater(j["sizeBytes"], 0)
        at = lambda s: datetime.fromisoformat(s.replace("Z", "+00:00"))
        self.assertAlmostEqual((at(j["expiresAt"]) - at(j["createdAt"])).total_seconds(), 3600,
                               delta=5)
        listed = {x["name"]: x for x in json.loads(self.cli("snapshots", "ls", "--json",
                                                            check=0).stdout)}
        self.assertEqual(listed["cli-snap"]["session"], "cs1")
        self.assertEqual(listed["cli-snap2"]["expiresAt"], j["expiresAt"])
        lines = self.cli("snapshots", check=0).stdout.decode().splitlines()
        self.assertEqual(lines[0].split(), ["NAME", "TEMPLATE", "SESSION", "SIZE", "KEPT",
                                            "EXPIRES"])
        row = next(l.split() for l in lines if l.startswith("cli-snap "))
        self.assertEqual(row[:3] + row[4:5], ["cli-snap", "base", "cs1", "files"])
        # The source runs on; what it writes now is not in the snapshot.
        self.cli("exec", "cs1", "--", "sh", "-c", "echo later > after.txt", check=0)

        s = json.loads(self.cli("create", "cs2", "--snapshot", "cli-snap", "--json",
                                check=0).stdout)
        self.assertEqual((s["id"], s["template"], s["snapshot"]), ("cs2", "base", "cli-snap"))
        self.assertEqual(self.cli("cat", "cs2", "kept.bin", check=0).stdout, data)
        self.cli("exec", "cs2", "--", "test", "-e", "after.txt", check=1)
        # Each session has its own copy: the source and a second session do not see the
        # first's writes.
        self.cli("exec", "cs2", "--", "sh", "-c", "echo changed > kept.bin && echo m > mine",
                 check=0)
        self.assertEqual(self.cli("cat", "cs1", "kept.bin", check=0).stdout, data)
        self.cli("exec", "cs1", "--", "test", "-e", "mine", check=1)
        self.assertEqual(self.cli("create", "cs3", "--snapshot", "cli-snap", check=0).stdout,
                         b"cs3\n")
        self.assertEqual(self.cli("cat", "cs3", "kept.bin", check=0).stdout, data)

        # Refusals: the server's (status 1, its status in the message), the CLI's own (2).
        for args, status in ((("snapshot", "cs1", "a/b"), b"400"),
                             (("snapshot", "cs1", "x" * 64), b"400"),
                             (("snapshot", "cs1", "cli-snap"), b"409"),
                             (("snapshot", "no-such-session", "cli-x"), b"404"),
                             (("create", "--snapshot", "no-such-snap"), b"404"),
                             (("create", "--snapshot", "cli-snap", "--template", "base"), b"400"),
                             (("create", "--snapshot", "cli-snap", "--memory", "256M"), b"400"),
                             (("create", "--snapshot", "cli-snap", "--disk", "64M"), b"400"),
                             (("create", "--snapshot", "cli-snap", "--storage", "disk"), b"400"),
                             (("create", "--snapshot", "cli-snap", "--volume", "v:/data"),
                              b"400")):
            p = self.cli(*args, check=1)
            self.assertIn(status, p.stderr, args)
        self.assertIn(b"usage: sandbox snapshot", self.cli("snapshot", "cs1", check=2).stdout)
        for bad in (["--ttl", "0"], ["--ttl", "x"], ["--ttl"], ["--bogus"], ["extra"]):
            self.cli("snapshot", "cs1", "cli-snap3", *bad, check=2)
        # In a jail the disk is what is kept: a session without one cannot be snapshotted.
        self.cli("create", "cs4", "--storage", "tmpfs", check=0)
        p = self.cli("snapshot", "cs4", "cli-snap4", check=1)
        self.assertIn(b"501", p.stderr)
        self.assertIn(b"disk", p.stderr)
        self.cli("snapshots", "bogus", check=1)
        self.assertIn(b"not a snapshot name", self.cli("snapshots", "rm", "a/b", check=1).stderr)

        # Another key neither sees nor uses nor deletes it.
        k = json.loads(self.cli("keys", "create", "cli-snap-other", "--scopes", "exec", "--json",
                                check=0).stdout)
        env = dict(self.env, SANDBOX_API_KEY=k["key"])
        other = lambda *a: subprocess.run([CLI, *a], env=env, capture_output=True, timeout=60)
        p = other("snapshots", "ls", "--json")
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertNotIn("cli-snap", [x["name"] for x in json.loads(p.stdout)])
        for args in (("snapshots", "rm", "cli-snap"), ("create", "--snapshot", "cli-snap")):
            p = other(*args)
            self.assertEqual(p.returncode, 1, args)
            self.assertIn(b"404", p.stderr, args)

        self.cli("snapshots", "rm", "cli-snap", "cli-snap2", check=0)
        self.assertEqual(self.cli("cat", "cs2", "mine", check=0).stdout, b"m\n")  # it goes on
        self.assertEqual([x for x in json.loads(self.cli("snapshots", "ls", "--json",
                                                         check=0).stdout)
                          if x["name"] in ("cli-snap", "cli-snap2")], [])
        self.assertIn(b"404", self.cli("snapshots", "rm", "cli-snap", check=1).stderr)
        self.assertIn(b"404", self.cli("create", "--snapshot", "cli-snap", check=1).stderr)
        self.cli("rm", "cs1", "cs2", "cs3", "cs4", check=0)

    def test_key_file(self):
        """Without --api-key or $SANDBOX_API_KEY the key comes from the per-user key file."""
        env, _ = self.key_file_env(self.daemon.admin_key + "\n", 0o600)
        p = subprocess.run([CLI, "ps", "--json"], env=env, capture_output=True, timeout=60)
        self.assertEqual(p.returncode, 0, p.stderr)
        # $XDG_CONFIG_HOME is looked in first.
        xdg_env, _ = self.key_file_env(self.daemon.admin_key + "\n", 0o600)
        env["XDG_CONFIG_HOME"] = os.path.join(xdg_env["HOME"], ".config")
        env["HOME"] = "/nonexistent"
        p = subprocess.run([CLI, "ps", "--json"], env=env, capture_output=True, timeout=60)
        self.assertEqual(p.returncode, 0, p.stderr)
        # The environment wins over the file.
        env, _ = self.key_file_env("sk_test_" + "0" * 32 + "\n", 0o600)
        p = subprocess.run([CLI, "ps", "--json"], env=dict(env, SANDBOX_API_KEY=self.daemon.admin_key),
                           capture_output=True, timeout=60)
        self.assertEqual(p.returncode, 0, p.stderr)
        p = subprocess.run([CLI, "ps", "--json"], env=env, capture_output=True, timeout=60)
        self.assertEqual(p.returncode, 1)
        self.assertIn(b"Invalid API key", p.stderr)

    def test_key_file_refused(self):
        """A key file others can read, or an empty one, is an error that says what to do."""
        env, path = self.key_file_env(self.daemon.admin_key + "\n", 0o640)
        p = subprocess.run([CLI, "ps"], env=env, capture_output=True, timeout=60)
        self.assertEqual(p.returncode, 1)
        self.assertIn(f"{path} is readable by others (mode 0640): chmod 600 it".encode(), p.stderr)
        env, path = self.key_file_env("\n", 0o600)
        p = subprocess.run([CLI, "ps"], env=env, capture_output=True, timeout=60)
        self.assertEqual(p.returncode, 1)
        self.assertIn(b"is empty", p.stderr)
        # --api-key needs no file, however it is.
        env, path = self.key_file_env("", 0o644)
        p = subprocess.run([CLI, "ps", "--api-key", self.daemon.admin_key, "--json"], env=env,
                           capture_output=True, timeout=60)
        self.assertEqual(p.returncode, 0, p.stderr)

    def test_run_exits_with_remote_code(self):
        p = self.cli("run", "--", "sh", "-c", "echo out; echo err >&2; exit 5")
        self.assertEqual(p.returncode, 5)
        self.assertEqual(p.stdout, b"out\n")
        self.assertEqual(p.stderr, b"err\n")
        # The sandbox is gone afterwards.
        p = self.cli("ps", "--json", check=0)
        self.assertEqual(p.stdout.strip(), b"[]")

    def test_exec_env_and_signal_exit(self):
        self.cli("exec", "--create", "c1", "--env", "FOO=bar", "--", "sh", "-c", "echo $FOO", check=0)
        p = self.cli("exec", "c1", "--", "sh", "-c", "kill -TERM $$")
        self.assertEqual(p.returncode, 128 + 15)
        self.cli("rm", "c1", check=0)

    def test_exec_refuses_an_unknown_session(self):
        """A mistyped name is an error, as for cat, not a new session; --create makes it."""
        want = (b"sandbox: no session cx1; sandbox create cx1, or sandbox exec --create cx1 "
                b"...\n")
        for mode in ((), ("-d",), ("-i",)):
            p = self.cli("exec", *mode, "cx1", "--", "true", input=b"")
            self.assertEqual((p.returncode, p.stderr), (1, want), mode)
            self.assertEqual(p.stdout, b"")
        self.assertIn(b"404", self.cli("cat", "cx1", "f", check=1).stderr)
        listed = json.loads(self.cli("ps", "--json", check=0).stdout)
        self.assertNotIn("cx1", [s["id"] for s in listed])
        # Another key's session does not exist for this one either.
        self.cli("create", "cx2", check=0)
        self.addCleanup(self.cli, "rm", "cx1", "cx2")
        k = json.loads(self.cli("keys", "create", "cli-exec-other", "--scopes", "exec",
                                "--json", check=0).stdout)
        other = dict(self.env, SANDBOX_API_KEY=k["key"])
        p = subprocess.run([CLI, "exec", "cx2", "--", "true"], env=other, capture_output=True,
                           timeout=60)
        self.assertEqual(p.returncode, 1)
        self.assertIn(b"no session cx2;", p.stderr)
        # A daemon that cannot be reached says so, not that the session is missing.
        p = self.cli("exec", "--url", "http://127.0.0.1:9", "cx2", "--", "true", check=1)
        self.assertNotIn(b"no session", p.stderr)
        # --create makes it (from --template), then it is an existing session.
        self.assertEqual(self.cli("exec", "--create", "cx1", "--template", "base", "--",
                                  "echo", "made", check=0).stdout, b"made\n")
        self.assertEqual(self.cli("exec", "cx1", "--", "echo", "again", check=0).stdout,
                         b"again\n")
        self.assertEqual(self.cli("exec", "cx2", "--", "echo", "mine", check=0).stdout,
                         b"mine\n")
        self.cli("rm", "cx1", "cx2", check=0)

    def test_cp_cat_ls_bytes_exact(self):
        data = bytes(range(256)) * 1000
        with tempfile.TemporaryDirectory() as d:
            src = os.path.join(d, "src")
            dst = os.path.join(d, "dst")
            with open(src, "wb") as f:
                f.write(data)
            self.cli("cp", src, "c2:dir/blob", check=0)
            self.cli("cp", "c2:dir/blob", dst, check=0)
            with open(dst, "rb") as f:
                self.assertEqual(hashlib.sha256(f.read()).digest(), hashlib.sha256(data).digest())
        p = self.cli("cat", "c2", "dir/blob", check=0)
        self.assertEqual(p.stdout, data)
        p = self.cli("ls", "c2", "-r", check=0)
        self.assertIn(b"dir/blob", p.stdout)
        p = self.cli("cat", "c2", "missing")
        self.assertEqual(p.returncode, 1)
        self.assertIn(b"404", p.stderr)
        self.cli("rm", "c2", check=0)
        p = self.cli("rm", "c2")
        self.assertEqual(p.returncode, 1)

    def test_templates_and_json(self):
        p = self.cli("templates", check=0)
        self.assertIn(b"base", p.stdout)
        p = self.cli("run", "--json", "--", "echo", "x", check=0)
        lines = [l for l in p.stdout.splitlines() if l]
        self.assertIn(b'"type":"start"', lines[0])
        self.assertIn(b'"type":"result"', lines[-1])

    def running(self, sid):
        """How many commands the daemon has running in session sid (0 when it has none)."""
        _, _, body = self.daemon.get("/exec/", timeout=30)
        return next((s["running"] for s in body["sessions"] if s["id"] == sid), 0)

    def test_ctrl_c_cancels_the_remote_command(self):
        # A command that would leave a file a minute in, were it not cancelled.
        proc = subprocess.Popen([CLI, "exec", "--create", "c3", "--", "sh", "-c",
                                 "sleep 60; touch /workspace/late"],
                                env=self.env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        self.addCleanup(proc.kill)
        harness.wait_until(lambda: self.running("c3") == 1, 60,
                           what="the command to run in session c3")
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=30)
        self.assertEqual(proc.returncode, 130, err)
        # Its processes are gone (so the file will never be made), and there is no file.
        harness.wait_until(
            lambda: b"touch /workspace/late" not in self.cli("exec", "c3", "--", "ps", "-o",
                                                              "args", check=0).stdout,
            30, interval=0.2, what="the command's processes to go after Ctrl-C")
        p = self.cli("exec", "c3", "--", "ls", "/workspace", check=0)
        self.assertNotIn(b"late", p.stdout)
        self.cli("rm", "c3", check=0)

    def test_bad_key_and_unreachable(self):
        env = dict(self.env, SANDBOX_API_KEY="sk_test_" + "0" * 32)
        p = subprocess.run([CLI, "ps"], env=env, capture_output=True, timeout=30)
        self.assertEqual(p.returncode, 1)
        self.assertIn(b"401", p.stderr)
        p = subprocess.run([CLI, "--url", "http://127.0.0.1:9", "ps"], env=self.env,
                           capture_output=True, timeout=30)
        self.assertEqual(p.returncode, 1)
        self.assertIn(b"cannot reach", p.stderr)

    def test_keys_cli_is_seen_at_once(self):
        p = self.cli("keys", "create", "cli-test", "--scopes", "exec", "--json", check=0)
        k = json.loads(p.stdout)
        env = dict(self.env, SANDBOX_API_KEY=k["key"])
        r = subprocess.run([CLI, "templates"], env=env, capture_output=True, timeout=30)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.cli("keys", "revoke", k["id"], check=0)
        r = subprocess.run([CLI, "templates"], env=env, capture_output=True, timeout=30)
        self.assertEqual(r.returncode, 1)
        self.assertIn(b"revoked", r.stderr)

    def test_arguments_after_double_dash_are_the_commands(self):
        p = self.cli("run", "--", "echo", "--json", check=0)
        self.assertEqual(p.stdout, b"--json\n")
        p = self.cli("run", "--", "echo", "-h", check=0)
        self.assertEqual(p.stdout, b"-h\n")
        p = self.cli("run", "--", "echo", "--help", "--url", "u", "--api-key", "k", check=0)
        self.assertEqual(p.stdout, b"--help --url u --api-key k\n")
        p = self.cli("exec", "--create", "c5", "--", "echo", "--json", "-h", check=0)
        self.assertEqual(p.stdout, b"--json -h\n")
        self.cli("rm", "c5", check=0)

    def test_keys_go_through_the_daemon_when_it_is_named(self):
        # A state directory with no database: only the HTTP API can answer.
        with tempfile.TemporaryDirectory() as d:
            env = dict(self.env, SANDBOX_STATE_DIR=d)
            run = lambda *a: subprocess.run([CLI, *a], env=env, capture_output=True,
                                            timeout=30)
            p = run("keys", "create", "over-http", "--scopes", "exec,metrics",
                    "--rate-limit", "50", "--expires", "1d", "--json")
            self.assertEqual(p.returncode, 0, p.stderr)
            k = json.loads(p.stdout)
            self.assertEqual(k["scopes"], ["exec", "metrics"])
            self.assertEqual(k["rateLimit"], 50)
            self.assertTrue(k["expiresAt"])
            self.assertTrue(k["key"])
            p = run("keys", "list")
            self.assertEqual(p.returncode, 0, p.stderr)
            self.assertIn(k["id"].encode(), p.stdout)
            self.assertIn(b"exec,metrics", p.stdout)
            p = run("keys", "rotate", k["id"], "--json")
            self.assertEqual(p.returncode, 0, p.stderr)
            new = json.loads(p.stdout)["key"]
            self.assertNotEqual(new, k["key"])
            r = subprocess.run([CLI, "templates"], env=dict(env, SANDBOX_API_KEY=new),
                               capture_output=True, timeout=30)
            self.assertEqual(r.returncode, 0, r.stderr)
            p = run("keys", "revoke", k["id"])
            self.assertEqual(p.returncode, 0, p.stderr)
            self.assertIn(b"Revoked", p.stdout)
            p = run("keys", "delete", k["id"], "--json")
            self.assertEqual(p.returncode, 0, p.stderr)
            self.assertTrue(json.loads(p.stdout)["success"])
            p = run("--url", self.daemon.base_url, "keys", "list", "--json")
            self.assertEqual(p.returncode, 0, p.stderr)
            self.assertNotIn(k["id"], [x["id"] for x in json.loads(p.stdout)["keys"]])
            self.assertEqual(os.listdir(d), [])

    def test_keys_go_through_the_daemon_that_holds_the_state_directory(self):
        # No URL and no key: the daemon holds the state directory, so the CLI goes through
        # its /admin/keys (at the address it noted in the lock file, with the directory's
        # admin-key), never opening the database beside it.
        env = {n: v for n, v in self.env.items() if n not in ("SANDBOX_URL", "SANDBOX_API_KEY")}
        env["HOME"] = tempfile.mkdtemp(prefix="sandbox-cli-home-")
        self.addCleanup(lambda: subprocess.run(["rm", "-rf", env["HOME"]]))
        env.pop("XDG_CONFIG_HOME", None)
        # A prefix the CLI would give its own keys: the daemon's prefix shows who made it.
        env["AUTH_KEY_PREFIX"] = "cliown_"
        run = lambda *a: subprocess.run([CLI, *a], env=env, capture_output=True, timeout=30)
        db = os.path.join(self.daemon.state_dir, "sandboxd.db")
        p = run("keys", "create", "via-daemon", "--scopes", "exec", "--json")
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertIn(b"a daemon uses the key store " + db.encode(), p.stderr)
        self.assertIn(f"going through the daemon at http://127.0.0.1:{self.daemon.port}".encode(),
                      p.stderr)
        k = json.loads(p.stdout)
        self.assertFalse(k["key"].startswith("cliown_"), k["key"])
        self.assertIn("usage", k)  # only the daemon's reply has it
        # In the daemon's list at once, and the key works.
        status, _, body = self.daemon.get("/admin/keys")
        self.assertEqual(status, 200)
        self.assertIn(k["id"], [x["id"] for x in body["keys"]])
        r = subprocess.run([CLI, "templates"], env=dict(self.env, SANDBOX_API_KEY=k["key"]),
                           capture_output=True, timeout=30)
        self.assertEqual(r.returncode, 0, r.stderr)
        p = run("keys", "list", "--json")
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertIn(k["id"], [x["id"] for x in json.loads(p.stdout)["keys"]])
        p = run("keys", "revoke", k["id"])
        self.assertEqual(p.returncode, 0, p.stderr)
        status, _, body = self.daemon.get("/admin/keys")
        self.assertEqual([x["enabled"] for x in body["keys"] if x["id"] == k["id"]], [False])
        r = subprocess.run([CLI, "templates"], env=dict(self.env, SANDBOX_API_KEY=k["key"]),
                           capture_output=True, timeout=30)
        self.assertEqual(r.returncode, 1)
        self.assertIn(b"revoked", r.stderr)
        # A key of the caller's own is used over the directory's; a bad one is the daemon's 401.
        p = run("keys", "list", "--api-key", "sk_test_nope")
        self.assertEqual(p.returncode, 1)
        self.assertIn(b"going through the daemon", p.stderr)

    def test_keys_without_a_daemon_open_the_store_and_claim_it(self):
        env = {n: v for n, v in self.env.items() if n not in ("SANDBOX_URL", "SANDBOX_API_KEY")}
        with tempfile.TemporaryDirectory() as d:
            # A state directory without a database is an error naming it, and stays empty.
            p = subprocess.run([CLI, "keys", "--state-dir", d, "list"], env=env,
                               capture_output=True, timeout=30)
            self.assertEqual(p.returncode, 1)
            self.assertIn(os.path.join(d, "sandboxd.db").encode(), p.stderr)
            self.assertIn(b"no key store", p.stderr)
            self.assertEqual(os.listdir(d), [])
            # Only create makes one (keys made before a daemon's first start), and says so.
            p = subprocess.run([CLI, "keys", "create", "early", "--scopes", "exec,admin",
                                "--json", "--state-dir", d], env=env, capture_output=True,
                               timeout=30)
            self.assertEqual(p.returncode, 0, p.stderr)
            self.assertIn(b"creating the key store " + os.path.join(d, "sandboxd.db").encode(),
                          p.stderr)
            early = json.loads(p.stdout)
            env_d = dict(env, SANDBOX_STATE_DIR=d)
            p = subprocess.run([CLI, "keys", "create", "other", "--json"], env=env_d,
                               capture_output=True, timeout=30)
            self.assertEqual(p.returncode, 0, p.stderr)
            other = json.loads(p.stdout)
            p = subprocess.run([CLI, "keys", "revoke", other["id"]], env=env_d,
                               capture_output=True, timeout=30)
            self.assertEqual(p.returncode, 0, p.stderr)
            p = subprocess.run([CLI, "keys", "list"], env=env_d, capture_output=True,
                               timeout=30)
            self.assertEqual(p.returncode, 0, p.stderr)
            self.assertIn(b"using the key store", p.stderr)
            self.assertIn(b"early", p.stdout)
            self.assertRegex(p.stdout.decode(), other["id"] + r".* revoked ")
            # The schema the CLI made is the daemon's: one started on it takes the keys
            # (no first key of its own), and the CLI then goes through it.
            daemon = harness.Daemon(env={"SANDBOX_STATE_DIR": d, "SANDBOX_WARM_POOL": "0"})
            daemon.start()
            try:
                status, _, body = daemon.get("/admin/keys", api_key=early["key"])
                self.assertEqual(status, 200, body)
                self.assertEqual(sorted(x["name"] for x in body["keys"]), ["early", "other"])
                p = subprocess.run([CLI, "keys", "list", "--api-key", early["key"]],
                                   env=env_d, capture_output=True, timeout=30)
                self.assertEqual(p.returncode, 0, p.stderr)
                self.assertIn(b"going through the daemon", p.stderr)
            finally:
                daemon.stop()

    def test_create_with_template_timeout_env_and_resources(self):
        p = self.cli("create", "c6", "--template", "base", "--idle-timeout", "10m",
                     "--env", "FOO=bar", "--env", "BAZ=q=x", "--cpu-quota", "50000",
                     "--disk", "64M", "--storage", "tmpfs", "--json", check=0)
        s = json.loads(p.stdout)
        self.assertEqual(s["id"], "c6")
        self.assertEqual(s["template"], "base")
        self.assertEqual(s["idleTimeout"], 600)
        p = self.cli("exec", "c6", "--", "sh", "-c", "echo $FOO $BAZ", check=0)
        self.assertEqual(p.stdout, b"bar q=x\n")
        # The workspace is the size asked for (df counts in 1K blocks).
        self.assertEqual(s["storage"], "tmpfs")
        p = self.cli("exec", "c6", "--", "df", "-k", "/workspace", check=0)
        self.assertIn(b" 65536 ", p.stdout.replace(b"\t", b" "), p.stdout)
        # A disk of its own instead (docs/storage.md), where the driver has them.
        p = self.cli("create", "c6d", "--template", "base", "--storage", "disk", "--disk",
                     "64M", "--json", check=0)
        if harness.driver() == "jail":
            s = json.loads(p.stdout)
            self.assertEqual((s["storage"], s["limits"]["diskBytes"]), ("disk", 64 << 20))
            self.assertLessEqual(s["disk"]["sizeBytes"], 64 << 20)
            self.cli("rm", "c6d", check=0)
        else:
            self.assertEqual(p.returncode, 1)
            self.assertIn(b"jail driver", p.stderr)
        p = self.cli("create", "--storage", "zfs")
        self.assertEqual(p.returncode, 2)
        self.assertIn(b"--storage takes disk or tmpfs", p.stderr)
        p = self.cli("create", "c6")
        self.assertEqual(p.returncode, 1)
        self.assertIn(b"409", p.stderr)
        p = self.cli("create", "--memory", "lots")
        self.assertEqual(p.returncode, 2)
        self.assertIn(b"--memory takes a size", p.stderr)
        p = self.cli("create", "--template", "nope")
        self.assertEqual(p.returncode, 1)
        self.assertIn(b"Unknown template", p.stderr)
        p = self.cli("create", check=0)
        made = p.stdout.decode().strip()
        self.assertTrue(made.startswith("sess_"), made)
        self.cli("rm", "c6", made, check=0)

    def test_ps_shows_idle_time_expiry_and_resources(self):
        self.cli("exec", "--create", "c7", "--", "true", check=0)
        self.cli("create", "c9", "--idle-timeout", "3600", check=0)
        p = self.cli("ps", check=0)
        lines = p.stdout.decode().splitlines()
        header = lines[0].split()
        for col in ("IDLE", "EXPIRES", "RESOURCES", "NET"):
            self.assertIn(col, header)
        row = next(l for l in lines if l.startswith("c7 "))
        self.assertRegex(row, r" ready +0 +\d+s +in \d+[mh]\d\d[sm] +- +(on|off) ")
        row = next(l for l in lines if l.startswith("c9 "))
        self.assertRegex(row, r" \d+s +in (59m\d\ds|1h00m) ")
        self.cli("rm", "c7", "c9", check=0)

    def test_ps_columns_fit_their_content_and_storage_is_told(self):
        """Every column as wide as its widest cell (a long id, long resources), and a disk's
        usage shown as the server measures it, not as the storage's name read as a number."""
        sid = "ps-" + "x" * 57
        disk = harness.driver() == "jail"  # a disk of its own is the jail's
        self.cli("create", sid, "--memory", "64M", "--pids", "100", "--disk", "64M",
                 "--storage", "disk" if disk else "tmpfs", check=0)
        self.addCleanup(self.cli, "rm", sid)
        self.cli("create", "ps2", check=0)
        self.addCleanup(self.cli, "rm", "ps2")
        self.cli("exec", sid, "--", "sh", "-c", "head -c 3000000 /dev/urandom > big", check=0)
        lines = self.cli("ps", check=0).stdout.decode().splitlines()
        header = lines[0]
        names = header.split()
        starts = [m.start() for m in re.finditer(r"\S+", header)]
        for line in lines[1:]:  # each cell starts under its column's name
            for col, at in enumerate(starts[1:], 1):
                self.assertEqual(line[at - 1], " ", (names[col], header, line))
                self.assertNotEqual(line[at], " ", (names[col], header, line))
        ends = starts[1:] + [None]
        row = lambda prefix: {n: l[a:e].strip() for l in lines if l.startswith(prefix)
                              for n, a, e in zip(names, starts, ends)}
        cells = row(sid + " ")
        self.assertEqual(cells["ID"], sid)
        self.assertEqual(cells["RESOURCES"], "mem=64M,disk=64M,pids=100")
        self.assertNotIn("storage", header + "\n".join(lines[1:]).replace("STORAGE", ""))
        self.assertEqual(names[-3:], ["NET", "STORAGE", "CREATED"])
        listed = {s["id"]: s for s in json.loads(self.cli("ps", "--json", check=0).stdout)}
        units = {"B": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}
        size = lambda t: float(t[:-1]) * units[t[-1]]
        if disk:
            m = re.fullmatch(r"disk:(\d+(?:\.\d)?[BKMGT])/(\d+(?:\.\d)?[BKMGT])",
                             cells["STORAGE"])
            self.assertIsNotNone(m, cells["STORAGE"])
            measured = listed[sid]["disk"]
            self.assertGreaterEqual(measured["usedBytes"], 3000000)
            self.assertAlmostEqual(size(m.group(1)), measured["usedBytes"],
                                   delta=measured["usedBytes"] * 0.05)
            self.assertAlmostEqual(size(m.group(2)), measured["sizeBytes"],
                                   delta=measured["sizeBytes"] * 0.05)
        else:
            self.assertEqual(cells["STORAGE"], "tmpfs:64M")
        self.assertRegex(row("ps2 ")["STORAGE"], r"^(disk|tmpfs):")
        self.cli("rm", sid, "ps2", check=0)

    def test_pause_and_resume(self):
        self.cli("create", "cp1", check=0)
        self.cli("exec", "-d", "cp1", "--tag", "counter", "--", "sh", "-c",
                 "i=0; while :; do i=$((i+1)); echo $i > c.tmp && mv c.tmp count; "
                 "sleep 0.01; done", check=0)
        deadline = time.monotonic() + 30
        while self.cli("exec", "cp1", "--", "sh", "-c", "cat count 2>/dev/null || echo 0",
                       check=0).stdout.strip() == b"0":
            self.assertLess(time.monotonic(), deadline, "the counter never started")
            time.sleep(0.05)
        self.assertEqual(self.cli("pause", "cp1", check=0).stdout, b"cp1 paused\n")
        row = next(l for l in self.cli("ps", check=0).stdout.decode().splitlines()
                   if l.startswith("cp1 "))
        self.assertRegex(row, r" paused +0 +\d+s +when resumed ")
        listed = json.loads(self.cli("ps", "--json", check=0).stdout)
        self.assertIn("pausedAt", next(x for x in listed if x["id"] == "cp1"))
        p = self.cli("exec", "cp1", "--", "true", check=1)
        self.assertIn(b"paused", p.stderr)
        p = self.cli("pause", "cp1", check=1)
        self.assertIn(b"paused already", p.stderr)
        j = json.loads(self.cli("resume", "cp1", "--json", check=0).stdout)
        self.assertEqual(j["state"], "ready")
        p = self.cli("resume", "cp1", check=1)
        self.assertIn(b"not paused", p.stderr)
        before = int(self.cli("exec", "cp1", "cat", "count", check=0).stdout)
        deadline = time.monotonic() + 30
        while int(self.cli("exec", "cp1", "cat", "count", check=0).stdout) <= before:
            self.assertLess(time.monotonic(), deadline, "the counter did not carry on")
            time.sleep(0.05)
        # Unknown sessions, bad options, no argument.
        p = self.cli("pause", "no-such-session", check=1)
        self.assertIn(b"no-such-session", p.stderr)
        self.cli("pause", "--bogus", "cp1", check=2)
        self.assertIn(b"usage: sandbox pause", self.cli("pause", check=2).stdout)
        self.cli("rm", "cp1", check=0)

    def test_pause_hibernate(self):
        if harness.driver() != "jail":
            self.skipTest("hibernation is the jail driver's (disk storage)")
        self.cli("create", "cp3", "--storage", "disk", check=0)
        self.cli("exec", "cp3", "--", "sh", "-c", "echo kept > f", check=0)
        self.cli("exec", "-d", "cp3", "--tag", "sl", "--", "sleep", "600", check=0)
        out = self.cli("pause", "--hibernate", "cp3", check=0).stdout
        self.assertEqual(out, b"cp3 paused (hibernated: its processes were ended, its files "
                              b"kept)\n")
        row = next(l for l in self.cli("ps", check=0).stdout.decode().splitlines()
                   if l.startswith("cp3 "))
        self.assertRegex(row, r" hibernated +0 +\d+s +when resumed ")
        self.assertEqual(self.cli("resume", "cp3", check=0).stdout, b"cp3 ready\n")
        self.assertEqual(self.cli("exec", "cp3", "cat", "f", check=0).stdout, b"kept\n")
        procs = json.loads(self.cli("procs", "cp3", "--json", check=0).stdout)
        self.assertEqual([p for p in procs if p.get("state") == "running"], [])
        self.cli("create", "cp4", "--storage", "tmpfs", check=0)
        p = self.cli("pause", "--hibernate", "cp4", check=1)
        self.assertIn(b"disk", p.stderr)
        self.cli("rm", "cp3", "cp4", check=0)

    def test_create_on_timeout_pause(self):
        j = json.loads(self.cli("create", "cp2", "--idle-timeout", "1", "--on-timeout", "pause",
                                "--json", check=0).stdout)
        self.assertEqual(j["onTimeout"], "pause")
        deadline = time.monotonic() + 30
        while True:
            s = next((x for x in json.loads(self.cli("ps", "--json", check=0).stdout)
                      if x["id"] == "cp2"), None)
            self.assertIsNotNone(s, self.daemon.stderr()[-3000:])
            if s["state"] != "ready":
                break
            self.assertLess(time.monotonic(), deadline, "the idle timeout never fired")
            time.sleep(0.1)
        self.assertEqual((s["state"], s["pausedBy"]), ("paused", "timeout"))
        self.cli("resume", "cp2", check=0)
        self.cli("rm", "cp2", check=0)
        p = self.cli("create", "--on-timeout", "sleep", check=2)
        self.assertIn(b"--on-timeout takes destroy or pause", p.stderr)

    def test_cp_directories_both_ways(self):
        with tempfile.TemporaryDirectory() as d:
            src = os.path.join(d, "src")
            os.makedirs(os.path.join(src, "a", "b"))
            files = {"top.txt": b"top\n", "a/bin": bytes(range(256)) * 64,
                     "a/b/deep.sh": b"#!/bin/sh\necho deep\n"}
            for rel, data in files.items():
                with open(os.path.join(src, rel), "wb") as f:
                    f.write(data)
            os.chmod(os.path.join(src, "a/b/deep.sh"), 0o755)
            self.cli("cp", src, "c8:tree", check=0)
            p = self.cli("ls", "c8", "tree", "-r", check=0)
            for rel in files:
                self.assertIn(rel.encode(), p.stdout)
            p = self.cli("exec", "c8", "--", "tree/a/b/deep.sh", check=0)
            self.assertEqual(p.stdout, b"deep\n")
            dst = os.path.join(d, "dst", "copy")
            self.cli("cp", "c8:tree", dst, check=0)
            for rel, data in files.items():
                with open(os.path.join(dst, rel), "rb") as f:
                    self.assertEqual(f.read(), data, rel)
            self.assertTrue(os.access(os.path.join(dst, "a/b/deep.sh"), os.X_OK))
            # The whole workspace, and a file still copies as a file.
            ws = os.path.join(d, "ws")
            self.cli("cp", "c8:", ws, check=0)
            with open(os.path.join(ws, "tree", "top.txt"), "rb") as f:
                self.assertEqual(f.read(), b"top\n")
            p = self.cli("cp", "c8:tree/top.txt", "-", check=0)
            self.assertEqual(p.stdout, b"top\n")
            p = self.cli("cp", "c8:tree", "-")
            self.assertEqual(p.returncode, 1)
        self.cli("rm", "c8", check=0)

    def test_stat_mkdir_mv_and_rm_of_paths(self):
        self.cli("mkdir", "fs1:a/b", "fs1:c", check=0)
        p = self.cli("stat", "fs1:a/b", check=0)
        self.assertEqual(p.stdout.split()[:2], [b"a/b", b"dir"])
        self.cli("exec", "fs1", "--", "sh", "-c", "echo hi > a/b/f", check=0)
        self.cli("mv", "fs1:a/b/f", "c/g", check=0)
        p = self.cli("stat", "fs1:c/g", "--json", check=0)
        self.assertEqual(json.loads(p.stdout)["size"], 3)
        p = self.cli("mv", "fs1:c/g", "fs2:x")
        self.assertEqual(p.returncode, 1)
        self.assertIn(b"within one session", p.stderr)
        p = self.cli("rm", "fs1:a")
        self.assertEqual(p.returncode, 1)
        self.assertIn(b"409", p.stderr)
        self.cli("rm", "-r", "fs1:a", check=0)
        p = self.cli("stat", "fs1:a")
        self.assertEqual(p.returncode, 1)
        self.assertIn(b"404", p.stderr)
        p = self.cli("stat", "fs1")
        self.assertEqual(p.returncode, 2)
        self.cli("rm", "fs1", check=0)

    def test_background_processes_exec_d_procs_attach_kill(self):
        p = self.cli("exec", "--create", "-d", "p1", "--tag", "cnt", "--", "sh", "-c",
                     "echo one; echo two >&2; exit 3", check=0)
        pid = int(p.stdout)
        p = self.cli("attach", "p1", "cnt")
        self.assertEqual((p.returncode, p.stdout, p.stderr), (3, b"one\n", b"two\n"))
        p = self.cli("attach", "p1", str(pid), "--replay", "4")
        self.assertEqual((p.returncode, p.stdout, p.stderr), (3, b"", b"two\n"))
        p = self.cli("attach", "p1", "cnt", "--json", check=3)
        events = [json.loads(line) for line in p.stdout.splitlines()]
        self.assertEqual([e["type"] for e in events], ["start", "stream", "stream", "result"])
        p = self.cli("exec", "-d", "p1", "--json", "--", "sleep", "60", check=0)
        sleeper = json.loads(p.stdout)
        self.assertEqual((sleeper["state"], sleeper["argv"]), ("running", ["sleep", "60"]))
        p = self.cli("procs", "p1", check=0)
        lines = p.stdout.decode().splitlines()
        self.assertEqual(lines[0].split(), ["PID", "TAG", "STATE", "EXIT", "COMMAND"])
        rows = {int(line.split()[0]): line.split() for line in lines[1:]}
        self.assertEqual(rows[pid][1:5], ["cnt", "exited", "3", "sh"])
        self.assertEqual(rows[sleeper["pid"]][1:], ["-", "running", "-", "sleep", "60"])
        p = self.cli("procs", "p1", "--json", check=0)
        self.assertEqual(sorted(x["pid"] for x in json.loads(p.stdout)), sorted(rows))
        self.cli("kill", "p1", str(sleeper["pid"]), "-s", "KILL", check=0)
        p = self.cli("attach", "p1", str(sleeper["pid"]))
        self.assertEqual(p.returncode, 128 + 9, p.stderr)
        p = self.cli("procs", "p1", check=0)
        self.assertIn("SIGKILL", p.stdout.decode())
        # Errors: a clear message and a failing status.
        for args in (("kill", "p1", "nosuch"), ("attach", "p1", "nosuch"),
                     ("kill", "p1", "cnt", "-s", "NOSUCH"), ("procs", "no-such-session"),
                     ("exec", "-d", "p1", "--tag", "bad/tag", "--", "true")):
            p = self.cli(*args)
            self.assertEqual(p.returncode, 1, args)
            self.assertIn(b"sandbox: ", p.stderr, args)
        for args in (("exec", "-d", "-i", "p1", "--", "true"), ("exec", "--tag", "x", "p1", "--",
                                                                "true"),
                     ("attach", "p1"), ("kill", "p1"), ("attach", "p1", "cnt", "--replay", "x")):
            self.assertNotEqual(self.cli(*args).returncode, 0, args)
        self.cli("rm", "p1", check=0)

    def test_exec_i_forwards_stdin_and_the_exit_status(self):
        p = self.cli("exec", "--create", "-i", "p2", "--", "cat", input=b"x\n", check=0)
        self.assertEqual(p.stdout, b"x\n")
        data = os.urandom(300_000)
        p = self.cli("exec", "-i", "p2", "--", "sha256sum", input=data, check=0)
        self.assertEqual(p.stdout.split()[0].decode(), hashlib.sha256(data).hexdigest())
        p = self.cli("exec", "-i", "p2", "--", "sh", "-c", "read n; echo err >&2; exit $n",
                     input=b"7\n")
        self.assertEqual((p.returncode, p.stderr), (7, b"err\n"))
        # A command that does not read its stdin ends all the same.
        p = self.cli("exec", "-i", "p2", "--", "true", input=b"ignored\n", check=0)
        self.cli("rm", "p2", check=0)

    def test_exec_i_sends_ctrl_c_to_the_process(self):
        proc = subprocess.Popen([CLI, "exec", "--create", "-i", "p3", "--", "sh", "-c",
                                 "trap 'echo got INT; exit 9' INT; echo ready; "
                                 "while :; do sleep 0.1; done"],
                                env=self.env, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE)
        self.addCleanup(proc.kill)
        self.assertEqual(proc.stdout.readline(), b"ready\n")
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=30)
        self.assertEqual((proc.returncode, out), (9, b"got INT\n"), err)
        self.cli("rm", "p3", check=0)

    def watch(self, *args):
        p = subprocess.Popen([CLI, "watch", *args], env=self.env, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE)
        self.addCleanup(lambda: (p.kill(), p.wait()))
        return p

    def test_watch_prints_changes_until_ctrl_c(self):
        self.cli("exec", "--create", "wt1", "--", "true", check=0)
        p = self.watch("wt1:.", "-r")
        self.assertIn(b"watching (1 directories)", p.stderr.readline())
        # A new directory is watched once the agent sees it: the pause keeps the order exact.
        self.cli("exec", "wt1", "--", "sh", "-c",
                 "mkdir d && sleep 0.5 && echo hi > d/f && mv d/f d/g", check=0)
        lines = []
        while b"rename" not in (lines[-1] if lines else b""):
            line = p.stdout.readline()
            self.assertTrue(line, lines)
            lines.append(line)
        self.assertIn(b"create  d/\n", lines)
        self.assertIn(b"create  d/f\n", lines)
        self.assertEqual(lines[-1], b"rename  d/f -> d/g\n")
        p.send_signal(signal.SIGINT)
        self.assertEqual(p.wait(timeout=30), 0)
        # --json: the server's lines, ready first; --timeout ends it.
        p = self.watch("wt1:d", "--json", "--timeout", "300")
        out, err = p.communicate(timeout=60)
        self.assertEqual(p.returncode, 0, err)
        events = [json.loads(line) for line in out.splitlines()]
        self.assertEqual(events[0]["type"], "ready")
        self.assertEqual(events[-1]["type"], "end")
        self.assertTrue(events[-1]["timedOut"])
        # Errors: a path outside the workspace, a bad target.
        p = self.cli("watch", "wt1:../etc")
        self.assertEqual(p.returncode, 1)
        self.assertIn(b"escapes", p.stderr)
        self.assertEqual(self.cli("watch", "wt1").returncode, 2)
        self.cli("rm", "wt1", check=0)

    def test_fork_refusals(self):
        # The forks themselves: tests/integration/test_fork.py (jail),
        # tests/e2e/test_qemu_lifecycle.py (qemu). A jail forks only a session with a disk.
        self.cli("create", "fk1", "--storage", "tmpfs", check=0)
        self.assertIn(b"usage: sandbox fork", self.cli("fork", check=2).stdout)
        for bad in (["--count", "0"], ["--count", "17"], ["--count", "x"], ["--bogus"]):
            self.cli("fork", "fk1", *bad, check=2)
        if harness.driver() == "jail":
            p = self.cli("fork", "fk1", check=1)
            self.assertIn(b"501", p.stderr)
            self.assertIn(b"disk", p.stderr)
        p = self.cli("fork", "no-such-session", check=1)
        self.assertIn(b"no-such-session", p.stderr)
        self.cli("rm", "fk1", check=0)

    def test_help_for_every_command(self):
        for cmd in ("run", "create", "exec", "cp", "ls", "cat", "ps", "rm", "templates",
                    "keys", "stat", "mkdir", "mv", "procs", "attach", "kill", "watch",
                    "shell", "pause", "resume", "fork", "snapshot", "snapshots"):
            p = self.cli(cmd, "--help", check=0)
            self.assertIn(b"usage: sandbox", p.stdout)


if __name__ == "__main__":
    unittest.main()
