"""Misbehaving agents through the real daemon: jail sandboxes whose agent is the fake agent
(tests/security/fake_agent.c), each template carrying a script of faults in its root
filesystem (/etc/fake-agent.script). Whatever the agent does, the daemon answers every request
with a clear JSON error and a truthful status, stays up for everyone else, leaves no sandbox
behind and exits cleanly (under ASan, so without a leak). The whole matrix runs in-process
against the guest client (agent_matrix.c); this is the part that goes through sessions, the
warm pool and the HTTP API.

Run with `tests/integration/run.sh tests/security`. FAKE_AGENT names the fake agent binary
(default: beside the daemon's build, tests/security/fake-agent)."""

import json
import os
import shutil
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "integration"))

import harness  # noqa: E402
import helpers_host as host  # noqa: E402
from helpers_exec import artifacts_dir, wait_until  # noqa: E402

BASE = "base"


def fake_agent():
    explicit = os.environ.get("FAKE_AGENT")
    if explicit:
        return explicit
    build = os.path.dirname(os.path.dirname(os.path.abspath(harness.sandboxd_path())))
    return os.path.join(build, "tests", "security", "fake-agent")


def make_templates(root, scripts):
    """A private artifacts directory with one template per script: the base template's root
    filesystem with the script in /etc/fake-agent.script."""
    src = os.path.join(artifacts_dir(), "templates", BASE)
    with open(os.path.join(src, "template.json"), encoding="utf-8") as f:
        manifest = json.load(f)
    for name, script in scripts.items():
        dest = os.path.join(root, "templates", name)
        shutil.copytree(os.path.join(src, "rootfs"), os.path.join(dest, "rootfs"),
                        symlinks=True)
        with open(os.path.join(dest, "rootfs", "etc", "fake-agent.script"), "w",
                  encoding="utf-8") as f:
            f.write(script + "\n")
        with open(os.path.join(dest, "template.json"), "w", encoding="utf-8") as f:
            json.dump({**manifest, "name": name}, f)


class FakeAgentCase(unittest.TestCase):
    """A daemon whose sandboxes run the fake agent; templates are named by their script."""

    SCRIPTS = {}
    ENV = {}

    @classmethod
    def setUpClass(cls):
        # The build makes the fake agent, make base-template the base template: neither
        # missing is a reason to skip.
        agent = fake_agent()
        if not os.access(agent, os.X_OK):
            raise AssertionError(f"the fake agent is not built at {agent} (ninja -C build)")
        if not os.path.isdir(os.path.join(artifacts_dir(), "templates", BASE, "rootfs")):
            raise AssertionError("the base template is not built (make base-template)")
        cls.art = tempfile.mkdtemp(prefix="fake-agent-artifacts-")
        cls.addClassCleanup(shutil.rmtree, cls.art, True)
        make_templates(cls.art, {"ok": "", **cls.SCRIPTS})
        env = {
            "AUTH_ENABLED": "false",
            "SANDBOX_DRIVER": "jail",
            "SANDBOX_NETWORK": "off",
            "SANDBOX_AGENT_BIN": agent,
            "FIRECRACKER_ARTIFACTS_DIR": cls.art,
            "SANDBOX_DEFAULT_TEMPLATE": "ok",
            "SANDBOX_WARM_POOL": "0",
            "SANDBOX_FIRST_REPLY_TIMEOUT_MS": "1500",
            "SANDBOX_FILE_OP_TIMEOUT_MS": "1500",
            "SANDBOX_PING_INTERVAL_MS": "300",
            "SANDBOX_PING_TIMEOUT_MS": "5000",
            "SANDBOX_SHUTDOWN_GRACE_MS": "500",
            "SANDBOX_POOL_RETRY_MS": "100",
            **cls.ENV,
        }
        cls.d = harness.Daemon(env=env, driver_name="jail")
        cls.d.start()
        cls.addClassCleanup(cls.stop_and_check)

    @classmethod
    def stop_and_check(cls):
        log = cls.d.stop()
        ids = host.sandbox_ids(log)
        left = [i for i in ids if host.cgroup_dirs(i)]
        if left:
            wait_until(lambda: not any(host.cgroup_dirs(i) for i in ids), 20,
                       what=f"the cgroups of sandboxes {left} gone")

    def assertHealthy(self):
        status, _, body = self.d.get("/health")
        self.assertEqual(status, 200, body)
        # Sessions of a well-behaved template still work beside the bad ones.
        status, _, body = self.d.post("/exec/", body={"template": "ok"})
        self.assertEqual(status, 201, body)
        sid = body["id"]
        status, _, body = self.d.post(f"/exec/{sid}/execute", body={"command": "true"})
        self.assertEqual(status, 200, body)
        self.assertEqual(body["exitCode"], 0, body)
        self.d.delete(f"/exec/{sid}")

    def assertJsonError(self, status, headers, body, statuses, fragment=None):
        self.assertIn(status, statuses, body)
        self.assertTrue((headers.get("Content-Type") or "").startswith("application/json"))
        self.assertIsInstance(body, dict, body)
        self.assertIsInstance(body.get("error"), str, body)
        self.assertTrue(body["error"].strip(), body)
        if fragment:
            self.assertIn(fragment, body["error"])

    def assertSandboxGone(self, status, headers, body):
        """The reply to a request that met a sandbox whose agent had hung up: either the
        request reached the connection first (its error is the connection's) or the
        session had already failed (it says its sandbox stopped)."""
        self.assertJsonError(status, headers, body, (502,))
        self.assertTrue("stopped" in body["error"] or "connection" in body["error"], body)

    def create(self, template):
        return self.d.post("/exec/", body={"template": template})


class FirstReplyTest(FakeAgentCase):
    """A new session's first request (resume) answered wrongly, or not at all."""

    CASES = {
        # fault: (statuses, a fragment of the error)
        # The agent's own error is still not the caller's doing: 502.
        "error": ((502,), "the fake agent refuses"),
        "malformed": ((502,), "malformed reply"),
        "notobject": ((502,), "malformed reply"),
        "silent": ((504,), "did not answer in time"),
        "eof": ((502,), "sandbox connection"),  # closed, or reset when it had unread data
        "oversize": ((502,), "oversize frame"),
        "overcredit": ((502,), "data for an operation that has none"),
        "wrongchannel": ((504,), "did not answer in time"),
    }
    SCRIPTS = {f"resume-{f}": f"resume reply {f}" for f in CASES}
    SCRIPTS["resume-duplicate"] = "resume reply duplicate"
    SCRIPTS["stale"] = "protocol 1"

    def test_every_bad_first_reply_fails_the_session_clearly(self):
        for fault, (statuses, fragment) in self.CASES.items():
            with self.subTest(fault=fault):
                status, headers, body = self.create(f"resume-{fault}")
                self.assertJsonError(status, headers, body, statuses, fragment)
                self.assertIn("did not start", body["error"])
        self.assertHealthy()
        status, _, body = self.d.get("/exec/")
        self.assertEqual(status, 200, body)
        self.assertEqual([s["id"] for s in body["sessions"]], [], body)

    def test_a_duplicate_reply_is_dropped(self):
        status, _, body = self.create("resume-duplicate")
        self.assertEqual(status, 201, body)
        status, _, out = self.d.post(f"/exec/{body['id']}/execute", body={"command": "true"})
        self.assertEqual(status, 200, out)
        self.assertEqual(out["exitCode"], 0, out)
        self.d.delete(f"/exec/{body['id']}")

    def test_an_agent_older_than_the_server_is_refused_naming_its_template(self):
        status, headers, body = self.create("stale")
        self.assertJsonError(status, headers, body, (502,), "template `stale`")
        self.assertIn("protocol 1", body["error"])
        self.assertIn("templates/build.sh stale", body["error"])
        self.assertHealthy()


class LaterRequestTest(FakeAgentCase):
    """Requests of a live session answered wrongly: the request fails, and the session either
    goes on (the connection is intact) or reports once that its sandbox stopped."""

    SCRIPTS = {
        "exec-midstream-eof": "exec midstream eof",
        "exec-midstream-oversize": "exec midstream oversize",
        "exec-reply-malformed": "exec#1 reply malformed",
        "exec-after-eof": "exec#1 after eof",
        "exec-after-duplicate": "exec after duplicate",
        "read-silent": "read reply silent",
        "read-error": "read reply error",
        "write-midstream-eof": "write midstream eof",
    }

    def session(self, template):
        status, _, body = self.create(template)
        self.assertEqual(status, 201, body)
        sid = body["id"]
        self.addCleanup(self.d.delete, f"/exec/{sid}")
        return sid

    def execute(self, sid):
        return self.d.post(f"/exec/{sid}/execute", body={"command": "true"})

    def test_a_connection_broken_midway_fails_the_command_and_then_the_session(self):
        for template in ("exec-midstream-eof", "exec-midstream-oversize"):
            with self.subTest(template=template):
                sid = self.session(template)
                status, headers, body = self.execute(sid)
                self.assertJsonError(status, headers, body, (502,))
                # The session says why once, then it is gone: a request after that
                # finds no session.
                status, headers, body = self.d.get(f"/exec/{sid}/files")
                if status != 404:
                    self.assertSandboxGone(status, headers, body)
                    status, _, body = self.d.get(f"/exec/{sid}/files")
                self.assertEqual(status, 404, body)
        self.assertHealthy()

    def test_a_malformed_result_fails_only_that_command(self):
        sid = self.session("exec-reply-malformed")
        status, headers, body = self.execute(sid)
        self.assertJsonError(status, headers, body, (502,), "malformed reply")
        status, _, body = self.execute(sid)
        self.assertEqual(status, 200, body)
        self.assertEqual(body["exitCode"], 0, body)

    def test_what_comes_after_a_result_does_not_undo_it(self):
        sid = self.session("exec-after-duplicate")
        for _ in range(3):
            status, _, body = self.execute(sid)
            self.assertEqual(status, 200, body)
        sid = self.session("exec-after-eof")
        status, _, body = self.execute(sid)
        self.assertEqual(status, 200, body)
        self.assertEqual(body["output"][0]["data"], "fake output\n", body)
        status, headers, body = self.d.get(f"/exec/{sid}/files")
        if status != 404:
            self.assertSandboxGone(status, headers, body)
        self.assertHealthy()

    def test_file_operations(self):
        sid = self.session("read-silent")
        status, headers, body = self.d.get(f"/exec/{sid}/read", query={"path": "x"})
        self.assertJsonError(status, headers, body, (504,), "did not answer in time")
        sid = self.session("read-error")
        status, headers, body = self.d.get(f"/exec/{sid}/read", query={"path": "x"})
        # A file operation's error passes on with the agent's code (ENOSPC here): that is
        # how a missing file is a 404 and a full workspace a 507.
        self.assertJsonError(status, headers, body, (507,), "the fake agent refuses")
        sid = self.session("write-midstream-eof")
        status, headers, body = self.d.post(f"/exec/{sid}/write",
                                            body={"path": "f", "content": "x" * 1000})
        self.assertJsonError(status, headers, body, (502,))
        self.assertHealthy()


class WarmPoolTest(FakeAgentCase):
    """The warm pool's first ping answered wrongly: the pooled sandboxes are thrown away and
    retried, the daemon stays up, and sessions of the template are still made (cold: their
    first request is resume, which the script leaves alone)."""

    FAULTS = ("error", "malformed", "notobject", "silent", "eof", "oversize", "overcredit")
    SCRIPTS = {f"pool-{f}": f"ping#1 reply {f}" for f in FAULTS}
    # Liveness pings are pings too: far apart, so that the script's ping#1 is the pool's.
    ENV = {"SANDBOX_WARM_POOL": "1", "SANDBOX_PING_INTERVAL_MS": "60000"}

    def test_bad_pool_pings_never_hurt_the_daemon(self):
        # Let every pool fail and retry a few times.
        def failures(fault):
            prefix = f"warm pool for template pool-{fault}:"
            return sum(e.get("msg", "").startswith(prefix) for e in self.d.logs())

        wait_until(lambda: all(failures(f) >= 2 for f in self.FAULTS), 60,
                   what="every bad template's warm pool failing twice")
        for fault in self.FAULTS:
            with self.subTest(fault=fault):
                status, _, body = self.create(f"pool-{fault}")
                self.assertEqual(status, 201, body)
                status, _, out = self.d.post(f"/exec/{body['id']}/execute",
                                             body={"command": "true"})
                self.assertEqual(status, 200, out)
                self.d.delete(f"/exec/{body['id']}")
        _, _, health = self.d.get("/health")
        self.assertLessEqual(health.get("warmPool", 0), 1, health)  # only the good template's
        self.assertHealthy()


if __name__ == "__main__":
    unittest.main()
